//! The software device of the tests: what `cuda/pkq_worker.cuh` does, over
//! heap words laid out by the same [`Plan`], so that the real `Runtime`,
//! `Ticket` and `Batch` run under loom and Miri with nothing re-implemented
//! on the host side.
//!
//! It models a worker of several pollers as the kernel has it: poller `j`
//! polls copy `j` of the worker's slots (COPIES in pkq_layout.h) and judges
//! what it read (whole; not yet published; in a copy other than 0 also the
//! lap before last; anything else is corrupt and stops it), claims a whole
//! slot's task with a compare-and-swap on the worker's claim counter once
//! the worker's task before it has completed (a worker runs its tasks one
//! after another, whatever its pollers; a poller that finds the slot whole
//! before its turn polls again), runs it and writes the completion. A poller reads its own stop word with every poll (the
//! kernel's pollers: every `PKQ_STOP_POLL_INTERVAL`-th) and stops on it,
//! ahead of a task read with it.
//!
//! Ops: NOP; ECHO (folded as the kernel does); SPIN (sleeps its argument's
//! nanoseconds, at most `SPIN_MAX_NS`, and returns them); any other op
//! completes with `UNKNOWN_OP`. Packs as PACKS in pkq_layout.h.
//!
//! Memory orders stand in for what the GPU gets otherwise: a poller's
//! loads of the slot are acquires (on the GPU the claim and everything
//! after it depend on the loaded words, and a poller reads the claim
//! counter before it loads the next slot); the completion's words are
//! release stores (on the GPU they depend on the slot's loads, so they
//! cannot pass them); pack results go before a release fence (the kernel's
//! `__threadfence_system`), as PACKS says.
//!
//! Two ways to run it: [`SoftDevice::step`], one poll of one poller, for
//! loom models that decide who runs when; or a thread per poller
//! ([`SoftDevice::start_threads`]) for the other tests.

use std::sync::Arc;

use crate::layout::{
    OP_ECHO, OP_NOP, OP_SPIN, PACK_ARG_BYTES, PACK_TASKS, SLOT_WORDS, SPIN_MAX_NS, STATE_BITS,
    STATUS_BAD_ARGS, STATUS_OK, STATUS_UNKNOWN_OP, STOP_VALUE, WORKER_BAD_TAG, WORKER_RUNNING,
    WORKER_STOPPED,
};
use crate::proto::plan::Plan;
use crate::proto::ring::{FLAG, SEQ_MASK, distance, seq_add};
use crate::proto::slot::{Cqe, DecodedSlot, tag_of};
use crate::proto::words::Words;
use crate::sync::{AtomicU64, Ordering, fence};

/// The status of an IO task whose fresh mark was wrong (a status the
/// kernel never uses: handlers' own start at `STATUS_USER`).
pub(crate) const WRONG_FRESH: u8 = 255;

/// What one poll came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing to run yet (or another poller took the task).
    Idle,
    /// Ran a task and completed it.
    Ran,
    /// Stopped: told to, or it found a corrupt tag. It polls no more.
    Stopped,
}

/// What a poll read of a slot says (the kernel's `judge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Judged {
    Whole,
    NotYet,
    Corrupt,
}

fn judge(words: &[u64; SLOT_WORDS], tag: u8, copy: bool) -> Judged {
    if words.iter().all(|&w| tag_of(w) == tag) {
        return Judged::Whole;
    }
    let before = tag.wrapping_sub(1);
    let lagging = if copy { tag.wrapping_sub(2) } else { before };
    let fits = |t: u8| t == tag || t == before || t == lagging;
    if words.iter().all(|&w| fits(tag_of(w))) {
        Judged::NotYet
    } else {
        Judged::Corrupt
    }
}

/// The resident kernel's part, in software.
pub(crate) struct SoftDevice {
    plan: Plan,
    h2d: Words,
    d2h: Words,
    /// Per worker: its tasks claimed so far (the kernel's shared-memory
    /// claim counter).
    claims: Box<[AtomicU64]>,
    /// Per worker: its tasks completed so far.
    done: Box<[AtomicU64]>,
    /// Per poller: the worker's tasks it knows to be taken.
    positions: Box<[AtomicU64]>,
    /// Per poller: 1 once it stopped.
    stopped: Box<[AtomicU64]>,
    /// Per slot: the latest sequence number whose task wrote a plain
    /// output there, with `FLAG` (0: none), to check each IO task's
    /// `HEADER_FRESH_BIT` against (PLAIN in pkq_layout.h). Written before
    /// the task's completion, read for a later lap of the slot, which the
    /// host publishes only after it saw that completion.
    plain: Box<[AtomicU64]>,
    #[cfg(not(loom))]
    epoch: std::time::Instant,
    #[cfg(not(loom))]
    threads: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl SoftDevice {
    /// A device over `h2d` and `d2h` (laid out by `plan`), every poller
    /// reporting in at once.
    pub(crate) fn new(plan: Plan, h2d: Words, d2h: Words) -> Arc<Self> {
        let counters = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        let dev = Self {
            plan,
            claims: counters(plan.workers),
            done: counters(plan.workers),
            positions: counters(plan.all_pollers()),
            stopped: counters(plan.all_pollers()),
            plain: counters(plan.rings * plan.geo.capacity()),
            h2d,
            d2h,
            #[cfg(not(loom))]
            epoch: std::time::Instant::now(),
            #[cfg(not(loom))]
            threads: std::sync::Mutex::new(Vec::new()),
        };
        for p in 0..plan.all_pollers() {
            dev.beat(p);
            dev.set_state(p, WORKER_RUNNING);
        }
        Arc::new(dev)
    }

    fn set_state(&self, p: usize, state: u64) {
        let k = self.positions[p].load(Ordering::Relaxed);
        self.d2h
            .at(self.plan.state_word(p))
            .store(state | k << STATE_BITS, Ordering::Relaxed);
    }

    /// The heartbeat (not under loom, whose models gain nothing from it).
    fn beat(&self, _p: usize) {
        #[cfg(not(loom))]
        self.d2h
            .at(self.plan.state_word(_p) + self.plan.all_pollers())
            .store(
                self.epoch.elapsed().as_nanos() as u64 + 1,
                Ordering::Relaxed,
            );
    }

    fn stop(&self, p: usize, state: u64) -> Step {
        self.set_state(p, state);
        self.stopped[p].store(1, Ordering::Release);
        Step::Stopped
    }

    /// Whether every poller has stopped.
    pub(crate) fn finished(&self) -> bool {
        self.stopped.iter().all(|s| s.load(Ordering::Acquire) == 1)
    }

    /// One poll of poller `j` of worker `w`, and the task it finds, if it
    /// claims one. Only one thread steps a given poller at a time.
    pub(crate) fn step(&self, w: usize, j: usize) -> Step {
        let plan = &self.plan;
        let p = w * plan.pollers + j;
        if self.stopped[p].load(Ordering::Relaxed) == 1 {
            return Step::Stopped;
        }
        self.beat(p);
        let claim = &self.claims[w];
        let k = self.positions[p]
            .load(Ordering::Relaxed)
            .max(claim.load(Ordering::Acquire));
        self.positions[p].store(k, Ordering::Relaxed);
        let (ring, first, stride) = plan.worker_ring(w);
        let seq = seq_add(plan.start_seq, first.wrapping_add(k.wrapping_mul(stride)));
        let slot = ring * plan.geo.capacity() + plan.geo.slot(seq);
        let tag = plan.geo.tag(seq);
        let at = j * plan.copy_words() + slot * SLOT_WORDS;
        let words: [u64; SLOT_WORDS] =
            std::array::from_fn(|i| self.h2d.at(at + i).load(Ordering::Acquire));
        let stop = self.h2d.at(plan.stop_word(p)).load(Ordering::Relaxed) == STOP_VALUE;
        match judge(&words, tag, j > 0) {
            _ if stop => self.stop(p, WORKER_STOPPED),
            Judged::NotYet => Step::Idle,
            // Another poller may have taken this task and the slot moved on:
            // corrupt only if the task is not taken.
            Judged::Corrupt if claim.load(Ordering::Acquire) > k => Step::Idle,
            Judged::Corrupt => self.stop(p, WORKER_BAD_TAG),
            // One after another: claimed only once the worker's task before
            // it has completed; until then the poller polls again.
            Judged::Whole if self.done[w].load(Ordering::Acquire) != k => Step::Idle,
            Judged::Whole => {
                if claim
                    .compare_exchange(k, k + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    return Step::Idle; // another poller won it
                }
                let task = DecodedSlot::decode(&words, tag).expect("a whole slot decodes");
                let cqe = self.run(slot, &task, seq);
                let entry = ring * plan.geo.capacity() + plan.geo.slot(seq);
                for (i, v) in cqe.encode(tag).into_iter().enumerate() {
                    self.d2h
                        .at(entry * crate::layout::CQE_WORDS + i)
                        .store(v, Ordering::Release);
                }
                self.done[w].store(k + 1, Ordering::Release);
                self.positions[p].store(k + 1, Ordering::Relaxed);
                Step::Ran
            }
        }
    }

    /// Runs the task of `slot` and returns its completion (pack results
    /// written first, then a release fence).
    fn run(&self, slot: usize, task: &DecodedSlot, seq: u64) -> Cqe {
        let mut cqe = Cqe {
            status: STATUS_OK,
            pack: 0,
            flags: 0,
            poller: 0,
            value: 0,
            t_start: seq,
            t_end: seq,
        };
        if task.io.is_some() && !self.fresh_right(slot, task, seq) {
            cqe.status = WRONG_FRESH;
            return cqe;
        }
        // The kernel answers a NOP at once, an IO task's too (no output).
        if let Some(input) = task.io
            && task.op != crate::layout::OP_NOP
        {
            return self.run_io(slot, task, seq, input, cqe);
        }
        if task.pack == 0 {
            match op(task.op, &task.args) {
                Ok(v) => cqe.value = v,
                Err(status) => cqe.status = status,
            }
            return cqe;
        }
        if task.pack > PACK_TASKS || task.len > PACK_ARG_BYTES {
            cqe.status = STATUS_BAD_ARGS;
            return cqe;
        }
        // The argument words carry no tag: ordered after the slot's
        // (acquire) loads, as the kernel's acquire fence orders them.
        let args = self.plan.pack_at(slot, false);
        let results = self.plan.pack_at(slot, true);
        let mut failed = 0u64;
        for i in 0..task.pack {
            let arg = if task.len == 0 {
                0
            } else {
                self.h2d.at(args + i).load(Ordering::Relaxed)
            };
            let word = match op(task.op, &[arg, 0, 0, 0, 0, 0]) {
                Ok(v) => v,
                Err(status) => {
                    failed |= 1 << i;
                    u64::from(status)
                }
            };
            self.d2h.at(results + i).store(word, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        cqe.pack = task.pack as u8;
        cqe.value = failed;
        cqe
    }

    /// Whether an IO task carries `HEADER_FRESH_BIT` exactly when a task
    /// of its slot wrote a plain output in the last 255 laps (the host's marks
    /// against what this device ran). A wrong one fails the task with
    /// `WRONG_FRESH`, so that the test that sent it sees it.
    fn fresh_right(&self, slot: usize, task: &DecodedSlot, seq: u64) -> bool {
        let mark = self.plain[slot].load(Ordering::Relaxed);
        let fresh =
            mark != 0 && distance(mark & SEQ_MASK, seq) < 256 * self.plan.geo.capacity() as u64;
        task.fresh == fresh
    }

    /// Runs an IO task as the kernel does: its `input` bytes read from the
    /// slot's input area (every word of the task's lap, else the task
    /// fails), its output written to the output area (tagged words,
    /// relaxed), then its completion says so.
    fn run_io(&self, slot: usize, task: &DecodedSlot, seq: u64, input: usize, mut cqe: Cqe) -> Cqe {
        let tag = self.plan.geo.tag(seq);
        let (in_at, out_at) = self.plan.io_at(slot);
        let (most_in, most_out) = self.plan.io;
        let read = (input <= most_in)
            .then(|| {
                if task.plain {
                    // Behind the kernel's acquire fence: after the slot's
                    // (acquire) loads.
                    Some(crate::proto::io::read_plain(&self.h2d, in_at, input))
                } else {
                    crate::proto::io::read(&self.h2d, in_at, input, tag)
                }
            })
            .flatten();
        let mut output = Vec::new();
        match read {
            None => cqe.status = STATUS_BAD_ARGS,
            Some(bytes) if task.op == crate::layout::OP_COPY_IO => {
                let (len, key) = (task.args[0] as u32 as usize, (task.args[0] >> 32) as u8);
                if len > most_out {
                    cqe.status = STATUS_BAD_ARGS;
                } else {
                    output = (0..len)
                        .map(|i| bytes.get(i).copied().unwrap_or(0) ^ key)
                        .collect();
                    cqe.value = bytes.iter().map(|&b| u64::from(b)).sum();
                }
            }
            Some(_) => match op(task.op, &task.args) {
                Ok(v) => cqe.value = v,
                Err(status) => cqe.status = status,
            },
        }
        let lap = self.plan.geo.lap(seq);
        cqe.flags = crate::layout::CQE_OUTPUT;
        if crate::proto::slot::plain(output.len()) {
            self.plain[slot].store(seq | FLAG, Ordering::Relaxed);
            crate::proto::io::write_plain_output(&self.d2h, out_at, &output, lap);
            cqe.flags |= crate::layout::CQE_PLAIN;
        } else {
            crate::proto::io::write_output(&self.d2h, out_at, &output, lap);
        }
        cqe
    }

    /// Stepped use: polls with every poller that has not stopped, in turn,
    /// until all have (each stops at its next poll once told to).
    pub(crate) fn run_until_stopped(&self) {
        while !self.finished() {
            for w in 0..self.plan.workers {
                for j in 0..self.plan.pollers {
                    self.step(w, j);
                }
            }
        }
    }

    /// Runs every poller on a thread of its own until it stops.
    #[cfg(not(loom))]
    pub(crate) fn start_threads(self: &Arc<Self>) {
        let mut threads = self.threads.lock().unwrap();
        for w in 0..self.plan.workers {
            for j in 0..self.plan.pollers {
                let dev = self.clone();
                threads.push(std::thread::spawn(move || {
                    loop {
                        match dev.step(w, j) {
                            Step::Stopped => break,
                            Step::Idle => std::thread::yield_now(),
                            Step::Ran => {}
                        }
                    }
                }));
            }
        }
    }

    /// Waits for the threads of [`Self::start_threads`] to end (they end
    /// once told to stop); in stepped use, steps every poller until each
    /// has stopped.
    pub(crate) fn wait_stopped(&self) {
        #[cfg(not(loom))]
        {
            let threads = std::mem::take(&mut *self.threads.lock().unwrap());
            if !threads.is_empty() {
                for t in threads {
                    t.join().expect("a software poller panicked");
                }
                return;
            }
        }
        self.run_until_stopped();
    }
}

/// A single task of `op` with argument words `args`: its value, or the
/// status it fails with.
fn op(code: u16, args: &[u64; 6]) -> Result<u64, u8> {
    match code {
        OP_NOP => Ok(0),
        OP_ECHO => Ok(crate::builtin::echo_fold(args)),
        OP_SPIN if args[0] > SPIN_MAX_NS => Err(STATUS_BAD_ARGS),
        OP_SPIN => {
            std::thread::sleep(std::time::Duration::from_nanos(args[0]));
            Ok(args[0])
        }
        _ => Err(STATUS_UNKNOWN_OP),
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The copies protocol with the software device's multi-poller worker:
    //! every interleaving (loom) of a producer and a worker's pollers.
    use super::*;
    use crate::proto::queue::Refusal;
    use crate::proto::ring::Geometry;
    use crate::proto::slot::SlotImage;
    use loom::thread;

    #[test]
    fn loom_copy_zero_is_seen_before_the_others() {
        // Poller 1 runs two laps of a one-slot ring from its copy; poller
        // 0 then polls for the third lap in copy 0, which must hold the
        // second lap by then (not yet published, never corrupt): the
        // producer's stores to copy 0 come before its stores to copy 1.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(2);
        model.check(|| {
            let plan = Plan::new(Geometry::new(1).unwrap(), 1, 1, 2, 0, (0, 0));
            let (h2d, d2h) = (Words::heap(plan.h2d_len), Words::heap(plan.d2h_len));
            let queue = Arc::new(plan.queues(&h2d, &d2h).into_vec().remove(0));
            let dev = SoftDevice::new(plan, h2d, d2h);
            let q = queue.clone();
            let producer = thread::spawn(move || {
                for id in 0..2u64 {
                    let seq = loop {
                        match q.try_reserve() {
                            Ok(seq) => break seq,
                            Err(Refusal::Full) => thread::yield_now(),
                            Err(r) => unreachable!("{r:?}"),
                        }
                    };
                    q.publish(seq, &SlotImage::new(OP_NOP, &id.to_le_bytes()).unwrap());
                }
            });
            let d = dev.clone();
            let poller1 = thread::spawn(move || {
                let mut ran = 0;
                while ran < 2 {
                    match d.step(0, 1) {
                        Step::Ran => ran += 1,
                        Step::Idle => thread::yield_now(),
                        Step::Stopped => panic!("poller 1 stopped"),
                    }
                }
            });
            // Not after the producer's join, which would order its stores
            // before this poll whatever their order among themselves.
            poller1.join().unwrap();
            assert_eq!(dev.step(0, 0), Step::Idle, "copy 0 holds the second lap");
            producer.join().unwrap();
        });
    }
}
