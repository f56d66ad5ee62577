//! An asymmetric barrier: a light side that a hot path runs on every call
//! at the cost of a compiler fence, and a heavy side, run rarely, that
//! makes every light side of the process act as a full fence (x86's
//! `mfence`) for the accesses on either side of it.
//!
//! The pair replaces the store-then-load fences of a Dekker handshake (each
//! side stores its word, fences, loads the other's) when one side is hot
//! and the other rare: an exclusive producer's tail against `close`
//! (`proto::tail`). Where the light side ran a real fence it would cost what
//! the compare-and-swap it replaces costs.
//!
//! The heavy side is Linux's `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`:
//! on return, every thread of the process that was running has passed a
//! point where its memory accesses match program order, and threads not
//! running are at such a point already. Registration
//! (`MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`) happens once, before the
//! first light side relies on it ([`register`]); where it fails (a kernel
//! older than 4.14, a seccomp filter, another OS), both sides are real
//! `SeqCst` fences, correct at the cost of the fence. Under loom and Miri
//! both sides are `SeqCst` fences: loom models those, and a pair of them
//! is what the membarrier pair is relied on to give.

use crate::sync::{Ordering, fence};

#[cfg(all(target_os = "linux", not(loom), not(miri)))]
mod membarrier {
    use crate::sync::Ordering;
    use crate::sync::statics::AtomicU8;
    use std::ffi::{c_int, c_long};

    /// The syscall number of `membarrier` on x86-64 (the only host pkq
    /// builds for).
    const SYS_MEMBARRIER: c_long = 324;
    const CMD_PRIVATE_EXPEDITED: c_int = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: c_int = 1 << 4;

    const UNKNOWN: u8 = 0;
    const EXPEDITED: u8 = 1;
    const FENCE: u8 = 2;

    /// Whether this process registered for the expedited barrier.
    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

    unsafe extern "C" {
        fn syscall(num: c_long, ...) -> c_long;
    }

    /// The command's result: `Ok`, or the errno it failed with.
    fn membarrier(cmd: c_int) -> Result<(), i32> {
        // SAFETY: membarrier takes (int cmd, unsigned flags, int cpu_id)
        // and touches no memory of ours; a refusal is a -1 return.
        match unsafe { syscall(SYS_MEMBARRIER, cmd, 0 as c_int, 0 as c_int) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
        }
    }

    pub(super) fn register() -> bool {
        match STATE.load(Ordering::Acquire) {
            EXPEDITED => true,
            FENCE => false,
            _ => {
                let state = if membarrier(CMD_REGISTER_PRIVATE_EXPEDITED).is_ok() {
                    EXPEDITED
                } else {
                    FENCE
                };
                // The first verdict stays: a second registering thread
                // cannot turn an expedited process back into a fenced one
                // under a light side that already relies on it.
                match STATE.compare_exchange(UNKNOWN, state, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => state == EXPEDITED,
                    Err(now) => now == EXPEDITED,
                }
            }
        }
    }

    #[inline(always)]
    pub(super) fn expedited() -> bool {
        STATE.load(Ordering::Relaxed) == EXPEDITED
    }

    pub(super) fn heavy() {
        /// The kernel could not allocate what the command needs: worth
        /// another try.
        const ENOMEM: i32 = 12;
        loop {
            match membarrier(CMD_PRIVATE_EXPEDITED) {
                Ok(()) => return,
                Err(ENOMEM) => crate::sync::yield_now(),
                Err(errno) => {
                    // Registered, the command is refused only by a filter
                    // on this thread (seccomp) or a kernel bug. The light
                    // sides already rely on it: going on without it could
                    // lose a task silently, so stop the process instead.
                    eprintln!(
                        "pkq: membarrier(PRIVATE_EXPEDITED) failed with errno {errno} after the \
                         process registered for it; aborting rather than lose a task"
                    );
                    std::process::abort();
                }
            }
        }
    }
}

/// Prepares the light side: registers the process for the expedited heavy
/// side. Returns whether the light side is a compiler fence (`true`) or a
/// full fence (`false`). Call before the first light side that pairs with a
/// heavy one, and publish that with a release the heavy side's thread
/// acquires (the tail's compare-and-swap that marks the ring held).
pub(crate) fn register() -> bool {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        membarrier::register()
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        false
    }
}

/// The light side: orders this thread's accesses before it against those
/// after it, for a thread running [`heavy`].
#[inline(always)]
pub(crate) fn light() {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    if membarrier::expedited() {
        crate::sync::compiler_fence(Ordering::SeqCst);
        return;
    }
    fence(Ordering::SeqCst);
}

/// The heavy side: a full fence here and, through the kernel, at every
/// other thread of the process.
pub(crate) fn heavy() {
    fence(Ordering::SeqCst);
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    if membarrier::expedited() {
        membarrier::heavy();
    }
}

#[cfg(all(test, target_os = "linux", not(loom), not(miri)))]
mod tests {
    #[test]
    fn registration_gives_one_verdict() {
        let first = super::register();
        eprintln!("membarrier expedited: {first}");
        assert_eq!(super::register(), first);
        // Either way both sides run.
        super::light();
        super::heavy();
    }
}
