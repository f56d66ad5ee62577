//! pkq's built-in ops, in one place: each op declared with its arguments
//! (the host half of `cuda/pkq_ops.cuh`), their limits, and the safe calls
//! that run them on cudarc buffers ([`Lane::axpy`](crate::Lane::axpy) and
//! the others, in `calls`).
//!
//! Each op runs on one warp of the resident kernel, so it suits small
//! inputs, where a kernel launch would cost more than the work: up to the
//! limits below. Its `GROUP_` twin runs on every thread of a lane of blocks
//! or groups ([`Width`](crate::Width)), up to the `GROUP_` limits; the safe
//! calls pick the twin of their lane's width. `pkq-bench`'s `width`
//! measures both against kernel launches.
//!
//! A safe call checks the buffers' lengths against the op's limits and that
//! they live in the runtime's context, waits for work queued on the device
//! buffers' own streams (not a [`HostBuffer`](crate::HostBuffer)'s: see
//! there), runs the task, and returns once it completed.

mod calls;

use std::mem::{offset_of, size_of};

use bytemuck::{Pod, Zeroable};

use crate::layout::{
    ARGS_BYTES, AXPY_ARGS_BYTES, AXPY_OFF_A, AXPY_OFF_N, AXPY_OFF_X, AXPY_OFF_Y,
    COPY_IO_ARGS_BYTES, COPY_IO_OFF_KEY, DOT_ARGS_BYTES, DOT_OFF_N, DOT_OFF_X, DOT_OFF_Y,
    FIR_ARGS_BYTES, FIR_OFF_H, FIR_OFF_N, FIR_OFF_TAPS, FIR_OFF_X, FIR_OFF_Y, GEMV_ARGS_BYTES,
    GEMV_OFF_A, GEMV_OFF_COLS, GEMV_OFF_ROWS, GEMV_OFF_X, GEMV_OFF_Y, MEMCPY_ARGS_BYTES,
    MEMCPY_OFF_BYTES, MEMCPY_OFF_DST, MEMCPY_OFF_SRC, MEMSET_ARGS_BYTES, MEMSET_OFF_BYTES,
    MEMSET_OFF_DST, MEMSET_OFF_VALUE, OP_AXPY, OP_COPY_IO, OP_DOT, OP_ECHO, OP_FIR, OP_GEMV,
    OP_GROUP_AXPY, OP_GROUP_DOT, OP_GROUP_EMPTY, OP_GROUP_FIR, OP_GROUP_GEMV, OP_GROUP_MEMCPY,
    OP_GROUP_MEMSET, OP_GROUP_SPIN, OP_MEMCPY, OP_MEMSET, OP_NOP, OP_SPIN, OP_TRAP,
};
use crate::ops::typed::TypedOp;

/// What [`ECHO_48`] computes from its six argument words: every bit of the
/// payload reaches the result, and `[x, 0, 0, 0, 0, 0]` folds to `x`.
pub fn echo_fold(args: &[u64; ARGS_BYTES / 8]) -> u64 {
    args.iter()
        .enumerate()
        .fold(0, |acc, (i, &w)| acc ^ w.rotate_left(8 * i as u32))
}

/// The longest wait of a [`SPIN`] task (10 s).
pub const SPIN_MAX_NS: u64 = crate::layout::SPIN_MAX_NS;
/// The largest `n` of an [`AXPY`] task.
pub const AXPY_MAX_N: usize = crate::layout::AXPY_MAX_N;
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

/// Arguments of [`AXPY`]: `y[i] = a * x[i] + y[i]` for `i < n`, `x` and
/// `y` device addresses of `n` `f32`s each (`struct pkq_axpy_args`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct AxpyArgs {
    /// Device address of `x` (read).
    pub x: u64,
    /// Device address of `y` (read and written).
    pub y: u64,
    /// Element count, at most [`AXPY_MAX_N`].
    pub n: u32,
    /// The scale.
    pub a: f32,
}

const _: () = {
    assert!(size_of::<AxpyArgs>() == AXPY_ARGS_BYTES);
    assert!(offset_of!(AxpyArgs, x) == AXPY_OFF_X);
    assert!(offset_of!(AxpyArgs, y) == AXPY_OFF_Y);
    assert!(offset_of!(AxpyArgs, n) == AXPY_OFF_N);
    assert!(offset_of!(AxpyArgs, a) == AXPY_OFF_A);
};

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

/// Does nothing; completes with value 0. The round-trip probe.
pub const NOP: TypedOp<()> = TypedOp::new(OP_NOP, "NOP");
/// Returns its argument word unchanged: for round trips and tests. Its
/// handler takes up to 48 bytes (shorter arguments zero-filled), so any
/// argument type of up to 48 bytes aligned to at most 8 matches it:
/// [`ECHO_48`] declares all six words.
pub const ECHO: TypedOp<u64> = TypedOp::new(OP_ECHO, "ECHO");
/// [`ECHO`] with its whole payload: returns the six words folded into one
/// ([`echo_fold`]), so that every bit of the payload reaches the result.
pub const ECHO_48: TypedOp<[u64; ARGS_BYTES / 8]> = TypedOp::new(OP_ECHO, "ECHO");
/// Busy-waits on the device for its argument's nanoseconds (at most
/// [`SPIN_MAX_NS`]) and returns the nanoseconds it waited: a stand-in for
/// real work in tests and benches. Its worker serves nothing else
/// meanwhile.
pub const SPIN: TypedOp<u64> = TypedOp::new(OP_SPIN, "SPIN");
/// `y[i] = a * x[i] + y[i]` on device buffers ([`AxpyArgs`]); safe call:
/// [`Lane::axpy`](crate::Lane::axpy).
pub const AXPY: TypedOp<AxpyArgs> = TypedOp::with_pointers(OP_AXPY, "AXPY");
/// Executes a trap on the device: the resident kernel dies, every waiter
/// gets [`Error::DeviceFault`](crate::Error::DeviceFault), and the CUDA
/// context keeps a sticky error. For testing fault handling; only as an
/// unchecked task ([`Task::unchecked`](crate::Task::unchecked)).
pub const TRAP: TypedOp<()> = TypedOp::with_pointers(OP_TRAP, "TRAP");
/// Copies device memory ([`MemcpyArgs`]); safe call:
/// [`Lane::memcpy`](crate::Lane::memcpy).
pub const MEMCPY: TypedOp<MemcpyArgs> = TypedOp::with_pointers(OP_MEMCPY, "MEMCPY");
/// Sets device memory ([`MemsetArgs`]); safe call:
/// [`Lane::memset`](crate::Lane::memset).
pub const MEMSET: TypedOp<MemsetArgs> = TypedOp::with_pointers(OP_MEMSET, "MEMSET");
/// Dot product or sum ([`DotArgs`]); safe calls: [`Lane::dot`](crate::Lane::dot),
/// [`Lane::sum`](crate::Lane::sum).
pub const DOT: TypedOp<DotArgs> = TypedOp::with_pointers(OP_DOT, "DOT");
/// Small matrix-vector product ([`GemvArgs`]); safe call:
/// [`Lane::gemv`](crate::Lane::gemv).
pub const GEMV: TypedOp<GemvArgs> = TypedOp::with_pointers(OP_GEMV, "GEMV");
/// FIR filter ([`FirArgs`]); safe call: [`Lane::fir`](crate::Lane::fir).
pub const FIR: TypedOp<FirArgs> = TypedOp::with_pointers(OP_FIR, "FIR");
/// An IO task's test and bench op ([`TypedOp::io`]): output byte `i` is
/// input byte `i` (0 past the input) XOR `key`; the value is the sum of the
/// input bytes ([`CopyIoArgs`]). Reads and writes only its task's input and
/// output.
pub const COPY_IO: TypedOp<CopyIoArgs> = TypedOp::new(OP_COPY_IO, "COPY_IO");

/// Does nothing, on every thread of a block or group: the empty wide task,
/// whose round trip is the cost of handing a task to a lane's whole width
/// ([`Width`](crate::Width)). Served by lanes of blocks and groups only.
pub const GROUP_EMPTY: TypedOp<()> = TypedOp::new(OP_GROUP_EMPTY, "GROUP_EMPTY");
/// [`DOT`] on every thread of a block or group ([`DotArgs`], `n` at most
/// [`GROUP_MAX_N`]): each thread sums its strided share, the group adds
/// them (a group barrier); the value is the `f64` bits. Served by lanes of
/// blocks and groups only, as every `GROUP_` op; dereferences device
/// addresses (an unchecked task; safe call: [`Lane::dot`](crate::Lane::dot)
/// on such a lane).
pub const GROUP_DOT: TypedOp<DotArgs> = TypedOp::with_pointers(OP_GROUP_DOT, "GROUP_DOT");
/// [`AXPY`] on every thread of a block or group ([`AxpyArgs`], `n` at most
/// [`GROUP_MAX_N`]); safe call: [`Lane::axpy`](crate::Lane::axpy) on such
/// a lane.
pub const GROUP_AXPY: TypedOp<AxpyArgs> = TypedOp::with_pointers(OP_GROUP_AXPY, "GROUP_AXPY");
/// [`MEMCPY`] on every thread of a block or group ([`MemcpyArgs`], at most
/// [`GROUP_MEMCPY_MAX_BYTES`]); safe call:
/// [`Lane::memcpy`](crate::Lane::memcpy) on such a lane.
pub const GROUP_MEMCPY: TypedOp<MemcpyArgs> =
    TypedOp::with_pointers(OP_GROUP_MEMCPY, "GROUP_MEMCPY");
/// [`MEMSET`] on every thread of a block or group ([`MemsetArgs`], at most
/// [`GROUP_MEMCPY_MAX_BYTES`]); safe call:
/// [`Lane::memset`](crate::Lane::memset) on such a lane.
pub const GROUP_MEMSET: TypedOp<MemsetArgs> =
    TypedOp::with_pointers(OP_GROUP_MEMSET, "GROUP_MEMSET");
/// [`GEMV`] on every warp of a block or group ([`GemvArgs`], rows and
/// columns at most [`GROUP_GEMV_MAX_DIM`]): each warp takes whole rows;
/// safe call: [`Lane::gemv`](crate::Lane::gemv) on such a lane.
pub const GROUP_GEMV: TypedOp<GemvArgs> = TypedOp::with_pointers(OP_GROUP_GEMV, "GROUP_GEMV");
/// [`FIR`] on every thread of a block or group ([`FirArgs`], `n` at most
/// [`GROUP_MAX_N`], taps at most [`FIR_MAX_TAPS`]); safe call:
/// [`Lane::fir`](crate::Lane::fir) on such a lane.
pub const GROUP_FIR: TypedOp<FirArgs> = TypedOp::with_pointers(OP_GROUP_FIR, "GROUP_FIR");
/// [`SPIN`] by block `r` of a group, `r` times the argument's nanoseconds
/// (block 0 not at all), each block's warps at once: a wide task whose
/// blocks end one after another, the last `blocks - 1` times the argument
/// later, which is the value. `BAD_ARGS` where that is past
/// [`SPIN_MAX_NS`]. Dereferences nothing; served by lanes of blocks and
/// groups only (on a lane of blocks, a group of one, it returns 0 at
/// once, whatever the argument).
pub const GROUP_SPIN: TypedOp<u64> = TypedOp::new(OP_GROUP_SPIN, "GROUP_SPIN");
/// The longest vectors of one [`GROUP_DOT`], [`GROUP_AXPY`] or
/// [`GROUP_FIR`] task (its outputs, for FIR).
pub const GROUP_MAX_N: usize = crate::layout::GROUP_MAX_N;
/// The most bytes one [`GROUP_MEMCPY`] or [`GROUP_MEMSET`] task moves.
pub const GROUP_MEMCPY_MAX_BYTES: usize = crate::layout::GROUP_MEMCPY_MAX_BYTES;
/// The largest rows and columns of one [`GROUP_GEMV`] task.
pub const GROUP_GEMV_MAX_DIM: usize = crate::layout::GROUP_GEMV_MAX_DIM;

/// Every built-in op as declared here (one declaration of ECHO: its two
/// types are one row): the rows of pkq's kernel's op table
/// (`PKQ_BUILTIN_OP_TABLE` in `cuda/pkq_ops.cuh`), which the GPU tests
/// check against the kernel's.
#[cfg(test)]
pub(crate) fn signatures() -> [crate::ops::table::Signature; 19] {
    [
        NOP.signature(),
        ECHO_48.signature(),
        SPIN.signature(),
        AXPY.signature(),
        TRAP.signature(),
        MEMCPY.signature(),
        MEMSET.signature(),
        DOT.signature(),
        GEMV.signature(),
        FIR.signature(),
        COPY_IO.signature(),
        GROUP_EMPTY.signature(),
        GROUP_DOT.signature(),
        GROUP_AXPY.signature(),
        GROUP_MEMCPY.signature(),
        GROUP_MEMSET.signature(),
        GROUP_GEMV.signature(),
        GROUP_FIR.signature(),
        GROUP_SPIN.signature(),
    ]
}

/// The rows of pkq's kernel's op table (`PKQ_BUILTIN_OP_TABLE`), as the
/// software device of the tests exports them.
#[cfg(test)]
pub(crate) fn table_rows() -> Vec<crate::ops::table::OpInfo> {
    use crate::layout::{OP_DEREFS, OP_GROUP, OP_UP_TO};
    use crate::ops::table::OpInfo;
    signatures()
        .iter()
        .map(|s| OpInfo {
            op: u32::from(s.op),
            arg_bytes: s.bytes,
            arg_align: s.align,
            flags: if s.derefs { OP_DEREFS } else { 0 }
                | if s.op == OP_ECHO { OP_UP_TO } else { 0 }
                | if matches!(
                    s.op,
                    OP_GROUP_EMPTY
                        | OP_GROUP_DOT
                        | OP_GROUP_AXPY
                        | OP_GROUP_MEMCPY
                        | OP_GROUP_MEMSET
                        | OP_GROUP_GEMV
                        | OP_GROUP_FIR
                        | OP_GROUP_SPIN
                ) {
                    OP_GROUP
                } else {
                    0
                },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_fold_returns_a_lone_first_word() {
        assert_eq!(echo_fold(&[0xdead_beef, 0, 0, 0, 0, 0]), 0xdead_beef);
        assert_ne!(echo_fold(&[0, 1, 0, 0, 0, 0]), 0);
        assert_eq!(echo_fold(&[0, 1, 0, 0, 0, 0]), 1 << 8);
    }

    /// The kernel's op table (`PKQ_BUILTIN_OP_TABLE`, `cuda/pkq_ops.cuh`),
    /// read as text: each row's op, and whether it says the handler
    /// dereferences pointers, against the declarations here. (The GPU
    /// tests compare the compiled table whole; this catches a row's flags
    /// without a GPU.)
    #[test]
    fn the_kernels_op_table_flags_pointers_as_declared() {
        let src = include_str!("../../cuda/pkq_ops.cuh");
        let start = src
            .find("#define PKQ_BUILTIN_OP_TABLE(kernel)")
            .expect("the table");
        let table = &src[start..];
        let table = &table[..table.find("\n\n").unwrap_or(table.len())];
        let mut rows: Vec<(String, bool)> = Vec::new();
        for line in table.lines().skip(1) {
            let line = line.trim_start_matches(|c: char| c != 'p' && c != 'P');
            let line = line
                .strip_prefix("PKQ_OP_TABLE(kernel,")
                .unwrap_or(line)
                .trim();
            let Some(at) = ["PKQ_OP_INFO", "pkq_op_info{"]
                .iter()
                .filter_map(|k| line.find(k))
                .min()
            else {
                continue;
            };
            let row = &line[at..];
            let row = row.strip_prefix("pkq_op_info{").unwrap_or(row);
            // `PKQ_OP_INFO...(PKQ_OP_NAME, ...)` or `pkq_op_info{PKQ_OP_NAME, ..., FLAGS}`.
            let (derefs, rest) = if let Some(m) = row.strip_prefix("PKQ_OP_INFO") {
                let derefs = ["_POINTERS(", "_GROUP(", "_STATE(", "_STATE_NO_ARGS("]
                    .iter()
                    .any(|k| m.starts_with(k));
                (derefs, &m[m.find('(').unwrap() + 1..])
            } else {
                (line.contains("PKQ_OP_DEREFS"), row)
            };
            let name = rest
                .trim_start_matches("PKQ_OP_")
                .split([',', ')'])
                .next()
                .unwrap();
            rows.push((name.to_string(), derefs));
        }
        let declared: Vec<(String, bool)> = signatures()
            .iter()
            .map(|s| {
                let name = crate::Op(s.op).builtin_name().unwrap();
                (name.to_string(), s.derefs)
            })
            .collect();
        rows.sort();
        let mut declared = declared;
        declared.sort();
        assert_eq!(rows, declared);
    }

    #[test]
    fn pointer_flags() {
        assert!(AXPY.takes_pointers() && TRAP.takes_pointers());
        assert!(!ECHO.takes_pointers() && !SPIN.takes_pointers());
    }
}
