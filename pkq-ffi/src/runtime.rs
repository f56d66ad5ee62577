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
/// `pkq_options_init`, then set what differs. A field left 0 takes pkq's
/// default. `size` is the struct's size as the caller knows it
/// (`sizeof(pkq_options)`, set by `pkq_options_init`): later versions add
/// fields at the end, and a runtime built from a smaller struct takes the
/// defaults of the fields it lacks.
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

/// The first version's size: the least a caller may pass.
const V1_SIZE: usize = std::mem::size_of::<pkq_options>();

/// Fills `options` with pkq's defaults: every field 0, `size` set.
/// Thread-safe.
///
/// # Safety
/// `options` points to a writable `pkq_options` (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_options_init(options: *mut pkq_options) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let o = unsafe { get_mut(options, "options") }?;
        *o = pkq_options {
            size: V1_SIZE as u32,
            ..Default::default()
        };
        Ok(pkq_status::PKQ_OK)
    })
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
    if (o.size as usize) < V1_SIZE {
        return Err(bad(format!(
            "options.size is {}: at least {V1_SIZE} (pkq_options_init sets it)",
            o.size
        )));
    }
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
/// `options` is null or points to a `pkq_options` of at least the size it
/// states; `out` points to a writable pointer (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_runtime_new(
    options: *const pkq_options,
    out: *mut *mut pkq_runtime,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        *out = std::ptr::null_mut();
        let defaults = pkq_options {
            size: V1_SIZE as u32,
            ..Default::default()
        };
        // SAFETY: the caller's contract (null: the defaults).
        let o = unsafe { options.as_ref() }.unwrap_or(&defaults);
        let rt = builder(o)?.build()?;
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

/// Frees the runtime (shutting it down first if it runs). Tickets of its
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
