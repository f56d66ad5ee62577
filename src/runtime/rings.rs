//! A lane's submission rings: their queues, which worker serves which
//! sequence number, and the turn of the next producer.

use crate::proto::plan::Plan;
use crate::proto::queue::Queue;
use crate::proto::words::Words;
use crate::sync::{AtomicUsize, Ordering};
use crate::trace::LaneShape;
use crate::trace::recorder::Recorder;
use std::sync::Arc;

/// The rings of one lane (see `Builder::rings`).
pub(crate) struct Rings {
    /// One per ring.
    pub(crate) queues: Box<[Queue]>,
    /// Every ring's first sequence number (see [`Rings::worker_of`]).
    start_seq: u64,
    /// Each ring's workers less one (a power of two less one).
    ring_worker_mask: u64,
    /// The ring of the next `Lane::producer`.
    next_producer: AtomicUsize,
}

impl Rings {
    /// The rings `plan` lays out over `h2d` and `d2h` (the queues write
    /// every slot's first tags: the device starts after), traced by
    /// `recorder` as lane `lane`, whose device logs traced tasks' blocks
    /// where `logs_blocks` (a lane of blocks or groups).
    pub(crate) fn new(
        plan: &Plan,
        h2d: &Words,
        d2h: &Words,
        (recorder, lane): (&Arc<Recorder>, u8),
        logs_blocks: bool,
    ) -> Self {
        Self {
            queues: plan
                .queues(h2d, d2h)
                .into_iter()
                .enumerate()
                .map(|(r, q)| q.with_trace(recorder.clone(), lane, r as u16, logs_blocks))
                .collect(),
            start_seq: plan.start_seq,
            ring_worker_mask: (plan.workers / plan.rings) as u64 - 1,
            next_producer: AtomicUsize::new(0),
        }
    }

    /// What a trace needs to name the worker of each record.
    pub(crate) fn shape(&self) -> LaneShape {
        LaneShape {
            rings: self.queues.len(),
            start_seq: self.start_seq,
            ring_worker_mask: self.ring_worker_mask,
            blocks: None,
        }
    }

    /// How many rings.
    pub(crate) fn len(&self) -> usize {
        self.queues.len()
    }

    /// How many workers serve each ring.
    pub(crate) fn workers_per_ring(&self) -> usize {
        self.ring_worker_mask as usize + 1
    }

    /// The worker that serves sequence number `seq` of ring `ring` (see
    /// WorkerSlots in `cuda/pkq_worker.cuh`).
    #[inline]
    pub(crate) fn worker_of(&self, ring: usize, seq: u64) -> usize {
        let in_ring = (seq.wrapping_sub(self.start_seq) & self.ring_worker_mask) as usize;
        ring + self.queues.len() * in_ring
    }

    /// The ring of the next producer made without naming one (round the
    /// rings in turn).
    pub(crate) fn next_turn(&self) -> usize {
        self.next_producer.fetch_add(1, Ordering::Relaxed) & (self.queues.len() - 1)
    }

    /// Whether the rings are closed (they close together).
    pub(crate) fn is_closed(&self) -> bool {
        self.queues[0].is_closed()
    }

    /// Closes every ring (once; later calls change nothing) and returns
    /// each ring's end: the sequence number after its last task.
    pub(crate) fn close(&self) -> Vec<u64> {
        self.queues.iter().map(Queue::close).collect()
    }

    /// Whether every task before each ring's end in `ends` completed.
    pub(crate) fn drained(&self, ends: &[u64]) -> bool {
        self.queues
            .iter()
            .zip(ends)
            .all(|(q, &end)| q.incomplete(end) == 0)
    }

    /// Records the traced tasks of dropped handles whose completions no
    /// producer will take back ([`Queue::record_detached`]).
    pub(crate) fn record_detached(&self) {
        for q in self.queues.iter() {
            q.record_detached();
        }
    }

    /// How many completions were moved out of their slots so far.
    pub(crate) fn moved(&self) -> u64 {
        self.queues.iter().map(Queue::moved).sum()
    }
}
