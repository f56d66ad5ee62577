//! Completion callbacks: a C function and its user data, called once per
//! task on pkq's completion thread.

use std::ffi::c_void;

use crate::boundary::{call, get_mut, remember};
use crate::held::Held;
use crate::status::pkq_status;
use crate::ticket::{pkq_completion, pkq_ticket, report};

/// A completion callback: `user` as registered, the task's status (as
/// `pkq_wait` would return it; `pkq_last_error` gives its message on the
/// calling thread), its result, and the bytes an IO task's handler wrote
/// (null and 0 for none). `completion` and `output` are valid during the
/// call only. It must return; an exception thrown out of it (C++) aborts
/// the process.
pub type pkq_callback = Option<
    unsafe extern "C-unwind" fn(
        user: *mut c_void,
        status: pkq_status,
        completion: *const pkq_completion,
        output: *const u8,
        output_len: usize,
    ),
>;

/// The user data, sent to the completion thread.
struct User(*mut c_void);
// SAFETY: the caller of `pkq_ticket_on_complete` promises that `user` may
// be used from pkq's completion thread.
unsafe impl Send for User {}

/// Calls `callback(user, ...)` once with the ticket's result, when its task
/// is done, and empties the ticket. It runs on the runtime's completion
/// thread (one per lane; every callback of the lane on it, one after
/// another: hand long work elsewhere), also for a task that completed
/// before this call (the caller's `user` must outlive that call); at once
/// on the calling thread, before this returns, only where no completion
/// thread can take it: a ticket whose result was already taken, one whose
/// runtime was destroyed, or an OS that refused the thread. A stall or a
/// fault calls it with that error. Every callback registered before
/// `pkq_runtime_destroy` has run when that returns. A callback must not
/// wait for a task of its own runtime, nor destroy it. Null `callback`:
/// `PKQ_ERR_NULL`, the ticket kept. Thread-safe per ticket.
///
/// # Safety
/// `ticket` points to a `pkq_ticket`; `callback` is safe to call with
/// `user` from another thread, at any time until it was called.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_ticket_on_complete(
    ticket: *mut pkq_ticket,
    callback: pkq_callback,
    user: *mut c_void,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let ticket = unsafe { get_mut(ticket, "ticket") }?;
        let f = callback.ok_or(crate::boundary::Fail::Null("callback"))?;
        let user = User(user);
        ticket.take()?.on_output(move |result| {
            let user = user;
            let mut c = pkq_completion::default();
            let (result, output) = match result {
                Ok((done, output)) => (Ok(done), output),
                Err(e) => (Err(e), Vec::new()),
            };
            let status = match report(result, &mut c) {
                Ok(s) => s,
                Err(fail) => remember(fail),
            };
            let (p, n) = if output.is_empty() {
                (std::ptr::null(), 0)
            } else {
                (output.as_ptr(), output.len())
            };
            // An unwind out of the caller's function (a C++ exception) must
            // not reach pkq's completion thread: the process aborts.
            let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: a C function the caller registered for this, with
                // its user data (the contract); the pointers live through
                // the call.
                unsafe { f(user.0, status, &c, p, n) }
            }));
            if called.is_err() {
                std::process::abort();
            }
        });
        Ok(pkq_status::PKQ_OK)
    })
}
