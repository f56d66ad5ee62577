//! The atomics and locks of the host protocol: std's, or loom's when the
//! protocol is model-checked (`RUSTFLAGS="--cfg loom" cargo test --lib loom`).

#[cfg(loom)]
pub(crate) use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering, fence},
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering, fence},
};

/// Lets other threads run while a thread waits for one of them.
#[cfg(loom)]
pub(crate) use loom::thread::yield_now;
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;
