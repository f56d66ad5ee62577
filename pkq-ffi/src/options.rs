//! The options a C caller builds a runtime (or a lane of one) with: a
//! struct that carries its own size, so later versions can add fields.

use std::ffi::{CStr, c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

use pkq::{Runtime, WaitStrategy, Width};

use crate::boundary::{Fail, call};
use crate::status::pkq_status;

/// The runtime's wait strategy (`pkq::Builder::wait_strategy`).
pub const PKQ_WAIT_DEFAULT: u32 = 0;
/// Spin until the task completes.
pub const PKQ_WAIT_SPIN: u32 = 1;
/// Spin, then yield the thread between polls.
pub const PKQ_WAIT_SPIN_THEN_YIELD: u32 = 2;
/// Sleep until pkq's completion thread wakes the waiter.
pub const PKQ_WAIT_PARK: u32 = 3;
/// Wait on the completion word with the CPU's monitor instructions where
/// there are any (else spin, then yield).
pub const PKQ_WAIT_MONITOR: u32 = 4;

/// Each task on one warp (`pkq::Width::Warp`, the default).
pub const PKQ_WIDTH_WARP: u32 = 0;
/// Each task on a block of `width_warps` warps (`pkq::Width::Block`).
pub const PKQ_WIDTH_BLOCK: u32 = 1;
/// Each task on a group of `width_blocks` blocks (0: one per SM) of
/// `width_warps` warps (`pkq::Width::Group`).
pub const PKQ_WIDTH_GROUP: u32 = 2;

/// `state_memory` for a runtime with none (0 takes pkq's default, 1 MiB).
pub const PKQ_STATE_MEMORY_NONE: u64 = u64::MAX;

/// How to build a runtime (`pkq::Builder`): fill it with
/// `pkq_options_init(&o, sizeof o)`, then set what differs. A field left 0
/// (or null) takes pkq's default. `size` is the struct's size as the
/// caller was compiled with: later versions add fields at the end only,
/// read by the library only where the caller's `size` covers them (the
/// others take their defaults), so a program built against an older header
/// keeps working with a newer library. The pointers are read during the
/// call they are passed to, never kept.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct pkq_options {
    /// `sizeof(pkq_options)` as the caller was compiled with.
    pub size: u32,
    /// The CUDA device's index (a lane's, after the first, is not read: a
    /// lane runs on its runtime's device).
    pub device: u32,
    /// Worker warps (`Builder::workers`): a power of two, at most 1024 and
    /// `capacity` times `rings` (0: 1).
    pub workers: u32,
    /// Poller warps per worker: 1, 2, 4 or 8 (`Builder::pollers`; 0: 8 for
    /// a single worker, 1 for more).
    pub pollers: u32,
    /// Submission rings, a power of two, at most `workers`
    /// (`Builder::rings`; 0: 1).
    pub rings: u32,
    /// Slots of each ring, a power of two up to 2^20 (`Builder::capacity`;
    /// 0: 1024).
    pub capacity: u32,
    /// A `PKQ_WAIT_*` value.
    pub wait: u32,
    /// Milliseconds after which a worker silent while it has a task is
    /// stalled (`Builder::stall_after`; at least 10; 0: 1000).
    pub stall_after_ms: u32,
    /// Input and output areas of every slot, in bytes, for IO tasks
    /// (`Builder::io`; at most 65536 each; 0 and 0: none).
    pub io_input: u32,
    pub io_output: u32,
    /// A `PKQ_WIDTH_*` value: how wide each task runs (`Builder::width`).
    pub width: u32,
    /// Warps of each block of a `PKQ_WIDTH_BLOCK` or `PKQ_WIDTH_GROUP`
    /// lane (1 to 8; 0: 8).
    pub width_warps: u32,
    /// Blocks of a `PKQ_WIDTH_GROUP` lane (0: one per SM).
    pub width_blocks: u32,
    /// Run the kernel on this many SMs only (`Builder::sm_partition`; 0:
    /// all of them).
    pub sm_partition: u32,
    /// Device memory for states in bytes (`Builder::state_memory`; 0: the
    /// default, `PKQ_STATE_MEMORY_NONE`: none).
    pub state_memory: u64,
    /// A device module of your own (fatbin, cubin or PTX) in memory,
    /// `module_len` bytes, served instead of pkq's kernel
    /// (`Builder::module`), with `module_kernel` naming its kernel. Copied
    /// by the call.
    pub module_image: *const c_void,
    pub module_len: usize,
    /// Or the path of a module file (when `module_image` is null), read by
    /// the call. NUL-terminated.
    pub module_path: *const c_char,
    /// The kernel of the module (NUL-terminated); required with a module.
    pub module_kernel: *const c_char,
}

/// The first version's size (eight `uint32_t`): the least a caller may
/// state. It stays this when fields are added.
pub(crate) const V1_SIZE: usize = 32;
/// Where the first 8-byte field begins, and this version's size.
const STATE_MEMORY_AT: usize = std::mem::offset_of!(pkq_options, state_memory);
const PAST: usize = std::mem::size_of::<pkq_options>();

impl Default for pkq_options {
    fn default() -> Self {
        Self {
            size: std::mem::size_of::<Self>() as u32,
            device: 0,
            workers: 0,
            pollers: 0,
            rings: 0,
            capacity: 0,
            wait: PKQ_WAIT_DEFAULT,
            stall_after_ms: 0,
            io_input: 0,
            io_output: 0,
            width: PKQ_WIDTH_WARP,
            width_warps: 0,
            width_blocks: 0,
            sm_partition: 0,
            state_memory: 0,
            module_image: std::ptr::null(),
            module_len: 0,
            module_path: std::ptr::null(),
            module_kernel: std::ptr::null(),
        }
    }
}

/// A size that ends inside a field is no version's: refused rather than
/// read or write half a field (the 4-byte fields end on multiples of 4, the
/// 8-byte ones from `state_memory` on multiples of 8).
fn ends_inside_a_field(size: usize) -> bool {
    !size.is_multiple_of(4) || (size > STATE_MEMORY_AT && size < PAST && !size.is_multiple_of(8))
}

/// Fills the `size` bytes at `options` with pkq's defaults: every field 0
/// or null, `size` set to the bytes written (`size`, or this version's size
/// of the struct if smaller). Pass `sizeof` of the caller's struct; a size
/// under 32 bytes, or one that ends inside a field (no version's), is
/// `PKQ_ERR_INVALID_ARGUMENT`, nothing written. Thread-safe.
///
/// # Safety
/// `options` points to `size` writable bytes (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_options_init(options: *mut pkq_options, size: usize) -> pkq_status {
    call(|| {
        if options.is_null() {
            return Err(Fail::Null("options"));
        }
        if size < V1_SIZE {
            return Err(Fail::Status(
                pkq_status::PKQ_ERR_INVALID_ARGUMENT,
                format!("size is {size}: a pkq_options has at least {V1_SIZE} bytes"),
            ));
        }
        if ends_inside_a_field(size) {
            return Err(Fail::Status(
                pkq_status::PKQ_ERR_INVALID_ARGUMENT,
                format!("size is {size}: no version of pkq_options has that size"),
            ));
        }
        let n = size.min(std::mem::size_of::<pkq_options>());
        let d = pkq_options {
            size: n as u32,
            ..Default::default()
        };
        // SAFETY: `options` holds `size >= n` writable bytes (the contract);
        // `d` is a local `pkq_options` of at least `n` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping((&raw const d).cast::<u8>(), options.cast::<u8>(), n)
        };
        Ok(pkq_status::PKQ_OK)
    })
}

/// The options at `options` as this version reads them: the fields the
/// caller's `size` covers, the defaults for the rest (null: every default).
///
/// # Safety
/// `options` is null, or points to at least as many readable bytes as its
/// first field (`size`) says, and at least 4.
pub(crate) unsafe fn read_options(options: *const pkq_options) -> Result<pkq_options, Fail> {
    if options.is_null() {
        return Ok(pkq_options::default());
    }
    // SAFETY: at least the `size` field is readable (the contract).
    let size = unsafe { options.cast::<u32>().read_unaligned() } as usize;
    if size < V1_SIZE {
        return Err(Fail::Status(
            pkq_status::PKQ_ERR_INVALID_CONFIG,
            format!(
                "options.size is {size}: at least {V1_SIZE} (pkq_options_init(&o, sizeof o) sets it)"
            ),
        ));
    }
    if ends_inside_a_field(size) {
        return Err(Fail::Status(
            pkq_status::PKQ_ERR_INVALID_CONFIG,
            format!("options.size is {size}: no version of pkq_options has that size"),
        ));
    }
    let mut o = pkq_options::default();
    let n = size.min(PAST);
    // SAFETY: `size` readable bytes at `options` (the contract), of which
    // no more than `o` holds are copied.
    unsafe { std::ptr::copy_nonoverlapping(options.cast::<u8>(), (&raw mut o).cast::<u8>(), n) };
    Ok(o)
}

/// A NUL-terminated string argument, or `None` for null.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
unsafe fn text(p: *const c_char, what: &str) -> Result<Option<String>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(|s| Some(s.to_string())).map_err(|_| {
        Fail::Status(
            pkq_status::PKQ_ERR_INVALID_ARGUMENT,
            format!("{what} is not UTF-8"),
        )
    })
}

/// The builder `o` describes.
///
/// # Safety
/// `o`'s pointers are null or valid as its documentation says.
pub(crate) unsafe fn builder(o: &pkq_options) -> Result<pkq::Builder, Fail> {
    let bad = |why: String| Fail::Status(pkq_status::PKQ_ERR_INVALID_CONFIG, why);
    let mut b = Runtime::builder().device(o.device as usize);
    if o.workers != 0 {
        b = b.workers(o.workers as usize);
    }
    if o.pollers != 0 {
        b = b.pollers(o.pollers);
    }
    if o.rings != 0 {
        b = b.rings(o.rings as usize);
    }
    if o.capacity != 0 {
        b = b.capacity(o.capacity as usize);
    }
    if o.stall_after_ms != 0 {
        b = b.stall_after(Duration::from_millis(o.stall_after_ms.into()));
    }
    b = match o.wait {
        PKQ_WAIT_DEFAULT => b,
        w => b.wait_strategy(wait_strategy(w)?),
    };
    if o.io_input != 0 || o.io_output != 0 {
        b = b.io(o.io_input as usize, o.io_output as usize);
    }
    let warps = if o.width_warps == 0 { 8 } else { o.width_warps };
    b = match o.width {
        PKQ_WIDTH_WARP => b,
        PKQ_WIDTH_BLOCK => b.width(Width::Block { warps }),
        PKQ_WIDTH_GROUP => b.width(Width::Group {
            blocks: o.width_blocks,
            warps,
        }),
        w => {
            return Err(bad(format!(
                "options.width is {w}: not a PKQ_WIDTH_* value"
            )));
        }
    };
    if o.sm_partition != 0 {
        b = b.sm_partition(o.sm_partition as usize);
    }
    match o.state_memory {
        0 => {}
        PKQ_STATE_MEMORY_NONE => b = b.state_memory(0),
        bytes => {
            let bytes = usize::try_from(bytes)
                .map_err(|_| bad(format!("options.state_memory is {bytes}: too large")))?;
            b = b.state_memory(bytes);
        }
    }
    // SAFETY: `o`'s pointers are null or NUL-terminated strings (the
    // caller's contract).
    let kernel = unsafe { text(o.module_kernel, "options.module_kernel") }?;
    // SAFETY: as above.
    let path = unsafe { text(o.module_path, "options.module_path") }?;
    let image: Option<Arc<[u8]>> = if !o.module_image.is_null() {
        // SAFETY: `module_len` readable bytes at `module_image` (the
        // caller's contract), copied here.
        Some(
            unsafe { std::slice::from_raw_parts(o.module_image.cast::<u8>(), o.module_len) }.into(),
        )
    } else if let Some(path) = path {
        let bytes = std::fs::read(&path).map_err(|e| {
            Fail::Pkq(pkq::Error::InvalidModule(format!(
                "options.module_path {path}: {e}"
            )))
        })?;
        Some(bytes.into())
    } else {
        None
    };
    match (image, kernel) {
        (Some(image), Some(kernel)) => b = b.module(image, &kernel),
        (Some(_), None) => {
            return Err(bad(
                "a module without options.module_kernel: name its kernel".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(bad(
                "options.module_kernel without a module (module_image or module_path)".into(),
            ));
        }
        (None, None) => {}
    }
    Ok(b)
}

/// The strategy a `PKQ_WAIT_*` value other than `PKQ_WAIT_DEFAULT` names.
pub(crate) fn wait_strategy(w: u32) -> Result<WaitStrategy, Fail> {
    Ok(match w {
        PKQ_WAIT_SPIN => WaitStrategy::Spin,
        PKQ_WAIT_SPIN_THEN_YIELD => WaitStrategy::SpinThenYield,
        PKQ_WAIT_PARK => WaitStrategy::Park,
        PKQ_WAIT_MONITOR => WaitStrategy::Monitor,
        w => {
            return Err(Fail::Status(
                pkq_status::PKQ_ERR_INVALID_CONFIG,
                format!("wait strategy {w}: not a PKQ_WAIT_* value"),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_smaller_callers_struct_reads_the_rest_as_defaults() {
        let mut o = pkq_options {
            workers: 4,
            io_input: 64,
            ..Default::default()
        };
        o.size = V1_SIZE as u32;
        // SAFETY: a whole `pkq_options` is readable.
        let read = unsafe { read_options(&o) }.ok().unwrap();
        assert_eq!(read.workers, 4);
        assert_eq!(read.io_input, 0, "past the caller's size: the default");
        // SAFETY: null is allowed.
        assert_eq!(
            unsafe { read_options(std::ptr::null()) }
                .ok()
                .unwrap()
                .workers,
            0
        );
    }

    #[test]
    fn bad_widths_modules_and_strategies_are_refused() {
        let refused = |o: pkq_options| {
            // SAFETY: no pointers, or valid C strings.
            match unsafe { builder(&o) } {
                Err(Fail::Status(s, _)) => s,
                Err(Fail::Pkq(e)) => crate::status::pkq_status::of(&e),
                _ => pkq_status::PKQ_OK,
            }
        };
        let err = pkq_status::PKQ_ERR_INVALID_CONFIG;
        assert_eq!(
            refused(pkq_options {
                width: 9,
                ..Default::default()
            }),
            err
        );
        assert_eq!(
            refused(pkq_options {
                wait: 9,
                ..Default::default()
            }),
            err
        );
        let kernel = c"k";
        assert_eq!(
            refused(pkq_options {
                module_kernel: kernel.as_ptr(),
                ..Default::default()
            }),
            err
        );
        let image = [0u8; 4];
        assert_eq!(
            refused(pkq_options {
                module_image: image.as_ptr().cast(),
                module_len: 4,
                ..Default::default()
            }),
            err
        );
        let path = c"/nonexistent/module.fatbin";
        assert_eq!(
            refused(pkq_options {
                module_path: path.as_ptr(),
                module_kernel: kernel.as_ptr(),
                ..Default::default()
            }),
            pkq_status::PKQ_ERR_INVALID_MODULE
        );
    }
}
