//! The runtime: a resident kernel serving its submission rings, and the safe
//! API over it. Settings and start-up are in [`builder`]; what the runtime,
//! its tickets and its batches share (and waiting, probing and stopping) in
//! [`shared`]; the handles' lifecycle in [`handle`].

pub(crate) mod batch;
pub(crate) mod builder;
mod calls;
pub(crate) mod engine;
pub(crate) mod handle;
pub(crate) mod liveness;
pub(crate) mod shared;
pub(crate) mod ticket;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::ops::op::Op;
use crate::ops::typed::TypedOp;
use crate::proto::queue::Queue;
use crate::proto::slot::SlotImage;

pub use builder::{Builder, IdlePolicy};
pub(crate) use handle::RingPtr;
pub(crate) use shared::{Shared, Watch};
use ticket::Ticket;

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
    /// Refuses, with nothing submitted: arguments over 48 bytes
    /// ([`Error::PayloadTooLarge`]); ops that dereference device pointers
    /// or fault the device on purpose ([`Error::UncheckedOp`]); arguments of
    /// another size than the kernel's op table lists for the op (ECHO takes
    /// up to 48 bytes), and in a module of your own an op its table does not
    /// list ([`Error::OpMismatch`]); after [`Runtime::shutdown`] or
    /// [`Runtime::cancel`] began, [`Error::Closed`].
    pub fn submit<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        self.submit_bytes(op, bytemuck::bytes_of(args))
    }

    /// Like [`Runtime::submit`], but returns [`Error::Full`] instead of
    /// waiting for a free slot.
    pub fn try_submit<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        let bytes = bytemuck::bytes_of(args);
        let image = SlotImage::new(op.0, bytes)?;
        self.shared.ops.refuse(op, bytes.len())?;
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
        let image = SlotImage::new(op.0, args)?;
        self.shared.ops.refuse(op, args.len())?;
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
        RingPtr::new(
            &self.shared,
            thread_index() & (self.shared.queues.len() - 1),
        )
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
    #[cfg(feature = "hooks")]
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

/// How many runtimes' memories are allocated (built, not yet freed): a
/// runtime's outlives it while its tickets or batches do (tests).
pub(crate) static LIVE: AtomicUsize = AtomicUsize::new(0);

/// How many runtimes' memories are allocated now: built and not yet freed
/// (dropped, and every ticket and batch of theirs gone). For tests.
#[doc(hidden)]
#[cfg(feature = "hooks")]
pub fn live_runtimes() -> usize {
    LIVE.load(Ordering::Relaxed)
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

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
