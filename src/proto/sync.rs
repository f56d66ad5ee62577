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
