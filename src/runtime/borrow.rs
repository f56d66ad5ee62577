//! Calls that lend the device a borrow of the caller's memory (device
//! buffers, device state) for one task: [`Lane::call_on_buffers`], and the
//! wait they share, which returns only once the task completed or the
//! kernel is known to have stopped.

use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::CudaStream;

use crate::cuda::mapped::is_host_stream;
use crate::error::{Error, Result, TaskStatus};
use crate::ops::TypedOp;
use crate::runtime::buffers::Lent;
use crate::runtime::lane::Lane;
use crate::runtime::liveness::Watch;
use crate::runtime::submit::Submit;
use crate::runtime::ticket::{Completion, Ticket};

impl Lane {
    /// [`Error::InvalidArgument`] unless every stream's context is the
    /// runtime's (the device's primary context: the streams of an
    /// [`SmPartition`](crate::SmPartition)'s application context are
    /// refused too).
    pub(crate) fn same_context<'s>(
        &self,
        op: &str,
        streams: impl IntoIterator<Item = &'s Arc<CudaStream>>,
    ) -> Result<()> {
        let ours = self.shared.device.engine.cuda().map(|k| k.cu_ctx());
        let of_ours =
            |s: &Arc<CudaStream>| ours.is_some_and(|ctx| crate::cuda::memory::same_context(s, ctx));
        if streams.into_iter().all(of_ours) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{op} buffers must live in the runtime's context (device {}'s primary context)",
                self.shared.settings.device
            )))
        }
    }

    /// Runs one task of `op` on device buffers and waits for it: the core of
    /// every safe buffer call here, for writing your own (see
    /// `examples/custom_handler`). In order: [`Error::InvalidArgument`] unless
    /// every stream is of the runtime's context; waits for work queued on
    /// the streams (`synchronize`), a [`HostBuffer`](crate::HostBuffer)'s
    /// included (the built-in calls, which know a host buffer from a
    /// device buffer on its stream, leave a host buffer's out); submits
    /// (marked
    /// [`Task::writing_host_memory`](crate::Task::writing_host_memory) where
    /// a stream is a host buffer's); waits for the completion,
    /// unwatched for stalls. A wait that ends otherwise (a fault, a stop, a
    /// wide task cut short: [`TaskStatus::Stopped`], whose group may still
    /// run it) stops the kernel and returns only once it is known to have
    /// stopped (it exited; or, found dead by a device fault, none of its
    /// pollers moved for the stall bound or the stop timeout, whichever is
    /// shorter; or aborts the process if the kernel has not exited once the
    /// stop's wait and then one more stop timeout are over), so the caller's
    /// borrows never end while the task could still run. The stream
    /// synchronizations make it slower than an unchecked call; for state a
    /// handler keeps between tasks, [`Lane::call_on_state`] needs none
    /// (`pkq-bench/results/custom_handler.json` compares the three).
    ///
    /// # Safety
    /// Every device address in `args` must be valid for what `op`'s handler
    /// does with it, in the runtime's context, and belong to buffers the
    /// caller holds borrowed for this call (exclusively where the handler
    /// writes), with their `device_ptr` guards alive, and whose streams are
    /// among `streams`.
    pub unsafe fn call_on_buffers<A: Pod>(
        &self,
        op: &TypedOp<A>,
        args: &A,
        streams: &[&Arc<CudaStream>],
    ) -> Result<Completion> {
        self.same_context(op.name(), streams.iter().copied())?;
        for (i, s) in streams.iter().enumerate() {
            if !streams[..i].contains(s) {
                crate::cuda::memory::synchronize(s)?;
            }
        }
        let host = streams.iter().any(|s| is_host_stream(s));
        // SAFETY: the caller's contract (above).
        unsafe { self.submit_borrowing(op, args, host) }
    }

    /// [`Lane::call_on_buffers`] for the built-in calls, which know each
    /// buffer: the streams of device buffers are synchronized, a host
    /// buffer's is not (host memory, which the host orders: `HostBuffer`),
    /// and the task writes host memory where a buffer is a host buffer.
    ///
    /// # Safety
    /// As [`Lane::call_on_buffers`]'s, the buffers being `lent`'s.
    pub(crate) unsafe fn call_on_lent<A: Pod>(
        &self,
        op: &TypedOp<A>,
        args: &A,
        lent: &[&Lent<'_>],
    ) -> Result<Completion> {
        self.same_context(op.name(), lent.iter().map(|l| l.stream))?;
        for (i, l) in lent.iter().enumerate() {
            let seen = lent[..i].iter().any(|p| !p.host && p.stream == l.stream);
            if !l.host && !seen {
                crate::cuda::memory::synchronize(l.stream)?;
            }
        }
        // SAFETY: the caller's contract (above).
        unsafe { self.submit_borrowing(op, args, lent.iter().any(|l| l.host)) }
    }

    /// Submits the task of a call on buffers (writing host memory where
    /// `host`) and waits for it ([`Lane::wait_borrowing`]).
    ///
    /// # Safety
    /// As [`Lane::call_on_buffers`]'s, once its streams are synchronized.
    unsafe fn submit_borrowing<A: Pod>(
        &self,
        op: &TypedOp<A>,
        args: &A,
        host: bool,
    ) -> Result<Completion> {
        // SAFETY: the caller vouches for the addresses (see above).
        let task = unsafe { op.args(args).unchecked() };
        // A host buffer among them: what the handler writes there is
        // visible to the host once it sees the completion.
        let task = if host {
            task.writing_host_memory()
        } else {
            task
        };
        let mut ticket = self.submit(task)?;
        self.wait_borrowing(&mut ticket)
    }

    /// Waits for a task that uses memory the caller holds borrowed for the
    /// call: unwatched for stalls, and returning otherwise than by its
    /// completion (a wide task's `Stopped` included: its group may still
    /// run it) only once the kernel is known to have stopped
    /// (`Device::at_rest` after its end;
    /// or aborting the process if it has not exited once the stop's wait,
    /// and then one more stop timeout, are over), so the borrows never end
    /// while the task could still run.
    pub(crate) fn wait_borrowing(&self, ticket: &mut Ticket) -> Result<Completion> {
        match ticket.wait_watching(None, Watch::Nothing) {
            Ok(c) => Ok(c),
            // A wide task cut short (Stopped) may still run on its group's
            // other blocks: that one waits for the kernel below.
            Err(Error::Task(e)) if e.status != TaskStatus::Stopped => Err(Error::Task(e)),
            Err(e) => {
                // A fault can be latched while the kernel still lives, and
                // the task may yet run: the borrows end only once the kernel
                // is known to have stopped. The stop may have been another
                // thread's, whose wait for the exit timed out before: this
                // call waits its own stop timeout for it too.
                let shared = &self.shared;
                let _ = shared.stop(false);
                let stop_timeout = shared.settings.stop_timeout;
                let deadline = crate::sync::now().checked_add(stop_timeout);
                // Ended (an exit, or found dead by a fault), and nothing of
                // it runs (`at_rest`: a kernel found dead wrongly runs on).
                let ended =
                    shared.device.wait_exit(deadline).is_ok() || !shared.device.engine.is_live();
                if !ended || !shared.device.at_rest(stop_timeout, deadline) {
                    eprintln!(
                        "pkq: the resident kernel did not stop after {e}; aborting rather than \
                         release device buffers it may still use"
                    );
                    std::process::abort();
                }
                Err(e)
            }
        }
    }
}
