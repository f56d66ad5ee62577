//! What the handles that outlive calls hold: tickets and batches point at
//! a lane's shared state without counting a reference, and the lane hands
//! them orphan shares when it is dropped before them (`runtime::lifecycle`;
//! "Orphans" in `proto/queue.rs`, docs/PROTOCOL.md and
//! `docs/design/orphan-shares.md`).

use std::ptr::NonNull;
use std::sync::Arc;

use crate::proto::queue::Queue;
use crate::runtime::shared::Shared;

/// What a ticket or batch holds: the lane's shared state, as a pointer
/// that counts no reference, and which ring its tasks are in (a count per
/// task costs two locked instructions a task:
/// `docs/design/orphan-shares.md`). The memory stays valid by the orphan
/// protocol instead: while a handle owns a slot, the lane is alive or has
/// counted the handle a share (`Queue::orphan`), and the handle touches the
/// memory only while it owns a slot or holds a share (`Shared::release`).
/// A submitter (a lane, a producer, a pool) uses it while it borrows the
/// lane.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct RingPtr {
    shared: NonNull<Shared>,
    pub(crate) ring: usize,
}

// SAFETY: `Shared` is `Send + Sync`; the pointer is valid for as long as a
// handle may use it (see the type's docs), whichever thread that is on.
unsafe impl Send for RingPtr {}
// SAFETY: as above.
unsafe impl Sync for RingPtr {}

impl RingPtr {
    /// Ring `ring` of the lane's `shared`. The pointer comes from the
    /// `Arc` itself (not from a reference to its contents), so it keeps the
    /// provenance of the whole allocation: the last share given back
    /// rebuilds the `Arc` from it to drop it.
    #[inline(always)]
    pub(crate) fn new(shared: &Arc<Shared>, ring: usize) -> Self {
        Self {
            shared: NonNull::new(Arc::as_ptr(shared).cast_mut()).expect("an Arc is never null"),
            ring,
        }
    }

    /// The lane's shared state. Only for a submitter that borrows the lane,
    /// or a handle that owns a slot of this ring or holds an orphan share
    /// (see the type's docs).
    #[inline(always)]
    pub(crate) fn shared(&self) -> &Shared {
        // SAFETY: the lane frees `Shared` only once no handle owns a slot
        // (its own drop, when it counted no share) or the last share is
        // given back, and the callers borrow the lane, own a slot or hold a
        // share.
        unsafe { self.shared.as_ref() }
    }

    #[inline(always)]
    pub(crate) fn queue(&self) -> &Queue {
        &self.shared().rings.queues[self.ring]
    }

    /// The lane's shared state, as a pointer (for calls that may end the
    /// handle's hold on it: `Shared::wait_for`).
    #[inline(always)]
    pub(crate) fn shared_ptr(&self) -> NonNull<Shared> {
        self.shared
    }

    /// This ring's queue, as a pointer (for calls that may end the handle's
    /// hold on it: `Queue::take_at`, `Queue::detach_at`). Only for a handle
    /// that owns a slot of this ring or holds an orphan share.
    #[inline(always)]
    pub(crate) fn queue_ptr(&self) -> NonNull<Queue> {
        NonNull::from(self.queue())
    }

    /// The worker that serves sequence number `seq` of this ring.
    #[inline]
    pub(crate) fn worker_of(&self, seq: u64) -> usize {
        self.shared().rings.worker_of(self.ring, seq)
    }

    /// Gives back `shares` orphan shares (from `Take::Orphaned` or
    /// `Queue::detach`); the last frees the lane's memory.
    ///
    /// # Safety
    /// The caller holds `shares` shares and does not touch the runtime's
    /// memory (through this pointer or a reference from it) afterwards.
    pub(crate) unsafe fn release(self, shares: u64) {
        // SAFETY: the caller's shares keep `Shared` alive until here.
        unsafe { Shared::release(self.shared.as_ptr(), shares) }
    }
}
