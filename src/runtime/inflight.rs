//! A pool member's load: the tasks routed to it whose tickets or batches
//! have not finished. Each ticket or batch the pool hands out holds a
//! [`Load`] of its tasks, given back when its results are taken or it is
//! dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `n` tasks counted in a member's load until dropped.
#[derive(Debug)]
pub(crate) struct Load {
    count: Arc<AtomicUsize>,
    n: usize,
}

impl Load {
    /// Counts `n` more tasks in `count`.
    pub(crate) fn add(count: &Arc<AtomicUsize>, n: usize) -> Self {
        count.fetch_add(n, Ordering::Relaxed);
        Self {
            count: count.clone(),
            n,
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.count.fetch_sub(self.n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_counts_until_dropped() {
        let count = Arc::new(AtomicUsize::new(0));
        let a = Load::add(&count, 3);
        let b = Load::add(&count, 1);
        assert_eq!(count.load(Ordering::Relaxed), 4);
        drop(a);
        assert_eq!(count.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }
}
