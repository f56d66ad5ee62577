//! The host half of `submit` on heap memory that no device consumes: for
//! benchmarking what a producer thread pays, on any machine. Not API.

use bytemuck::Pod;

use crate::error::Result;
use crate::ops::op::Op;
use crate::proto::layout::PACK_TASKS;
use crate::proto::queue::{Memory, Queue, Take};
use crate::proto::ring::Geometry;
use crate::proto::slot::{Cqe, SlotImage};

/// A ring over heap words, with no kernel behind it.
pub struct HostRing {
    geo: Geometry,
    // `queue` points into `memory`: declared first, dropped first.
    queue: Queue,
    memory: std::sync::Arc<Memory>,
}

impl HostRing {
    /// An empty ring of `capacity` slots (a power of two).
    pub fn new(capacity: usize) -> Result<Self> {
        let geo = Geometry::new(capacity)?;
        let memory = Memory::new(geo);
        let queue = memory.queue(geo, 0);
        Ok(Self { geo, queue, memory })
    }

    /// What `Runtime::submit` does on the host before it builds the ticket:
    /// encode the arguments, reserve a sequence number, publish the slot.
    #[inline]
    pub fn submit<A: Pod>(&self, op: Op, args: &A) -> Result<u64> {
        let image = SlotImage::new(op.0, bytemuck::bytes_of(args))?;
        let seq = self.queue.try_reserve()?;
        self.queue.publish(seq, &image);
        Ok(seq)
    }

    /// [`HostRing::submit`] as an exclusive producer does it (the ring held
    /// by [`HostRing::hold`]): no locked instruction to reserve. `&mut`:
    /// one thread at a time, as an exclusive producer.
    #[inline]
    pub fn submit_held<A: Pod>(&mut self, op: Op, args: &A) -> Result<u64> {
        let image = SlotImage::new(op.0, bytemuck::bytes_of(args))?;
        let seq = self.queue.try_reserve_held(1)?;
        self.queue.publish(seq, &image);
        Ok(seq)
    }

    /// Holds the ring for [`HostRing::submit_held`] until the next
    /// [`HostRing::reset`].
    pub fn hold(&self) -> Result<()> {
        Ok(self.queue.hold()?)
    }

    /// What `Runtime::submit_batch` does on the host before it builds the
    /// batch: one reservation for all of `args`, then a slot for each.
    /// Returns the first sequence number.
    #[inline]
    pub fn submit_batch<A: Pod>(&self, op: Op, args: &[A]) -> Result<u64> {
        SlotImage::check_len(std::mem::size_of::<A>())?;
        let first = self.queue.try_reserve_many(args.len())?;
        self.queue.publish_run(first, op.0, args);
        Ok(first)
    }

    /// What `Runtime::submit_packed` does on the host before it builds the
    /// batch: one reservation for all the packs, their argument words, then
    /// their slots. Returns the first sequence number.
    #[inline]
    pub fn submit_packed<A: Pod>(&self, op: Op, args: &[A]) -> Result<u64> {
        SlotImage::check_pack_len(std::mem::size_of::<A>())?;
        let first = self
            .queue
            .try_reserve_many(args.len().div_ceil(PACK_TASKS))?;
        self.queue.publish_packs(first, op.0, args);
        Ok(first)
    }

    /// Writes the results of the pack of `seq` (`values`, at most 32) and
    /// its completion, as a device would.
    pub fn complete_pack(&self, seq: u64, values: &[u64]) {
        self.queue.complete_pack(seq, values);
    }

    /// What a packed batch does to reap the pack of `seq`: its tasks'
    /// results, once completed, freeing the slot.
    #[inline]
    pub fn take_pack(&self, seq: u64) -> Option<Box<[u64]>> {
        match self.queue.take(seq) {
            Take::Done(c) => c.results,
            Take::Pending | Take::Orphaned(_) => None,
        }
    }

    /// Writes the completion of `seq` as a device would (value `value`,
    /// status OK), standing in for the kernel.
    pub fn complete(&self, seq: u64, value: u64) {
        self.queue.complete(seq, &Cqe::ok(value));
    }

    /// What a ticket or a batch does to reap `seq`: its value, once
    /// completed, freeing the slot.
    #[inline]
    pub fn take(&self, seq: u64) -> Option<u64> {
        match self.queue.take(seq) {
            Take::Done(c) => Some(c.cqe.value),
            Take::Pending | Take::Orphaned(_) => None,
        }
    }

    /// Frees every slot again (nothing consumes them here).
    pub fn reset(&mut self) {
        self.queue = self.memory.queue(self.geo, 0);
    }
}
