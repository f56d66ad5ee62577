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
//!   count costs two locked instructions a task; docs/design/orphan-shares.md). When the runtime is dropped,
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

use crate::layout::{CQE_WORDS, HEADER_TRACE_BIT, PACK_ARG_BYTES, PACK_TASKS, SLOT_WORDS};
use crate::proto::ring::{FLAG, Geometry, SEQ_MASK, distance, seq_add, seq_sub};
use crate::proto::slot::{Cqe, SlotImage, tagged};
pub(crate) use crate::proto::tail::Refusal;
use crate::proto::tail::Tail;
use crate::proto::words::Words;
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, fence, ticks, ticks_after_loads};
pub(crate) use crate::trace::recorder::EntryId;
use crate::trace::recorder::{Closed, Opened, Recorder};

const DETACHED: u64 = FLAG;

/// Test hooks: a closure run once at a named point of this thread's next
/// pass through it (tests).
#[cfg(all(test, not(loom)))]
pub(crate) mod test_hook {
    use std::cell::RefCell;

    /// Where a hook runs.
    #[derive(Clone, Copy)]
    pub(crate) enum Point {
        /// Right after a handle's compare-and-swap ended its ownership of
        /// a slot, on the handle's thread, while the handle is still inside
        /// the call that ended it. A test drops the runtime there: the code
        /// from the compare-and-swap to the handle's return must then touch
        /// nothing of the runtime's (Miri checks, references included).
        OwnershipEnded,
        /// Right before a holder's look at its completion. A test completes
        /// the task there, as a device whose completion lands while the
        /// holder's thread is held up just before its load.
        BeforeLook,
        /// Right before a producer's reservation, after the submit's own
        /// checks. A test stops the runtime there, as another thread whose
        /// stop closes the rings just then.
        BeforeReserve,
    }

    type Hook = Option<Box<dyn FnOnce()>>;
    thread_local!(static HOOKS: RefCell<[Hook; 3]> = const { RefCell::new([None, None, None]) });

    /// Runs `f` the next time this thread passes `at`.
    pub(crate) fn set(at: Point, f: impl FnOnce() + 'static) {
        HOOKS.with(|h| h.borrow_mut()[at as usize] = Some(Box::new(f)));
    }

    pub(crate) fn fire(at: Point) {
        if let Some(f) = HOOKS.with(|h| h.borrow_mut()[at as usize].take()) {
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
    /// The runtime's trace recorder, for this ring (`crate::trace`).
    trace: Option<QueueTrace>,
}

/// A traced submit ([`Queue::trace_tick`], then [`Queue::trace_claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceStart {
    /// The host's clock when the submit began.
    pub(crate) tick: u64,
    /// Whether its ring's device logs blocks (its entries are then
    /// claimed before its stores: [`Queue::trace_claim`]).
    logs: bool,
    /// Its entries, where claimed before its stores; else claimed after
    /// them.
    claimed: Option<EntryId>,
    /// How many of its slots, from the first, carry the trace bit: those
    /// whose entries are kept, on a ring whose device logs blocks; none
    /// elsewhere (a lane of warps never gets the bit).
    marked: usize,
}

impl TraceStart {
    /// How many slots, from the first, of a submit that began at `start`
    /// carry the trace bit.
    #[inline(always)]
    pub(crate) fn marked(start: Option<TraceStart>) -> usize {
        start.map_or(0, |s| s.marked)
    }
}

/// What a traced ring keeps (see `crate::trace::recorder`).
struct QueueTrace {
    recorder: std::sync::Arc<Recorder>,
    /// Whether the ring's device logs each block's run of a task whose
    /// header carries the trace bit (a lane of blocks or groups): its
    /// submits claim their entries before their stores, and mark only the
    /// slots whose records are kept (a dropped record's blocks would evict
    /// from the log those of records kept).
    logs: bool,
    /// Per slot: the entry of the traced lap whose handle was dropped
    /// unread, else [`EntryId::NONE`]. Written, under the overflow lock,
    /// by that handle, while its turn is still its lap's and before the
    /// compare-and-swap that marks it `DETACHED`; read and reset to `NONE`,
    /// under that lock, by the producer whose compare-and-swap frees the
    /// slot.
    detached: Box<[AtomicU64]>,
    lane: u8,
    ring: u16,
}

impl QueueTrace {
    /// Opens the entries of `slots` slots from `first` (a submit's, after
    /// its slot stores), submitted at `tick`: `claimed`, or claimed now.
    #[cold]
    #[inline(never)]
    fn open(
        &self,
        first: u64,
        slots: usize,
        op: u16,
        tick: u64,
        claimed: Option<EntryId>,
    ) -> EntryId {
        let id = claimed.unwrap_or_else(|| self.recorder.claim(slots));
        if id.is_traced() {
            let submit_thread = crate::sync::thread_number();
            for k in 0..slots {
                let opened = Opened {
                    seq: seq_add(first, k as u64),
                    submit_tick: tick,
                    op,
                    ring: self.ring,
                    lane: self.lane,
                    submit_thread,
                };
                self.recorder.open(id.nth(k), &opened);
            }
        }
        id
    }

    /// Closes the entry a handle dropped unread left at `slot` (if it left
    /// one) with its completion `cqe`, and resets the slot's word for the
    /// next lap; under the overflow lock (see `detached`).
    fn close_detached(&self, slot: usize, cqe: &Cqe) {
        let word = &self.detached[slot];
        let left = EntryId(word.load(Ordering::Relaxed));
        if left.is_traced() {
            word.store(EntryId::NONE.0, Ordering::Relaxed);
            self.close(left, cqe, ticks_after_loads());
        }
    }

    /// Closes the entry `id` with the completion `cqe`, seen at `seen`.
    #[inline]
    fn close(&self, id: EntryId, cqe: &Cqe, seen: u64) {
        self.recorder.close(
            id,
            &Closed {
                seen_tick: seen,
                device_start_ns: cqe.t_start,
                device_end_ns: cqe.t_end,
                status: cqe.status,
                tasks: cqe.pack.max(1),
                poller: cqe.poller,
                seen_thread: crate::sync::thread_number(),
            },
        );
    }
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
            trace: None,
        }
    }

    /// The same queue, its tasks recorded by `recorder` while it is on, as
    /// ring `ring` of lane `lane`, whose device logs blocks where `logs`
    /// (a lane of blocks or groups).
    pub(crate) fn with_trace(
        mut self,
        recorder: std::sync::Arc<Recorder>,
        lane: u8,
        ring: u16,
        logs: bool,
    ) -> Self {
        self.trace = Some(QueueTrace {
            recorder,
            logs,
            detached: (0..self.geo.capacity())
                .map(|_| AtomicU64::new(EntryId::NONE.0))
                .collect(),
            lane,
            ring,
        });
        self
    }

    /// The host's clock, if tracing is on, for a trace record's submit
    /// time: read by a producer before its reservation, so that the read
    /// runs beside the reservation's locked instruction (a record's submit
    /// time is when the submit began; a wait for room counts as dispatch).
    /// `Some` also says the submit is traced: [`Queue::trace_claim`] goes
    /// between its reservation and its stores, [`Queue::trace_open`]
    /// after them.
    #[inline(always)]
    pub(crate) fn trace_tick(&self) -> Option<TraceStart> {
        match &self.trace {
            Some(t) if t.recorder.is_on() => Some(TraceStart {
                tick: ticks(),
                logs: t.logs,
                claimed: None,
                marked: 0,
            }),
            _ => None,
        }
    }

    /// A traced submit of `slots` slots (begun at `start`) between its
    /// reservation and its stores: on a ring whose device logs blocks, its
    /// entries are claimed now, and its kept ones' slots marked
    /// ([`TraceStart::marked`]); elsewhere nothing (the narrow path
    /// claims after its stores, out of the way of the task's dispatch).
    #[inline(always)]
    pub(crate) fn trace_claim(
        &self,
        start: Option<TraceStart>,
        slots: usize,
    ) -> Option<TraceStart> {
        // On `start` first: tracing off (or a narrow ring) reads nothing.
        match start {
            Some(s) if s.logs && slots != 0 => self.trace.as_ref().map(|t| {
                let id = t.recorder.claim(slots);
                TraceStart {
                    claimed: Some(id),
                    marked: t.recorder.kept(id, slots),
                    ..s
                }
            }),
            _ => start,
        }
    }

    /// The entries of a submit of `slots` slots from `first` (its handle
    /// carries them), traced where `tick` (its [`Queue::trace_claim`]) is
    /// `Some`: opened after the slot stores (and claimed then, unless
    /// claimed before them), out of the way of the task's dispatch.
    #[inline(always)]
    pub(crate) fn trace_open(
        &self,
        first: u64,
        slots: usize,
        op: u16,
        tick: Option<TraceStart>,
    ) -> EntryId {
        match (&self.trace, tick) {
            (Some(t), Some(start)) if slots != 0 => {
                t.open(first, slots, op, start.tick, start.claimed)
            }
            _ => EntryId::NONE,
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
        #[cfg(all(test, not(loom)))]
        test_hook::fire(test_hook::Point::BeforeReserve);
        self.tail.reserve(1, |seq| self.claimable(seq))
    }

    /// Reserves `n` consecutive sequence numbers (1 to the capacity) with
    /// one compare-and-swap of the tail, all or none: `Full` while fewer
    /// than `n` slots from the tail on are free (as [`Self::try_reserve`]
    /// for one). Returns the first.
    pub(crate) fn try_reserve_many(&self, n: usize) -> Result<u64, Refusal> {
        debug_assert!((1..=self.geo.capacity()).contains(&n));
        #[cfg(all(test, not(loom)))]
        test_hook::fire(test_hook::Point::BeforeReserve);
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
        #[cfg(all(test, not(loom)))]
        test_hook::fire(test_hook::Point::BeforeReserve);
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
        // Nobody will read a detached task's completion: the producer whose
        // compare-and-swap frees the slot records it, in the entry its
        // handle left (a producer borrows the runtime, so the queue lives on
        // after the swap).
        let mut moved = self.overflow();
        if turn
            .compare_exchange(owner, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            match done {
                Some(done) => {
                    moved.entries.insert(prev, Some(done));
                    self.moved.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    if let Some(t) = &self.trace {
                        // Under the lock that the traced detach held when
                        // it left the entry.
                        t.close_detached(self.geo.slot(prev), &cqe);
                    }
                }
            }
        }
        true
    }

    /// Records every traced task whose handle was dropped unread and whose
    /// completion has arrived in a slot no producer freed, as the producer
    /// that frees it would (`free_completed`), under the overflow lock,
    /// which that producer and the detach hold too (each entry closed
    /// once). A stop's last step: after it, no producer frees a slot.
    pub(crate) fn record_detached(&self) {
        let Some(t) = &self.trace else {
            return;
        };
        let _moved = self.overflow();
        for (slot, word) in t.detached.iter().enumerate() {
            let owner = self.turns[slot].load(Ordering::Acquire);
            if !EntryId(word.load(Ordering::Relaxed)).is_traced() || owner & DETACHED == 0 {
                continue;
            }
            if let Some(cqe) = self.poll(owner & !DETACHED) {
                t.close_detached(slot, &cqe);
            }
        }
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
    /// one after another; docs/design/slot-copies-per-poller.md#copies).
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
    #[cfg(test)]
    #[inline(always)]
    pub(crate) fn publish(&self, seq: u64, image: &SlotImage) {
        self.publish_at(seq, image, false);
    }

    /// [`Queue::publish`], its header marked traced where `traced` (see
    /// [`Queue::trace_claim`]).
    #[inline(always)]
    pub(crate) fn publish_at(&self, seq: u64, image: &SlotImage, traced: bool) {
        let tag = self.geo.tag(seq);
        let at = self.geo.slot(seq) * SLOT_WORDS;
        #[inline(always)]
        fn store_slot(sq: &Words, at: usize, image: &SlotImage, tag: u8, header: u64) {
            for (k, w) in sq.run::<SLOT_WORDS>(at).iter().enumerate() {
                let extra = if k == 0 { header } else { 0 };
                w.store(image.word(k, tag) | extra, Ordering::Relaxed);
            }
        }
        // A traced task says so in its header (PKQ_HEADER_TRACE_BIT: a wide
        // lane logs each block's run of it); bit 53 of chunk 0, under its tag.
        let header = if traced { 1 << HEADER_TRACE_BIT } else { 0 };
        let store = |sq: &Words| store_slot(sq, at, image, tag, header);
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
    /// Its gain for producers: docs/design/mapped-memory.md#prefetch.
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
    /// time they are written; docs/design/mapped-memory.md#prefetch).
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
            // Unmarked: packs go to lanes of warps only, which log no
            // blocks.
            self.publish_at(
                seq_add(first, d as u64),
                &SlotImage::pack(op, len, pack.len()),
                false,
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
    /// `ARGS_BYTES`, checked by the caller), from the reserved `first` on,
    /// the first `marked` marked traced ([`TraceStart::marked`]).
    #[inline]
    pub(crate) fn publish_run<A: bytemuck::Pod>(
        &self,
        first: u64,
        op: u16,
        args: &[A],
        marked: usize,
    ) {
        for (k, a) in args.iter().enumerate() {
            let image = SlotImage::encode(op, bytemuck::bytes_of(a));
            self.publish_at(seq_add(first, k as u64), &image, k < marked);
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
    /// device of the tests).
    pub(crate) fn complete(&self, seq: u64, cqe: &Cqe) {
        let tag = self.geo.tag(seq);
        let entry = self.cq.run::<CQE_WORDS>(self.geo.slot(seq) * CQE_WORDS);
        for (w, v) in entry.iter().zip(cqe.encode(tag)) {
            w.store(v, Ordering::Release);
        }
    }

    #[cfg(test)]
    /// Writes the result words of the pack of `seq`, then its completion,
    /// as the device does (the software device of the tests).
    pub(crate) fn complete_pack(&self, seq: u64, values: &[u64]) {
        let at = self.geo.slot(seq) * PACK_TASKS;
        for (w, v) in self.pack_results.run::<PACK_TASKS>(at).iter().zip(values) {
            w.store(*v, Ordering::Relaxed);
        }
        let cqe = Cqe {
            status: 0,
            pack: values.len().min(PACK_TASKS) as u8,
            flags: 0,
            poller: 0,
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
        self.take_traced(seq, EntryId::NONE)
    }

    /// [`Queue::take_at`] of a traced task for an owner of the queue (its
    /// tests).
    #[cfg(test)]
    #[inline]
    pub(crate) fn take_traced(&self, seq: u64, entry: EntryId) -> Take {
        // SAFETY: `self` is alive for this whole call.
        unsafe { Self::take_at(NonNull::from(self), seq, entry) }
    }

    /// For the ticket or batch of `seq`: its completion, once the device
    /// wrote it, taking it (the slot is then free for the next lap), and
    /// closing its trace entry `entry` (the handle's: [`EntryId::NONE`] if
    /// not traced). Called only by that holder, until it returns `Done` or
    /// `Orphaned`.
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
    pub(crate) unsafe fn take_at(this: NonNull<Self>, seq: u64, entry: EntryId) -> Take {
        // SAFETY: alive while the caller owns the slot (the contract); not
        // used after the compare-and-swap that ends that.
        let q = unsafe { this.as_ref() };
        let turn = &q.turns[q.geo.slot(seq)];
        let mut recorded = false;
        #[cfg(all(test, not(loom)))]
        test_hook::fire(test_hook::Point::BeforeLook);
        if let Some(cqe) = q.poll(seq) {
            // The entry is closed here only while the turn is still this
            // lap's, read after the look: a turn that left a lap never comes
            // back to it, so the look found this lap's completion. A holder
            // whose completion a producer moved aside may look laps later
            // and find a later lap's under the same tag (a tag is a lap's
            // low bits), which the swap below, failing, discards; its own
            // is recorded from the overflow map (`take_moved`). The clock
            // after the look's load: never before the completion landed,
            // however long the thread was held up before the look. Before
            // the compare-and-swap, after which the queue may be gone.
            if entry.is_traced()
                && let Some(t) = &q.trace
                && turn.load(Ordering::Acquire) == seq
            {
                t.close(entry, &cqe, ticks_after_loads());
                recorded = true;
            }
            let done = q.completed(seq, cqe);
            let next = q.geo.next_lap(seq);
            if turn
                .compare_exchange(seq, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                #[cfg(all(test, not(loom)))]
                test_hook::fire(test_hook::Point::OwnershipEnded);
                return Take::Done(done);
            }
        }
        // A producer needed the slot and moved the completion, or the
        // runtime is gone (see `free_completed` and `orphan`: the entry is
        // in place once we hold the lock).
        if turn.load(Ordering::Acquire) != seq {
            // SAFETY: still the caller's (the turn moved to the overflow map).
            return unsafe { Self::take_moved(this, seq, recorded, entry) };
        }
        Take::Pending
    }

    /// The entry of `seq` in the overflow map, if there is one.
    ///
    /// # Safety
    /// As [`Queue::take_at`]: the entry is the caller's until it is removed
    /// here; the lock is let go before this returns, and the runtime's
    /// drop takes it before it can free the queue.
    unsafe fn take_moved(this: NonNull<Self>, seq: u64, recorded: bool, entry: EntryId) -> Take {
        // SAFETY: the caller's entry keeps the queue alive until removed,
        // and the drop that would free it waits for this lock.
        let q = unsafe { this.as_ref() };
        let mut moved = q.overflow();
        if !recorded
            && entry.is_traced()
            && let (Some(t), Some(Some(done))) = (&q.trace, moved.entries.get(&seq))
        {
            // Under the lock: the queue lives until it is let go.
            t.close(entry, &done.cqe, ticks_after_loads());
        }
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
        self.detach_traced(seq, EntryId::NONE)
    }

    /// [`Queue::detach_at`] of a traced task for an owner of the queue (its
    /// tests).
    #[cfg(test)]
    pub(crate) fn detach_traced(&self, seq: u64, entry: EntryId) -> bool {
        // SAFETY: `self` is alive for this whole call.
        unsafe { Self::detach_at(NonNull::from(self), seq, entry) }
    }

    /// The ticket of `seq` is gone without taking its completion. Returns
    /// whether the caller now holds an orphan share (see `Take::Orphaned`).
    /// Its trace entry `entry`, if the task completed meanwhile, is closed
    /// here, else by the producer that frees its slot.
    ///
    /// # Safety
    /// As [`Queue::take_at`]: the caller owns the slot of `seq` until this
    /// call gives it up, and touches the queue no more afterwards (unless
    /// it returned `true`: a share, to give back).
    pub(crate) unsafe fn detach_at(this: NonNull<Self>, seq: u64, entry: EntryId) -> bool {
        // SAFETY: the caller's contract (as for `take_at`).
        match unsafe { Self::take_at(this, seq, entry) } {
            Take::Done(_) => return false,
            Take::Orphaned(_) => return true,
            Take::Pending => {}
        }
        // SAFETY: the slot is still the caller's (the take found it pending).
        let q = unsafe { this.as_ref() };
        let turn = &q.turns[q.geo.slot(seq)];
        // A traced task's entry, for the producer that frees the slot, is
        // left under the overflow lock, which that producer holds when it
        // reads it: while the lock is held no one else changes the turn, so
        // a turn still this lap's is the swap's to win below, and a lap
        // that lost its slot leaves nothing (the producer resets the word).
        let trace = q.trace.as_ref().filter(|_| entry.is_traced());
        let lock = trace.map(|_| q.overflow());
        if let Some(t) = trace
            && turn.load(Ordering::Acquire) == seq
        {
            t.detached[q.geo.slot(seq)].store(entry.0, Ordering::Relaxed);
        }
        let detached = turn
            .compare_exchange(seq, seq | DETACHED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        // Before `take_moved`, which takes it.
        drop(lock);
        if !detached {
            // Moved to the overflow map between the two looks: drop it there.
            // SAFETY: still the caller's entry.
            return matches!(
                unsafe { Self::take_moved(this, seq, false, entry) },
                Take::Orphaned(_)
            );
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

#[cfg(test)]
mod support;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
