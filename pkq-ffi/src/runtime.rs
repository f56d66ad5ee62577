//! Runtimes: the options a C caller builds one with, and its handle.

use std::time::Duration;

use pkq::{Runtime, WaitStrategy};

use crate::boundary::{Fail, call, get, get_mut};
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

/// How to build a runtime (`pkq::Builder`): fill it with
/// `pkq_options_init(&o, sizeof o)`, then set what differs. A field left 0
/// takes pkq's default. `size` is the struct's size as the caller was
/// compiled with: later versions add fields at the end only, read by the
/// library only where the caller's `size` covers them (the others take
/// their defaults), so a program built against an older header keeps
/// working with a newer library.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct pkq_options {
    /// `sizeof(pkq_options)` as the caller was compiled with.
    pub size: u32,
    /// The CUDA device's index.
    pub device: u32,
    /// Worker warps (`Builder::workers`).
    pub workers: u32,
    /// Poller warps per worker: 1, 2, 4 or 8 (`Builder::pollers`).
    pub pollers: u32,
    /// Submission rings, a power of two (`Builder::rings`).
    pub rings: u32,
    /// Slots of each ring, a power of two (`Builder::capacity`).
    pub capacity: u32,
    /// A `PKQ_WAIT_*` value.
    pub wait: u32,
    /// Milliseconds after which a worker silent while it has a task is
    /// stalled (`Builder::stall_after`).
    pub stall_after_ms: u32,
}

/// The first version's size (eight `uint32_t`): the least a caller may
/// state. It stays this when fields are added.
const V1_SIZE: usize = 32;
const _: () = assert!(std::mem::size_of::<pkq_options>() == V1_SIZE);

/// The defaults, `size` this version's.
fn defaults() -> pkq_options {
    pkq_options {
        size: std::mem::size_of::<pkq_options>() as u32,
        ..Default::default()
    }
}

/// Fills the `size` bytes at `options` with pkq's defaults: every field 0,
/// `size` set to the bytes written (`size`, or this version's size of the
/// struct if smaller). Pass `sizeof` of the caller's struct. Thread-safe.
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
        let n = size.min(std::mem::size_of::<pkq_options>());
        let mut d = defaults();
        d.size = n as u32;
        // SAFETY: `options` holds `size >= n` writable bytes (the contract);
        // `d` is a local `pkq_options` of at least `n` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping((&raw const d).cast::<u8>(), options.cast::<u8>(), n)
        };
        Ok(pkq_status::PKQ_OK)
    })
}

/// The options at `options` as this version reads them: the fields the
/// caller's `size` covers, the defaults for the rest.
///
/// # Safety
/// `options` is non-null and points to at least as many readable bytes as
/// its first field (`size`) says, and at least 4.
unsafe fn read_options(options: *const pkq_options) -> Result<pkq_options, Fail> {
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
    let mut o = defaults();
    // SAFETY: `size` readable bytes at `options` (the contract), of which
    // no more than `o` holds are copied.
    unsafe {
        std::ptr::copy_nonoverlapping(
            options.cast::<u8>(),
            (&raw mut o).cast::<u8>(),
            size.min(std::mem::size_of::<pkq_options>()),
        )
    };
    Ok(o)
}

/// A runtime: pkq's resident kernel on one device and its rings. Opaque;
/// made by `pkq_runtime_new`, freed by `pkq_runtime_destroy`.
pub struct pkq_runtime {
    rt: Runtime,
}

impl pkq_runtime {
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

/// The builder `o` describes.
fn builder(o: &pkq_options) -> Result<pkq::Builder, Fail> {
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
        PKQ_WAIT_SPIN => b.wait_strategy(WaitStrategy::Spin),
        PKQ_WAIT_SPIN_THEN_YIELD => b.wait_strategy(WaitStrategy::SpinThenYield),
        PKQ_WAIT_PARK => b.wait_strategy(WaitStrategy::Park),
        PKQ_WAIT_MONITOR => b.wait_strategy(WaitStrategy::Monitor),
        w => return Err(bad(format!("options.wait is {w}: not a PKQ_WAIT_* value"))),
    };
    Ok(b)
}

/// Builds a runtime from `options` (null: pkq's defaults) and starts its
/// kernel; `*out` is its handle on `PKQ_OK`, null otherwise. Thread-safe.
///
/// # Safety
/// `options` is null or points to a `pkq_options` whose readable bytes are
/// at least the `size` it states; `out` points to a writable pointer (or is
/// null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_runtime_new(
    options: *const pkq_options,
    out: *mut *mut pkq_runtime,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        *out = std::ptr::null_mut();
        let o = if options.is_null() {
            defaults()
        } else {
            // SAFETY: the caller's contract.
            unsafe { read_options(options) }?
        };
        let rt = builder(&o)?.build()?;
        *out = Box::into_raw(Box::new(pkq_runtime { rt }));
        Ok(pkq_status::PKQ_OK)
    })
}

/// Shuts the runtime down: new submits are refused (`PKQ_ERR_CLOSED`), every
/// submitted task runs, then the kernel exits. The handle stays valid for
/// waits and `pkq_runtime_destroy`. Thread-safe.
///
/// # Safety
/// `rt` is null or a live handle from `pkq_runtime_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_runtime_shutdown(rt: *const pkq_runtime) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        unsafe { get(rt, "rt") }?.rt.shutdown()?;
        Ok(pkq_status::PKQ_OK)
    })
}

/// Stops the runtime without running what is queued: tasks not yet
/// started end with `PKQ_ERR_CANCELLED`. The handle stays valid for waits
/// and `pkq_runtime_destroy`. Thread-safe.
///
/// # Safety
/// `rt` is null or a live handle from `pkq_runtime_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_runtime_cancel(rt: *const pkq_runtime) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        unsafe { get(rt, "rt") }?.rt.cancel()?;
        Ok(pkq_status::PKQ_OK)
    })
}

/// Frees the runtime, shutting it down first if it runs: it blocks until its
/// submitted tasks ran and the kernel exited (at most the stop timeout, 10
/// s by default, then the kernel is left to exit; what ended it is not
/// reported: call `pkq_runtime_shutdown` first to learn it). Tickets of its
/// tasks stay valid: their results are kept until they are taken or the
/// tickets released. Null does nothing. No other call of this handle may
/// overlap or follow it.
///
/// # Safety
/// `rt` is null or a live handle from `pkq_runtime_new`, used by nothing
/// else from now on.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_runtime_destroy(rt: *mut pkq_runtime) {
    if rt.is_null() {
        return;
    }
    // A panic in the drop is caught and reported as nothing: the call has
    // no status to return.
    call(|| {
        // SAFETY: from `Box::into_raw` in `pkq_runtime_new`, given back once
        // (the caller's contract).
        drop(unsafe { Box::from_raw(rt) });
        Ok(pkq_status::PKQ_OK)
    });
}
