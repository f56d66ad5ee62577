//! Device state that pkq owns ([`DeviceState`]) and the safe calls of an op
//! on it ([`Lane::call_on_state`], and with data in and out through the
//! slot's IO areas, [`Lane::call_on_state_io`]): state a handler keeps between tasks
//! (an integrator, an order book, a model's weights) without a stream
//! synchronization per call.
//!
//! The memory is the runtime's, allocated before its kernel starts, so
//! nothing is allocated or freed on the device while it runs. Only pkq
//! touches it: a state is written at creation and by
//! [`DeviceState::write`], read by [`DeviceState::read`], each a copy on a
//! stream of the runtime's own for its state memory (one for all its
//! states: a copy's wait also waits for copies of other states queued
//! before it), waited for before the call returns, and
//! used by one task at a time (a call takes it `&mut` and returns once the
//! task is done). So a call needs no check of the buffer and no wait for a
//! stream: what it costs over an unchecked task ([`Task::unchecked`]) is the op table's
//! check, a check that the state is this runtime's, and the argument bytes
//! (`pkq-bench/results/custom_handler.json`).

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::op::Op;
use crate::ops::state_op::ArgsShape;
use crate::ops::{StateOp, Task};
use crate::runtime::arena::{ALIGN, StateArena};
use crate::runtime::lane::Lane;
use crate::runtime::submit::Submit;
use crate::runtime::ticket::Completion;

/// An array of `S` in device memory, for ops on state ([`StateOp`]): made by
/// [`Lane::state`] from its lane's state memory (each lane of a runtime
/// has its own: [`Builder::state_memory`](crate::Builder::state_memory)),
/// used by [`Lane::call_on_state`] of that lane; its memory goes back to
/// the lane when it is dropped.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// use pkq::{Runtime, StateOp};
/// #[repr(C)]
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// struct Integrator { sum: f64, count: u64 }
/// const ADD: StateOp<Integrator, f64> = StateOp::new(300, "ADD");
/// # let image: Vec<u8> = Vec::new();
/// let rt = Runtime::builder().module(image, "my_kernel").state_op(&ADD).build()?;
/// let mut acc = rt.state(&[Integrator { sum: 0.0, count: 0 }])?;
/// for x in [1.0, 2.0, 3.0] {
///     rt.call_on_state(&ADD, &mut acc, &x)?;
/// }
/// assert_eq!(acc.read()?[0].count, 3);
/// # Ok(()) }
/// ```
pub struct DeviceState<S> {
    arena: Arc<StateArena>,
    offset: usize,
    len: usize,
    _type: PhantomData<S>,
}

impl<S> std::fmt::Debug for DeviceState<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceState")
            .field("len", &self.len)
            .field("offset", &self.offset)
            .finish()
    }
}

impl<S> Drop for DeviceState<S> {
    fn drop(&mut self) {
        self.arena
            .free
            .give(self.offset, self.len * std::mem::size_of::<S>());
    }
}

impl<S: Pod> DeviceState<S> {
    /// The number of `S` it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none (never: [`Lane::state`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<S>()
    }

    /// A copy of the state as the last call left it.
    pub fn read(&self) -> Result<Vec<S>> {
        let mut bytes = vec![0u8; self.bytes()];
        // SAFETY: the state's range of the arena is this state's alone; no
        // task uses it (calls take the state `&mut` and return once their
        // task is done).
        unsafe { self.arena.memory.read(self.offset, &mut bytes)? };
        // Never zero-sized (`Lane::state` refuses that).
        Ok(bytes
            .chunks_exact(std::mem::size_of::<S>())
            .map(bytemuck::pod_read_unaligned)
            .collect())
    }

    /// Replaces the state with `data` (as many `S` as it holds, else
    /// [`Error::InvalidArgument`]); the next call sees it.
    pub fn write(&mut self, data: &[S]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::InvalidArgument(format!(
                "a state of {} elements cannot take {}",
                self.len,
                data.len()
            )));
        }
        self.upload(data)
    }

    fn upload(&self, data: &[S]) -> Result<()> {
        // SAFETY: as in `read`; `data` holds as many bytes as the range.
        unsafe {
            self.arena
                .memory
                .write(self.offset, bytemuck::cast_slice::<S, u8>(data))
        }
    }
}

impl Lane {
    /// A state holding a copy of `init` (at least one element), in this
    /// lane's state memory, for ops on state: the copy is waited for
    /// here, once, never per call. Refuses an empty `init`, a zero-sized
    /// `S`, or an `S` aligned to more than 256 bytes
    /// ([`Error::InvalidArgument`]); a runtime with no state memory, or
    /// not enough left ([`Error::InvalidConfig`]: see
    /// [`Builder::state_memory`](crate::Builder::state_memory)).
    pub fn state<S: Pod>(&self, init: &[S]) -> Result<DeviceState<S>> {
        if init.is_empty() || std::mem::size_of::<S>() == 0 {
            return Err(Error::InvalidArgument(
                "a device state holds at least one element of a type of at least one byte".into(),
            ));
        }
        if std::mem::align_of::<S>() > ALIGN {
            return Err(Error::InvalidArgument(format!(
                "a device state's type may be aligned to at most {ALIGN} bytes (this one: {})",
                std::mem::align_of::<S>()
            )));
        }
        let arena = self.shared.state.as_ref().ok_or_else(|| {
            Error::InvalidConfig(
                "this runtime has no state memory (Builder::state_memory, on a CUDA device)".into(),
            )
        })?;
        let bytes = std::mem::size_of_val(init);
        let offset = arena.free.take(bytes).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "no {bytes} bytes left of the lane's state memory (Builder::state_memory)"
            ))
        })?;
        let state = DeviceState {
            arena: arena.clone(),
            offset,
            len: init.len(),
            _type: PhantomData,
        };
        state.upload(init)?;
        Ok(state)
    }

    /// Runs one task of `op` on `state` with `args` and waits for it: no
    /// stream synchronization and no buffer check per call, since only pkq
    /// touches the state (see [`DeviceState`]).
    ///
    /// Refuses, with nothing submitted: an op the kernel's op table does
    /// not list as a state op of these argument sizes
    /// ([`Error::OpMismatch`]); arguments that do not fit a slot after the
    /// state's address and length ([`Error::PayloadTooLarge`]), or whose
    /// type is aligned to more than 8 bytes ([`Error::InvalidArgument`]); a state of
    /// another lane, of this runtime or another ([`Error::InvalidArgument`]); a ring held by an
    /// exclusive producer, as for every call of the runtime's own
    /// ([`Error::RingHeld`]);
    /// after shutdown or cancel, [`Error::Closed`]. A handler's failure is
    /// [`Error::Task`]. A wait that ends otherwise (a fault, a stop) stops
    /// the kernel and returns only once it is known to have stopped (it
    /// exited; or, found dead by a device fault, none of its pollers moved
    /// for the stall bound or the stop timeout, whichever is shorter; or
    /// aborts the process if the kernel has not exited once the stop's wait,
    /// and then one more stop timeout, are over), so the state is never
    /// used by a task after the call returns.
    pub fn call_on_state<S: Pod, A: Pod>(
        &self,
        op: &StateOp<S, A>,
        state: &mut DeviceState<S>,
        args: &A,
    ) -> Result<Completion> {
        let encoded = self.state_args(op, state, args)?;
        // SAFETY: the op table lists the op as a state op, whose handler
        // touches only the state's bytes at the encoded address: live
        // device memory of the runtime's context (its state memory, which
        // lives as long as any state does), borrowed exclusively for this
        // call, which waits for the task (or for the kernel to stop) before
        // it returns.
        let task = unsafe { Task::raw(op.op(), encoded.as_bytes()).unchecked() };
        let mut ticket = self.submit(task)?;
        self.wait_borrowing(&mut ticket)
    }

    /// [`Lane::call_on_state`] of an IO task: `input` in the slot's
    /// input area, where the handler reads it (`ctx.input`), and the bytes
    /// it wrote to `ctx.output` returned with the completion, as
    /// an IO task ([`TypedOp::io`](crate::TypedOp::io)) and [`Ticket::wait_output`](crate::Ticket::wait_output)
    /// do. One round trip: a sensor frame in, the state stepped, the
    /// commands out.
    ///
    /// Refuses, with nothing submitted, what [`Lane::call_on_state`]
    /// refuses, and: a runtime without IO areas ([`Error::InvalidConfig`]);
    /// more input than its areas hold ([`Error::PayloadTooLarge`]). An
    /// output longer than the areas fails the task
    /// ([`Error::Task`], `BadArgs`). Waits as [`Lane::call_on_state`].
    pub fn call_on_state_io<S: Pod, A: Pod>(
        &self,
        op: &StateOp<S, A>,
        state: &mut DeviceState<S>,
        args: &A,
        input: &[u8],
    ) -> Result<(Completion, Vec<u8>)> {
        let encoded = self.state_args(op, state, args)?;
        // SAFETY: as in `call_on_state`; the input and output areas are the
        // slot's own, which the ticket holds until the task completed.
        let task = unsafe {
            Task::raw(op.op(), encoded.as_bytes())
                .with_input(input)
                .unchecked()
        };
        let mut ticket = self.submit(task)?;
        let c = self.wait_borrowing(&mut ticket)?;
        Ok((c, ticket.take_output()))
    }

    /// [`Lane::call_on_state`] of the op of code `op` with its arguments as
    /// bytes (at most 32, else [`Error::PayloadTooLarge`] of `args.len()`
    /// and 32), for callers that know their layout only at run time (the C
    /// and Python bindings): checked against the op table as a [`StateOp`]
    /// whose arguments are `args.len()` bytes aligned to 1 (the table holds
    /// the device's argument struct, whose size is a multiple of 8: a
    /// length is checked rounded up to it, the bytes past `args` sent as
    /// 0), its [`Error::OpMismatch`] unnamed. Refuses and waits as
    /// [`Lane::call_on_state`] otherwise.
    pub fn call_on_state_raw<S: Pod>(
        &self,
        op: Op,
        state: &mut DeviceState<S>,
        args: &[u8],
    ) -> Result<Completion> {
        let encoded = self.raw_state_args(op, state, args)?;
        // SAFETY: as in `call_on_state`.
        let task = unsafe { Task::raw(op, encoded.as_bytes()).unchecked() };
        let mut ticket = self.submit(task)?;
        self.wait_borrowing(&mut ticket)
    }

    /// [`Lane::call_on_state_io`] with arguments as bytes, as
    /// [`Lane::call_on_state_raw`] takes them.
    pub fn call_on_state_raw_io<S: Pod>(
        &self,
        op: Op,
        state: &mut DeviceState<S>,
        args: &[u8],
        input: &[u8],
    ) -> Result<(Completion, Vec<u8>)> {
        let encoded = self.raw_state_args(op, state, args)?;
        // SAFETY: as in `call_on_state_io`.
        let task = unsafe {
            Task::raw(op, encoded.as_bytes())
                .with_input(input)
                .unchecked()
        };
        let mut ticket = self.submit(task)?;
        let c = self.wait_borrowing(&mut ticket)?;
        Ok((c, ticket.take_output()))
    }

    /// The arguments of a task of `op` on `state`: the state's address and
    /// length, then `args`; refused as [`Lane::call_on_state`] says.
    fn state_args<S: Pod, A: Pod>(
        &self,
        op: &StateOp<S, A>,
        state: &DeviceState<S>,
        args: &A,
    ) -> Result<crate::ops::state_op::Encoded> {
        let shape = StateOp::<S, A>::shape();
        self.shaped_state_args(op.op(), op.name(), shape, state, bytemuck::bytes_of(args))
    }

    /// [`Self::state_args`] of arguments as bytes (aligned to 1).
    fn raw_state_args<S: Pod>(
        &self,
        op: Op,
        state: &DeviceState<S>,
        args: &[u8],
    ) -> Result<crate::ops::state_op::Encoded> {
        // The bytes' own limit, as the caller counts them.
        let most = crate::layout::ARGS_BYTES - crate::layout::STATE_OFF_ARGS;
        if args.len() > most {
            return Err(Error::PayloadTooLarge {
                len: args.len(),
                max: most,
            });
        }
        let shape = ArgsShape {
            len: args.len(),
            align: 1,
        };
        // Unnamed: an OpMismatch reads "op CODE: why".
        self.shaped_state_args(op, "", shape, state, args)
    }

    fn shaped_state_args<S: Pod>(
        &self,
        op: Op,
        name: &'static str,
        shape: ArgsShape,
        state: &DeviceState<S>,
        args: &[u8],
    ) -> Result<crate::ops::state_op::Encoded> {
        // The arguments' own refusals first: no table lists a state op whose
        // arguments cannot fit a slot, so its check would say OpMismatch.
        shape.check(name)?;
        self.shared.ops.check(&shape.signature(op, name))?;
        if !self
            .shared
            .state
            .as_ref()
            .is_some_and(|a| Arc::ptr_eq(a, &state.arena))
        {
            let label = if name.is_empty() { "state op" } else { name };
            return Err(Error::InvalidArgument(format!(
                "{label}: the state is another lane's (of this runtime or another)"
            )));
        }
        shape.encode(
            name,
            state.arena.addr(state.offset),
            state.bytes() as u64,
            args,
        )
    }
}
