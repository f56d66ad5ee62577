//! The host half of the ring protocol (the device half is
//! `cuda/pkq_worker.cuh`): reserving a sequence number, publishing a slot,
//! reading a completion, and handing the slot back.
//!
//! The shared words and their protocol are described in `cuda/pkq_layout.h`.
//! This module adds two host-only kinds of word, which the device never sees:
//!
//! * `tail`: the next sequence number to reserve, with `CLOSED` in bit 63.
//!   Producers merge here with a compare-and-swap (a host atomic: read-modify-
//!   write atomics on mapped memory are not atomic against the device, so no
//!   shared word is ever the target of one).
//! * `turns[slot]`: the slot's owner. `s` means: free for sequence number `s`
//!   if `s` is not reserved yet, else owned by the task `s` (in flight, or
//!   completed and not yet read by its ticket). `s | DETACHED` means the task
//!   `s` lost its ticket; whoever finds it complete may free the slot.
//!   Stored with release by the ticket that read the completion, loaded with
//!   acquire by the producer that reuses the slot, so the producer's slot
//!   stores happen after the completion was seen (and the completion was
//!   written after the device finished reading the slot).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::layout::{CQE_WORDS, SLOT_WORDS};
use crate::ring::{FLAG, Geometry, SEQ_MASK, distance, seq_add, seq_sub};
use crate::slot::{Cqe, SlotImage, tagged};

const CLOSED: u64 = FLAG;
const DETACHED: u64 = FLAG;

/// A view of 8-byte words shared with the device (mapped pinned memory, or
/// heap memory for the software device of the tests). Only ever accessed
/// through atomics, so concurrent device access is not a data race on the
/// Rust side.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Words {
    ptr: NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: a `Words` is a pointer to atomics; sharing it between threads
// shares only atomic accesses. Its creator guarantees the memory outlives it.
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

impl Words {
    /// # Safety
    /// `ptr` must be 8-byte aligned and valid for reads and writes of `len`
    /// words for as long as this view (or a copy of it) is used, and the
    /// memory must be accessed by this process only through atomics.
    pub(crate) unsafe fn new(ptr: NonNull<u64>, len: usize) -> Self {
        Self {
            ptr: ptr.cast(),
            len,
        }
    }

    #[inline(always)]
    pub(crate) fn at(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len);
        // SAFETY: `i < len` and the constructor's contract keeps the memory
        // valid and only atomically accessed.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Why no sequence number could be reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The slot of the next sequence number is still owned.
    Full,
    /// The queue is closed.
    Closed,
}

pub(crate) struct Queue {
    geo: Geometry,
    /// Host-only: next sequence number, `CLOSED` in bit 63.
    tail: CachePadded<AtomicU64>,
    /// Host-only: the owner of each slot (see the module docs).
    turns: Box<[AtomicU64]>,
    /// Host-written, device-read: `capacity * SLOT_WORDS` tagged words.
    sq: Words,
    /// Device-written, host-read: `capacity * CQE_WORDS` tagged words.
    cq: Words,
}

impl Queue {
    /// A queue over `sq` and `cq` whose first sequence number is `start`.
    /// Writes every slot and entry with the tag of the lap before its first
    /// use, so nothing reads as published or completed.
    pub(crate) fn new(geo: Geometry, sq: Words, cq: Words, start: u64) -> Self {
        let cap = geo.capacity();
        assert_eq!(sq.len(), cap * SLOT_WORDS);
        assert_eq!(cq.len(), cap * CQE_WORDS);
        let start = start & SEQ_MASK;
        let turns: Box<[AtomicU64]> = (0..cap).map(|_| AtomicU64::new(0)).collect();
        for i in 0..cap as u64 {
            let seq = seq_add(start, i);
            let slot = geo.slot(seq);
            turns[slot].store(seq, Ordering::Relaxed);
            let before = tagged(0, geo.tag(seq).wrapping_sub(1));
            for k in 0..SLOT_WORDS {
                sq.at(slot * SLOT_WORDS + k)
                    .store(before, Ordering::Relaxed);
            }
            for k in 0..CQE_WORDS {
                cq.at(slot * CQE_WORDS + k).store(before, Ordering::Relaxed);
            }
        }
        Self {
            geo,
            tail: CachePadded::new(AtomicU64::new(start)),
            turns,
            sq,
            cq,
        }
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Reserves the next sequence number, or says why not. Lock-free: a
    /// failed compare-and-swap means another producer took a number.
    #[inline]
    pub(crate) fn try_reserve(&self) -> Result<u64, Refusal> {
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            if tail & CLOSED != 0 {
                return Err(Refusal::Closed);
            }
            let turn = &self.turns[self.geo.slot(tail)];
            let owner = turn.load(Ordering::Acquire);
            if owner == tail {
                match self.tail.compare_exchange_weak(
                    tail,
                    seq_add(tail, 1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(tail),
                    Err(now) => {
                        tail = now;
                        continue;
                    }
                }
            }
            let prev = seq_sub(tail, self.geo.capacity() as u64);
            if owner == prev | DETACHED && self.poll(prev).is_some() {
                // The previous lap's task completed after its ticket was
                // dropped: free the slot for `tail` (one reclaimer wins).
                let _ = turn.compare_exchange(owner, tail, Ordering::AcqRel, Ordering::Relaxed);
                continue;
            }
            let now = self.tail.load(Ordering::Relaxed);
            if now == tail {
                return Err(Refusal::Full);
            }
            tail = now;
        }
    }

    /// Publishes the reserved `seq`: eight relaxed 8-byte stores, in any
    /// order (each word is tagged). Nothing here can fail or panic, so a
    /// reservation is always published.
    #[inline(always)]
    pub(crate) fn publish(&self, seq: u64, image: &SlotImage) {
        let tag = self.geo.tag(seq);
        let base = self.geo.slot(seq) * SLOT_WORDS;
        for k in 0..SLOT_WORDS {
            self.sq
                .at(base + k)
                .store(image.word(k, tag), Ordering::Relaxed);
        }
    }

    /// The completion of `seq`, once all its words have landed.
    #[inline(always)]
    pub(crate) fn poll(&self, seq: u64) -> Option<Cqe> {
        let tag = self.geo.tag(seq);
        let base = self.geo.slot(seq) * CQE_WORDS;
        // The first word alone answers "not yet" in the common case.
        let w0 = self.cq.at(base).load(Ordering::Acquire);
        if crate::slot::tag_of(w0) != tag {
            return None;
        }
        let words: [u64; CQE_WORDS] = std::array::from_fn(|k| match k {
            0 => w0,
            _ => self.cq.at(base + k).load(Ordering::Acquire),
        });
        Cqe::decode(&words, tag)
    }

    /// The ticket of `seq` read its completion: the slot is free for the next lap.
    #[inline(always)]
    pub(crate) fn release(&self, seq: u64) {
        self.turns[self.geo.slot(seq)].store(self.geo.next_lap(seq), Ordering::Release);
    }

    /// The ticket of `seq` is gone without reading its completion.
    pub(crate) fn detach(&self, seq: u64) {
        if self.poll(seq).is_some() {
            self.release(seq);
        } else {
            // Only the ticket writes the turn while it owns the slot; a
            // producer frees a detached slot once it sees the completion.
            self.turns[self.geo.slot(seq)].store(seq | DETACHED, Ordering::Release);
        }
    }

    /// Refuses every later reservation; returns the first sequence number
    /// never reserved.
    pub(crate) fn close(&self) -> u64 {
        self.tail.fetch_or(CLOSED, Ordering::AcqRel) & SEQ_MASK
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tail.load(Ordering::Relaxed) & CLOSED != 0
    }

    /// How many reserved tasks have not completed, `end` being the tail
    /// returned by [`Self::close`]. A reserved, unpublished task counts.
    pub(crate) fn incomplete(&self, end: u64) -> usize {
        let cap = self.geo.capacity() as u64;
        self.turns
            .iter()
            .filter(|turn| {
                let seq = turn.load(Ordering::Acquire) & SEQ_MASK;
                let d = distance(seq, end);
                (1..=cap).contains(&d) && self.poll(seq).is_none()
            })
            .count()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The host protocol against a software device: a thread that does what
    //! the resident kernel does, over heap memory.
    use super::*;
    use crate::slot::DecodedSlot;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    /// Heap words standing in for the two mapped allocations.
    pub(crate) struct Memory {
        sq: Box<[AtomicU64]>,
        cq: Box<[AtomicU64]>,
    }

    impl Memory {
        pub(crate) fn new(geo: Geometry) -> Arc<Self> {
            let words = |n| (0..n).map(|_| AtomicU64::new(0)).collect();
            Arc::new(Self {
                sq: words(geo.capacity() * SLOT_WORDS),
                cq: words(geo.capacity() * CQE_WORDS),
            })
        }

        fn view(b: &[AtomicU64]) -> Words {
            // SAFETY: the boxes live as long as the Arc<Memory> that every
            // user of these views holds; they are only accessed atomically.
            unsafe { Words::new(NonNull::new(b.as_ptr() as *mut u64).unwrap(), b.len()) }
        }

        pub(crate) fn queue(&self, geo: Geometry, start: u64) -> Queue {
            Queue::new(geo, Self::view(&self.sq), Self::view(&self.cq), start)
        }
    }

    /// Serves slots like one device worker of `workers` (ECHO folds, any other
    /// op completes with value 0) until `stop`.
    pub(crate) fn device_worker(
        mem: Arc<Memory>,
        geo: Geometry,
        start: u64,
        worker: u64,
        workers: u64,
        stop: Arc<AtomicBool>,
    ) {
        let sq = Memory::view(&mem.sq);
        let cq = Memory::view(&mem.cq);
        let mut seq = seq_add(start, worker);
        while !stop.load(Ordering::Relaxed) {
            let (slot, tag) = (geo.slot(seq), geo.tag(seq));
            let words: [u64; SLOT_WORDS] =
                std::array::from_fn(|k| sq.at(slot * SLOT_WORDS + k).load(Ordering::Relaxed));
            let Some(task) = DecodedSlot::decode(&words, tag) else {
                // Tests run more threads than cores: let the producers run.
                std::thread::yield_now();
                continue;
            };
            let value = if task.op == crate::layout::OP_ECHO {
                crate::ops::echo_fold(&task.args)
            } else {
                0
            };
            let cqe = Cqe {
                status: 0,
                value,
                t_start: seq,
                t_end: seq,
            };
            for (k, w) in cqe.encode(tag).iter().enumerate() {
                cq.at(slot * CQE_WORDS + k).store(*w, Ordering::Release);
            }
            seq = seq_add(seq, workers);
        }
    }

    fn echo(id: u64) -> SlotImage {
        SlotImage::new(crate::layout::OP_ECHO, &id.to_le_bytes()).unwrap()
    }

    #[test]
    fn full_ring_refuses_then_accepts_after_release() {
        let geo = Geometry::new(4).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let seqs: Vec<u64> = (0..4).map(|_| q.try_reserve().unwrap()).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
        // Completing is not enough: the slot is free once the ticket read it.
        for (k, w) in (Cqe {
            status: 0,
            value: 9,
            t_start: 0,
            t_end: 0,
        })
        .encode(0)
        .iter()
        .enumerate()
        {
            q.cq.at(k).store(*w, Ordering::Relaxed);
        }
        assert_eq!(q.poll(0).map(|c| c.value), Some(9));
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
        q.release(0);
        assert_eq!(q.try_reserve(), Ok(4));
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
    }

    #[test]
    fn detached_slot_is_reclaimed_once_complete() {
        let geo = Geometry::new(2).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let a = q.try_reserve().unwrap();
        q.publish(a, &echo(1));
        let b = q.try_reserve().unwrap();
        q.release(b); // pretend b completed and was read
        q.detach(a); // a's ticket dropped while a is in flight
        // The next number, 2, uses a's slot: refused while a is incomplete.
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
        for (k, w) in (Cqe {
            status: 0,
            value: 0,
            t_start: 0,
            t_end: 0,
        })
        .encode(0)
        .iter()
        .enumerate()
        {
            q.cq.at(k).store(*w, Ordering::Relaxed);
        }
        assert_eq!(q.try_reserve(), Ok(2)); // reclaimed
        assert_eq!(q.try_reserve(), Ok(3)); // b's slot, released
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
    }

    #[test]
    fn close_refuses_and_counts_incomplete() {
        let geo = Geometry::new(8).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        for _ in 0..3 {
            let s = q.try_reserve().unwrap();
            q.publish(s, &echo(s));
        }
        let end = q.close();
        assert_eq!(end, 3);
        assert!(q.is_closed());
        assert_eq!(q.try_reserve(), Err(Refusal::Closed));
        assert_eq!(q.incomplete(end), 3);
    }

    /// Runs `tasks` ECHO tasks from `producers` threads against `workers`
    /// software workers, each producer keeping up to `window` tickets, and
    /// checks every result arrives exactly once.
    fn end_to_end(cap: usize, workers: u64, producers: u64, tasks: u64, window: usize, start: u64) {
        let geo = Geometry::new(cap).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, start));
        let stop = Arc::new(AtomicBool::new(false));
        let devs: Vec<_> = (0..workers)
            .map(|w| {
                let (m, s) = (mem.clone(), stop.clone());
                std::thread::spawn(move || device_worker(m, geo, start, w, workers, s))
            })
            .collect();
        let seen: Arc<Vec<AtomicU64>> = Arc::new((0..tasks).map(|_| AtomicU64::new(0)).collect());
        let prods: Vec<_> = (0..producers)
            .map(|p| {
                let (q, seen) = (q.clone(), seen.clone());
                std::thread::spawn(move || {
                    let mut inflight = std::collections::VecDeque::new();
                    let reap = |inflight: &mut std::collections::VecDeque<(u64, u64)>| {
                        let (seq, id) = inflight.pop_front().unwrap();
                        let c = loop {
                            if let Some(c) = q.poll(seq) {
                                break c;
                            }
                            std::thread::yield_now();
                        };
                        q.release(seq);
                        assert_eq!(c.value, crate::ops::echo_fold(&[id, 0, 0, 0, 0, 0]));
                        seen[id as usize].fetch_add(1, Ordering::Relaxed);
                    };
                    for id in (p..tasks).step_by(producers as usize) {
                        let seq = loop {
                            match q.try_reserve() {
                                Ok(s) => break s,
                                Err(Refusal::Full) if !inflight.is_empty() => reap(&mut inflight),
                                Err(Refusal::Full) => std::thread::yield_now(),
                                Err(Refusal::Closed) => unreachable!(),
                            }
                        };
                        q.publish(seq, &echo(id));
                        inflight.push_back((seq, id));
                        if inflight.len() >= window {
                            reap(&mut inflight);
                        }
                    }
                    while !inflight.is_empty() {
                        reap(&mut inflight);
                    }
                })
            })
            .collect();
        for p in prods {
            p.join().unwrap();
        }
        let end = q.close();
        assert_eq!(q.incomplete(end), 0);
        stop.store(true, Ordering::Relaxed);
        for d in devs {
            d.join().unwrap();
        }
        assert!(
            seen.iter().all(|c| c.load(Ordering::Relaxed) == 1),
            "every task exactly once"
        );
    }

    #[test]
    fn software_device_one_producer_many_laps() {
        end_to_end(64, 1, 1, 20_000, 48, 0);
    }

    #[test]
    fn software_device_many_producers_many_workers() {
        end_to_end(64, 4, 4, 40_000, 8, 0);
    }

    #[test]
    fn software_device_across_the_sequence_wrap() {
        end_to_end(16, 2, 2, 5_000, 4, SEQ_MASK - 1000);
    }
}
