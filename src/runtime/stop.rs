//! Stopping a lane: shutdown's drain and cancel, each run once, and the
//! orphan shares given back (the last frees the memory of a dropped lane;
//! `docs/design/orphan-shares.md`).

use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::runtime::liveness::Watch;
use crate::runtime::shared::Shared;
use crate::runtime::wait::WaitStrategy;
use crate::sync::{MutexGuard, Ordering, now};

/// A lane's stop begun ([`Shared::begin_stop`]): its kernel told to exit,
/// what the drain found, and whether it ended as a cancel; the lock of the
/// stop's outcome held until [`Shared::finish_stop`] latches it.
pub(crate) struct Stopping<'a> {
    stopped: MutexGuard<'a, Option<Result<()>>>,
    drained: Result<()>,
    cancelled: bool,
}

impl Shared {
    /// Begins a shutdown: said (for `exited`) before anything closes, then
    /// no task is taken any more; a cancel said first stays. Nothing waits.
    pub(crate) fn announce_shutdown(&self) {
        self.life.begin_shutdown();
        self.rings.close();
    }

    /// Begins a cancel, which stops now, a shutdown's drain under way too
    /// (not one that ended: what that shutdown said stays): said, no task
    /// taken any more, and told to the kernel. Nothing waits.
    pub(crate) fn announce_cancel(&self) {
        if self.life.begin_cancel() {
            self.rings.close();
            self.device.tell_stop();
        }
    }

    /// A shutdown announced if `drain`, else a cancel.
    fn announce(&self, drain: bool) {
        if drain {
            self.announce_shutdown();
        } else {
            self.announce_cancel();
        }
    }

    /// Close, drain (if `drain`), stop the kernel, wait for it; without the
    /// drain, or with one a cancel cut short, latch [`Error::Cancelled`]
    /// for the tasks left. Runs once; later calls return the first outcome.
    /// A cancel is announced before the lock a shutdown's drain holds.
    pub(crate) fn stop(&self, drain: bool) -> Result<()> {
        match self.begin_stop(drain) {
            Ok(stopping) => self.finish_stop(stopping),
            Err(outcome) => outcome,
        }
    }

    /// [`stop`](Self::stop) up to the kernel told to exit (nothing waits
    /// for it yet): a runtime begins every lane's stop before it waits for
    /// any kernel, so that no lane's kernel waits for another's exit (a
    /// driver that serializes kernels, as a sanitizer does, answers a
    /// stream's query only once every kernel ended). `Err`: the stop ran
    /// before, and its outcome.
    pub(crate) fn begin_stop(&self, drain: bool) -> std::result::Result<Stopping<'_>, Result<()>> {
        self.announce(drain);
        let stopped = self.life.stopped();
        if let Some(outcome) = &*stopped {
            return Err(outcome.clone());
        }
        let cancelled = || self.life.cancelled();
        // Closed already (the announcement): the ends of the rings.
        let ends = self.rings.close();
        let stop_timeout = self.settings.stop_timeout;
        // A timeout too long to add to now has no deadline.
        let drained = if !cancelled() {
            let deadline = now().checked_add(stop_timeout);
            // SAFETY: the lane's own stop: alive for the whole call.
            unsafe {
                Self::wait_for(
                    NonNull::from(self),
                    deadline,
                    Watch::Nothing,
                    WaitStrategy::SpinThenYield,
                    None,
                    None,
                    || (self.rings.drained(&ends) || cancelled()).then_some(()),
                )
            }
        } else {
            Ok(())
        };
        // The drain is over: from here on a cancel changes nothing. A
        // cancel, or a drain one cut short (whatever the drain's wait saw of
        // the kernel stopping for it), is a cancel.
        let cancelled = self.life.end_drain();
        self.device.tell_stop();
        Ok(Stopping {
            stopped,
            drained,
            cancelled,
        })
    }

    /// The rest of [`stop`](Self::stop) after [`begin_stop`](Self::begin_stop):
    /// waits for the kernel's exit, resolves what is left, and latches the
    /// outcome.
    pub(crate) fn finish_stop(&self, stopping: Stopping<'_>) -> Result<()> {
        let Stopping {
            mut stopped,
            drained,
            cancelled,
        } = stopping;
        let exited = self
            .device
            .wait_exit(now().checked_add(self.settings.stop_timeout));
        // No producer frees a slot any more: the dropped handles' traced
        // tasks that completed are recorded now.
        self.rings.record_detached();
        let drained = match drained {
            Err(Error::Cancelled) if cancelled => Ok(()),
            Err(Error::Timeout) => Err(Error::KernelTimeout("drain its tasks in time")),
            d => d,
        };
        if exited.is_ok() && (cancelled || drained.is_err()) {
            // No completion can come any more: pending tickets (and the
            // callbacks a drop's last look fires) resolve with why.
            self.device.fail(if cancelled {
                Error::Cancelled
            } else {
                self.life.exited()
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

    /// Every lane of `lanes` announced (a shutdown if `drain`, else a
    /// cancel: each refuses new tasks at once), then
    /// [`begin_stop`](Self::begin_stop) of each, then
    /// [`finish_stop`](Self::finish_stop) of each: every lane stops,
    /// whatever the ones before returned; the first error is the outcome.
    /// Each lane's lock is taken in the lanes' order, as every other stop
    /// takes its one.
    pub(crate) fn stop_all<'a>(
        lanes: impl Iterator<Item = &'a Shared> + Clone,
        drain: bool,
    ) -> Result<()> {
        for lane in lanes.clone() {
            lane.announce(drain);
        }
        let begun: Vec<_> = lanes.clone().map(|l| l.begin_stop(drain)).collect();
        let outcomes: Vec<Result<()>> = lanes
            .zip(begun)
            .map(|(l, b)| match b {
                Ok(stopping) => l.finish_stop(stopping),
                Err(outcome) => outcome,
            })
            .collect();
        outcomes.into_iter().collect()
    }

    /// Gives back `shares` orphan shares (see `Lifecycle::orphans`); the
    /// last drops the reference the lane kept aside for it.
    ///
    /// # Safety
    /// `this` comes from `Arc::into_raw` or `Arc::as_ptr` of the lane's
    /// `Arc<Shared>`; the caller holds `shares` shares and does not touch
    /// `*this` afterwards.
    pub(crate) unsafe fn release(this: *const Shared, shares: u64) {
        // SAFETY: the caller's shares keep `*this` alive until this
        // subtraction; `AcqRel` orders every holder's accesses before the
        // last one's free (as `Arc`'s own count does).
        let before = unsafe { (*this).life.orphans.fetch_sub(shares, Ordering::AcqRel) };
        debug_assert!(
            before >= shares,
            "{before} orphan shares, {shares} given back"
        );
        if before == shares {
            // SAFETY: the last share: the lane was dropped (its share is
            // in) and kept one reference aside for this, which nobody else
            // drops; no holder touches the memory any more.
            unsafe { Arc::decrement_strong_count(this) };
        }
    }
}
