//! Settings of a runtime and its lanes, checked before the driver, and the
//! build that starts every lane (one lane's start: `runtime::start`).

use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;

use crate::cuda::image::Image;
use crate::error::{Error, Result};
use crate::layout::{IO_MAX_BYTES, MAX_POLLERS, MAX_WORKERS};
use crate::ops::TypedOp;
use crate::ops::table::Signature;
use crate::proto::plan::Plan;
use crate::proto::ring::Geometry;
use crate::runtime::idle::IdlePolicy;
use crate::runtime::shared::Settings;
use crate::runtime::wait::WaitStrategy;
use crate::width::Width;

/// How often waiters ask the driver whether the kernel still lives.
const PROBE_EVERY: Duration = Duration::from_millis(1);
/// The longest probe interval a builder takes.
const PROBE_AT_MOST: Duration = Duration::from_secs(1);
/// The resident kernel of pkq's embedded module.
const WORKER_KERNEL: &str = "pkq_worker_kernel";

/// What [`Builder::state_memory`] allocates unless told otherwise.
const DEFAULT_STATE_BYTES: usize = 1 << 20;

/// The most lanes a runtime has (its first and those of
/// [`Builder::add_lane`]): each is a resident kernel of its own, and a
/// device runs at most 128 kernels at once (compute capability 7.0 and
/// later), the application's among them.
pub const MAX_LANES: usize = 64;

/// Configures and starts a [`Runtime`](crate::Runtime).
#[derive(Clone, Debug)]
#[must_use = "a builder starts nothing until `build` is called"]
pub struct Builder {
    pub(crate) device: usize,
    pub(crate) capacity: usize,
    pub(crate) workers: usize,
    pub(crate) rings: usize,
    /// `None`: eight for a single worker, else one.
    pub(crate) pollers: Option<u32>,
    pub(crate) idle: IdlePolicy,
    pub(crate) start_timeout: Duration,
    pub(crate) stop_timeout: Duration,
    pub(crate) image: Image,
    pub(crate) kernel: String,
    pub(crate) ops: Vec<Signature>,
    pub(crate) start_seq: u64,
    pub(crate) probe_every: Duration,
    pub(crate) stall_after: Duration,
    pub(crate) state_bytes: usize,
    pub(crate) io: (usize, usize),
    pub(crate) wait: WaitStrategy,
    /// The SMs asked for (`None`: the whole device).
    pub(crate) sm_partition: Option<usize>,
    /// The runtime's other lanes (lane 0 is this builder's own).
    pub(crate) lanes: Vec<Builder>,
    pub(crate) completion_cpu: Option<usize>,
    pub(crate) width: Width,
    /// Trace records kept ([`Builder::trace`]); `None`: off at build.
    pub(crate) trace: Option<usize>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            device: 0,
            capacity: 1024,
            workers: 1,
            rings: 1,
            pollers: None,
            idle: IdlePolicy::default(),
            start_timeout: Duration::from_secs(10),
            stop_timeout: Duration::from_secs(10),
            image: Image::Embedded,
            kernel: WORKER_KERNEL.to_string(),
            ops: Vec::new(),
            start_seq: 0,
            probe_every: PROBE_EVERY,
            stall_after: Duration::from_secs(1),
            state_bytes: DEFAULT_STATE_BYTES,
            io: (0, 0),
            wait: WaitStrategy::SpinThenYield,
            sm_partition: None,
            lanes: Vec::new(),
            completion_cpu: None,
            width: Width::Warp,
            trace: None,
        }
    }
}

impl Builder {
    /// The CUDA device index (default 0).
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn device(mut self, index: usize) -> Self {
        self.device = index;
        self
    }

    /// Slots in each submission ring: a power of two from 1 to 2^20 (default
    /// 1024). At most this many tasks of a ring are submitted and not yet
    /// completed; completions their tickets have not read yet move to the
    /// host when a producer needs their slot.
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn capacity(mut self, slots: usize) -> Self {
        self.capacity = slots;
        self
    }

    /// Workers of the resident kernel: a power of two, at most 1024 and the
    /// capacity times the rings (default 1), each `pollers` warps, eight
    /// warps to a block; [`build`](Builder::build) refuses more
    /// workers and pollers than the device keeps resident at once
    /// ([`Error::InvalidConfig`]). Each ring has `workers / rings` of them;
    /// within a ring, worker `i` runs the tasks whose sequence number is `i`
    /// modulo that count, one after another, whatever its pollers.
    /// Different workers run concurrently and complete out of order. A slow
    /// task delays only the tasks queued behind it on its own worker (every
    /// `workers / rings`-th task of its ring after it), by its run time;
    /// the others go on.
    ///
    /// The default, one worker of eight pollers, is the latency shape: the
    /// round trip at the floor, for one task in flight at a time (a control
    /// loop). Many workers are the throughput shape: each idle worker keeps
    /// one PCIe read of host memory in flight per poller, and serves at
    /// most one task per read round trip with its completion, so more
    /// workers serve more tasks per second, until the producing threads are
    /// the limit; a single task's round trip is longer than the latency
    /// shape's. `pkq-bench/results/latency.json` has both shapes' round trip
    /// beside the raw floor, `pkq-bench/results/throughput*.json` the rates of
    /// 4 to 256 workers and what a running pkq costs an application kernel
    /// beside it. With more than one worker, each has one poller unless
    /// [`Builder::pollers`] says otherwise.
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn workers(mut self, warps: usize) -> Self {
        self.workers = warps;
        self
    }

    /// Submission rings: a power of two, at most the workers (default 1).
    /// Each ring has its own slots, tail and `workers / rings` workers. A
    /// [`Producer`](crate::Producer) submits to the ring it names
    /// ([`Lane::producer_on`](crate::Lane::producer_on)); the
    /// runtime's own submit calls use ring `t % rings`, `t` being the order
    /// in which the calling thread first submitted to any pkq runtime. Up
    /// to `rings` threads on rings of their own share no cache line on the
    /// submit path (the tail's compare-and-swap is per ring). A ring's
    /// tasks run only on its workers: for one producing thread, keep one
    /// ring. `pkq-bench/results/throughput*.json` compares threads
    /// submitting one task at a time on one ring and on a ring each.
    /// A ring held by an [`ExclusiveProducer`](crate::ExclusiveProducer)
    /// refuses every other submit, the runtime's own calls from the threads
    /// whose ring it is included, with [`Error::RingHeld`].
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Submit, builtin::NOP};
    /// let rt = pkq::Runtime::builder().workers(64).rings(4).build()?;
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| rt.submit(NOP.args(&()))?.wait().map(|_| ()));
    ///     }
    /// });
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn rings(mut self, n: usize) -> Self {
        self.rings = n;
        self
    }

    /// Poller warps per worker: 1, 2, 4 or 8 (default: 8 for a single
    /// worker, 1 for more); more is the latency setting. Each of a worker's pollers polls a copy of the worker's
    /// slots of its own (the producer writes every copy), started a
    /// fraction of a read round trip apart, so that a task lands in front
    /// of a poll sooner; the first to see it claims it, and runs it once
    /// the worker's task before it has completed: a worker runs its tasks
    /// one after another whatever its pollers, and a long task holds up
    /// those behind it on its worker (and draws [`Error::Stalled`] past the
    /// stall bound, for its own waiter and theirs).
    ///
    /// Costs: each submit stores its slot once per poller, the slots take
    /// that many times the pinned memory, and the kernel that many warps
    /// per worker. The latency setting, the default, is one worker of eight
    /// pollers, for one task in flight at a time, as a control loop has:
    /// `pkq-bench/results/latency.json` has its round trip and submit call
    /// beside the throughput shape's and the raw floor's, and
    /// `docs/design/default-shape.md` the design sweep behind it.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Submit, builtin::NOP};
    /// let rt = pkq::Runtime::builder().workers(1).pollers(8).build()?;
    /// rt.submit(NOP.args(&()))?.wait()?;
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn pollers(mut self, n: u32) -> Self {
        self.pollers = Some(n);
        self
    }

    /// The pollers per worker these settings give (one for a wide lane).
    pub(crate) fn pollers_per_worker(&self) -> u32 {
        if self.width.is_wide() {
            return self.pollers.unwrap_or(1);
        }
        self.pollers
            .unwrap_or(if self.workers == 1 { 8 } else { 1 })
    }

    /// How wide each task of this lane runs (default [`Width::Warp`]): see
    /// [`Width`]. A wide lane's workers (each a block or a group of blocks)
    /// have one poller each, no IO areas ([`Builder::io`]) and take no
    /// packs; its lane serves NOP and the ops its kernel's op table
    /// declares for its width, and refuses the others
    /// ([`Error::OpMismatch`]). Every block of every worker must be
    /// resident at once, beside the runtime's other lanes
    /// ([`Error::InvalidConfig`] otherwise). The software device of pkq's
    /// CPU tests serves warps only.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Runtime, Submit, Width, builtin::GROUP_EMPTY};
    /// let rt = Runtime::builder().width(Width::Block { warps: 8 }).build()?;
    /// rt.submit(GROUP_EMPTY.args(&()))?.wait()?; // every thread of a block ran it
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn width(mut self, width: Width) -> Self {
        self.width = width;
        self
    }

    /// What idle workers do (default: [`IdlePolicy::Quiet`] after
    /// [`IdlePolicy::DEFAULT_QUIET_AFTER`]).
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn idle(mut self, policy: IdlePolicy) -> Self {
        self.idle = policy;
        self
    }

    /// How long a worker may go without polling before waits on its tasks
    /// return [`Error::Stalled`] (default 1 s; at least 10 ms). Workers beat
    /// a heartbeat while they poll, not while a task runs: set this above
    /// your longest task. Nothing is latched by a stall.
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn stall_after(mut self, bound: Duration) -> Self {
        self.stall_after = bound;
        self
    }

    /// How long `build` waits for every worker to report in (default 10 s),
    /// then [`Error::KernelTimeout`]. A timeout too long to add to now
    /// (`Duration::MAX`) waits without a deadline: `build` then returns only
    /// once the kernel serves or is known to have failed (workers that other
    /// kernels on the device keep from becoming resident wait for them).
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// How long shutdown waits for in-flight tasks and then for the kernel to
    /// exit (default 10 s each). A timeout too long to add to now
    /// (`Duration::MAX`) waits without a deadline. Past it, shutdown returns
    /// [`Error::KernelTimeout`] and tells the kernel to exit all the same:
    /// a task running finishes, a worker may start a few more of its queued
    /// slots before it reads the stop (at most `PKQ_STOP_POLL_INTERVAL` per
    /// poller, `cuda/pkq_layout.h`, a packed slot's tasks all together), and
    /// the tickets of the tasks that do not
    /// complete report [`Error::KernelStopped`]; a kernel that does not exit
    /// in time keeps its memory (its state memory too), never freed under
    /// it: once the runtime and every ticket and batch of it are gone,
    /// [`running_kernels`](crate::running_kernels) and every build (of any
    /// device) look at it again, and give its memory back once it exited
    /// ([`MemoryState`](crate::MemoryState)).
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// The first sequence number: a test seam, for testing the wrap at
    /// 2^63. Not part of the API.
    #[doc(hidden)]
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn start_sequence(mut self, seq: u64) -> Self {
        self.start_seq = seq;
        self
    }

    /// Serves with kernel `kernel` of a device module of your own (fatbin,
    /// cubin or PTX bytes) instead of pkq's embedded kernel. The kernel must
    /// be built from pkq's device headers: it takes one `pkq_params` by value
    /// and serves the ring as `pkq_worker_kernel` does.
    ///
    /// [`build`](Builder::build) refuses an image the driver cannot load,
    /// one it would read past the end of (the driver takes no length: an
    /// empty image, a fatbin or ELF whose header names more bytes than it
    /// has, a fatbin entry past its end, an ELF section link to a section
    /// it lacks; PTX text gets a NUL after it; pkq checks these headers and
    /// indexes, not every structure the driver parses, so load only images
    /// nvcc built), or a kernel of other parameters
    /// ([`Error::InvalidModule`]), a name the module lacks or none can hold
    /// (a NUL in it: [`Error::KernelMissing`]), and a module or kernel
    /// not loaded before while a pkq kernel runs on the device
    /// ([`Error::InvalidConfig`]: see [`Runtime`](crate::Runtime)).
    ///
    /// The module's code is trusted as any device code you load is: pkq
    /// refuses a table row no slot can carry (over 48 argument bytes, an
    /// alignment that is not a power of two up to 8, a flag it does not
    /// know: [`Error::InvalidModule`]), checks the argument layouts its op
    /// table declares and refuses, on the
    /// safe calls, ops the table flags as dereferencing pointers and ops it
    /// does not list; what the handlers do with their arguments is theirs.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// let image = std::fs::read("my_kernels.fatbin").expect("built by build.rs");
    /// let rt = pkq::Runtime::builder().module(image, "my_worker_kernel").build()?;
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn module(mut self, image: impl Into<Arc<[u8]>>, kernel: &str) -> Self {
        self.image = Image::Caller(image.into());
        self.kernel = kernel.to_string();
        self
    }

    /// Declares an op the kernel must serve with arguments like `A`:
    /// [`build`](Builder::build) checks its code, argument size, alignment
    /// and pointer flag against the module's op table (`PKQ_OP_TABLE`) and
    /// refuses a mismatch with [`Error::OpMismatch`] naming the op. (Every
    /// submit checks its op against the table too.)
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn op<A: Pod>(mut self, op: &TypedOp<A>) -> Self {
        self.ops.push(op.signature());
        self
    }

    /// Input and output areas in mapped memory for every slot, of up to
    /// `input` and `output` bytes (each at most 65536), for IO tasks
    /// ([`TypedOp::io`], and on device state
    /// [`Lane::call_on_state_io`](crate::Lane::call_on_state_io)): the producer
    /// writes a task's input there and its handler reads it
    /// (`ctx.input`), the handler writes its output (`ctx.output`) and the
    /// task's waiter reads it, with no stream and no driver call.
    ///
    /// A stream (input or output) under 4096 bytes moves as tagged words
    /// (each 8-byte word carries 7 bytes and the lap's tag, as the slot's
    /// words do). The device reads an input after an acquire fence (system
    /// scope; before sm_90 a full system fence), and fences before the word that names an output's lap only
    /// where the tags cannot tell this lap's words: a slot's first IO task,
    /// a longer output than the slot's recent ones, one after a long run of
    /// laps without them, or one within 255 laps of a plain output in the
    /// slot (IO and PLAIN in `cuda/pkq_layout.h`). A stream of 4096 bytes
    /// or more moves as plain bytes,
    /// copied by the SM's bulk copy engine (sm_90 and later, where the
    /// handler's input and output sit in shared memory, below; else by the
    /// worker's loads and stores), behind one system fence each way.
    ///
    /// Default none. Costs: pinned memory of `8 * (in + out)` bytes per
    /// slot per ring, where `in` is `ceil(input / 7)` and `out` is
    /// `1 + ceil(output / 7)`, each rounded up to even (about 8/7 of the
    /// bytes for large areas);
    /// device memory of `input + output` bytes, each rounded up to 112, per
    /// worker, and 8 bytes per slot; the handler's input and output sit in
    /// shared memory where the runtime has one lane, every block of the
    /// kernel keeps its workers' and the kernel stays resident, else in that
    /// device memory. A worker's
    /// pollers read a large input, and write a large output, together.
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn io(mut self, input: usize, output: usize) -> Self {
        self.io = (input, output);
        self
    }

    /// Device memory for states ([`Lane::state`](crate::Lane::state)), allocated when the
    /// runtime starts (before its kernel: nothing is allocated on the
    /// device while it runs) and kept until the runtime and its last state
    /// are gone; each state takes its size rounded up to 256 bytes. Default
    /// 1 MiB; 0 for none. Per lane: a lane added with [`Builder::add_lane`]
    /// has its own, of its own builder's size, and serves only the states
    /// made from it.
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn state_memory(mut self, bytes: usize) -> Self {
        self.state_bytes = bytes;
        self
    }

    /// Declares an op on device state, as [`Builder::op`] does for a
    /// [`TypedOp`]: the module's op table must list it with
    /// `PKQ_OP_INFO_STATE` and `pkq::StateArgs<A>`.
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn state_op<S: Pod, A: Pod>(mut self, op: &crate::ops::StateOp<S, A>) -> Self {
        self.ops.push(op.signature());
        self
    }

    /// Runs the resident kernel on `sms` of the device's multiprocessors
    /// only (a green context, CUDA 12.4+), rounded up to what the device
    /// allows (on Hopper, a multiple of 8: 1 to 8 give 8, 9 give 16), and
    /// leaves the rest to the application through
    /// [`Runtime::sm_partition`](crate::Runtime::sm_partition): its kernels launched on
    /// [`SmPartition::app_stream`](crate::SmPartition::app_stream) streams
    /// never share an SM with the runtime. Kernels launched on any other
    /// stream may still use every SM, the runtime's included.
    ///
    /// [`build`](Builder::build) refuses a size whose rounding leaves no SM
    /// to the application, or more workers and pollers than the partition
    /// keeps resident ([`Error::InvalidConfig`]), and reports a device whose
    /// driver refuses the split as [`Error::PartitionUnsupported`] (a driver
    /// older than CUDA 12.4 runs no runtime: [`Error::UnsupportedDevice`]).
    /// A size not made before in the process is refused while a pkq kernel
    /// runs on the device ([`Error::InvalidConfig`]: the driver's creation
    /// of a green context waits for the device's running kernels, and a
    /// resident one does not end); build a runtime with each size first
    /// (a partition, once made, is kept for the process and reused).
    /// [`sm_partition_support`](crate::sm_partition_support) gives the
    /// device's granularity. `pkq-bench/results/isolation.json` measures the
    /// round trip and an application's kernels with and without one.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// let rt = pkq::Runtime::builder().sm_partition(8).build()?;
    /// let part = rt.sm_partition().expect("built with a partition");
    /// assert!(part.sms() >= 8);
    /// let app = part.app_stream()?; // the application's kernels go here
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn sm_partition(mut self, sms: usize) -> Self {
        self.sm_partition = Some(sms);
        self
    }

    /// Adds a lane: a resident kernel of its own, with its own rings,
    /// workers and pollers as `lane` sets them, served by the same runtime
    /// (on its device, in its SM partition if it has one), reached with
    /// [`Runtime::lane`](crate::Runtime::lane). Lane 0 is the runtime's first (this builder's
    /// own); the lanes added are numbered from 1 in the order added. A latency lane (the default shape) and a bulk
    /// lane (many workers) keep a control loop's round trip apart from a
    /// flood of bulk tasks: they share no ring, slot or worker. They do
    /// share the device and the link: a flood of one task a slot on the
    /// bulk lane slows each of the latency lane's tasks somewhat, a packed
    /// flood about not at all. A lane's own
    /// producers are another matter: its tasks run one after another on
    /// its workers, so producers that keep its ring full wait behind
    /// every task before theirs, up to the ring's capacity of them, and
    /// that queue, not the bulk lane, is what gives a latency lane fed
    /// without pause a tail of milliseconds (`pkq-bench/results/lane_tail.json`,
    /// and `isolation.json` for packed floods). Give such a lane more
    /// workers, or keep fewer of its tasks in flight.
    /// [`Runtime::shutdown`](crate::Runtime::shutdown), [`Runtime::cancel`](crate::Runtime::cancel)
    /// and [`Runtime::health`](crate::Runtime::health)
    /// cover every lane; dropping the runtime stops them all.
    ///
    /// A lane runs on its runtime's device (its own device setting is not
    /// read) and in its partition; a lane builder naming a partition or
    /// lanes of its own is refused ([`Error::InvalidConfig`]). Its other
    /// settings are its own (wait strategy, idle policy, ops, module); it
    /// has a completion thread of its own, pinned where the runtime's is
    /// ([`Builder::completion_cpu`]) unless the lane names a CPU. A runtime
    /// has at most [`MAX_LANES`] lanes, its first included.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Runtime, Submit, builtin::NOP};
    /// let rt = Runtime::builder() // lane 0: the latency shape
    ///     .add_lane(Runtime::builder().workers(64).rings(4)) // lane 1: bulk
    ///     .build()?;
    /// let bulk = rt.lane(1).expect("one extra lane");
    /// let mut flood = bulk.submit(NOP.batch(&[(); 256]))?;
    /// rt.submit(NOP.args(&()))?.wait()?; // not behind the flood
    /// flood.wait()?;
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn add_lane(mut self, lane: Builder) -> Self {
        self.lanes.push(lane);
        self
    }

    /// Pins the runtime's completion thread to CPU `cpu` (Linux; the thread
    /// starts with the first [`WaitStrategy::Park`] wait, future or
    /// callback, and serves them all, probing the kernel's health while it
    /// has waiters). Without this it takes, when it starts, the affinity
    /// mask of the process's main thread, not that of the waiter that
    /// started it: the CPUs `taskset` or the parent gave the process,
    /// unless the application narrowed its main thread since (Linux keeps a
    /// mask per thread, none per process). An application that pins its
    /// main thread to one core therefore shares that core with the
    /// completion thread unless it names another CPU here.
    ///
    /// On a machine whose other cores are busy, give it a core of its own:
    /// with `isolcpus=`/`nohz_full=` on the kernel command line, or a
    /// cgroup cpuset that keeps other processes off that core, and the
    /// process's other threads pinned elsewhere. The threads that submit
    /// and spin-wait are the caller's: pin them the same way
    /// (`core_affinity`), one core each, for the round trip at the floor.
    /// `build` refuses a CPU outside the main thread's affinity mask at the
    /// time of the build ([`Error::InvalidConfig`]), even one another thread
    /// of the process could be moved to (a `taskset -c` of the whole
    /// process leaves out every CPU it does not list), and any CPU off
    /// Linux.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Runtime, WaitStrategy};
    /// let rt = Runtime::builder().wait_strategy(WaitStrategy::Park).completion_cpu(3).build()?;
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn completion_cpu(mut self, cpu: usize) -> Self {
        self.completion_cpu = Some(cpu);
        self
    }

    /// Records every task from the start, keeping up to `records` of them
    /// (see [`crate::trace`]: each takes 64 bytes, allocated at the build;
    /// once full, records are counted as dropped). More than
    /// [`MAX_TRACE_RECORDS`](crate::trace::MAX_TRACE_RECORDS) is
    /// [`Error::InvalidConfig`]; memory the system will not give,
    /// [`Error::InvalidConfig`] at the build too. Without
    /// it, the runtime keeps up to [`DEFAULT_TRACE_RECORDS`](crate::trace::DEFAULT_TRACE_RECORDS)
    /// once [`Runtime::set_tracing`](crate::Runtime::set_tracing) switches
    /// tracing on. The whole runtime's: a lane's own
    /// ([`Builder::add_lane`]) is checked as above, then ignored.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Runtime, Submit, builtin::NOP};
    /// let rt = Runtime::builder().trace(1 << 20).build()?;
    /// rt.submit(NOP.args(&()))?.wait()?;
    /// rt.trace().write("pkq.pftrace").expect("written");
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn trace(mut self, records: usize) -> Self {
        self.trace = Some(records);
        self
    }

    /// How the runtime's tickets and batches wait for their results unless
    /// told otherwise ([`Ticket::with_wait`](crate::Ticket::with_wait)).
    /// Default [`WaitStrategy::SpinThenYield`]; see [`WaitStrategy`] for
    /// what each costs. [`WaitStrategy::Monitor`] on a CPU without a
    /// user-level monitor waits as `SpinThenYield` ([`Lane::wait_strategy`](crate::Lane::wait_strategy)
    /// says which is used).
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Runtime, Submit, WaitStrategy, builtin::SPIN};
    /// // Threads that wait for long tasks sleep instead of spinning.
    /// let rt = Runtime::builder().wait_strategy(WaitStrategy::Park).build()?;
    /// let done = rt.submit(SPIN.args(&1_000_000))?.wait()?;
    /// assert!(done.device_time().as_micros() >= 1000);
    /// # Ok(()) }
    /// ```
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn wait_strategy(mut self, strategy: WaitStrategy) -> Self {
        self.wait = strategy;
        self
    }

    /// How often a waiting thread asks the driver whether the kernel still
    /// lives, and reads the heartbeats that tell a stalled worker (default
    /// 1 ms; at most one thread asks at a time, the others go on polling):
    /// a wait learns of a fault or a stop at most about this long after the
    /// driver reports it. A shorter interval finds it sooner, at the cost
    /// of a driver call (a stream query) per interval on a waiting thread;
    /// `Duration::ZERO` probes at every look. [`build`](Builder::build)
    /// refuses more than 1 s or more than the stall bound
    /// ([`Builder::stall_after`]): [`Error::InvalidConfig`].
    #[must_use = "a builder starts nothing until `build` is called"]
    pub fn probe_interval(mut self, every: Duration) -> Self {
        self.probe_every = every;
        self
    }

    /// What `build` refuses before it touches the driver: the settings
    /// ([`Builder::validate`]), then the embedded kernel where this runtime
    /// or any of its lanes runs it ([`Error::KernelNotBuilt`]).
    pub(crate) fn check_before_driver(&self) -> Result<()> {
        self.validate()?;
        let lanes = self.lanes.iter().map(|l| &l.image);
        if std::iter::once(&self.image)
            .chain(lanes)
            .any(|i| matches!(i, Image::Embedded))
        {
            crate::cuda::image::image()?;
        }
        Ok(())
    }

    /// Checks the settings without touching the driver.
    pub(crate) fn validate(&self) -> Result<Geometry> {
        if 1 + self.lanes.len() > MAX_LANES {
            return Err(Error::InvalidConfig(format!(
                "{} lanes: a runtime has at most {MAX_LANES} (each a resident kernel)",
                1 + self.lanes.len()
            )));
        }
        if self
            .state_bytes
            .checked_next_multiple_of(crate::runtime::arena::ALIGN)
            .is_none_or(|b| b > isize::MAX as usize)
        {
            return Err(Error::InvalidConfig(format!(
                "state_memory({}) is too large",
                self.state_bytes
            )));
        }
        for (i, lane) in self.lanes.iter().enumerate() {
            let i = i + 1;
            if lane.sm_partition.is_some() || !lane.lanes.is_empty() {
                return Err(Error::InvalidConfig(format!(
                    "lane {i} names a partition or lanes of its own: a lane runs in its \
                     runtime's partition ({:?} SMs)",
                    self.sm_partition
                )));
            }
            // The lane's own error, naming the lane where it has words.
            lane.validate().map_err(|e| match e {
                Error::InvalidConfig(m) => Error::InvalidConfig(format!("lane {i}: {m}")),
                Error::InvalidModule(m) => Error::InvalidModule(format!("lane {i}: {m}")),
                other => other,
            })?;
        }
        if let Some(cpu) = self.completion_cpu
            && !crate::runtime::wait::pin::allowed(cpu)
        {
            return Err(Error::InvalidConfig(format!(
                "completion_cpu {cpu}: this process may not run there (its affinity mask), or \
                 this OS pins no thread"
            )));
        }
        if let Image::Caller(bytes) = &self.image {
            crate::cuda::image::check_caller(bytes)?;
            crate::cuda::image::check_name(&self.kernel)?;
        }
        if let Some(n) = self.trace
            && n > crate::trace::MAX_TRACE_RECORDS
        {
            return Err(Error::InvalidConfig(format!(
                "trace({n}): at most {} records (64 bytes each)",
                crate::trace::MAX_TRACE_RECORDS
            )));
        }
        if self.sm_partition == Some(0) {
            return Err(Error::InvalidConfig(
                "an SM partition of 0 SMs: ask for at least 1 (rounded up to the device's smallest)"
                    .into(),
            ));
        }
        let geo = Geometry::new(self.capacity)?;
        let (w, r) = (self.workers, self.rings);
        if r == 0 || !r.is_power_of_two() || r > w.max(1) {
            return Err(Error::InvalidConfig(format!(
                "rings {r} must be a power of two from 1 to the workers ({w})"
            )));
        }
        if w == 0 || !w.is_power_of_two() || w > MAX_WORKERS || w / r > self.capacity {
            return Err(Error::InvalidConfig(format!(
                "workers {w} must be a power of two from 1 to min(capacity {} x rings {r}, {MAX_WORKERS})",
                self.capacity
            )));
        }
        let pollers = self.pollers_per_worker();
        self.width.validate()?;
        if self.width.is_wide() && (pollers != 1 || self.io != (0, 0)) {
            return Err(Error::InvalidConfig(format!(
                "a wide lane ({:?}) has one poller per worker and no IO areas (got pollers \
                 {pollers}, io {:?})",
                self.width, self.io
            )));
        }
        if !matches!(pollers, 1 | 2 | 4 | 8) || pollers as usize > MAX_POLLERS {
            return Err(Error::InvalidConfig(format!(
                "pollers {pollers} must be 1, 2, 4 or 8"
            )));
        }
        if self.io.0 > IO_MAX_BYTES || self.io.1 > IO_MAX_BYTES {
            return Err(Error::InvalidConfig(format!(
                "io areas of {} and {} bytes: each at most {IO_MAX_BYTES}",
                self.io.0, self.io.1
            )));
        }
        if self.stall_after < Duration::from_millis(10) {
            return Err(Error::InvalidConfig(format!(
                "stall_after {:?} must be at least 10 ms (workers beat every 0.1 ms, every 8 polls)",
                self.stall_after
            )));
        }
        if self.probe_every > PROBE_AT_MOST || self.probe_every > self.stall_after {
            return Err(Error::InvalidConfig(format!(
                "probe_interval {:?} must be at most {PROBE_AT_MOST:?} and at most stall_after \
                 ({:?}): waits learn of a fault or a stop only at a probe",
                self.probe_every, self.stall_after
            )));
        }
        if let IdlePolicy::Quiet { after } = self.idle
            && (after.is_zero() || after.as_nanos() > u32::MAX as u128)
        {
            return Err(Error::InvalidConfig(format!(
                "idle quiet needs 0 < after <= {} ns (got {after:?})",
                u32::MAX
            )));
        }
        if let IdlePolicy::Backoff { spin, max_sleep } = self.idle
            && (max_sleep.is_zero()
                || max_sleep > Duration::from_millis(1)
                || spin.as_nanos() > u32::MAX as u128)
        {
            return Err(Error::InvalidConfig(format!(
                "idle backoff needs 0 < max_sleep <= 1 ms and spin <= {} ns (got {max_sleep:?}, {spin:?})",
                u32::MAX
            )));
        }
        Ok(geo)
    }

    /// What a lane's shared state keeps of these settings.
    pub(crate) fn settings(&self) -> Settings {
        Settings {
            device: self.device,
            probe_every: self.probe_every,
            stall_after: self.stall_after,
            stop_timeout: self.stop_timeout,
            wait: self.wait,
            completion_cpu: self.completion_cpu,
            width: self.width,
        }
    }

    /// The memory plan of these settings, once they are checked.
    pub(crate) fn plan(&self) -> Result<Plan> {
        let geo = self.validate()?;
        Ok(Plan::new(
            geo,
            self.rings,
            self.workers,
            self.pollers_per_worker() as usize,
            self.start_seq,
            self.io,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::lane::Runtime;

    #[test]
    fn builder_validation_needs_no_driver() {
        let bad = |b: Builder| matches!(b.validate(), Err(Error::InvalidConfig(_)));
        assert!(bad(Runtime::builder().capacity(0)));
        assert!(bad(Runtime::builder().capacity(100)));
        assert!(bad(Runtime::builder().capacity(1 << 21)));
        assert!(bad(Runtime::builder().workers(0)));
        assert!(bad(Runtime::builder().workers(3)));
        assert!(bad(Runtime::builder().capacity(4).workers(8)));
        assert!(bad(Runtime::builder().capacity(1 << 20).workers(2048)));
        assert!(bad(Runtime::builder().rings(0)));
        assert!(bad(Runtime::builder().workers(8).rings(3)));
        assert!(bad(Runtime::builder().workers(4).rings(8)));
        assert!(bad(Runtime::builder().capacity(4).workers(16).rings(2)));
        assert!(bad(Runtime::builder().pollers(0)));
        assert!(bad(Runtime::builder().pollers(3)));
        assert!(bad(Runtime::builder().pollers(16)));
        let quiet = |after| IdlePolicy::Quiet { after };
        assert!(bad(Runtime::builder().idle(quiet(Duration::ZERO))));
        assert!(bad(Runtime::builder().idle(quiet(Duration::from_secs(5)))));
        assert!(
            Runtime::builder()
                .idle(quiet(Duration::from_nanos(u32::MAX as u64)))
                .validate()
                .is_ok()
        );
        let backoff = |spin, max_sleep| IdlePolicy::Backoff { spin, max_sleep };
        assert!(bad(
            Runtime::builder().idle(backoff(Duration::ZERO, Duration::ZERO))
        ));
        assert!(bad(
            Runtime::builder().idle(backoff(Duration::ZERO, Duration::from_millis(2)))
        ));
        assert!(bad(Runtime::builder().idle(backoff(
            Duration::from_secs(5),
            Duration::from_micros(10)
        ))));
        assert!(Runtime::builder().pollers(2).validate().is_ok());
        assert!(Runtime::builder().pollers(8).validate().is_ok());
        assert!(
            Runtime::builder()
                .idle(backoff(
                    Duration::from_micros(100),
                    Duration::from_micros(20)
                ))
                .validate()
                .is_ok()
        );
        assert!(Runtime::builder().validate().is_ok());
        assert!(Runtime::builder().capacity(1).workers(1).validate().is_ok());
        assert!(
            Runtime::builder()
                .capacity(4)
                .workers(16)
                .rings(4)
                .validate()
                .is_ok()
        );
        assert!(Runtime::builder().workers(4).rings(4).validate().is_ok());
    }

    #[test]
    fn the_default_shape_is_one_worker_of_eight_pollers() {
        let b = Runtime::builder();
        assert_eq!((b.workers, b.pollers_per_worker()), (1, 8));
        // More workers: one poller each, unless told.
        let b = Runtime::builder().workers(4);
        assert_eq!(b.pollers_per_worker(), 1);
        assert_eq!(
            Runtime::builder()
                .workers(4)
                .pollers(2)
                .pollers_per_worker(),
            2
        );
        assert_eq!(Runtime::builder().pollers(1).pollers_per_worker(), 1);
    }

    #[test]
    fn lanes_partitions_and_pinning_are_checked_before_the_driver() {
        let bad = |b: Builder| match b.validate() {
            Err(Error::InvalidConfig(why)) => Some(why),
            _ => None,
        };
        // A lane's device is its runtime's: not read, not refused.
        assert!(
            Runtime::builder()
                .device(1)
                .add_lane(Runtime::builder())
                .add_lane(Runtime::builder().device(7))
                .validate()
                .is_ok()
        );
        for lane in [
            Runtime::builder().sm_partition(8),
            Runtime::builder().add_lane(Runtime::builder()),
            Runtime::builder().workers(3),
        ] {
            let why = bad(Runtime::builder()
                .add_lane(Runtime::builder())
                .add_lane(lane))
            .unwrap();
            assert!(why.contains("lane 2"), "{why}");
        }
        assert!(bad(Runtime::builder().sm_partition(0)).is_some());
        assert!(bad(Runtime::builder().completion_cpu(usize::MAX)).is_some());
        assert!(
            Runtime::builder()
                .sm_partition(8)
                .add_lane(Runtime::builder().workers(64))
                .validate()
                .is_ok()
        );
    }

    /// `Builder::io` states the device memory each slot takes: what the
    /// plan allocates (IO_SEEN in `cuda/pkq_layout.h`).
    #[test]
    fn the_io_docs_state_the_device_memory_per_slot() {
        use crate::layout::IO_SEEN_WORDS;
        let plan = |io| Runtime::builder().capacity(16).io(io, 0).plan().unwrap();
        let per_slot = (plan(1).io_device_bytes() - plan(1).io_scratch_bytes()) / 16;
        assert_eq!(per_slot, IO_SEEN_WORDS * 8);
        let docs = include_str!("builder.rs");
        assert!(
            docs.contains(&format!("and {per_slot} bytes per slot;")),
            "Builder::io's docs name another size than the {per_slot} bytes a slot takes"
        );
    }
}
