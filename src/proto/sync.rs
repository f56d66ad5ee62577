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

/// Lets other threads run while this one waits for them (loom's yield
/// under loom, which then explores the others' steps).
#[cfg(test)]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
