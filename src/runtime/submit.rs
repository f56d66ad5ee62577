//! The submit path, whole: a task or a run of tasks ([`Task`], [`Tasks`])
//! checked against the op table, a reservation of the slots it needs on one
//! ring (waiting for room, or not), the slots published, and the handle
//! that reads the completions ([`Ticket`], [`Batch`]). Runtimes, lanes,
//! producers and pools all submit through here ([`Submit`]); each only
//! says which ring.

use std::ptr::NonNull;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::layout::PACK_TASKS;
use crate::op::Op;
use crate::ops::{Task, Tasks};
use crate::proto::queue::{Queue, Refusal, TraceStart};
use crate::proto::slot::SlotImage;
use crate::runtime::batch::Batch;
use crate::runtime::handle::RingPtr;
use crate::runtime::inflight::InFlight;
use crate::runtime::lane::{Lane, Runtime};
use crate::runtime::liveness::Watch;
use crate::runtime::producer::{Producer, RingAccess};
use crate::runtime::shared::Shared;
use crate::runtime::ticket::Ticket;
use crate::runtime::wait::WaitStrategy;
use crate::sync::now;

/// Whether a submit waits for room in a full ring.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// Wait (spinning, then yielding) until the ring has room.
    Wait,
    /// Refuse with [`Error::Full`].
    Refuse,
}

/// The seals: only pkq's submitters and submissions implement the traits.
pub(crate) mod sealed {
    pub trait Route {}
    pub trait Send {}
}

/// Where tasks are submitted: a [`Runtime`] (its lane 0, on the calling
/// thread's ring), a [`Lane`], a [`Producer`] (its ring), a
/// [`Pool`](crate::Pool) (the device its routing picks) or one of a pool's
/// keys ([`Pool::keyed`](crate::Pool::keyed)). One task gives a [`Ticket`],
/// a run of tasks a [`Batch`]:
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// use pkq::builtin::{COPY_IO, CopyIoArgs, ECHO, NOP};
/// use pkq::{Runtime, Submit};
/// let rt = Runtime::builder().io(1024, 1024).build()?;
/// assert_eq!(rt.submit(ECHO.args(&42))?.wait()?.value, 42);
/// let words: Vec<u64> = (0..4096).collect();
/// let results = rt.submit(ECHO.packed(&words))?.wait()?; // 32 tasks a slot
/// assert_eq!(results[7].as_ref().unwrap().value, 7);
/// let args = CopyIoArgs { out_len: 4, key: 0 };
/// let (_, out) = rt.submit(COPY_IO.io(&args, b"ping"))?.wait_output()?;
/// assert_eq!(out, b"ping");
/// match rt.try_submit(NOP.batch(&[(); 64])) {
///     Err(pkq::Error::Full) => {} // no room now: try again later
///     other => drop(other?.wait()?),
/// }
/// # Ok(()) }
/// ```
///
/// Every submit refuses, with nothing submitted (the task's own checks,
/// of its sizes and declaration, before the ring's state: closed, held),
/// argument bytes that do
/// not fit a slot (over 48; over 8 for a packed task:
/// [`Error::PayloadTooLarge`]); a declaration or raw arguments the kernel's
/// op table disagrees with, and in a module of your own an op its table
/// does not list ([`Error::OpMismatch`]); an op whose handler dereferences
/// device addresses or faults the device, unless the task is marked
/// [`Task::unchecked`] ([`Error::UncheckedOp`]); an IO task on a runtime
/// without IO areas ([`Error::InvalidConfig`]) or with more input than they
/// hold ([`Error::PayloadTooLarge`]); a run of more slots than a ring has
/// ([`Error::InvalidArgument`]: split it), a pack on a lane of blocks or
/// groups ([`Error::InvalidArgument`]; see [`Width`](crate::Width)); an op
/// its lane's width does not serve ([`Error::OpMismatch`]); after shutdown or cancel began,
/// [`Error::Closed`] (an empty run too), or the latched
/// [`Error::DeviceFault`] where a fault led to the stop; a ring an
/// [`ExclusiveProducer`](crate::ExclusiveProducer) holds, from anyone else
/// ([`Error::RingHeld`], an empty run too). A pool adds its own
/// ([`Pool`](crate::Pool)): a pool with no serving device left says
/// [`Error::NoServingDevice`] before the task's own checks.
pub trait Submit: sealed::Route {
    /// Submits, waiting (spinning, then yielding) while the ring has no
    /// room for it. While it waits it may end in what a wait ends in: a
    /// device fault, a stop, or [`Error::Stalled`] for a worker whose slot
    /// it needs.
    fn submit<T: Submission>(&self, task: T) -> Result<T::Handle> {
        let _range = crate::trace::nvtx::range(c"pkq submit");
        self.route(task, Room::Wait)
    }

    /// Submits if the ring has room for it now, else returns
    /// [`Error::Full`] (or, a liveness probe being due, what ended the
    /// kernel: a caller looping on `Full` learns of a dead kernel).
    fn try_submit<T: Submission>(&self, task: T) -> Result<T::Handle> {
        let _range = crate::trace::nvtx::range(c"pkq try_submit");
        self.route(task, Room::Refuse)
    }

    /// Sends `task` to the ring this submitter picks.
    #[doc(hidden)]
    fn route<T: Submission>(&self, task: T, room: Room) -> Result<T::Handle>;
}

/// What a [`Submit`] call sends: one [`Task`] (its handle a [`Ticket`]) or
/// a run of [`Tasks`] (a [`Batch`]). Sealed.
pub trait Submission: sealed::Send + Copy {
    /// The handle a submit returns.
    type Handle;

    /// How many tasks.
    #[doc(hidden)]
    fn tasks(&self) -> usize;

    /// Its op, if it was marked unchecked and may dereference device
    /// addresses (which belong to one device: a pool routes none).
    #[doc(hidden)]
    fn unchecked_op(&self) -> Option<Op>;

    /// Checks, reserves, publishes, and returns the handle.
    #[doc(hidden)]
    fn send<R: RingAccess>(self, ring: RingPtr, room: Room) -> Result<Self::Handle>;

    /// The handle, counted in a pool member's load until its tasks are
    /// read or it is dropped.
    #[doc(hidden)]
    fn held(handle: Self::Handle, guard: InFlight) -> Self::Handle;
}

impl sealed::Send for Task<'_> {}
impl<A: Pod> sealed::Send for Tasks<'_, A> {}

impl Submission for Task<'_> {
    type Handle = Ticket;

    fn tasks(&self) -> usize {
        1
    }

    fn unchecked_op(&self) -> Option<Op> {
        self.check.lets_pointers_through().then_some(self.op)
    }

    // Inlined into the caller: docs/design/mapped-memory.md#inlined-submit.
    #[inline(always)]
    fn send<R: RingAccess>(self, ring: RingPtr, room: Room) -> Result<Ticket> {
        let shared = ring.shared();
        let image = SlotImage::new(self.op.0, self.args)?.host(self.host);
        self.check.apply(&shared.ops, self.op, self.args.len())?;
        if let Some(input) = self.input {
            return send_io::<R>(ring, self.op, image, input, room);
        }
        let queue = ring.queue();
        // The trace's submit time (if on), read beside the reservation.
        let tick = queue.trace_tick();
        queue.prefetch_reservation();
        shared.check_open()?;
        let seq = reserve::<R>(ring, 1, room)?;
        // Nothing between the reservation and the stores can fail.
        let tick = queue.trace_claim(tick, 1);
        queue.publish_at(seq, &image, TraceStart::marked(tick) != 0);
        queue.prefetch_next(seq);
        // The trace's entry (if on), after the stores: out of the way of
        // the task's dispatch (docs/design/tracing.md).
        let entry = queue.trace_open(seq, 1, self.op.0, tick);
        Ok(Ticket::new(ring, seq, self.op, entry))
    }

    fn held(ticket: Ticket, guard: InFlight) -> Ticket {
        ticket.held(guard)
    }
}

impl<A: Pod> Submission for Tasks<'_, A> {
    type Handle = Batch;

    fn tasks(&self) -> usize {
        self.args.len()
    }

    fn unchecked_op(&self) -> Option<Op> {
        self.check.lets_pointers_through().then_some(self.op)
    }

    fn send<R: RingAccess>(self, ring: RingPtr, room: Room) -> Result<Batch> {
        let shared = ring.shared();
        let size = std::mem::size_of::<A>();
        // Every element has the same size: one check for all.
        let per_slot = if self.packed {
            if shared.settings.width.is_wide() {
                return Err(Error::InvalidArgument(format!(
                    "a wide lane ({:?}) takes no packs: submit a batch",
                    shared.settings.width
                )));
            }
            SlotImage::check_pack_len(size)?;
            PACK_TASKS
        } else {
            SlotImage::check_len(size)?;
            1
        };
        self.check.apply(&shared.ops, self.op, size)?;
        shared.check_open()?;
        let n = self.args.len();
        let queue = ring.queue();
        let slots = n.div_ceil(per_slot);
        let tick = queue.trace_tick();
        let first = reserve_run::<R>(ring, slots, n, room)?;
        // Nothing between the reservation and the stores can fail.
        let tick = queue.trace_claim(tick, slots);
        if self.packed {
            queue.publish_packs(first, self.op.0, self.args);
        } else {
            queue.publish_run(first, self.op.0, self.args, TraceStart::marked(tick));
        }
        let entry = queue.trace_open(first, slots, self.op.0, tick);
        Ok(Batch::new(ring, self.op, first, n, per_slot, entry))
    }

    fn held(batch: Batch, guard: InFlight) -> Batch {
        batch.held(guard)
    }
}

/// [`Submission::send`] of an IO task: `input` goes into its slot's input
/// area before the slot is published.
#[inline(never)]
fn send_io<R: RingAccess>(
    ring: RingPtr,
    op: Op,
    image: SlotImage,
    input: &[u8],
    room: Room,
) -> Result<Ticket> {
    let queue = ring.queue();
    check_input(queue, input)?;
    let image = image.with_input(input.len());
    let tick = queue.trace_tick();
    queue.prefetch_reservation();
    ring.shared().check_open()?;
    let seq = reserve::<R>(ring, 1, room)?;
    // Nothing between the reservation and the stores can fail.
    let tick = queue.trace_claim(tick, 1);
    queue.publish_at(
        seq,
        &queue.write_input(seq, input, image),
        TraceStart::marked(tick) != 0,
    );
    queue.prefetch_next(seq);
    let entry = queue.trace_open(seq, 1, op.0, tick);
    Ok(Ticket::new(ring, seq, op, entry))
}

/// Refuses an IO task's input on a runtime without IO areas
/// ([`Error::InvalidConfig`]) or longer than they hold
/// ([`Error::PayloadTooLarge`]).
fn check_input(queue: &Queue, input: &[u8]) -> Result<()> {
    let (most, _) = match queue.io_limits() {
        (0, 0) => {
            return Err(Error::InvalidConfig(
                "this runtime has no IO areas (Builder::io)".into(),
            ));
        }
        most => most,
    };
    if input.len() > most {
        return Err(Error::PayloadTooLarge {
            len: input.len(),
            max: most,
        });
    }
    Ok(())
}

/// Reserves `slots` consecutive slots (1 to the capacity) of `ring` as a
/// producer of access `R` does; while the ring is full, waits for room
/// (a stall of a worker whose slot it needs ends the wait) or refuses with
/// [`Error::Full`], as `room` says.
#[inline(always)]
fn reserve<R: RingAccess>(ring: RingPtr, slots: usize, room: Room) -> Result<u64> {
    match try_reserve::<R>(ring.queue(), slots) {
        Ok(seq) => Ok(seq),
        Err(Refusal::Full) => no_room::<R>(ring, slots, room),
        // Closed since the submit's checks: by a stop a fault led to, maybe.
        Err(Refusal::Closed) => Err(ring.shared().closed()),
        Err(r) => Err(r.into()),
    }
}

/// One try at `slots` consecutive slots, as a producer of access `R`.
#[inline(always)]
fn try_reserve<R: RingAccess>(queue: &Queue, slots: usize) -> std::result::Result<u64, Refusal> {
    if R::EXCLUSIVE {
        queue.try_reserve_held(slots)
    } else if slots == 1 {
        queue.try_reserve()
    } else {
        queue.try_reserve_many(slots)
    }
}

/// What [`reserve`] does when the ring is full: waits for room (retrying
/// the reservation), or refuses with [`Error::Full`] after a liveness
/// probe if one is due (a caller looping on `Full` must learn if the
/// kernel died).
#[cold]
#[inline(never)]
fn no_room<R: RingAccess>(ring: RingPtr, slots: usize, room: Room) -> Result<u64> {
    if room == Room::Refuse {
        ring.shared().probe_if_due(now())?;
        return Err(Error::Full);
    }
    let queue = ring.queue();
    // SAFETY: the submitter borrows the lane (or the pool that holds it)
    // for the whole call: its shared state is alive.
    unsafe {
        Shared::wait_for(
            NonNull::from(ring.shared()),
            None,
            Watch::Reserving {
                ring: ring.ring,
                n: slots,
            },
            WaitStrategy::SpinThenYield,
            None,
            None,
            || match try_reserve::<R>(queue, slots) {
                Ok(seq) => Some(Ok(seq)),
                Err(Refusal::Full) => None,
                // Closed while it waited: by a stop a fault led to, maybe.
                Err(Refusal::Closed) => Some(Err(ring.shared().closed())),
                Err(r) => Some(Err(r.into())),
            },
        )?
    }
}

/// Reserves `slots` consecutive slots of `ring` for a run of `n` tasks
/// (none for an empty run), as [`reserve`]; refuses more slots than the
/// ring has. Returns the first.
fn reserve_run<R: RingAccess>(ring: RingPtr, slots: usize, n: usize, room: Room) -> Result<u64> {
    let queue = ring.queue();
    let capacity = queue.geometry().capacity();
    if slots > capacity {
        return Err(Error::InvalidArgument(format!(
            "a batch of {n} tasks needs {slots} slots, more than the ring's {capacity}: split it"
        )));
    }
    if slots == 0 {
        // Nothing to reserve, but a closed ring refuses even that, and a
        // ring another producer holds.
        return if queue.is_closed() {
            Err(ring.shared().closed())
        } else if !R::EXCLUSIVE && queue.is_held() {
            Err(Error::RingHeld)
        } else {
            Ok(0)
        };
    }
    reserve::<R>(ring, slots, room)
}

/// The order in which this thread first touched a runtime: it picks the
/// thread's ring.
#[inline(always)]
fn thread_index() -> usize {
    use crate::sync::statics::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static INDEX: usize = NEXT.fetch_add(1, crate::sync::Ordering::Relaxed));
    INDEX.with(|i| *i)
}

impl Lane {
    /// A producer on the calling thread's ring: ring `t % rings`, `t` the
    /// order in which the thread first submitted to any pkq runtime.
    #[inline(always)]
    pub(crate) fn thread_producer(&self) -> Producer<'_> {
        self.producer_at(thread_index() & (self.rings() - 1))
    }
}

impl sealed::Route for Lane {}
/// A lane submits to the calling thread's ring (see [`Builder::rings`](crate::Builder::rings)).
impl Submit for Lane {
    #[inline]
    fn route<T: Submission>(&self, task: T, room: Room) -> Result<T::Handle> {
        self.thread_producer().route(task, room)
    }
}

impl sealed::Route for Runtime {}
/// A runtime submits to its lane 0, on the calling thread's ring.
impl Submit for Runtime {
    #[inline]
    fn route<T: Submission>(&self, task: T, room: Room) -> Result<T::Handle> {
        self.lanes[0].route(task, room)
    }
}

impl<R: RingAccess> sealed::Route for Producer<'_, R> {}
/// A producer submits to its ring.
impl<R: RingAccess> Submit for Producer<'_, R> {
    #[inline]
    fn route<T: Submission>(&self, task: T, room: Room) -> Result<T::Handle> {
        task.send::<R>(self.ring_ptr(), room)
    }
}
