//! pkq's built-in ops, declared with their arguments (the host half of
//! `cuda/pkq_ops.cuh`). Their safe calls on cudarc buffers are methods of
//! [`Runtime`](crate::Runtime) ([`Runtime::axpy`](crate::Runtime::axpy) and
//! the others).
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

use bytemuck::{Pod, Zeroable};

use crate::ops::op::{AxpyArgs, Op};
use crate::ops::typed::{Signature, TypedOp};
use crate::proto::layout::{
    ARGS_BYTES, COPY_IO_ARGS_BYTES, COPY_IO_OFF_KEY, DOT_ARGS_BYTES, DOT_OFF_N, DOT_OFF_X,
    DOT_OFF_Y, FIR_ARGS_BYTES, FIR_OFF_H, FIR_OFF_N, FIR_OFF_TAPS, FIR_OFF_X, FIR_OFF_Y,
    GEMV_ARGS_BYTES, GEMV_OFF_A, GEMV_OFF_COLS, GEMV_OFF_ROWS, GEMV_OFF_X, GEMV_OFF_Y,
    MEMCPY_ARGS_BYTES, MEMCPY_OFF_BYTES, MEMCPY_OFF_DST, MEMCPY_OFF_SRC, MEMSET_ARGS_BYTES,
    MEMSET_OFF_BYTES, MEMSET_OFF_DST, MEMSET_OFF_VALUE,
};

/// The most bytes one [`MEMCPY`] or [`MEMSET`] task moves.
pub const MEMCPY_MAX_BYTES: usize = crate::proto::layout::MEMCPY_MAX_BYTES;
/// The longest vectors of one [`DOT`] task.
pub const DOT_MAX_N: usize = crate::proto::layout::DOT_MAX_N;
/// The largest rows and columns of one [`GEMV`] task.
pub const GEMV_MAX_DIM: usize = crate::proto::layout::GEMV_MAX_DIM;
/// The most outputs of one [`FIR`] task.
pub const FIR_MAX_N: usize = crate::proto::layout::FIR_MAX_N;
/// The most taps of one [`FIR`] task.
pub const FIR_MAX_TAPS: usize = crate::proto::layout::FIR_MAX_TAPS;

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

/// Arguments of [`COPY_IO`] (`struct pkq_copy_io_args`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct CopyIoArgs {
    /// Output bytes, at most the runtime's output area
    /// ([`Builder::io`](crate::Builder::io)); more fail the task
    /// (`TaskStatus::BadArgs`).
    pub out_len: u32,
    /// XORed into every output byte (its low 8 bits).
    pub key: u32,
}

const _: () = {
    assert!(size_of::<CopyIoArgs>() == COPY_IO_ARGS_BYTES);
    assert!(offset_of!(CopyIoArgs, key) == COPY_IO_OFF_KEY);
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
/// Its handler takes up to 48 bytes: shorter arguments are zero-filled.
pub const ECHO: TypedOp<[u64; ARGS_BYTES / 8]> = TypedOp::new(Op::ECHO.0, "ECHO").up_to();
/// [`Op::SPIN`]: busy-waits its argument's nanoseconds.
pub const SPIN: TypedOp<u64> = TypedOp::new(Op::SPIN.0, "SPIN");
/// [`Op::AXPY`]; safe call: [`Runtime::axpy`](crate::Runtime::axpy).
pub const AXPY: TypedOp<AxpyArgs> = TypedOp::with_pointers(Op::AXPY.0, "AXPY");
/// [`Op::TRAP`] (faults the device on purpose).
pub const TRAP: TypedOp<()> = TypedOp::with_pointers(Op::TRAP.0, "TRAP");
/// [`Op::MEMCPY`]; safe call: [`Runtime::memcpy`](crate::Runtime::memcpy).
pub const MEMCPY: TypedOp<MemcpyArgs> = TypedOp::with_pointers(Op::MEMCPY.0, "MEMCPY");
/// [`Op::MEMSET`]; safe call: [`Runtime::memset`](crate::Runtime::memset).
pub const MEMSET: TypedOp<MemsetArgs> = TypedOp::with_pointers(Op::MEMSET.0, "MEMSET");
/// [`Op::DOT`]; safe calls: [`Runtime::dot`](crate::Runtime::dot), [`Runtime::sum`](crate::Runtime::sum).
pub const DOT: TypedOp<DotArgs> = TypedOp::with_pointers(Op::DOT.0, "DOT");
/// [`Op::GEMV`]; safe call: [`Runtime::gemv`](crate::Runtime::gemv).
pub const GEMV: TypedOp<GemvArgs> = TypedOp::with_pointers(Op::GEMV.0, "GEMV");
/// [`Op::FIR`]; safe call: [`Runtime::fir`](crate::Runtime::fir).
pub const FIR: TypedOp<FirArgs> = TypedOp::with_pointers(Op::FIR.0, "FIR");

/// [`Op::COPY_IO`]: reads and writes only its task's input and output.
pub const COPY_IO: TypedOp<CopyIoArgs> = TypedOp::new(Op::COPY_IO.0, "COPY_IO");

/// Every built-in op as declared here: checked against pkq's kernel's op
/// table whenever a runtime starts on it.
pub(crate) fn signatures() -> [Signature; 11] {
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
        COPY_IO.signature(),
    ]
}
