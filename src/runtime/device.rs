//! The device side of a lane as the host sees it: the control words it
//! writes (the stop word), the state and heartbeat words the pollers write,
//! what serves the rings (`Engine`), the liveness schedule, and the fault
//! or stop latched once the kernel no longer serves. The verdict on a fault
//! the driver reports is `docs/design/fault-verdict.md`.

use std::time::Duration;

use crate::cuda::kernel::KernelState;
use crate::error::{Error, Result};
use crate::layout::{
    CTRL_BYTES, CTRL_STOP, STATE_BITS, STOP_VALUE, WORKER_BAD_TAG, WORKER_RUNNING, WORKER_STOPPED,
};
use crate::proto::words::Words;
use crate::runtime::engine::Engine;
use crate::runtime::liveness::{FAULT_CONFIRM, FaultVerdict, Liveness};
use crate::sync::{OnceLock, Ordering, now};

/// Whether a poller state (without its position) is final (`STOPPED`,
/// `BAD_TAG`): the poller left its loop, after every other store of its to
/// mapped memory.
fn left(state: u64) -> bool {
    matches!(state, WORKER_STOPPED | WORKER_BAD_TAG)
}

/// The device side of one lane.
pub(crate) struct Device {
    /// Host-written control line (the stop word; see pkq_layout.h).
    ctrl: Words,
    /// Device-written worker state words (see pkq_layout.h).
    states: Words,
    /// Device-written heartbeat words, one per poller (see pkq_layout.h).
    beats: Words,
    /// The kernel's worker warps.
    workers: usize,
    /// The device side: the CUDA kernel, or the software device.
    pub(crate) engine: Engine,
    pub(crate) liveness: Liveness,
    /// Why the kernel no longer serves, once known (a fault, or the end
    /// of a shutdown); every later wait reports it.
    fault: OnceLock<Error>,
}

impl Device {
    /// The device side over the control, state and heartbeat words, served
    /// by `engine`.
    pub(crate) fn new(
        [ctrl, states, beats]: [Words; 3],
        workers: usize,
        engine: Engine,
        liveness: Liveness,
    ) -> Self {
        Self {
            ctrl,
            states,
            beats,
            workers,
            engine,
            liveness,
            fault: OnceLock::new(),
        }
    }

    /// The kernel's workers.
    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    /// Every poller's state word, whole (state and position).
    pub(crate) fn state_word(&self, p: usize) -> u64 {
        self.states.at(p).load(Ordering::Acquire)
    }

    /// How many pollers.
    pub(crate) fn pollers(&self) -> usize {
        self.states.len()
    }

    /// Poller `p`'s state, without its position or phase.
    fn state(&self, p: usize) -> u64 {
        self.state_word(p) & ((1 << STATE_BITS) - 1)
    }

    /// Whether every poller reported in (its state word says it runs).
    pub(crate) fn all_running(&self) -> bool {
        (0..self.pollers()).all(|p| self.state(p) == WORKER_RUNNING)
    }

    /// The first poller that found a slot with a corrupt tag and stopped.
    pub(crate) fn bad_tag(&self) -> Option<usize> {
        (0..self.pollers()).find(|&p| self.state(p) == WORKER_BAD_TAG)
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
    pub(crate) fn tell_stop(&self) {
        for line in 0..self.ctrl.len() / (CTRL_BYTES / 8) {
            self.ctrl
                .at(line * CTRL_BYTES / 8 + CTRL_STOP)
                .store(STOP_VALUE, Ordering::Release);
        }
    }

    /// Latches `e` as why the lane no longer serves, and tells the kernel
    /// to stop: after a fault is reported, no task starts (a waiter that
    /// gave up must not find its task running later). Returns what is
    /// latched (an earlier latch stays).
    pub(crate) fn fail(&self, e: Error) -> Error {
        let _ = self.fault.set(e);
        self.tell_stop();
        self.fault.get().cloned().expect("set above")
    }

    /// What the kernel is, by its stream and by its own words. The driver
    /// reports a device fault on every context of the process, so a fault
    /// its stream reports is this kernel's only if its pollers stopped
    /// moving ([`Liveness::judge_fault`]); until that is known, and while
    /// they move on (another kernel faulted, and this one serves on: its
    /// hot path needs no driver call), it is running. A kernel every poller
    /// of which left its loop (state words) has exited, whatever the stream
    /// says, even one found dead before. Ends the engine ([`Engine::end`],
    /// [`Engine::exited`]) once it has ended, and then says how (the first
    /// end known, whichever thread found it).
    pub(crate) fn verdict(&self) -> KernelState {
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
        (0..self.pollers()).all(|p| left(self.state(p)))
    }

    /// Every poller's heartbeat and state word, and whether one of them
    /// left its loop.
    fn pollers_words(&self) -> (Box<[u64]>, bool) {
        let n = self.pollers();
        let mut any_left = false;
        let mut words = Vec::with_capacity(2 * n);
        for p in 0..n {
            words.push(self.beats.at(p).load(Ordering::Acquire));
            let word = self.state_word(p);
            any_left |= left(word & ((1 << STATE_BITS) - 1));
            words.push(word);
        }
        (words.into_boxed_slice(), any_left)
    }

    /// Whether nothing of the kernel runs any more, for a borrowing call
    /// whose borrows end once it returns; the kernel no longer live (see
    /// [`Device::wait_exit`]). One seen to exit does not run. One found
    /// dead by a fault may have been judged wrongly (every poller busy with
    /// a task past the 10 ms): it is watched until nothing of it has moved
    /// for the stall bound (or `stop_timeout`, if shorter; 10 ms at least,
    /// and 10 ms where neither bounds it), or until it exits (its pollers
    /// were told to stop); one that moves and has not exited by `deadline`
    /// (none: no limit) runs on: `false`.
    pub(crate) fn at_rest(
        &self,
        stop_timeout: Duration,
        deadline: Option<std::time::Instant>,
    ) -> bool {
        if self.engine.is_gone() {
            return true;
        }
        let bound = self.liveness.stall_after.min(stop_timeout);
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
            crate::sync::sleep(Duration::from_micros(100));
        }
    }

    /// Waits until the kernel has ended (`Ok`; by a fault,
    /// [`Error::DeviceFault`]) or `deadline` (none: no limit;
    /// [`Error::KernelTimeout`]), as [`Device::verdict`] judges it.
    pub(crate) fn wait_exit(&self, deadline: Option<std::time::Instant>) -> Result<()> {
        self.engine.wait_finished(deadline, || self.verdict())
    }

    /// Reads every heartbeat word and notes when each was first seen with
    /// its current value (only the probing thread calls this).
    pub(crate) fn read_heartbeats(&self, t: u64) {
        self.liveness
            .record_beats(t, |p| self.beats.at(p).load(Ordering::Acquire));
    }

    /// [`Error::Stalled`] if `worker` has been silent past the bound: its
    /// most silent poller had shown the same heartbeat that long, as of the
    /// last probe if that probe is recent at `now_ns`
    /// ([`Liveness::silence`]).
    pub(crate) fn check_worker_stall(&self, worker: usize, now_ns: u64) -> Result<()> {
        let per = self.beats.len() / self.workers;
        let silent = self
            .liveness
            .silence(worker * per..(worker + 1) * per, now_ns);
        if silent > self.liveness.stall_after {
            return Err(Error::Stalled { worker, silent });
        }
        Ok(())
    }
}
