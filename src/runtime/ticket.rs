//! Tickets: a submitted task's handle, and its completion.

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{Error, Result, TaskError, TaskStatus};
use crate::op::Op;
use crate::proto::queue::{Completed, EntryId, Queue};
use crate::proto::slot::Cqe;
use crate::runtime::handle::RingPtr;
use crate::runtime::inflight::InFlight;
use crate::runtime::liveness::Watch;
use crate::runtime::shared::Shared;
use crate::runtime::wait::reactor::Armed;
use crate::runtime::wait::strategy::{Target, WaitStrategy};
use crate::sync::{deadline_after, now};

/// A finished task's inline result and the device's timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The handler's 8-byte result.
    pub value: u64,
    /// The GPU's `%globaltimer` (ns) when the task started: its worker had
    /// the whole slot, and the task before it on that worker had completed.
    pub device_start_ns: u64,
    /// The GPU's `%globaltimer` (ns) when the handler returned.
    pub device_end_ns: u64,
}

impl Completion {
    /// How long the handler ran on the device, by the GPU's clock.
    pub fn device_time(&self) -> Duration {
        Duration::from_nanos(self.device_end_ns.saturating_sub(self.device_start_ns))
    }
}

/// The handle of one submitted task.
///
/// Wait for it ([`Ticket::wait`], [`Ticket::wait_timeout`]; how the thread
/// waits: [`Ticket::with_wait`]), poll it ([`Ticket::try_result`]), `.await`
/// it (a `Ticket` is a [`Future`](std::future::Future), woken by the
/// runtime's completion thread, with any executor; where there is none, as
/// [`WaitStrategy::Park`] says, it wakes itself), or hand it a callback
/// ([`Ticket::on_complete`]). Its slot in the ring is reused once the task
/// completed; a completion not yet read then waits for its ticket on the
/// host, so holding tickets never blocks `submit`.
///
/// A ticket may outlive its [`Runtime`](crate::Runtime): shutdown drains
/// the submitted tasks first, so the result is there to read once the
/// drain finished within [`Builder::stop_timeout`](crate::Builder::stop_timeout);
/// a task it left undone (past that timeout, or after a cancel) ends the
/// wait with [`Error::KernelStopped`](crate::Error::KernelStopped) or
/// [`Error::Cancelled`](crate::Error::Cancelled). A ticket
/// counts no reference to the runtime (a count would cost two locked
/// instructions a task); a dropped runtime hands its memory to the tickets and batches
/// whose tasks it still holds, and the last of them to read or drop its
/// task frees it.
#[must_use = "a ticket is the only way to the task's result (dropping it lets the task run unobserved)"]
pub struct Ticket {
    ring: RingPtr,
    seq: u64,
    op: Op,
    /// Set once the completion was taken (the slot is free then).
    outcome: Option<std::result::Result<Completion, TaskError>>,
    /// An IO task's output, once taken.
    output: Option<Box<[u8]>>,
    /// Orphan shares held (0 or 1): the runtime was dropped first
    /// (`Take::Orphaned`); given back on drop.
    shares: u64,
    /// How its waits wait (`None`: the runtime's strategy).
    wait: Option<WaitStrategy>,
    /// A future's interest with the completion thread, while it waits.
    pub(crate) interest: Armed,
    /// Its count among the tasks in flight of whoever handed it out (a
    /// pool member's load), until its result is taken.
    held: Option<InFlight>,
    /// Its trace entry, closed when its completion is taken (`crate::trace`).
    entry: EntryId,
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("seq", &self.seq)
            .field("op", &self.op)
            .field("outcome", &self.outcome)
            .finish()
    }
}

impl Ticket {
    pub(crate) fn new(ring: RingPtr, seq: u64, op: Op, entry: EntryId) -> Self {
        Self {
            ring,
            seq,
            op,
            outcome: None,
            output: None,
            shares: 0,
            wait: None,
            interest: Armed::default(),
            held: None,
            entry,
        }
    }

    /// The ticket, counted in flight by `guard` until its result is taken
    /// or it is dropped.
    pub(crate) fn held(mut self, guard: InFlight) -> Self {
        self.held = Some(guard);
        self
    }

    /// The result, if it was taken already (the runtime's memory may then
    /// be gone: nothing else of the ticket's may be used).
    pub(crate) fn taken(&self) -> Option<Result<Completion>> {
        self.outcome.map(|o| o.map_err(Into::into))
    }

    /// The ring the task is in, as the handles hold it.
    pub(crate) fn ring_ptr(&self) -> RingPtr {
        self.ring
    }

    /// The task's sequence number: its position in its ring's submission
    /// order (see [`Builder::rings`](crate::Builder::rings)).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The ring the task is in (see [`Builder::rings`](crate::Builder::rings)).
    pub fn ring(&self) -> usize {
        self.ring.ring
    }

    /// The task's op.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The same ticket, whose waits ([`Ticket::wait`],
    /// [`Ticket::wait_timeout`], [`Ticket::wait_output`]) use `strategy`
    /// instead of the runtime's ([`Builder::wait_strategy`](crate::Builder::wait_strategy)).
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Runtime, Submit, WaitStrategy, builtin::SPIN};
    /// let rt = Runtime::builder().build()?;
    /// // A long task: sleep while it runs rather than spin.
    /// let long = rt.submit(SPIN.args(&2_000_000))?.with_wait(WaitStrategy::Park);
    /// long.wait()?;
    /// # Ok(()) }
    /// ```
    pub fn with_wait(mut self, strategy: WaitStrategy) -> Self {
        self.wait = Some(strategy);
        self
    }

    /// The result if the task completed, `None` if not yet. Never blocks.
    /// Errors: [`Error::Task`](crate::Error::Task) if its handler failed;
    /// what ended the runtime before the task completed (a device fault,
    /// [`Error::KernelStopped`](crate::Error::KernelStopped),
    /// [`Error::Cancelled`](crate::Error::Cancelled)), as a liveness probe
    /// (at most one per probe interval) or the stop found it.
    pub fn try_result(&mut self) -> Result<Option<Completion>> {
        if let Some(o) = self.outcome {
            return Ok(Some(o?));
        }
        // After a take that finished the task, the runtime's memory may be
        // gone: only the outcome is read from then on.
        if let Some(done) = self.take() {
            return self.finish(done).map(Some);
        }
        // A caller looping on None must learn if the kernel died.
        let shared = self.ring.shared();
        match shared.look(now()) {
            Ok(()) => Ok(None),
            Err(e) => self.take_or(e).map(Some),
        }
    }

    /// The task's completion if it arrived (taking it), else nothing.
    fn take(&mut self) -> Option<Completed> {
        // SAFETY: the ticket owns its slot (no outcome yet) or holds a share.
        let take = unsafe { Queue::take_at(self.ring.queue_ptr(), self.seq, self.entry) };
        take.counted(&mut self.shares)
    }

    /// What a look at the runtime's health that found `e` returns: the
    /// task's result if it completed in the meantime (a stop or cancel is
    /// latched once the kernel has exited, after the completions of every
    /// task it ran were written), else `e`.
    pub(crate) fn take_or(&mut self, e: Error) -> Result<Completion> {
        match self.take() {
            Some(done) => self.finish(done),
            None => Err(e),
        }
    }

    /// Waits for the task, as its [`WaitStrategy`] says (the runtime's,
    /// [`Builder::wait_strategy`](crate::Builder::wait_strategy), unless
    /// [`Ticket::with_wait`] set one). Never hangs: a device fault or a
    /// kernel that stopped serving ends the wait with an error (checked
    /// every [`Builder::probe_interval`](crate::Builder::probe_interval), 1 ms
    /// by default).
    ///
    /// Errors: [`Error::Task`](crate::Error::Task) if the handler failed; a
    /// device fault or stop; [`Error::Cancelled`](crate::Error::Cancelled);
    /// [`Error::Stalled`](crate::Error::Stalled) if the task's worker went
    /// silent past the stall bound (the task is then left to finish
    /// unobserved: keep the ticket with [`Ticket::wait_timeout`] instead).
    pub fn wait(mut self) -> Result<Completion> {
        self.wait_until(None)
    }

    /// [`Ticket::wait`] for an IO task ([`TypedOp::io`](crate::TypedOp::io)):
    /// its completion and its output (empty for a task that wrote none, a
    /// NOP, or a task that was not an IO task). Errors as [`Ticket::wait`]:
    /// a failed task is [`Error::Task`](crate::Error::Task), and its output
    /// (empty) is dropped with the ticket; [`Ticket::try_result`] then
    /// [`Ticket::output`] keep it.
    pub fn wait_output(mut self) -> Result<(Completion, Vec<u8>)> {
        let c = self.wait_until(None)?;
        Ok((c, self.take_output()))
    }

    /// The output [`Ticket::output`] holds, taken (empty where it holds
    /// none).
    pub(crate) fn take_output(&mut self) -> Vec<u8> {
        self.output.take().map(Vec::from).unwrap_or_default()
    }

    /// An IO task's output, once the ticket has its result (from
    /// [`Ticket::try_result`] or [`Ticket::wait_timeout`]): the bytes the
    /// handler wrote, empty for an IO task that wrote none or failed.
    /// `None` before, and for a NOP or a task that was not an IO task.
    pub fn output(&self) -> Option<&[u8]> {
        self.output.as_deref()
    }

    /// Waits at most `timeout`; [`Error::Timeout`](crate::Error::Timeout) leaves the ticket pending,
    /// to be waited on again.
    /// [`Error::Stalled`](crate::Error::Stalled) also leaves it pending.
    /// A timeout too long to add to now (such as `Duration::MAX`) waits
    /// without a deadline.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Completion> {
        self.wait_until(deadline_after(timeout))
    }

    /// Waits, watching the task's worker for a stall.
    fn wait_until(&mut self, deadline: Option<Instant>) -> Result<Completion> {
        let _range = crate::trace::nvtx::range(c"pkq wait");
        if let Some(o) = self.outcome {
            // Taken: the runtime's memory may be gone.
            return Ok(o?);
        }
        let watch = Watch::Worker(self.ring.worker_of(self.seq));
        self.wait_watching(deadline, watch)
    }

    pub(crate) fn wait_watching(
        &mut self,
        deadline: Option<Instant>,
        watch: Watch,
    ) -> Result<Completion> {
        if let Some(o) = self.outcome {
            return Ok(o?);
        }
        let (ring, seq, entry, shares) = (self.ring, self.seq, self.entry, &mut self.shares);
        let how = self.wait.unwrap_or_else(|| ring.shared().settings.wait);
        let target = Target {
            ring: ring.ring,
            seq,
        };
        // SAFETY: the ticket owns its slot (no outcome yet) or holds a
        // share until `take_at` yields its task, after which neither call
        // touches the runtime; so for each `take_at` in the loop. The
        // pointer is the runtime's `Arc`'s (a `RingPtr`).
        let cqe = unsafe {
            Shared::wait_for(
                ring.shared_ptr(),
                deadline,
                watch,
                how,
                Some(target),
                None,
                || Queue::take_at(ring.queue_ptr(), seq, entry).counted(shares),
            )?
        };
        self.finish(cqe)
    }

    fn finish(&mut self, done: Completed) -> Result<Completion> {
        let outcome = outcome_of(self.op, &done.cqe);
        self.outcome = Some(outcome);
        self.held = None;
        self.output = done.output;
        Ok(outcome?)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.interest.leave();
        // SAFETY: without an outcome the ticket owns its slot or holds a
        // share; it touches the runtime after this only to give back shares.
        if self.outcome.is_none()
            && unsafe { Queue::detach_at(self.ring.queue_ptr(), self.seq, self.entry) }
        {
            self.shares += 1;
        }
        if self.shares > 0 {
            // SAFETY: the shares are this ticket's, and it is done with the
            // runtime's memory.
            unsafe { self.ring.release(self.shares) };
        }
    }
}

/// The status a completion entry's code names; `None` for success.
pub(crate) fn status_of(code: u8) -> Option<TaskStatus> {
    use crate::layout::{STATUS_BAD_ARGS, STATUS_OK, STATUS_STOPPED, STATUS_UNKNOWN_OP};
    match code {
        STATUS_OK => None,
        STATUS_UNKNOWN_OP => Some(TaskStatus::UnknownOp),
        STATUS_BAD_ARGS => Some(TaskStatus::BadArgs),
        STATUS_STOPPED => Some(TaskStatus::Stopped),
        other => Some(TaskStatus::Other(other)),
    }
}

/// A completion entry as the task's result.
pub(crate) fn outcome_of(op: Op, cqe: &Cqe) -> std::result::Result<Completion, TaskError> {
    match status_of(cqe.status) {
        None => Ok(Completion {
            value: cqe.value,
            device_start_ns: cqe.t_start,
            device_end_ns: cqe.t_end,
        }),
        Some(status) => Err(TaskError { op, status }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{
        STATUS_BAD_ARGS, STATUS_OK, STATUS_STOPPED, STATUS_UNKNOWN_OP, STATUS_USER,
    };

    #[test]
    fn status_codes_are_named() {
        assert_eq!(status_of(STATUS_OK), None);
        assert_eq!(status_of(STATUS_UNKNOWN_OP), Some(TaskStatus::UnknownOp));
        assert_eq!(status_of(STATUS_BAD_ARGS), Some(TaskStatus::BadArgs));
        assert_eq!(status_of(STATUS_STOPPED), Some(TaskStatus::Stopped));
        assert_eq!(status_of(STATUS_USER), Some(TaskStatus::Other(STATUS_USER)));
    }
}
