//! The host half of `submit` on heap memory that no device consumes: for
//! benchmarking what a producer thread pays, on any machine. Not API.

use bytemuck::Pod;

use crate::error::Result;
use crate::ops::Op;
use crate::queue::{Memory, Queue};
use crate::ring::Geometry;
use crate::slot::SlotImage;

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

    /// Frees every slot again (nothing consumes them here).
    pub fn reset(&mut self) {
        self.queue = self.memory.queue(self.geo, 0);
    }
}
