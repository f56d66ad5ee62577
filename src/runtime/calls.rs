//! The safe calls that run ops on device buffers (cudarc's), built-in or
//! a module's own ([`Runtime::call_on_buffers`]): lengths checked on the
//! host, the buffers' streams synchronized, the task waited for.

use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::CudaStream;

use crate::runtime::buffers::{DeviceBuffer, DeviceBufferMut};

use crate::error::{Error, Result};
use crate::ops::builtin::*;
use crate::ops::op::{AXPY_MAX_N, AxpyArgs};
use crate::ops::typed::TypedOp;
use crate::runtime::ticket::Completion;
use crate::runtime::{Runtime, Watch};

fn invalid(what: String) -> Error {
    Error::InvalidArgument(what)
}

impl Runtime {
    /// [`Error::InvalidArgument`] unless every stream's context is the
    /// runtime's (the device's primary context: the streams of an
    /// [`SmPartition`](crate::SmPartition)'s application context are
    /// refused too).
    fn same_context(&self, op: &str, streams: &[&Arc<CudaStream>]) -> Result<()> {
        let ours = self.shared.engine.cuda().map(|k| k.cu_ctx());
        if streams.iter().all(|s| Some(s.context().cu_ctx()) == ours) {
            Ok(())
        } else {
            Err(invalid(format!(
                "{op} buffers must live in the runtime's context (device {}'s primary context)",
                self.shared.device
            )))
        }
    }

    /// Runs one task of `op` on device buffers and waits for it: the core of
    /// every safe buffer call here, for writing your own (see
    /// `examples/custom_handler`). In order: [`Error::InvalidArgument`] unless
    /// every stream is of the runtime's context; waits for work queued on
    /// the streams (`synchronize`); submits; waits for the completion,
    /// unwatched for stalls. A wait that ends otherwise (a fault, a stop)
    /// stops the kernel and returns only once it is known to have stopped
    /// (it exited; or, found dead by a device fault, none of its pollers
    /// moved for the stall bound or the stop timeout, whichever is shorter;
    /// or aborts the process if the kernel has not exited once the stop's
    /// wait and then one more stop timeout are over), so the caller's borrows
    /// never end while the task could still run. The stream
    /// synchronizations make it slower than an unchecked call; for state a
    /// handler keeps between tasks, [`Runtime::call_on_state`] needs none
    /// (`benches/results/custom_handler.json` compares the three).
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
        self.same_context(op.name(), streams)?;
        for (i, s) in streams.iter().enumerate() {
            if !streams[..i].contains(s) {
                // In the relaxed capture mode (`with_current`): a graph that
                // another thread captures in global mode is neither broken
                // by this wait nor refuses it.
                crate::cuda::driver::with_current(s.context(), || {
                    // SAFETY: a live stream (borrowed) of the context made
                    // current around the call.
                    unsafe { cudarc::driver::result::stream::synchronize(s.cu_stream()) }
                })??;
            }
        }
        // SAFETY: the caller vouches for the addresses (see above).
        let mut ticket = unsafe { self.call_unchecked(op, args)? };
        self.wait_borrowing(&mut ticket)
    }

    /// Waits for a task that uses memory the caller holds borrowed for the
    /// call: unwatched for stalls, and returning otherwise than by its
    /// completion only once the kernel is known to have stopped
    /// ([`Shared::at_rest`](crate::runtime::Shared::at_rest) after its end;
    /// or aborting the process if it has not exited once the stop's wait,
    /// and then one more stop timeout, are over), so the borrows never end
    /// while the task could still run.
    pub(crate) fn wait_borrowing(&self, ticket: &mut crate::Ticket) -> Result<Completion> {
        match ticket.wait_watching(None, Watch::Nothing) {
            Ok(c) => Ok(c),
            Err(e @ Error::Task(_)) => Err(e),
            Err(e) => {
                // A fault can be latched while the kernel still lives, and
                // the task may yet run: the borrows end only once the kernel
                // is known to have stopped. The stop may have been another
                // thread's, whose wait for the exit timed out before: this
                // call waits its own stop timeout for it too.
                let _ = self.shared.stop(false);
                let deadline = crate::proto::sync::now().checked_add(self.shared.stop_timeout);
                // Ended (an exit, or found dead by a fault), and nothing of
                // it runs (`at_rest`: a kernel found dead wrongly runs on).
                let ended =
                    self.shared.wait_exit(deadline).is_ok() || !self.shared.engine.is_live();
                if !ended || !self.shared.at_rest(deadline) {
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

    /// `y = a * x + y` on device buffers of at most [`AXPY_MAX_N`] elements,
    /// run by one warp of the resident kernel; returns once it is done.
    ///
    /// Work queued on the buffers' own streams is waited for first (their
    /// streams are synchronized), so the task sees what came before.
    pub fn axpy(
        &self,
        a: f32,
        x: &impl DeviceBuffer<f32>,
        y: &mut impl DeviceBufferMut<f32>,
    ) -> Result<()> {
        if x.len() != y.len() || x.len() > AXPY_MAX_N {
            return Err(invalid(format!(
                "axpy needs x and y of equal length up to {AXPY_MAX_N} (got {} and {})",
                x.len(),
                y.len()
            )));
        }
        let (xs, ys) = (x.stream().clone(), y.stream().clone());
        let n = x.len() as u32;
        let (xp, _x_read) = x.device_ptr(&xs);
        let (yp, _y_write) = y.device_ptr_mut(&ys);
        let args = AxpyArgs { x: xp, y: yp, n, a };
        // SAFETY: x and y are live buffers of n f32s in this context, x
        // borrowed and y borrowed exclusively for the call.
        unsafe { self.call_on_buffers(&AXPY, &args, &[&xs, &ys]) }.map(drop)
    }

    /// Copies `src` into `dst` (equal lengths, at most [`MEMCPY_MAX_BYTES`]
    /// bytes) with one warp of the resident kernel.
    pub fn memcpy<T>(
        &self,
        dst: &mut impl DeviceBufferMut<T>,
        src: &impl DeviceBuffer<T>,
    ) -> Result<()> {
        let bytes = src.num_bytes();
        if dst.len() != src.len() || bytes > MEMCPY_MAX_BYTES {
            return Err(invalid(format!(
                "memcpy needs buffers of equal length, at most {MEMCPY_MAX_BYTES} bytes (got {} \
                 and {} elements, {bytes} bytes)",
                dst.len(),
                src.len()
            )));
        }
        let (ds, ss) = (dst.stream().clone(), src.stream().clone());
        let (sp, _read) = src.device_ptr(&ss);
        let (dp, _write) = dst.device_ptr_mut(&ds);
        let args = MemcpyArgs {
            dst: dp,
            src: sp,
            bytes: bytes as u64,
        };
        // SAFETY: two live buffers of `bytes` bytes in this context, src
        // borrowed, dst borrowed exclusively (so they do not overlap).
        unsafe { self.call_on_buffers(&MEMCPY, &args, &[&ds, &ss]) }.map(drop)
    }

    /// Sets every byte of `dst` (at most [`MEMCPY_MAX_BYTES`]) to `byte`
    /// with one warp of the resident kernel.
    pub fn memset<T>(&self, dst: &mut impl DeviceBufferMut<T>, byte: u8) -> Result<()> {
        let bytes = dst.num_bytes();
        if bytes > MEMCPY_MAX_BYTES {
            return Err(invalid(format!(
                "memset covers at most {MEMCPY_MAX_BYTES} bytes (got {bytes})"
            )));
        }
        let ds = dst.stream().clone();
        let (dp, _write) = dst.device_ptr_mut(&ds);
        let args = MemsetArgs {
            dst: dp,
            bytes: bytes as u64,
            value: byte as u32,
            reserved: 0,
        };
        // SAFETY: a live buffer of `bytes` bytes in this context, borrowed
        // exclusively.
        unsafe { self.call_on_buffers(&MEMSET, &args, &[&ds]) }.map(drop)
    }

    /// The dot product of `x` and `y` (equal lengths, at most [`DOT_MAX_N`]),
    /// accumulated in `f64` by one warp.
    pub fn dot(&self, x: &impl DeviceBuffer<f32>, y: &impl DeviceBuffer<f32>) -> Result<f64> {
        if x.len() != y.len() || x.len() > DOT_MAX_N {
            return Err(invalid(format!(
                "dot needs x and y of equal length up to {DOT_MAX_N} (got {} and {})",
                x.len(),
                y.len()
            )));
        }
        let (xs, ys) = (x.stream().clone(), y.stream().clone());
        let (xp, _x) = x.device_ptr(&xs);
        let (yp, _y) = y.device_ptr(&ys);
        let args = DotArgs {
            x: xp,
            y: yp,
            n: x.len() as u32,
            reserved: 0,
        };
        // SAFETY: two live buffers of n f32s in this context, borrowed.
        let c = unsafe { self.call_on_buffers(&DOT, &args, &[&xs, &ys])? };
        Ok(f64::from_bits(c.value))
    }

    /// The sum of `x` (at most [`DOT_MAX_N`] elements), accumulated in `f64`
    /// by one warp.
    pub fn sum(&self, x: &impl DeviceBuffer<f32>) -> Result<f64> {
        if x.len() > DOT_MAX_N {
            return Err(invalid(format!(
                "sum takes at most {DOT_MAX_N} elements (got {})",
                x.len()
            )));
        }
        let xs = x.stream().clone();
        let (xp, _x) = x.device_ptr(&xs);
        let args = DotArgs {
            x: xp,
            y: 0,
            n: x.len() as u32,
            reserved: 0,
        };
        // SAFETY: a live buffer of n f32s in this context, borrowed.
        let c = unsafe { self.call_on_buffers(&DOT, &args, &[&xs])? };
        Ok(f64::from_bits(c.value))
    }

    /// `y = A x`, `A` of `rows x cols` `f32`s in row-major order (both at
    /// most [`GEMV_MAX_DIM`]), by one warp.
    pub fn gemv(
        &self,
        a: &impl DeviceBuffer<f32>,
        rows: usize,
        cols: usize,
        x: &impl DeviceBuffer<f32>,
        y: &mut impl DeviceBufferMut<f32>,
    ) -> Result<()> {
        if rows > GEMV_MAX_DIM
            || cols > GEMV_MAX_DIM
            || a.len() != rows * cols
            || x.len() != cols
            || y.len() != rows
        {
            return Err(invalid(format!(
                "gemv needs A of rows x cols (both at most {GEMV_MAX_DIM}), x of cols and y of \
                 rows elements (got {rows} x {cols}, A {}, x {}, y {})",
                a.len(),
                x.len(),
                y.len()
            )));
        }
        let (as_, xs, ys) = (a.stream().clone(), x.stream().clone(), y.stream().clone());
        let (ap, _a) = a.device_ptr(&as_);
        let (xp, _x) = x.device_ptr(&xs);
        let (yp, _y) = y.device_ptr_mut(&ys);
        let args = GemvArgs {
            a: ap,
            x: xp,
            y: yp,
            rows: rows as u32,
            cols: cols as u32,
        };
        // SAFETY: live buffers of the checked lengths in this context, a and x
        // borrowed, y borrowed exclusively.
        unsafe { self.call_on_buffers(&GEMV, &args, &[&as_, &xs, &ys]) }.map(drop)
    }

    /// `y[i] = sum over k < taps of h[k] * x[i + k]` for each of `y`'s `n`
    /// elements (at most [`FIR_MAX_N`]), `h` of 1 to [`FIR_MAX_TAPS`] taps,
    /// `x` of `n + taps - 1` samples, by one warp. Each output is an
    /// in-order chain of fused multiply-adds.
    pub fn fir(
        &self,
        x: &impl DeviceBuffer<f32>,
        h: &impl DeviceBuffer<f32>,
        y: &mut impl DeviceBufferMut<f32>,
    ) -> Result<()> {
        let (n, taps) = (y.len(), h.len());
        if taps == 0 || taps > FIR_MAX_TAPS || n > FIR_MAX_N || x.len() != n + taps - 1 {
            return Err(invalid(format!(
                "fir needs 1 to {FIR_MAX_TAPS} taps, at most {FIR_MAX_N} outputs and n + taps - 1 \
                 samples (got {taps} taps, {n} outputs, {} samples)",
                x.len()
            )));
        }
        let (xs, hs, ys) = (x.stream().clone(), h.stream().clone(), y.stream().clone());
        let (xp, _x) = x.device_ptr(&xs);
        let (hp, _h) = h.device_ptr(&hs);
        let (yp, _y) = y.device_ptr_mut(&ys);
        let args = FirArgs {
            x: xp,
            h: hp,
            y: yp,
            n: n as u32,
            taps: taps as u32,
        };
        // SAFETY: live buffers of the checked lengths in this context, x and
        // h borrowed, y borrowed exclusively.
        unsafe { self.call_on_buffers(&FIR, &args, &[&xs, &hs, &ys]) }.map(drop)
    }
}
