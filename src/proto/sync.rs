//! The atomics and locks of the host protocol: std's, or loom's when the
//! protocol is model-checked (`RUSTFLAGS="--cfg loom" cargo test --lib loom`).

#[cfg(loom)]
pub(crate) use loom::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, fence},
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, fence},
};

/// Threads that sleep until another wakes them (the waits that park).
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, current};
#[cfg(not(loom))]
pub(crate) use std::thread::{Thread, current};

/// Sleeps until unparked, or at most `timeout` (under loom, until
/// unparked: a wake-up the protocol loses then shows as a deadlock).
#[cfg(loom)]
pub(crate) fn park_timeout(_timeout: std::time::Duration) {
    loom::thread::park();
}
#[cfg(not(loom))]
pub(crate) use std::thread::park_timeout;

/// Lets other threads run while a thread waits for one of them.
#[cfg(loom)]
pub(crate) use loom::thread::yield_now;
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

/// The clock of the runtime's timing decisions: the probe schedule, stall
/// bounds, the spin before yielding, deadlines. Under loom time stands
/// still: loom replays a model's executions and needs each to take the
/// branches its schedule alone decides, and a probe falling due after a
/// preemption on a loaded machine broke the exploration. A model therefore
/// probes only on its first look, never stalls and never times out.
#[cfg(loom)]
pub(crate) fn now() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}
#[cfg(not(loom))]
#[inline]
pub(crate) fn now() -> std::time::Instant {
    std::time::Instant::now()
}
