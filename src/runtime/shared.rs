//! What a runtime and its tickets share: the rings, the control and state
//! words, the latched fault, liveness probes and stall checks, waiting, and
//! stopping (shutdown's drain and cancel).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::cuda::driver;
use crate::cuda::kernel::KernelState;
use crate::error::{Error, Result};
use crate::ops::typed::OpTable;
use crate::proto::layout::{
    CTRL_BYTES, CTRL_STOP, STATE_BITS, STOP_VALUE, WORKER_BAD_TAG, WORKER_RUNNING, WORKER_STOPPED,
};
use crate::proto::plan::Plan;
use crate::proto::queue::{Queue, Refusal};
use crate::proto::ring::seq_add;
use crate::proto::sync::now;
use crate::proto::words::Words;
use crate::runtime::LIVE;
use crate::runtime::engine::Engine;
use crate::runtime::liveness::{FAULT_CONFIRM, FaultVerdict, Liveness};
use crate::runtime::wait::WaitStrategy;

/// The settings a runtime's shared state keeps (from its `Builder`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) device: usize,
    pub(crate) probe_every: Duration,
    pub(crate) stall_after: Duration,
    pub(crate) stop_timeout: Duration,
    pub(crate) wait: WaitStrategy,
    pub(crate) completion_cpu: Option<usize>,
}

/// How long the kernel's stream may stay unqueryable before waiters give up.
const UNKNOWN_FOR: Duration = Duration::from_millis(200);
/// `Shared::stopping`: a shutdown (drain first) began.
const DRAIN: u8 = 1;
/// `Shared::stopping`: a cancel began (or cut a shutdown's drain short).
const CANCEL: u8 = 2;
/// `Shared::stopping`: a shutdown's drain ended (every task done, or out of
/// time): a cancel no longer changes what the shutdown said.
const DRAINED: u8 = 3;

/// Whether a poller state (without its position) is final (`STOPPED`,
/// `BAD_TAG`): the poller left its loop, after every other store of its to
/// mapped memory.
fn left(state: u64) -> bool {
    matches!(state, WORKER_STOPPED | WORKER_BAD_TAG)
}

/// What a wait watches for silence (see [`Error::Stalled`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Watch {
    Nothing,
    /// The worker of the task waited for.
    Worker(usize),
    /// The workers of the `n` slots a reservation on `ring` needs next
    /// (from its tail as of each check): a producer waiting for room.
    Reserving {
        ring: usize,
        n: usize,
    },
    AnyWorker,
}

/// What the runtime and its tickets share.
pub(crate) struct Shared {
    /// One per ring.
    pub(crate) queues: Box<[Queue]>,
    /// Host-written control line (the stop word; see pkq_layout.h).
    pub(crate) ctrl: Words,
    /// Device-written worker state words (see pkq_layout.h).
    pub(crate) states: Words,
    /// Device-written heartbeat words, one per poller (see pkq_layout.h).
    pub(crate) beats: Words,
    /// The kernel's op table (which ops it serves, with what arguments).
    pub(crate) ops: OpTable,
    /// Every ring's first sequence number (see `RingPtr::worker_of`).
    pub(crate) start_seq: u64,
    /// Why the kernel no longer serves, once known (a fault, or the end
    /// of a shutdown); every later wait reports it.
    fault: OnceLock<Error>,
    pub(crate) liveness: Liveness,
    /// The completion thread's registry of waiters (`runtime::wait`).
    pub(crate) reactor: crate::runtime::wait::reactor::Registry,
    /// The outcome of shutdown, once it ran.
    stopped: Mutex<Option<Result<()>>>,
    pub(crate) stop_timeout: Duration,
    pub(crate) device: usize,
    pub(crate) workers: usize,
    /// Each ring's workers less one (a power of two less one).
    pub(crate) ring_worker_mask: u64,
    /// Orphan shares: 1 (the runtime's own) until the runtime is dropped,
    /// then one more per task whose ticket or batch outlived it
    /// (`Queue::orphan`); the last given back frees this memory.
    pub(crate) orphans: crate::proto::sync::AtomicU64,
    /// The ring of the next [`Runtime::producer`](crate::Runtime::producer).
    pub(crate) next_producer: std::sync::atomic::AtomicUsize,
    /// What stop began, if any (`DRAIN`, `CANCEL`, `DRAINED`; 0: none yet).
    stopping: AtomicU8,
    /// The device side: the CUDA kernel, or the software device.
    pub(crate) engine: Engine,
    /// How the runtime's tickets and batches wait unless told otherwise.
    pub(crate) wait: WaitStrategy,
    /// The device memory states come from (`Runtime::state`), if any.
    pub(crate) state: Option<Arc<crate::runtime::state::StateArena>>,
    /// The CPU the completion thread is pinned to, if any.
    pub(crate) completion_cpu: Option<usize>,
}

impl Shared {
    /// The state of a runtime laid out by `plan` over `h2d` and `d2h`,
    /// served by `engine`, with `b`'s settings; counted in `live_runtimes`.
    pub(crate) fn new(
        b: Settings,
        plan: &Plan,
        [h2d, d2h]: [Words; 2],
        ops: OpTable,
        engine: Engine,
        state: Option<Arc<crate::runtime::state::StateArena>>,
    ) -> Arc<Self> {
        let [ctrl, states, beats] = plan.control(&h2d, &d2h);
        let shared = Arc::new(Shared {
            queues: plan.queues(&h2d, &d2h),
            ctrl,
            states,
            beats,
            ops,
            fault: OnceLock::new(),
            liveness: Liveness::new(b.probe_every, b.stall_after, plan.all_pollers()),
            reactor: Default::default(),
            wait: b.wait,
            start_seq: plan.start_seq,
            stopped: Mutex::new(None),
            stop_timeout: b.stop_timeout,
            device: b.device,
            workers: plan.workers,
            ring_worker_mask: (plan.workers / plan.rings) as u64 - 1,
            orphans: crate::proto::sync::AtomicU64::new(1),
            next_producer: std::sync::atomic::AtomicUsize::new(0),
            stopping: AtomicU8::new(0),
            engine,
            state,
            completion_cpu: b.completion_cpu,
        });
        LIVE.fetch_add(1, Ordering::Relaxed);
        shared
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// Whether shutdown began (every ring closes at once).
    pub(crate) fn is_closed(&self) -> bool {
        self.queues[0].is_closed()
    }

    /// [`Shared::check`] as a submit reports it: after shutdown the latched
    /// reason is "shut down", so say [`Error::Closed`].
    #[inline]
    pub(crate) fn check_open(&self) -> Result<()> {
        self.check()
            .map_err(|e| if self.is_closed() { Error::Closed } else { e })
    }

    /// Reserves with `try_once` (one slot, or a batch's run of `n` on
    /// `ring`); while the ring is full, waits for room if `wait` (a stall
    /// of a worker whose slot it needs ends the wait), else returns
    /// [`Error::Full`].
    #[inline]
    pub(crate) fn reserve(
        &self,
        ring: usize,
        n: usize,
        wait: bool,
        try_once: impl Fn() -> std::result::Result<u64, Refusal>,
    ) -> Result<u64> {
        match try_once() {
            Ok(seq) => Ok(seq),
            Err(Refusal::Full) if wait => {
                // SAFETY: a producer's runtime lives for the whole call.
                unsafe {
                    Self::wait_for(
                        NonNull::from(self),
                        None,
                        Watch::Reserving { ring, n },
                        WaitStrategy::SpinThenYield,
                        None,
                        None,
                        || match try_once() {
                            Ok(seq) => Some(Ok(seq)),
                            Err(Refusal::Full) => None,
                            Err(r) => Some(Err(r.into())),
                        },
                    )?
                }
            }
            Err(r) => Err(r.into()),
        }
    }

    /// Poller `w`'s state, without its position or phase.
    fn state(&self, w: usize) -> u64 {
        self.states.at(w).load(Ordering::Acquire) & ((1 << STATE_BITS) - 1)
    }

    /// The latched fault, if any.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        match self.fault.get() {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
    }

    /// Sets every poller's stop word: a release store each (the release
    /// orders nothing the device relies on: the word alone is the message),
    /// which the poller reads with one of its next slot polls.
    fn tell_stop(&self) {
        for line in 0..self.ctrl.len() / (CTRL_BYTES / 8) {
            self.ctrl
                .at(line * CTRL_BYTES / 8 + CTRL_STOP)
                .store(STOP_VALUE, Ordering::Release);
        }
    }

    /// What a kernel seen to have exited means for the tasks still
    /// pending: the cancel that stopped it ([`Error::Cancelled`], whoever
    /// sees the exit first: a probe or the cancel itself), a shutdown whose
    /// drain gave up, or an exit nobody asked for.
    fn exited(&self) -> Error {
        match self.stopping.load(Ordering::SeqCst) {
            CANCEL => Error::Cancelled,
            DRAIN | DRAINED => {
                Error::KernelStopped("the runtime was shut down and its kernel exited".into())
            }
            _ => Error::KernelStopped("it exited unexpectedly".into()),
        }
    }

    /// Latches `e` as why the runtime no longer serves, and tells the kernel
    /// to stop: after a fault is reported, no task starts (a waiter that
    /// gave up must not find its task running later).
    fn fail(&self, e: Error) -> Error {
        let _ = self.fault.set(e);
        self.tell_stop();
        self.fault.get().cloned().unwrap()
    }

    /// A caller's look at the runtime while its task is pending, which
    /// never blocks: a probe if one is due, then the latched fault.
    pub(crate) fn look(&self, now: Instant) -> Result<()> {
        self.probe_if_due(now).and_then(|()| self.check())
    }

    /// Probes liveness if a probe is due and no other thread is probing.
    pub(crate) fn probe_if_due(&self, now: Instant) -> Result<()> {
        let t = self.liveness.ns(now);
        if t < self.liveness.next_ns.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.probe_unless_busy(now).unwrap_or(Ok(()))
    }

    /// Probes now, and schedules the next probe one interval later, unless
    /// another thread is probing (then `None`).
    fn probe_unless_busy(&self, now: Instant) -> Option<Result<()>> {
        if self.liveness.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        let outcome = self.probe(now);
        let every = u64::try_from(self.liveness.every.as_nanos()).unwrap_or(u64::MAX);
        self.liveness.next_ns.store(
            self.liveness.ns(now).saturating_add(every),
            Ordering::Relaxed,
        );
        self.liveness.busy.store(false, Ordering::Release);
        Some(outcome)
    }

    /// What the kernel is, by its stream and by its own words. The driver
    /// reports a device fault on every context of the process, so a fault
    /// its stream reports is this kernel's only if its pollers stopped
    /// moving ([`Liveness::judge_fault`]); until that is known, and while
    /// they move on (another kernel faulted, and this one serves on: its
    /// hot path needs no driver call), it is running. A kernel every poller
    /// of which left its loop (state words) has exited, whatever the stream
    /// says, even one found dead before. Ends the engine ([`Engine::end`],
    /// [`Engine::exited`]) once it has ended, and then says how (the first end known, whichever
    /// thread found it).
    fn verdict(&self) -> KernelState {
        let state = self.engine.state();
        let KernelState::Faulted(e) = state else {
            return state;
        };
        if !self.engine.is_gone() && self.all_left() {
            return self.engine.exited();
        }
        if !self.engine.is_live() {
            // Found dead before: how it ended.
            return state;
        }
        let clock = || self.liveness.ns(now());
        match self.liveness.judge_fault(clock, || self.pollers_words()) {
            FaultVerdict::Undecided | FaultVerdict::Alive => KernelState::Running,
            FaultVerdict::Dead => self.engine.end(e),
        }
    }

    /// Whether every poller left its loop ([`left`]).
    fn all_left(&self) -> bool {
        (0..self.states.len()).all(|w| left(self.state(w)))
    }

    /// Every poller's heartbeat and state word, and whether one of them
    /// left its loop.
    fn pollers_words(&self) -> (Box<[u64]>, bool) {
        let n = self.states.len();
        let mut any_left = false;
        let mut words = Vec::with_capacity(2 * n);
        for p in 0..n {
            words.push(self.beats.at(p).load(Ordering::Acquire));
            let word = self.states.at(p).load(Ordering::Acquire);
            any_left |= left(word & ((1 << STATE_BITS) - 1));
            words.push(word);
        }
        (words.into_boxed_slice(), any_left)
    }

    /// Whether nothing of the kernel runs any more, for a borrowing call
    /// whose borrows end once it returns; the kernel no longer live (see
    /// [`Shared::wait_exit`]). One seen to exit does not run. One found dead
    /// by a fault may have been judged wrongly (every poller busy with a
    /// task past the 10 ms): it is watched until nothing of it has moved for
    /// the stall bound (or the stop timeout, if shorter; 10 ms at least, and
    /// 10 ms where neither bounds it), or until it exits (its pollers were
    /// told to stop); one that moves and has not exited by `deadline` (none:
    /// no limit) runs on: `false`.
    pub(crate) fn at_rest(&self, deadline: Option<Instant>) -> bool {
        if self.engine.is_gone() {
            return true;
        }
        let bound = self.liveness.stall_after.min(self.stop_timeout);
        let window = if bound == Duration::MAX {
            FAULT_CONFIRM
        } else {
            bound.max(FAULT_CONFIRM)
        };
        let start = now();
        let (mut words, _) = self.pollers_words();
        let mut moved = false;
        loop {
            // Notes an exit (every poller left).
            let _ = self.verdict();
            if self.engine.is_gone() {
                return true;
            }
            let t = now();
            let (w, _) = self.pollers_words();
            if w != words {
                moved = true;
                words = w;
            }
            if !moved && t.saturating_duration_since(start) >= window {
                return true;
            }
            if moved && deadline.is_some_and(|d| t >= d) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Waits until the kernel has ended (`Ok`; by a fault,
    /// [`Error::DeviceFault`]) or `deadline` (none: no limit;
    /// [`Error::KernelTimeout`]), as [`Shared::verdict`] judges it.
    pub(crate) fn wait_exit(&self, deadline: Option<Instant>) -> Result<()> {
        self.engine.wait_finished(deadline, || self.verdict())
    }

    /// Asks whether the kernel still serves ([`Shared::verdict`], and a look
    /// at the worker state words); latches what ended it.
    fn probe(&self, now: Instant) -> Result<()> {
        self.check()?;
        let state = self.verdict();
        if !matches!(state, KernelState::Unknown(..)) {
            self.liveness.unknown_since_ns.store(0, Ordering::Relaxed);
        }
        match state {
            KernelState::Running => {
                // Stamped after the stream query, which may have waited.
                self.read_heartbeats(self.liveness.ns(crate::proto::sync::now()));
                for w in 0..self.states.len() {
                    if self.state(w) == WORKER_BAD_TAG {
                        return Err(self.fail(Error::KernelStopped(format!(
                            "poller warp {w} found a slot with a corrupt tag and stopped"
                        ))));
                    }
                }
                Ok(())
            }
            KernelState::Finished => Err(self.fail(self.exited())),
            KernelState::Faulted(e) => Err(self.fail(Error::DeviceFault(driver::error_name(e)))),
            KernelState::Unknown(call, e) => {
                let t = self.liveness.ns(now);
                let since = match self.liveness.unknown_since_ns.load(Ordering::Relaxed) {
                    0 => {
                        self.liveness.unknown_since_ns.store(t, Ordering::Relaxed);
                        t
                    }
                    since => since,
                };
                if Duration::from_nanos(t.saturating_sub(since)) < UNKNOWN_FOR {
                    return Ok(());
                }
                Err(self.fail(Error::KernelStopped(format!(
                    "its stream could not be queried for {UNKNOWN_FOR:?} ({call}: {})",
                    driver::error_name(e)
                ))))
            }
        }
    }

    /// Reads every heartbeat word and notes when each was first seen with
    /// its current value (only the probing thread calls this).
    fn read_heartbeats(&self, t: u64) {
        self.liveness
            .record_beats(t, |p| self.beats.at(p).load(Ordering::Acquire));
    }

    /// How long worker `w`'s most silent poller had shown the same
    /// heartbeat, as of the last probe if that probe is recent at `now_ns`
    /// ([`Liveness::silence`](super::liveness::Liveness::silence)).
    fn silence(&self, w: usize, now_ns: u64) -> Duration {
        let per = self.beats.len() / self.workers;
        self.liveness.silence(w * per..(w + 1) * per, now_ns)
    }

    /// [`Error::Stalled`] if a watched worker has been silent past the bound
    /// (as a recent probe saw it).
    pub(crate) fn check_stall(&self, watch: Watch) -> Result<()> {
        let now_ns = self.liveness.ns(now());
        match watch {
            Watch::Nothing => Ok(()),
            Watch::Worker(w) => self.check_worker_stall(w, now_ns),
            Watch::Reserving { ring, n } => {
                // The workers of the `n` sequence numbers from the tail (past
                // the ring's workers, they come round again).
                let tail = self.queues[ring].tail_hint();
                let ring_workers = self.ring_worker_mask as usize + 1;
                (0..n.min(ring_workers) as u64).try_for_each(|i| {
                    self.check_worker_stall(self.worker_of(ring, seq_add(tail, i)), now_ns)
                })
            }
            Watch::AnyWorker => {
                (0..self.workers).try_for_each(|w| self.check_worker_stall(w, now_ns))
            }
        }
    }

    /// The worker that serves sequence number `seq` of ring `ring` (see
    /// WorkerSlots in `cuda/pkq_worker.cuh`).
    #[inline]
    pub(crate) fn worker_of(&self, ring: usize, seq: u64) -> usize {
        let in_ring = (seq.wrapping_sub(self.start_seq) & self.ring_worker_mask) as usize;
        ring + self.queues.len() * in_ring
    }

    /// [`Error::Stalled`] if `worker` has been silent past the bound.
    fn check_worker_stall(&self, worker: usize, now_ns: u64) -> Result<()> {
        let silent = self.silence(worker, now_ns);
        if silent > self.liveness.stall_after {
            return Err(Error::Stalled { worker, silent });
        }
        Ok(())
    }

    /// Probes now (unless another thread is probing) and reports the first
    /// problem: a latched fault or stop, or a stalled worker.
    pub(crate) fn health(&self) -> Result<()> {
        // A probe of its own (another thread's under way: the next), and a
        // fault the driver reports, not yet judged, looked at again until it
        // is (within FAULT_CONFIRM of the first look: twice that bounds the
        // wait), so that a dead kernel is not reported healthy.
        let until = now() + 2 * FAULT_CONFIRM;
        loop {
            let probed = self.probe_unless_busy(now());
            let looked = probed.is_some();
            if let Some(outcome) = probed {
                outcome?;
            }
            let settled = looked && (self.check().is_err() || !self.liveness.fault_undecided());
            if settled || now() >= until {
                break;
            }
            std::thread::sleep(
                Duration::from_millis(1).min(until.saturating_duration_since(now())),
            );
        }
        self.check()?;
        self.check_stall(Watch::AnyWorker)
    }

    /// Waits until every poller reported in, or `deadline` (none: no limit).
    pub(crate) fn await_workers(&self, deadline: Option<Instant>) -> Result<()> {
        loop {
            let running = (0..self.states.len()).all(|w| self.state(w) == WORKER_RUNNING);
            if running {
                return Ok(());
            }
            self.probe(now())?;
            if deadline.is_some_and(|d| now() >= d) {
                let _ = self.stop(false);
                return Err(Error::KernelTimeout(
                    "start in time (not all workers reported in)",
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Begins a shutdown: said (for `exited`) before anything closes, then
    /// no task is taken any more; a cancel said first stays. Nothing waits.
    pub(crate) fn announce_shutdown(&self) {
        let _ = self
            .stopping
            .compare_exchange(0, DRAIN, Ordering::SeqCst, Ordering::SeqCst);
        self.close_rings();
    }

    /// Closes every ring (once; later calls change nothing) and returns
    /// each ring's end: the sequence number after its last task.
    fn close_rings(&self) -> Vec<u64> {
        self.queues.iter().map(Queue::close).collect()
    }

    /// Begins a cancel, which stops now, a shutdown's drain under way too
    /// (not one that ended: what that shutdown said stays): said, no task
    /// taken any more, and told to the kernel. Nothing waits.
    pub(crate) fn announce_cancel(&self) {
        let first = self
            .stopping
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                matches!(s, 0 | DRAIN).then_some(CANCEL)
            })
            .is_ok();
        if first {
            self.close_rings();
            self.tell_stop();
        }
    }

    /// Close, drain (if `drain`), stop the kernel, wait for it; without the
    /// drain, or with one a cancel cut short, latch [`Error::Cancelled`]
    /// for the tasks left. Runs once; later calls return the first outcome.
    /// A cancel is announced before the lock a shutdown's drain holds.
    pub(crate) fn stop(&self, drain: bool) -> Result<()> {
        if drain {
            self.announce_shutdown();
        } else {
            self.announce_cancel();
        }
        let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(outcome) = &*stopped {
            return outcome.clone();
        }
        let cancelled = || self.stopping.load(Ordering::SeqCst) == CANCEL;
        // Closed already (the announcement): the ends of the rings.
        let ends = self.close_rings();
        // A timeout too long to add to now has no deadline.
        let drained = if !cancelled() {
            let deadline = now().checked_add(self.stop_timeout);
            // SAFETY: the runtime's own stop: alive for the whole call.
            unsafe {
                Self::wait_for(
                    NonNull::from(self),
                    deadline,
                    Watch::Nothing,
                    WaitStrategy::SpinThenYield,
                    None,
                    None,
                    || {
                        let mut rings = self.queues.iter().zip(&ends);
                        let done = rings.all(|(q, &end)| q.incomplete(end) == 0);
                        (done || cancelled()).then_some(())
                    },
                )
            }
        } else {
            Ok(())
        };
        // The drain is over: from here on a cancel changes nothing. A
        // cancel, or a drain one cut short (whatever the drain's wait saw of
        // the kernel stopping for it), is a cancel.
        let cancelled = self
            .stopping
            .compare_exchange(DRAIN, DRAINED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err();
        self.tell_stop();
        let exited = self.wait_exit(now().checked_add(self.stop_timeout));
        let drained = match drained {
            Err(Error::Cancelled) if cancelled => Ok(()),
            Err(Error::Timeout) => Err(Error::KernelTimeout("drain its tasks in time")),
            d => d,
        };
        if exited.is_ok() && (cancelled || drained.is_err()) {
            // No completion can come any more: pending tickets (and the
            // callbacks a drop's last look fires) resolve with why.
            self.fail(if cancelled {
                Error::Cancelled
            } else {
                self.exited()
            });
        }
        let outcome = match (drained, exited) {
            (Ok(()), Ok(())) => Ok(()),
            // The drain ended because the kernel already stopped: report why.
            (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        };
        *stopped = Some(outcome.clone());
        outcome
    }
}
