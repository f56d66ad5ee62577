//! Tickets and batches as futures: a poll takes what completed, and
//! otherwise arms an interest with the runtime's completion thread, which
//! wakes the task's waker once the completion (or a fault, a stall, the
//! runtime's shutdown) is there. No executor is assumed: any that polls on
//! wake-up works.
//!
//! Dropping a future mid-wait is dropping its ticket or batch: the
//! interest is left (the completion thread will not wake for it), the
//! tasks run on, and their slots are reclaimed, as for any dropped handle.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::Result;
use crate::runtime::batch::{Batch, TaskResult};
use crate::runtime::handle::RingPtr;
use crate::runtime::liveness::Watch;
use crate::runtime::shared::Shared;
use crate::runtime::ticket::{Completion, Ticket};
use crate::runtime::wait::reactor::{Armed, Interest, Wake};

/// Arms (or keeps) `slot`'s interest in task `seq` of `ring` for `cx`'s
/// waker. Where the completion thread takes no more interests (its runtime
/// was dropped, or the thread could not start) the task wakes itself: the
/// next poll finds the result or the error.
fn arm(slot: &mut Armed, ring: RingPtr, seq: u64, watch: Watch, cx: &Context<'_>) {
    if let Some(i) = slot.get() {
        let same = matches!(&i.wake, Wake::Task(w) if w.will_wake(cx.waker()));
        if same && i.seq == seq && !i.fired() {
            return;
        }
    }
    let new = Interest::new(ring.ring, seq, watch, Wake::Task(cx.waker().clone()));
    // SAFETY: the caller owns the slot of `seq` or holds a share (the
    // runtime's memory is alive), and the pointer is the runtime's `Arc`'s
    // (a `RingPtr`).
    match unsafe { Shared::arm(ring.shared_ptr(), new) } {
        Ok(armed) => slot.set(Some(armed)),
        Err(_) => {
            slot.set(None);
            cx.waker().wake_by_ref();
        }
    }
}

/// A ticket resolves to what [`Ticket::wait`] returns; awaiting `&mut
/// ticket` keeps the ticket (for [`Ticket::output`]). A stall or fault
/// error leaves the ticket pending, as [`Ticket::wait_timeout`] does.
///
/// ```no_run
/// # async fn run(rt: &pkq::Runtime) -> pkq::Result<()> {
/// use pkq::{Submit, builtin::ECHO};
/// let done = rt.submit(ECHO.args(&7))?.await?;
/// assert_eq!(done.value, 7);
/// # Ok(()) }
/// ```
impl Future for Ticket {
    type Output = Result<Completion>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (ring, seq) = (this.ring_ptr(), this.seq());
        let result = this.try_result().and_then(|done| match done {
            Some(c) => Ok(Some(c)),
            // Pending: the runtime is alive for this look (the ticket owns
            // its slot, or holds a share).
            None => match ring
                .shared()
                .check_stall(Watch::Worker(ring.worker_of(seq)))
            {
                Ok(()) => Ok(None),
                Err(e) => this.take_or(e).map(Some),
            },
        });
        match result {
            Ok(None) => {
                let watch = Watch::Worker(ring.worker_of(seq));
                arm(&mut this.interest, ring, seq, watch, cx);
                Poll::Pending
            }
            done => {
                this.interest.leave();
                Poll::Ready(done.map(|c| c.expect("some")))
            }
        }
    }
}

/// A batch resolves to what [`Batch::wait`] returns: every task's result,
/// in submission order; an error leaves the batch pending, with what it
/// collected so far in [`Batch::results`]. A poll takes every completion
/// that arrived; the completion thread wakes it for the first task not
/// yet taken.
impl Future for Batch {
    type Output = Result<Vec<TaskResult>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // Takes what arrived; pending while a task is left (its first slot
        // not taken is what the completion thread watches).
        let outcome = this.poll().and_then(|done| {
            if done == this.len() {
                return Ok(None);
            }
            let next = this.first_untaken();
            match this
                .ring
                .shared()
                .check_stall(Watch::Worker(this.ring.worker_of(next)))
            {
                Ok(()) => Ok(Some(next)),
                Err(e) => this.take_or(e).map(|_| None),
            }
        });
        match outcome {
            Ok(Some(seq)) => {
                let watch = Watch::Worker(this.ring.worker_of(seq));
                arm(&mut this.interest, this.ring, seq, watch, cx);
                Poll::Pending
            }
            done => {
                this.interest.leave();
                Poll::Ready(done.map(|_| this.all_results()))
            }
        }
    }
}
