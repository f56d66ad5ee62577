//! The completion thread: one per runtime, started by the first wait that
//! parks, the first future that waits, or the first callback. It looks at
//! the completion words of the tasks someone registered an interest in,
//! and wakes whoever waits for each once it completed (or once the runtime
//! failed, or the task's worker stalled): a parked thread, a future's
//! waker, a callback.
//!
//! The protocol (the registry's part model-checked in `loom_tests`:
//! registering, firing, leaving, sleeping and closing; the memory's
//! lifetime rests on the last point below):
//! * An [`Interest`] is `ARMED` when registered; exactly one of `FIRED`
//!   (by the completion thread) and `GONE` (by its waiter, which stopped
//!   waiting) ends it, each by a compare-and-swap from `ARMED`, so a waiter
//!   that left is never woken for it and a fired one is woken once.
//! * Readiness is a level, not an edge: the completion thread fires an
//!   interest on any round after its registration in which the task is
//!   complete, so a completion that landed before the registration is not
//!   lost. A registration goes into the inbox under the lock, and rings
//!   the bell when the thread sleeps (it sleeps only with an empty inbox,
//!   looked at under the same lock).
//! * A parked thread's wake-up is `unpark`, whose token is kept when it
//!   comes before the `park`: the waiter arms, looks at its task once more,
//!   then parks.
//! * The thread reads the queue's memory only while it holds a reference to
//!   the runtime's shared state, and the runtime's drop closes the registry
//!   (waking every waiter left) and joins the thread before it hands out
//!   orphan shares.

use std::sync::Arc;
use std::task::Waker;

use crate::error::Error;
use crate::runtime::liveness::Watch;
use crate::sync::{
    AtomicBool, AtomicU8, AtomicU64, Condvar, Mutex, MutexGuard, Ordering, Thread, lock,
};

const ARMED: u8 = 0;
const FIRED: u8 = 1;
const GONE: u8 = 2;

/// A callback's closure, given why it fired (see [`Wake::Callback`]).
pub(crate) type Callback = Box<dyn FnOnce(Option<Error>) + Send>;

/// Who waits for an interest.
pub(crate) enum Wake {
    /// A parked thread.
    Thread(Thread),
    /// A future's task.
    Task(Waker),
    /// A callback, given why it fired: `None` when the task is ready, else
    /// the error that ends the wait (a fault, a stall, shutdown).
    Callback(Mutex<Option<Callback>>),
}

/// A waiter's interest in one task (a ticket's, or a batch's next slot).
pub(crate) struct Interest {
    pub(crate) ring: usize,
    pub(crate) seq: u64,
    /// What the completion thread watches for a stall.
    pub(crate) watch: Watch,
    state: AtomicU8,
    pub(crate) wake: Wake,
}

impl Interest {
    pub(crate) fn new(ring: usize, seq: u64, watch: Watch, wake: Wake) -> Arc<Self> {
        Arc::new(Self {
            ring,
            seq,
            watch,
            state: AtomicU8::new(ARMED),
            wake,
        })
    }

    /// Whether the completion thread fired it (a parked waiter's wake-up
    /// was for this interest, not spurious).
    pub(crate) fn fired(&self) -> bool {
        self.state.load(Ordering::Acquire) == FIRED
    }

    /// Its waiter stops waiting: the completion thread will not wake it for
    /// this interest (unless it fired already). Returns whether it had
    /// fired.
    pub(crate) fn leave(&self) -> bool {
        self.state
            .compare_exchange(ARMED, GONE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    }

    fn is_gone(&self) -> bool {
        self.state.load(Ordering::Relaxed) == GONE
    }

    /// Wakes its waiter unless it left; `why` is `None` for a ready task.
    /// Runs a callback here; a panic of the callback or of a waker is
    /// caught and counted in `panics`.
    pub(crate) fn fire(&self, why: Option<Error>, panics: &AtomicU64) {
        if self
            .state
            .compare_exchange(ARMED, FIRED, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let wake = || match &self.wake {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => w.wake_by_ref(),
            Wake::Callback(f) => {
                let f = lock(f).take();
                if let Some(f) = f {
                    f(why);
                }
            }
        };
        // A callback's panic, or a waker's (an executor's), must not end
        // the completion thread.
        if run_caught(wake) {
            panics.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Interest {
    /// The waiter's waker or unfired callback goes under a catch: an
    /// executor's waker, or a callback's captures, may panic in their own
    /// `Drop`, and the last reference to an interest may be the completion
    /// thread's, which must go on serving.
    fn drop(&mut self) {
        match &mut self.wake {
            Wake::Thread(_) => {}
            Wake::Task(w) => {
                let w = std::mem::replace(w, Waker::noop().clone());
                run_caught(move || drop(w));
            }
            Wake::Callback(f) => {
                let f = f
                    .get_mut()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                run_caught(move || drop(f));
            }
        }
    }
}

/// Runs `f` and catches its panic, and the panic of the payload's own
/// `Drop` too (that payload is then forgotten: a leak, rather than an
/// unwind into a pkq thread or the caller). Whether `f` panicked.
pub(crate) fn run_caught(f: impl FnOnce()) -> bool {
    let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) else {
        return false;
    };
    if let Err(again) =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)))
    {
        std::mem::forget(again);
    }
    true
}

/// A waiter's interest while it has one armed (at most one at a time):
/// replacing or leaving it leaves the old one, which the completion thread
/// then never wakes for.
#[derive(Default)]
pub(crate) struct Armed(Option<Arc<Interest>>);

impl Armed {
    /// The interest armed, if any.
    pub(crate) fn get(&self) -> Option<&Interest> {
        self.0.as_deref()
    }

    /// Arms `interest` in place of the one armed (left), or none.
    pub(crate) fn set(&mut self, interest: Option<Arc<Interest>>) {
        self.leave();
        self.0 = interest;
    }

    /// Leaves the interest armed, if any.
    pub(crate) fn leave(&mut self) {
        if let Some(i) = self.0.take() {
            i.leave();
        }
    }
}

/// Whether the completion thread runs.
enum Run {
    NotStarted,
    Running {
        thread: Option<std::thread::JoinHandle<()>>,
        /// Sleeping on the bell (with no interest left).
        asleep: bool,
    },
    Closed,
}

struct Inbox {
    new: Vec<Arc<Interest>>,
    run: Run,
}

/// The interests waiting to be picked up by the completion thread, and
/// whether it runs; per runtime.
pub(crate) struct Registry {
    inbox: Mutex<Inbox>,
    /// Set (under the lock) when the inbox has something or the registry
    /// closed: the thread takes the lock only then.
    posted: AtomicBool,
    bell: Condvar,
    /// Callbacks that panicked.
    pub(crate) panics: AtomicU64,
}

/// Why [`Registry::register`] refused.
pub(crate) enum Refused {
    /// The runtime is shutting down or gone: the caller waits by itself.
    Closed,
    /// The thread should be started by the caller (it has the runtime).
    NotStarted,
}

/// What [`Registry::collect`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Collected {
    Open,
    Closed,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            inbox: Mutex::new(Inbox {
                new: Vec::new(),
                run: Run::NotStarted,
            }),
            posted: AtomicBool::new(false),
            bell: Condvar::new(),
            panics: AtomicU64::new(0),
        }
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Inbox> {
        lock(&self.inbox)
    }

    /// Hands `interest` to the completion thread. `Refused::NotStarted`
    /// when no thread runs yet (then [`Registry::start`] and register
    /// again), `Refused::Closed` once the runtime is shutting down.
    pub(crate) fn register(&self, interest: Arc<Interest>) -> Result<(), (Refused, Arc<Interest>)> {
        let mut inbox = self.lock();
        let asleep = match &mut inbox.run {
            Run::NotStarted => return Err((Refused::NotStarted, interest)),
            Run::Closed => return Err((Refused::Closed, interest)),
            Run::Running { asleep, .. } => std::mem::replace(asleep, false),
        };
        inbox.new.push(interest);
        self.posted.store(true, Ordering::Release);
        drop(inbox);
        if asleep {
            self.bell.notify_one();
        }
        Ok(())
    }

    /// Starts the completion thread with `spawn` unless it runs or the
    /// registry closed; `spawn` runs under the lock (one thread only).
    /// Returns whether one runs now.
    pub(crate) fn start(
        &self,
        spawn: impl FnOnce() -> std::io::Result<std::thread::JoinHandle<()>>,
    ) -> bool {
        let mut inbox = self.lock();
        match inbox.run {
            Run::Running { .. } => true,
            Run::Closed => false,
            Run::NotStarted => match spawn() {
                Ok(thread) => {
                    inbox.run = Run::Running {
                        thread: Some(thread),
                        asleep: false,
                    };
                    true
                }
                // No thread to be had: waits go on without one.
                Err(_) => false,
            },
        }
    }

    /// Marks the thread running without a thread handle (loom models run
    /// the rounds on a thread of their own).
    #[cfg(all(test, loom))]
    pub(crate) fn start_without_thread(&self) {
        self.lock().run = Run::Running {
            thread: None,
            asleep: false,
        };
    }

    /// Closes the registry (later registrations are refused), wakes the
    /// thread, and returns its handle to join. The thread then fires every
    /// interest left.
    pub(crate) fn close(&self) -> Option<std::thread::JoinHandle<()>> {
        let mut inbox = self.lock();
        let thread = match std::mem::replace(&mut inbox.run, Run::Closed) {
            Run::Running { thread, .. } => thread,
            _ => None,
        };
        self.posted.store(true, Ordering::Release);
        drop(inbox);
        self.bell.notify_all();
        thread
    }

    /// The completion thread's look at the inbox: moves new interests into
    /// `live`. With `sleep` (nothing live, lingered long enough) and
    /// nothing new, sleeps until something is registered or the registry
    /// closes.
    pub(crate) fn collect(&self, live: &mut Vec<Arc<Interest>>, sleep: bool) -> Collected {
        if !sleep && !self.posted.load(Ordering::Acquire) {
            return Collected::Open;
        }
        let mut inbox = self.lock();
        loop {
            if let Run::Closed = inbox.run {
                live.append(&mut inbox.new);
                return Collected::Closed;
            }
            if !inbox.new.is_empty() || !sleep {
                live.append(&mut inbox.new);
                self.posted.store(false, Ordering::Relaxed);
                return Collected::Open;
            }
            if let Run::Running { asleep, .. } = &mut inbox.run {
                *asleep = true;
            }
            inbox = self
                .bell
                .wait(inbox)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Run::Running { asleep, .. } = &mut inbox.run {
                *asleep = false;
            }
        }
    }
}

/// One round over the live interests: drops those whose waiter left,
/// fires those `ready` says completed. Returns how many ended.
pub(crate) fn round(
    live: &mut Vec<Arc<Interest>>,
    ready: impl Fn(&Interest) -> bool,
    panics: &AtomicU64,
) -> usize {
    let before = live.len();
    live.retain(|i| {
        if i.is_gone() {
            return false;
        }
        if ready(i) {
            i.fire(None, panics);
            return false;
        }
        true
    });
    before - live.len()
}

/// Fires every live interest with `why` (a fault, shutdown).
pub(crate) fn fire_all(live: &mut Vec<Arc<Interest>>, why: &Error, panics: &AtomicU64) {
    for i in live.drain(..) {
        i.fire(Some(why.clone()), panics);
    }
}
