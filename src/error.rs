//! Errors of every pkq call.

use std::fmt;

use crate::op::Op;

/// A status other than success that a device handler reported for one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskStatus {
    /// The kernel has no handler for the task's op code.
    UnknownOp,
    /// The handler refused the task's arguments (for example a length over
    /// the op's limit, or a null device pointer).
    BadArgs,
    /// A wide task cut short by a stop (a cancel, a fault, a stall): its
    /// group's blocks may not all have finished, so it has no result, and
    /// they may run it until the kernel exits: memory the task uses stays
    /// in use until then (the safe calls on buffers wait for the exit).
    Stopped,
    /// A status code this version of pkq does not name.
    Other(u8),
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownOp => f.write_str("unknown op"),
            Self::BadArgs => f.write_str("bad arguments"),
            Self::Stopped => f.write_str("stopped before every participant finished"),
            Self::Other(c) => write!(f, "status {c}"),
        }
    }
}

/// A task that ran and failed: its op and the status its handler reported.
/// A [`Ticket`](crate::Ticket) reports it as [`Error::Task`], a
/// [`Batch`](crate::Batch) as the task's [`TaskResult`](crate::TaskResult);
/// `?` turns the second into the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{op} failed on the device: {status}")]
pub struct TaskError {
    /// The task's op.
    pub op: Op,
    /// What the handler reported.
    pub status: TaskStatus,
}

/// Everything that can go wrong in pkq. No pkq call panics on bad input or a
/// missing GPU; each returns one of these.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library (libcuda) could not be loaded.
    #[error("no CUDA driver: {0}; install the NVIDIA driver (libcuda.so.1)")]
    NoDriver(String),
    /// The driver loaded but reports no usable GPU.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// The device index is not below the number of devices.
    #[error("device index {index} is out of range: {count} CUDA device(s) present")]
    DeviceOutOfRange {
        /// The index asked for.
        index: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// The device cannot run pkq (compute capability below 8.0, no mapped
    /// host memory, or a driver older than CUDA 12.4).
    #[error("device {index} ({name}) is unsupported: {why}")]
    UnsupportedDevice {
        /// The device index.
        index: usize,
        /// The device's name.
        name: String,
        /// What it lacks.
        why: String,
    },
    /// SM partitions ([`Builder::sm_partition`](crate::Builder::sm_partition))
    /// are not available: the driver refused the device's split (the call
    /// and its error are named). (A driver older than CUDA 12.4, which has
    /// no green contexts, is refused before: [`Error::UnsupportedDevice`].)
    #[error("SM partitions are unavailable: {0}")]
    PartitionUnsupported(String),
    /// A [`Pool`](crate::Pool) device named for a task no longer serves (it
    /// faulted or stopped and was taken out).
    #[error("device {0} of the pool no longer serves")]
    NotServing(usize),
    /// No device of a [`Pool`](crate::Pool) serves any more.
    #[error("no device of the pool serves any more")]
    NoServingDevice,
    /// The crate was compiled without nvcc, so it carries no kernel.
    #[error(
        "pkq's CUDA kernel was not built: {0}. Install the CUDA toolkit (or `pip install \
         nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
         nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85`), set NVCC to its nvcc, \
         and rebuild pkq (`cargo clean -p pkq`)"
    )]
    KernelNotBuilt(&'static str),
    /// The module given to [`Builder::module`](crate::Builder::module) could
    /// not serve: the driver refused the image, or its kernel does not take
    /// pkq's parameters.
    #[error("invalid module: {0}")]
    InvalidModule(String),
    /// The host's declaration of an op ([`TypedOp`](crate::TypedOp)), or
    /// a raw task's argument bytes, and the module's op table disagree:
    /// argument size, alignment or pointer flag, or the module has no such
    /// op. Shown as `NAME (op CODE): why`, or `op CODE: why` for an op the
    /// host did not name.
    #[error("{}: {why}", op_label(op, *code))]
    OpMismatch {
        /// The op's name as declared on the host (empty where it has none:
        /// a raw task of an op that is not pkq's).
        op: String,
        /// Its code.
        code: u16,
        /// What differs.
        why: String,
    },
    /// The module has no kernel of the name given.
    #[error("the module has no kernel named {0:?}")]
    KernelMissing(String),
    /// A builder setting is out of range, or the runtime lacks what a call
    /// needs: IO areas ([`Builder::io`](crate::Builder::io)) for an IO
    /// task, room in its state memory for [`Lane::state`](crate::Lane::state),
    /// a device with stream-ordered allocation for state memory at all,
    /// no pkq kernel running where a module or an SM partition is made, or
    /// an environment whose driver makes every launch wait for its kernel
    /// (`CUDA_LAUNCH_BLOCKING`), under which a resident kernel's launch
    /// would never return.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The argument bytes do not fit where they go: a slot's inline
    /// payload, a packed task's 8 bytes, a state op's arguments after the
    /// state's address and length, or an IO task's input its input area
    /// ([`Builder::io`](crate::Builder::io)).
    #[error("a payload of {len} bytes exceeds its {max}-byte limit")]
    PayloadTooLarge {
        /// The payload's length.
        len: usize,
        /// The most it may be: a slot's argument bytes, or the input area's.
        max: usize,
    },
    /// An argument of a safe wrapper is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The op dereferences device pointers from its arguments, or faults the
    /// device on purpose; a submit refuses it unless the task is marked
    /// [`Task::unchecked`](crate::Task::unchecked) (unsafe). Its safe
    /// wrapper (such as [`Lane::axpy`](crate::Lane::axpy)) checks the
    /// buffers instead.
    #[error(
        "{0} dereferences device pointers or faults the device: use its safe wrapper, or mark \
         the task unchecked (unsafe)"
    )]
    UncheckedOp(Op),
    /// [`Submit::try_submit`](crate::Submit::try_submit) found no room
    /// for the task (or the run of tasks) in its ring.
    #[error("the submission ring is full")]
    Full,
    /// The runtime is shut down (or shutting down): no new tasks.
    #[error("the runtime is shut down")]
    Closed,
    /// An [`ExclusiveProducer`](crate::ExclusiveProducer) holds the ring:
    /// until it is dropped, only it submits there.
    #[error("the ring is held by an exclusive producer")]
    RingHeld,
    /// A wait ran past its deadline; the task is still tracked.
    #[error("timed out")]
    Timeout,
    /// The device ran the task and its handler reported a failure.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The kernel faulted (a trap, an illegal address, ...), as the
    /// runtime judges it: the driver reported the error, and none of the
    /// kernel's pollers moved (beat, or left its loop) in the 10 ms after
    /// the runtime first looked at it (or, once one had, for the stall
    /// bound since). Such errors are
    /// sticky, and the driver reports them on every CUDA context of the
    /// process: from then on every driver call fails, on every device, while
    /// a runtime whose kernel beats on keeps serving (its hot path needs no
    /// driver call). A live kernel none of whose pollers moves that long
    /// (each running a long task, or the kernel descheduled) is taken for a
    /// faulted one too: its runtime latches this, and keeps its memory.
    #[error("the device faulted: {0}")]
    DeviceFault(String),
    /// The task's worker has not polled for longer than the stall bound
    /// ([`Builder::stall_after`](crate::Builder::stall_after)): it is stuck
    /// in a task (its own or one before it), or the kernel no longer runs.
    /// Nothing is latched: the task stays submitted, and a later wait may
    /// still see it complete (keep the ticket with
    /// [`Ticket::wait_timeout`](crate::Ticket::wait_timeout)).
    #[error(
        "worker {worker} has not polled for {silent:?}: stuck in a task, or the kernel is gone"
    )]
    Stalled {
        /// The silent worker.
        worker: usize,
        /// How long it has been silent (as of the last liveness probe).
        silent: std::time::Duration,
    },
    /// [`Runtime::cancel`](crate::Runtime::cancel) stopped the kernel before
    /// the task completed.
    #[error("the task was cancelled: the runtime was stopped before it ran")]
    Cancelled,
    /// The resident kernel is no longer serving tasks.
    #[error("the resident kernel stopped: {0}")]
    KernelStopped(String),
    /// The resident kernel did not start (or did not exit) in time.
    #[error("the resident kernel did not {0}")]
    KernelTimeout(&'static str),
    /// A CUDA driver call failed.
    #[error("CUDA driver error: {0:?}")]
    Cuda(#[from] cudarc::driver::DriverError),
}

/// How [`Error::OpMismatch`] names its op.
fn op_label(name: &str, code: u16) -> String {
    if name.is_empty() {
        format!("op {code}")
    } else {
        format!("{name} (op {code})")
    }
}

/// `Result` with pkq's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
