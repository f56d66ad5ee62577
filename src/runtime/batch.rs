//! Many tasks submitted with one reservation and reaped together
//! ([`TypedOp::batch`](crate::TypedOp::batch), a slot a task, and
//! [`TypedOp::packed`](crate::TypedOp::packed), up to 32 small tasks a
//! slot): one compare-and-swap of the tail for all of them, no ticket per
//! task (`docs/design/packs-and-batches.md`).

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{Error, Result, TaskError, TaskStatus};
use crate::op::Op;
use crate::proto::queue::Completed;
use crate::proto::queue::{EntryId, Queue};
use crate::proto::ring::seq_add;
use crate::runtime::handle::RingPtr;
use crate::runtime::inflight::InFlight;
use crate::runtime::liveness::Watch;
use crate::runtime::shared::Shared;
use crate::runtime::ticket::{Completion, outcome_of, status_of};
use crate::runtime::wait::reactor::Armed;
use crate::runtime::wait::strategy::{Target, WaitStrategy};
use crate::sync::{deadline_after, now};

/// Slots a wait with a deadline takes between its reads of the clock.
pub(crate) const TAKES_PER_CLOCK_READ: usize = 64;

/// What one task of a batch came to: its completion, or how its handler
/// failed (the [`TaskError`] a [`Ticket`](crate::Ticket) reports as
/// [`Error::Task`]).
pub type TaskResult = std::result::Result<Completion, TaskError>;

/// The handle of a batch of tasks of one op, in submission order.
///
/// Reap them together ([`Batch::wait`]; how the thread waits:
/// [`Batch::with_wait`]), as they come ([`Batch::poll`], then
/// [`Batch::results`]), or `.await` it (a `Batch` is a
/// [`Future`](std::future::Future), woken by the runtime's completion
/// thread). Like a [`Ticket`](crate::Ticket), a batch may
/// be dropped unread (its slots are reclaimed) and may outlive its runtime.
#[must_use = "a batch is the only way to its tasks' results (dropping it lets them run unobserved)"]
pub struct Batch {
    pub(crate) ring: RingPtr,
    op: Op,
    /// The first task's sequence number; the others follow it.
    first: u64,
    /// Per task: its result once taken.
    results: Vec<Option<TaskResult>>,
    /// Tasks per slot: 1, or `PACK_TASKS` for packs (the last slot holds
    /// the rest).
    per_slot: usize,
    /// Tasks before this index are all taken.
    reaped: usize,
    /// Tasks taken so far.
    done: usize,
    /// Orphan shares held: one per task taken or dropped after the runtime
    /// was (`Take::Orphaned`); given back on drop.
    shares: u64,
    /// How its waits wait (`None`: the runtime's strategy).
    wait: Option<WaitStrategy>,
    /// A future's interest with the completion thread, while it waits.
    pub(crate) interest: Armed,
    /// Its tasks' count among the tasks in flight of whoever handed it out
    /// (a pool member's load), until all are taken.
    held: Option<InFlight>,
    /// Its first slot's trace entry; the others follow it (`crate::trace`).
    entry: EntryId,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("op", &self.op)
            .field("len", &self.results.len())
            .field("first", &self.first)
            .field("packed", &(self.per_slot > 1))
            .field("reaped", &self.reaped)
            .finish()
    }
}

impl Batch {
    /// The batch, counted in flight by `guard` until all its results are
    /// taken or it is dropped.
    pub(crate) fn held(mut self, guard: InFlight) -> Self {
        if self.done < self.len() {
            self.held = Some(guard);
        }
        self
    }

    pub(crate) fn new(
        ring: RingPtr,
        op: Op,
        first: u64,
        n: usize,
        per_slot: usize,
        entry: EntryId,
    ) -> Self {
        Self {
            ring,
            op,
            first,
            results: vec![None; n],
            per_slot,
            reaped: 0,
            done: 0,
            shares: 0,
            wait: None,
            interest: Armed::default(),
            held: None,
            entry,
        }
    }

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

    /// The ring its tasks are in (see [`Builder::rings`](crate::Builder::rings)).
    pub fn ring(&self) -> usize {
        self.ring.ring
    }

    /// The same batch, whose waits ([`Batch::wait`], [`Batch::wait_timeout`])
    /// use `strategy` instead of the runtime's
    /// ([`Builder::wait_strategy`](crate::Builder::wait_strategy)).
    pub fn with_wait(mut self, strategy: WaitStrategy) -> Self {
        self.wait = Some(strategy);
        self
    }

    /// The sequence number of each slot the batch took, in order
    /// (consecutive): one per task, or one per 32 tasks for a packed batch.
    pub fn seqs(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.slots() as u64).map(|k| seq_add(self.first, k))
    }

    /// Takes every completion that has arrived; returns how many of the
    /// batch's tasks are done. Never blocks. Errors: what ended the runtime
    /// before the batch's tasks completed (a device fault,
    /// [`Error::KernelStopped`](crate::Error::KernelStopped),
    /// [`Error::Cancelled`](crate::Error::Cancelled)).
    pub fn poll(&mut self) -> Result<usize> {
        self.take_arrived();
        // With every task taken, the runtime's memory may be gone.
        if self.done < self.len() {
            let shared = self.ring.shared();
            if let Err(e) = shared.look(now()) {
                return self.take_or(e);
            }
        }
        Ok(self.done)
    }

    /// Takes every completion that has arrived.
    fn take_arrived(&mut self) {
        for d in self.reaped / self.per_slot..self.slots() {
            self.take_slot(d);
        }
        self.advance();
    }

    /// What a look at the runtime's health that found `e` returns: every
    /// task done if the last ones completed in the meantime (a stop or
    /// cancel is latched once the kernel has exited, after the completions
    /// of every task it ran were written), else `e`.
    pub(crate) fn take_or(&mut self, e: Error) -> Result<usize> {
        self.take_arrived();
        if self.done == self.len() {
            Ok(self.done)
        } else {
            Err(e)
        }
    }

    /// The results taken so far, in submission order (`None`: not yet).
    pub fn results(&self) -> &[Option<TaskResult>] {
        &self.results
    }

    /// Waits for every task (as its [`WaitStrategy`] says, as
    /// [`Ticket::wait`](crate::Ticket::wait) does) and returns their results in
    /// submission order. Errors: a device fault, a stop, a cancel, or
    /// [`Error::Stalled`] if the worker of its first task not yet taken went
    /// silent past the stall bound; the
    /// batch then keeps what it collected ([`Batch::results`]) and may be
    /// waited on again.
    pub fn wait(&mut self) -> Result<Vec<TaskResult>> {
        self.wait_until(None)
    }

    /// As [`Batch::wait`], for at most `timeout`: [`Error::Timeout`] leaves
    /// the batch pending, with what it collected so far in
    /// [`Batch::results`], and a later wait goes on from there. Completions
    /// that all arrived are collected against the deadline too (a batch
    /// may have millions of slots, each a take): a wait collects at least
    /// one run of them, then stops at the deadline. A timeout too long to
    /// add to now (such as `Duration::MAX`) waits without a deadline.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use std::time::Duration;
    /// use pkq::{Submit, builtin::SPIN};
    /// let rt = pkq::Runtime::builder().build()?;
    /// let mut batch = rt.submit(SPIN.batch(&[1_000_000; 8]))?;
    /// while let Err(pkq::Error::Timeout) = batch.wait_timeout(Duration::from_micros(100)) {
    ///     let done = batch.results().iter().filter(|r| r.is_some()).count();
    ///     println!("{done} of {} done", batch.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Vec<TaskResult>> {
        self.wait_until(deadline_after(timeout))
    }

    fn wait_until(&mut self, deadline: Option<Instant>) -> Result<Vec<TaskResult>> {
        let _range = crate::trace::nvtx::range(c"pkq wait");
        // With every task taken (or none to take), the batch owns no slot
        // and may hold no share: the runtime's memory may be gone.
        // One wait across the slots: its strategy's spin, and the probes,
        // count from the first.
        let mut since = None;
        while !self.take_in_order(deadline) {
            if deadline.is_some_and(|d| now() >= d) {
                // What ended the runtime comes before the timeout, as in a
                // wait's own look (`Shared::wait_for`).
                let health = self.ring.shared().check();
                if let Err(e) = health {
                    self.take_or(e)?;
                    return Ok(self.all_results());
                }
                return Err(Error::Timeout);
            }
            let since = *since.get_or_insert_with(now);
            let ring = self.ring;
            let how = self.wait.unwrap_or_else(|| ring.shared().settings.wait);
            // One wait per slot that ends the run taken in order: the
            // completion thread and the monitor watch that slot.
            let target = Target {
                ring: ring.ring,
                seq: self.first_untaken(),
            };
            let reaped = self.reaped;
            // SAFETY: the batch owns a slot or holds a share until its last
            // task is taken, after which neither call touches the runtime.
            // The pointer is the runtime's `Arc`'s (a `RingPtr`).
            unsafe {
                Shared::wait_for(
                    ring.shared_ptr(),
                    deadline,
                    Watch::Worker(ring.worker_of(target.seq)),
                    how,
                    Some(target),
                    Some(since),
                    || (self.take_in_order(deadline) || self.reaped != reaped).then_some(()),
                )?
            };
        }
        Ok(self.all_results())
    }

    /// The sequence number of the first slot not taken (whose completion
    /// a wait watches).
    pub(crate) fn first_untaken(&self) -> u64 {
        seq_add(self.first, (self.reaped / self.per_slot) as u64)
    }

    /// Every task's result (all taken).
    pub(crate) fn all_results(&self) -> Vec<TaskResult> {
        self.results
            .iter()
            .map(|r| r.expect("every task taken"))
            .collect()
    }

    /// The slots the batch took.
    fn slots(&self) -> usize {
        self.len().div_ceil(self.per_slot)
    }

    /// The tasks of slot `d`.
    fn tasks_of(&self, d: usize) -> std::ops::Range<usize> {
        d * self.per_slot..((d + 1) * self.per_slot).min(self.len())
    }

    /// Takes slots in order from the first not yet taken, up to the first
    /// that has not arrived (so a waiter reads one completion entry the
    /// device may still be writing, not all of them), or until `deadline`
    /// passed, read every [`TAKES_PER_CLOCK_READ`] slots (a long run of
    /// completions that all arrived takes a while to collect); returns
    /// whether all are taken.
    fn take_in_order(&mut self, deadline: Option<Instant>) -> bool {
        let mut taken = 0;
        while self.reaped < self.len() && self.take_slot(self.reaped / self.per_slot) {
            self.reaped = self.tasks_of(self.reaped / self.per_slot).end;
            taken += 1;
            if taken % TAKES_PER_CLOCK_READ == 0 && deadline.is_some_and(|d| now() >= d) {
                break;
            }
        }
        self.reaped == self.len()
    }

    /// Moves `reaped` past the slots taken.
    fn advance(&mut self) {
        while self.reaped < self.len() && self.results[self.reaped].is_some() {
            self.reaped = self.tasks_of(self.reaped / self.per_slot).end;
        }
    }

    /// Takes slot `d` if it arrived and was not taken yet; returns whether
    /// it is taken now.
    fn take_slot(&mut self, d: usize) -> bool {
        let tasks = self.tasks_of(d);
        if self.results[tasks.start].is_some() {
            return true;
        }
        let seq = seq_add(self.first, d as u64);
        // SAFETY: the slot is the batch's (not taken yet) or it holds a share.
        let take = unsafe { Queue::take_at(self.ring.queue_ptr(), seq, self.entry.nth(d)) };
        let Some(done) = take.counted(&mut self.shares) else {
            return false;
        };
        self.done += tasks.len();
        if self.done == self.len() {
            self.held = None;
        }
        fill(self.op, &mut self.results[tasks], done);
        true
    }
}

/// The results of one slot's tasks from its completion.
fn fill(op: Op, results: &mut [Option<TaskResult>], done: Completed) {
    let Completed {
        cqe,
        results: words,
        ..
    } = done;
    match words {
        // One task, or a pack the device refused whole (its status).
        None => results.fill(Some(outcome_of(op, &cqe))),
        Some(words) => {
            for (j, r) in results.iter_mut().enumerate() {
                let word = words.get(j).copied();
                *r = Some(match word {
                    Some(value) if cqe.value >> j & 1 == 0 => Ok(Completion {
                        value,
                        device_start_ns: cqe.t_start,
                        device_end_ns: cqe.t_end,
                    }),
                    // A failed task's word is its status code; a pack the
                    // device answered with fewer results than sent is
                    // corruption, reported as status 0.
                    _ => Err(TaskError {
                        op,
                        status: status_of(word.unwrap_or(0) as u8).unwrap_or(TaskStatus::Other(0)),
                    }),
                });
            }
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.interest.leave();
        for d in 0..self.slots() {
            let taken = self.results[self.tasks_of(d).start].is_some();
            let seq = seq_add(self.first, d as u64);
            // SAFETY: an untaken slot is the batch's (or it holds a share).
            if !taken && unsafe { Queue::detach_at(self.ring.queue_ptr(), seq, self.entry.nth(d)) }
            {
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
