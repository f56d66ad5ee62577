//! What the queue's tests stand in for the device with: heap words for a
//! ring's mapped sections, and the device's completions.

use crate::layout::{CQE_WORDS, PACK_TASKS, SLOT_WORDS};
use crate::proto::queue::Queue;
use crate::proto::ring::Geometry;
use crate::proto::slot::Cqe;
use crate::proto::words::Words;
use crate::sync::Ordering;

/// Heap words standing in for the mapped sections of one ring (tests).
pub(crate) struct Memory {
    pub(crate) sq: Words,
    pub(crate) cq: Words,
    pub(crate) pack_args: Words,
    pub(crate) pack_results: Words,
}

impl Memory {
    pub(crate) fn new(geo: Geometry) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            sq: Words::heap(geo.capacity() * SLOT_WORDS),
            cq: Words::heap(geo.capacity() * CQE_WORDS),
            pack_args: Words::heap(geo.capacity() * PACK_TASKS),
            pack_results: Words::heap(geo.capacity() * PACK_TASKS),
        })
    }

    /// A queue over this memory.
    pub(crate) fn queue(&self, geo: Geometry, start: u64) -> Queue {
        let mem = [&self.sq, &self.cq, &self.pack_args, &self.pack_results];
        Queue::new(geo, mem.map(Words::clone), start)
    }

    /// The task in the slot of `seq`, if the slot is whole for its lap: what
    /// a poller of these slots reads (tests).
    pub(crate) fn task(&self, geo: Geometry, seq: u64) -> Option<crate::proto::slot::DecodedSlot> {
        let at = geo.slot(seq) * SLOT_WORDS;
        let words: [u64; SLOT_WORDS] =
            std::array::from_fn(|k| self.sq.at(at + k).load(Ordering::Relaxed));
        crate::proto::slot::DecodedSlot::decode(&words, geo.tag(seq))
    }
}

/// What the device does when a task completes (tests).
pub(super) fn complete(q: &Queue, seq: u64, value: u64) {
    q.complete(seq, &Cqe::ok(value));
}

/// A one-ring queue of `cap` slots with IO areas of up to `most` bytes,
/// over heap words (tests): the queue, its output area, and where slot 0's
/// output starts.
pub(super) fn io_queue(cap: usize, most: (usize, usize)) -> (Queue, Words, Words) {
    let plan = crate::proto::plan::Plan::new(Geometry::new(cap).unwrap(), 1, 1, 1, 0, most);
    let (h2d, d2h) = (Words::heap(plan.h2d_len), Words::heap(plan.d2h_len));
    let q = plan.queues(&h2d, &d2h).into_vec().remove(0);
    let out = d2h
        .sub(plan.io_at(0).1, d2h.len() - plan.io_at(0).1)
        .unwrap();
    (q, h2d, out)
}

/// As the device: an IO task's output, then (or before: `entry_first`)
/// its completion.
pub(super) fn complete_io(q: &Queue, out: &Words, seq: u64, output: &[u8], entry_first: bool) {
    let cqe = Cqe {
        flags: crate::layout::CQE_OUTPUT,
        poller: 0,
        ..Cqe::ok(output.len() as u64)
    };
    let (words, lap) = (q.io.as_ref().unwrap().out_words, q.geo.lap(seq));
    let at = q.geo.slot(seq) * words;
    if entry_first {
        q.complete(seq, &cqe);
    }
    crate::proto::io::write_output(out, at, output, lap);
    if !entry_first {
        q.complete(seq, &cqe);
    }
}
