//! The runtime: a resident kernel serving its submission rings, and the safe
//! API over it. Settings and start-up are in [`builder`]; what the runtime,
//! its tickets and its batches share (and waiting, probing and stopping) in
//! [`shared`]; the handles' lifecycle in [`handle`].

pub(crate) mod batch;
pub(crate) mod buffers;
pub(crate) mod builder;
mod calls;
pub(crate) mod engine;
pub(crate) mod handle;
pub(crate) mod liveness;
pub(crate) mod producer;
pub(crate) mod shared;
pub(crate) mod state;
pub(crate) mod ticket;
pub(crate) mod wait;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytemuck::Pod;

use crate::error::Result;
use crate::ops::op::Op;
use crate::ops::typed::TypedOp;
use crate::proto::queue::Queue;
use crate::proto::slot::SlotImage;

use batch::Batch;
pub use builder::{Builder, IdlePolicy};
pub(crate) use handle::RingPtr;
pub use producer::{ExclusiveProducer, ExclusiveRing, Producer, RingAccess, SharedRing};
pub(crate) use shared::{Shared, Watch};
use ticket::Ticket;
pub use wait::WaitStrategy;
pub use wait::monitor::{MonitorKind, monitor_support};

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
/// [`Error::InvalidConfig`](crate::Error::InvalidConfig) rather than waited for. A runtime dropped while
/// another runs keeps its pinned rings until none runs.
pub struct Runtime {
    /// Tickets and batches point here without counting (see `RingPtr`).
    pub(crate) shared: Arc<Shared>,
    /// The SMs it runs on, if not the whole device.
    pub(crate) partition: Option<crate::cuda::partition::SmPartition>,
    /// Lanes 1, 2, ... ([`Builder::lane`]); stopped after this one.
    pub(crate) lanes: Box<[Runtime]>,
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
            .field("lanes", &self.lanes())
            .field("sm_partition", &self.partition)
            .finish()
    }
}

impl Runtime {
    /// A builder with the defaults: device 0, 1024 slots, one worker of
    /// eight pollers (the latency shape), the whole device.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A runtime of one lane on the whole device, over `shared`.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            partition: None,
            lanes: Box::default(),
        }
    }

    /// Runs `f` on the shared state of this runtime and of its lanes.
    fn each_lane(&self, f: &dyn Fn(&Shared)) {
        f(&self.shared);
        self.lanes.iter().for_each(|lane| lane.each_lane(f));
    }

    /// Lane `i` ([`Builder::lane`]): 0 is this runtime, 1 the first lane
    /// added; `None` past the last.
    pub fn lane(&self, i: usize) -> Option<&Runtime> {
        match i {
            0 => Some(self),
            i => self.lanes.get(i - 1),
        }
    }

    /// The fault or stop latched for lane 0, if any (no probe).
    pub(crate) fn latched(&self) -> Result<()> {
        self.shared.check()
    }

    /// Whether lane 0 was shut down or cancelled (closed to new tasks).
    pub(crate) fn closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// [`Runtime::health`] of lane 0 alone.
    pub(crate) fn lane0_health(&self) -> Result<()> {
        self.shared.health()
    }

    /// How many lanes it serves: 1 and one per [`Builder::lane`].
    pub fn lanes(&self) -> usize {
        1 + self.lanes.len()
    }

    /// The SMs it runs on and the rest of the device, if it was built with
    /// [`Builder::sm_partition`].
    pub fn sm_partition(&self) -> Option<&crate::cuda::partition::SmPartition> {
        self.partition.as_ref()
    }

    /// Submits a task to the calling thread's ring (see [`Builder::rings`];
    /// [`Runtime::producer_on`] names one), waiting (spinning, then
    /// yielding) while the ring is full: [`Producer::submit`].
    pub fn submit<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        self.thread_producer().submit(op, args)
    }

    /// [`Producer::try_submit`] on the calling thread's ring.
    pub fn try_submit<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        self.thread_producer().try_submit(op, args)
    }

    /// [`Producer::submit_io`] on the calling thread's ring.
    pub fn submit_io<A: Pod>(&self, op: Op, args: &A, input: &[u8]) -> Result<Ticket> {
        self.thread_producer().submit_io(op, args, input)
    }

    /// [`Producer::submit_bytes`] on the calling thread's ring.
    pub fn submit_bytes(&self, op: Op, args: &[u8]) -> Result<Ticket> {
        self.thread_producer().submit_bytes(op, args)
    }

    /// [`Producer::submit_unchecked`] on the calling thread's ring.
    ///
    /// # Safety
    /// As [`Producer::submit_unchecked`].
    pub unsafe fn submit_unchecked<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        // SAFETY: the caller's contract, which is the producer's.
        unsafe { self.thread_producer().submit_unchecked(op, args) }
    }

    /// [`Producer::call`] on the calling thread's ring.
    pub fn call<A: Pod>(&self, op: &TypedOp<A>, args: &A) -> Result<Ticket> {
        self.thread_producer().call(op, args)
    }

    /// [`Producer::call_unchecked`] on the calling thread's ring.
    ///
    /// # Safety
    /// As [`Producer::call_unchecked`].
    pub unsafe fn call_unchecked<A: Pod>(&self, op: &TypedOp<A>, args: &A) -> Result<Ticket> {
        // SAFETY: the caller's contract, which is the producer's.
        unsafe { self.thread_producer().call_unchecked(op, args) }
    }

    /// [`Producer::submit_batch`] on the calling thread's ring.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Op, Runtime};
    /// let rt = Runtime::builder().build()?;
    /// let args: Vec<[u64; 1]> = (0..256).map(|i| [i]).collect();
    /// let results = rt.submit_batch(Op::ECHO, &args)?.wait()?;
    /// for (i, r) in results.iter().enumerate() {
    ///     assert_eq!(r.as_ref().unwrap().value, i as u64);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn submit_batch<A: Pod>(&self, op: Op, args: &[A]) -> Result<Batch> {
        self.thread_producer().submit_batch(op, args)
    }

    /// [`Producer::call_batch`] on the calling thread's ring.
    pub fn call_batch<A: Pod>(&self, op: &TypedOp<A>, args: &[A]) -> Result<Batch> {
        self.thread_producer().call_batch(op, args)
    }

    /// [`Producer::call_batch_unchecked`] on the calling thread's ring.
    ///
    /// # Safety
    /// As [`Producer::call_batch_unchecked`].
    pub unsafe fn call_batch_unchecked<A: Pod>(
        &self,
        op: &TypedOp<A>,
        args: &[A],
    ) -> Result<Batch> {
        // SAFETY: the caller's contract, which is the producer's.
        unsafe { self.thread_producer().call_batch_unchecked(op, args) }
    }

    /// [`Producer::submit_packed`] on the calling thread's ring.
    pub fn submit_packed<A: Pod>(&self, op: Op, args: &[A]) -> Result<Batch> {
        self.thread_producer().submit_packed(op, args)
    }

    /// The slot count of each ring (of this runtime's own rings, lane 0;
    /// another lane's through [`Runtime::lane`]).
    pub fn capacity(&self) -> usize {
        self.shared.queues[0].geometry().capacity()
    }

    /// The submission rings (see [`Builder::rings`]; lane 0's, as
    /// [`Runtime::capacity`]).
    pub fn rings(&self) -> usize {
        self.shared.queues.len()
    }

    /// A producer on the calling thread's ring: ring `t % rings`, `t` the
    /// order in which the thread first submitted to any pkq runtime.
    #[inline(always)]
    fn thread_producer(&self) -> Producer<'_> {
        self.producer_at(thread_index() & (self.shared.queues.len() - 1))
    }

    /// The kernel's worker warps (lane 0's, as [`Runtime::capacity`]).
    pub fn workers(&self) -> usize {
        self.shared.workers
    }

    /// The CUDA device index.
    pub fn device(&self) -> usize {
        self.shared.device
    }

    /// How many completions have been moved out of their slots so far (in
    /// the rings of this runtime and its lanes), as
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
        let own: u64 = self.shared.queues.iter().map(Queue::moved).sum();
        own + self
            .lanes
            .iter()
            .map(Runtime::moved_completions)
            .sum::<u64>()
    }

    /// A snapshot of the ring and of every poller, for diagnosing a stall.
    #[doc(hidden)]
    #[cfg(feature = "bench")]
    pub fn debug_state(&self) -> String {
        use crate::proto::layout::STATE_BITS;
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

    /// Shuts down: refuses new tasks ([`Error::Closed`](crate::Error::Closed) from then on), waits
    /// for every submitted task to complete (up to the stop timeout), tells
    /// the kernel to exit and waits for it. Tickets stay valid and report
    /// their results. Memory the device may touch is freed only after the
    /// kernel exited (and the last ticket is gone); if it never exits, it is
    /// leaked, not freed. Past the stop timeout:
    /// [`Error::KernelTimeout`](crate::Error::KernelTimeout)
    /// ([`Builder::stop_timeout`]). A [`Runtime::cancel`] from another thread
    /// cuts the drain short: the tasks left report
    /// [`Error::Cancelled`](crate::Error::Cancelled). Later calls (and
    /// `Drop`) return the first outcome.
    pub fn shutdown(&self) -> Result<()> {
        // Every lane refuses new tasks at once; then each drains and stops.
        self.each_lane(&|s| s.announce_shutdown());
        let first = self.shared.stop(true);
        self.lanes
            .iter()
            .fold(first, |r, lane| r.and(lane.shutdown()))
    }

    /// Stops now, a shutdown's drain under way on another thread too: refuses
    /// new tasks ([`Error::Closed`](crate::Error::Closed)), tells the kernel
    /// to exit without running what is still queued (tasks already running
    /// finish; each poller reads the stop word every few polls, so a worker
    /// may start a few more queued slots before it reads it: at most
    /// `PKQ_STOP_POLL_INTERVAL` per poller, `cuda/pkq_layout.h`, a packed
    /// slot's tasks all together), and waits
    /// for it (up to the stop timeout). Once it exited, every ticket whose
    /// task did not complete reports [`Error::Cancelled`](crate::Error::Cancelled); completed
    /// ones still report their results. A kernel that does not exit in time
    /// makes `cancel` return [`Error::KernelTimeout`](crate::Error::KernelTimeout), and the tickets left
    /// end as their waits find it: their results, [`Error::Cancelled`](crate::Error::Cancelled)
    /// once it exits, or [`Error::Stalled`](crate::Error::Stalled). Later calls (and `shutdown`, and
    /// `Drop`) return the first outcome.
    pub fn cancel(&self) -> Result<()> {
        // Every lane's kernel is told at once; then each is waited for.
        self.each_lane(&|s| s.announce_cancel());
        let first = self.shared.stop(false);
        self.lanes
            .iter()
            .fold(first, |r, lane| r.and(lane.cancel()))
    }

    /// Probes the kernel now: `Ok` while it serves; else the latched fault
    /// or stop ([`Error::DeviceFault`](crate::Error::DeviceFault), [`Error::KernelStopped`](crate::Error::KernelStopped),
    /// [`Error::Cancelled`](crate::Error::Cancelled)), or [`Error::Stalled`](crate::Error::Stalled) for a worker silent past
    /// the stall bound. For supervisors; waits check this by themselves.
    /// Where the driver reports a device fault that this runtime has not
    /// yet judged (its kernel's, or another kernel's of the process: see
    /// [`Error::DeviceFault`](crate::Error::DeviceFault)), it looks again
    /// until it has, for about 20 ms at most.
    pub fn health(&self) -> Result<()> {
        self.shared.health()?;
        self.lanes.iter().try_for_each(Runtime::health)
    }

    /// How this runtime's tickets and batches wait unless told otherwise:
    /// [`Builder::wait`]'s strategy as it works on this machine
    /// ([`WaitStrategy::effective`]: `Monitor` without the CPU's monitor
    /// waits as `SpinThenYield`; [`monitor_support`] says why).
    pub fn wait_strategy(&self) -> WaitStrategy {
        self.shared.wait.effective()
    }

    /// How many completion callbacks ([`Ticket::on_complete`]), and wakers
    /// of futures (an executor's), panicked on the completion threads of
    /// this runtime and its lanes so far (each panic was caught there; the
    /// runtime serves on); a callback's count includes a panic of what it
    /// captured, dropped as it returns. A waker whose own `Drop` panics, or
    /// a callback dropped without running whose `Drop` panics, is caught
    /// too, wherever pkq drops it, and not counted here.
    pub fn callback_panics(&self) -> u64 {
        let own = self.shared.reactor.panics.load(Ordering::Relaxed);
        own + self.lanes.iter().map(Runtime::callback_panics).sum::<u64>()
    }
}

/// How many runtimes' memories are allocated (built, not yet freed): a
/// runtime's outlives it while its tickets or batches do (tests).
pub(crate) static LIVE: AtomicUsize = AtomicUsize::new(0);

/// How many runtimes' memories are allocated now: built and not yet freed
/// (dropped, and every ticket and batch of theirs gone). For tests.
#[doc(hidden)]
#[cfg(feature = "bench")]
pub fn live_runtimes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Submits one task to `ring` (waiting for room if `wait`).
#[inline]
pub(crate) fn submit<R: RingAccess>(
    ring: RingPtr,
    op: Op,
    image: &SlotImage,
    wait: bool,
) -> Result<Ticket> {
    submit_with_input::<R>(ring, op, image, None, wait)
}

/// [`submit`], writing an IO task's `input` into its slot's input area
/// before the publish.
#[inline]
pub(crate) fn submit_with_input<R: RingAccess>(
    ring: RingPtr,
    op: Op,
    image: &SlotImage,
    input: Option<&[u8]>,
    wait: bool,
) -> Result<Ticket> {
    let queue = ring.queue();
    queue.prefetch_reservation();
    let shared = ring.shared();
    shared.check_open()?;
    let seq = shared.reserve(ring.ring, 1, wait, || producer::reserve::<R>(queue, 1))?;
    match input {
        Some(input) => queue.publish(seq, &queue.write_input(seq, input, *image)),
        None => queue.publish(seq, image),
    }
    queue.prefetch_next(seq);
    Ok(Ticket::new(ring, seq, op))
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
