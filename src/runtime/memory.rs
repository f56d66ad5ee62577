//! Whether a runtime's memory was given back ([`MemoryWatch`]): a runtime's
//! memory outlives it while tickets or batches of its do, and memory its
//! kernel may still use is kept rather than freed under it.

use std::sync::Arc;

use crate::runtime::engine::Engine;
use crate::sync::{AtomicBool, AtomicU8, Ordering};

const IN_USE: u8 = 0;
const GIVEN_BACK: u8 = 1;
const KEPT: u8 = 2;

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
    /// as soon as none runs.
    GivenBack,
    /// Kept for the process: the runtime and its handles are gone, but its
    /// kernel was not seen to exit (a stop that timed out, a fault), so the
    /// memory it may still use is never freed under it.
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
    lanes: Box<[Arc<AtomicU8>]>,
}

impl MemoryWatch {
    pub(crate) fn new(lanes: impl Iterator<Item = Arc<AtomicU8>>) -> Self {
        Self {
            lanes: lanes.collect(),
        }
    }

    /// What became of the memory: [`MemoryState::InUse`] while any lane's
    /// is in use, else [`MemoryState::Kept`] if any lane's was kept, else
    /// [`MemoryState::GivenBack`].
    pub fn state(&self) -> MemoryState {
        let states = self.lanes.iter().map(|s| s.load(Ordering::Acquire));
        states.fold(MemoryState::GivenBack, |acc, s| match (acc, s) {
            (_, IN_USE) | (MemoryState::InUse, _) => MemoryState::InUse,
            (_, KEPT) | (MemoryState::Kept, _) => MemoryState::Kept,
            _ => MemoryState::GivenBack,
        })
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
/// dropped after the engine and every view of the memory: it reads what
/// the kernel's drop did.
pub(crate) struct Witness {
    state: Arc<AtomicU8>,
    /// The kernel's own word on its memory (none: the software device's).
    released: Option<Arc<AtomicBool>>,
}

impl Witness {
    /// The witness of the memory `engine` uses.
    pub(crate) fn new(engine: &Engine) -> Self {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Self {
            state: Arc::default(),
            released: engine.released(),
        }
    }

    /// What a watch reads.
    pub(crate) fn state(&self) -> Arc<AtomicU8> {
        self.state.clone()
    }
}

impl Drop for Witness {
    /// The lane's memory was dropped: given back if the kernel released it,
    /// else kept for a kernel that may still use it.
    fn drop(&mut self) {
        let released = self
            .released
            .as_ref()
            .is_none_or(|r| r.load(Ordering::Acquire));
        let state = if released { GIVEN_BACK } else { KEPT };
        self.state.store(state, Ordering::Release);
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}
