//! pkq's built-in ops, declared with their arguments (the host half of
//! `cuda/pkq_ops.cuh`), and the safe calls that run them on cudarc buffers.
//!
//! Each op runs on one warp of the resident kernel, so it suits small
//! inputs, where a kernel launch would cost more than the work: up to the
//! limits below. For larger inputs an ordinary kernel, spread over the GPU,
//! wins; `examples/gemv_crossover` measures where for GEMV.
//!
//! A safe call checks the buffers' lengths against the op's limits and that
//! they live in the runtime's context, waits for work queued on the
//! buffers' own streams, runs the task, and returns once it completed.

use std::mem::{offset_of, size_of};
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use crate::error::{Error, Result};
use crate::layout::{
    ARGS_BYTES, DOT_ARGS_BYTES, DOT_OFF_N, DOT_OFF_X, DOT_OFF_Y, FIR_ARGS_BYTES, FIR_OFF_H,
    FIR_OFF_N, FIR_OFF_TAPS, FIR_OFF_X, FIR_OFF_Y, GEMV_ARGS_BYTES, GEMV_OFF_A, GEMV_OFF_COLS,
    GEMV_OFF_ROWS, GEMV_OFF_X, GEMV_OFF_Y, MEMCPY_ARGS_BYTES, MEMCPY_OFF_BYTES, MEMCPY_OFF_DST,
    MEMCPY_OFF_SRC, MEMSET_ARGS_BYTES, MEMSET_OFF_BYTES, MEMSET_OFF_DST, MEMSET_OFF_VALUE,
};
use crate::ops::{AXPY_MAX_N, AxpyArgs, Op};
use crate::runtime::{Runtime, Watch};
use crate::ticket::Completion;
use crate::typed_op::{Signature, TypedOp};

/// The most bytes one [`MEMCPY`] or [`MEMSET`] task moves.
pub const MEMCPY_MAX_BYTES: usize = crate::layout::MEMCPY_MAX_BYTES;
/// The longest vectors of one [`DOT`] task.
pub const DOT_MAX_N: usize = crate::layout::DOT_MAX_N;
/// The largest rows and columns of one [`GEMV`] task.
pub const GEMV_MAX_DIM: usize = crate::layout::GEMV_MAX_DIM;
/// The most outputs of one [`FIR`] task.
pub const FIR_MAX_N: usize = crate::layout::FIR_MAX_N;
/// The most taps of one [`FIR`] task.
pub const FIR_MAX_TAPS: usize = crate::layout::FIR_MAX_TAPS;

/// Arguments of [`MEMCPY`] (`struct pkq_memcpy_args`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct MemcpyArgs {
    /// Device address written.
    pub dst: u64,
    /// Device address read (not overlapping `dst`).
    pub src: u64,
    /// Bytes, at most [`MEMCPY_MAX_BYTES`].
    pub bytes: u64,
}

/// Arguments of [`MEMSET`] (`struct pkq_memset_args`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct MemsetArgs {
    /// Device address written.
    pub dst: u64,
    /// Bytes, at most [`MEMCPY_MAX_BYTES`].
    pub bytes: u64,
    /// The byte, in the low 8 bits.
    pub value: u32,
    /// Zero.
    pub reserved: u32,
}

/// Arguments of [`DOT`] (`struct pkq_dot_args`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DotArgs {
    /// Device address of `n` `f32`s.
    pub x: u64,
    /// Device address of `n` `f32`s, or 0 for the sum of `x`.
    pub y: u64,
    /// At most [`DOT_MAX_N`].
    pub n: u32,
    /// Zero.
    pub reserved: u32,
}

/// Arguments of [`GEMV`] (`struct pkq_gemv_args`): `y = A x`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GemvArgs {
    /// Device address of `A`: `rows * cols` `f32`s, row-major.
    pub a: u64,
    /// Device address of `x`: `cols` `f32`s.
    pub x: u64,
    /// Device address of `y`: `rows` `f32`s (written).
    pub y: u64,
    /// At most [`GEMV_MAX_DIM`].
    pub rows: u32,
    /// At most [`GEMV_MAX_DIM`].
    pub cols: u32,
}

/// Arguments of [`FIR`] (`struct pkq_fir_args`):
/// `y[i] = sum over k < taps of h[k] * x[i + k]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct FirArgs {
    /// Device address of `x`: `n + taps - 1` `f32`s.
    pub x: u64,
    /// Device address of `h`: `taps` `f32`s.
    pub h: u64,
    /// Device address of `y`: `n` `f32`s (written).
    pub y: u64,
    /// Outputs, at most [`FIR_MAX_N`].
    pub n: u32,
    /// Taps, 1 to [`FIR_MAX_TAPS`].
    pub taps: u32,
}

const _: () = {
    assert!(size_of::<MemcpyArgs>() == MEMCPY_ARGS_BYTES);
    assert!(offset_of!(MemcpyArgs, dst) == MEMCPY_OFF_DST);
    assert!(offset_of!(MemcpyArgs, src) == MEMCPY_OFF_SRC);
    assert!(offset_of!(MemcpyArgs, bytes) == MEMCPY_OFF_BYTES);
    assert!(size_of::<MemsetArgs>() == MEMSET_ARGS_BYTES);
    assert!(offset_of!(MemsetArgs, dst) == MEMSET_OFF_DST);
    assert!(offset_of!(MemsetArgs, bytes) == MEMSET_OFF_BYTES);
    assert!(offset_of!(MemsetArgs, value) == MEMSET_OFF_VALUE);
    assert!(size_of::<DotArgs>() == DOT_ARGS_BYTES);
    assert!(offset_of!(DotArgs, x) == DOT_OFF_X);
    assert!(offset_of!(DotArgs, y) == DOT_OFF_Y);
    assert!(offset_of!(DotArgs, n) == DOT_OFF_N);
    assert!(size_of::<GemvArgs>() == GEMV_ARGS_BYTES);
    assert!(offset_of!(GemvArgs, a) == GEMV_OFF_A);
    assert!(offset_of!(GemvArgs, x) == GEMV_OFF_X);
    assert!(offset_of!(GemvArgs, y) == GEMV_OFF_Y);
    assert!(offset_of!(GemvArgs, rows) == GEMV_OFF_ROWS);
    assert!(offset_of!(GemvArgs, cols) == GEMV_OFF_COLS);
    assert!(size_of::<FirArgs>() == FIR_ARGS_BYTES);
    assert!(offset_of!(FirArgs, x) == FIR_OFF_X);
    assert!(offset_of!(FirArgs, h) == FIR_OFF_H);
    assert!(offset_of!(FirArgs, y) == FIR_OFF_Y);
    assert!(offset_of!(FirArgs, n) == FIR_OFF_N);
    assert!(offset_of!(FirArgs, taps) == FIR_OFF_TAPS);
};

/// [`Op::NOP`].
pub const NOP: TypedOp<()> = TypedOp::new(Op::NOP.0, "NOP");
/// [`Op::ECHO`], with all six argument words.
pub const ECHO: TypedOp<[u64; ARGS_BYTES / 8]> = TypedOp::new(Op::ECHO.0, "ECHO");
/// [`Op::SPIN`]: busy-waits its argument's nanoseconds.
pub const SPIN: TypedOp<u64> = TypedOp::new(Op::SPIN.0, "SPIN");
/// [`Op::AXPY`]; safe call: [`Runtime::axpy`].
pub const AXPY: TypedOp<AxpyArgs> = TypedOp::with_pointers(Op::AXPY.0, "AXPY");
/// [`Op::TRAP`] (faults the device on purpose).
pub const TRAP: TypedOp<()> = TypedOp::with_pointers(Op::TRAP.0, "TRAP");
/// [`Op::MEMCPY`]; safe call: [`Runtime::memcpy`].
pub const MEMCPY: TypedOp<MemcpyArgs> = TypedOp::with_pointers(Op::MEMCPY.0, "MEMCPY");
/// [`Op::MEMSET`]; safe call: [`Runtime::memset`].
pub const MEMSET: TypedOp<MemsetArgs> = TypedOp::with_pointers(Op::MEMSET.0, "MEMSET");
/// [`Op::DOT`]; safe calls: [`Runtime::dot`], [`Runtime::sum`].
pub const DOT: TypedOp<DotArgs> = TypedOp::with_pointers(Op::DOT.0, "DOT");
/// [`Op::GEMV`]; safe call: [`Runtime::gemv`].
pub const GEMV: TypedOp<GemvArgs> = TypedOp::with_pointers(Op::GEMV.0, "GEMV");
/// [`Op::FIR`]; safe call: [`Runtime::fir`].
pub const FIR: TypedOp<FirArgs> = TypedOp::with_pointers(Op::FIR.0, "FIR");

/// Every built-in op as declared here: checked against pkq's kernel's op
/// table whenever a runtime starts on it.
pub(crate) fn signatures() -> [Signature; 10] {
    [
        NOP.signature(),
        ECHO.signature(),
        SPIN.signature(),
        AXPY.signature(),
        TRAP.signature(),
        MEMCPY.signature(),
        MEMSET.signature(),
        DOT.signature(),
        GEMV.signature(),
        FIR.signature(),
    ]
}

fn invalid(what: String) -> Error {
    Error::InvalidArgument(what)
}

impl Runtime {
    /// [`Error::InvalidArgument`] unless every stream's context is the
    /// runtime's.
    fn same_context(&self, op: &str, streams: &[&Arc<CudaStream>]) -> Result<()> {
        let ours = self.shared.kernel.cu_ctx();
        if streams.iter().all(|s| s.context().cu_ctx() == ours) {
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
    /// (or aborts the process if it cannot tell), so the caller's borrows
    /// never end while the task could still run.
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
                s.synchronize()?;
            }
        }
        // SAFETY: the caller vouches for the addresses (see above).
        let mut ticket = unsafe { self.call_unchecked(op, args)? };
        // Not watched for stalls: the buffers stay borrowed until the task
        // completed or the kernel is known to have stopped.
        match ticket.wait_watching(None, Watch::Nothing) {
            Ok(c) => Ok(c),
            Err(e @ Error::Task { .. }) => Err(e),
            Err(e) => {
                // A fault can be latched while the kernel still lives, and
                // the task may yet run: the borrows end only once the kernel
                // is known to have stopped.
                let _ = self.shared.stop(false);
                if self.shared.kernel.is_live() {
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
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
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
    pub fn memcpy<T>(&self, dst: &mut impl DevicePtrMut<T>, src: &impl DevicePtr<T>) -> Result<()> {
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
    pub fn memset<T>(&self, dst: &mut impl DevicePtrMut<T>, byte: u8) -> Result<()> {
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
    pub fn dot(&self, x: &impl DevicePtr<f32>, y: &impl DevicePtr<f32>) -> Result<f64> {
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
    pub fn sum(&self, x: &impl DevicePtr<f32>) -> Result<f64> {
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
        a: &impl DevicePtr<f32>,
        rows: usize,
        cols: usize,
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
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
        x: &impl DevicePtr<f32>,
        h: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
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
