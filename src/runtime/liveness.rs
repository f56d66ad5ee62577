//! Liveness: the shared schedule of probes of the kernel, the heartbeats
//! that tell a stalled worker, and whether a fault the driver reports is
//! the kernel's own.

use std::time::{Duration, Instant};

use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, lock, now};

/// What a wait watches for silence (see [`Error::Stalled`](crate::Error::Stalled)).
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

/// The shared schedule of liveness probes: at most one waiter asks the
/// driver at a time, once per interval; the others go on polling.
pub(crate) struct Liveness {
    pub(crate) epoch: Instant,
    pub(crate) every: Duration,
    /// Nanoseconds after `epoch` when the next probe is due.
    pub(crate) next_ns: AtomicU64,
    pub(crate) busy: AtomicBool,
    /// Nanoseconds after `epoch` since the stream could not be queried (0: it could).
    pub(crate) unknown_since_ns: AtomicU64,
    /// A worker one of whose pollers' heartbeat stayed the same this long
    /// is stalled (its pollers beat while they poll, never while running a
    /// task).
    pub(crate) stall_after: Duration,
    /// Per poller: the heartbeat word as the last probe read it, and when
    /// (ns after `epoch`) a probe first saw that value. Written only by the
    /// probing thread (`busy`), read by any waiter.
    pub(crate) beat_seen: Box<[AtomicU64]>,
    pub(crate) beat_since_ns: Box<[AtomicU64]>,
    /// When (ns after `epoch`) the last probe finished reading the
    /// heartbeats: silences are measured up to it, never up to "now", so a
    /// waiter that finds another thread probing (or no probe for a long
    /// while) cannot mistake the time since the last probe for silence.
    /// Stored with release after the per-poller words, loaded with acquire
    /// before them.
    pub(crate) probed_ns: AtomicU64,
    /// A fault the driver reported, as first seen (see
    /// [`Liveness::judge_fault`]).
    fault_seen: Mutex<Option<FaultSeen>>,
}

/// How long after a runtime first looked at a fault the driver reports a
/// kernel may go without any poller moving (beating, or leaving its loop)
/// before it is taken to be the kernel that faulted. A poller that is not
/// running a task beats at least every 2 ms while the GPU runs it (every
/// `PKQ_HEARTBEAT_CYCLES` as it polls, and every poll as it sleeps under
/// `IdlePolicy::Backoff`: a sleep of at most 1 ms asked, which
/// `__nanosleep` may double), so a live kernel with one such poller moves
/// well within it.
pub(crate) const FAULT_CONFIRM: Duration = Duration::from_millis(10);

/// A fault the driver reported: the pollers' words (heartbeats and state
/// words) as last noted, when they were (ns after `epoch`, read after
/// them), when the latest look was, and whether the kernel is known to
/// have lived since the fault was first looked at.
struct FaultSeen {
    since_ns: u64,
    last_ns: u64,
    words: Box<[u64]>,
    alive: bool,
}

/// Whose a fault the driver reports is ([`Liveness::judge_fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultVerdict {
    /// Not yet known: nothing has moved since the first look (or since a
    /// look that came long after the one before), for less than
    /// [`FAULT_CONFIRM`].
    Undecided,
    /// The kernel lives: its words moved between two looks less than
    /// [`FAULT_CONFIRM`] apart, or a poller had left its loop (which a
    /// faulted kernel never stores), the latest move less than the stall
    /// bound ago. The fault is another kernel's (the driver reports a fault
    /// on every context of the process), or not yet shown.
    Alive,
    /// Nothing moved for [`FAULT_CONFIRM`] after the first look, or, for a
    /// kernel known to have lived, for the stall bound (at least
    /// [`FAULT_CONFIRM`]): taken to be a kernel that faulted.
    Dead,
}

impl Liveness {
    pub(crate) fn new(every: Duration, stall_after: Duration, pollers: usize) -> Self {
        let zeros = || (0..pollers).map(|_| AtomicU64::new(0)).collect();
        Self {
            epoch: now(),
            every,
            next_ns: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            unknown_since_ns: AtomicU64::new(0),
            stall_after,
            beat_seen: zeros(),
            beat_since_ns: zeros(),
            probed_ns: AtomicU64::new(0),
            fault_seen: Mutex::new(None),
        }
    }

    /// Judges a fault the driver reports, from the pollers' words read by
    /// `words` (every heartbeat and state word, and whether a state says a
    /// poller left its loop) between two readings of `clock` (ns after
    /// `epoch`), so that silence is never overstated: the first look notes
    /// them as of the reading after; a look that finds them moved notes them
    /// again, and says [`FaultVerdict::Alive`] if the look before was less
    /// than [`FAULT_CONFIRM`] earlier (else the move may be old: it starts
    /// afresh, as a first look); a look that finds nothing moved since the
    /// last note, as of the reading before, for [`FAULT_CONFIRM`], or for
    /// the stall bound if the kernel is known to have lived, says
    /// [`FaultVerdict::Dead`]. A poller that left its loop shows the kernel
    /// lived (a faulted kernel's never store it). Any thread may call it;
    /// the looks are taken one at a time.
    pub(crate) fn judge_fault(
        &self,
        clock: impl Fn() -> u64,
        words: impl Fn() -> (Box<[u64]>, bool),
    ) -> FaultVerdict {
        let mut seen = lock(&self.fault_seen);
        let before = clock();
        let (now, left) = words();
        let after = clock();
        let confirm = u64::try_from(FAULT_CONFIRM.as_nanos()).unwrap_or(u64::MAX);
        let noted = |alive| FaultSeen {
            since_ns: after,
            last_ns: after,
            words: now.clone(),
            alive,
        };
        match &mut *seen {
            Some(f) if f.words == now => f.last_ns = after,
            // Moved: alive if the look before was recent enough for the move
            // to be since the fault (a dead kernel's last beats came before
            // it), else judged afresh.
            Some(f) => {
                let recent = before.saturating_sub(f.last_ns) < confirm;
                *f = noted(recent || left);
            }
            None => *seen = Some(noted(left)),
        }
        // (A note just taken is since `after`: no silence yet.)
        let Some(f) = &*seen else {
            return FaultVerdict::Undecided;
        };
        let bound = if f.alive {
            self.stall_after.max(FAULT_CONFIRM)
        } else {
            FAULT_CONFIRM
        };
        match (
            Duration::from_nanos(before.saturating_sub(f.since_ns)) < bound,
            f.alive,
        ) {
            (true, true) => FaultVerdict::Alive,
            (true, false) => FaultVerdict::Undecided,
            (false, _) => FaultVerdict::Dead,
        }
    }

    /// Whether a fault the driver reported has been looked at but not yet
    /// judged either way.
    pub(crate) fn fault_undecided(&self) -> bool {
        matches!(
            &*lock(&self.fault_seen),
            Some(f) if !f.alive
        )
    }

    pub(crate) fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
            + 1
    }

    /// Notes the heartbeat words `beat(p)` read at `t` (ns after `epoch`):
    /// when each was first seen with its value. Only the probing thread
    /// (`busy`) calls this.
    pub(crate) fn record_beats(&self, t: u64, beat: impl Fn(usize) -> u64) {
        for p in 0..self.beat_seen.len() {
            let v = beat(p);
            if v != self.beat_seen[p].load(Ordering::Relaxed)
                || self.beat_since_ns[p].load(Ordering::Relaxed) == 0
            {
                self.beat_seen[p].store(v, Ordering::Relaxed);
                self.beat_since_ns[p].store(t, Ordering::Relaxed);
            }
        }
        self.probed_ns.store(t, Ordering::Release);
    }

    /// How long the most silent poller in `pollers` had shown the same
    /// heartbeat as of the last probe (zero before the first): a worker runs
    /// one task at a time, and only the poller running it stops beating.
    /// Zero too when that probe is old at `now_ns` (more than two probe
    /// intervals, and at least 2 ms): it says nothing of a worker that may
    /// have recovered since, and the next probe (due, or under way on
    /// another thread) reads the heartbeats afresh.
    pub(crate) fn silence(&self, pollers: std::ops::Range<usize>, now_ns: u64) -> Duration {
        let probed = self.probed_ns.load(Ordering::Acquire);
        let every = u64::try_from(self.every.as_nanos()).unwrap_or(u64::MAX);
        if now_ns.saturating_sub(probed) > every.saturating_mul(2).max(2_000_000) {
            return Duration::ZERO;
        }
        pollers
            .map(|p| match self.beat_since_ns[p].load(Ordering::Relaxed) {
                0 => Duration::ZERO,
                since => Duration::from_nanos(probed.saturating_sub(since)),
            })
            .max()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every poller's words, none of them a final state.
    fn running(w: &[u64]) -> impl Fn() -> (Box<[u64]>, bool) + '_ {
        move || (w.into(), false)
    }

    /// The driver reports a device fault on every context of the process
    /// (two GPUs: a trap on one, and every call on the other returned it
    /// while its kernels ran on): a runtime whose pollers beat on is alive,
    /// one whose pollers stay silent is the one that faulted, and one alive
    /// once that then goes silent for the stall bound has faulted since.
    #[test]
    fn a_fault_is_the_kernels_own_only_if_its_heartbeats_stop() {
        let ms = 1_000_000;
        let at = |t: u64| move || t;
        let l = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 2);
        assert_eq!(
            l.judge_fault(at(5 * ms), running(&[7, 9])),
            FaultVerdict::Undecided
        );
        assert!(l.fault_undecided());
        assert_eq!(
            l.judge_fault(at(6 * ms), running(&[7, 9])),
            FaultVerdict::Undecided
        );
        // One poller beat (the other may run a task): alive.
        assert_eq!(
            l.judge_fault(at(7 * ms), running(&[7, 10])),
            FaultVerdict::Alive
        );
        assert!(!l.fault_undecided());
        assert_eq!(
            l.judge_fault(at(8 * ms), running(&[7, 10])),
            FaultVerdict::Alive
        );
        assert_eq!(
            l.judge_fault(at(900 * ms), running(&[7, 10])),
            FaultVerdict::Alive
        );
        // Silent for the stall bound since: its own fault, later.
        assert_eq!(
            l.judge_fault(at(1_007 * ms), running(&[7, 10])),
            FaultVerdict::Dead
        );

        let dead = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 2);
        assert_eq!(
            dead.judge_fault(at(5 * ms), running(&[3, 3])),
            FaultVerdict::Undecided
        );
        let confirm = u64::try_from(FAULT_CONFIRM.as_nanos()).unwrap();
        assert_eq!(
            dead.judge_fault(at(5 * ms + confirm - 1), running(&[3, 3])),
            FaultVerdict::Undecided
        );
        assert_eq!(
            dead.judge_fault(at(5 * ms + confirm), running(&[3, 3])),
            FaultVerdict::Dead
        );
        // A look long after the first, with no look between, decides the same.
        let late = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 1);
        late.judge_fault(at(ms), running(&[3]));
        assert_eq!(
            late.judge_fault(at(60_000 * ms), running(&[3])),
            FaultVerdict::Dead
        );
    }

    /// A move seen long after the look before may be the dead kernel's
    /// last beat, from before its fault: it is judged afresh (a kernel that
    /// faulted while nobody looked is not called alive).
    #[test]
    fn a_move_seen_long_after_the_last_look_is_judged_afresh() {
        let ms = 1_000_000;
        let at = |t: u64| move || t;
        let l = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 1);
        assert_eq!(l.judge_fault(at(0), running(&[3])), FaultVerdict::Undecided);
        assert_eq!(l.judge_fault(at(ms), running(&[4])), FaultVerdict::Alive);
        assert_eq!(
            l.judge_fault(at(100_000 * ms), running(&[5])),
            FaultVerdict::Undecided
        );
        assert!(l.fault_undecided());
        assert_eq!(
            l.judge_fault(at(100_010 * ms), running(&[5])),
            FaultVerdict::Dead
        );
        // Alive again, if it moves once more soon after.
        let woke = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 1);
        woke.judge_fault(at(ms), running(&[3]));
        assert_eq!(
            woke.judge_fault(at(60_000 * ms), running(&[4])),
            FaultVerdict::Undecided
        );
        assert_eq!(
            woke.judge_fault(at(60_001 * ms), running(&[5])),
            FaultVerdict::Alive
        );
        assert_eq!(
            woke.judge_fault(at(61_000 * ms), running(&[5])),
            FaultVerdict::Alive
        );
    }

    /// A poller that left its loop (a stop it was told: a cancel) shows the
    /// kernel ran after the fault was reported, so its other pollers, busy
    /// with a task, have the stall bound to move, not 10 ms.
    #[test]
    fn a_poller_that_left_shows_the_kernel_lived() {
        let ms = 1_000_000;
        let at = |t: u64| move || t;
        let l = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 2);
        let left = || (vec![3u64, 4, 2, 1].into_boxed_slice(), true);
        assert_eq!(l.judge_fault(at(0), left), FaultVerdict::Alive);
        assert_eq!(l.judge_fault(at(30 * ms), left), FaultVerdict::Alive);
        assert_eq!(l.judge_fault(at(1_000 * ms), left), FaultVerdict::Dead);
    }

    /// Silence is measured from after the first look's words were read to
    /// before the next look's: a first look held up while it read them (the
    /// thread preempted) does not shorten what the next one must see.
    #[test]
    fn a_late_first_look_does_not_shorten_the_silence() {
        let ms = 1_000_000;
        let l = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 1);
        let t = std::cell::Cell::new(0);
        // The first look reads the clock at 0, the words, the clock at 9 ms.
        let first = [0, 9 * ms];
        let clock = || {
            let i = t.get();
            t.set(i + 1);
            first[i]
        };
        assert_eq!(l.judge_fault(clock, running(&[3])), FaultVerdict::Undecided);
        let at = |t: u64| move || t;
        assert_eq!(
            l.judge_fault(at(10 * ms), running(&[3])),
            FaultVerdict::Undecided
        );
        assert_eq!(
            l.judge_fault(at(19 * ms), running(&[3])),
            FaultVerdict::Dead
        );
    }

    /// Silence ends at the last probe: a waiter that finds another thread
    /// probing does not measure silence up to "now" from heartbeats a probe
    /// read long before (a false stall).
    #[test]
    fn silence_is_measured_up_to_the_last_probe() {
        let l = Liveness::new(Duration::from_millis(1), Duration::from_secs(1), 2);
        let ms = 1_000_000;
        assert_eq!(l.silence(0..2, ms), Duration::ZERO);
        l.record_beats(5 * ms, |p| [100, 200][p]);
        // No probe for a long while: nothing looks silent.
        assert_eq!(l.silence(0..2, 5 * ms), Duration::ZERO);
        // Both beat by the next probe; by the one after, only poller 0.
        l.record_beats(200_000 * ms, |p| [101, 201][p]);
        l.record_beats(200_500 * ms, |p| [102, 201][p]);
        let now = 200_500 * ms;
        assert_eq!(l.silence(0..1, now), Duration::ZERO);
        assert_eq!(l.silence(1..2, now), Duration::from_millis(500));
        // A worker is as silent as its most silent poller.
        assert_eq!(l.silence(0..2, now), Duration::from_millis(500));
        // Silence runs from the probe that first saw a value to the latest.
        l.record_beats(202_000 * ms, |p| [102, 201][p]);
        let now = 202_000 * ms;
        assert_eq!(l.silence(0..1, now), Duration::from_millis(1500));
        assert_eq!(l.silence(0..2, now), Duration::from_millis(2000));
        // An old record (past two intervals and 2 ms) says nothing of now:
        // the worker may have recovered since.
        assert_eq!(l.silence(0..2, now + 2 * ms), Duration::from_millis(2000));
        assert_eq!(l.silence(0..2, now + 2 * ms + 1), Duration::ZERO);
        let slow = Liveness::new(Duration::from_millis(10), Duration::from_secs(1), 1);
        slow.record_beats(ms, |_| 7);
        slow.record_beats(100 * ms, |_| 7);
        assert_eq!(slow.silence(0..1, 120 * ms), Duration::from_millis(99));
        assert_eq!(slow.silence(0..1, 120 * ms + 1), Duration::ZERO);
    }
}
