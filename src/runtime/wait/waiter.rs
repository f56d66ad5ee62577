//! The wait loop every wait shares ([`Shared::wait_for`]): polls, probes
//! of the kernel, deadlines and stalls, and the strategy's pause between
//! polls; and handing an interest to the completion thread
//! ([`Shared::arm`]), started on first need.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_utils::Backoff;

use crate::error::{Error, Result};
use crate::runtime::liveness::Watch;
use crate::runtime::shared::Shared;
use crate::runtime::wait::monitor;
use crate::runtime::wait::reactor::{Armed, Interest, Refused, Wake};
use crate::runtime::wait::strategy::{
    How, PARK_AT_MOST, POLLS_PER_CHECK, SPIN_FOR, Target, WaitStrategy,
};
use crate::sync::now;

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
            if now - start >= s.device.liveness.every
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
                    let queue = &s.rings.queues[t.ring];
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
                            Wake::Thread(crate::sync::current()),
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
                    crate::sync::park_timeout(nap);
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
                            let cpu = shared.settings.completion_cpu;
                            std::thread::Builder::new()
                                .name("pkq-completions".into())
                                .spawn(move || {
                                    // Checked allowed at build; without
                                    // one, not the first waiter's core.
                                    match cpu {
                                        Some(cpu) => crate::runtime::wait::pin::pin_current(cpu),
                                        None => crate::runtime::wait::pin::unpin_current(),
                                    };
                                    crate::runtime::wait::thread::serve(shared)
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
