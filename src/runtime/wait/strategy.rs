//! How a thread waits for a task's completion ([`WaitStrategy`]), and what
//! one wait resolves it to on this machine.

use std::time::Duration;

use crate::runtime::wait::monitor;

/// How a thread waits for a task's completion.
///
/// Set per runtime with [`Builder::wait_strategy`](crate::Builder::wait_strategy) (default
/// [`WaitStrategy::SpinThenYield`]), and per ticket or batch with
/// [`Ticket::with_wait`](crate::Ticket::with_wait) and
/// [`Batch::with_wait`](crate::Batch::with_wait). Every strategy keeps the
/// same guarantees: a device fault, a stop, a cancel or a stalled worker
/// ends the wait with its error, and a deadline
/// ([`Ticket::wait_timeout`](crate::Ticket::wait_timeout)) is kept.
/// What each costs is measured by `pkq-bench`'s `waiting` (the README's
/// "How to wait"; `docs/design/waiting.md`).
///
/// Only waits for results use the strategy; a producer waiting for room in
/// a full ring, and the drain of [`Runtime::shutdown`](crate::Runtime::shutdown)
/// and of a runtime's drop, spin, then yield.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WaitStrategy {
    /// Polls the completion without pause: the lowest latency, and a whole
    /// core for as long as the thread waits.
    Spin,
    /// Polls without pause for 200 µs, then, between rounds of 64 polls,
    /// backs off: a few rounds of spin-loop
    /// hints, then a yield of the CPU (`sched_yield`) per round. The latency
    /// of `Spin` for short tasks; on a machine with idle cores, still a
    /// whole core while it waits.
    #[default]
    SpinThenYield,
    /// Polls 64 times (a spin-loop hint between polls), then sleeps
    /// until the lane's completion thread wakes it (and looks by itself
    /// at least every 50 ms, a bound that no healthy wake-up needs). That
    /// thread (one per lane, started by the first wait that
    /// parks) polls the completions of every parked waiter, future and
    /// callback while there are any (without pause, then, after 4096 rounds
    /// that found nothing, yielding the CPU between rounds), and sleeps
    /// once none was left for half a millisecond: one core at most, whatever the
    /// number of waiters. Each wake-up is the OS's (an unpark, then the
    /// scheduler's switch to the woken thread). Where no completion thread
    /// can take the wait (the system refused to start one, or the runtime
    /// was dropped while the task was still pending after its stop
    /// timeout), the wait is `SpinThenYield`'s, and a future wakes itself
    /// at every poll: still no hang, but a core while it waits.
    Park,
    /// Rests on the completion entry's line with the CPU's monitor
    /// (UMONITOR/UMWAIT, or MONITORX/MWAITX) between polls: near the
    /// latency of `Spin`, with the core in a light sleep state. The monitor
    /// watches the completion entry's line: an IO task whose output lands
    /// after its entry, or a completion a producer moved out of its slot,
    /// is seen when the monitored wait ends (about 100 000 TSC cycles at
    /// most). Where the CPU or the kernel does not offer it
    /// ([`monitor_support`](crate::monitor_support) says why), it falls
    /// back to `SpinThenYield`.
    Monitor,
}

/// How long [`WaitStrategy::SpinThenYield`] spins before it yields.
pub(crate) const SPIN_FOR: Duration = Duration::from_micros(200);
/// Polls between two looks at the clock.
pub(crate) const POLLS_PER_CHECK: u32 = 64;
/// The longest a parked waiter sleeps before it looks by itself (the
/// completion thread wakes it on completion, fault, stall or shutdown;
/// this only bounds a wake-up lost to a bug).
pub(crate) const PARK_AT_MOST: Duration = Duration::from_millis(50);

/// What a wait waits for: the task of `seq` in ring `ring` (the completion
/// thread and the monitor look at it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub(crate) ring: usize,
    pub(crate) seq: u64,
}

/// How a wait goes: the strategy resolved for this CPU and this wait.
#[derive(Clone, Copy, Debug)]
pub(crate) enum How {
    Spin,
    SpinThenYield,
    Park(Target),
    Monitor(monitor::MonitorKind, Target),
}

impl WaitStrategy {
    /// The strategy a wait for `target` actually uses here.
    pub(crate) fn resolve(self, target: Option<Target>) -> How {
        match (self, target) {
            (Self::Spin, _) => How::Spin,
            (Self::Park, Some(t)) => How::Park(t),
            (Self::Monitor, Some(t)) => match monitor::monitor_support() {
                Ok(kind) => How::Monitor(kind, t),
                Err(_) => How::SpinThenYield,
            },
            _ => How::SpinThenYield,
        }
    }

    /// The strategy a wait with `self` uses on this machine: `Monitor`
    /// becomes `SpinThenYield` where [`monitor_support`](crate::monitor_support)
    /// refuses; the others are themselves.
    pub fn effective(self) -> WaitStrategy {
        match self {
            Self::Monitor if monitor::monitor_support().is_err() => Self::SpinThenYield,
            other => other,
        }
    }
}
