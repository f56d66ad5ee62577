//! Producers: handles that submit to one ring of a lane. A lane's (and a
//! runtime's) own submits use the calling thread's ring; a producer names
//! its ring ([`Lane::producer_on`]) or takes the next in turn
//! ([`Lane::producer`]), so that threads need share no ring, whatever
//! order they start in. An exclusive producer holds its ring alone
//! ([`Lane::exclusive_producer_on`]) and reserves without a locked
//! instruction (`proto::tail`; `docs/design/rings.md`).

use std::cell::Cell;
use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::runtime::handle::RingPtr;
use crate::runtime::lane::Lane;

/// Submits to one ring of a [`Lane`] ([`Submit`](crate::Submit)): the same
/// calls as the lane's, on the ring it was made for.
///
/// A `Producer<'rt>` (on a [`SharedRing`]) is cheap to copy; any number of
/// producers may share a ring (their reservations meet in a
/// compare-and-swap of the ring's tail), and a producer may be used from
/// any thread. An [`ExclusiveProducer`] holds its ring alone instead.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// use pkq::{Submit, builtin::NOP};
/// let rt = pkq::Runtime::builder().workers(64).rings(4).build()?;
/// std::thread::scope(|s| -> pkq::Result<()> {
///     for ring in 0..4 {
///         let p = rt.producer_on(ring)?;
///         s.spawn(move || -> pkq::Result<()> {
///             p.submit(NOP.args(&()))?.wait()?;
///             Ok(())
///         });
///     }
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct Producer<'rt, R: RingAccess = SharedRing> {
    lane: &'rt Lane,
    ring: RingPtr,
    /// Kept for its drop: an exclusive ring is given back then.
    _access: R,
}

/// A [`Producer`] that holds its ring alone, made by
/// [`Lane::exclusive_producer_on`]: it reserves slots with plain stores
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
/// use pkq::{Submit, builtin::{ECHO, NOP}};
/// let rt = pkq::Runtime::builder().workers(2).rings(2).build()?;
/// let p = rt.exclusive_producer_on(1)?;
/// // While it is held, ring 1 is refused to everyone else.
/// assert!(matches!(
///     rt.producer_on(1)?.submit(NOP.args(&())),
///     Err(pkq::Error::RingHeld)
/// ));
/// std::thread::scope(|s| {
///     // Moved to another thread (Send), and dropped with it.
///     s.spawn(move || {
///         for i in 0..1000u64 {
///             assert_eq!(p.submit(ECHO.args(&i)).unwrap().wait().unwrap().value, i);
///         }
///     });
/// });
/// // Given back: ring 1 is everyone's again.
/// rt.producer_on(1)?.submit(NOP.args(&()))?.wait()?;
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

impl Lane {
    /// A producer on the next ring in turn (each call takes the ring after
    /// the last call's, round the runtime's rings).
    pub fn producer(&self) -> Producer<'_> {
        self.producer_at(self.shared.rings.next_turn())
    }

    /// A producer on ring `ring`; [`Error::InvalidArgument`] unless it is
    /// below [`Lane::rings`].
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
            lane: self,
            ring: RingPtr::new(&self.shared, ring),
            _access: SharedRing(()),
        }
    }

    /// A producer that holds ring `ring` alone until it is dropped (see
    /// [`ExclusiveProducer`]). Refuses: a ring not below
    /// [`Lane::rings`] ([`Error::InvalidArgument`]); a ring another
    /// exclusive producer holds ([`Error::RingHeld`]); after
    /// [`Runtime::shutdown`](crate::Runtime::shutdown) or
    /// [`Runtime::cancel`](crate::Runtime::cancel) began ([`Error::Closed`],
    /// or the latched [`Error::DeviceFault`] where a fault led to the stop).
    pub fn exclusive_producer_on(&self, ring: usize) -> Result<ExclusiveProducer<'_>> {
        let shared = self.producer_on(ring)?;
        shared
            .ring
            .queue()
            .hold()
            .map_err(|r| match Error::from(r) {
                Error::Closed => self.shared.closed(),
                e => e,
            })?;
        Ok(Producer {
            lane: self,
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

    /// The lane it submits to.
    pub fn lane(&self) -> &'rt Lane {
        self.lane
    }

    /// Its ring, as the submit path takes it.
    #[inline(always)]
    pub(crate) fn ring_ptr(&self) -> RingPtr {
        self.ring
    }
}
