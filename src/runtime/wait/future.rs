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
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::error::{Error, Result};
use crate::proto::ring::seq_add;
use crate::runtime::batch::{Batch, TaskResult};
use crate::runtime::ticket::{Completion, Ticket};
use crate::runtime::wait::reactor::{Interest, Wake};
use crate::runtime::{RingPtr, Shared, Watch};

/// Arms (or keeps) `slot`'s interest in task `seq` of `ring` for `cx`'s
/// waker. Without a completion thread (the runtime is shutting down) the
/// task wakes itself: the next poll finds the result or the error.
fn arm(slot: &mut Option<Arc<Interest>>, ring: RingPtr, seq: u64, watch: Watch, cx: &Context<'_>) {
    if let Some(i) = slot {
        let same = matches!(&i.wake, Wake::Task(w) if w.will_wake(cx.waker()));
        if same && i.seq == seq && !i.fired() {
            return;
        }
        i.leave();
    }
    let new = Interest::new(ring.ring, seq, watch, Wake::Task(cx.waker().clone()));
    // SAFETY: the caller owns the slot of `seq` (the runtime's memory is
    // alive), and the pointer is the runtime's `Arc`'s (a `RingPtr`).
    match unsafe { Shared::arm(ring.shared_ptr(), new) } {
        Ok(armed) => *slot = Some(armed),
        Err(_) => {
            *slot = None;
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
/// let done = rt.submit(pkq::Op::ECHO, &[7u64])?.await?;
/// assert_eq!(done.value, 7);
/// # Ok(()) }
/// ```
impl Future for Ticket {
    type Output = Result<Completion>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let result = this.try_result().and_then(|done| match done {
            Some(c) => Ok(Some(c)),
            // Pending: the runtime is alive for this look (the ticket owns
            // its slot, or holds a share).
            None => {
                let ring = this.ring_ptr();
                let watch = Watch::Worker(ring.worker_of(this.seq()));
                ring.shared().check_stall(watch).map(|()| None)
            }
        });
        match result {
            Ok(None) => {
                let (ring, seq) = (this.ring_ptr(), this.seq());
                let watch = Watch::Worker(ring.worker_of(seq));
                arm(&mut this.interest, ring, seq, watch, cx);
                Poll::Pending
            }
            done => {
                if let Some(i) = this.interest.take() {
                    i.leave();
                }
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
        let outcome = this.poll_taken().and_then(|next| match next {
            None => Ok(None),
            Some(seq) => this
                .ring
                .shared()
                .check_stall(Watch::AnyWorker)
                .map(|()| Some(seq)),
        });
        match outcome {
            Ok(Some(seq)) => {
                arm(&mut this.interest, this.ring, seq, Watch::AnyWorker, cx);
                Poll::Pending
            }
            Ok(None) => {
                if let Some(i) = this.interest.take() {
                    i.leave();
                }
                Poll::Ready(Ok(this.all_results()))
            }
            Err(e) => {
                if let Some(i) = this.interest.take() {
                    i.leave();
                }
                Poll::Ready(Err::<_, Error>(e))
            }
        }
    }
}

impl Batch {
    /// Takes what arrived; `None` once every task is taken, else the
    /// sequence number of the first slot not taken (whose completion the
    /// completion thread watches). Errors as [`Batch::poll`].
    fn poll_taken(&mut self) -> Result<Option<u64>> {
        let done = self.poll()?;
        Ok((done < self.len()).then(|| seq_add(self.first, (self.reaped / self.per_slot) as u64)))
    }
}
