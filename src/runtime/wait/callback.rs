//! Completion callbacks: a closure the runtime's completion thread runs
//! once a task completed (the analogue of `cudaLaunchHostFunc` and
//! `cudaStreamAddCallback`, without a stream in between).

use crate::error::{Error, Result};
use crate::runtime::liveness::Watch;
use crate::runtime::shared::Shared;
use crate::runtime::ticket::{Completion, Ticket};
use crate::runtime::wait::reactor::{Interest, Wake};
use crate::sync::Mutex;

impl Ticket {
    /// Runs `f` with the task's result once it completed, on the runtime's
    /// completion thread (started by the first callback, future or parked
    /// wait), and consumes the ticket.
    ///
    /// `f` gets what [`Ticket::wait`] would return: the completion, the
    /// handler's failure ([`Error::Task`]), or the error that ended the
    /// wait (a device fault, a stop or cancel, or [`Error::Stalled`], after
    /// which the task is left to finish unobserved). If the runtime was
    /// dropped while the task was still pending (a drop whose drain ran
    /// past the stop timeout: the task may still complete, unobserved), `f`
    /// gets the error that ended the runtime (such as
    /// [`Error::KernelStopped`](crate::Error::KernelStopped) once its kernel
    /// exited), or [`Error::Closed`](crate::Error::Closed) where none was
    /// known. It runs exactly once.
    /// Where no completion thread can take it, `f` runs on the calling
    /// thread before `on_complete` returns, once the task is done: for a
    /// ticket that already has its result, after its runtime was dropped
    /// (which drained the tasks first, so callbacks registered before the
    /// drop ran on the completion thread), or if the OS refused the thread.
    ///
    /// A panicking `f` does not take the runtime down, nor unwind into the
    /// caller: the panic is caught wherever `f` runs, and so is a panic of
    /// its payload's own `Drop` (that payload is then leaked); on the
    /// completion thread it is counted
    /// ([`Runtime::callback_panics`](crate::Runtime::callback_panics)), on
    /// the calling thread it is not.
    /// Every callback of a runtime runs on the same thread (each lane of it
    /// has a thread of its own: [`Builder::add_lane`](crate::Builder::add_lane)),
    /// one after another, so a long one delays the others and every parked
    /// waiter and future of the runtime; hand long work to another thread. A
    /// callback must not block on a future of its runtime: the thread that
    /// would wake it is the one it blocks, and it never wakes. A wait there
    /// with [`WaitStrategy::Park`](crate::WaitStrategy::Park) ends, but
    /// only by its own look every 50 ms. Nor may
    /// callbacks of two runtimes each drop the other runtime (each drop
    /// waits for the other's completion thread). An IO task's output
    /// reaches [`Ticket::on_output`]'s callback, not this one's.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use std::sync::mpsc;
    /// let rt = pkq::Runtime::builder().build()?;
    /// let (tx, rx) = mpsc::channel();
    /// use pkq::{Submit, builtin::ECHO};
    /// rt.submit(ECHO.args(&42))?.on_complete(move |result| {
    ///     let _ = tx.send(result.map(|c| c.value));
    /// });
    /// assert_eq!(rx.recv().unwrap()?, 42);
    /// # Ok(()) }
    /// ```
    pub fn on_complete(self, f: impl FnOnce(Result<Completion>) + Send + 'static) {
        self.when_done(move |result, _| f(result));
    }

    /// [`Ticket::on_complete`] for an IO task ([`TypedOp::io`](crate::TypedOp::io)):
    /// `f` gets what [`Ticket::wait_output`] would return, the completion
    /// and the bytes the handler wrote (empty for a task that wrote none, or
    /// that was not an IO task), or the error. Runs as `on_complete` says.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::builtin::{COPY_IO, CopyIoArgs};
    /// use pkq::{Runtime, Submit};
    /// use std::sync::mpsc;
    /// let rt = Runtime::builder().io(64, 64).build()?;
    /// let (tx, rx) = mpsc::channel();
    /// let args = CopyIoArgs { out_len: 4, key: 0 };
    /// rt.submit(COPY_IO.io(&args, b"ping"))?.on_output(move |result| {
    ///     let _ = tx.send(result.map(|(_, out)| out));
    /// });
    /// assert_eq!(rx.recv().unwrap()?, b"ping");
    /// # Ok(()) }
    /// ```
    pub fn on_output(self, f: impl FnOnce(Result<(Completion, Vec<u8>)>) + Send + 'static) {
        self.when_done(move |result, output| f(result.map(|c| (c, output))));
    }

    /// Runs `f` with the result and the output once the task is done (see
    /// [`Ticket::on_complete`]).
    fn when_done(mut self, f: impl FnOnce(Result<Completion>, Vec<u8>) + Send + 'static) {
        // Taken already: the runtime's memory may be gone; nothing to wait
        // for. A panic of `f` is caught as on the other paths (not
        // counted: that would touch the runtime).
        if let Some(done) = self.taken() {
            let output = self.take_output();
            drop(self);
            super::reactor::run_caught(move || f(done, output));
            return;
        }
        self.interest.leave();
        let (ring, seq) = (self.ring_ptr(), self.seq());
        let watch = Watch::Worker(ring.worker_of(seq));
        let mut ticket = self;
        let run = move |why: Option<Error>| {
            let result = match ticket.try_result() {
                Ok(Some(c)) => Ok(c),
                Err(e) => Err(e),
                // Fired for a stall or a fault with the task pending
                // (unless it completed since).
                Ok(None) if why.is_some() => ticket.take_or(why.expect("some")),
                // Run here because no completion thread takes it (the
                // runtime was dropped, or no thread could be started):
                // wait for the task.
                Ok(None) => ticket.wait_timeout(std::time::Duration::MAX),
            };
            // The ticket goes first: a pending one (a stall) lets go of its
            // slot before `f` runs, whatever `f` does.
            let output = ticket.take_output();
            drop(ticket);
            f(result, output);
        };
        let interest = Interest::new(
            ring.ring,
            seq,
            watch,
            Wake::Callback(Mutex::new(Some(Box::new(run)))),
        );
        // SAFETY: the ticket owns its slot or holds a share (it is in the
        // closure, which the interest holds), and the pointer is the
        // runtime's `Arc`'s (a `RingPtr`).
        if let Err(refused) = unsafe { Shared::arm(ring.shared_ptr(), interest) } {
            // No completion thread takes it: run it here, waiting for the
            // task. Nothing of the runtime's is touched after: the
            // ticket's take may free it (so a panic of `f` here is caught,
            // not counted).
            refused.fire(None, &crate::sync::AtomicU64::new(0));
        }
    }
}
