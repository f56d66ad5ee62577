//! Ops declared once on the host with their argument type ([`TypedOp`]),
//! checked against the op table a device module exports (`ops::table`), so
//! that a host struct and a device struct that disagree are refused instead
//! of misread; and the tasks such an op describes (`ops::task`).

use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};

use bytemuck::Pod;

use crate::op::Op;
use crate::ops::table::Signature;
use crate::ops::task::{Check, Task, Tasks};

/// An op and the type of its arguments, declared once:
///
/// ```
/// use pkq::TypedOp;
///
/// #[repr(C)]
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// struct Gain {
///     gain: f32,
///     offset: f32,
/// }
/// // Device side: PKQ_OP_INFO(256, gain_args) in the module's PKQ_OP_TABLE.
/// const GAIN: TypedOp<Gain> = TypedOp::new(256, "GAIN");
/// assert_eq!(GAIN.op().0, 256);
/// let task = GAIN.args(&Gain { gain: 2.0, offset: 1.0 }); // submit it: pkq::Submit
/// assert_eq!(task.op(), GAIN.op());
/// ```
///
/// It describes the tasks a [`Submit`](crate::Submit) call sends: one
/// ([`TypedOp::args`]), one with an input ([`TypedOp::io`]), a batch of a
/// slot each ([`TypedOp::batch`]) or up to 32 to a slot
/// ([`TypedOp::packed`]). Every submit checks the declaration against the
/// kernel's op table (argument size and alignment, and whether the handler
/// dereferences device addresses), and [`Builder::op`](crate::Builder::op)
/// checks it once when the module loads.
pub struct TypedOp<A> {
    op: Op,
    name: &'static str,
    derefs: bool,
    _args: PhantomData<fn(&A)>,
}

impl<A> Clone for TypedOp<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for TypedOp<A> {}

impl<A> fmt::Debug for TypedOp<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (op {})", self.name, self.op.0)
    }
}

impl<A: Pod> TypedOp<A> {
    /// An op whose handler reads only its arguments: safe to submit. On the
    /// device: `PKQ_OP_INFO(code, Args)`, or `PKQ_OP_INFO_UP_TO(code, Args)`
    /// for a handler that takes up to `sizeof(Args)` bytes, which any host
    /// type of that size or less (and alignment no greater) matches.
    pub const fn new(code: u16, name: &'static str) -> Self {
        Self {
            op: Op(code),
            name,
            derefs: false,
            _args: PhantomData,
        }
    }

    /// An op whose handler dereferences device addresses among its arguments
    /// (`PKQ_OP_INFO_POINTERS` on the device): its tasks are submitted only
    /// once marked [`Task::unchecked`] (unsafe), or through a safe wrapper
    /// that checks the buffers.
    pub const fn with_pointers(code: u16, name: &'static str) -> Self {
        Self {
            op: Op(code),
            name,
            derefs: true,
            _args: PhantomData,
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

    /// Whether its handler dereferences device addresses.
    pub const fn takes_pointers(&self) -> bool {
        self.derefs
    }

    /// One task of this op with `args` (copied inline into its slot when it
    /// is submitted: at most 48 bytes).
    pub fn args<'a>(&self, args: &'a A) -> Task<'a> {
        Task::new(self.op, bytemuck::bytes_of(args), self.check())
    }

    /// One IO task of this op: `args` inline, and `input` in its slot's
    /// input area, where the handler reads it (`ctx.input`); the handler's
    /// output comes back with the completion
    /// ([`Ticket::wait_output`](crate::Ticket::wait_output)). Needs a
    /// runtime with IO areas ([`Builder::io`](crate::Builder::io)).
    pub fn io<'a>(&self, args: &'a A, input: &'a [u8]) -> Task<'a> {
        self.args(args).with_input(input)
    }

    /// One task of this op per element of `args`, each in a slot of its
    /// own, submitted with one reservation of consecutive slots (all or
    /// none; at most the ring's capacity of them) and reaped together as a
    /// [`Batch`](crate::Batch). The tasks spread over the workers as single
    /// submits do.
    pub fn batch<'a>(&self, args: &'a [A]) -> Tasks<'a, A> {
        Tasks::new(self.op, args, false, self.check())
    }

    /// One task of this op per element of `args` as [`TypedOp::batch`],
    /// but up to 32 tasks to a slot: each argument is at most 8 bytes and
    /// goes into the slot's 8-byte word of a side area; each result comes
    /// back as one 8-byte word. A task then costs the host about one 8-byte
    /// store and one 8-byte load, and the device two reads of host memory
    /// per 32 tasks (the slot, then its argument words; one for arguments
    /// of 0 bytes).
    ///
    /// The tasks of one slot run one after another on one worker (each by
    /// its whole warp, as a single task runs), and share their completion
    /// timestamps (the pack's start and end); slots spread over the workers
    /// as single tasks do. A batch of `n` tasks takes `ceil(n / 32)` slots,
    /// at most the ring's capacity. For many small tasks: a long task holds
    /// up the rest of its slot.
    pub fn packed<'a>(&self, args: &'a [A]) -> Tasks<'a, A> {
        Tasks::new(self.op, args, true, self.check())
    }

    /// What a submit checks of this declaration.
    fn check(&self) -> Check {
        Check::Declared {
            sig: self.signature(),
            pointers_allowed: false,
        }
    }

    pub(crate) fn signature(&self) -> Signature {
        Signature {
            op: self.op.0,
            name: self.name,
            // Past u32: no table row matches (its sizes are u32).
            bytes: u32::try_from(size_of::<A>()).unwrap_or(u32::MAX),
            align: align_of::<A>() as u32,
            derefs: self.derefs,
            state: false,
        }
    }
}
