//! The record of each task while tracing is on: a bounded buffer of
//! whole records, shared by every ring of a runtime, each entry claimed by
//! the task's submit and finished by whoever takes its completion.
//!
//! Words and their writers (all host memory, never mapped):
//! * `on`: written by `Recorder::set_on` (any thread), read (relaxed) by
//!   producers; a task is recorded when it was on at its submit.
//! * `next`: the claim counter, one `fetch_add` a submit (host memory, host
//!   threads only), after the submit's slot stores (before them on a ring
//!   of a lane of blocks or groups, whose headers say which slots were
//!   kept: `Recorder::kept`); a claim past the capacity is a dropped
//!   record, so the count of dropped records is exact.
//! * an entry's words 0 to 3 (the submit's): written once, relaxed, by the
//!   producer that claimed it, before it hands out the task's ticket or
//!   batch, which carries the entry's number ([`EntryId`]).
//! * an entry's words 4 to 7 (the completion's): written once by the
//!   thread that takes the task's completion with that handle (or, for a
//!   handle dropped unread, by the producer that frees its slot: the handle
//!   left the number in its ring's `QueueTrace::detached`), word 7 last
//!   with a release store that marks the entry whole. The handle reaches
//!   that thread after the submit's words were written (the same thread, or
//!   a hand-over that synchronizes), so the release carries them too.
//!   Snapshots read word 7 first (acquire). Entries are never reused.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicU64, Mutex, OnceLock, Ordering, lock};

/// Words of one entry (one cache line).
const ENTRY_WORDS: usize = 8;

/// One entry: a cache line of its own (aligned to one), so that the submit
/// fetches the line once and the completion's words find it there.
#[repr(C, align(64))]
pub(crate) struct Entry(pub(crate) [AtomicU64; ENTRY_WORDS]);
/// The last word's bit that says the entry is whole.
const WHOLE: u64 = 1 << 63;

/// The number of a task's entry in its runtime's buffer, which its handle
/// carries from the submit to the take ([`EntryId::NONE`]: not traced).
/// A number past the buffer's capacity is a dropped record: nothing is
/// written for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryId(pub(crate) u64);

impl EntryId {
    /// A task not traced.
    pub(crate) const NONE: Self = Self(u64::MAX);

    /// Whether the task is traced.
    #[inline(always)]
    pub(crate) fn is_traced(self) -> bool {
        self != Self::NONE
    }

    /// The entry of the `k`-th slot of a run claimed from this one.
    #[inline(always)]
    pub(crate) fn nth(self, k: usize) -> Self {
        if self.is_traced() {
            Self(self.0.saturating_add(k as u64).min(u64::MAX - 1))
        } else {
            self
        }
    }
}

/// What a submit writes into its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Opened {
    pub(crate) seq: u64,
    pub(crate) submit_tick: u64,
    pub(crate) op: u16,
    pub(crate) ring: u16,
    pub(crate) lane: u8,
    pub(crate) submit_thread: u32,
}

/// What the take of a completion writes into its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Closed {
    pub(crate) seen_tick: u64,
    pub(crate) device_start_ns: u64,
    pub(crate) device_end_ns: u64,
    pub(crate) status: u8,
    pub(crate) tasks: u8,
    pub(crate) poller: u8,
    pub(crate) seen_thread: u32,
}

/// A task as recorded, both halves of its entry, before the export maps
/// its clocks (see `crate::trace::TaskRecord`, its public form).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raw {
    pub(crate) opened: Opened,
    pub(crate) closed: Closed,
}

impl Opened {
    fn encode(&self) -> [u64; 4] {
        [
            self.seq,
            self.submit_tick,
            u64::from(self.op) | u64::from(self.ring) << 16 | u64::from(self.lane) << 32,
            u64::from(self.submit_thread),
        ]
    }

    fn decode(w: &[u64; 4]) -> Self {
        Self {
            seq: w[0],
            submit_tick: w[1],
            op: w[2] as u16,
            ring: (w[2] >> 16) as u16,
            lane: (w[2] >> 32) as u8,
            submit_thread: w[3] as u32,
        }
    }
}

impl Closed {
    fn encode(&self) -> [u64; 4] {
        [
            self.seen_tick,
            self.device_start_ns,
            self.device_end_ns,
            u64::from(self.status)
                | u64::from(self.tasks) << 8
                | u64::from(self.poller) << 16
                | u64::from(self.seen_thread & 0x7fff_ffff) << 24
                | WHOLE,
        ]
    }

    fn decode(w: &[u64; 4]) -> Self {
        Self {
            seen_tick: w[0],
            device_start_ns: w[1],
            device_end_ns: w[2],
            status: w[3] as u8,
            tasks: (w[3] >> 8) as u8,
            poller: (w[3] >> 16) as u8,
            seen_thread: ((w[3] >> 24) & 0x7fff_ffff) as u32,
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
    /// Entries claimed but not yet whole when the snapshot was taken: tasks
    /// whose completion nobody had taken yet.
    pub(crate) unfinished: u64,
}

/// A runtime's recorder: the switch, the capacity, and the buffer (made
/// when tracing is first switched on).
pub(crate) struct Recorder {
    /// Read by every submit: a line apart from `next`, which every traced
    /// submit writes.
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
        // `claim` finds it through the `OnceLock` (its own acquire), and
        // claims nothing (uncounted) only in that moment of the first
        // switch.
        self.on.store(on, Ordering::Release);
        true
    }

    /// Claims `n` consecutive entries (a submit's, one per slot) and
    /// returns the first; numbers past the capacity are dropped records.
    /// [`EntryId::NONE`] only in the moment of the first switch on, before
    /// the buffer is there (the tasks go unrecorded,
    /// uncounted).
    #[inline]
    pub(crate) fn claim(&self, n: usize) -> EntryId {
        if self.entries.get().is_none() {
            return EntryId::NONE;
        }
        EntryId(self.next.fetch_add(n as u64, Ordering::Relaxed))
    }

    /// How many of the `n` entries claimed from `id`, from the first, are
    /// kept (within the buffer; the rest are dropped records).
    #[inline]
    pub(crate) fn kept(&self, id: EntryId, n: usize) -> usize {
        if !id.is_traced() || self.entries.get().is_none() {
            return 0;
        }
        let room = (self.capacity as u64).saturating_sub(id.0);
        n.min(usize::try_from(room).unwrap_or(usize::MAX))
    }

    /// The entry `id`, if it is within the buffer.
    #[inline(always)]
    fn entry(&self, id: EntryId) -> Option<&Entry> {
        self.entries
            .get()
            .and_then(|e| usize::try_from(id.0).ok().and_then(|i| e.get(i)))
    }

    /// Writes the submit's words of `id` (its claimer, before the handle
    /// that carries `id` leaves the thread).
    #[inline]
    pub(crate) fn open(&self, id: EntryId, o: &Opened) {
        if let Some(entry) = self.entry(id) {
            for (w, v) in entry.0[..4].iter().zip(o.encode()) {
                w.store(v, Ordering::Relaxed);
            }
        }
    }

    /// Writes the completion's words of `id` and marks it whole (once, by
    /// the thread that takes the completion with the handle of `id`).
    #[inline]
    pub(crate) fn close(&self, id: EntryId, c: &Closed) {
        if let Some(entry) = self.entry(id) {
            let words = c.encode();
            for (w, v) in entry.0[4..ENTRY_WORDS - 1].iter().zip(words) {
                w.store(v, Ordering::Relaxed);
            }
            entry.0[ENTRY_WORDS - 1].store(words[3], Ordering::Release);
        }
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
            let word = |k: usize| entry.0[k].load(Ordering::Relaxed);
            out.records.push(Raw {
                opened: Opened::decode(&std::array::from_fn(word)),
                closed: Closed::decode(&[word(4), word(5), word(6), last]),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(seq: u64) -> Opened {
        Opened {
            seq,
            submit_tick: seq * 10,
            op: 7,
            ring: 3,
            lane: 1,
            submit_thread: 4,
        }
    }

    fn closed(seq: u64) -> Closed {
        Closed {
            seen_tick: seq * 10 + 9,
            device_start_ns: seq * 10 + 3,
            device_end_ns: seq * 10 + 5,
            status: 0,
            tasks: 1,
            poller: 2,
            seen_thread: 5,
        }
    }

    /// A record of `seq`: claimed, opened and closed.
    fn record(rec: &Recorder, seq: u64) {
        let id = rec.claim(1);
        rec.open(id, &opened(seq));
        rec.close(id, &closed(seq));
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
        record(&r, 1);
        assert_eq!(r.snapshot().dropped, 1);
    }

    #[test]
    fn entries_round_trip() {
        let (mut o, mut c) = (opened(99), closed(99));
        o.submit_thread = u32::MAX;
        o.ring = u16::MAX;
        o.lane = 255;
        c.seen_thread = 0x7fff_fffe;
        c.status = 200;
        c.tasks = 32;
        c.poller = 7;
        assert_eq!(Opened::decode(&o.encode()), o);
        assert_eq!(Closed::decode(&c.encode()), c);
    }

    #[test]
    fn off_until_switched_on_and_keeps_the_first_records() {
        let rec = Recorder::new(3);
        assert!(!rec.is_on());
        // No buffer yet: nothing claimed, kept or counted.
        assert_eq!(rec.claim(1), EntryId::NONE);
        let s = rec.snapshot();
        assert_eq!((s.records.len(), s.dropped), (0, 0));
        rec.set_on(true);
        for seq in 1..=5 {
            record(&rec, seq);
        }
        let s = rec.snapshot();
        let seqs: Vec<u64> = s.records.iter().map(|r| r.opened.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!((s.dropped, s.unfinished), (2, 0));
    }

    #[test]
    fn a_claim_says_how_many_of_its_entries_are_kept() {
        let rec = Recorder::new(3);
        assert_eq!(rec.kept(EntryId(0), 2), 0, "no buffer yet");
        rec.set_on(true);
        let a = rec.claim(2);
        assert_eq!(rec.kept(a, 2), 2);
        let b = rec.claim(4);
        assert_eq!(rec.kept(b, 4), 1, "one left of four");
        let c = rec.claim(1);
        assert_eq!(rec.kept(c, 1), 0);
        assert_eq!(rec.kept(EntryId::NONE, 5), 0);
        assert_eq!(rec.kept(EntryId(u64::MAX - 1), 5), 0);
        assert_eq!(Recorder::new(0).kept(EntryId(0), 1), 0);
    }

    #[test]
    fn an_entry_opened_and_not_closed_is_unfinished_until_closed() {
        let rec = Recorder::new(4);
        rec.set_on(true);
        let id = rec.claim(2);
        rec.open(id, &opened(1));
        rec.open(id.nth(1), &opened(2));
        rec.close(id.nth(1), &closed(2));
        let s = rec.snapshot();
        assert_eq!((s.records.len(), s.unfinished), (1, 1));
        assert_eq!(s.records[0].opened.seq, 2);
        rec.close(id, &closed(1));
        let s = rec.snapshot();
        let seqs: Vec<u64> = s.records.iter().map(|r| r.opened.seq).collect();
        assert_eq!((seqs, s.unfinished), (vec![1, 2], 0));
        // A run past the capacity: the first kept, the rest dropped.
        let run = rec.claim(3);
        for k in 0..3 {
            rec.open(run.nth(k), &opened(10 + k as u64));
            rec.close(run.nth(k), &closed(10 + k as u64));
        }
        let s = rec.snapshot();
        assert_eq!((s.records.len(), s.dropped), (4, 1));
        assert_eq!(EntryId::NONE.nth(3), EntryId::NONE);
    }

    #[test]
    fn threads_fill_it_and_the_drop_count_is_exact() {
        // More records than room in both cases; under Miri a smaller
        // buffer, as its borrow checks walk every entry of the buffer at
        // each record's write.
        let capacity = if cfg!(miri) { 400 } else { 1000 };
        let rec = std::sync::Arc::new(Recorder::new(capacity));
        rec.set_on(true);
        let n_threads = if cfg!(miri) { 2 } else { 4 };
        let per = if cfg!(miri) { 300 } else { 700 };
        let handles: Vec<_> = (0..n_threads)
            .map(|t| {
                let rec = rec.clone();
                std::thread::spawn(move || {
                    for k in 0..per {
                        record(&rec, (t * per + k) as u64);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let s = rec.snapshot();
        let total = (n_threads * per) as u64;
        assert_eq!(s.records.len() as u64, total.min(capacity as u64));
        assert_eq!(s.dropped, total.saturating_sub(capacity as u64));
        let mut seqs: Vec<u64> = s.records.iter().map(|r| r.opened.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), s.records.len(), "a record twice");
    }
}
