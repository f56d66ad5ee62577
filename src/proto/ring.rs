//! Sequence-number arithmetic of the ring: 63-bit sequence numbers that wrap,
//! and the slot and lap tag of each (the device computes the same in
//! `cuda/pkq_worker.cuh`).
//!
//! The 64th bit is left free for flags packed beside a sequence number in
//! host-only words: `BARRED` and `HELD` in the tail counter (`proto::tail`),
//! `DETACHED` in a slot's turn.

use crate::error::{Error, Result};
use crate::layout::{MAX_CAPACITY_LOG2, SEQ_BITS};

/// The sequence-number bits.
pub(crate) const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
/// The flag bit above a sequence number.
pub(crate) const FLAG: u64 = 1 << SEQ_BITS;

/// `a + n`, wrapping at 2^63.
#[inline(always)]
pub(crate) fn seq_add(a: u64, n: u64) -> u64 {
    a.wrapping_add(n) & SEQ_MASK
}

/// `a - n`, wrapping at 2^63.
#[inline(always)]
pub(crate) fn seq_sub(a: u64, n: u64) -> u64 {
    a.wrapping_sub(n) & SEQ_MASK
}

/// How far `to` is ahead of `from`, wrapping at 2^63.
#[inline(always)]
pub(crate) fn distance(from: u64, to: u64) -> u64 {
    to.wrapping_sub(from) & SEQ_MASK
}

/// The shape of a ring: a power-of-two number of slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    log2: u32,
}

impl Geometry {
    /// The largest capacity pkq accepts.
    pub(crate) const MAX_CAPACITY: usize = 1 << MAX_CAPACITY_LOG2;

    /// A ring of `capacity` slots: a power of two from 1 to [`Self::MAX_CAPACITY`].
    pub(crate) fn new(capacity: usize) -> Result<Self> {
        if capacity == 0 || !capacity.is_power_of_two() || capacity > Self::MAX_CAPACITY {
            return Err(Error::InvalidConfig(format!(
                "capacity {capacity} must be a power of two from 1 to {}",
                Self::MAX_CAPACITY
            )));
        }
        Ok(Self {
            log2: capacity.trailing_zeros(),
        })
    }

    #[inline(always)]
    pub(crate) fn capacity(self) -> usize {
        1 << self.log2
    }

    #[inline(always)]
    pub(crate) fn log2(self) -> u32 {
        self.log2
    }

    /// The slot of sequence number `seq`.
    #[inline(always)]
    pub(crate) fn slot(self, seq: u64) -> usize {
        (seq & (self.capacity() as u64 - 1)) as usize
    }

    /// The lap of `seq`: how many times the ring went round before it.
    #[inline(always)]
    pub(crate) fn lap(self, seq: u64) -> u64 {
        (seq & SEQ_MASK) >> self.log2
    }

    /// The tag byte of `seq`'s slot words: the low byte of its lap.
    #[inline(always)]
    pub(crate) fn tag(self, seq: u64) -> u8 {
        self.lap(seq) as u8
    }

    /// The sequence number that next uses `seq`'s slot.
    #[inline(always)]
    pub(crate) fn next_lap(self, seq: u64) -> u64 {
        seq_add(seq, self.capacity() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_validation() {
        for bad in [0, 3, 6, 1000, Geometry::MAX_CAPACITY * 2, usize::MAX] {
            assert!(
                matches!(Geometry::new(bad), Err(Error::InvalidConfig(_))),
                "{bad}"
            );
        }
        for good in [1, 2, 64, 1024, Geometry::MAX_CAPACITY] {
            assert_eq!(Geometry::new(good).unwrap().capacity(), good);
        }
    }

    /// Walks `laps` laps of every slot from `start`, checking that each slot's
    /// sequence numbers step by one lap and that tags step by one (mod 256).
    fn walk(capacity: usize, start: u64, laps: u64) {
        let g = Geometry::new(capacity).unwrap();
        let cap = capacity as u64;
        // Miri interprets each step: six laps still cross every boundary.
        let laps = if cfg!(miri) { laps.min(6) } else { laps };
        let mut prev_tag = vec![None::<u8>; capacity];
        let mut seq = start;
        for _ in 0..laps * cap {
            let slot = g.slot(seq);
            assert_eq!(slot as u64, seq % cap);
            assert_eq!(g.slot(g.next_lap(seq)), slot);
            if let Some(t) = prev_tag[slot] {
                assert_eq!(g.tag(seq), t.wrapping_add(1), "seq {seq:#x}");
            }
            prev_tag[slot] = Some(g.tag(seq));
            let next = seq_add(seq, 1);
            assert_eq!(distance(seq, next), 1);
            assert_eq!(seq_sub(next, 1), seq);
            seq = next;
        }
    }

    #[test]
    fn many_laps() {
        for cap in [1, 2, 8, 1024] {
            walk(cap, 0, 1000);
        }
    }

    #[test]
    fn across_the_wrap() {
        // Sequence numbers are 63 bits: the wrap is at 2^63, where the slot
        // and the tag must run on as if nothing happened.
        let largest = if cfg!(miri) {
            1024
        } else {
            Geometry::MAX_CAPACITY
        };
        for cap in [1, 2, 64, 1024, largest] {
            let start = SEQ_MASK - 3 * cap as u64 + 1;
            walk(cap, start, 6);
        }
        assert_eq!(seq_add(SEQ_MASK, 1), 0);
        assert_eq!(seq_sub(0, 1), SEQ_MASK);
        assert_eq!(distance(SEQ_MASK, 5), 6);
        // And the 64-bit counter wrap of the device's 64-bit registers.
        assert_eq!(seq_add(u64::MAX, 1), 0);
        let g = Geometry::new(16).unwrap();
        assert_eq!(g.tag(SEQ_MASK), 0xff);
        assert_eq!(g.tag(seq_add(SEQ_MASK, 1)), 0);
    }

    #[test]
    fn flags_stay_out_of_sequence_arithmetic() {
        assert_eq!(FLAG & SEQ_MASK, 0);
        assert_eq!(seq_add(FLAG | 5, 1), 6);
    }
}
