//! The device memory a lane's states come from ([`StateArena`]): allocated
//! before its kernel starts, handed out first fit in 256-byte pieces, and
//! given back when a state is dropped.

use std::sync::Arc;

use crate::cuda::memory::StateMemory;
use crate::error::{Error, Result};
use crate::sync::{Mutex, MutexGuard, lock};

/// Where states start: cudarc's allocations are 256-byte aligned, and so is
/// every state in the arena (a type aligned to more is refused).
pub(crate) const ALIGN: usize = 256;

/// The device memory a runtime's states come from, allocated before its
/// kernel starts ([`Builder::state_memory`](crate::Builder::state_memory)):
/// nothing is allocated or freed on the device while the kernel runs.
pub(crate) struct StateArena {
    pub(crate) memory: StateMemory,
    pub(crate) free: FreeList,
}

/// The free ranges `(offset, bytes)` of an arena, sorted and merged; every
/// range a multiple of `ALIGN` long, first fit.
pub(crate) struct FreeList(Mutex<Vec<(usize, usize)>>);

impl FreeList {
    fn new(bytes: usize) -> Self {
        Self(Mutex::new(vec![(0, bytes)]))
    }

    fn ranges(&self) -> MutexGuard<'_, Vec<(usize, usize)>> {
        lock(&self.0)
    }

    /// The first free range of `bytes` (rounded up to `ALIGN`): its offset.
    pub(crate) fn take(&self, bytes: usize) -> Option<usize> {
        let bytes = bytes.checked_next_multiple_of(ALIGN)?;
        let mut free = self.ranges();
        let i = free.iter().position(|&(_, len)| len >= bytes)?;
        let (off, len) = free[i];
        if len == bytes {
            free.remove(i);
        } else {
            free[i] = (off + bytes, len - bytes);
        }
        Some(off)
    }

    /// Gives back what [`Self::take`] gave for `bytes`.
    pub(crate) fn give(&self, off: usize, bytes: usize) {
        let bytes = bytes.next_multiple_of(ALIGN);
        let mut free = self.ranges();
        let i = free.partition_point(|&(o, _)| o < off);
        free.insert(i, (off, bytes));
        // Merge with the next range, then with the previous.
        if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
            free[i].1 += free[i + 1].1;
            free.remove(i + 1);
        }
        if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
            free[i - 1].1 += free[i].1;
            free.remove(i);
        }
    }
}

impl StateArena {
    /// `bytes` (rounded up to `ALIGN`) of device memory in `ctx`; none for
    /// 0. [`Error::InvalidConfig`] where the device has no stream-ordered
    /// allocation: freeing the memory would then wait for every kernel of
    /// the context, another runtime's resident one included.
    pub(crate) fn new(
        ctx: &Arc<cudarc::driver::CudaContext>,
        bytes: usize,
    ) -> Result<Option<Arc<Self>>> {
        if bytes == 0 {
            return Ok(None);
        }
        let bytes = bytes.checked_next_multiple_of(ALIGN).ok_or_else(|| {
            Error::InvalidConfig(format!("state memory of {bytes} bytes is too large"))
        })?;
        Ok(Some(Arc::new(Self {
            memory: StateMemory::new(ctx, bytes)?,
            free: FreeList::new(bytes),
        })))
    }

    /// The device address at `off`.
    pub(crate) fn addr(&self, off: usize) -> u64 {
        self.memory.addr(off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_list_takes_first_fit_and_merges_what_comes_back() {
        let f = FreeList::new(4 * ALIGN);
        assert_eq!(f.take(1), Some(0));
        assert_eq!(f.take(ALIGN + 1), Some(ALIGN));
        assert_eq!(f.take(ALIGN), Some(3 * ALIGN));
        assert_eq!(f.take(1), None, "full");
        assert_eq!(f.take(usize::MAX), None, "too large to round up");
        f.give(ALIGN, ALIGN + 1);
        assert_eq!(f.take(3 * ALIGN), None, "two free, not three");
        f.give(0, 1);
        f.give(3 * ALIGN, ALIGN);
        assert_eq!(*f.ranges(), [(0, 4 * ALIGN)], "merged whole again");
        assert_eq!(f.take(4 * ALIGN), Some(0));
    }
}
