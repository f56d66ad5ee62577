//! Many tasks submitted with one reservation and reaped together
//! ([`Runtime::submit_batch`]): one compare-and-swap of the tail for all
//! of them, no ticket per task.

use std::fmt;
use std::time::Instant;

use bytemuck::Pod;

use crate::error::{Error, Result, TaskStatus};
use crate::ops::Op;
use crate::ring::seq_add;
use crate::runtime::{RingPtr, Runtime, Watch};
use crate::slot::SlotImage;
use crate::ticket::{Completion, outcome_of};

/// What one task of a batch came to: its completion, or the status its
/// handler reported.
pub type TaskResult = std::result::Result<Completion, TaskStatus>;

/// The handle of a batch of tasks of one op, in submission order.
///
/// Reap them together ([`Batch::wait`]) or as they come ([`Batch::poll`],
/// then [`Batch::results`]). Like a [`Ticket`](crate::Ticket), a batch may
/// be dropped unread (its slots are reclaimed) and may outlive its runtime.
pub struct Batch {
    ring: RingPtr,
    op: Op,
    /// The first task's sequence number; the others follow it.
    first: u64,
    /// Per task: its result once taken.
    results: Vec<Option<TaskResult>>,
    /// Tasks before this index are all taken.
    reaped: usize,
    /// Orphan shares held: one per task taken or dropped after the runtime
    /// was (`Take::Orphaned`); given back on drop.
    shares: u64,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("op", &self.op)
            .field("len", &self.results.len())
            .field("first", &self.first)
            .field("reaped", &self.reaped)
            .finish()
    }
}

impl Runtime {
    /// Submits one task of `op` per element of `args` (each at most 48
    /// bytes, at most the ring's capacity of them): all or none, with one
    /// compare-and-swap for the consecutive slots they take, waiting while
    /// the ring has not that many free. The tasks are spread over the
    /// workers as single submits are.
    ///
    /// Refuses, with nothing submitted: more tasks than the capacity
    /// ([`Error::InvalidArgument`]: split the batch); ops whose handler
    /// dereferences device addresses ([`Error::UncheckedOp`]); arguments over
    /// 48 bytes ([`Error::PayloadTooLarge`]); after shutdown,
    /// [`Error::Closed`]; a device fault, a stop, or [`Error::Stalled`]
    /// while it waited for room.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Op, Runtime};
    /// let rt = Runtime::builder().build()?;
    /// let args: Vec<[u64; 1]> = (0..256).map(|i| [i]).collect();
    /// let results = rt.submit_batch(Op::ECHO, &args)?.wait()?;
    /// for (i, r) in results.iter().enumerate() {
    ///     assert_eq!(r.as_ref().unwrap().value, i as u64);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn submit_batch<A: Pod>(&self, op: Op, args: &[A]) -> Result<Batch> {
        let ring = self.ring();
        let shared = ring.shared();
        shared.ops.refuse(op)?;
        // Every element has the same size: one check for all.
        SlotImage::check_len(std::mem::size_of::<A>())?;
        shared.check_open()?;
        let n = args.len();
        let queue = ring.queue();
        if n > queue.geometry().capacity() {
            return Err(Error::InvalidArgument(format!(
                "a batch of {n} tasks is larger than the ring's {} slots: split it",
                queue.geometry().capacity()
            )));
        }
        let first = if n == 0 {
            0
        } else {
            shared.reserve(true, || queue.try_reserve_many(n))?
        };
        // Nothing between the reservation and the stores can fail.
        queue.publish_run(first, op.0, args);
        Ok(Batch {
            ring,
            op,
            first,
            results: vec![None; n],
            reaped: 0,
            shares: 0,
        })
    }
}

impl Batch {
    /// The number of tasks.
    pub fn len(&self) -> usize {
        self.results.len()
    }

    /// Whether the batch has no tasks.
    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    /// The op of its tasks.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The sequence number of each task, in order (consecutive).
    pub fn seqs(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len() as u64).map(|k| seq_add(self.first, k))
    }

    /// Takes every completion that has arrived; returns how many of the
    /// batch's tasks are done. Never blocks. Errors: a device fault, a
    /// stop, a cancel.
    pub fn poll(&mut self) -> Result<usize> {
        let done = self.take_arrived();
        // With every task taken, the runtime's memory may be gone.
        if done < self.len() {
            let shared = self.ring.shared();
            shared.probe_if_due(Instant::now())?;
            shared.check()?;
        }
        Ok(done)
    }

    /// The results taken so far, in submission order (`None`: not yet).
    pub fn results(&self) -> &[Option<TaskResult>] {
        &self.results
    }

    /// Waits for every task (spinning, then yielding, as
    /// [`Ticket::wait`](crate::Ticket::wait)) and returns their results in
    /// submission order. Errors: a device fault, a stop, a cancel, or
    /// [`Error::Stalled`] if a worker went silent past the stall bound.
    pub fn wait(mut self) -> Result<Vec<TaskResult>> {
        let ring = self.ring;
        ring.shared().wait_for(None, Watch::AnyWorker, || {
            self.take_in_order().then_some(())
        })?;
        Ok(std::mem::take(&mut self.results)
            .into_iter()
            .map(|r| r.expect("every task taken"))
            .collect())
    }

    /// Takes tasks in order from the first not yet taken, up to the first
    /// that has not arrived (so a waiter reads one completion entry the
    /// device may still be writing, not all of them); returns whether all
    /// are taken.
    fn take_in_order(&mut self) -> bool {
        while self.reaped < self.len() && self.take_at(self.reaped) {
            self.reaped += 1;
        }
        self.reaped == self.len()
    }

    /// Takes what arrived, from the first task not yet taken on; returns the
    /// count of tasks taken in all.
    fn take_arrived(&mut self) -> usize {
        let mut taken = self.reaped;
        for i in self.reaped..self.len() {
            taken += usize::from(self.take_at(i));
        }
        while self.reaped < self.len() && self.results[self.reaped].is_some() {
            self.reaped += 1;
        }
        taken
    }

    /// Takes task `i` if it arrived and was not taken yet; returns whether
    /// it is taken now.
    fn take_at(&mut self, i: usize) -> bool {
        if self.results[i].is_none() {
            let seq = seq_add(self.first, i as u64);
            let Some(cqe) = self.ring.queue().take(seq).counted(&mut self.shares) else {
                return false;
            };
            self.results[i] = Some(outcome_of(&cqe));
        }
        true
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        for (i, r) in self.results.iter().enumerate() {
            if r.is_none() && self.ring.queue().detach(seq_add(self.first, i as u64)) {
                self.shares += 1;
            }
        }
        if self.shares > 0 {
            // SAFETY: the shares are this batch's, and it is done with the
            // runtime's memory.
            unsafe { self.ring.release(self.shares) };
        }
    }
}
