//! Waiting for completions: the strategies a waiting thread may use
//! ([`WaitStrategy`]), the wait loop they share, the completion thread
//! that wakes parked threads, futures and callbacks ([`reactor`]), the
//! CPU's monitor ([`monitor`]), and the `Future` and callback faces of
//! tickets and batches ([`future`], [`callback`]).

pub(crate) mod callback;
pub(crate) mod future;
pub(crate) mod monitor;
pub(crate) mod pin;
pub(crate) mod reactor;

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;

use crate::error::{Error, Result};
use crate::proto::sync::now;
use crate::runtime::{Shared, Watch};
use reactor::{Armed, Interest, Refused, Wake};

/// How a thread waits for a task's completion.
///
/// Set per runtime with [`Builder::wait`](crate::Builder::wait) (default
/// [`WaitStrategy::SpinThenYield`]), and per ticket or batch with
/// [`Ticket::with_wait`](crate::Ticket::with_wait) and
/// [`Batch::with_wait`](crate::Batch::with_wait). Every strategy keeps the
/// same guarantees: a device fault, a stop, a cancel or a stalled worker
/// ends the wait with its error, and a deadline
/// ([`Ticket::wait_timeout`](crate::Ticket::wait_timeout)) is kept.
/// What each costs is measured by `--example waiting` (the README's "How
/// to wait").
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
    /// until the runtime's completion thread wakes it (and looks by itself
    /// at least every 50 ms, a bound that no healthy wake-up needs). That
    /// thread (one per runtime, started by the first wait that
    /// parks) polls the completions of every parked waiter, future and
    /// callback while there are any (without pause, then, after 4096 rounds
    /// that found nothing, yielding the CPU between rounds), and sleeps
    /// once none was left for half a millisecond: one core at most, whatever the
    /// number of waiters. Each wake-up is the OS's (an unpark, then the
    /// scheduler's switch to the woken thread).
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
const SPIN_FOR: Duration = Duration::from_micros(200);
/// Polls between two looks at the clock.
const POLLS_PER_CHECK: u32 = 64;
/// The longest a parked waiter sleeps before it looks by itself (the
/// completion thread wakes it on completion, fault, stall or shutdown;
/// this only bounds a wake-up lost to a bug).
const PARK_AT_MOST: Duration = Duration::from_millis(50);

/// What a wait waits for: the task of `seq` in ring `ring` (the completion
/// thread and the monitor look at it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub(crate) ring: usize,
    pub(crate) seq: u64,
}

/// How a wait goes: the strategy resolved for this CPU and this wait.
#[derive(Clone, Copy, Debug)]
enum How {
    Spin,
    SpinThenYield,
    Park(Target),
    Monitor(monitor::MonitorKind, Target),
}

impl WaitStrategy {
    /// The strategy a wait for `target` actually uses here.
    fn resolve(self, target: Option<Target>) -> How {
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

impl Shared {
    /// Polls `ready` until it yields, waiting between polls as `how` says,
    /// with a liveness probe every interval; `Timeout` at `deadline`,
    /// [`Error::Stalled`] if what `watch` names goes silent. `target` is
    /// what `ready` waits for, where it is one task (`Park` and `Monitor`
    /// need it; without, they spin, then yield). `since`: when the wait
    /// began, for a wait that goes on from an earlier call (a batch's,
    /// slot after slot); `None`: now.
    ///
    /// A function of a pointer, not of `&self`: `ready` may end the
    /// caller's hold on the runtime's memory (a ticket taking its task),
    /// after which it may be freed while this call returns; a reference
    /// argument would still be live (protected) then. The state is looked
    /// at only between calls of `ready` that yielded nothing.
    ///
    /// # Safety
    /// `this` points to a live `Shared` for as long as `ready` yields
    /// nothing (the caller is the runtime, or owns a slot or holds a share
    /// until `ready` yields), and comes from the runtime's `Arc` (a
    /// `RingPtr`) where `how` may park.
    pub(crate) unsafe fn wait_for<T>(
        this: NonNull<Shared>,
        deadline: Option<Instant>,
        watch: Watch,
        how: WaitStrategy,
        target: Option<Target>,
        since: Option<Instant>,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        let mut how = how.resolve(target);
        // The clock is first read after a round of polls: a round trip that
        // ends within it never pays for a clock read.
        let mut start = since;
        let backoff = Backoff::new();
        let mut interest = Armed::default();
        let outcome = 'wait: loop {
            for _ in 0..POLLS_PER_CHECK {
                if let Some(v) = ready() {
                    break 'wait Ok(v);
                }
                std::hint::spin_loop();
            }
            // SAFETY: `ready` yielded nothing: still alive (the contract).
            let s = unsafe { this.as_ref() };
            // An error ends the wait only if the task has not completed in
            // the meantime: a stop or cancel is latched once the kernel has
            // exited, after the completions of every task it ran were
            // written (so one last look finds them). `s` is not used after
            // that look, which may free the runtime.
            if let Err(e) = s.check() {
                break ready().ok_or(e);
            }
            let now = now();
            let start = *start.get_or_insert(now);
            // Probes begin after one interval of waiting: a healthy round
            // trip never pays for one.
            if now - start >= s.liveness.every
                && let Err(e) = s.probe_if_due(now).and_then(|()| s.check_stall(watch))
            {
                break ready().ok_or(e);
            }
            if deadline.is_some_and(|d| now >= d) {
                break ready().ok_or(Error::Timeout);
            }
            match how {
                How::Spin => {}
                How::SpinThenYield => {
                    if now - start >= SPIN_FOR {
                        backoff.snooze();
                    }
                }
                How::Monitor(kind, t) => {
                    let queue = &s.queues[t.ring];
                    let word: *const _ = queue.completion_word(t.seq);
                    monitor::wait_on(kind, word.cast(), || queue.ready(t.seq));
                }
                How::Park(t) => {
                    // Armed once, and again after each wake-up it fired.
                    if interest.get().is_none_or(Interest::fired) {
                        let new = Interest::new(
                            t.ring,
                            t.seq,
                            watch,
                            Wake::Thread(crate::proto::sync::current()),
                        );
                        // SAFETY: the caller's contract (from the `Arc`).
                        match unsafe { Shared::arm(this, new) } {
                            Ok(armed) => interest.set(Some(armed)),
                            Err(_) => {
                                how = How::SpinThenYield;
                                continue;
                            }
                        }
                        // Armed: look once more before sleeping (a
                        // completion before the arming is seen by the
                        // completion thread too, but needs no wake-up).
                        if let Some(v) = ready() {
                            break 'wait Ok(v);
                        }
                    }
                    let mut nap = PARK_AT_MOST;
                    if let Some(d) = deadline {
                        nap = nap.min(d.saturating_duration_since(now));
                    }
                    crate::proto::sync::park_timeout(nap);
                }
            }
        };
        interest.leave();
        outcome
    }

    /// Hands `interest` to the runtime's completion thread, starting it if
    /// none runs. `Err` once the runtime was dropped (or no thread
    /// could be started): the caller waits by itself.
    ///
    /// # Safety
    /// `this` points to a live `Shared` (the caller owns a slot or holds a
    /// share), and comes from the runtime's `Arc` (a `RingPtr`). The thread
    /// keeps a reference counted from it only while the registry is open,
    /// which means the runtime was not dropped: its drop closes the
    /// registry before it orphans any task, so a handle left holding a
    /// share is refused here before anything is counted.
    pub(crate) unsafe fn arm(
        this: NonNull<Shared>,
        interest: Arc<Interest>,
    ) -> std::result::Result<Arc<Interest>, Arc<Interest>> {
        // SAFETY: live (the contract).
        let s = unsafe { this.as_ref() };
        let mut interest = interest;
        loop {
            match s.reactor.register(interest.clone()) {
                Ok(()) => return Ok(interest),
                Err((Refused::Closed, i)) => return Err(i),
                Err((Refused::NotStarted, i)) => {
                    interest = i;
                    let started = s.reactor.start(|| {
                        #[cfg(not(loom))]
                        {
                            // SAFETY: `this` comes from the runtime's
                            // `Arc`, which is alive (its runtime was not
                            // dropped): one more reference, for the thread.
                            let shared = unsafe {
                                Arc::increment_strong_count(this.as_ptr());
                                Arc::from_raw(this.as_ptr())
                            };
                            let cpu = shared.completion_cpu;
                            std::thread::Builder::new()
                                .name("pkq-completions".into())
                                .spawn(move || {
                                    // Checked allowed at build; without
                                    // one, not the first waiter's core.
                                    match cpu {
                                        Some(cpu) => pin::pin_current(cpu),
                                        None => pin::unpin_current(),
                                    };
                                    reactor::serve(shared)
                                })
                        }
                        #[cfg(loom)]
                        Err(std::io::Error::other(
                            "loom models run no completion thread",
                        ))
                    });
                    if !started {
                        return Err(interest);
                    }
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
