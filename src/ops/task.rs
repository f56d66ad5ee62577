//! What a submit sends: one task ([`Task`]) or a run of tasks of one op
//! ([`Tasks`]), each with what the op table is to check of it. Made by a
//! declared op ([`TypedOp::args`](crate::TypedOp::args) and its siblings)
//! or from raw bytes ([`Task::raw`]); sent by [`Submit`](crate::Submit).

use std::fmt;

use bytemuck::Pod;

use crate::error::Result;
use crate::op::Op;
use crate::ops::table::OpTable;
use crate::ops::table::Signature;

/// What the op table checks of a task before it is submitted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Check {
    /// A declared op ([`TypedOp`](crate::TypedOp)): its signature must
    /// match the table's row; a handler that dereferences device addresses
    /// only where `pointers_allowed` (marked unchecked: the caller vouches).
    Declared {
        sig: Signature,
        pointers_allowed: bool,
    },
    /// Raw argument bytes: the table's row must take their length, and
    /// not dereference device addresses (`OpTable::refuse`).
    Listed,
    /// Raw argument bytes marked unchecked: no check at all.
    Nothing,
}

impl Check {
    /// The same check, letting a handler that dereferences device
    /// addresses through (see [`Task::unchecked`]).
    fn unchecked(self) -> Self {
        match self {
            Self::Declared { sig, .. } => Self::Declared {
                sig,
                pointers_allowed: true,
            },
            Self::Listed | Self::Nothing => Self::Nothing,
        }
    }

    /// Whether the task may run a handler that dereferences device
    /// addresses, let through by [`Task::unchecked`] (a declared pointer
    /// op, or raw bytes, checked by nothing).
    pub(crate) fn lets_pointers_through(&self) -> bool {
        match self {
            Self::Declared {
                sig,
                pointers_allowed,
            } => sig.derefs && *pointers_allowed,
            Self::Listed => false,
            Self::Nothing => true,
        }
    }

    /// Refuses, against `table`, a task of `op` with `len` argument bytes
    /// ([`Error::OpMismatch`](crate::Error::OpMismatch),
    /// [`Error::UncheckedOp`](crate::Error::UncheckedOp)).
    #[inline(always)]
    pub(crate) fn apply(&self, table: &OpTable, op: Op, len: usize) -> Result<()> {
        match self {
            Self::Declared {
                sig,
                pointers_allowed,
            } => {
                table.check(sig)?;
                if sig.derefs && !pointers_allowed {
                    return Err(crate::Error::UncheckedOp(op));
                }
                Ok(())
            }
            Self::Listed => table.refuse(op, len),
            Self::Nothing => table.refuse_width(op),
        }
    }
}

/// One task: an op, its argument bytes (at most 48, copied inline into its
/// slot) and, for an IO task, its input. Made by
/// [`TypedOp::args`](crate::TypedOp::args), [`TypedOp::io`](crate::TypedOp::io)
/// or [`Task::raw`]; [`Submit::submit`](crate::Submit::submit) sends it and
/// returns its [`Ticket`](crate::Ticket).
#[derive(Clone, Copy)]
#[must_use = "a task does nothing until it is submitted (pkq::Submit)"]
pub struct Task<'a> {
    pub(crate) op: Op,
    pub(crate) args: &'a [u8],
    pub(crate) input: Option<&'a [u8]>,
    pub(crate) check: Check,
    /// Its worker fences at system scope before the completion
    /// ([`Task::writing_host_memory`]).
    pub(crate) host: bool,
}

impl fmt::Debug for Task<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task")
            .field("op", &self.op)
            .field("args", &self.args.len())
            .field("input", &self.input.map(<[u8]>::len))
            .field("host", &self.host)
            .finish()
    }
}

impl<'a> Task<'a> {
    pub(crate) fn new(op: Op, args: &'a [u8], check: Check) -> Self {
        Self {
            op,
            args,
            input: None,
            check,
            host: false,
        }
    }

    /// A task of op `op` with raw argument bytes, for ops declared nowhere
    /// on the host (a binding's caller, a module's op known by its code).
    /// A submit checks them against the kernel's op table: the op must be
    /// listed (in a module of your own; pkq's kernel answers an op it does
    /// not serve with [`TaskStatus::UnknownOp`](crate::TaskStatus::UnknownOp)),
    /// with this many argument bytes (or up to them, for a row declared so),
    /// and not dereference device addresses.
    pub fn raw(op: Op, args: &'a [u8]) -> Self {
        Self::new(op, args, Check::Listed)
    }

    /// The same task, with `input` in its slot's input area: an IO task
    /// (see [`TypedOp::io`](crate::TypedOp::io)).
    pub fn with_input(mut self, input: &'a [u8]) -> Self {
        self.input = Some(input);
        self
    }

    /// The same task, allowed to run a handler that dereferences device
    /// addresses among its arguments (or faults the device on purpose).
    /// A declared op is still checked against the op table (its argument
    /// layout and pointer flag); a raw task only for its lane's width (an
    /// op the table lists for another width is refused:
    /// [`Width`](crate::Width)).
    ///
    /// # Safety
    /// Every device address in the arguments must be valid for what the
    /// op's handler does with it (for [`builtin::AXPY`](crate::builtin::AXPY):
    /// `n` `f32`s readable at `x`, writable at `y`, not overlapping unless
    /// equal, in the runtime's context), with no other work touching that
    /// memory until the task completed, and stay so until its ticket has
    /// reported completion or the kernel is known to have stopped
    /// ([`Runtime::shutdown`](crate::Runtime::shutdown) returned `Ok`). An
    /// error from a wait alone does not mean the kernel stopped. A raw task
    /// must also carry the arguments its handler expects.
    pub unsafe fn unchecked(mut self) -> Self {
        self.check = self.check.unchecked();
        self
    }

    /// The same task, its handler's writes made visible to the host before
    /// its completion (a system-scope fence on the device, where a task
    /// otherwise gets a GPU-scope one): for a task that writes a
    /// [`HostBuffer`](crate::HostBuffer) (the safe calls mark theirs), so
    /// the host reads what it wrote once it sees the completion.
    pub fn writing_host_memory(mut self) -> Self {
        self.host = true;
        self
    }

    /// Its op.
    pub fn op(&self) -> Op {
        self.op
    }
}

/// A run of tasks of one op, one per argument, submitted with one
/// reservation and reaped together as a [`Batch`](crate::Batch): a slot
/// each ([`TypedOp::batch`](crate::TypedOp::batch)) or up to 32 to a slot
/// ([`TypedOp::packed`](crate::TypedOp::packed)).
#[must_use = "tasks do nothing until they are submitted (pkq::Submit)"]
pub struct Tasks<'a, A> {
    pub(crate) op: Op,
    pub(crate) args: &'a [A],
    pub(crate) packed: bool,
    pub(crate) check: Check,
}

impl<A> Clone for Tasks<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Tasks<'_, A> {}

impl<A> fmt::Debug for Tasks<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tasks")
            .field("op", &self.op)
            .field("len", &self.args.len())
            .field("packed", &self.packed)
            .finish()
    }
}

impl<'a, A: Pod> Tasks<'a, A> {
    pub(crate) fn new(op: Op, args: &'a [A], packed: bool, check: Check) -> Self {
        Self {
            op,
            args,
            packed,
            check,
        }
    }

    /// A run of tasks of op `op`, one per element of `args`, a slot each
    /// (as [`TypedOp::batch`](crate::TypedOp::batch)), for ops declared
    /// nowhere on the host: checked as [`Task::raw`] is, each element's
    /// bytes being one task's arguments.
    pub fn raw_batch(op: Op, args: &'a [A]) -> Self {
        Self::new(op, args, false, Check::Listed)
    }

    /// As [`Tasks::raw_batch`], up to 32 tasks to a slot (as
    /// [`TypedOp::packed`](crate::TypedOp::packed)).
    pub fn raw_packed(op: Op, args: &'a [A]) -> Self {
        Self::new(op, args, true, Check::Listed)
    }

    /// The same tasks, allowed to run a handler that dereferences device
    /// addresses among their arguments (see [`Task::unchecked`]).
    ///
    /// # Safety
    /// As [`Task::unchecked`], for every task of the run: every device
    /// address in `args` must be valid for what the op does with it until
    /// the batch reported the task's completion or the kernel is known to
    /// have stopped.
    pub unsafe fn unchecked(mut self) -> Self {
        self.check = self.check.unchecked();
        self
    }

    /// Their op.
    pub fn op(&self) -> Op {
        self.op
    }

    /// How many tasks.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }
}
