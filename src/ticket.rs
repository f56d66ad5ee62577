//! Tickets: a submitted task's handle, and its completion.

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{Error, Result, TaskStatus};
use crate::ops::Op;
use crate::runtime::{RingArc, Watch};
use crate::slot::Cqe;

/// A finished task's inline result and the device's timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The handler's 8-byte result.
    pub value: u64,
    /// The GPU's `%globaltimer` (ns) when the worker had the whole slot.
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
/// Wait for it ([`Ticket::wait`], [`Ticket::wait_timeout`]) or poll it
/// ([`Ticket::try_result`]). Its slot in the ring is reused once the task
/// completed; a completion not yet read then waits for its ticket on the
/// host, so holding tickets never blocks `submit`. A ticket may outlive its [`Runtime`](crate::Runtime): shutdown
/// drains every submitted task first, so the result is there to read.
pub struct Ticket {
    ring: RingArc,
    seq: u64,
    op: Op,
    /// Set once the completion was taken (the slot is free then).
    outcome: Option<std::result::Result<Completion, TaskStatus>>,
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
    pub(crate) fn new(ring: RingArc, seq: u64, op: Op) -> Self {
        Self {
            ring,
            seq,
            op,
            outcome: None,
        }
    }

    /// The task's sequence number: its position in its ring's submission
    /// order (see [`Builder::rings`](crate::Builder::rings)).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The ring the task is in (for tests of how threads spread).
    #[doc(hidden)]
    pub fn ring(&self) -> usize {
        self.ring.ring
    }

    /// The task's op.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The result if the task completed, `None` if not yet. Never blocks.
    /// Errors: [`Error::Task`] if its handler failed; a device fault.
    pub fn try_result(&mut self) -> Result<Option<Completion>> {
        if let Some(o) = self.outcome {
            return self.report(o).map(Some);
        }
        match self.ring.queue().take(self.seq) {
            Some(cqe) => self.finish(cqe).map(Some),
            // A caller looping on None must learn if the kernel died.
            None => self
                .ring
                .shared
                .probe_if_due(Instant::now())
                .and_then(|()| self.ring.shared.check())
                .map(|()| None),
        }
    }

    /// Waits for the task: spins first, then yields the CPU. Never hangs:
    /// a device fault or a kernel that stopped serving ends the wait with an
    /// error (checked every millisecond).
    ///
    /// Errors: [`Error::Task`](crate::Error::Task) if the handler failed; a
    /// device fault or stop; [`Error::Cancelled`](crate::Error::Cancelled);
    /// [`Error::Stalled`](crate::Error::Stalled) if the task's worker went
    /// silent past the stall bound (the task is then left to finish
    /// unobserved: keep the ticket with [`Ticket::wait_timeout`] instead).
    pub fn wait(mut self) -> Result<Completion> {
        let watch = Watch::Worker(self.ring.worker_of(self.seq));
        self.wait_watching(None, watch)
    }

    /// Waits at most `timeout`; [`Error::Timeout`] leaves the ticket pending,
    /// to be waited on again.
    /// [`Error::Stalled`](crate::Error::Stalled) also leaves it pending.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Completion> {
        let watch = Watch::Worker(self.ring.worker_of(self.seq));
        self.wait_watching(Some(Instant::now() + timeout), watch)
    }

    pub(crate) fn wait_watching(
        &mut self,
        deadline: Option<Instant>,
        watch: Watch,
    ) -> Result<Completion> {
        if let Some(o) = self.outcome {
            return self.report(o);
        }
        let (queue, seq) = (self.ring.queue(), self.seq);
        let cqe = self
            .ring
            .shared
            .wait_for(deadline, watch, || queue.take(seq))?;
        self.finish(cqe)
    }

    fn finish(&mut self, cqe: Cqe) -> Result<Completion> {
        let outcome = outcome_of(&cqe);
        self.outcome = Some(outcome);
        self.report(outcome)
    }

    fn report(&self, outcome: std::result::Result<Completion, TaskStatus>) -> Result<Completion> {
        outcome.map_err(|status| Error::Task {
            op: self.op,
            status,
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.outcome.is_none() {
            self.ring.queue().detach(self.seq);
        }
    }
}

/// A completion entry as the task's result.
pub(crate) fn outcome_of(cqe: &Cqe) -> std::result::Result<Completion, TaskStatus> {
    match TaskStatus::from_code(cqe.status) {
        None => Ok(Completion {
            value: cqe.value,
            device_start_ns: cqe.t_start,
            device_end_ns: cqe.t_end,
        }),
        Some(status) => Err(status),
    }
}
