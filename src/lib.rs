#![doc = include_str!("../README.md")]
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
mod cuda;
mod error;
pub mod ops;
mod pool;
mod proto;
mod ptxas;
mod runtime;
pub mod timing;

pub use cuda::driver::{DeviceInfo, context, device_count, device_info};
pub use cuda::image::image as kernel_image;
pub use cuda::partition::{SmGranularity, SmPartition, sm_partition_support};
/// The cudarc pkq is built against (device buffers for ops like AXPY come from it).
pub use cudarc;
pub use error::{Error, Result, TaskError, TaskStatus};
pub use ops::builtin;
pub use ops::{AXPY_MAX_N, AxpyArgs, Op, SPIN_MAX_NS, StateOp, TypedOp, echo_fold};
pub use pool::{Pool, PoolBuilder, Routing};
pub use runtime::batch::{Batch, TaskResult};
pub use runtime::buffers::{DeviceBuffer, DeviceBufferMut};
#[doc(hidden)]
#[cfg(feature = "bench")]
pub use runtime::live_runtimes;
pub use runtime::state::DeviceState;
pub use runtime::ticket::{Completion, Ticket};
pub use runtime::{
    Builder, ExclusiveProducer, ExclusiveRing, IdlePolicy, MonitorKind, Producer, RingAccess,
    Runtime, SharedRing, WaitStrategy, monitor_support,
};

/// The most argument bytes a task carries inline in its slot.
pub const ARGS_BYTES: usize = proto::layout::ARGS_BYTES;

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
