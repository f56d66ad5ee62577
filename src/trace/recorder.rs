//! The record of each task while tracing is on: stamps the producers leave
//! per slot, and a bounded buffer of whole records that the hosts' takers
//! of completions fill, shared by every ring of a runtime.
//!
//! Words and their writers (all host memory, never mapped):
//! * `on`: written by `Recorder::set_on` (any thread), read (relaxed) by
//!   producers and takers; a task is recorded when it was on both at its
//!   publish and when its completion was taken.
//! * a slot's stamp (`SlotStamps`): written by the producer that publishes
//!   the slot's lap (it owns the slot then), before the slot's stores, as a
//!   sequence lock (the sequence word marked busy, the rest, the sequence
//!   number last with release); read by the threads that read that lap's
//!   completion, before the slot is freed. Which of them records the task
//!   (once) is `proto::queue`'s: the holder that takes the completion, or,
//!   for a dropped ticket, the producer that frees the slot.
//! * `next`: the claim counter, one `fetch_add` a record (host memory,
//!   host threads only); a claim past the capacity is a dropped record,
//!   so the count of dropped records is exact.
//! * an entry's eight words: written once by the thread that claimed it,
//!   its last word with a release store that marks it whole; read by
//!   snapshots (acquire on that word first). Entries are never reused.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicU64, Mutex, OnceLock, Ordering, fence, lock, ticks};

/// Words of one entry (one cache line).
const ENTRY_WORDS: usize = 8;

/// One entry: a cache line of its own (aligned to one), so that a record
/// writes one line, and the next entry's prefetch brings all of it.
#[repr(C, align(64))]
pub(crate) struct Entry(pub(crate) [AtomicU64; ENTRY_WORDS]);
/// The last word's bit that says the entry is whole.
const WHOLE: u64 = 1 << 63;

/// What a producer leaves in a slot's stamp at publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) seq: u64,
    pub(crate) tick: u64,
    pub(crate) op: u16,
    pub(crate) thread: u32,
}

/// The sequence word of a stamp being rewritten.
const BUSY: u64 = u64::MAX - 1;
/// The sequence word of a slot never stamped.
const NONE: u64 = u64::MAX;

/// One stamp per slot of a ring: its sequence number, tick, and op with
/// thread, in half a line of its own (no stamp straddles two lines).
pub(crate) struct SlotStamps {
    words: Box<[Stamped]>,
}

#[repr(align(32))]
struct Stamped([AtomicU64; 4]);

impl SlotStamps {
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            words: (0..slots)
                .map(|_| Stamped(std::array::from_fn(|_| AtomicU64::new(NONE))))
                .collect(),
        }
    }

    /// Leaves `s` in `slot` (its publisher, which owns the slot), as a
    /// sequence lock: the sequence word marked busy, then the rest, then
    /// the sequence number (release).
    #[inline]
    pub(crate) fn put(&self, slot: usize, s: Stamp) {
        let w = &self.words[slot].0;
        w[0].store(BUSY, Ordering::Relaxed);
        fence(Ordering::Release);
        w[1].store(s.tick, Ordering::Relaxed);
        w[2].store(
            u64::from(s.op) | u64::from(s.thread) << 32,
            Ordering::Relaxed,
        );
        w[0].store(s.seq, Ordering::Release);
    }

    /// The stamp of `seq` in `slot`, if its publisher left one, read as
    /// a sequence lock (the sequence number before and after the rest): a
    /// stamp being rewritten meanwhile for a later lap is not taken for
    /// this one's.
    #[inline]
    pub(crate) fn read(&self, slot: usize, seq: u64) -> Option<Stamp> {
        let w = &self.words[slot].0;
        if w[0].load(Ordering::Acquire) != seq {
            return None;
        }
        let tick = w[1].load(Ordering::Relaxed);
        let packed = w[2].load(Ordering::Relaxed);
        // Orders the two loads before the second look: had they seen a
        // later `put`'s words, the sequence word is no longer `seq`.
        fence(Ordering::Acquire);
        if w[0].load(Ordering::Relaxed) != seq {
            return None;
        }
        Some(Stamp {
            seq,
            tick,
            op: packed as u16,
            thread: (packed >> 32) as u32,
        })
    }
}

/// A task as recorded, before the export maps its clocks (see
/// `crate::trace::TaskRecord`, its public form).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raw {
    pub(crate) seq: u64,
    pub(crate) submit_tick: u64,
    pub(crate) seen_tick: u64,
    pub(crate) device_start_ns: u64,
    pub(crate) device_end_ns: u64,
    pub(crate) op: u16,
    pub(crate) ring: u16,
    pub(crate) lane: u8,
    pub(crate) status: u8,
    pub(crate) tasks: u8,
    pub(crate) poller: u8,
    pub(crate) submit_thread: u32,
    pub(crate) seen_thread: u32,
}

impl Raw {
    fn encode(&self) -> [u64; ENTRY_WORDS] {
        [
            self.seq,
            self.submit_tick,
            self.seen_tick,
            self.device_start_ns,
            self.device_end_ns,
            u64::from(self.op)
                | u64::from(self.ring) << 16
                | u64::from(self.lane) << 32
                | u64::from(self.status) << 40
                | u64::from(self.tasks) << 48
                | u64::from(self.poller) << 56,
            u64::from(self.submit_thread),
            u64::from(self.seen_thread & 0x7fff_ffff) | WHOLE,
        ]
    }

    fn decode(w: &[u64; ENTRY_WORDS]) -> Self {
        Self {
            seq: w[0],
            submit_tick: w[1],
            seen_tick: w[2],
            device_start_ns: w[3],
            device_end_ns: w[4],
            op: w[5] as u16,
            ring: (w[5] >> 16) as u16,
            lane: (w[5] >> 32) as u8,
            status: (w[5] >> 40) as u8,
            tasks: (w[5] >> 48) as u8,
            poller: (w[5] >> 56) as u8,
            submit_thread: w[6] as u32,
            seen_thread: (w[7] & 0x7fff_ffff) as u32,
        }
    }
}

/// `n` zeroed entries, from zeroed memory (the system's untouched pages,
/// not written here: a large buffer costs nothing until records fill it);
/// `None` where the system will not give the memory.
#[cfg(not(loom))]
fn zeroed_entries(n: usize) -> Option<Box<[Entry]>> {
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<Entry>(n).ok()?;
    // SAFETY: `layout` has a non-zero size (`n > 0`, entries of 64 bytes),
    // and the entries' alignment (64): each a cache line of its own.
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Entry>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a fresh allocation of the global allocator with the
    // layout of `[Entry; n]`, which a boxed slice of `n` entries frees with;
    // all-zero bytes are valid atomics holding 0.
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) })
}

/// Under loom, whose atomics are not plain words: each made as one.
#[cfg(loom)]
fn zeroed_entries(n: usize) -> Option<Box<[Entry]>> {
    let mut v: Vec<Entry> = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.extend((0..n).map(|_| Entry(std::array::from_fn(|_| AtomicU64::new(0)))));
    Some(v.into_boxed_slice())
}

/// What a snapshot of the buffer holds.
pub(crate) struct Snapshot {
    /// The whole entries, in claim order.
    pub(crate) records: Vec<Raw>,
    /// Records that found the buffer full.
    pub(crate) dropped: u64,
    /// Entries claimed but not yet whole when the snapshot was taken.
    pub(crate) unfinished: u64,
}

/// A runtime's recorder: the switch, the capacity, and the buffer (made
/// when tracing is first switched on).
pub(crate) struct Recorder {
    /// Read by every submit and completion: a line apart from `next`,
    /// which every record writes.
    on: CachePadded<AtomicBool>,
    capacity: usize,
    entries: OnceLock<Box<[Entry]>>,
    next: CachePadded<AtomicU64>,
    /// Serializes the buffer's making (`OnceLock` alone would too; the
    /// lock also orders `set_on` calls among themselves).
    switch: Mutex<()>,
}

impl Recorder {
    /// A recorder of at most `capacity` records, off.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            on: CachePadded::new(AtomicBool::new(false)),
            capacity,
            entries: OnceLock::new(),
            next: CachePadded::new(AtomicU64::new(0)),
            switch: Mutex::new(()),
        }
    }

    /// The most records it keeps.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether tasks are being recorded.
    #[inline(always)]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Switches recording on or off (the buffer made the first time on);
    /// `false` where the system would not give the buffer's memory (then
    /// it stays off).
    pub(crate) fn set_on(&self, on: bool) -> bool {
        let _g = lock(&self.switch);
        if on && self.entries.get().is_none() {
            let Some(entries) = zeroed_entries(self.capacity) else {
                return false;
            };
            let _ = self.entries.set(entries);
        }
        // A thread that sees `on` (relaxed) may not see the buffer yet:
        // `record` finds it through the `OnceLock` (its own acquire), and
        // returns without a record (uncounted) only in that moment of the
        // first switch.
        self.on.store(on, Ordering::Release);
        true
    }

    /// The stamp a producer leaves for `seq`: at `tick` (read before its
    /// reservation), else now.
    #[inline]
    pub(crate) fn stamp(seq: u64, op: u16, tick: Option<u64>) -> Stamp {
        Stamp {
            seq,
            tick: tick.unwrap_or_else(ticks),
            op,
            thread: crate::sync::thread_number(),
        }
    }

    /// Keeps `raw` (its `seen_thread` filled in here, and its `seen_tick`:
    /// `seen`, else now), or counts it dropped when the buffer is full.
    #[inline]
    pub(crate) fn record(&self, mut raw: Raw, seen: Option<u64>) {
        raw.seen_tick = seen.unwrap_or_else(ticks);
        raw.seen_thread = crate::sync::thread_number();
        let Some(entries) = self.entries.get() else {
            return;
        };
        let at = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(entry) = usize::try_from(at).ok().and_then(|i| entries.get(i)) else {
            return;
        };
        // The next entry's line on its way in for writing: the locked
        // instructions of the next submit would otherwise wait for its
        // read for ownership.
        #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
        if let Some(next) = entries.get(usize::try_from(at).unwrap_or(usize::MAX).wrapping_add(1)) {
            // SAFETY: `prefetchw` of a valid, aligned address of the
            // buffer: a cache hint that reads or writes no memory the
            // program sees (a NOP where unsupported).
            unsafe {
                std::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) next.0.as_ptr(),
                    options(nostack, preserves_flags, readonly)
                );
            }
        }
        let words = raw.encode();
        for (w, v) in entry.0[..ENTRY_WORDS - 1].iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
        entry.0[ENTRY_WORDS - 1].store(words[ENTRY_WORDS - 1], Ordering::Release);
    }

    /// The records kept so far.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let claimed = self.next.load(Ordering::Acquire);
        let cap = self.capacity as u64;
        let mut out = Snapshot {
            records: Vec::new(),
            dropped: claimed.saturating_sub(cap),
            unfinished: 0,
        };
        let Some(entries) = self.entries.get() else {
            return out;
        };
        for entry in &entries[..claimed.min(cap) as usize] {
            let last = entry.0[ENTRY_WORDS - 1].load(Ordering::Acquire);
            if last & WHOLE == 0 {
                out.unfinished += 1;
                continue;
            }
            let words: [u64; ENTRY_WORDS] = std::array::from_fn(|k| {
                if k == ENTRY_WORDS - 1 {
                    last
                } else {
                    entry.0[k].load(Ordering::Relaxed)
                }
            });
            out.records.push(Raw::decode(&words));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(seq: u64) -> Raw {
        Raw {
            seq,
            submit_tick: seq * 10,
            seen_tick: 0,
            device_start_ns: seq * 10 + 3,
            device_end_ns: seq * 10 + 5,
            op: 7,
            ring: 3,
            lane: 1,
            status: 0,
            tasks: 1,
            poller: 2,
            submit_thread: 4,
            seen_thread: 0,
        }
    }

    /// Each entry is a cache line of its own: the buffer starts on a line
    /// (the allocator's 16-byte alignment left every entry across two).
    #[test]
    #[cfg(not(loom))]
    fn entries_are_whole_cache_lines() {
        let r = Recorder::new(1 << 12);
        assert!(r.set_on(true));
        let e = r.entries.get().unwrap();
        assert_eq!(std::mem::size_of::<Entry>(), 64);
        assert_eq!(e.as_ptr() as usize % 64, 0);
    }

    #[test]
    fn a_buffer_the_system_will_not_give_leaves_it_off() {
        // Past what an allocation can be (isize::MAX bytes).
        let r = Recorder::new(usize::MAX / ENTRY_WORDS / 4);
        assert!(!r.set_on(true));
        assert!(!r.is_on());
        let r = Recorder::new(0);
        assert!(r.set_on(true));
        r.record(raw(1), None);
        assert_eq!(r.snapshot().dropped, 1);
    }

    #[test]
    fn entries_round_trip() {
        let mut r = raw(99);
        r.seen_thread = 0x7fff_fffe;
        r.status = 200;
        r.tasks = 32;
        r.poller = 7;
        assert_eq!(Raw::decode(&r.encode()), r);
    }

    #[test]
    fn off_until_switched_on_and_keeps_the_first_records() {
        let rec = Recorder::new(3);
        assert!(!rec.is_on());
        rec.record(raw(0), None); // no buffer yet: not kept, not counted
        let s = rec.snapshot();
        assert_eq!((s.records.len(), s.dropped), (0, 0));
        rec.set_on(true);
        for seq in 1..=5 {
            rec.record(raw(seq), None);
        }
        let s = rec.snapshot();
        let seqs: Vec<u64> = s.records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!((s.dropped, s.unfinished), (2, 0));
    }

    #[test]
    fn a_stamp_of_another_lap_is_not_taken() {
        let st = SlotStamps::new(4);
        assert_eq!(st.read(1, 5), None);
        let s = Stamp {
            seq: 5,
            tick: 77,
            op: 9,
            thread: 3,
        };
        st.put(1, s);
        assert_eq!(st.read(1, 9), None);
        assert_eq!(st.read(1, 5), Some(s));
    }

    #[test]
    fn threads_fill_it_and_the_drop_count_is_exact() {
        let rec = std::sync::Arc::new(Recorder::new(1000));
        rec.set_on(true);
        let n_threads = if cfg!(miri) { 2 } else { 4 };
        let per = if cfg!(miri) { 300 } else { 700 };
        let handles: Vec<_> = (0..n_threads)
            .map(|t| {
                let rec = rec.clone();
                std::thread::spawn(move || {
                    for k in 0..per {
                        rec.record(raw((t * per + k) as u64), None);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let s = rec.snapshot();
        let total = (n_threads * per) as u64;
        assert_eq!(s.records.len() as u64, total.min(1000));
        assert_eq!(s.dropped, total.saturating_sub(1000));
        let mut seqs: Vec<u64> = s.records.iter().map(|r| r.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), s.records.len(), "a record twice");
    }
}
