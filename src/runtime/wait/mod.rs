//! Waiting for completions: the strategies a waiting thread may use
//! ([`strategy`]), the wait loop they share ([`waiter`]), the completion
//! thread that wakes parked threads, futures and callbacks (its registry,
//! [`reactor`], and its loop, [`thread`]), the CPU's monitor ([`monitor`])
//! and pinning ([`pin`]), and the `Future` and callback faces of tickets
//! and batches ([`future`], [`callback`]).

pub(crate) mod callback;
pub(crate) mod future;
pub(crate) mod monitor;
pub(crate) mod pin;
pub(crate) mod reactor;
pub(crate) mod strategy;
pub(crate) mod thread;
pub(crate) mod waiter;

pub use strategy::WaitStrategy;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
