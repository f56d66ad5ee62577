//! The runtime: lanes of resident kernels serving their submission rings,
//! and the safe API over them. Declarations and re-exports only; each
//! module says what it holds:
//!
//! * the whole and its parts: [`lane`] (`Runtime`, `Lane`), [`builder`]
//!   and [`idle`] (settings), [`start`] (starting a lane);
//! * submitting: [`submit`] (the one submit path, `Submit`), [`producer`]
//!   (a ring's handles), [`ticket`] and [`batch`] (what reads the
//!   completions), [`inflight`] (a count of tasks a handle holds);
//! * what a lane shares with its handles, by owner: [`shared`] (and the
//!   looks that need several owners), [`rings`], [`device`] with
//!   [`liveness`] and [`engine`], [`lifecycle`] (stops, orphans), [`handle`]
//!   (the handles' pointer), [`memory`] (the memory's end);
//! * waiting: [`wait`]; tracing: [`tracing`] (`crate::trace`'s recorder,
//!   per runtime);
//! * calls that lend the device memory: [`borrow`] (buffers), [`state`]
//!   (device state), [`buffers`] (the buffer types they take).

pub(crate) mod arena;
pub(crate) mod batch;
pub(crate) mod borrow;
pub(crate) mod buffers;
pub(crate) mod builder;
pub(crate) mod device;
pub(crate) mod engine;
pub(crate) mod handle;
pub(crate) mod host_buffer;
pub(crate) mod idle;
pub(crate) mod inflight;
pub(crate) mod lane;
pub(crate) mod lifecycle;
pub(crate) mod liveness;
pub(crate) mod memory;
pub(crate) mod producer;
pub(crate) mod rings;
pub(crate) mod shared;
pub(crate) mod start;
pub(crate) mod state;
pub(crate) mod stop;
pub(crate) mod submit;
pub(crate) mod ticket;
pub(crate) mod tracing;
pub(crate) mod wait;

pub use batch::{Batch, TaskResult};
pub use buffers::{DeviceBuffer, DeviceBufferMut};
pub use builder::{Builder, MAX_LANES};
pub use host_buffer::HostBuffer;
pub use idle::IdlePolicy;
pub use lane::{Lane, Runtime};
pub use memory::{MemoryState, MemoryWatch, live_lanes};
pub use producer::{ExclusiveProducer, ExclusiveRing, Producer, RingAccess, SharedRing};
pub use state::DeviceState;
pub use submit::{Submission, Submit};
pub use ticket::{Completion, Ticket};
pub use wait::WaitStrategy;
pub use wait::monitor::{MonitorKind, monitor_support};

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
