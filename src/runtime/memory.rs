//! Whether a runtime's memory was given back ([`MemoryWatch`]): a runtime's
//! memory outlives it while tickets or batches of its do, and memory its
//! kernel may still use is kept rather than freed under it.

use std::sync::Arc;

use crate::runtime::engine::Engine;
use crate::sync::{AtomicBool, Ordering};

/// What became of a runtime's memory ([`MemoryWatch::state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryState {
    /// In use: the runtime, or a ticket or batch of its, is alive.
    InUse,
    /// Given back: the runtime and every ticket and batch of its are gone
    /// and its kernel exited. Its memory is freed, or, where the driver
    /// would wait for another pkq kernel running in its context to free it
    /// (pinned memory, and device memory on a device without memory pools),
    /// as soon as none runs. Its state memory
    /// ([`Builder::state_memory`](crate::Builder::state_memory)) is freed
    /// once its last [`DeviceState`](crate::DeviceState) is gone too.
    GivenBack,
    /// Kept: the runtime and its handles are gone, but its kernel was not
    /// seen to exit, so the memory it may still use is not freed under it.
    /// A kernel whose stop timed out is looked at again by every
    /// [`running_kernels`](crate::running_kernels) and every build (of any
    /// device); once one finds it exited, its memory is given back
    /// ([`MemoryState::GivenBack`]). A kernel found dead by a device fault
    /// keeps its memory for the process (the driver refuses every free
    /// after one).
    Kept,
}

/// A witness of a runtime's memory, made by
/// [`Runtime::memory_watch`](crate::Runtime::memory_watch): it outlives the
/// runtime and says when its memory (every lane's) was given back.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// use pkq::{MemoryState, Runtime, Submit, builtin::NOP};
/// let rt = Runtime::builder().build()?;
/// let watch = rt.memory_watch();
/// let ticket = rt.submit(NOP.args(&()))?;
/// drop(rt); // shut down: the ticket's task completed, its result waits
/// assert_eq!(watch.state(), MemoryState::InUse, "kept for the ticket");
/// ticket.wait()?;
/// assert_eq!(watch.state(), MemoryState::GivenBack);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryWatch {
    lanes: Box<[Seen]>,
}

impl MemoryWatch {
    pub(crate) fn new(lanes: impl Iterator<Item = Seen>) -> Self {
        Self {
            lanes: lanes.collect(),
        }
    }

    /// What became of the memory: [`MemoryState::InUse`] while any lane's
    /// is in use, else [`MemoryState::Kept`] while any lane's is kept, else
    /// [`MemoryState::GivenBack`].
    pub fn state(&self) -> MemoryState {
        self.lanes
            .iter()
            .map(Seen::state)
            .fold(MemoryState::GivenBack, |acc, s| match (acc, s) {
                (MemoryState::InUse, _) | (_, MemoryState::InUse) => MemoryState::InUse,
                (MemoryState::Kept, _) | (_, MemoryState::Kept) => MemoryState::Kept,
                _ => MemoryState::GivenBack,
            })
    }
}

/// What a watch sees of one lane's memory: whether the lane's memory was
/// dropped (the lane and every handle gone), and the kernel's own word on
/// whether it released what it kept (none: the software device's, always
/// released).
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    dropped: Arc<AtomicBool>,
    released: Option<Arc<AtomicBool>>,
}

impl Seen {
    fn state(&self) -> MemoryState {
        if !self.dropped.load(Ordering::Acquire) {
            MemoryState::InUse
        } else if self
            .released
            .as_ref()
            .is_none_or(|r| r.load(Ordering::Acquire))
        {
            MemoryState::GivenBack
        } else {
            MemoryState::Kept
        }
    }
}

/// How many lanes' memories are allocated in the process (built, not yet
/// given back or kept): the GPU tests' leak check.
static LIVE: crate::sync::statics::AtomicUsize = crate::sync::statics::AtomicUsize::new(0);

/// How many lanes' memories are allocated in this process now: built, and
/// not yet given back or kept (see [`MemoryWatch`]). A test seam (the GPU
/// tests check that every test gives back what it built); not part of the
/// API.
#[doc(hidden)]
pub fn live_lanes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// A lane's side of its [`MemoryWatch`], counted in [`live_lanes`] while
/// it lives. It is the last field of the lane's shared state, so it is
/// dropped after the engine and every view of the memory: a watch that
/// sees the memory dropped also sees what the kernel's drop released.
pub(crate) struct Witness {
    seen: Seen,
}

impl Witness {
    /// The witness of the memory `engine` uses.
    pub(crate) fn new(engine: &Engine) -> Self {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Self {
            seen: Seen {
                dropped: Arc::default(),
                released: engine.released(),
            },
        }
    }

    /// What a watch reads.
    pub(crate) fn seen(&self) -> Seen {
        self.seen.clone()
    }
}

impl Drop for Witness {
    /// The lane's memory was dropped (after the kernel's drop, which
    /// released what it kept or left it to a later look).
    fn drop(&mut self) {
        self.seen.dropped.store(true, Ordering::Release);
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}
