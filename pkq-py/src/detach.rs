//! Calls made without the GIL, and the interpreter's exit: CPython before
//! 3.14 ends a thread that asks for the GIL again during finalization with
//! `pthread_exit`, whose forced unwind through pkq's Rust frames aborts the
//! process (a daemon thread whose wait returns while the interpreter exits).
//! [`detached`] hangs such a thread instead, as CPython 3.14 does itself.

use std::ffi::{CStr, c_int};
use std::sync::OnceLock;

use pyo3::prelude::*;

/// `py.detach(f)`: `f` runs without the GIL. A thread whose `f` returns
/// once the interpreter is being finalized, where it was not when `f`
/// began, hangs there, for good, instead of asking for the GIL again. The
/// thread that finalizes may go on: it holds the GIL when finalization
/// begins, so it finds it begun when it enters (a runtime dropped during
/// finalization), and no other thread can hold the GIL from then on. Left
/// open: finalization beginning between the look after `f` and the
/// request for the GIL.
pub(crate) fn detached<T, F>(py: Python<'_>, f: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    let finalizing_before = finalizing();
    py.detach(|| {
        let out = f();
        if !finalizing_before && finalizing() {
            loop {
                std::thread::park();
            }
        }
        out
    })
}

/// Whether the interpreter is being finalized: `Py_IsFinalizing` (3.13
/// on) or `_Py_IsFinalizing` (3.10 to 3.12), found at run time (the wheel
/// is built against the limited API, which has neither). Either reads one
/// word of the runtime's state atomically, without the GIL.
fn finalizing() -> bool {
    type IsFinalizing = unsafe extern "C" fn() -> c_int;
    static FOUND: OnceLock<Option<IsFinalizing>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let names: [&CStr; 2] = [c"Py_IsFinalizing", c"_Py_IsFinalizing"];
        names.into_iter().find_map(|name| {
            // SAFETY: a lookup in the process's global symbols by a
            // NUL-terminated name; no precondition.
            let at = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            // SAFETY: both functions take nothing and return an int, as the
            // type says (CPython's headers).
            (!at.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut libc::c_void, IsFinalizing>(at) })
        })
    });
    // SAFETY: CPython's own function, callable from any thread at any time.
    found.is_some_and(|is| unsafe { is() } != 0)
}
