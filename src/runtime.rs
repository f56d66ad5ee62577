//! The runtime: a resident kernel serving its submission rings, and the safe
//! API over it.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use bytemuck::Pod;
use crossbeam_utils::Backoff;
use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::driver;
use crate::error::{Error, Result};
use crate::kernel::{Image, Kernel, KernelState};
use crate::layout::{
    CQE_WORDS, CTRL_BYTES, CTRL_STOP, KernelParams, MAX_POLLERS, MAX_WARPS_PER_BLOCK, MAX_WORKERS,
    PACK_TASKS, SECTION_ALIGN, SLOT_WORDS, STATE_BITS, STOP_VALUE, WORKER_BAD_TAG, WORKER_RUNNING,
};
use crate::mapped::MappedBuffer;
use crate::ops::Op;
use crate::queue::{Queue, Refusal, Words};
use crate::ring::Geometry;
use crate::slot::SlotImage;
use crate::ticket::Ticket;
use crate::typed_op::{OpTable, Signature, TypedOp};

/// How long a waiter spins before it starts yielding the CPU.
const SPIN_FOR: Duration = Duration::from_micros(200);
/// How often waiters ask the driver whether the kernel still lives.
const PROBE_EVERY: Duration = Duration::from_millis(1);
/// How long the kernel's stream may stay unqueryable before waiters give up.
const UNKNOWN_FOR: Duration = Duration::from_millis(200);
/// The resident kernel of pkq's embedded module.
const WORKER_KERNEL: &str = "pkq_worker_kernel";
/// Polls between two looks at the clock.
const POLLS_PER_CHECK: u32 = 64;

/// What a worker does while no task is waiting for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Poll without pause: the lowest latency. Each worker keeps `pollers`
    /// warps busy, each with a PCIe read in flight.
    Spin,
    /// Poll without pause for `spin`, then sleep (`__nanosleep`) between
    /// polls, doubling from 64 ns up to `max_sleep` (at most 1 ms). A task
    /// that arrives while its worker sleeps waits up to `max_sleep` more.
    Backoff {
        /// How long an idle worker spins before it sleeps.
        spin: Duration,
        /// The longest sleep between two polls.
        max_sleep: Duration,
    },
}

/// Configures and starts a [`Runtime`].
#[derive(Clone, Debug)]
pub struct Builder {
    device: usize,
    capacity: usize,
    workers: usize,
    rings: usize,
    pollers: u32,
    idle: IdlePolicy,
    start_timeout: Duration,
    stop_timeout: Duration,
    image: Image,
    kernel: String,
    ops: Vec<Signature>,
    start_seq: u64,
    probe_every: Duration,
    stall_after: Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            device: 0,
            capacity: 1024,
            workers: 4,
            rings: 1,
            pollers: 1,
            idle: IdlePolicy::Spin,
            start_timeout: Duration::from_secs(10),
            stop_timeout: Duration::from_secs(10),
            image: Image::Embedded,
            kernel: WORKER_KERNEL.to_string(),
            ops: Vec::new(),
            start_seq: 0,
            probe_every: PROBE_EVERY,
            stall_after: Duration::from_secs(1),
        }
    }
}

impl Builder {
    /// The CUDA device index (default 0).
    pub fn device(mut self, index: usize) -> Self {
        self.device = index;
        self
    }

    /// Slots in each submission ring: a power of two from 1 to 2^20 (default
    /// 1024). At most this many tasks of a ring are submitted and not yet
    /// completed; completions their tickets have not read yet move to the
    /// host when a producer needs their slot.
    pub fn capacity(mut self, slots: usize) -> Self {
        self.capacity = slots;
        self
    }

    /// Workers of the resident kernel: a power of two, at most 1024 and the
    /// capacity times the rings (default 4, on one multiprocessor), each
    /// `pollers` warps, eight warps to a multiprocessor (so the default
    /// leaves every other multiprocessor to the application; 64 workers take
    /// 8 of the H100's 132). Each ring has `workers / rings` of them; within
    /// a ring, worker `i` runs the tasks whose sequence number is `i` modulo
    /// that count, in order. Different workers run concurrently and complete
    /// out of order. A slow task delays only the tasks queued behind it on
    /// its own worker (every `workers / rings`-th task of its ring after
    /// it), by its run time; the others go on.
    ///
    /// Each idle worker keeps one PCIe read of host memory in flight, and
    /// serves at most one task per read round trip (~1.8 µs with its
    /// completion): more workers serve more tasks per second, until the
    /// producing threads are the limit. On the H100 of
    /// `benches/results/throughput*.json`, 4 workers serve ~2.4 M tasks/s,
    /// 16 ~9 M/s, 64 ~36 M/s (with an application kernel's launch + sync
    /// ~1.06x as long as alone while pkq idles or serves), 256 ~130-137 M/s
    /// from four to eight threads batching; one thread alone stays near
    /// 35-40 M/s (see benches/NOTES.md, issue 4).
    pub fn workers(mut self, warps: usize) -> Self {
        self.workers = warps;
        self
    }

    /// Submission rings: a power of two, at most the workers (default 1).
    /// Each ring has its own slots, tail and `workers / rings` workers; a
    /// thread submits to ring `t % rings`, `t` being the order in which
    /// threads first submitted to any pkq runtime, so up to `rings` threads
    /// that start submitting one after another share no cache line on the
    /// submit path (the tail's compare-and-swap and the tickets' reference
    /// count are per ring). A thread's tasks run only on its ring's
    /// workers: for one producing thread, keep one ring. Measured on an
    /// H100 (`benches/results/throughput*.json`, two runs): four threads
    /// submitting one task at a time ran 6.8-7.3 M tasks/s on one ring and
    /// 35.0-36.3 M/s on four rings of 64 workers; eight threads on eight
    /// rings of 256 workers 66.8-68.6 M/s.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// let rt = pkq::Runtime::builder().workers(64).rings(4).build()?;
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| rt.submit(pkq::Op::NOP, &())?.wait().map(|_| ()));
    ///     }
    /// });
    /// # Ok(()) }
    /// ```
    pub fn rings(mut self, n: usize) -> Self {
        self.rings = n;
        self
    }

    /// Poller warps per worker: 1, 2, 4 or 8 (default 1); more is the latency
    /// setting. Each of a worker's pollers polls a copy of the worker's
    /// slots of its own (the producer writes every copy), started a
    /// fraction of a read round trip apart, so that a task lands in front
    /// of a poll sooner; the first to see it claims it and runs it.
    ///
    /// Costs: each submit stores its slot once per poller (tens of ns per
    /// copy on an H100's host), the slots take that many times the pinned
    /// memory, and the kernel that many warps per worker. Measured on an
    /// H100 (`benches/results/latency.json`, benches/NOTES.md, tenth and
    /// eleventh sessions): four pollers cut the round trip of a NOP by
    /// ~0.3 µs for tasks arriving at random moments and by ~0.6 µs back to
    /// back; eight take ~0.1 µs more off the dispatch. The latency setting
    /// is one worker of eight pollers: with four such workers the device's
    /// reads of host memory quadruple and the p99 rises by ~0.2-0.5 µs. One
    /// worker runs its tasks one after another (one task per round trip at
    /// most, and a long task holds up those behind it): for one task in
    /// flight at a time, as a control loop has (see [`Builder::workers`]).
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// let rt = pkq::Runtime::builder().workers(1).pollers(8).build()?;
    /// rt.submit(pkq::Op::NOP, &())?.wait()?;
    /// # Ok(()) }
    /// ```
    pub fn pollers(mut self, n: u32) -> Self {
        self.pollers = n;
        self
    }

    /// What idle workers do (default [`IdlePolicy::Spin`]).
    pub fn idle(mut self, policy: IdlePolicy) -> Self {
        self.idle = policy;
        self
    }

    /// How long a worker may go without polling before waits on its tasks
    /// return [`Error::Stalled`] (default 1 s; at least 10 ms). Workers beat
    /// a heartbeat while they poll, not while a task runs: set this above
    /// your longest task. Nothing is latched by a stall.
    pub fn stall_after(mut self, bound: Duration) -> Self {
        self.stall_after = bound;
        self
    }

    /// How long `build` waits for every worker to report in (default 10 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// How long shutdown waits for in-flight tasks and then for the kernel to
    /// exit (default 10 s each).
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// The first sequence number (for testing the wrap at 2^63).
    #[doc(hidden)]
    pub fn start_sequence(mut self, seq: u64) -> Self {
        self.start_seq = seq;
        self
    }

    /// Serves with kernel `kernel` of a device module of your own (fatbin,
    /// cubin or PTX bytes) instead of pkq's embedded kernel. The kernel must
    /// be built from pkq's device headers: it takes one `pkq_params` by value
    /// and serves the ring as `pkq_worker_kernel` does.
    ///
    /// [`build`](Builder::build) refuses an image the driver cannot load or
    /// a kernel of other parameters ([`Error::InvalidModule`]), a name
    /// the module lacks ([`Error::KernelMissing`]), and a module or kernel
    /// not loaded before while a pkq kernel runs on the device
    /// ([`Error::InvalidConfig`]: see [`Runtime`]).
    ///
    /// The module's code is trusted as any device code you load is: pkq
    /// checks the argument layouts its op table declares and refuses, on the
    /// safe calls, ops the table flags as dereferencing pointers and ops it
    /// does not list; what the handlers do with their arguments is theirs.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// let image = std::fs::read("my_kernels.fatbin").expect("built by build.rs");
    /// let rt = pkq::Runtime::builder().module(image, "my_worker_kernel").build()?;
    /// # Ok(()) }
    /// ```
    pub fn module(mut self, image: impl Into<Arc<[u8]>>, kernel: &str) -> Self {
        self.image = Image::Caller(image.into());
        self.kernel = kernel.to_string();
        self
    }

    /// Declares an op the kernel must serve with arguments like `A`:
    /// [`build`](Builder::build) checks its code, argument size, alignment
    /// and pointer flag against the module's op table (`PKQ_OP_TABLE`) and
    /// refuses a mismatch with [`Error::OpMismatch`] naming the op. (pkq's
    /// built-in ops are always checked against its own kernel.)
    pub fn op<A: Pod>(mut self, op: &TypedOp<A>) -> Self {
        self.ops.push(op.signature());
        self
    }

    /// How often waiters probe the kernel's liveness (for tests).
    #[doc(hidden)]
    pub fn probe_interval(mut self, every: Duration) -> Self {
        self.probe_every = every;
        self
    }

    /// Checks the settings without touching the driver.
    pub(crate) fn validate(&self) -> Result<Geometry> {
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
        if !matches!(self.pollers, 1 | 2 | 4 | 8) || self.pollers as usize > MAX_POLLERS {
            return Err(Error::InvalidConfig(format!(
                "pollers {} must be 1, 2, 4 or 8",
                self.pollers
            )));
        }
        if self.stall_after < Duration::from_millis(10) {
            return Err(Error::InvalidConfig(format!(
                "stall_after {:?} must be at least 10 ms (workers beat every 0.1 ms, every 8 polls)",
                self.stall_after
            )));
        }
        if let IdlePolicy::Backoff { spin, max_sleep } = self.idle {
            if max_sleep.is_zero()
                || max_sleep > Duration::from_millis(1)
                || spin.as_nanos() > u32::MAX as u128
            {
                return Err(Error::InvalidConfig(format!(
                    "idle backoff needs 0 < max_sleep <= 1 ms and spin <= {} ns (got {max_sleep:?}, {spin:?})",
                    u32::MAX
                )));
            }
        }
        Ok(geo)
    }

    /// Starts the resident kernel and returns the runtime once every worker
    /// is serving.
    ///
    /// Errors: [`Error::InvalidConfig`], [`Error::KernelNotBuilt`],
    /// [`Error::NoDriver`], [`Error::NoDevice`], [`Error::DeviceOutOfRange`],
    /// [`Error::UnsupportedDevice`], [`Error::KernelTimeout`], or the CUDA
    /// error of a failed driver call.
    pub fn build(self) -> Result<Runtime> {
        let geo = self.validate()?;
        if let Image::Embedded = self.image {
            crate::kernel::image()?;
        }
        let ctx = driver::open(self.device)?;

        let (cap, rings) = (geo.capacity(), self.rings);
        let align = SECTION_ALIGN / 8;
        // One copy of the slots for each poller warp of a worker.
        let copies = self.pollers as usize;
        let ctrl_at = (copies * rings * cap * SLOT_WORDS).next_multiple_of(align);
        let states_at = (rings * cap * CQE_WORDS).next_multiple_of(align);
        let pollers = self.workers * self.pollers as usize;
        let ctrl_words = self.workers * CTRL_BYTES / 8;
        let args_at = (ctrl_at + ctrl_words).next_multiple_of(align);
        let results_at = (states_at + 2 * pollers).next_multiple_of(align);
        let pack = cap * PACK_TASKS;
        let h2d = MappedBuffer::new(&ctx, args_at + rings * pack)?;
        let d2h = MappedBuffer::new(&ctx, results_at + rings * pack)?;
        let ctrl = h2d.words(ctrl_at, ctrl_words);
        let queues = (0..rings)
            .map(|r| {
                let mem = [
                    h2d.words(r * cap * SLOT_WORDS, cap * SLOT_WORDS),
                    d2h.words(r * cap * CQE_WORDS, cap * CQE_WORDS),
                    h2d.words(args_at + r * pack, pack),
                    d2h.words(results_at + r * pack, pack),
                ];
                let more = (1..copies)
                    .map(|c| h2d.words((c * rings + r) * cap * SLOT_WORDS, cap * SLOT_WORDS))
                    .collect();
                Queue::new(geo, mem, self.start_seq).with_copies(more)
            })
            .collect::<Box<[Queue]>>();
        let states = d2h.words(states_at, pollers);
        let beats = d2h.words(states_at + pollers, pollers);
        let params = KernelParams {
            sq: h2d.device_addr(0),
            cq: d2h.device_addr(0),
            ctrl: h2d.device_addr(ctrl_at),
            states: d2h.device_addr(states_at),
            start_seq: self.start_seq & crate::ring::SEQ_MASK,
            capacity_log2: geo.log2(),
            workers: self.workers as u32,
            pollers: self.pollers,
            idle_spin_ns: match self.idle {
                IdlePolicy::Spin => 0,
                IdlePolicy::Backoff { spin, .. } => spin.as_nanos() as u32,
            },
            idle_sleep_max_ns: match self.idle {
                IdlePolicy::Spin => 0,
                IdlePolicy::Backoff { max_sleep, .. } => max_sleep.as_nanos() as u32,
            },
            rings: rings as u32,
            pack_args: h2d.device_addr(args_at),
            pack_results: d2h.device_addr(results_at),
        };
        let mut kernel = Kernel::from_image(&ctx, &self.image, &self.kernel, true, vec![h2d, d2h])?;
        let mut ops = std::mem::take(&mut kernel.ops);
        if let Image::Caller(_) = self.image {
            ops = ops.refusing_unlisted();
        }
        if let Image::Embedded = self.image {
            for sig in crate::builtin::signatures() {
                ops.check(&sig)?;
            }
        }
        for sig in &self.ops {
            ops.check(sig)?;
        }
        let shared = Arc::new(Shared {
            queues,
            ctrl,
            states,
            beats,
            ops,
            fault: OnceLock::new(),
            liveness: Liveness::new(self.probe_every, self.stall_after, pollers),
            start_seq: self.start_seq & crate::ring::SEQ_MASK,
            stopped: Mutex::new(None),
            stop_timeout: self.stop_timeout,
            device: self.device,
            workers: self.workers,
            ring_worker_mask: (self.workers / rings) as u64 - 1,
            orphans: crate::sync::AtomicU64::new(1),
            kernel,
        });
        LIVE.fetch_add(1, Ordering::Relaxed);
        // A worker's pollers share a block (and its claim counter); both
        // counts are powers of two, so blocks are full.
        let warps = pollers.min(MAX_WARPS_PER_BLOCK);
        let cfg = LaunchConfig {
            grid_dim: ((pollers / warps) as u32, 1, 1),
            block_dim: (warps as u32 * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: pkq_worker_kernel takes one `pkq_params` by value (layout
        // checked in layout.rs); its addresses point into the kernel's own
        // mapped memory, which outlives it (see `Kernel`).
        unsafe {
            shared.kernel.launch(cfg, |b| {
                b.arg(&params);
            })?
        };
        let rt = Runtime { shared };
        rt.shared
            .await_workers(Instant::now() + self.start_timeout)?;
        Ok(rt)
    }
}

/// A resident kernel serving submission rings in mapped host memory.
///
/// `Runtime` is `Send + Sync`: any number of threads may submit through
/// `&Runtime` (see [`Builder::rings`] for how they spread over the rings). Dropping it shuts it down (see [`Runtime::shutdown`]).
///
/// While a runtime lives, do not synchronize its CUDA context
/// (`CudaContext::synchronize`, `cudaDeviceSynchronize`): that waits for every
/// kernel in the context, the resident one included, and so never returns.
/// Synchronize streams instead. For the same reason, create your own streams
/// before building a runtime, or on a context whose event tracking is off:
/// cudarc's first `new_stream` on a tracking context synchronizes it.
///
/// Several runtimes may run on one device at once. The driver waits for
/// running kernels before it loads a module, so pkq loads each module once
/// per device and keeps it (and the device's primary context) for the
/// process: the first runtime with a given module and kernel must be built
/// while no pkq kernel (a runtime, a floor, a probe) runs on the device;
/// later ones reuse what it loaded. A new one is refused with
/// [`Error::InvalidConfig`] rather than waited for. A runtime dropped while
/// another runs keeps its pinned rings until none runs.
pub struct Runtime {
    /// Tickets and batches point here without counting (see `RingPtr`).
    pub(crate) shared: Arc<Shared>,
}

/// What a ticket or batch holds: the runtime's shared state, as a pointer
/// that counts no reference, and which ring its tasks are in. A count per
/// task (an `Arc`) cost two locked instructions a task: four producers
/// 12-36% of their rate (benches/NOTES.md, eighth session). The memory
/// stays valid by the orphan protocol instead: while a handle owns a slot,
/// the runtime is alive or has counted the handle a share
/// (`Queue::orphan`), and the handle touches the memory only while it owns
/// a slot or holds a share (`Shared::release`).
#[derive(Clone, Copy)]
pub(crate) struct RingPtr {
    shared: NonNull<Shared>,
    pub(crate) ring: usize,
}

// SAFETY: `Shared` is `Send + Sync`; the pointer is valid for as long as a
// handle may use it (see the type's docs), whichever thread that is on.
unsafe impl Send for RingPtr {}
// SAFETY: as above.
unsafe impl Sync for RingPtr {}

impl RingPtr {
    /// The runtime's shared state. Only for a handle that owns a slot of
    /// this ring or holds an orphan share (see the type's docs).
    #[inline(always)]
    pub(crate) fn shared(&self) -> &Shared {
        // SAFETY: the runtime frees `Shared` only once no handle owns a
        // slot (its own drop, when it counted no share) or the last share
        // is given back, and the callers own a slot or hold a share.
        unsafe { self.shared.as_ref() }
    }

    #[inline(always)]
    pub(crate) fn queue(&self) -> &Queue {
        &self.shared().queues[self.ring]
    }

    /// The worker that serves sequence number `seq` of this ring.
    #[inline]
    pub(crate) fn worker_of(&self, seq: u64) -> usize {
        let s = self.shared();
        let in_ring = (seq.wrapping_sub(s.start_seq) & s.ring_worker_mask) as usize;
        self.ring + s.queues.len() * in_ring
    }

    /// Gives back `shares` orphan shares (from `Take::Orphaned` or
    /// `Queue::detach`); the last frees the runtime's memory.
    ///
    /// # Safety
    /// The caller holds `shares` shares and does not touch the runtime's
    /// memory (through this pointer or a reference from it) afterwards.
    pub(crate) unsafe fn release(self, shares: u64) {
        // SAFETY: the caller's shares keep `Shared` alive until here.
        unsafe { Shared::release(self.shared.as_ptr(), shares) }
    }
}

/// The order in which this thread first touched a runtime: it picks the
/// thread's ring.
#[inline(always)]
fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    INDEX.with(|i| *i)
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("device", &self.shared.device)
            .field("capacity", &self.capacity())
            .field("workers", &self.workers())
            .field("rings", &self.rings())
            .finish()
    }
}

impl Runtime {
    /// A builder with the defaults: device 0, 1024 slots, 4 workers.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Submits a task, waiting (spinning, then yielding) while the ring is
    /// full. `args` is copied inline into the slot: at most 48 bytes.
    ///
    /// Refuses ops that dereference device pointers or fault the device on
    /// purpose ([`Error::UncheckedOp`]);
    /// after [`Runtime::shutdown`] began, returns [`Error::Closed`].
    pub fn submit<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        self.submit_bytes(op, bytemuck::bytes_of(args))
    }

    /// Like [`Runtime::submit`], but returns [`Error::Full`] instead of
    /// waiting for a free slot.
    pub fn try_submit<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        self.shared.ops.refuse(op)?;
        let image = SlotImage::new(op.0, bytemuck::bytes_of(args))?;
        match submit(self.ring(), op, &image, false) {
            // A caller looping on Full must learn if the kernel died.
            Err(Error::Full) => {
                self.shared.probe_if_due(Instant::now())?;
                Err(Error::Full)
            }
            other => other,
        }
    }

    /// Submits a task whose arguments are raw bytes (at most 48).
    pub fn submit_bytes(&self, op: Op, args: &[u8]) -> Result<Ticket> {
        self.shared.ops.refuse(op)?;
        let image = SlotImage::new(op.0, args)?;
        submit(self.ring(), op, &image, true)
    }

    /// Submits any op, including those whose handler dereferences device
    /// pointers from its arguments.
    ///
    /// # Safety
    /// Every device address in `args` must be valid for what the op does with
    /// it (for [`Op::AXPY`]: `n` `f32`s readable at `x`, writable at `y`, not
    /// overlapping unless equal, in the runtime's context), with no other
    /// work touching that memory until the task completed, and stay so until
    /// the returned ticket has reported completion or the kernel is known to
    /// have stopped ([`Runtime::shutdown`] returned `Ok`). An error from a
    /// wait alone does not mean the kernel stopped.
    pub unsafe fn submit_unchecked<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        let image = SlotImage::new(op.0, bytemuck::bytes_of(args))?;
        submit(self.ring(), op, &image, true)
    }

    /// Submits a task of a declared op with its typed arguments, waiting
    /// while the ring is full. Refuses an op whose declaration disagrees with
    /// the kernel's op table ([`Error::OpMismatch`]) and an op declared
    /// [`with_pointers`](TypedOp::with_pointers) ([`Error::UncheckedOp`]: use
    /// [`Runtime::call_unchecked`] or a safe wrapper).
    pub fn call<A: Pod>(&self, op: &TypedOp<A>, args: &A) -> Result<Ticket> {
        self.shared.ops.check(&op.signature())?;
        if op.takes_pointers() {
            return Err(Error::UncheckedOp(op.op()));
        }
        // SAFETY: the kernel's op table agrees with the declaration, which
        // says the op's handler dereferences no address from its arguments.
        unsafe { self.submit_unchecked(op.op(), args) }
    }

    /// [`Runtime::call`] for any declared op, including those whose handler
    /// dereferences device addresses among its arguments.
    ///
    /// # Safety
    /// As [`Runtime::submit_unchecked`]: every device address in `args` must
    /// be valid for what the op does with it until the ticket reported
    /// completion or the kernel is known to have stopped.
    pub unsafe fn call_unchecked<A: Pod>(&self, op: &TypedOp<A>, args: &A) -> Result<Ticket> {
        self.shared.ops.check(&op.signature())?;
        // SAFETY: the caller's contract, which is submit_unchecked's.
        unsafe { self.submit_unchecked(op.op(), args) }
    }

    /// The slot count of each ring.
    pub fn capacity(&self) -> usize {
        self.shared.queues[0].geometry().capacity()
    }

    /// The submission rings (see [`Builder::rings`]).
    pub fn rings(&self) -> usize {
        self.shared.queues.len()
    }

    /// The ring the calling thread submits to.
    #[inline(always)]
    pub(crate) fn ring(&self) -> RingPtr {
        RingPtr {
            shared: NonNull::from(&*self.shared),
            ring: thread_index() & (self.shared.queues.len() - 1),
        }
    }

    /// The kernel's worker warps.
    pub fn workers(&self) -> usize {
        self.shared.workers
    }

    /// The CUDA device index.
    pub fn device(&self) -> usize {
        self.shared.device
    }

    /// How many completions have been moved out of their slots so far, as
    /// io_uring counts completion-queue overflows: a producer that needs a
    /// slot whose task completed but whose ticket or batch has not read it
    /// yet moves the completion to the host's side table rather than wait
    /// for the holder. Moves keep `submit` from waiting on tickets some
    /// thread holds, but each costs a lock and a map entry, and the holder
    /// pays again to take it back. If the count grows under load,
    /// producers are lapping a slow reaper, or one that lost its core for
    /// a while (producer threads that share a core take turns by the
    /// scheduler's time slice, and each turn can lap the others): give the
    /// ring more slots than all producers together submit while the
    /// slowest holds its tasks, give each producer a core or a ring of its
    /// own ([`Builder::rings`]), or reap sooner.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// let rt = pkq::Runtime::builder().capacity(1 << 16).build()?;
    /// // ... producers submit and reap ...
    /// if rt.moved_completions() > 0 {
    ///     eprintln!("ring too small for the tasks held: {} moves", rt.moved_completions());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn moved_completions(&self) -> u64 {
        self.shared.queues.iter().map(Queue::moved).sum()
    }

    /// A snapshot of the ring and of every poller, for diagnosing a stall.
    #[doc(hidden)]
    pub fn debug_state(&self) -> String {
        let s = &self.shared;
        let pollers_per_worker = s.states.len() / s.workers;
        let mut out = String::new();
        for (r, q) in s.queues.iter().enumerate() {
            out += &format!("ring {r}: {}\n", q.debug_state());
        }
        for w in 0..s.states.len() {
            let word = s.states.at(w).load(Ordering::Acquire);
            out += &format!(
                "\n  worker {} poller {}: state {}, position {}",
                w / pollers_per_worker,
                w % pollers_per_worker,
                word & ((1 << STATE_BITS) - 1),
                word >> STATE_BITS,
            );
        }
        out
    }

    /// Shuts down: refuses new tasks ([`Error::Closed`] from then on), waits
    /// for every submitted task to complete (up to the stop timeout), tells
    /// the kernel to exit and waits for it. Tickets stay valid and report
    /// their results. Memory the device may touch is freed only after the
    /// kernel exited (and the last ticket is gone); if it never exits, it is
    /// leaked, not freed. Later calls (and `Drop`) return the first outcome.
    pub fn shutdown(&self) -> Result<()> {
        self.shared.stop(true)
    }

    /// Stops now: refuses new tasks ([`Error::Closed`]), tells the kernel to
    /// exit without running what is still queued (tasks already running
    /// finish), and waits for it (up to the stop timeout). Then every ticket
    /// whose task did not complete reports [`Error::Cancelled`]; completed
    /// ones still report their results. Later calls (and `shutdown`, and
    /// `Drop`) return the first outcome.
    pub fn cancel(&self) -> Result<()> {
        self.shared.stop(false)
    }

    /// Probes the kernel now: `Ok` while it serves; else the latched fault
    /// or stop ([`Error::DeviceFault`], [`Error::KernelStopped`],
    /// [`Error::Cancelled`]), or [`Error::Stalled`] for a worker silent past
    /// the stall bound. For supervisors; waits check this by themselves.
    pub fn health(&self) -> Result<()> {
        self.shared.health()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.shared.stop(true);
        // Tickets and batches may outlive the runtime; they count no
        // reference (see `RingPtr`). Keep one reference aside for the last
        // of them, hand each its share (`Queue::orphan`), then give back
        // the runtime's own share (counted since `build`): if it was the
        // last, the reference aside is dropped here, else by the handle
        // that gives back the last share.
        let aside = Arc::into_raw(Arc::clone(&self.shared));
        for queue in self.shared.queues.iter() {
            queue.orphan(&self.shared.orphans);
        }
        // SAFETY: the runtime's share, counted at `build`; from here on
        // the runtime touches `Shared` only through its own `Arc`, which
        // the reference aside does not replace.
        unsafe { Shared::release(aside, 1) };
    }
}

/// How many runtimes' memories are allocated (built, not yet freed): a
/// runtime's outlives it while its tickets or batches do (tests).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// How many runtimes' memories are allocated now: built and not yet freed
/// (dropped, and every ticket and batch of theirs gone). For tests.
#[doc(hidden)]
pub fn live_runtimes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// What a wait watches for silence (see [`Error::Stalled`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Watch {
    Nothing,
    Worker(usize),
    AnyWorker,
}

/// What the runtime and its tickets share.
pub(crate) struct Shared {
    /// One per ring.
    pub(crate) queues: Box<[Queue]>,
    /// Host-written control line (the stop word; see pkq_layout.h).
    ctrl: Words,
    /// Device-written worker state words (see pkq_layout.h).
    states: Words,
    /// Device-written heartbeat words, one per poller (see pkq_layout.h).
    beats: Words,
    /// The kernel's op table (which ops it serves, with what arguments).
    pub(crate) ops: OpTable,
    /// Every ring's first sequence number (see `RingRef::worker_of`).
    start_seq: u64,
    /// Why the kernel no longer serves, once known (a fault, or the end
    /// of a shutdown); every later wait reports it.
    fault: OnceLock<Error>,
    liveness: Liveness,
    /// The outcome of shutdown, once it ran.
    stopped: Mutex<Option<Result<()>>>,
    stop_timeout: Duration,
    pub(crate) device: usize,
    workers: usize,
    /// Each ring's workers less one (a power of two less one).
    ring_worker_mask: u64,
    /// Orphan shares: 1 (the runtime's own) until the runtime is dropped,
    /// then one more per task whose ticket or batch outlived it
    /// (`Queue::orphan`); the last given back frees this memory.
    orphans: crate::sync::AtomicU64,
    /// Last: owns the memory behind `queue`, `ctrl` and `states`.
    pub(crate) kernel: Kernel,
}

/// The shared schedule of liveness probes: at most one waiter asks the
/// driver at a time, once per interval; the others go on polling.
struct Liveness {
    epoch: Instant,
    every: Duration,
    /// Nanoseconds after `epoch` when the next probe is due.
    next_ns: AtomicU64,
    busy: AtomicBool,
    /// Nanoseconds after `epoch` since the stream could not be queried (0: it could).
    unknown_since_ns: AtomicU64,
    /// A worker whose every poller's heartbeat stayed the same this long is
    /// stalled.
    stall_after: Duration,
    /// Per poller: the heartbeat word as the last probe read it, and when
    /// (ns after `epoch`) a probe first saw that value. Written only by the
    /// probing thread (`busy`), read by any waiter.
    beat_seen: Box<[AtomicU64]>,
    beat_since_ns: Box<[AtomicU64]>,
    /// When (ns after `epoch`) the last probe finished reading the
    /// heartbeats: silences are measured up to it, never up to "now", so a
    /// waiter that finds another thread probing (or no probe for a long
    /// while) cannot mistake the time since the last probe for silence.
    /// Stored with release after the per-poller words, loaded with acquire
    /// before them.
    probed_ns: AtomicU64,
}

impl Liveness {
    fn new(every: Duration, stall_after: Duration, pollers: usize) -> Self {
        let zeros = || (0..pollers).map(|_| AtomicU64::new(0)).collect();
        Self {
            epoch: Instant::now(),
            every,
            next_ns: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            unknown_since_ns: AtomicU64::new(0),
            stall_after,
            beat_seen: zeros(),
            beat_since_ns: zeros(),
            probed_ns: AtomicU64::new(0),
        }
    }

    fn ns(&self, t: Instant) -> u64 {
        (t - self.epoch).as_nanos() as u64 + 1
    }

    /// Notes the heartbeat words `beat(p)` read at `t` (ns after `epoch`):
    /// when each was first seen with its value. Only the probing thread
    /// (`busy`) calls this.
    fn record_beats(&self, t: u64, beat: impl Fn(usize) -> u64) {
        for p in 0..self.beat_seen.len() {
            let v = beat(p);
            if v != self.beat_seen[p].load(Ordering::Relaxed)
                || self.beat_since_ns[p].load(Ordering::Relaxed) == 0
            {
                self.beat_seen[p].store(v, Ordering::Relaxed);
                self.beat_since_ns[p].store(t, Ordering::Relaxed);
            }
        }
        self.probed_ns.store(t, Ordering::Release);
    }

    /// How long every poller in `pollers` had shown the same heartbeat as of
    /// the last probe (zero before the first).
    fn silence(&self, pollers: std::ops::Range<usize>) -> Duration {
        let probed = self.probed_ns.load(Ordering::Acquire);
        pollers
            .map(|p| match self.beat_since_ns[p].load(Ordering::Relaxed) {
                0 => Duration::ZERO,
                since => Duration::from_nanos(probed.saturating_sub(since)),
            })
            .min()
            .unwrap_or_default()
    }
}

/// Submits one task to `ring` (waiting for room if `wait`).
#[inline]
fn submit(ring: RingPtr, op: Op, image: &SlotImage, wait: bool) -> Result<Ticket> {
    let queue = ring.queue();
    queue.prefetch_reservation();
    let shared = ring.shared();
    shared.check_open()?;
    let seq = shared.reserve(wait, || queue.try_reserve())?;
    queue.publish(seq, image);
    queue.prefetch_next(seq);
    Ok(Ticket::new(ring, seq, op))
}

impl Drop for Shared {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// Gives back `shares` orphan shares (see `Shared::orphans`); the last
    /// drops the reference the runtime kept aside for it.
    ///
    /// # Safety
    /// `this` comes from `Arc::into_raw` or `Arc::as_ptr` of the runtime's
    /// `Arc<Shared>`; the caller holds `shares` shares and does not touch
    /// `*this` afterwards.
    unsafe fn release(this: *const Shared, shares: u64) {
        // SAFETY: the caller's shares keep `*this` alive until this
        // subtraction; `AcqRel` orders every holder's accesses before the
        // last one's free (as `Arc`'s own count does).
        let before = unsafe { (*this).orphans.fetch_sub(shares, Ordering::AcqRel) };
        debug_assert!(
            before >= shares,
            "{before} orphan shares, {shares} given back"
        );
        if before == shares {
            // SAFETY: the last share: the runtime was dropped (its share is
            // in) and kept one reference aside for this, which nobody else
            // drops; no holder touches the memory any more.
            unsafe { Arc::decrement_strong_count(this) };
        }
    }

    /// Whether shutdown began (every ring closes at once).
    pub(crate) fn is_closed(&self) -> bool {
        self.queues[0].is_closed()
    }

    /// [`Shared::check`] as a submit reports it: after shutdown the latched
    /// reason is "shut down", so say [`Error::Closed`].
    #[inline]
    pub(crate) fn check_open(&self) -> Result<()> {
        self.check()
            .map_err(|e| if self.is_closed() { Error::Closed } else { e })
    }

    /// Reserves with `try_once` (one slot, or a batch's run); while the ring
    /// is full, waits for room if `wait`, else returns [`Error::Full`].
    #[inline]
    pub(crate) fn reserve(
        &self,
        wait: bool,
        try_once: impl Fn() -> std::result::Result<u64, Refusal>,
    ) -> Result<u64> {
        match try_once() {
            Ok(seq) => Ok(seq),
            Err(Refusal::Full) if wait => {
                self.wait_for(None, Watch::AnyWorker, || match try_once() {
                    Ok(seq) => Some(Ok(seq)),
                    Err(Refusal::Closed) => Some(Err(Error::Closed)),
                    Err(Refusal::Full) => None,
                })?
            }
            Err(r) => Err(r.into()),
        }
    }

    /// Poller `w`'s state, without its position or phase.
    fn state(&self, w: usize) -> u64 {
        self.states.at(w).load(Ordering::Acquire) & ((1 << STATE_BITS) - 1)
    }

    /// The latched fault, if any.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        match self.fault.get() {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
    }

    /// Sets every worker's stop word: a release store each (the release
    /// orders nothing the device relies on: the word alone is the message),
    /// which the worker reads with one of its next slot polls.
    fn tell_stop(&self) {
        for w in 0..self.workers {
            self.ctrl
                .at(w * CTRL_BYTES / 8 + CTRL_STOP)
                .store(STOP_VALUE, Ordering::Release);
        }
    }

    /// Latches `e` as why the runtime no longer serves, and tells the kernel
    /// to stop: after a fault is reported, no task starts (a waiter that
    /// gave up must not find its task running later).
    fn fail(&self, e: Error) -> Error {
        let _ = self.fault.set(e);
        self.tell_stop();
        self.fault.get().cloned().unwrap()
    }

    /// Probes liveness if a probe is due and no other thread is probing.
    pub(crate) fn probe_if_due(&self, now: Instant) -> Result<()> {
        let t = self.liveness.ns(now);
        if t < self.liveness.next_ns.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.probe_unless_busy(now).unwrap_or(Ok(()))
    }

    /// Probes now, and schedules the next probe one interval later, unless
    /// another thread is probing (then `None`).
    fn probe_unless_busy(&self, now: Instant) -> Option<Result<()>> {
        if self.liveness.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        let outcome = self.probe(now);
        let every = self.liveness.every.as_nanos() as u64;
        self.liveness
            .next_ns
            .store(self.liveness.ns(now) + every, Ordering::Relaxed);
        self.liveness.busy.store(false, Ordering::Release);
        Some(outcome)
    }

    /// Asks whether the kernel still serves (a stream query and a look at
    /// the worker state words); latches what ended it.
    fn probe(&self, now: Instant) -> Result<()> {
        self.check()?;
        let state = self.kernel.state();
        if !matches!(state, KernelState::Unknown(..)) {
            self.liveness.unknown_since_ns.store(0, Ordering::Relaxed);
        }
        match state {
            KernelState::Running => {
                // Stamped after the stream query, which may have waited.
                self.read_heartbeats(self.liveness.ns(Instant::now()));
                for w in 0..self.states.len() {
                    if self.state(w) == WORKER_BAD_TAG {
                        return Err(self.fail(Error::KernelStopped(format!(
                            "poller warp {w} found a slot with a corrupt tag and stopped"
                        ))));
                    }
                }
                Ok(())
            }
            KernelState::Finished if self.is_closed() => Err(self.fail(Error::KernelStopped(
                "the runtime was shut down before the task completed".into(),
            ))),
            KernelState::Finished => {
                Err(self.fail(Error::KernelStopped("it exited unexpectedly".into())))
            }
            KernelState::Faulted(e) => Err(self.fail(Error::DeviceFault(driver::error_name(e)))),
            KernelState::Unknown(call, e) => {
                let t = self.liveness.ns(now);
                let since = match self.liveness.unknown_since_ns.load(Ordering::Relaxed) {
                    0 => {
                        self.liveness.unknown_since_ns.store(t, Ordering::Relaxed);
                        t
                    }
                    since => since,
                };
                if Duration::from_nanos(t - since) < UNKNOWN_FOR {
                    return Ok(());
                }
                Err(self.fail(Error::KernelStopped(format!(
                    "its stream could not be queried for {UNKNOWN_FOR:?} ({call}: {})",
                    driver::error_name(e)
                ))))
            }
        }
    }

    /// Reads every heartbeat word and notes when each was first seen with
    /// its current value (only the probing thread calls this).
    fn read_heartbeats(&self, t: u64) {
        self.liveness
            .record_beats(t, |p| self.beats.at(p).load(Ordering::Acquire));
    }

    /// How long every poller of worker `w` had shown the same heartbeat, as
    /// of the last probe.
    fn silence(&self, w: usize) -> Duration {
        let per = self.beats.len() / self.workers;
        self.liveness.silence(w * per..(w + 1) * per)
    }

    /// [`Error::Stalled`] if a watched worker has been silent past the bound.
    fn check_stall(&self, watch: Watch) -> Result<()> {
        let workers = match watch {
            Watch::Nothing => return Ok(()),
            Watch::Worker(w) => w..w + 1,
            Watch::AnyWorker => 0..self.workers,
        };
        for worker in workers {
            let silent = self.silence(worker);
            if silent > self.liveness.stall_after {
                return Err(Error::Stalled { worker, silent });
            }
        }
        Ok(())
    }

    /// Probes now (unless another thread is probing) and reports the first
    /// problem: a latched fault or stop, or a stalled worker.
    pub(crate) fn health(&self) -> Result<()> {
        let now = Instant::now();
        self.probe_unless_busy(now).unwrap_or(Ok(()))?;
        self.check()?;
        self.check_stall(Watch::AnyWorker)
    }

    /// Polls `ready` until it yields, spinning first and then yielding the
    /// CPU, with a liveness probe every millisecond; `Timeout` at `deadline`,
    /// [`Error::Stalled`] if what `watch` names goes silent.
    pub(crate) fn wait_for<T>(
        &self,
        deadline: Option<Instant>,
        watch: Watch,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        // The clock is first read after a round of polls: a round trip that
        // ends within it never pays for a clock read.
        let mut start = None;
        let backoff = Backoff::new();
        loop {
            for _ in 0..POLLS_PER_CHECK {
                if let Some(v) = ready() {
                    return Ok(v);
                }
                std::hint::spin_loop();
            }
            self.check()?;
            let now = Instant::now();
            let start = *start.get_or_insert(now);
            // Probes begin after one interval of waiting: a healthy round
            // trip never pays for one.
            if now - start >= self.liveness.every {
                self.probe_if_due(now)?;
                self.check_stall(watch)?;
            }
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout);
            }
            if now - start >= SPIN_FOR {
                backoff.snooze();
            }
        }
    }

    fn await_workers(&self, deadline: Instant) -> Result<()> {
        loop {
            let running = (0..self.states.len()).all(|w| self.state(w) == WORKER_RUNNING);
            if running {
                return Ok(());
            }
            self.probe(Instant::now())?;
            if Instant::now() >= deadline {
                let _ = self.stop(false);
                return Err(Error::KernelTimeout(
                    "start in time (not all workers reported in)",
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Close, drain (if `drain`), stop the kernel, wait for it; without the
    /// drain, latch [`Error::Cancelled`] for the tasks left. Runs once; later
    /// calls return the first outcome.
    pub(crate) fn stop(&self, drain: bool) -> Result<()> {
        let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(outcome) = &*stopped {
            return outcome.clone();
        }
        let ends: Vec<u64> = self.queues.iter().map(Queue::close).collect();
        let drain_deadline = Instant::now() + self.stop_timeout;
        let drained = if drain {
            self.wait_for(Some(drain_deadline), Watch::Nothing, || {
                let mut rings = self.queues.iter().zip(&ends);
                rings.all(|(q, &end)| q.incomplete(end) == 0).then_some(())
            })
        } else {
            Ok(())
        };
        self.tell_stop();
        let exited = self
            .kernel
            .wait_finished(Instant::now() + self.stop_timeout);
        if !drain && exited.is_ok() {
            // No completion can come any more: pending tickets resolve.
            self.fail(Error::Cancelled);
        }
        let outcome = match (drained, exited) {
            (Ok(()), Ok(())) => Ok(()),
            // The drain ended because the kernel already stopped: report why.
            (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        };
        *stopped = Some(outcome.clone());
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The soak's false stalls (examples/soak, 61f463d): a waiter that found
    /// another thread probing measured silence up to "now" from heartbeats
    /// a probe had read minutes before. Silence ends at the last probe.
    #[test]
    fn silence_is_measured_up_to_the_last_probe() {
        let l = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 2);
        assert_eq!(l.silence(0..2), Duration::ZERO);
        let ms = 1_000_000;
        l.record_beats(5 * ms, |p| [100, 200][p]);
        // No probe for a long while: nothing looks silent.
        assert_eq!(l.silence(0..2), Duration::ZERO);
        // Both beat by the next probe; by the one after, only poller 0.
        l.record_beats(200_000 * ms, |p| [101, 201][p]);
        l.record_beats(200_500 * ms, |p| [102, 201][p]);
        assert_eq!(l.silence(0..2), Duration::ZERO);
        assert_eq!(l.silence(1..2), Duration::from_millis(500));
        // Silence runs from the probe that first saw a value to the latest.
        l.record_beats(202_000 * ms, |p| [102, 201][p]);
        assert_eq!(l.silence(0..1), Duration::from_millis(1500));
        assert_eq!(l.silence(0..2), Duration::from_millis(1500));
    }

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
}
