//! Producers: handles that submit to one ring of a runtime. The runtime's
//! own submit calls use the calling thread's ring; a producer names its
//! ring ([`Runtime::producer_on`]) or takes the next in turn
//! ([`Runtime::producer`]), so that threads need share no ring, whatever
//! order they start in. An exclusive producer holds its ring alone
//! ([`Runtime::exclusive_producer_on`]) and reserves without a locked
//! instruction (`proto::tail`).

use std::cell::Cell;
use std::marker::PhantomData;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::ops::op::Op;
use crate::ops::typed::TypedOp;
use crate::proto::layout::PACK_TASKS;
use crate::proto::queue::{Queue, Refusal};
use crate::proto::slot::SlotImage;
use crate::proto::sync::now;
use crate::runtime::batch::{Batch, reserve_run};
use crate::runtime::ticket::Ticket;
use crate::runtime::{RingPtr, Runtime, submit, submit_with_input};

/// Submits to one ring of a [`Runtime`]: the same calls as the runtime's,
/// on the ring it was made for.
///
/// A `Producer<'rt>` (on a [`SharedRing`]) is cheap to copy; any number of
/// producers may share a ring (their reservations meet in a
/// compare-and-swap of the ring's tail), and a producer may be used from
/// any thread. An [`ExclusiveProducer`] holds its ring alone instead.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// let rt = pkq::Runtime::builder().workers(64).rings(4).build()?;
/// std::thread::scope(|s| -> pkq::Result<()> {
///     for ring in 0..4 {
///         let p = rt.producer_on(ring)?;
///         s.spawn(move || -> pkq::Result<()> {
///             p.submit(pkq::Op::NOP, &())?.wait()?;
///             Ok(())
///         });
///     }
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct Producer<'rt, R: RingAccess = SharedRing> {
    rt: &'rt Runtime,
    ring: RingPtr,
    /// Kept for its drop: an exclusive ring is given back then.
    _access: R,
}

/// A [`Producer`] that holds its ring alone, made by
/// [`Runtime::exclusive_producer_on`]: it reserves slots with plain stores
/// to the ring's tail, where shared producers use a compare-and-swap (a
/// locked instruction), and is faster for one thread submitting one task
/// at a time. Until it is dropped, every other submit to its ring is
/// refused with [`Error::RingHeld`] (the runtime's own calls too, from a
/// thread whose ring it is: see [`Builder::rings`](crate::Builder::rings)).
///
/// It may move to another thread, but is neither `Clone` nor `Sync`: one
/// thread submits through it at a time.
///
/// ```compile_fail
/// fn shared<T: Sync>(_: &T) {}
/// # fn f(rt: &pkq::Runtime) -> pkq::Result<()> {
/// let p = rt.exclusive_producer_on(0)?;
/// shared(&p); // not Sync: two threads would reserve the same slot
/// # Ok(()) }
/// ```
///
/// ```compile_fail
/// # fn f(rt: &pkq::Runtime) -> pkq::Result<()> {
/// let p = rt.exclusive_producer_on(0)?;
/// let q = p.clone(); // not Clone, for the same reason
/// # Ok(()) }
/// ```
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// let rt = pkq::Runtime::builder().workers(2).rings(2).build()?;
/// let p = rt.exclusive_producer_on(1)?;
/// // While it is held, ring 1 is refused to everyone else.
/// assert!(matches!(
///     rt.producer_on(1)?.submit(pkq::Op::NOP, &()),
///     Err(pkq::Error::RingHeld)
/// ));
/// std::thread::scope(|s| {
///     // Moved to another thread (Send), and dropped with it.
///     s.spawn(move || {
///         for i in 0..1000u64 {
///             assert_eq!(p.submit(pkq::Op::ECHO, &[i]).unwrap().wait().unwrap().value, i);
///         }
///     });
/// });
/// // Given back: ring 1 is everyone's again.
/// rt.producer_on(1)?.submit(pkq::Op::NOP, &())?.wait()?;
/// # Ok(()) }
/// ```
pub type ExclusiveProducer<'rt> = Producer<'rt, ExclusiveRing>;

/// How a [`Producer`] reserves slots of its ring: [`SharedRing`] or
/// [`ExclusiveRing`] (sealed).
pub trait RingAccess: sealed::Access {}

/// Reservations shared with any number of producers (a compare-and-swap
/// of the ring's tail).
#[derive(Clone, Copy, Debug)]
pub struct SharedRing(());

/// The ring held by one producer (see [`ExclusiveProducer`]); given back
/// when the producer is dropped.
pub struct ExclusiveRing {
    ring: RingPtr,
    /// Not `Sync`: the holder's reservations are plain stores of one thread.
    _one_thread: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for ExclusiveRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExclusiveRing")
            .field("ring", &self.ring.ring)
            .finish()
    }
}

impl RingAccess for SharedRing {}
impl RingAccess for ExclusiveRing {}

mod sealed {
    pub trait Access {
        /// Whether reservations are the holder's plain stores.
        const EXCLUSIVE: bool;
    }

    impl Access for super::SharedRing {
        const EXCLUSIVE: bool = false;
    }

    impl Access for super::ExclusiveRing {
        const EXCLUSIVE: bool = true;
    }
}

/// Reserves `n` consecutive slots (1 to the capacity) of `queue` as a
/// producer of access `R` does.
#[inline(always)]
pub(crate) fn reserve<R: RingAccess>(queue: &Queue, n: usize) -> Result<u64, Refusal> {
    if R::EXCLUSIVE {
        queue.try_reserve_held(n)
    } else if n == 1 {
        queue.try_reserve()
    } else {
        queue.try_reserve_many(n)
    }
}

impl Drop for ExclusiveRing {
    fn drop(&mut self) {
        // The producer holding this borrows the runtime: it is alive.
        self.ring.queue().release();
    }
}

impl<R: RingAccess> std::fmt::Debug for Producer<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("ring", &self.ring.ring)
            .field("access", &std::any::type_name::<R>())
            .finish()
    }
}

impl Runtime {
    /// A producer on the next ring in turn (each call takes the ring after
    /// the last call's, round the runtime's rings).
    pub fn producer(&self) -> Producer<'_> {
        let n = self
            .shared
            .next_producer
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.producer_at(n & (self.rings() - 1))
    }

    /// A producer on ring `ring`; [`Error::InvalidArgument`] unless it is
    /// below [`Runtime::rings`].
    pub fn producer_on(&self, ring: usize) -> Result<Producer<'_>> {
        if ring >= self.rings() {
            return Err(Error::InvalidArgument(format!(
                "ring {ring} of a runtime of {} rings",
                self.rings()
            )));
        }
        Ok(self.producer_at(ring))
    }

    #[inline(always)]
    pub(crate) fn producer_at(&self, ring: usize) -> Producer<'_> {
        Producer {
            rt: self,
            ring: RingPtr::new(&self.shared, ring),
            _access: SharedRing(()),
        }
    }

    /// A producer that holds ring `ring` alone until it is dropped (see
    /// [`ExclusiveProducer`]). Refuses: a ring not below
    /// [`Runtime::rings`] ([`Error::InvalidArgument`]); a ring another
    /// exclusive producer holds ([`Error::RingHeld`]); after
    /// [`Runtime::shutdown`] or [`Runtime::cancel`] began
    /// ([`Error::Closed`]).
    pub fn exclusive_producer_on(&self, ring: usize) -> Result<ExclusiveProducer<'_>> {
        let shared = self.producer_on(ring)?;
        shared.ring.queue().hold()?;
        Ok(Producer {
            rt: self,
            ring: shared.ring,
            _access: ExclusiveRing {
                ring: shared.ring,
                _one_thread: PhantomData,
            },
        })
    }

    /// An exclusive producer on the first ring that no other holds;
    /// [`Error::RingHeld`] if every ring is held.
    pub fn exclusive_producer(&self) -> Result<ExclusiveProducer<'_>> {
        for ring in 0..self.rings() {
            match self.exclusive_producer_on(ring) {
                Err(Error::RingHeld) => continue,
                other => return other,
            }
        }
        Err(Error::RingHeld)
    }
}

impl<'rt, R: RingAccess> Producer<'rt, R> {
    /// The ring it submits to.
    pub fn ring(&self) -> usize {
        self.ring.ring
    }

    /// The runtime it submits to.
    pub fn runtime(&self) -> &'rt Runtime {
        self.rt
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
    /// [`Runtime::cancel`] began, [`Error::Closed`]; while a shared ring
    /// another producer holds ([`Error::RingHeld`]). While it waits for room
    /// it may end in what a wait ends in: a device fault, a stop, or
    /// [`Error::Stalled`] for the worker whose slot it needs.
    pub fn submit<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        self.submit_bytes(op, bytemuck::bytes_of(args))
    }

    /// Like [`Producer::submit`], but returns [`Error::Full`] instead of
    /// waiting for a free slot.
    pub fn try_submit<A: Pod>(&self, op: Op, args: &A) -> Result<Ticket> {
        let bytes = bytemuck::bytes_of(args);
        let image = SlotImage::new(op.0, bytes)?;
        self.rt.shared.ops.refuse(op, bytes.len())?;
        match submit::<R>(self.ring, op, &image, false) {
            // A caller looping on Full must learn if the kernel died.
            Err(Error::Full) => {
                self.rt.shared.probe_if_due(now())?;
                Err(Error::Full)
            }
            other => other,
        }
    }

    /// Submits an IO task: `args` inline, as [`Producer::submit`], and
    /// `input` in the slot's input area (mapped memory: see
    /// [`Builder::io`](crate::Builder::io)), where the handler reads it
    /// (`ctx.input`); the handler's output (`ctx.output`) comes back with
    /// the completion ([`Ticket::wait_output`]). Waits while the ring is
    /// full.
    ///
    /// Refuses, with nothing submitted: a runtime without IO areas
    /// ([`Error::InvalidConfig`]); more input than its areas hold
    /// ([`Error::PayloadTooLarge`]); the rest as [`Producer::submit`].
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Op, Runtime, builtin::CopyIoArgs};
    /// let rt = Runtime::builder().io(1024, 1024).build()?;
    /// let input: Vec<u8> = (0..=255).collect();
    /// let args = CopyIoArgs { out_len: 256, key: 0xff };
    /// let (c, out) = rt.submit_io(Op::COPY_IO, &args, &input)?.wait_output()?;
    /// assert!(out.iter().zip(&input).all(|(o, i)| *o == i ^ 0xff));
    /// assert_eq!(c.value, input.iter().map(|&b| u64::from(b)).sum::<u64>());
    /// # Ok(()) }
    /// ```
    pub fn submit_io<A: Pod>(&self, op: Op, args: &A, input: &[u8]) -> Result<Ticket> {
        let bytes = bytemuck::bytes_of(args);
        let image = SlotImage::new(op.0, bytes)?;
        self.rt.shared.ops.refuse(op, bytes.len())?;
        self.publish_io(op, &image, input)
    }

    /// [`Producer::submit_io`] of raw argument bytes, any op.
    ///
    /// # Safety
    /// As [`Producer::submit_unchecked`].
    pub(crate) unsafe fn submit_unchecked_io_bytes(
        &self,
        op: Op,
        args: &[u8],
        input: &[u8],
    ) -> Result<Ticket> {
        self.publish_io(op, &SlotImage::new(op.0, args)?, input)
    }

    /// Publishes an IO task of `image` with `input` in its slot's input
    /// area, once [`Producer::check_input`] let it.
    fn publish_io(&self, op: Op, image: &SlotImage, input: &[u8]) -> Result<Ticket> {
        self.check_input(input)?;
        submit_with_input::<R>(
            self.ring,
            op,
            &image.with_input(input.len()),
            Some(input),
            true,
        )
    }

    /// Refuses an IO task's input on a runtime without IO areas
    /// ([`Error::InvalidConfig`]) or longer than they hold
    /// ([`Error::PayloadTooLarge`]).
    fn check_input(&self, input: &[u8]) -> Result<()> {
        let (most, _) = match self.ring.queue().io_limits() {
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

    /// Submits a task whose arguments are raw bytes (at most 48).
    pub fn submit_bytes(&self, op: Op, args: &[u8]) -> Result<Ticket> {
        let image = SlotImage::new(op.0, args)?;
        self.rt.shared.ops.refuse(op, args.len())?;
        submit::<R>(self.ring, op, &image, true)
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
        submit::<R>(self.ring, op, &image, true)
    }

    /// [`Producer::submit_unchecked`] of raw argument bytes.
    ///
    /// # Safety
    /// As [`Producer::submit_unchecked`].
    pub(crate) unsafe fn submit_unchecked_bytes(&self, op: Op, args: &[u8]) -> Result<Ticket> {
        let image = SlotImage::new(op.0, args)?;
        submit::<R>(self.ring, op, &image, true)
    }

    /// Submits a task of a declared op with its typed arguments, waiting
    /// while the ring is full. Refuses an op whose declaration disagrees with
    /// the kernel's op table ([`Error::OpMismatch`]) and an op declared
    /// [`with_pointers`](TypedOp::with_pointers) ([`Error::UncheckedOp`]: use
    /// [`Producer::call_unchecked`] or a safe wrapper).
    pub fn call<A: Pod>(&self, op: &TypedOp<A>, args: &A) -> Result<Ticket> {
        self.rt.shared.ops.check(&op.signature())?;
        if op.takes_pointers() {
            return Err(Error::UncheckedOp(op.op()));
        }
        // SAFETY: the kernel's op table agrees with the declaration, which
        // says the op's handler dereferences no address from its arguments.
        unsafe { self.submit_unchecked(op.op(), args) }
    }

    /// [`Producer::call`] for any declared op, including those whose handler
    /// dereferences device addresses among its arguments.
    ///
    /// # Safety
    /// As [`Producer::submit_unchecked`]: every device address in `args` must
    /// be valid for what the op does with it until the ticket reported
    /// completion or the kernel is known to have stopped.
    pub unsafe fn call_unchecked<A: Pod>(&self, op: &TypedOp<A>, args: &A) -> Result<Ticket> {
        self.rt.shared.ops.check(&op.signature())?;
        // SAFETY: the caller's contract, which is submit_unchecked's.
        unsafe { self.submit_unchecked(op.op(), args) }
    }

    /// Submits one task of `op` per element of `args` (each at most 48
    /// bytes, at most the ring's capacity of them): all or none, with one
    /// reservation for the consecutive slots they take, waiting while
    /// the ring has not that many free. The tasks are spread over the
    /// workers as single submits are.
    ///
    /// Refuses, with nothing submitted: more tasks than the capacity
    /// ([`Error::InvalidArgument`]: split the batch); ops whose handler
    /// dereferences device addresses ([`Error::UncheckedOp`]); arguments over
    /// 48 bytes ([`Error::PayloadTooLarge`]); arguments of another size than
    /// the op table lists ([`Error::OpMismatch`], as [`Producer::submit`]);
    /// after shutdown or cancel, [`Error::Closed`] (an empty batch too); a
    /// ring held by an exclusive producer, from a shared producer
    /// ([`Error::RingHeld`], an empty batch too); a device fault, a stop,
    /// or [`Error::Stalled`] (a worker of the slots it needs) while it
    /// waited for room.
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
        // Every element has the same size: one check for all.
        SlotImage::check_len(std::mem::size_of::<A>())?;
        self.rt.shared.ops.refuse(op, std::mem::size_of::<A>())?;
        self.batch(op, args)
    }

    /// A batch of a declared op's tasks with their typed arguments, as
    /// [`Producer::submit_batch`]: refuses an op whose declaration
    /// disagrees with the kernel's op table ([`Error::OpMismatch`]) and an
    /// op declared [`with_pointers`](TypedOp::with_pointers)
    /// ([`Error::UncheckedOp`]: use [`Producer::call_batch_unchecked`]).
    pub fn call_batch<A: Pod>(&self, op: &TypedOp<A>, args: &[A]) -> Result<Batch> {
        if op.takes_pointers() {
            self.rt.shared.ops.check(&op.signature())?;
            return Err(Error::UncheckedOp(op.op()));
        }
        // SAFETY: the op's handler dereferences no address from its
        // arguments (the declaration says so, checked against the table).
        unsafe { self.call_batch_unchecked(op, args) }
    }

    /// [`Producer::call_batch`] for any declared op, including those whose
    /// handler dereferences device addresses among its arguments.
    ///
    /// # Safety
    /// As [`Producer::submit_unchecked`], for every task of the batch: every
    /// device address in `args` must be valid for what the op does with it
    /// until the batch reported the task's completion or the kernel is
    /// known to have stopped.
    pub unsafe fn call_batch_unchecked<A: Pod>(
        &self,
        op: &TypedOp<A>,
        args: &[A],
    ) -> Result<Batch> {
        self.rt.shared.ops.check(&op.signature())?;
        SlotImage::check_len(std::mem::size_of::<A>())?;
        self.batch(op.op(), args)
    }

    /// Reserves and publishes a batch of checked arguments.
    fn batch<A: Pod>(&self, op: Op, args: &[A]) -> Result<Batch> {
        let ring = self.ring;
        ring.shared().check_open()?;
        let first = reserve_run::<R>(ring, args.len(), args.len())?;
        // Nothing between the reservation and the stores can fail.
        ring.queue().publish_run(first, op.0, args);
        Ok(Batch::new(ring, op, first, args.len(), 1))
    }

    /// Submits one task of `op` per element of `args` as
    /// [`Producer::submit_batch`] does, but packs up to 32 tasks into one
    /// slot: each argument is at most 8 bytes and goes into the slot's
    /// 8-byte word of a side area; each result comes back as one 8-byte
    /// word. A task then costs the host about one 8-byte store and one
    /// 8-byte load, and the device two reads of host memory per 32 tasks
    /// (the slot, then its argument words; one for arguments of 0 bytes).
    ///
    /// The tasks of one slot run one after another on one worker (each by
    /// its whole warp, as a single task runs), and share their completion
    /// timestamps (the pack's start and end); slots spread over the workers
    /// as single tasks do. A batch of `n` tasks takes `ceil(n / 32)`
    /// slots. For many small tasks: a long task holds up the rest of its
    /// slot.
    ///
    /// Refuses, with nothing submitted: more than 32 times the capacity
    /// ([`Error::InvalidArgument`]: split it); arguments over 8 bytes
    /// ([`Error::PayloadTooLarge`]); the rest as
    /// [`Producer::submit_batch`].
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Op, Runtime};
    /// let rt = Runtime::builder().build()?;
    /// let args: Vec<u64> = (0..4096).collect();
    /// // ECHO of one word returns the word.
    /// let results = rt.submit_packed(Op::ECHO, &args)?.wait()?;
    /// for (a, r) in args.iter().zip(&results) {
    ///     assert_eq!(r.as_ref().unwrap().value, *a);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn submit_packed<A: Pod>(&self, op: Op, args: &[A]) -> Result<Batch> {
        let ring = self.ring;
        let shared = ring.shared();
        SlotImage::check_pack_len(std::mem::size_of::<A>())?;
        shared.ops.refuse(op, std::mem::size_of::<A>())?;
        shared.check_open()?;
        let n = args.len();
        let first = reserve_run::<R>(ring, n.div_ceil(PACK_TASKS), n)?;
        // Nothing between the reservation and the stores can fail.
        ring.queue().publish_packs(first, op.0, args);
        Ok(Batch::new(ring, op, first, n, PACK_TASKS))
    }
}
