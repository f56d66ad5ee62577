//! The lifecycle of the handles that outlive calls: tickets and batches
//! point at the runtime's shared state without counting a reference, and
//! the runtime hands them orphan shares when it is dropped before them. All
//! of the lifecycle's `unsafe` is here (see "Orphans" in
//! `proto/queue.rs` and docs/PROTOCOL.md).

use std::ptr::NonNull;
use std::sync::Arc;

use crate::proto::queue::Queue;
use crate::proto::sync::Ordering;
use crate::runtime::Runtime;
use crate::runtime::shared::Shared;

/// What a ticket or batch holds: the runtime's shared state, as a pointer
/// that counts no reference, and which ring its tasks are in (a count per
/// task costs two locked instructions a task; benches/NOTES.md). The memory
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
    /// Ring `ring` of the runtime's `shared`. The pointer comes from the
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

    /// The runtime's shared state, as a pointer (for calls that may end the
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
        self.shared().worker_of(self.ring, seq)
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

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.shared.stop(true);
        // The completion thread: every task is complete (or the runtime
        // failed), so it fires what is left and ends; joined before the
        // orphan shares are handed out, so it reads no queue after. A
        // runtime dropped by a callback on that thread cannot join it: the
        // thread ends by itself after the callback, holding its own
        // reference to this memory until then.
        if let Some(thread) = self.shared.reactor.close()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
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

impl Shared {
    /// Gives back `shares` orphan shares (see `Shared::orphans`); the last
    /// drops the reference the runtime kept aside for it.
    ///
    /// # Safety
    /// `this` comes from `Arc::into_raw` or `Arc::as_ptr` of the runtime's
    /// `Arc<Shared>`; the caller holds `shares` shares and does not touch
    /// `*this` afterwards.
    pub(crate) unsafe fn release(this: *const Shared, shares: u64) {
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
}
