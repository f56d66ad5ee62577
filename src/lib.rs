//! pkq makes a GPU answer small tasks at the floor of a PCIe round trip,
//! with no kernel launch on the way. A persistent CUDA kernel, compiled by
//! nvcc when the crate builds and embedded in it, stays resident on the GPU
//! and serves tasks from rings of slots in mapped (zero-copy) pinned host
//! memory that host threads fill; the device writes each task's completion
//! back into host memory. No launch and no stream synchronization on the
//! hot path.
//!
//! ```no_run
//! use pkq::builtin::ECHO;
//! use pkq::{Runtime, Submit};
//!
//! fn main() -> pkq::Result<()> {
//!     // The resident kernel on device 0, in the latency shape.
//!     let rt = Runtime::builder().device(0).build()?;
//!     // One round trip: submit, then wait for the device's completion.
//!     assert_eq!(rt.submit(ECHO.args(&42))?.wait()?.value, 42);
//!     // Many small tasks, 32 to a slot, reaped together.
//!     let words: Vec<u64> = (0..4096).collect();
//!     let results = rt.submit(ECHO.packed(&words))?.wait()?;
//!     assert_eq!(results[7].as_ref().unwrap().value, 7);
//!     rt.shutdown() // drains what is in flight, then stops the kernel
//! }
//! ```
//!
//! Where to go next:
//! * [`Runtime`] and its [`Builder`]: the resident kernel, its shapes, and
//!   the rules for sharing the GPU with other CUDA code;
//! * [`Submit`]: submitting tasks ([`TypedOp`] describes them), from a
//!   runtime, a [`Lane`], a [`Producer`] or a [`Pool`] of devices;
//! * [`Ticket`] and [`Batch`]: waiting, polling, `.await` and callbacks;
//! * [`builtin`]: pkq's own ops and their safe calls on device buffers;
//! * your own device code: `cuda/pkq.cuh`, [`Builder::module`], and the
//!   repository's `examples/custom_handler`;
//! * the protocol: `docs/PROTOCOL.md`; the decisions behind it, with their
//!   evidence: `docs/design/`; the measurements: the repository's README
//!   and `pkq-bench`.
//!
//! Every call returns a typed [`Error`]; none panics on bad input or a
//! missing GPU, and no wait can hang: a device fault or a kernel that
//! stopped ends it with an error.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(all(feature = "cuda-13000", feature = "cuda-12080"))]
compile_error!(
    "pkq: enable one CUDA version feature, not both (use default-features = false with cuda-12080)"
);
#[cfg(not(any(feature = "cuda-13000", feature = "cuda-12080")))]
compile_error!("pkq: enable one CUDA version feature: cuda-13000 (default) or cuda-12080");
// The host protocol relies on x86-64's store order (TSO): a producer's
// stores to a slot's copies reach the device in program order, copy 0
// first (docs/PROTOCOL.md, "Platform assumptions"). Other hosts (aarch64:
// Grace Hopper) do not give it, so pkq refuses to build for them.
#[cfg(not(target_arch = "x86_64"))]
compile_error!(
    "pkq supports x86-64 hosts only: its host protocol relies on x86-64's store order (TSO) \
     for the copies of a slot (see docs/PROTOCOL.md, Platform assumptions)"
);

pub mod build_info;
pub mod builtin;
mod cuda;
mod error;
mod layout;
mod op;
mod ops;
mod pool;
mod proto;
mod ptxas;
mod runtime;
mod sync;
pub mod timing;
pub mod trace;
mod width;

pub use cuda::driver::{DeviceInfo, context, device_count, device_info};
pub use cuda::image::image as kernel_image;
pub use cuda::modules::running_kernels;
pub use cuda::partition::{SmGranularity, SmPartition, sm_partition_support};
/// The cudarc pkq is built against (device buffers for ops like AXPY come from it).
pub use cudarc;
pub use error::{Error, Result, TaskError, TaskStatus};
pub use op::Op;
pub use ops::{StateOp, Task, Tasks, TypedOp};
pub use pool::{Keyed, MAX_POOL_DEVICES, Pool, PoolBuilder, Routing};
#[doc(hidden)]
pub use runtime::live_lanes;
pub use runtime::{
    Batch, Builder, Completion, DeviceBuffer, DeviceBufferMut, DeviceState, ExclusiveProducer,
    ExclusiveRing, HostBuffer, IdlePolicy, Lane, MAX_LANES, MemoryState, MemoryWatch, MonitorKind,
    Producer, RingAccess, Runtime, SharedRing, Submission, Submit, TaskResult, Ticket,
    WaitStrategy, monitor_support,
};
pub use width::Width;

/// The README's code blocks, compiled as doctests (the README is the
/// repository's page, not this crate's front page).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The most argument bytes a task carries inline in its slot.
pub const ARGS_BYTES: usize = layout::ARGS_BYTES;

#[cfg(test)]
pub(crate) mod test_rng {
    /// How many random cases a test runs: all of `n`, or a hundredth under
    /// Miri, which interprets every step (the protocol's checks still run).
    pub(crate) const fn cases(n: usize) -> usize {
        if cfg!(miri) { n / 100 } else { n }
    }

    /// SplitMix64: a small, seeded source of test inputs.
    pub(crate) struct Rng(u64);

    impl Rng {
        pub(crate) fn new(seed: u64) -> Self {
            Self(seed)
        }

        pub(crate) fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }
}

/// What the CPU tests share beside their inputs.
#[cfg(test)]
pub(crate) mod test_support {
    /// The values of a batch's (or several tickets') results, each of which
    /// must be a success.
    pub(crate) fn values<E: std::fmt::Debug>(
        results: impl IntoIterator<Item = Result<crate::Completion, E>>,
    ) -> Vec<u64> {
        results.into_iter().map(|r| r.unwrap().value).collect()
    }
}
