//! Op codes and the arguments of the built-in ops (mirrors `cuda/pkq_ops.cuh`).

use std::fmt;
use std::mem::{offset_of, size_of};

use bytemuck::{Pod, Zeroable};

use crate::proto::layout::{
    ARGS_BYTES, AXPY_ARGS_BYTES, AXPY_OFF_A, AXPY_OFF_N, AXPY_OFF_X, AXPY_OFF_Y, OP_AXPY,
    OP_COPY_IO, OP_DOT, OP_ECHO, OP_FIR, OP_GEMV, OP_MEMCPY, OP_MEMSET, OP_NOP, OP_SPIN, OP_TRAP,
    OP_USER,
};

/// An op code: which device handler runs a task.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Op(pub u16);

impl Op {
    /// Does nothing; completes with value 0. The round-trip probe.
    pub const NOP: Op = Op(OP_NOP);
    /// Returns its 48-byte payload folded into one `u64` (see [`echo_fold`]):
    /// with only the first 8 bytes set, it returns them unchanged. For tests
    /// and for checking that every payload bit arrives.
    pub const ECHO: Op = Op(OP_ECHO);
    /// `y[i] = a * x[i] + y[i]` on device buffers, run by one warp; see
    /// [`Runtime::axpy`](crate::Runtime::axpy) and [`AxpyArgs`].
    pub const AXPY: Op = Op(OP_AXPY);
    /// Busy-waits on the device for its `u64` argument's nanoseconds (at most
    /// [`SPIN_MAX_NS`]) and returns the nanoseconds it waited: a stand-in
    /// for real work in tests and benches. Its worker serves nothing else
    /// meanwhile.
    pub const SPIN: Op = Op(OP_SPIN);
    /// Executes a trap on the device: the resident kernel dies, every waiter
    /// gets [`Error::DeviceFault`](crate::Error::DeviceFault), and the CUDA
    /// context keeps a sticky error. For testing fault handling; only
    /// through the unchecked calls ([`Runtime::submit_unchecked`](crate::Runtime::submit_unchecked),
    /// [`Runtime::call_unchecked`](crate::Runtime::call_unchecked) with [`builtin::TRAP`](crate::builtin::TRAP)).
    pub const TRAP: Op = Op(OP_TRAP);
    /// Copies device memory ([`Runtime::memcpy`](crate::Runtime::memcpy)).
    pub const MEMCPY: Op = Op(OP_MEMCPY);
    /// Sets device memory ([`Runtime::memset`](crate::Runtime::memset)).
    pub const MEMSET: Op = Op(OP_MEMSET);
    /// Dot product or sum ([`Runtime::dot`](crate::Runtime::dot),
    /// [`Runtime::sum`](crate::Runtime::sum)).
    pub const DOT: Op = Op(OP_DOT);
    /// Small matrix-vector product ([`Runtime::gemv`](crate::Runtime::gemv)).
    pub const GEMV: Op = Op(OP_GEMV);
    /// FIR filter ([`Runtime::fir`](crate::Runtime::fir)).
    pub const FIR: Op = Op(OP_FIR);
    /// An IO task's test and bench op ([`Runtime::submit_io`](crate::Runtime::submit_io)):
    /// output byte `i` is input byte `i` (0 past the input) XOR `key`; the
    /// value is the sum of the input bytes (arguments
    /// [`CopyIoArgs`](crate::builtin::CopyIoArgs)).
    pub const COPY_IO: Op = Op(OP_COPY_IO);
    /// The first code of a module's own ops (codes below are pkq's).
    pub const FIRST_USER: Op = Op(OP_USER);

    fn name(self) -> Option<&'static str> {
        match self {
            Op::NOP => Some("NOP"),
            Op::ECHO => Some("ECHO"),
            Op::AXPY => Some("AXPY"),
            Op::SPIN => Some("SPIN"),
            Op::TRAP => Some("TRAP"),
            Op::MEMCPY => Some("MEMCPY"),
            Op::MEMSET => Some("MEMSET"),
            Op::DOT => Some("DOT"),
            Op::GEMV => Some("GEMV"),
            Op::FIR => Some("FIR"),
            Op::COPY_IO => Some("COPY_IO"),
            _ => None,
        }
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "Op::{n}"),
            None => write!(f, "Op({})", self.0),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "op {}", self.0),
        }
    }
}

/// What [`Op::ECHO`] computes from its six argument words: every bit of the
/// payload reaches the result, and `[x, 0, 0, 0, 0, 0]` folds to `x`.
pub fn echo_fold(args: &[u64; ARGS_BYTES / 8]) -> u64 {
    args.iter()
        .enumerate()
        .fold(0, |acc, (i, &w)| acc ^ w.rotate_left(8 * i as u32))
}

/// The longest wait of an [`Op::SPIN`] task (10 s).
pub const SPIN_MAX_NS: u64 = crate::proto::layout::SPIN_MAX_NS;

/// The largest `n` of an [`Op::AXPY`] task.
pub const AXPY_MAX_N: usize = crate::proto::layout::AXPY_MAX_N;

/// Arguments of [`Op::AXPY`]: `y[i] = a * x[i] + y[i]` for `i < n`, `x` and
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_fold_returns_a_lone_first_word() {
        assert_eq!(echo_fold(&[0xdead_beef, 0, 0, 0, 0, 0]), 0xdead_beef);
        assert_ne!(echo_fold(&[0, 1, 0, 0, 0, 0]), 0);
        assert_eq!(echo_fold(&[0, 1, 0, 0, 0, 0]), 1 << 8);
    }

    #[test]
    fn op_names() {
        assert_eq!(format!("{}", Op::AXPY), "AXPY");
        assert_eq!(format!("{:?}", Op(77)), "Op(77)");
        use crate::ops::builtin::{AXPY, ECHO, SPIN, TRAP};
        assert!(AXPY.takes_pointers() && TRAP.takes_pointers());
        assert!(!ECHO.takes_pointers() && !SPIN.takes_pointers());
    }
}
