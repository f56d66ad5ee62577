//! Views of 8-byte words shared with the device: mapped pinned memory, or
//! heap memory for the software device of the tests.
//!
//! A view owns a reference to the allocation it looks into, so the memory
//! lives as long as any view of it, whatever order views and owners are
//! dropped in. A resident kernel keeps its own reference until it is known
//! to have exited (`cuda::Kernel`), so memory the device may touch is never
//! freed under it.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::sync::AtomicU64;

/// An allocation of shared words: its first word and its length. Whoever
/// implements it keeps the words valid, 8-byte aligned and accessed by this
/// process only through atomics, for as long as the value lives. (One
/// user of the views, not the implementor, stores without atomics: a
/// producer into the plain input it owns outright, `io::write_plain_input`.)
///
/// # Safety
/// `base` must point to `len` words that stay valid for reads and writes
/// while the implementor lives, and that the implementor itself accesses
/// only as atomics.
pub(crate) unsafe trait Backing: Send + Sync + 'static {
    /// The first word.
    fn base(&self) -> NonNull<AtomicU64>;
    /// How many words.
    fn len(&self) -> usize;
}

/// Heap words standing in for a mapped allocation (the software device).
#[cfg(test)]
pub(crate) struct HeapWords(Box<[AtomicU64]>);

#[cfg(test)]
impl HeapWords {
    /// `len` zeroed words.
    pub(crate) fn new(len: usize) -> Arc<Self> {
        Arc::new(Self((0..len).map(|_| AtomicU64::new(0)).collect()))
    }
}

// SAFETY: a boxed slice of atomics, valid while the box lives and
// accessed by it only as atomics; a `NonNull` of it carries the box's
// provenance.
#[cfg(test)]
unsafe impl Backing for HeapWords {
    fn base(&self) -> NonNull<AtomicU64> {
        NonNull::from(&*self.0).cast()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Words `from..from + len` of an allocation, keeping it alive. Accessed
/// through atomics, so concurrent device access is not a data race on the
/// Rust side (`io::write_plain_input` stores without atomics only into
/// words its thread owns outright, which no access races with).
#[derive(Clone)]
pub(crate) struct Words {
    ptr: NonNull<AtomicU64>,
    len: usize,
    _owner: Arc<dyn Backing>,
}

// SAFETY: a `Words` is a pointer to atomics of an allocation it keeps alive
// (`Backing` is Send + Sync); sharing it shares atomic accesses, and the
// one plain store (`io::write_plain_input`) is by a thread that owns its
// words outright.
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

impl std::fmt::Debug for Words {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Words({:p}, {})", self.ptr, self.len)
    }
}

impl Words {
    /// Words `from..from + len` of `owner`, or `None` if out of its bounds.
    pub(crate) fn of(owner: &Arc<impl Backing>, from: usize, len: usize) -> Option<Self> {
        if from > owner.len() || len > owner.len() - from {
            return None;
        }
        // SAFETY: in bounds of the allocation (checked above), whose base
        // pointer is valid for all of it.
        let ptr = unsafe { owner.base().add(from) };
        Some(Self {
            ptr,
            len,
            _owner: owner.clone(),
        })
    }

    /// All of a fresh heap allocation of `len` zeroed words.
    #[cfg(test)]
    pub(crate) fn heap(len: usize) -> Self {
        Self::of(&HeapWords::new(len), 0, len).expect("the whole allocation")
    }

    /// Words `from..from + len` of this view, or `None` if out of bounds.
    pub(crate) fn sub(&self, from: usize, len: usize) -> Option<Self> {
        if from > self.len || len > self.len - from {
            return None;
        }
        Some(Self {
            // SAFETY: in bounds of this view (checked above).
            ptr: unsafe { self.ptr.add(from) },
            len,
            _owner: self._owner.clone(),
        })
    }

    #[inline(always)]
    pub(crate) fn at(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len);
        // SAFETY: `i < len`, and the owner this view holds keeps the words
        // valid and accessed as atomics (but for words a thread owns
        // outright, which no other access races with: `Backing`).
        unsafe { self.ptr.add(i).as_ref() }
    }

    /// Words `from..from + N`, with one bounds check for all of them.
    #[inline(always)]
    pub(crate) fn run<const N: usize>(&self, from: usize) -> &[AtomicU64; N] {
        assert!(from <= self.len && N <= self.len - from);
        // SAFETY: in bounds (checked above); atomics of the same layout as
        // the words, kept valid by the owner this view holds.
        unsafe { self.ptr.add(from).cast::<[AtomicU64; N]>().as_ref() }
    }

    /// Words `from..from + len`, with one bounds check for all of them.
    #[inline(always)]
    pub(crate) fn slice(&self, from: usize, len: usize) -> &[AtomicU64] {
        assert!(from <= self.len && len <= self.len - from);
        // SAFETY: in bounds (checked above); atomics of the same layout as
        // the words, kept valid by the owner this view holds.
        unsafe { std::slice::from_raw_parts(self.ptr.add(from).as_ptr(), len) }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::Ordering;

    #[test]
    fn views_keep_their_memory_alive_and_check_bounds() {
        let all = Words::heap(16);
        let part = all.sub(4, 8).unwrap();
        assert!(all.sub(9, 8).is_none() && all.sub(17, 0).is_none());
        assert!(all.sub(16, 0).is_some());
        drop(all);
        // The allocation outlives the view it was cut from.
        part.at(7).store(5, Ordering::Relaxed);
        assert_eq!(part.run::<8>(0)[7].load(Ordering::Relaxed), 5);
        let copy = part.clone();
        drop(part);
        assert_eq!(copy.at(7).load(Ordering::Relaxed), 5);
    }
}

/// A trace's log of blocks reads a lane's mapped words through this view.
impl crate::trace::blocks::LogWords for Words {
    fn all(&self) -> &[AtomicU64] {
        self.slice(0, self.len)
    }
}
