//! The host half of the ring protocol (the device half is
//! `cuda/pkq_worker.cuh`): reserving a sequence number, publishing a slot,
//! reading a completion, and handing the slot back.
//!
//! The shared words and their protocol are described in `cuda/pkq_layout.h`.
//! This module adds host-only state, which the device never sees:
//!
//! * `tail`: the next sequence number to reserve, and whether the ring is
//!   closed or held by an exclusive producer (`proto::tail`). Shared
//!   producers merge there with a compare-and-swap (a host atomic:
//!   read-modify-write atomics on mapped memory are not atomic against the
//!   device, so no shared word is ever the target of one).
//! * `turns[slot]`: the slot's owner. `s` means: free for sequence number `s`
//!   if `s` is not reserved yet, else owned by the task `s` (in flight, or
//!   completed and not yet read by its ticket). `s | DETACHED` means the task
//!   `s` lost its ticket. Every change away from an owned state is a
//!   compare-and-swap, so the ticket and a producer that needs the slot
//!   never both win. Changes that free the slot are releases, and the
//!   producer's load is an acquire, so its slot stores happen after the
//!   completion was seen (which the device wrote after it finished reading
//!   the slot).
//! * `overflow`: completions moved out of their slot. A producer that needs
//!   a slot whose task completed but whose ticket has not read it yet moves
//!   the completion here and frees the slot (as io_uring's completion queue
//!   overflows), so `submit` only ever waits for the device, never for a
//!   ticket some thread holds. A ticket whose turn moved on finds its result
//!   here. Used only on that slow path; at most one entry per slot a live
//!   handle waits on (a ticket's one, a batch's each).
//! * Packs (see PACKS in `cuda/pkq_layout.h`): a slot of many small tasks,
//!   their argument and result words in side areas indexed by the slot. The
//!   results are read after the completion and before the turn's
//!   compare-and-swap frees the slot (`Queue::completed`), and a completion
//!   moved to `overflow` takes its results along.
//! * Orphans: tickets and batches count no reference to the runtime (a
//!   count costs two locked instructions a task; benches/NOTES.md). When the runtime is dropped,
//!   [`Queue::orphan`] moves every task whose ticket or batch still lives
//!   into `overflow` (as a producer would, with `None` for a task that will
//!   never complete) and counts one share per entry there into the
//!   runtime's count of orphan shares, before it lets go of the lock. A
//!   handle learns that it holds a share only by removing its entry under
//!   that lock, so every share it gives back was counted first. A handle
//!   whose task was taken before (its turn's compare-and-swap won) holds
//!   none and never touches the queue again; the last share given back
//!   frees the runtime's memory (`runtime::Shared::release`).

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::PoisonError;

use crate::proto::layout::{CQE_WORDS, PACK_ARG_BYTES, PACK_TASKS, SLOT_WORDS};
use crate::proto::ring::{FLAG, Geometry, SEQ_MASK, distance, seq_add, seq_sub};
use crate::proto::slot::{Cqe, SlotImage, tagged};
use crate::proto::sync::{AtomicU64, Mutex, MutexGuard, Ordering, fence};
pub(crate) use crate::proto::tail::Refusal;
use crate::proto::tail::Tail;
use crate::proto::words::Words;

const DETACHED: u64 = FLAG;

/// A test hook: a closure run right after a handle's compare-and-swap
/// ended its ownership of a slot, on the handle's thread, while the handle
/// is still inside the call that ended it. A test drops the runtime there:
/// the code from the compare-and-swap to the handle's return must then
/// touch nothing of the runtime's (Miri checks, references included).
#[cfg(all(test, not(loom)))]
pub(crate) mod ownership_ended {
    use std::cell::Cell;

    thread_local!(static HOOK: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) });

    /// Runs `f` the next time a handle of this thread ends its ownership.
    pub(crate) fn set(f: impl FnOnce() + 'static) {
        HOOK.with(|h| h.set(Some(Box::new(f))));
    }

    pub(crate) fn fire() {
        if let Some(f) = HOOK.with(Cell::take) {
            f();
        }
    }
}

/// A completion as the host keeps it once it takes it: the entry and, for
/// a pack, its tasks' result words, read before the slot was freed (the
/// next lap overwrites them).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Completed {
    pub(crate) cqe: Cqe,
    pub(crate) results: Option<Box<[u64]>>,
    /// An IO task's output.
    pub(crate) output: Option<Box<[u8]>>,
}

/// What a ticket's or batch's look at its task found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Take {
    /// Not completed yet.
    Pending,
    /// Its completion; the slot is free again.
    Done(Completed),
    /// The runtime is gone ([`Queue::orphan`]): its completion, or `None`
    /// if the task never completed. The caller now holds one orphan share
    /// of the runtime's memory, to give back after its last access to it.
    Orphaned(Option<Completed>),
}

impl Take {
    /// The completion, if any, counting an orphan share into `shares`.
    #[inline(always)]
    pub(crate) fn counted(self, shares: &mut u64) -> Option<Completed> {
        match self {
            Self::Pending => None,
            Self::Done(cqe) => Some(cqe),
            Self::Orphaned(cqe) => {
                *shares += 1;
                cqe
            }
        }
    }
}

#[cfg(test)]
impl Take {
    /// The completion of a task whose runtime still runs (tests).
    pub(crate) fn done(self) -> Option<Cqe> {
        match self {
            Self::Pending => None,
            Self::Done(c) => Some(c.cqe),
            Self::Orphaned(_) => panic!("orphaned while the runtime runs"),
        }
    }
}

/// The side table of moved completions (see the module docs).
#[derive(Default)]
struct Overflow {
    /// By sequence number: the completion (`None` only once orphaned: a
    /// task that never completed).
    entries: HashMap<u64, Option<Completed>>,
    /// Set by [`Queue::orphan`]: each entry taken from then on is a share.
    orphaned: bool,
}

/// A queue's IO areas (IO in `cuda/pkq_layout.h`).
struct Io {
    /// Host-written, device-read: `in_words` tagged words per slot.
    input: Words,
    /// Device-written, host-read: `out_words` tagged words per slot.
    output: Words,
    in_words: usize,
    out_words: usize,
    /// The most input and output bytes of a task.
    most: (usize, usize),
    /// Host-only, per slot: the latest sequence number whose task wrote a
    /// plain output to the slot's output area, with `FLAG` set (0: none
    /// yet), so that the tasks of the next 255 laps carry
    /// `HEADER_FRESH_BIT` (PLAIN in `cuda/pkq_layout.h`). Raised (never
    /// lowered: racing pollers of older completions may store late) by
    /// whoever sees a plain output's completion before it frees the slot;
    /// read by the producer of a later lap after its reservation, which
    /// the slot's turn orders after it. A plain input needs no mark: the
    /// worker keeps no knowledge of input areas.
    plain: Box<[AtomicU64]>,
}

impl Io {
    /// Notes that the task of `seq` wrote a plain output (see `plain`).
    fn note_plain(&self, geo: Geometry, seq: u64) {
        let mark = &self.plain[geo.slot(seq)];
        let mut cur = mark.load(Ordering::Relaxed);
        // Newer: no mark yet, or `seq` ahead of the one marked (less than
        // half the sequence space on).
        while cur == 0 || (1..=SEQ_MASK / 2).contains(&distance(cur & SEQ_MASK, seq)) {
            match mark.compare_exchange_weak(cur, seq | FLAG, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Whether `cqe`'s output is plain bytes: it says so, and the areas hold
    /// plain outputs (only then can a device send one; a flag without the
    /// room is read as a tagged output, never past the slot's area).
    fn plain_output(&self, cqe: &Cqe) -> bool {
        cqe.plain_output() && crate::proto::io::plain_words(self.most.1) != 0
    }

    /// Whether the task of `seq` must carry `HEADER_FRESH_BIT`: a task of
    /// its slot wrote a plain output in the last 255 laps.
    fn fresh(&self, geo: Geometry, seq: u64) -> bool {
        let mark = self.plain[geo.slot(seq)].load(Ordering::Relaxed);
        mark != 0 && distance(mark & SEQ_MASK, seq) < 256 * geo.capacity() as u64
    }
}

pub(crate) struct Queue {
    geo: Geometry,
    /// Host-only: the next sequence number, closed or held.
    tail: Tail,
    /// Host-only: the owner of each slot (see the module docs).
    turns: Box<[AtomicU64]>,
    /// Host-written, device-read: `capacity * SLOT_WORDS` tagged words.
    sq: Words,
    /// Host-written, device-read: more copies of `sq`, one for each poller
    /// warp of a worker after the first (see `Queue::with_copies`).
    copies: Box<[Words]>,
    /// Host-only, with copies only (else empty): the sequence number whose
    /// publish last wrote every copy of each slot. The device can complete
    /// a task from one copy while its producer is still writing the others,
    /// so `free_completed` frees a slot for its next lap only once the mark
    /// says that publish is done (else the producer's late stores could land
    /// over the next lap's). Written by that producer alone (Release, after
    /// its stores), read by producers that need the slot (Acquire).
    published: Box<[AtomicU64]>,
    /// Device-written, host-read: `capacity * CQE_WORDS` tagged words.
    cq: Words,
    /// Host-written, device-read: `capacity * PACK_TASKS` argument words.
    pack_args: Words,
    /// Device-written, host-read: `capacity * PACK_TASKS` result words.
    pack_results: Words,
    /// IO areas (input host-written, output device-written), if the
    /// runtime has them.
    io: Option<Io>,
    /// Host-only: completions moved out of slots a producer needed, and
    /// the tasks of handles that outlived the runtime.
    overflow: Mutex<Overflow>,
    /// Host-only: how many completions were ever moved there (counted
    /// under the overflow lock; read for statistics only).
    moved: AtomicU64,
}

impl Queue {
    /// A queue over `sq` and `cq` whose first sequence number is `start`.
    /// Writes every slot and entry with the tag of the lap before its first
    /// use, so nothing reads as published or completed.
    pub(crate) fn new(geo: Geometry, mem: [Words; 4], start: u64) -> Self {
        let [sq, cq, pack_args, pack_results] = mem;
        let cap = geo.capacity();
        assert_eq!(sq.len(), cap * SLOT_WORDS);
        assert_eq!(cq.len(), cap * CQE_WORDS);
        assert_eq!(pack_args.len(), cap * PACK_TASKS);
        assert_eq!(pack_results.len(), cap * PACK_TASKS);
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
            tail: Tail::new(start),
            turns,
            sq,
            copies: Box::new([]),
            published: Box::new([]),
            cq,
            pack_args,
            pack_results,
            io: None,
            overflow: Mutex::new(Overflow::default()),
            moved: AtomicU64::new(0),
        }
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Reserves the next sequence number, or says why not: `Full` only
    /// while the device has not completed the task in the slot needed.
    /// Lock-free, but for moving a completion to the overflow map.
    #[inline]
    pub(crate) fn try_reserve(&self) -> Result<u64, Refusal> {
        self.tail.reserve(1, |seq| self.claimable(seq))
    }

    /// Reserves `n` consecutive sequence numbers (1 to the capacity) with
    /// one compare-and-swap of the tail, all or none: `Full` while fewer
    /// than `n` slots from the tail on are free (as [`Self::try_reserve`]
    /// for one). Returns the first.
    pub(crate) fn try_reserve_many(&self, n: usize) -> Result<u64, Refusal> {
        debug_assert!((1..=self.geo.capacity()).contains(&n));
        self.tail.reserve(n, |seq| self.claimable(seq))
    }

    /// Takes the ring for one exclusive producer (`Held` if another has
    /// it, `Closed` once closed): shared reservations are refused with
    /// `Held` until [`Self::release`].
    pub(crate) fn hold(&self) -> Result<(), Refusal> {
        self.tail.hold()
    }

    /// The exclusive producer's reservation of `n` consecutive sequence
    /// numbers (1 to the capacity), without a locked instruction. Only
    /// the holder calls it, from one thread at a time.
    #[inline]
    pub(crate) fn try_reserve_held(&self, n: usize) -> Result<u64, Refusal> {
        debug_assert!((1..=self.geo.capacity()).contains(&n));
        self.tail.reserve_held(n, |seq| self.claimable(seq))
    }

    /// Gives a held ring back to shared producers (by its holder).
    pub(crate) fn release(&self) {
        self.tail.release();
    }

    /// Whether the slot of `seq` is free for it: its turn says so, or the
    /// task of the lap before completed and is moved out of the way here
    /// (see `free_completed`; the turn then says "free for `seq`", whoever
    /// reserves it). `false`: still owned by a task the device has not
    /// completed.
    #[inline(always)]
    fn claimable(&self, seq: u64) -> bool {
        loop {
            let owner = self.turns[self.geo.slot(seq)].load(Ordering::Acquire);
            if owner == seq {
                return true;
            }
            let prev = seq_sub(seq, self.geo.capacity() as u64);
            if owner & SEQ_MASK != prev || !self.free_completed(prev, owner, seq) {
                return false;
            }
        }
    }

    /// The slot of `prev` is owned (`owner` is `prev`, or `prev | DETACHED`)
    /// and `next` needs it: if `prev` completed, frees the slot for `next`,
    /// keeping the completion in `overflow` when a ticket still wants it.
    /// Returns whether the caller should look at the slot again.
    ///
    /// The turn moves on only under the overflow lock, and the entry goes in
    /// before the lock is released: a ticket that then sees its turn gone
    /// finds the entry once it takes the lock, and of producers racing for
    /// the slot only the one whose compare-and-swap won inserts anything.
    fn free_completed(&self, prev: u64, owner: u64, next: u64) -> bool {
        let Some(cqe) = self.poll(prev) else {
            return false;
        };
        // With copies, not before the publish of `prev` wrote all of them
        // (see `published`); its producer is between two stores, not gone.
        if let Some(mark) = self.published.get(self.geo.slot(prev))
            && mark.load(Ordering::Acquire) != prev
        {
            return false;
        }
        let turn = &self.turns[self.geo.slot(prev)];
        // A pack's results are read while the slot is still owned: once the
        // compare-and-swap frees it, a producer of the next lap may reserve
        // it and the device overwrite them.
        let done = (owner & DETACHED == 0).then(|| self.completed(prev, cqe));
        let mut moved = self.overflow();
        if turn
            .compare_exchange(owner, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            && let Some(done) = done
        {
            moved.entries.insert(prev, Some(done));
            self.moved.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// How many completions producers have moved out of their slots so far.
    pub(crate) fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    fn overflow(&self) -> MutexGuard<'_, Overflow> {
        self.overflow.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The same queue, with `copies` (each `capacity * SLOT_WORDS` words)
    /// written alongside its slots from now on, initialized as they are:
    /// with several poller warps per worker, each polls a copy of its own,
    /// so that their reads are independent (reads of one line are served
    /// one after another; benches/NOTES.md).
    pub(crate) fn with_copies(mut self, copies: Box<[Words]>) -> Self {
        for copy in &copies {
            assert_eq!(copy.len(), self.sq.len());
            for i in 0..self.sq.len() {
                copy.at(i)
                    .store(self.sq.at(i).load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        if !copies.is_empty() {
            self.published = (0..self.geo.capacity())
                .map(|_| AtomicU64::new(u64::MAX))
                .collect();
        }
        self.copies = copies;
        self
    }

    /// The same queue with IO areas: `input` and `output` (each `capacity`
    /// times the words of one slot's area) for tasks of at most `most.0`
    /// input and `most.1` output bytes; every word written with the tag of
    /// the lap before its slot's first use, as the slots are. No areas for
    /// `(0, 0)`.
    pub(crate) fn with_io(mut self, [input, output]: [Words; 2], most: (usize, usize)) -> Self {
        if most == (0, 0) {
            return self;
        }
        let cap = self.geo.capacity();
        let io = Io {
            in_words: input.len() / cap,
            out_words: output.len() / cap,
            input,
            output,
            most,
            plain: (0..cap).map(|_| AtomicU64::new(0)).collect(),
        };
        for (slot, turn) in self.turns.iter().enumerate() {
            let before = tagged(
                0,
                self.geo.tag(turn.load(Ordering::Relaxed)).wrapping_sub(1),
            );
            for k in 0..io.in_words {
                io.input
                    .at(slot * io.in_words + k)
                    .store(before, Ordering::Relaxed);
            }
            for k in 0..io.out_words {
                io.output
                    .at(slot * io.out_words + k)
                    .store(before, Ordering::Relaxed);
            }
        }
        self.io = Some(io);
        self
    }

    /// The most input and output bytes of a task (`(0, 0)`: no IO areas).
    pub(crate) fn io_limits(&self) -> (usize, usize) {
        self.io.as_ref().map_or((0, 0), |io| io.most)
    }

    /// Writes `input` (at most the area's, checked by the caller) into the
    /// input area of the reserved `seq`, before its publish of `image`
    /// (an IO task's, `SlotImage::with_input` of this input): tagged words,
    /// or plain bytes from `IO_PLAIN_MIN_BYTES` on (PLAIN in
    /// `cuda/pkq_layout.h`). Returns the image to publish: marked fresh
    /// where the slot's output area held a plain output in the last 255
    /// laps.
    pub(crate) fn write_input(&self, seq: u64, input: &[u8], image: SlotImage) -> SlotImage {
        let io = self.io.as_ref().expect("a queue with IO areas");
        let at = self.geo.slot(seq) * io.in_words;
        let fresh = io.fresh(self.geo, seq);
        if crate::proto::slot::plain(input.len()) {
            // SAFETY: `seq` is reserved and not yet published (the
            // caller's), and its slot was free (the task before it
            // completed): this producer owns the slot's input area.
            unsafe { crate::proto::io::write_plain_input(&io.input, at, input) };
        } else {
            crate::proto::io::write(&io.input, at, input, self.geo.tag(seq));
        }
        // Before the slot's stores (which follow), for the compiler: x86-64
        // keeps them in order on their way to the device.
        fence(Ordering::Release);
        if fresh { image.fresh() } else { image }
    }

    /// Publishes the reserved `seq`: eight relaxed 8-byte stores into the
    /// slot and each of its copies, in any order (each word is tagged, so
    /// each copy is whole or not on its own). Nothing here can fail or
    /// panic, so a reservation is always published.
    #[inline(always)]
    pub(crate) fn publish(&self, seq: u64, image: &SlotImage) {
        let tag = self.geo.tag(seq);
        let at = self.geo.slot(seq) * SLOT_WORDS;
        let store = |sq: &Words| {
            for (k, w) in sq.run::<SLOT_WORDS>(at).iter().enumerate() {
                w.store(image.word(k, tag), Ordering::Relaxed);
            }
        };
        // The slot, then its copies (none with one poller per worker; one
        // loop over both as one chain measured slower). Copy 0 becomes
        // visible before the others: the release fence keeps the compiler
        // from reordering the stores, and x86-64's store order (the only
        // target pkq builds for: lib.rs) keeps them in order on the way to
        // the device; a poller of another copy that sees this lap can then
        // rely on copy 0 holding it too (COPIES in pkq_layout.h).
        store(&self.sq);
        if !self.copies.is_empty() {
            fence(Ordering::Release);
            for sq in &self.copies {
                store(sq);
            }
        }
        if let Some(mark) = self.published.get(self.geo.slot(seq)) {
            mark.store(seq, Ordering::Release);
        }
    }

    /// Asks for the slot lines (and their copies) of the two sequence
    /// numbers after `seq` in writable state (`prefetchw`), so that the
    /// read for ownership of a line the device's polling took away is under
    /// way before the next single submit writes it: the locked instruction
    /// that follows those stores then waits for little. A hint only: it
    /// changes no memory.
    /// Its gain for producers is measured in benches/NOTES.md.
    #[inline(always)]
    pub(crate) fn prefetch_next(&self, seq: u64) {
        self.prefetch(seq_add(seq, 1), 2);
    }

    /// The next sequence number a reservation would most likely get (a
    /// hint: what a producer waiting for room waits on).
    pub(crate) fn tail_hint(&self) -> u64 {
        self.tail.hint()
    }

    /// As [`Self::prefetch_next`], for the slot the next reservation will
    /// most likely get (the tail as it is now), before that reservation:
    /// its compare-and-swap then overlaps the reads for ownership, which
    /// the device's polls of that very slot make necessary again and again
    /// (with one worker the slot's lines are polled from the moment the
    /// previous task completes, so `prefetch_next`'s hint is undone by the
    /// time they are written; its gain is measured in benches/NOTES.md).
    #[inline(always)]
    pub(crate) fn prefetch_reservation(&self) {
        // The tail's load is a hint's input: not under loom, whose models
        // count every atomic access.
        #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
        self.prefetch(self.tail.hint(), 1);
    }

    /// `prefetchw` of the slot lines (and copies) of `count` sequence
    /// numbers from `first`.
    #[inline(always)]
    #[cfg_attr(
        not(all(target_arch = "x86_64", not(miri), not(loom))),
        allow(unused_variables)
    )]
    fn prefetch(&self, first: u64, count: u64) {
        // Not under Miri or loom, which interpret memory accesses and have
        // no cache to hint.
        #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
        for (d, sq) in (0..count).flat_map(|d| {
            std::iter::once(&self.sq)
                .chain(self.copies.iter())
                .map(move |sq| (d, sq))
        }) {
            let line = sq.at(self.geo.slot(seq_add(first, d)) * SLOT_WORDS);
            // SAFETY: `prefetchw` of a valid, aligned address in this
            // queue's slots: a cache hint that reads or writes no memory
            // the program sees (executed as a NOP where unsupported).
            unsafe {
                std::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) line.as_ptr(),
                    options(nostack, preserves_flags, readonly)
                );
            }
        }
    }

    /// Publishes the reserved run from `first` as packs of `args` (each at
    /// most `PACK_ARG_BYTES`, checked by the caller): `PACK_TASKS` tasks a
    /// slot, the last the rest. The argument words first, then a release
    /// fence, then the slots (PACKS in `cuda/pkq_layout.h`).
    pub(crate) fn publish_packs<A: bytemuck::Pod>(&self, first: u64, op: u16, args: &[A]) {
        let len = std::mem::size_of::<A>().min(PACK_ARG_BYTES);
        if len != 0 {
            for (d, pack) in args.chunks(PACK_TASKS).enumerate() {
                let at = self.geo.slot(seq_add(first, d as u64)) * PACK_TASKS;
                let words = self.pack_args.run::<PACK_TASKS>(at);
                for (w, a) in words.iter().zip(pack) {
                    let mut b = [0u8; 8];
                    b[..len].copy_from_slice(&bytemuck::bytes_of(a)[..len]);
                    w.store(u64::from_le_bytes(b), Ordering::Relaxed);
                }
            }
            fence(Ordering::Release);
        }
        for (d, pack) in args.chunks(PACK_TASKS).enumerate() {
            self.publish(
                seq_add(first, d as u64),
                &SlotImage::pack(op, len, pack.len()),
            );
        }
    }

    /// The completion of `seq` as the host keeps it: with its pack's
    /// result words, when it is a pack (read now: the caller frees the
    /// slot next).
    fn completed(&self, seq: u64, cqe: Cqe) -> Completed {
        // Whole: `poll` saw every word (the same lap's, which stays until
        // the slot is freed).
        let output = self.output(seq, &cqe);
        let results = (cqe.pack != 0).then(|| {
            let at = self.geo.slot(seq) * PACK_TASKS;
            let words = self.pack_results.run::<PACK_TASKS>(at);
            // After the entry's acquire loads: the device wrote these first.
            words[..usize::from(cqe.pack).min(PACK_TASKS)]
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .collect()
        });
        Completed {
            cqe,
            results,
            output,
        }
    }

    /// The output of `seq`, if its completion says it has one and every
    /// word of it has landed; `None` otherwise.
    fn output(&self, seq: u64, cqe: &Cqe) -> Option<Box<[u8]>> {
        let io = self.io.as_ref().filter(|_| cqe.has_output())?;
        let (at, lap) = (self.geo.slot(seq) * io.out_words, self.geo.lap(seq));
        if io.plain_output(cqe) {
            crate::proto::io::read_plain_output(&io.output, at, io.most.1, lap)
        } else {
            crate::proto::io::read_output(&io.output, at, io.most.1, lap)
        }
    }

    /// Publishes a task of `op` for each of `args` (each at most
    /// `ARGS_BYTES`, checked by the caller), from the reserved `first` on.
    #[inline]
    pub(crate) fn publish_run<A: bytemuck::Pod>(&self, first: u64, op: u16, args: &[A]) {
        for (k, a) in args.iter().enumerate() {
            let image = SlotImage::encode(op, bytemuck::bytes_of(a));
            self.publish(seq_add(first, k as u64), &image);
        }
    }

    /// The completion of `seq`, once all its words have landed.
    #[inline(always)]
    pub(crate) fn poll(&self, seq: u64) -> Option<Cqe> {
        let tag = self.geo.tag(seq);
        let base = self.geo.slot(seq) * CQE_WORDS;
        // The first word alone answers "not yet" in the common case.
        let entry = self.cq.run::<CQE_WORDS>(base);
        let w0 = entry[0].load(Ordering::Acquire);
        if crate::proto::slot::tag_of(w0) != tag {
            return None;
        }
        let words: [u64; CQE_WORDS] = std::array::from_fn(|k| match k {
            0 => w0,
            _ => entry[k].load(Ordering::Acquire),
        });
        let cqe = Cqe::decode(&words, tag)?;
        // An output's words may land after the entry's (no fence on the
        // device between them): the task is complete once they all have, or,
        // for a plain output, once word 0 has (the device fenced its bytes
        // before word 0 and the entry).
        if cqe.has_output()
            && let Some(io) = &self.io
        {
            let (at, lap) = (self.geo.slot(seq) * io.out_words, self.geo.lap(seq));
            let plain = io.plain_output(&cqe);
            let whole = if plain {
                crate::proto::io::plain_output_whole(&io.output, at, io.most.1, lap)
            } else {
                crate::proto::io::output_whole(&io.output, at, io.most.1, lap)
            };
            if !whole {
                return None;
            }
            if plain {
                // Before the slot can be freed: every path that frees it
                // saw this completion here first.
                io.note_plain(self.geo, seq);
            }
        }
        Some(cqe)
    }

    /// Whether the task of `seq` is complete or no longer in its slot
    /// (taken, or moved to the overflow map): a holder looking at its slot
    /// now would not find it pending there. For the completion thread,
    /// which holds no slot: it changes nothing but, through `poll`, the
    /// slot's plain mark (`Io::plain`, which only moves forward), and a
    /// stale `true` (the slot's next lap) only wakes a waiter that looks
    /// again.
    #[inline]
    pub(crate) fn ready(&self, seq: u64) -> bool {
        self.turns[self.geo.slot(seq)].load(Ordering::Acquire) != seq || self.poll(seq).is_some()
    }

    /// The first word of `seq`'s completion entry: a monitor armed on its
    /// line wakes on the device's write of the entry, which lies within one
    /// line (`runtime::wait::monitor`).
    #[inline]
    pub(crate) fn completion_word(&self, seq: u64) -> &AtomicU64 {
        self.cq.at(self.geo.slot(seq) * CQE_WORDS)
    }

    #[cfg(test)]
    /// Writes the completion of `seq` as the device does (the software
    /// devices of the tests).
    pub(crate) fn complete(&self, seq: u64, cqe: &Cqe) {
        let tag = self.geo.tag(seq);
        let entry = self.cq.run::<CQE_WORDS>(self.geo.slot(seq) * CQE_WORDS);
        for (w, v) in entry.iter().zip(cqe.encode(tag)) {
            w.store(v, Ordering::Release);
        }
    }

    #[cfg(test)]
    /// Writes the result words of the pack of `seq`, then its completion,
    /// as the device does (the software devices of the tests).
    pub(crate) fn complete_pack(&self, seq: u64, values: &[u64]) {
        let at = self.geo.slot(seq) * PACK_TASKS;
        for (w, v) in self.pack_results.run::<PACK_TASKS>(at).iter().zip(values) {
            w.store(*v, Ordering::Relaxed);
        }
        let cqe = Cqe {
            status: 0,
            pack: values.len().min(PACK_TASKS) as u8,
            flags: 0,
            value: 0,
            t_start: 0,
            t_end: 0,
        };
        self.complete(seq, &cqe);
    }

    /// [`Queue::take_at`] for an owner of the queue (its tests).
    #[cfg(test)]
    #[inline]
    pub(crate) fn take(&self, seq: u64) -> Take {
        // SAFETY: `self` is alive for this whole call.
        unsafe { Self::take_at(NonNull::from(self), seq) }
    }

    /// For the ticket or batch of `seq`: its completion, once the device
    /// wrote it, taking it (the slot is then free for the next lap). Called
    /// only by that holder, until it returns `Done` or `Orphaned`.
    ///
    /// A function of a pointer, not of `&self`: once the compare-and-swap
    /// that takes the task wins, the holder owns nothing of the runtime's,
    /// which may be freed at once, while this call is still returning; a
    /// reference argument would still be live (protected) then. Nothing
    /// here touches the queue after that compare-and-swap.
    ///
    /// # Safety
    /// `this` points to a live queue, and the caller owns the slot of `seq`
    /// (its ticket or batch) or holds an orphan share, which keeps the
    /// queue alive until this call ends its ownership; after `Done` the
    /// caller must not touch the queue again.
    #[inline]
    pub(crate) unsafe fn take_at(this: NonNull<Self>, seq: u64) -> Take {
        // SAFETY: alive while the caller owns the slot (the contract); not
        // used after the compare-and-swap that ends that.
        let q = unsafe { this.as_ref() };
        let turn = &q.turns[q.geo.slot(seq)];
        if let Some(cqe) = q.poll(seq) {
            let done = q.completed(seq, cqe);
            let next = q.geo.next_lap(seq);
            if turn
                .compare_exchange(seq, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                #[cfg(all(test, not(loom)))]
                ownership_ended::fire();
                return Take::Done(done);
            }
        }
        // A producer needed the slot and moved the completion, or the
        // runtime is gone (see `free_completed` and `orphan`: the entry is
        // in place once we hold the lock).
        if turn.load(Ordering::Acquire) != seq {
            // SAFETY: still the caller's (the turn moved to the overflow map).
            return unsafe { Self::take_moved(this, seq) };
        }
        Take::Pending
    }

    /// The entry of `seq` in the overflow map, if there is one.
    ///
    /// # Safety
    /// As [`Queue::take_at`]: the entry is the caller's until it is removed
    /// here; the lock is let go before this returns, and the runtime's
    /// drop takes it before it can free the queue.
    unsafe fn take_moved(this: NonNull<Self>, seq: u64) -> Take {
        // SAFETY: the caller's entry keeps the queue alive until removed,
        // and the drop that would free it waits for this lock.
        let q = unsafe { this.as_ref() };
        let mut moved = q.overflow();
        let taken = match moved.entries.remove(&seq) {
            Some(entry) if moved.orphaned => Take::Orphaned(entry),
            Some(Some(done)) => Take::Done(done),
            // Entries are `None` only once orphaned.
            Some(None) | None => Take::Pending,
        };
        drop(moved);
        taken
    }

    /// [`Queue::detach_at`] for an owner of the queue (its tests).
    #[cfg(test)]
    pub(crate) fn detach(&self, seq: u64) -> bool {
        // SAFETY: `self` is alive for this whole call.
        unsafe { Self::detach_at(NonNull::from(self), seq) }
    }

    /// The ticket of `seq` is gone without taking its completion. Returns
    /// whether the caller now holds an orphan share (see `Take::Orphaned`).
    ///
    /// # Safety
    /// As [`Queue::take_at`]: the caller owns the slot of `seq` until this
    /// call gives it up, and touches the queue no more afterwards (unless
    /// it returned `true`: a share, to give back).
    pub(crate) unsafe fn detach_at(this: NonNull<Self>, seq: u64) -> bool {
        // SAFETY: the caller's contract (as for `take_at`).
        match unsafe { Self::take_at(this, seq) } {
            Take::Done(_) => return false,
            Take::Orphaned(_) => return true,
            Take::Pending => {}
        }
        // SAFETY: the slot is still the caller's (the take found it pending).
        let q = unsafe { this.as_ref() };
        let turn = &q.turns[q.geo.slot(seq)];
        if turn
            .compare_exchange(seq, seq | DETACHED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Moved to the overflow map between the two looks: drop it there.
            // SAFETY: still the caller's entry.
            return matches!(unsafe { Self::take_moved(this, seq) }, Take::Orphaned(_));
        }
        false
    }

    /// The runtime is going away while tickets and batches may live on
    /// (see "Orphans" in the module docs): moves the task of every one
    /// still holding a slot into the overflow map, with its completion if
    /// it has one, and adds one share per entry there to `shares` before
    /// any holder can find its entry. Closes the queue; needs every
    /// producer gone and the kernel stopped.
    pub(crate) fn orphan(&self, shares: &AtomicU64) {
        let end = self.close();
        let cap = self.geo.capacity() as u64;
        let mut moved = self.overflow();
        for turn in self.turns.iter() {
            let owner = turn.load(Ordering::Acquire);
            let seq = owner & SEQ_MASK;
            // Free, or detached (nobody holds it).
            if owner & DETACHED != 0 || !(1..=cap).contains(&distance(seq, end)) {
                continue;
            }
            let cqe = self.poll(seq).map(|cqe| self.completed(seq, cqe));
            // Loses only to the holder taking it or dropping it first.
            if turn
                .compare_exchange(
                    owner,
                    self.geo.next_lap(seq),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                moved.entries.insert(seq, cqe);
            }
        }
        moved.orphaned = true;
        shares.fetch_add(moved.entries.len() as u64, Ordering::AcqRel);
    }

    /// Refuses every later reservation; returns the first sequence number
    /// never reserved.
    pub(crate) fn close(&self) -> u64 {
        self.tail.close()
    }

    /// The tail and every slot's owner, and whether its task completed.
    #[cfg(any(test, feature = "bench"))]
    pub(crate) fn debug_state(&self) -> String {
        let tail = self.tail.hint();
        let mut out = format!(
            "tail {} (closed: {}, held: {}), {} moved completions waiting for their tickets ({} moved in all)",
            tail,
            self.tail.is_closed(),
            self.tail.is_held(),
            self.overflow().entries.len(),
            self.moved()
        );
        for (slot, turn) in self.turns.iter().enumerate() {
            let t = turn.load(Ordering::Acquire);
            let seq = t & SEQ_MASK;
            let d = distance(seq, tail);
            if (1..=self.geo.capacity() as u64).contains(&d) && self.poll(seq).is_none() {
                let words = |sq: &Words| -> Vec<u64> {
                    let run = sq.run::<SLOT_WORDS>(slot * SLOT_WORDS);
                    run.iter().map(|w| w.load(Ordering::Relaxed)).collect()
                };
                out += &format!(
                    "\n  slot {slot}: seq {seq} reserved, not complete{}; tag {}; slot words {:016x?}; completion words {:016x?}",
                    if t & DETACHED != 0 { " (detached)" } else { "" },
                    self.geo.tag(seq),
                    words(&self.sq),
                    (0..CQE_WORDS)
                        .map(|k| self.cq.at(slot * CQE_WORDS + k).load(Ordering::Relaxed))
                        .collect::<Vec<_>>(),
                );
                // With several pollers, each polls a copy of its own: a
                // copy behind the slot says where a publish stopped.
                for (c, copy) in self.copies.iter().enumerate() {
                    out += &format!("\n    copy {}: words {:016x?}", c + 1, words(copy));
                }
                if let Some(mark) = self.published.get(slot) {
                    out += &match mark.load(Ordering::Acquire) {
                        u64::MAX => "\n    publish of every copy done: none yet".to_string(),
                        done => format!("\n    publish of every copy done for seq {done}"),
                    };
                }
            }
        }
        out
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tail.is_closed()
    }

    /// Whether an exclusive producer holds the ring.
    pub(crate) fn is_held(&self) -> bool {
        self.tail.is_held()
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

/// Heap words standing in for the mapped sections of one ring (tests).
#[cfg(test)]
pub(crate) struct Memory {
    pub(crate) sq: Words,
    cq: Words,
    pack_args: Words,
    pack_results: Words,
}

#[cfg(test)]
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
    #[cfg(test)]
    pub(crate) fn task(&self, geo: Geometry, seq: u64) -> Option<crate::proto::slot::DecodedSlot> {
        let at = geo.slot(seq) * SLOT_WORDS;
        let words: [u64; SLOT_WORDS] =
            std::array::from_fn(|k| self.sq.at(at + k).load(Ordering::Relaxed));
        crate::proto::slot::DecodedSlot::decode(&words, geo.tag(seq))
    }
}

/// What the device does when a task completes (tests).
#[cfg(test)]
fn complete(q: &Queue, seq: u64, value: u64) {
    q.complete(seq, &Cqe::ok(value));
}

/// A one-ring queue of `cap` slots with IO areas of up to `most` bytes,
/// over heap words (tests): the queue, its output area, and where slot 0's
/// output starts.
#[cfg(test)]
fn io_queue(cap: usize, most: (usize, usize)) -> (Queue, Words, Words) {
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
#[cfg(test)]
fn complete_io(q: &Queue, out: &Words, seq: u64, output: &[u8], entry_first: bool) {
    let cqe = Cqe {
        flags: crate::proto::layout::CQE_OUTPUT,
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

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    //! The host protocol against a software device: a thread that does what
    //! the resident kernel does, over heap memory.
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

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
        let cq = &mem.cq;
        let mut seq = seq_add(start, worker);
        while !stop.load(Ordering::Relaxed) {
            let (slot, tag) = (geo.slot(seq), geo.tag(seq));
            let Some(task) = mem.task(geo, seq) else {
                // Tests run more threads than cores: let the producers run.
                std::thread::yield_now();
                continue;
            };
            let run = |args: &[u64; 6]| {
                if task.op == crate::proto::layout::OP_ECHO {
                    crate::ops::op::echo_fold(args)
                } else {
                    0
                }
            };
            let value = if task.pack == 0 {
                run(&task.args)
            } else {
                // A pack: each task's argument word in, its result word out,
                // then the completion (PACKS in pkq_layout.h).
                let (pack_args, pack_results) = (&mem.pack_args, &mem.pack_results);
                // The argument words carry no tag: an acquire fence after
                // the slot's loads orders them, as the kernel's system
                // fence does (the producer put a release fence between).
                fence(Ordering::Acquire);
                for j in 0..task.pack {
                    let at = slot * PACK_TASKS + j;
                    let arg = pack_args.at(at).load(Ordering::Relaxed);
                    pack_results
                        .at(at)
                        .store(run(&[arg, 0, 0, 0, 0, 0]), Ordering::Relaxed);
                }
                0
            };
            let cqe = Cqe {
                status: 0,
                pack: task.pack as u8,
                flags: 0,
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
        SlotImage::new(crate::proto::layout::OP_ECHO, &id.to_le_bytes()).unwrap()
    }

    #[test]
    fn full_only_while_the_device_has_not_completed() {
        let geo = Geometry::new(4).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let seqs: Vec<u64> = (0..4).map(|_| q.try_reserve().unwrap()).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
        assert_eq!(q.take(0).done(), None);
        complete(&q, 0, 9);
        // The ticket of 0 has not taken its completion: the producer moves it
        // to the overflow map instead of waiting for the ticket.
        assert_eq!(q.try_reserve(), Ok(4));
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
        assert_eq!(q.take(0).done().map(|c| c.value), Some(9));
        assert!(q.overflow().entries.is_empty());
        assert_eq!(q.moved(), 1);
        // Taken directly when nobody needed the slot first.
        complete(&q, 1, 11);
        assert_eq!(q.take(1).done().map(|c| c.value), Some(11));
        assert_eq!(q.try_reserve(), Ok(5));
        assert_eq!(q.moved(), 1, "a slot its ticket freed is not a move");
    }

    #[test]
    fn a_moved_completion_survives_the_slot_reuse() {
        let geo = Geometry::new(2).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let a = q.try_reserve().unwrap();
        let _b = q.try_reserve().unwrap();
        complete(&q, a, 1);
        let c = q.try_reserve().unwrap(); // moves a's completion out
        assert_eq!(c, 2);
        complete(&q, c, 3); // the device overwrote the entry with c's
        assert_eq!(q.take(a).done().map(|x| x.value), Some(1));
        assert_eq!(q.take(c).done().map(|x| x.value), Some(3));
    }

    #[test]
    fn detached_slot_is_reclaimed_once_complete() {
        let geo = Geometry::new(2).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let a = q.try_reserve().unwrap();
        q.publish(a, &echo(1));
        let b = q.try_reserve().unwrap();
        complete(&q, b, 0);
        assert!(q.take(b).done().is_some());
        q.detach(a); // a's ticket dropped while a is in flight
        // The next number, 2, uses a's slot: refused while a is incomplete.
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
        complete(&q, a, 0);
        assert_eq!(q.try_reserve(), Ok(2)); // reclaimed, nothing kept
        assert!(q.overflow().entries.is_empty());
        assert_eq!(q.moved(), 0, "a detached task's completion is not kept");
        assert_eq!(q.try_reserve(), Ok(3)); // b's slot, taken
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
    }

    #[test]
    fn dropping_a_moved_ticket_leaves_nothing_behind() {
        let geo = Geometry::new(1).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let a = q.try_reserve().unwrap();
        complete(&q, a, 5);
        assert_eq!(q.try_reserve(), Ok(1));
        assert_eq!(q.overflow().entries.len(), 1);
        q.detach(a);
        assert!(q.overflow().entries.is_empty());
    }

    #[test]
    fn orphaning_hands_each_live_task_one_share() {
        // Four slots: a taken, b detached, c completed and held, d held and
        // never completed, e moved to the overflow map and held.
        let geo = Geometry::new(4).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let [a, b, c, d] = [(); 4].map(|()| q.try_reserve().unwrap());
        complete(&q, a, 1);
        assert_eq!(q.take(a).done().map(|x| x.value), Some(1));
        q.detach(b);
        complete(&q, c, 3);
        complete(&q, b, 2);
        let e = q.try_reserve().unwrap(); // a's slot, freed by its take
        complete(&q, e, 5);
        let f = q.try_reserve().unwrap(); // b's slot: detached, reclaimed
        assert_eq!(q.try_reserve(), Ok(6)); // c's slot: c's completion moves
        complete(&q, f, 6);
        assert!(q.take(f).done().is_some());
        // Live: c (moved), d, e, 6.
        let shares = AtomicU64::new(1);
        q.orphan(&shares);
        assert_eq!(shares.load(Ordering::Relaxed), 5, "the runtime's and four");
        assert_eq!(q.try_reserve(), Err(Refusal::Closed));
        let mut held = 0;
        assert_eq!(q.take(c).counted(&mut held).map(|x| x.cqe.value), Some(3));
        assert_eq!(q.take(e).counted(&mut held).map(|x| x.cqe.value), Some(5));
        assert_eq!(q.take(d), Take::Orphaned(None), "never completed");
        held += 1;
        assert_eq!(q.take(d), Take::Pending, "one share per task");
        assert!(!q.detach(d), "already counted");
        assert!(q.detach(6), "dropped unread: a share too");
        held += 1;
        assert_eq!(held, 4, "as counted, less the runtime's own");
        assert!(q.overflow().entries.is_empty());
    }

    #[test]
    fn copies_start_as_the_slots_and_get_every_publish() {
        // Several pollers per worker each poll a copy of the slots: every
        // copy must read as not yet published at first, and as whole with
        // the task's tag after each publish, lap after lap.
        let geo = Geometry::new(2).unwrap();
        let mem = Memory::new(geo);
        let extra: Vec<Arc<Memory>> = (0..3).map(|_| Memory::new(geo)).collect();
        let q = mem
            .queue(geo, 5)
            .with_copies(extra.iter().map(|m| m.sq.clone()).collect());
        let read = |m: &Memory, seq: u64| m.task(geo, seq);
        for m in std::iter::once(&mem).chain(&extra) {
            assert!(read(m, 5).is_none() && read(m, 6).is_none());
        }
        for seq in 5..13 {
            assert_eq!(q.try_reserve(), Ok(seq));
            q.publish(seq, &echo(seq));
            for m in std::iter::once(&mem).chain(&extra) {
                let task = read(m, seq).expect("every copy whole");
                assert_eq!(
                    (task.op, task.args[0]),
                    (crate::proto::layout::OP_ECHO, seq)
                );
            }
            // A task not yet complete shows every copy and the publish mark.
            let state = q.debug_state();
            assert!(
                state.contains(&format!("seq {seq} reserved")) && state.contains("copy 3: words"),
                "{state}"
            );
            assert!(
                state.contains(&format!("publish of every copy done for seq {seq}")),
                "{state}"
            );
            complete(&q, seq, seq);
            assert!(matches!(q.take(seq), Take::Done(_)));
        }
    }

    #[test]
    fn a_slot_with_copies_waits_for_its_publish_to_finish() {
        // With copies, the device can complete a task from one copy while
        // its producer is still writing the others: a producer that laps
        // the ring must not take the slot until that publish is done, or
        // the late stores would land over the next lap's task.
        let geo = Geometry::new(2).unwrap();
        let mem = Memory::new(geo);
        let extra = Memory::new(geo);
        let q = mem
            .queue(geo, 0)
            .with_copies(vec![extra.sq.clone()].into_boxed_slice());
        for seq in 0..2 {
            assert_eq!(q.try_reserve(), Ok(seq));
        }
        q.publish(1, &echo(1));
        // Task 0 is reserved, its publish not done, and yet complete (from
        // the copy its producer wrote first); task 1 published and complete.
        complete(&q, 0, 0);
        complete(&q, 1, 1);
        // The slot of 1 is free for 3 once 1's completion is moved aside,
        // but 0's slot is not free for 2 until 0's publish is done.
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
        q.publish(0, &echo(0));
        assert_eq!(q.try_reserve(), Ok(2));
        assert_eq!(q.try_reserve(), Ok(3));
        assert_eq!(q.moved(), 2);
    }

    #[test]
    fn packs_round_trip_on_the_software_device() {
        let geo = Geometry::new(8).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let stop = Arc::new(AtomicBool::new(false));
        let devs: Vec<_> = (0..2)
            .map(|w| {
                let (m, s) = (mem.clone(), stop.clone());
                std::thread::spawn(move || device_worker(m, geo, 0, w, 2, s))
            })
            .collect();
        let mut rng = crate::test_rng::Rng::new(5);
        for _ in 0..crate::test_rng::cases(2000) {
            let n = 1 + (rng.next() % (8 * PACK_TASKS as u64)) as usize;
            let args: Vec<u64> = (0..n).map(|_| rng.next()).collect();
            let slots = n.div_ceil(PACK_TASKS);
            let first = loop {
                match q.try_reserve_many(slots) {
                    Ok(s) => break s,
                    Err(_) => std::thread::yield_now(),
                }
            };
            q.publish_packs(first, crate::proto::layout::OP_ECHO, &args);
            for (d, want) in args.chunks(PACK_TASKS).enumerate() {
                let seq = seq_add(first, d as u64);
                let done = loop {
                    if let Take::Done(c) = q.take(seq) {
                        break c;
                    }
                    std::thread::yield_now();
                };
                assert_eq!(usize::from(done.cqe.pack), want.len());
                // ECHO of one word is the word.
                assert_eq!(done.results.as_deref(), Some(want));
            }
        }
        stop.store(true, Ordering::Relaxed);
        for d in devs {
            d.join().unwrap();
        }
    }

    #[test]
    fn a_moved_pack_keeps_its_results() {
        let geo = Geometry::new(1).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        let a = q.try_reserve().unwrap();
        q.publish_packs(a, crate::proto::layout::OP_ECHO, &[1u64, 2, 3]);
        q.complete_pack(a, &[1, 2, 3]);
        // A producer needs the slot: it moves the completion, results and
        // all, before the next lap overwrites them.
        let b = q.try_reserve().unwrap();
        q.publish_packs(b, crate::proto::layout::OP_ECHO, &[7u64]);
        q.complete_pack(b, &[7]);
        let Take::Done(moved) = q.take(a) else {
            panic!("a's completion was moved, not lost")
        };
        assert_eq!(moved.results.as_deref(), Some(&[1, 2, 3][..]));
        let Take::Done(own) = q.take(b) else {
            panic!("b completed")
        };
        assert_eq!(own.results.as_deref(), Some(&[7][..]));
        // Orphaned with its results, too.
        let c = q.try_reserve().unwrap();
        q.publish_packs(c, crate::proto::layout::OP_NOP, &[(); 2]);
        q.complete_pack(c, &[0, 0]);
        let shares = AtomicU64::new(1);
        q.orphan(&shares);
        let Take::Orphaned(Some(o)) = q.take(c) else {
            panic!("orphaned with its completion")
        };
        assert_eq!(o.results.as_deref(), Some(&[0, 0][..]));
    }

    #[test]
    fn batches_reserve_all_or_nothing() {
        let geo = Geometry::new(8).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        assert_eq!(q.try_reserve_many(3), Ok(0));
        assert_eq!(q.try_reserve(), Ok(3));
        assert_eq!(q.try_reserve_many(5), Err(Refusal::Full), "only 4 free");
        assert_eq!(q.try_reserve_many(4), Ok(4));
        assert_eq!(q.try_reserve_many(1), Err(Refusal::Full));
        // Tasks 1 and 2 complete (their tickets have not read them): a batch
        // moves both completions out and takes their slots once 0 is done.
        complete(&q, 1, 11);
        complete(&q, 2, 12);
        assert_eq!(q.try_reserve_many(3), Err(Refusal::Full), "slot of 0 first");
        complete(&q, 0, 10);
        assert_eq!(q.try_reserve_many(3), Ok(8));
        for (seq, v) in [(0, 10), (1, 11), (2, 12)] {
            assert_eq!(q.take(seq).done().map(|c| c.value), Some(v));
        }
        assert!(q.overflow().entries.is_empty());
        q.close();
        assert_eq!(q.try_reserve_many(1), Err(Refusal::Closed));
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
    /// checks every result arrives exactly once. With `held`, the one
    /// producer holds the ring and reserves as an exclusive producer.
    fn end_to_end(
        cap: usize,
        workers: u64,
        producers: u64,
        tasks: u64,
        window: usize,
        start: u64,
        held: bool,
    ) {
        assert!(!held || producers == 1);
        // Miri interprets every step: a few laps of the ring still check the
        // protocol (and the wrap), in minutes rather than hours.
        let tasks = if cfg!(miri) {
            tasks.min(4 * cap as u64)
        } else {
            tasks
        };
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
        if held {
            q.hold().unwrap();
        }
        let prods: Vec<_> = (0..producers)
            .map(|p| {
                let (q, seen) = (q.clone(), seen.clone());
                std::thread::spawn(move || {
                    let mut inflight = std::collections::VecDeque::new();
                    let reap = |inflight: &mut std::collections::VecDeque<(u64, u64)>| {
                        let (seq, id) = inflight.pop_front().unwrap();
                        let c = loop {
                            if let Some(c) = q.take(seq).done() {
                                break c;
                            }
                            std::thread::yield_now();
                        };
                        assert_eq!(c.value, crate::ops::op::echo_fold(&[id, 0, 0, 0, 0, 0]));
                        seen[id as usize].fetch_add(1, Ordering::Relaxed);
                    };
                    for id in (p..tasks).step_by(producers as usize) {
                        let seq = loop {
                            let reserved = if held {
                                q.try_reserve_held(1)
                            } else {
                                q.try_reserve()
                            };
                            match reserved {
                                Ok(s) => break s,
                                Err(Refusal::Full) if !inflight.is_empty() => reap(&mut inflight),
                                Err(Refusal::Full) => std::thread::yield_now(),
                                Err(r) => unreachable!("{r:?}"),
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
        if held {
            q.release();
        }
        let end = q.close();
        assert_eq!(end, seq_add(start, tasks), "every reservation counted once");
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
        end_to_end(64, 1, 1, 20_000, 48, 0, false);
    }

    #[test]
    fn software_device_many_producers_many_workers() {
        end_to_end(64, 4, 4, 40_000, 8, 0, false);
    }

    #[test]
    fn producers_holding_more_tickets_than_slots_never_deadlock() {
        // 4 producers x 40 held tickets > 64 slots: a laggard's completed,
        // unread tickets must not stop the ring.
        end_to_end(64, 2, 4, 40_000, 40, 0, false);
    }

    #[test]
    fn software_device_across_the_sequence_wrap() {
        end_to_end(16, 2, 2, 5_000, 4, SEQ_MASK - 1000, false);
    }

    #[test]
    fn an_exclusive_producer_across_the_sequence_wrap() {
        end_to_end(16, 2, 1, 5_000, 4, SEQ_MASK - 1000, true);
    }

    #[test]
    fn an_output_counts_only_once_every_word_landed() {
        let (q, _h2d, out) = io_queue(2, (32, 100));
        let (at, tag) = (0, q.geo.tag(0));
        let seq = q.try_reserve().unwrap();
        let image = q.write_input(
            seq,
            &[1, 2, 3],
            SlotImage::new(10, &[]).unwrap().with_input(3),
        );
        q.publish(seq, &image);
        let bytes: Vec<u8> = (0..40).collect();
        // The entry landed first; one word of the output still missing.
        complete_io(&q, &out, seq, &bytes, true);
        out.at(at + 2)
            .store(tagged(0, tag.wrapping_sub(1)), Ordering::Relaxed);
        assert_eq!(q.poll(seq), None, "not complete while a word is missing");
        assert_eq!(q.try_reserve(), Ok(1));
        assert_eq!(
            q.try_reserve(),
            Err(Refusal::Full),
            "nor freed for the next lap"
        );
        complete_io(&q, &out, seq, &bytes, true);
        let Take::Done(done) = q.take(seq) else {
            panic!("complete now")
        };
        assert_eq!(done.output.as_deref(), Some(&bytes[..]));
        // Moved aside by a producer of the next lap, it keeps its output.
        complete_io(&q, &out, 1, &[7; 9], false);
        let s2 = q.try_reserve().unwrap();
        q.publish(s2, &SlotImage::new(10, &[]).unwrap());
        assert_eq!(q.try_reserve(), Ok(3), "slot 1 freed, its output moved");
        let Take::Done(moved) = q.take(1) else {
            panic!("moved")
        };
        assert_eq!(moved.output.as_deref(), Some(&[7u8; 9][..]));
    }

    #[test]
    fn an_output_of_256_laps_before_is_not_taken_for_this_laps() {
        // The tag is the lap's low byte: a slot whose lap 0 left an output
        // and whose lap 256 completes before its own output lands must not
        // hand lap 0's output to lap 256.
        let (q, _h2d, out) = io_queue(1, (8, 64));
        let io_task = || SlotImage::new(10, &[]).unwrap().with_input(0);
        let seq = q.try_reserve().unwrap();
        q.publish(seq, &io_task());
        complete_io(&q, &out, seq, &[9; 40], false);
        assert!(matches!(q.take(seq), Take::Done(_)));
        for _ in 1..256 {
            let seq = q.try_reserve().unwrap();
            q.publish(seq, &SlotImage::new(0, &[]).unwrap());
            complete(&q, seq, 0);
            assert!(matches!(q.take(seq), Take::Done(_)));
        }
        let seq = q.try_reserve().unwrap();
        assert_eq!(seq, 256);
        q.publish(seq, &io_task());
        // Only the entry has landed.
        q.complete(
            seq,
            &Cqe {
                flags: crate::proto::layout::CQE_OUTPUT,
                ..Cqe::ok(0)
            },
        );
        assert_eq!(
            q.take(seq),
            Take::Pending,
            "lap 0's output is not lap 256's"
        );
        complete_io(&q, &out, seq, &[4; 3], true);
        let Take::Done(done) = q.take(seq) else {
            panic!("complete now")
        };
        assert_eq!(done.output.as_deref(), Some(&[4u8; 3][..]));
    }

    #[test]
    fn a_held_full_ring_once_closed_is_closed_not_full() {
        let geo = Geometry::new(4).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        q.hold().unwrap();
        assert_eq!(q.try_reserve_held(4), Ok(0));
        assert_eq!(q.try_reserve_held(1), Err(Refusal::Full));
        assert_eq!(q.close(), 4);
        assert_eq!(q.try_reserve_held(1), Err(Refusal::Closed));
        assert_eq!(q.hold(), Err(Refusal::Closed), "closed comes before held");
    }

    #[test]
    fn a_held_ring_refuses_everyone_else_until_released() {
        let geo = Geometry::new(4).unwrap();
        let mem = Memory::new(geo);
        let q = mem.queue(geo, 0);
        assert_eq!(q.try_reserve(), Ok(0));
        q.hold().unwrap();
        assert_eq!(q.hold(), Err(Refusal::Held), "one holder at a time");
        assert_eq!(q.try_reserve(), Err(Refusal::Held));
        assert_eq!(q.try_reserve_many(2), Err(Refusal::Held));
        assert_eq!(
            q.try_reserve_held(2),
            Ok(1),
            "the holder goes on from the tail"
        );
        q.release();
        assert_eq!(q.try_reserve(), Ok(3), "and hands its tail back");
        q.hold().unwrap();
        assert_eq!(
            q.try_reserve_held(1),
            Err(Refusal::Full),
            "slot 0 is in flight"
        );
        complete(&q, 0, 1);
        assert_eq!(q.try_reserve_held(1), Ok(4));
        // Closed while held: counted, then refused, for good.
        assert_eq!(q.close(), 5);
        assert_eq!(q.close(), 5, "every closer gets the same end");
        complete(&q, 1, 1);
        assert_eq!(q.try_reserve_held(1), Err(Refusal::Closed));
        q.release();
        assert_eq!(q.try_reserve(), Err(Refusal::Closed));
        assert_eq!(q.hold(), Err(Refusal::Closed));
        assert_eq!(q.incomplete(5), 3);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Every interleaving (loom) of the host threads that meet on a slot:
    //! producers reserving and moving completions, tickets taking or
    //! dropping theirs, shutdown closing the tail.
    use super::*;
    use loom::thread;
    use std::sync::Arc;

    /// A one-slot queue whose task 0 is published and completed with 7.
    fn completed_slot() -> (Arc<Memory>, Arc<Queue>) {
        let geo = Geometry::new(1).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, 0));
        let s = q.try_reserve().unwrap();
        q.publish(s, &SlotImage::new(0, &[]).unwrap());
        complete(&q, s, 7);
        (mem, q)
    }

    #[test]
    fn loom_a_moved_pack_keeps_its_own_results() {
        // A producer that moves a completed pack out of its slot must read
        // the pack's results before it frees the slot: once freed, another
        // producer can reserve the next lap and the device overwrite them.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let geo = Geometry::new(1).unwrap();
            let mem = Memory::new(geo);
            let q = Arc::new(mem.queue(geo, 0));
            let first = q.try_reserve().unwrap();
            q.publish_packs(first, crate::proto::layout::OP_ECHO, &[1u64, 2, 3]);
            q.complete_pack(first, &[1, 2, 3]);
            // The mover: needs the slot, moves the pack's completion aside.
            let qa = q.clone();
            let mover = thread::spawn(move || qa.try_reserve());
            // Another producer, and the device serving what it publishes.
            let qb = q.clone();
            let next = thread::spawn(move || {
                if let Ok(seq) = qb.try_reserve() {
                    qb.publish_packs(seq, crate::proto::layout::OP_ECHO, &[7u64, 8, 9]);
                    qb.complete_pack(seq, &[7, 8, 9]);
                }
            });
            next.join().unwrap();
            let _ = mover.join().unwrap();
            let Take::Done(done) = q.take(first) else {
                panic!("the pack completed")
            };
            assert_eq!(done.results.as_deref(), Some(&[1, 2, 3][..]));
        });
    }

    #[test]
    fn loom_producer_moving_vs_ticket_taking() {
        loom::model(|| {
            let (_mem, q) = completed_slot();
            let q1 = q.clone();
            let producer = thread::spawn(move || q1.try_reserve());
            let got = q.take(0).done();
            assert_eq!(producer.join().unwrap(), Ok(1));
            assert_eq!(
                got.map(|c| c.value),
                Some(7),
                "the ticket gets its completion"
            );
            assert!(q.overflow().entries.is_empty(), "nothing left behind");
        });
    }

    #[test]
    fn loom_two_producers_race_for_one_completed_slot() {
        loom::model(|| {
            let (_mem, q) = completed_slot();
            let (qa, qb) = (q.clone(), q.clone());
            let a = thread::spawn(move || qa.try_reserve());
            let b = thread::spawn(move || qb.try_reserve());
            let (a, b) = (a.join().unwrap(), b.join().unwrap());
            let mut got = [a, b];
            got.sort_by_key(|r| format!("{r:?}"));
            assert_eq!(
                got,
                [Err(Refusal::Full), Ok(1)],
                "one wins, one finds task 1 in flight"
            );
            assert_eq!(
                q.take(0).done().map(|c| c.value),
                Some(7),
                "the move lost nothing"
            );
            assert!(q.overflow().entries.is_empty());
            assert_eq!(q.moved(), 1, "counted once");
        });
    }

    #[test]
    fn loom_ticket_dropped_while_a_producer_moves_its_completion() {
        loom::model(|| {
            let (_mem, q) = completed_slot();
            let q1 = q.clone();
            let producer = thread::spawn(move || q1.try_reserve());
            q.detach(0);
            assert_eq!(producer.join().unwrap(), Ok(1));
            assert!(
                q.overflow().entries.is_empty(),
                "a dropped ticket leaves no entry"
            );
        });
    }

    #[test]
    fn loom_batch_and_single_producers_never_overlap() {
        loom::model(|| {
            let geo = Geometry::new(4).unwrap();
            let mem = Memory::new(geo);
            let q = Arc::new(mem.queue(geo, 0));
            let (qa, qb) = (q.clone(), q.clone());
            let a = thread::spawn(move || qa.try_reserve_many(3));
            let b = thread::spawn(move || qb.try_reserve());
            let start = a.join().unwrap().unwrap();
            let single = b.join().unwrap().unwrap();
            let batch: Vec<u64> = (start..start + 3).collect();
            assert!(!batch.contains(&single), "{batch:?} and {single}");
            let mut all = batch;
            all.push(single);
            all.sort();
            assert_eq!(all, [0, 1, 2, 3]);
        });
    }

    #[test]
    fn loom_producers_get_distinct_sequence_numbers() {
        loom::model(|| {
            let geo = Geometry::new(2).unwrap();
            let mem = Memory::new(geo);
            let q = Arc::new(mem.queue(geo, 0));
            let (qa, qb) = (q.clone(), q.clone());
            let a = thread::spawn(move || qa.try_reserve());
            let b = thread::spawn(move || qb.try_reserve());
            let mut got = [a.join().unwrap().unwrap(), b.join().unwrap().unwrap()];
            got.sort();
            assert_eq!(got, [0, 1]);
            assert_eq!(q.try_reserve(), Err(Refusal::Full));
        });
    }

    /// Gives back `n` orphan shares, as `Shared::release` does; whether
    /// they were the last.
    fn release(shares: &AtomicU64, n: u64) -> bool {
        let before = shares.fetch_sub(n, Ordering::AcqRel);
        assert!(
            before >= n,
            "{n} given back of {before}: one was never counted"
        );
        before == n
    }

    #[test]
    fn loom_ticket_takes_while_the_runtime_is_dropped() {
        loom::model(|| {
            let (_mem, q) = completed_slot();
            let shares = Arc::new(AtomicU64::new(1));
            let (q1, s1) = (q.clone(), shares.clone());
            // The ticket: takes its completion, then is dropped.
            let ticket = thread::spawn(move || {
                let mut held = 0;
                let got = q1.take(0).counted(&mut held).map(|c| c.cqe.value);
                let last = held > 0 && release(&s1, held);
                (got, last)
            });
            q.orphan(&shares);
            let runtime_last = release(&shares, 1);
            let (got, ticket_last) = ticket.join().unwrap();
            assert_eq!(got, Some(7), "the completion, either way");
            assert!(runtime_last ^ ticket_last, "exactly one frees");
            assert_eq!(shares.load(Ordering::Relaxed), 0);
            assert!(q.overflow().entries.is_empty());
        });
    }

    #[test]
    fn loom_ticket_dropped_unread_while_the_runtime_is_dropped() {
        loom::model(|| {
            let geo = Geometry::new(1).unwrap();
            let mem = Memory::new(geo);
            let q = Arc::new(mem.queue(geo, 0));
            let s = q.try_reserve().unwrap(); // never completes
            let shares = Arc::new(AtomicU64::new(1));
            let (q1, s1) = (q.clone(), shares.clone());
            let ticket = thread::spawn(move || q1.detach(s) && release(&s1, 1));
            q.orphan(&shares);
            let runtime_last = release(&shares, 1);
            let ticket_last = ticket.join().unwrap();
            assert!(runtime_last ^ ticket_last, "exactly one frees");
            assert_eq!(shares.load(Ordering::Relaxed), 0);
            assert!(q.overflow().entries.is_empty());
        });
    }

    #[test]
    fn loom_close_races_a_reservation() {
        loom::model(|| {
            let geo = Geometry::new(2).unwrap();
            let mem = Memory::new(geo);
            let q = Arc::new(mem.queue(geo, 0));
            let q1 = q.clone();
            let producer = thread::spawn(move || q1.try_reserve());
            let end = q.close();
            match producer.join().unwrap() {
                Ok(seq) => assert!(seq < end, "a reservation that won is before the end"),
                Err(r) => assert_eq!((r, end), (Refusal::Closed, 0)),
            }
            assert_eq!(q.try_reserve(), Err(Refusal::Closed));
            assert_eq!(q.incomplete(end), end as usize, "reserved, never completed");
        });
    }

    #[test]
    fn loom_a_plain_mark_only_moves_forward() {
        // Pollers of an older completion may mark its plain output late,
        // after the taker of a newer one marked its own: the newer mark
        // stays, whatever the order (PLAIN in pkq_layout.h).
        loom::model(|| {
            let (q, _h2d, _out) = io_queue(1, (8, 16));
            let q = Arc::new(q);
            fn io(q: &Queue) -> &Io {
                q.io.as_ref().unwrap()
            }
            let q1 = q.clone();
            let late = thread::spawn(move || io(&q1).note_plain(q1.geo, 3));
            io(&q).note_plain(q.geo, 4);
            late.join().unwrap();
            assert_eq!(io(&q).plain[0].load(Ordering::Relaxed), 4 | FLAG);
            assert!(io(&q).fresh(q.geo, 4 + 255), "255 laps on");
            assert!(!io(&q).fresh(q.geo, 4 + 256), "256 laps on");
        });
    }

    #[test]
    fn loom_an_output_landing_after_its_entry_is_taken_whole() {
        // The device's output words may reach the host after the entry:
        // the ticket takes the task only once every word has, and a
        // producer of the next lap frees the slot only then.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(2);
        model.check(|| {
            let (q, _h2d, out) = io_queue(1, (8, 16));
            let q = Arc::new(q);
            let seq = q.try_reserve().unwrap();
            q.publish(seq, &SlotImage::new(10, &[]).unwrap().with_input(0));
            let (qd, od) = (q.clone(), out.clone());
            let device = thread::spawn(move || {
                complete_io(&qd, &od, seq, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], true)
            });
            let qp = q.clone();
            let producer = thread::spawn(move || qp.try_reserve());
            let got = loop {
                match q.take(seq) {
                    Take::Done(done) => break done.output,
                    _ => thread::yield_now(),
                }
            };
            device.join().unwrap();
            assert_eq!(got.as_deref(), Some(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10][..]));
            let _ = producer.join().unwrap();
        });
    }

    #[test]
    fn loom_an_exclusive_producer_races_a_close() {
        // The holder's plain tail stores against the closer: every
        // reservation it keeps is before the end, every one before the end
        // it kept (none lost to a drain, none run after it).
        loom::model(|| {
            let geo = Geometry::new(4).unwrap();
            let mem = Memory::new(geo);
            let q = Arc::new(mem.queue(geo, 0));
            q.hold().unwrap();
            let q1 = q.clone();
            let producer = thread::spawn(move || [q1.try_reserve_held(1), q1.try_reserve_held(2)]);
            let end = q.close();
            let got = producer.join().unwrap();
            let kept: u64 = match got {
                [Ok(0), Ok(1)] => 3,
                [Ok(0), Err(Refusal::Closed)] => 1,
                [Err(Refusal::Closed), Err(Refusal::Closed)] => 0,
                other => panic!("{other:?}"),
            };
            assert_eq!(end, kept, "the end counts exactly the kept reservations");
            assert_eq!(q.try_reserve_held(1), Err(Refusal::Closed));
            assert_eq!(q.incomplete(end), end as usize);
        });
    }

    #[test]
    fn loom_a_release_races_a_close_and_a_shared_producer() {
        // The holder gives the ring back while a closer closes it and a
        // shared producer tries it: a close never lets a later shared
        // reservation through, and the end counts the holder's.
        loom::model(|| {
            let geo = Geometry::new(4).unwrap();
            let mem = Memory::new(geo);
            let q = Arc::new(mem.queue(geo, 0));
            q.hold().unwrap();
            assert_eq!(q.try_reserve_held(1), Ok(0));
            let (q1, q2) = (q.clone(), q.clone());
            let holder = thread::spawn(move || q1.release());
            let shared = thread::spawn(move || q2.try_reserve());
            let end = q.close();
            holder.join().unwrap();
            match shared.join().unwrap() {
                Ok(seq) => assert_eq!((seq, end), (1, 2), "reserved before the close"),
                Err(Refusal::Held | Refusal::Closed) => assert_eq!(end, 1),
                Err(r) => panic!("{r:?}"),
            }
            assert_eq!(q.try_reserve(), Err(Refusal::Closed));
            assert_eq!(q.hold(), Err(Refusal::Closed));
        });
    }

    #[test]
    fn loom_a_lapping_producer_waits_for_a_publish_to_every_copy() {
        // With a copy of the slots per poller, the device may complete a
        // task from one copy while its producer is still writing the other;
        // a producer lapping the ring must not publish the slot's next lap
        // until then, or the late stores would overwrite it.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(2);
        model.check(|| {
            let geo = Geometry::new(1).unwrap();
            let (mem, extra) = (Memory::new(geo), Memory::new(geo));
            let q = Arc::new(
                mem.queue(geo, 0)
                    .with_copies(vec![extra.sq.clone()].into_boxed_slice()),
            );
            let image =
                |id: u64| SlotImage::new(crate::proto::layout::OP_ECHO, &id.to_le_bytes()).unwrap();
            assert_eq!(q.try_reserve(), Ok(0));
            let qa = q.clone();
            let first = thread::spawn(move || qa.publish(0, &image(0)));
            // The device, reading only the first copy.
            let read = move |m: &Memory, seq: u64| m.task(geo, seq).map(|t| t.args[0]);
            // One look each (loom explores when): the device completes the
            // task if it finds it whole; the lapping producer publishes the
            // next lap if the slot is free for it.
            let (md, qd) = (mem.clone(), q.clone());
            let device = thread::spawn(move || {
                if read(&md, 0).is_some() {
                    complete(&qd, 0, 0);
                }
            });
            let qb = q.clone();
            let lapping = thread::spawn(move || {
                let got = qb.try_reserve();
                if let Ok(seq) = got {
                    qb.publish(seq, &image(seq));
                }
                got
            });
            first.join().unwrap();
            device.join().unwrap();
            if lapping.join().unwrap() == Ok(1) {
                assert_eq!(read(&mem, 1), Some(1));
                assert_eq!(read(&extra, 1), Some(1), "the copy holds the later lap");
            }
        });
    }
}
