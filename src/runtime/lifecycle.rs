//! What a lane's lifecycle keeps: which stop began (a shutdown's drain, a
//! cancel), the outcome of the stop, and the orphan shares that keep the
//! memory of a dropped lane for its tickets and batches
//! (`docs/design/orphan-shares.md`). The stops themselves: `runtime::stop`.

use crate::error::{Error, Result};
use crate::sync::{AtomicU8, AtomicU64, Mutex, MutexGuard, Ordering, lock};

/// `Lifecycle::stopping`: a shutdown (drain first) began.
const DRAIN: u8 = 1;
/// `Lifecycle::stopping`: a cancel began (or cut a shutdown's drain short).
const CANCEL: u8 = 2;
/// `Lifecycle::stopping`: a shutdown's drain ended (every task done, or out
/// of time): a cancel no longer changes what the shutdown said.
const DRAINED: u8 = 3;

/// What a lane's stops and its drop keep.
pub(crate) struct Lifecycle {
    /// What stop began, if any (`DRAIN`, `CANCEL`, `DRAINED`; 0: none yet).
    stopping: AtomicU8,
    /// The outcome of the stop, once it ran.
    stopped: Mutex<Option<Result<()>>>,
    /// Orphan shares: 1 (the lane's own) until the lane is dropped, then
    /// one more per task whose ticket or batch outlived it
    /// (`Queue::orphan`); the last given back frees this memory.
    pub(crate) orphans: AtomicU64,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self {
            stopping: AtomicU8::new(0),
            stopped: Mutex::new(None),
            orphans: AtomicU64::new(1),
        }
    }
}

impl Lifecycle {
    /// What a kernel seen to have exited means for the tasks still
    /// pending: the cancel that stopped it ([`Error::Cancelled`], whoever
    /// sees the exit first: a probe or the cancel itself), a shutdown whose
    /// drain gave up, or an exit nobody asked for.
    pub(crate) fn exited(&self) -> Error {
        match self.stopping.load(Ordering::SeqCst) {
            CANCEL => Error::Cancelled,
            DRAIN | DRAINED => {
                Error::KernelStopped("the runtime was shut down and its kernel exited".into())
            }
            _ => Error::KernelStopped("it exited unexpectedly".into()),
        }
    }

    /// Says a shutdown began, unless a stop began before.
    pub(crate) fn begin_shutdown(&self) {
        let _ = self
            .stopping
            .compare_exchange(0, DRAIN, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Says a cancel began, unless a cancel began or a shutdown's drain
    /// ended before (what that shutdown said stays); whether this is the
    /// first.
    pub(crate) fn begin_cancel(&self) -> bool {
        self.stopping
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                matches!(s, 0 | DRAIN).then_some(CANCEL)
            })
            .is_ok()
    }

    /// Whether a cancel began.
    pub(crate) fn cancelled(&self) -> bool {
        self.stopping.load(Ordering::SeqCst) == CANCEL
    }

    /// Ends a shutdown's drain: from here on a cancel changes nothing.
    /// Whether the stop is a cancel (one began, or cut the drain short).
    pub(crate) fn end_drain(&self) -> bool {
        self.stopping
            .compare_exchange(DRAIN, DRAINED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
    }

    /// The stop's outcome, once it ran (held while the stop runs: it runs
    /// once).
    pub(crate) fn stopped(&self) -> MutexGuard<'_, Option<Result<()>>> {
        lock(&self.stopped)
    }
}
