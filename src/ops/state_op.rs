//! Ops on device state that pkq owns ([`StateOp`]): the handler finds the
//! state's address and length at the start of its arguments
//! (`pkq::StateArgs` in `cuda/pkq_handler.cuh`) and touches nothing else,
//! so a safe call can hand it state memory without checking any buffer or
//! waiting for any stream (`Lane::call_on_state`).

use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::layout::{ARGS_BYTES, STATE_OFF_ADDR, STATE_OFF_ARGS, STATE_OFF_BYTES};
use crate::op::Op;
use crate::ops::table::Signature;

/// An op on device state of type `S` (an array of them, kept between
/// tasks in a [`DeviceState`](crate::DeviceState)) with arguments `A`,
/// declared once:
///
/// ```
/// use pkq::StateOp;
///
/// #[repr(C)]
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// struct Integrator { sum: f64, count: u64 }
/// // Device side: PKQ_OP_INFO_STATE(300, double) in the module's PKQ_OP_TABLE,
/// // its handler taking pkq::StateArgs<double>.
/// const ADD: StateOp<Integrator, f64> = StateOp::new(300, "ADD");
/// assert_eq!(ADD.op().0, 300);
/// ```
///
/// The handler receives `pkq::StateArgs<A>`: the state's device address
/// and byte length, written by pkq, then `A` (at most 32 bytes). Declared
/// on the device with `PKQ_OP_INFO_STATE`, whose flag says its handler
/// touches no memory but the state's; [`Builder::state_op`](crate::Builder::state_op)
/// and every call check the declaration against the module's op table.
pub struct StateOp<S, A = ()> {
    op: Op,
    name: &'static str,
    _types: PhantomData<fn(&S, &A)>,
}

impl<S, A> Clone for StateOp<S, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S, A> Copy for StateOp<S, A> {}

impl<S, A> fmt::Debug for StateOp<S, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, on state)", self.name, self.op.0)
    }
}

impl<S: Pod, A: Pod> StateOp<S, A> {
    /// The op of code `code` on state `S` with arguments `A`.
    pub const fn new(code: u16, name: &'static str) -> Self {
        Self {
            op: Op(code),
            name,
            _types: PhantomData,
        }
    }

    /// The op code.
    pub const fn op(&self) -> Op {
        self.op
    }

    /// The name given at declaration.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The shape of `A` as arguments.
    pub(crate) fn shape() -> ArgsShape {
        ArgsShape {
            len: size_of::<A>(),
            align: align_of::<A>(),
        }
    }

    pub(crate) fn signature(&self) -> Signature {
        Self::shape().signature(self.op, self.name)
    }
}

/// A state op's arguments as the device's `pkq::StateArgs<A>` holds them:
/// `len` bytes aligned to `align`, after the state's address and length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArgsShape {
    pub(crate) len: usize,
    pub(crate) align: usize,
}

impl ArgsShape {
    /// The size and alignment of `pkq::StateArgs<A>` on the device.
    fn layout(self) -> (usize, usize) {
        let align = self.align.max(8);
        (
            (STATE_OFF_ARGS.saturating_add(self.len)).next_multiple_of(align),
            align,
        )
    }

    /// What the op table must list for the op `op` named `name`.
    pub(crate) fn signature(self, op: Op, name: &'static str) -> Signature {
        let (bytes, align) = self.layout();
        Signature {
            op: op.0,
            name,
            // Never matches a table entry when too large (refused anyway).
            bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
            align: align as u32,
            derefs: true,
            state: true,
        }
    }

    /// The slot's argument length: refused for arguments aligned to more
    /// than 8 bytes ([`Error::InvalidArgument`]) or that do not fit a slot
    /// after the state's address and length ([`Error::PayloadTooLarge`]).
    pub(crate) fn check(self, name: &str) -> Result<usize> {
        let (len, _) = self.layout();
        // The device's StateArgs<A> puts A at 16 only for alignments up to
        // 16, and its handlers take arguments aligned to 8 at most.
        if self.align > 8 {
            return Err(Error::InvalidArgument(format!(
                "{name}: arguments aligned to {} bytes; a slot's are aligned to 8 at most",
                self.align
            )));
        }
        if len > ARGS_BYTES {
            return Err(Error::PayloadTooLarge {
                len,
                max: ARGS_BYTES,
            });
        }
        Ok(len)
    }

    /// The slot's argument bytes: the state's address and byte length, then
    /// `args` (`self.len` bytes), zeros to the end; refused as
    /// [`Self::check`] says.
    pub(crate) fn encode(self, name: &str, addr: u64, bytes: u64, args: &[u8]) -> Result<Encoded> {
        let len = self.check(name)?;
        debug_assert_eq!(args.len(), self.len);
        let mut out = Encoded {
            bytes: [0; ARGS_BYTES],
            len,
        };
        let b = &mut out.bytes;
        b[STATE_OFF_ADDR..STATE_OFF_ADDR + 8].copy_from_slice(&addr.to_ne_bytes());
        b[STATE_OFF_BYTES..STATE_OFF_BYTES + 8].copy_from_slice(&bytes.to_ne_bytes());
        b[STATE_OFF_ARGS..STATE_OFF_ARGS + args.len()].copy_from_slice(args);
        Ok(out)
    }
}

/// A state op's argument bytes.
pub(crate) struct Encoded {
    bytes: [u8; ARGS_BYTES],
    len: usize,
}

impl Encoded {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_devices() {
        // StateArgs<A> in C++: two words, then A, padded to 8 at least.
        assert_eq!(StateOp::<u8, ()>::shape().layout(), (16, 8));
        assert_eq!(StateOp::<u8, f32>::shape().layout(), (24, 8));
        assert_eq!(StateOp::<u8, [f32; 8]>::shape().layout(), (48, 8));
        assert_eq!(StateOp::<u8, [u64; 4]>::shape().layout(), (48, 8));
        let shape = StateOp::<u8, [f32; 8]>::shape();
        let encoded = shape
            .encode("x", 0x1000, 72, bytemuck::bytes_of(&[1.0f32; 8]))
            .unwrap();
        let bytes = encoded.as_bytes();
        assert_eq!(bytes.len(), 48);
        assert_eq!(&bytes[..8], &0x1000u64.to_ne_bytes());
        assert_eq!(&bytes[8..16], &72u64.to_ne_bytes());
        assert_eq!(&bytes[16..20], &1.0f32.to_ne_bytes());
        assert!(matches!(
            StateOp::<u8, [u64; 5]>::shape().encode("big", 0, 0, &[0; 40]),
            Err(Error::PayloadTooLarge { len: 56, max: 48 })
        ));
        #[repr(C, align(16))]
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        struct Wide([u8; 16]);
        assert!(matches!(
            StateOp::<u8, Wide>::shape().encode("wide", 0, 0, &[0; 16]),
            Err(Error::InvalidArgument(_))
        ));
    }
}
