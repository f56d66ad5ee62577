//! Tasks counted in flight by whoever handed them out (a pool counts each
//! device's load so): a ticket or batch holds an [`InFlight`] of its tasks,
//! given back when its results are taken or it is dropped.

use std::sync::Arc;

use crate::sync::{AtomicUsize, Ordering};

/// `n` tasks counted in a count of tasks in flight until dropped.
#[doc(hidden)]
#[derive(Debug)]
pub struct InFlight {
    count: Arc<AtomicUsize>,
    n: usize,
}

impl InFlight {
    /// Counts `n` more tasks in `count`.
    pub(crate) fn add(count: &Arc<AtomicUsize>, n: usize) -> Self {
        count.fetch_add(n, Ordering::Relaxed);
        Self {
            count: count.clone(),
            n,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.count.fetch_sub(self.n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_count_until_dropped() {
        let count = Arc::new(AtomicUsize::new(0));
        let a = InFlight::add(&count, 3);
        let b = InFlight::add(&count, 1);
        assert_eq!(count.load(Ordering::Relaxed), 4);
        drop(a);
        assert_eq!(count.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }
}
