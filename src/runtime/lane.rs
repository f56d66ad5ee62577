//! A runtime ([`Runtime`]) is one or more lanes ([`Lane`]) on one device:
//! each lane a resident kernel of its own with its own rings, workers,
//! module and settings (`Builder::add_lane`), the runtime the whole that
//! starts, watches and stops them together. A runtime acts as its first
//! lane (it dereferences to it): its submits go to lane 0.

use std::sync::Arc;

use crate::cuda::partition::SmPartition;
use crate::error::Result;
use crate::layout::STATE_BITS;
use crate::runtime::builder::Builder;
use crate::runtime::memory::MemoryWatch;
use crate::runtime::shared::Shared;
use crate::runtime::wait::WaitStrategy;
use crate::sync::Ordering;

/// A resident kernel serving submission rings in mapped host memory.
///
/// `Runtime` is `Send + Sync`: any number of threads may submit through
/// `&Runtime` ([`Submit`](crate::Submit); see [`Builder::rings`] for how
/// they spread over the rings). It dereferences to its first [`Lane`], so
/// the calls of a lane (producers, state, the built-in ops' safe calls)
/// are the runtime's too; the calls here cover every lane. Dropping it
/// shuts it down (see [`Runtime::shutdown`]).
///
/// # Rules for sharing the GPU
///
/// While a runtime lives, its kernel runs without end in the device's
/// primary context (or a green context of it, [`Builder::sm_partition`]),
/// and the CUDA driver makes some calls wait for every kernel running
/// there, the resident one included, which never ends while the runtime
/// lives. These calls therefore never return while it runs: avoid them,
/// or make them before building the runtime or after dropping it.
///
/// * `cuCtxSynchronize` / `cudaDeviceSynchronize` / `CudaContext::synchronize`
///   (and `torch.cuda.synchronize()`): synchronize streams instead;
/// * freeing device memory with `cuMemFree` / `cudaFree` (a stream-ordered
///   free, `cuMemFreeAsync` on a stream of your own, does not wait), and
///   freeing pinned host memory with `cuMemFreeHost` / `cudaFreeHost`:
///   allocators that give memory back to the driver do this
///   (`torch.cuda.empty_cache()`, CuPy's pools when they release, cudarc's
///   `CudaSlice` drop on a device without memory pools);
/// * loading a module (`cuModuleLoad*`, and cudarc's first `new_stream` on
///   a context that tracks events, which synchronizes it): create your own
///   streams and load your modules before building a runtime.
///
/// pkq's GPU test `frees_wait_for_the_resident_kernel` (`tests/gpu`)
/// shows the frees and the context synchronization wait, and a
/// stream-ordered free not. pkq keeps the rule itself: it frees the pinned memory of a runtime
/// dropped beside another only once no pkq kernel runs, frees device
/// memory only stream-ordered or once its kernel exited, and loads each
/// module before any of its kernels runs.
///
/// Several runtimes may run on one device at once. The driver waits for
/// running kernels before it loads a module, so pkq loads each module once
/// per device and keeps it (and the device's primary context) for the
/// process: the first runtime with a given module and kernel must be built
/// while no pkq kernel (of a runtime) runs on the device; later ones reuse
/// what it loaded. A new one is refused with
/// [`Error::InvalidConfig`](crate::Error::InvalidConfig) rather than waited
/// for ([`running_kernels`](crate::running_kernels) says whether one runs).
/// A runtime dropped while another runs keeps its pinned rings until none
/// runs.
pub struct Runtime {
    /// Lane 0, then the lanes added ([`Builder::add_lane`]); their stops
    /// begun in that order.
    pub(crate) lanes: Box<[Lane]>,
    /// The SMs it runs on, if not the whole device.
    pub(crate) partition: Option<SmPartition>,
    /// Its trace (`crate::trace`).
    pub(crate) tracer: crate::trace::Tracer,
}

/// One lane of a [`Runtime`]: a resident kernel with its own rings,
/// workers and module ([`Builder::add_lane`]). [`Runtime::lane`] gives
/// each; a runtime dereferences to lane 0. Submit to a lane through
/// [`Submit`](crate::Submit), or through its producers.
pub struct Lane {
    /// Tickets and batches point here without counting (see `RingPtr`).
    pub(crate) shared: Arc<Shared>,
    /// A lane of blocks or groups: its device's log of each block's run
    /// of traced tasks (`crate::trace::blocks`).
    pub(crate) blocks: Option<crate::trace::blocks::BlockLog>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("device", &self.device())
            .field("capacity", &self.capacity())
            .field("workers", &self.workers())
            .field("rings", &self.rings())
            .field("width", &self.width())
            .finish()
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("lanes", &self.lanes)
            .field("sm_partition", &self.partition)
            .finish()
    }
}

/// A runtime dropped shuts down ([`Runtime::shutdown`]): every lane
/// refuses new tasks at once, then each drains and its kernel is told to
/// exit, then every kernel is waited for.
impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl std::ops::Deref for Runtime {
    type Target = Lane;

    /// Lane 0.
    fn deref(&self) -> &Lane {
        &self.lanes[0]
    }
}

impl Runtime {
    /// A builder with the defaults: device 0, 1024 slots, one worker of
    /// eight pollers (the latency shape), the whole device.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Lane `i` ([`Builder::add_lane`]): 0 is the runtime's first, 1 the
    /// first lane added; `None` past the last.
    pub fn lane(&self, i: usize) -> Option<&Lane> {
        self.lanes.get(i)
    }

    /// How many lanes it serves: 1 and one per [`Builder::add_lane`].
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// The SMs it runs on and the rest of the device, if it was built with
    /// [`Builder::sm_partition`].
    pub fn sm_partition(&self) -> Option<&SmPartition> {
        self.partition.as_ref()
    }

    /// Shuts down: refuses new tasks on every lane ([`Error::Closed`](crate::Error::Closed)
    /// from then on), waits for every submitted task to complete (up to the
    /// stop timeout), tells the kernels to exit and waits for them. Tickets
    /// stay valid and report their results. Memory the device may touch is
    /// freed only after its kernel exited (and the last ticket is gone); if
    /// it never exits, it is kept, not freed ([`Runtime::memory_watch`]).
    /// Past the stop timeout: [`Error::KernelTimeout`](crate::Error::KernelTimeout)
    /// ([`Builder::stop_timeout`]). A [`Runtime::cancel`] from another
    /// thread cuts the drain short: the tasks left report
    /// [`Error::Cancelled`](crate::Error::Cancelled). Later calls (and
    /// `Drop`) return the first outcome; so does every lane's.
    ///
    /// After a shutdown whose kernels exited, [`Runtime::health`] reports
    /// [`Error::KernelStopped`](crate::Error::KernelStopped) ("the runtime
    /// was shut down and its kernel exited"). Where a kernel did not exit in
    /// time, `health` says what a probe finds: `Ok` or
    /// [`Error::Stalled`](crate::Error::Stalled) while it runs on (a task
    /// still running), `KernelStopped` once it exits.
    pub fn shutdown(&self) -> Result<()> {
        let _range = crate::trace::nvtx::range(c"pkq shutdown");
        // Every lane refuses new tasks at once; then each drains and its
        // kernel is told to exit; then every kernel is waited for.
        Shared::stop_all(self.lanes.iter().map(|l| &*l.shared), true)
    }

    /// Stops now, a shutdown's drain under way on another thread too: refuses
    /// new tasks ([`Error::Closed`](crate::Error::Closed)), tells every
    /// lane's kernel to exit without running what is still queued (tasks
    /// already running finish; each poller reads the stop word every few
    /// polls, so a worker may start a few more queued slots before it reads
    /// it: at most `PKQ_STOP_POLL_INTERVAL` per poller, `cuda/pkq_layout.h`,
    /// a packed slot's tasks all together), and waits for them (up to the
    /// stop timeout). Once a kernel exited, every ticket of its lane whose
    /// task did not complete reports [`Error::Cancelled`](crate::Error::Cancelled);
    /// completed ones still report their results. A kernel that does not
    /// exit in time makes `cancel` return [`Error::KernelTimeout`](crate::Error::KernelTimeout),
    /// and the tickets left end as their waits find it: their results,
    /// [`Error::Cancelled`](crate::Error::Cancelled) once it exits, or
    /// [`Error::Stalled`](crate::Error::Stalled). Later calls (and
    /// `shutdown`, and `Drop`) return the first outcome.
    pub fn cancel(&self) -> Result<()> {
        // Every lane's kernel is told at once; then each is waited for.
        Shared::stop_all(self.lanes.iter().map(|l| &*l.shared), false)
    }

    /// [`Lane::health`] of every lane: `Ok` while each serves, else the
    /// first lane's problem. After a shutdown whose kernels exited:
    /// [`Error::KernelStopped`](crate::Error::KernelStopped) (see
    /// [`Runtime::shutdown`]).
    pub fn health(&self) -> Result<()> {
        self.lanes.iter().try_for_each(Lane::health)
    }

    /// [`Lane::moved_completions`] summed over the lanes.
    pub fn moved_completions(&self) -> u64 {
        self.lanes.iter().map(Lane::moved_completions).sum()
    }

    /// [`Lane::callback_panics`] summed over the lanes.
    pub fn callback_panics(&self) -> u64 {
        self.lanes.iter().map(Lane::callback_panics).sum()
    }

    /// A witness of this runtime's memory (every lane's), which outlives
    /// the runtime: [`MemoryWatch::state`] says when it was given back.
    pub fn memory_watch(&self) -> MemoryWatch {
        MemoryWatch::new(self.lanes.iter().map(|l| l.shared.witness().seen()))
    }
}

impl Lane {
    /// The slot count of each of its rings.
    pub fn capacity(&self) -> usize {
        self.shared.rings.queues[0].geometry().capacity()
    }

    /// Its submission rings (see [`Builder::rings`]).
    pub fn rings(&self) -> usize {
        self.shared.rings.len()
    }

    /// Its kernel's worker warps.
    pub fn workers(&self) -> usize {
        self.shared.device.workers()
    }

    /// The CUDA device index.
    pub fn device(&self) -> usize {
        self.shared.settings.device
    }

    /// The width each of its tasks runs on ([`Builder::width`]): the safe
    /// calls of the built-in ops (`Lane::gemv` and the others) run the op of
    /// that width.
    pub fn width(&self) -> crate::Width {
        self.shared.settings.width
    }

    /// How its tickets and batches wait unless told otherwise:
    /// [`Builder::wait_strategy`]'s strategy as it works on this machine
    /// ([`WaitStrategy::effective`]: `Monitor` without the CPU's monitor
    /// waits as `SpinThenYield`; [`monitor_support`](crate::monitor_support)
    /// says why).
    pub fn wait_strategy(&self) -> WaitStrategy {
        self.shared.settings.wait.effective()
    }

    /// Probes its kernel now: `Ok` while it serves; else the latched fault
    /// or stop ([`Error::DeviceFault`](crate::Error::DeviceFault),
    /// [`Error::KernelStopped`](crate::Error::KernelStopped) (after a
    /// shutdown whose kernel exited too), [`Error::Cancelled`](crate::Error::Cancelled)), or
    /// [`Error::Stalled`](crate::Error::Stalled) for a worker silent past
    /// the stall bound. For supervisors; waits check this by themselves.
    /// Where the driver reports a device fault that this lane has not yet
    /// judged (its kernel's, or another kernel's of the process: see
    /// [`Error::DeviceFault`](crate::Error::DeviceFault)), it looks again
    /// until it has, for about 20 ms at most.
    pub fn health(&self) -> Result<()> {
        self.shared.health()
    }

    /// How many completions have been moved out of their slots so far (in
    /// this lane's rings), as io_uring counts completion-queue overflows: a
    /// producer that needs a slot whose task completed but whose ticket or
    /// batch has not read it yet moves the completion to the host's side
    /// table rather than wait for the holder. Moves keep `submit` from
    /// waiting on tickets some thread holds, but each costs a lock and a map
    /// entry, and the holder pays again to take it back. If the count grows
    /// under load, producers are lapping a slow reaper, or one that lost its
    /// core for a while (producer threads that share a core take turns by
    /// the scheduler's time slice, and each turn can lap the others): give
    /// the ring more slots than all producers together submit while the
    /// slowest holds its tasks, give each producer a core or a ring of its
    /// own ([`Builder::rings`]), or reap sooner
    /// (`docs/design/moved-completions.md`).
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
        self.shared.rings.moved()
    }

    /// How many completion callbacks ([`Ticket::on_complete`](crate::Ticket::on_complete)),
    /// and wakers of futures (an executor's), panicked on this lane's
    /// completion thread so far (each panic was caught there; the lane
    /// serves on); a callback's count includes a panic of what it captured,
    /// dropped as it returns. A waker whose own `Drop` panics, or a callback
    /// dropped without running whose `Drop` panics, is caught too, wherever
    /// pkq drops it, and not counted here.
    pub fn callback_panics(&self) -> u64 {
        self.shared.reactor.panics.load(Ordering::Relaxed)
    }

    /// A snapshot of its rings and of every poller (state and position),
    /// for diagnosing a stall. The format is for people, not for parsing.
    pub fn debug_state(&self) -> String {
        let s = &self.shared;
        let device = &s.device;
        let pollers_per_worker = device.pollers() / device.workers();
        let mut out = String::new();
        for (r, q) in s.rings.queues.iter().enumerate() {
            out += &format!("ring {r}: {}\n", q.debug_state());
        }
        for p in 0..device.pollers() {
            let word = device.state_word(p);
            out += &format!(
                "\n  worker {} poller {}: state {}, position {}",
                p / pollers_per_worker,
                p % pollers_per_worker,
                word & ((1 << STATE_BITS) - 1),
                word >> STATE_BITS,
            );
        }
        out
    }
}

/// A lane dropped stops (a shutdown), and hands its memory to the tickets
/// and batches still holding tasks of its.
impl Drop for Lane {
    fn drop(&mut self) {
        let _ = self.shared.stop(true);
        // The completion thread: every task is complete (or the lane
        // failed), so it fires what is left and ends; joined before the
        // orphan shares are handed out, so it reads no queue after. A
        // runtime dropped by a callback on that thread cannot join it: the
        // thread ends by itself after the callback, holding its own
        // reference to this memory until then.
        if let Some(thread) = self.shared.reactor.close()
            && thread.thread().id() != crate::sync::thread_id()
        {
            let _ = thread.join();
        }
        // Tickets and batches may outlive the lane; they count no reference
        // (see `RingPtr`). Keep one reference aside for the last of them,
        // hand each its share (`Queue::orphan`), then give back the lane's
        // own share (counted since it was built): if it was the last, the
        // reference aside is dropped here, else by the handle that gives
        // back the last share.
        let aside = Arc::into_raw(Arc::clone(&self.shared));
        for queue in self.shared.rings.queues.iter() {
            queue.orphan(&self.shared.life.orphans);
        }
        // SAFETY: the lane's share, counted since it was built; from here
        // on the lane touches `Shared` only through its own `Arc`, which
        // the reference aside does not replace.
        unsafe { Shared::release(aside, 1) };
    }
}
