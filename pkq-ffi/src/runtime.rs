//! Runtimes: their handle, built from options, one lane or several.

use std::sync::Arc;

use pkq::Runtime;

use crate::boundary::{Fail, call, get, get_mut};
use crate::options::{builder, pkq_options, read_options};
use crate::status::pkq_status;

/// A runtime: pkq's resident kernel on one device and its rings. Opaque;
/// made by `pkq_runtime_new`, freed by `pkq_runtime_destroy`.
pub struct pkq_runtime {
    /// Shared with the runtime's producers (`pkq_producer`), which borrow
    /// from it.
    pub(crate) rt: Arc<Runtime>,
}

/// Builds a runtime from `options` (null: pkq's defaults) and starts its
/// kernel; `*out` is its handle on `PKQ_OK`, null otherwise. Settings
/// that cannot work are `PKQ_ERR_INVALID_CONFIG` (an `options.size` under
/// 32 or ending inside a field included): most before the driver is
/// touched, those that depend on the device (workers that cannot all be
/// resident, state memory on a device without stream-ordered allocation)
/// after. A `module_path` or `module_kernel` that is not UTF-8 is
/// `PKQ_ERR_INVALID_ARGUMENT`, a module that cannot be read or loaded
/// `PKQ_ERR_INVALID_MODULE`; the rest are the build's
/// (`PKQ_ERR_NO_DRIVER`, `PKQ_ERR_KERNEL_TIMEOUT`, ...). Thread-safe.
///
/// # Safety
/// `options` is null or points to a `pkq_options` whose readable bytes are
/// at least the `size` it states, its pointers valid as documented; `out`
/// points to a writable pointer (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_runtime_new(
    options: *const pkq_options,
    out: *mut *mut pkq_runtime,
) -> pkq_status {
    // SAFETY: the caller's contract: one lane, its options at `options`.
    unsafe { pkq_runtime_new_lanes(&raw const options, 1, out) }
}

/// Builds a runtime of `count` lanes (at least 1), lane `i` as
/// `lanes[i]` says (null: pkq's defaults), and starts its kernels: lane 0
/// is the runtime's own (its device, partition and the rest), each further
/// lane gets its own workers, rings, wait strategy, width, IO areas and
/// module on the same device (`pkq::Builder::add_lane`; a lane naming a
/// partition is refused). Tasks go to lane 0 through `pkq_submit` and the
/// rest, to any lane through a producer (`pkq_producer_new`). A wide lane
/// (`PKQ_WIDTH_BLOCK`, `PKQ_WIDTH_GROUP`) beside the latency lane is the
/// usual use. `*out` as `pkq_runtime_new`. Thread-safe.
///
/// # Safety
/// `lanes` points to `count` readable pointers, each null or as
/// `pkq_runtime_new`'s `options`; `out` as there.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_runtime_new_lanes(
    lanes: *const *const pkq_options,
    count: usize,
    out: *mut *mut pkq_runtime,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        *out = std::ptr::null_mut();
        if lanes.is_null() {
            return Err(Fail::Null("lanes"));
        }
        if count == 0 {
            return Err(Fail::Status(
                pkq_status::PKQ_ERR_INVALID_CONFIG,
                "a runtime has at least one lane".into(),
            ));
        }
        // SAFETY: `count` readable pointers (the contract).
        let lanes = unsafe { std::slice::from_raw_parts(lanes, count) };
        let mut b: Option<pkq::Builder> = None;
        for &o in lanes {
            // SAFETY: null or a valid pkq_options (the contract).
            let o = unsafe { read_options(o) }?;
            // SAFETY: its pointers valid as documented (the contract).
            let lane = unsafe { builder(&o) }?;
            b = Some(match b {
                None => lane,
                Some(b) => b.add_lane(lane),
            });
        }
        let rt = b.expect("count >= 1").build()?;
        *out = Box::into_raw(Box::new(pkq_runtime { rt: Arc::new(rt) }));
        Ok(pkq_status::PKQ_OK)
    })
}

/// `PKQ_OK` while the runtime serves; otherwise what ended it (a device
/// fault, a stop, a stalled worker: `PKQ_ERR_STALLED`). Where the driver
/// reports a device fault that the runtime has not yet judged, it looks
/// again until it has, for about 20 ms at most per lane; otherwise it
/// returns at once. Thread-safe.
///
/// # Safety
/// `rt` is null or a live handle from `pkq_runtime_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_runtime_health(rt: *const pkq_runtime) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        unsafe { get(rt, "rt") }?.rt.health()?;
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
/// submitted tasks ran and the kernel exited (for each lane, at most the
/// stop timeout for its tasks and again for its kernel, 10 s each by
/// default, then the kernel is left to exit; what ended it is not
/// reported: call `pkq_runtime_shutdown` first to learn it), and every
/// completion callback of its tasks ran: none runs after this returns.
/// Tickets, batches and states of its tasks stay valid: their results are
/// kept until they are taken or released. Destroy its producers first: a
/// producer still alive keeps the runtime's memory (not its kernel, which
/// this stops) until it is destroyed, and callbacks of its lanes may then
/// run until then. Null does nothing. No other call of this handle may
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
        let rt = unsafe { Box::from_raw(rt) };
        // The last handle drops the runtime, which stops it; with a
        // producer alive, stop it here all the same.
        if let Err(rt) = Arc::try_unwrap(rt.rt) {
            let _ = rt.shutdown();
        }
        Ok(pkq_status::PKQ_OK)
    });
}
