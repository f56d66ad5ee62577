//! A ring's tail: the next sequence number to reserve, how producers
//! reserve it (shared, or held by one exclusive producer), and closing it.
//! Host-only words; the device never sees them.
//!
//! * `word`: shared producers' next sequence number, merged with a
//!   compare-and-swap. `BARRED` (bit 63) says shared producers may not
//!   reserve: the ring is closed or held. While held, the word is `HELD`
//!   (the holder's tail is in `held_tail`); a close that finds it held
//!   turns it into `HELD_CLOSED`, so the holder's release (a
//!   compare-and-swap from `HELD`) cannot unbar a closed ring.
//! * `held_tail`: the exclusive producer's next sequence number, written by
//!   it alone with plain stores: no locked instruction per reservation.
//! * `closing`: `OPEN`, then `CLOSING` while one closer works out where
//!   the ring ends, then that end: the first sequence number never
//!   reserved. Whether the ring is closed is read here.
//! * `holder`: 1 while an exclusive producer holds the ring.
//!
//! The exclusive producer and a closer meet in a Dekker handshake: the
//! producer stores `held_tail`, then loads `closing`; the closer bars the
//! word, then loads `held_tail`. With a barrier between each side's store
//! and load (`proto::barrier`: a compiler fence on the producer's side,
//! membarrier on the closer's) one of them sees the other: either the
//! closer counts the reservation into the end, or the producer sees the
//! close begin. In the second case the producer waits for the end (the
//! closer stores it a few steps later and waits for nothing meanwhile)
//! and keeps its reservation only if the end counts it.

use crossbeam_utils::CachePadded;

use crate::proto::barrier;
use crate::proto::ring::{FLAG, SEQ_MASK, seq_add};
use crate::sync::{AtomicU64, Ordering, fence};

/// Shared producers may not reserve.
const BARRED: u64 = FLAG;
/// The word while an exclusive producer holds the ring.
const HELD: u64 = BARRED;
/// The word once a close found the ring held.
const HELD_CLOSED: u64 = BARRED | 1;
/// `closing` before any close.
const OPEN: u64 = u64::MAX;
/// `closing` while a closer works out the end.
const CLOSING: u64 = u64::MAX - 1;

/// Why no sequence number could be reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The slot of the next sequence number is still owned.
    Full,
    /// The ring is closed.
    Closed,
    /// An exclusive producer holds the ring.
    Held,
}

impl From<Refusal> for crate::error::Error {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Full => Self::Full,
            Refusal::Closed => Self::Closed,
            Refusal::Held => Self::RingHeld,
        }
    }
}

pub(crate) struct Tail {
    word: CachePadded<AtomicU64>,
    held_tail: CachePadded<AtomicU64>,
    closing: CachePadded<AtomicU64>,
    holder: AtomicU64,
}

impl Tail {
    pub(crate) fn new(start: u64) -> Self {
        Self {
            word: CachePadded::new(AtomicU64::new(start & SEQ_MASK)),
            held_tail: CachePadded::new(AtomicU64::new(start & SEQ_MASK)),
            closing: CachePadded::new(AtomicU64::new(OPEN)),
            holder: AtomicU64::new(0),
        }
    }

    /// Reserves `n` consecutive sequence numbers as a shared producer, all
    /// or none: `Full` while `free(seq)` is false for one of them.
    #[inline]
    pub(crate) fn reserve(&self, n: usize, free: impl Fn(u64) -> bool) -> Result<u64, Refusal> {
        let mut tail = self.word.load(Ordering::Relaxed);
        loop {
            if tail & BARRED != 0 {
                // Synchronizes with the compare-and-swap that barred the
                // word: a close wrote `closing` before it.
                fence(Ordering::Acquire);
                return Err(if self.is_closed() {
                    Refusal::Closed
                } else {
                    Refusal::Held
                });
            }
            let mut ready = 0;
            while ready < n && free(seq_add(tail, ready as u64)) {
                ready += 1;
            }
            if ready < n {
                let now = self.word.load(Ordering::Relaxed);
                if now == tail {
                    return Err(Refusal::Full);
                }
                tail = now;
                continue;
            }
            match self.word.compare_exchange_weak(
                tail,
                seq_add(tail, n as u64),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(tail),
                Err(now) => tail = now,
            }
        }
    }

    /// Takes the ring for one exclusive producer: `Held` if another holds
    /// it, `Closed` once closed.
    pub(crate) fn hold(&self) -> Result<(), Refusal> {
        barrier::register();
        if self.is_closed() {
            return Err(Refusal::Closed);
        }
        if self
            .holder
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(Refusal::Held);
        }
        let mut tail = self.word.load(Ordering::Relaxed);
        loop {
            // Only a close bars a ring nobody holds.
            if tail & BARRED != 0 || self.is_closed() {
                self.holder.store(0, Ordering::Release);
                return Err(Refusal::Closed);
            }
            // Read by a closer only once the word says held (the
            // compare-and-swap below publishes it).
            self.held_tail.store(tail, Ordering::Relaxed);
            match self
                .word
                .compare_exchange(tail, HELD, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => tail = now,
            }
        }
    }

    /// The holder's reservation of `n` sequence numbers (see the module
    /// docs): `Full` while `free(seq)` is false for one of them. Only the
    /// holder calls it, from one thread at a time.
    #[inline]
    pub(crate) fn reserve_held(
        &self,
        n: usize,
        free: impl Fn(u64) -> bool,
    ) -> Result<u64, Refusal> {
        let tail = self.held_tail.load(Ordering::Relaxed);
        for k in 0..n as u64 {
            if !free(seq_add(tail, k)) {
                // Nothing stored: a closed ring is closed, not full.
                return Err(if self.is_closed() {
                    Refusal::Closed
                } else {
                    Refusal::Full
                });
            }
        }
        let next = seq_add(tail, n as u64);
        self.held_tail.store(next, Ordering::Relaxed);
        barrier::light();
        if self.closing.load(Ordering::Relaxed) == OPEN {
            // A closer that bars the word from now on sees `next`.
            return Ok(tail);
        }
        if self.end() == next {
            Ok(tail)
        } else {
            // The end is `tail`: the closer read the store before. It is
            // done with `held_tail`; take the reservation back.
            self.held_tail.store(tail, Ordering::Relaxed);
            Err(Refusal::Closed)
        }
    }

    /// Gives the ring back to shared producers (by the holder, once it
    /// reserves no more): its tail becomes theirs, unless a close barred it
    /// for good meanwhile.
    pub(crate) fn release(&self) {
        let tail = self.held_tail.load(Ordering::Relaxed);
        let _ = self
            .word
            .compare_exchange(HELD, tail, Ordering::AcqRel, Ordering::Relaxed);
        self.holder.store(0, Ordering::Release);
    }

    /// Refuses every later reservation; returns the first sequence number
    /// never reserved (every caller gets the same).
    pub(crate) fn close(&self) -> u64 {
        if self
            .closing
            .compare_exchange(OPEN, CLOSING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return self.end();
        }
        let mut tail = self.word.load(Ordering::Relaxed);
        let end = loop {
            let barred = if tail & BARRED == 0 {
                tail | BARRED
            } else {
                // Held (only this closer bars a ring nobody holds).
                HELD_CLOSED
            };
            match self
                .word
                .compare_exchange(tail, barred, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if tail & BARRED == 0 => break tail,
                Ok(_) => {
                    barrier::heavy();
                    break self.held_tail.load(Ordering::Relaxed);
                }
                Err(now) => tail = now,
            }
        };
        self.closing.store(end, Ordering::Release);
        end
    }

    /// The end a closer found, waiting while it works it out: its next
    /// steps wait for nothing, so the wait ends.
    fn end(&self) -> u64 {
        loop {
            match self.closing.load(Ordering::Acquire) {
                CLOSING => crate::sync::yield_now(),
                end => return end,
            }
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closing.load(Ordering::Relaxed) != OPEN
    }

    /// Whether an exclusive producer holds the ring.
    pub(crate) fn is_held(&self) -> bool {
        self.holder.load(Ordering::Relaxed) != 0
    }

    /// The next sequence number a reservation would most likely get (a
    /// hint: for prefetching and diagnostics).
    #[inline]
    pub(crate) fn hint(&self) -> u64 {
        match self.closing.load(Ordering::Relaxed) {
            OPEN | CLOSING => {}
            end => return end,
        }
        let word = self.word.load(Ordering::Relaxed);
        if word & BARRED == 0 {
            word
        } else {
            self.held_tail.load(Ordering::Relaxed)
        }
    }
}
