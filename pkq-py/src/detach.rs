//! Calls made without the GIL, and the interpreter's exit: CPython before
//! 3.14 ends a thread that asks for the GIL again during finalization with
//! `pthread_exit`, whose forced unwind through pkq's Rust frames aborts the
//! process (a daemon thread whose call returns while the interpreter
//! exits, or returned just before and waits for the GIL as finalization
//! begins). [`detached`] keeps such threads out: once the exit began, a
//! thread whose call returns waits, without asking for the GIL, until
//! finalization begins (then it hangs there for good, as CPython 3.14
//! leaves such threads itself) or until [`EXIT_GRACE`] passed without it
//! (an atexit function that runs after pkq's may be waiting for this very
//! thread: it then asks for the GIL and goes on).
//!
//! Left open: a thread still waiting for the GIL when finalization begins
//! (one let through after the grace, with an exit held up longer, or one
//! that asked before the exit began while another thread held the GIL in
//! C code past [`wait_for_askers`]' bound), and Python code that pkq calls
//! under its own frames (an `os.PathLike`'s `__fspath__`, an asyncio
//! loop's `create_future`, NumPy's first import), which a daemon thread
//! may be running as finalization begins.
//!
//! Words: `EXITING`, set by [`exit_begins`] (the package's atexit
//! function, which runs before finalization begins, on the thread that
//! finalizes: `EXIT_THREAD`, the latest caller); `ASKING`, the threads
//! whose call returned and that are asking for the GIL or about to, each
//! adding 1 before it looks at `EXITING` and taking it back once it holds
//! the GIL again. All sequentially consistent: a thread that finds
//! `EXITING` clear is counted by the time [`wait_for_askers`] looks at
//! `ASKING`, which lets it take the GIL and go before finalization
//! begins.

use std::ffi::{CStr, c_int};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Set when the interpreter's exit begins ([`exit_begins`]).
static EXITING: AtomicBool = AtomicBool::new(false);
/// The thread that runs the exit (it may call pkq on: it finalizes): the
/// latest caller of [`exit_begins`].
static EXIT_THREAD: Mutex<Option<ThreadId>> = Mutex::new(None);
/// How long a thread whose call returned once the exit began waits for
/// finalization to begin before it asks for the GIL anyway: past pkq's
/// own exit work (its runtimes' shutdown aside) and the atexit functions
/// that follow it, unless one of them waits (for this thread, say).
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Threads whose call returned and that ask for the GIL.
static ASKING: AtomicUsize = AtomicUsize::new(0);

/// One thread counted in `ASKING` until it is dropped (with the GIL held
/// again).
struct Asking;

impl Asking {
    fn new() -> Self {
        ASKING.fetch_add(1, Ordering::SeqCst);
        Asking
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        ASKING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `py.detach(f)`: `f` runs without the GIL. A thread whose `f` returns
/// once the interpreter is being finalized, where it was not when `f`
/// began, hangs there, for good, instead of asking for the GIL again; one
/// whose `f` returns once the interpreter's exit began (other than the
/// thread that exits) waits for that, or for [`EXIT_GRACE`] to pass.
pub(crate) fn detached<T, F>(py: Python<'_>, f: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    let finalizing_before = finalizing();
    let (out, _asking) = py.detach(|| {
        let out = f();
        let mut asking = Asking::new();
        if exit_began() {
            drop(asking);
            let until = Instant::now() + EXIT_GRACE;
            while Instant::now() < until && !finalized_since(finalizing_before) {
                std::thread::sleep(Duration::from_millis(1));
            }
            asking = Asking::new();
        }
        if finalized_since(finalizing_before) {
            drop(asking);
            loop {
                std::thread::park();
            }
        }
        (out, asking)
    });
    out
}

/// Whether the exit began, on another thread than this one.
fn exit_began() -> bool {
    EXITING.load(Ordering::SeqCst)
        && *EXIT_THREAD.lock().unwrap_or_else(|e| e.into_inner())
            != Some(std::thread::current().id())
}

/// Whether finalization began where it had not at `finalizing_before`.
fn finalized_since(finalizing_before: bool) -> bool {
    !finalizing_before && finalizing()
}

/// The interpreter's exit begins (the package's atexit function, with the
/// GIL, on the thread that exits: the latest caller): from now on a call
/// of another thread that returns waits for finalization, or for
/// [`EXIT_GRACE`], before it asks for the GIL. Then [`wait_for_askers`],
/// without the GIL.
pub(crate) fn exit_begins() {
    *EXIT_THREAD.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current().id());
    EXITING.store(true, Ordering::SeqCst);
}

/// Waits (without the GIL, after [`exit_begins`]) until no thread whose
/// call returned before the exit began still asks for the GIL: each takes
/// it and goes on before finalization begins. At most a second (a thread
/// that holds the GIL in C code may keep the askers waiting longer).
pub(crate) fn wait_for_askers() {
    let until = Instant::now() + Duration::from_secs(1);
    while ASKING.load(Ordering::SeqCst) != 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_micros(100));
    }
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
