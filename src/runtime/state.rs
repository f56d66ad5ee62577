//! Device state that pkq owns ([`DeviceState`]) and the safe calls of an op
//! on it ([`Runtime::call_on_state`], and with data in and out through the
//! slot's IO areas, [`Runtime::call_on_state_io`]): state a handler keeps between tasks
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
//! stream: what it costs over [`Runtime::call_unchecked`] is the op table's
//! check, a check that the state is this runtime's, and the argument bytes
//! (`benches/results/custom_handler.json`).

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use bytemuck::Pod;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, result, sys};

use crate::cuda::driver::with_current;
use crate::error::{Error, Result};
use crate::ops::StateOp;
use crate::runtime::Runtime;
use crate::runtime::ticket::Completion;

/// Where states start: cudarc's allocations are 256-byte aligned, and so is
/// every state in the arena (a type aligned to more is refused).
const ALIGN: usize = 256;

/// The device memory a runtime's states come from, allocated before its
/// kernel starts ([`Builder::state_memory`](crate::Builder::state_memory)):
/// nothing is allocated or freed on the device while the kernel runs.
pub(crate) struct StateArena {
    memory: CudaSlice<u8>,
    /// The stream of the states' copies (non-blocking, its own: they never
    /// wait for the resident kernel).
    stream: Arc<CudaStream>,
    free: FreeList,
}

/// The free ranges `(offset, bytes)` of an arena, sorted and merged; every
/// range a multiple of `ALIGN` long, first fit.
struct FreeList(Mutex<Vec<(usize, usize)>>);

impl FreeList {
    fn new(bytes: usize) -> Self {
        Self(Mutex::new(vec![(0, bytes)]))
    }

    fn ranges(&self) -> std::sync::MutexGuard<'_, Vec<(usize, usize)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first free range of `bytes` (rounded up to `ALIGN`): its offset.
    fn take(&self, bytes: usize) -> Option<usize> {
        let bytes = bytes.checked_next_multiple_of(ALIGN)?;
        let mut free = self.ranges();
        let i = free.iter().position(|&(_, len)| len >= bytes)?;
        let (off, len) = free[i];
        if len == bytes {
            free.remove(i);
        } else {
            free[i] = (off + bytes, len - bytes);
        }
        Some(off)
    }

    /// Gives back what [`Self::take`] gave for `bytes`.
    fn give(&self, off: usize, bytes: usize) {
        let bytes = bytes.next_multiple_of(ALIGN);
        let mut free = self.ranges();
        let i = free.partition_point(|&(o, _)| o < off);
        free.insert(i, (off, bytes));
        // Merge with the next range, then with the previous.
        if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
            free[i].1 += free[i + 1].1;
            free.remove(i + 1);
        }
        if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
            free[i - 1].1 += free[i].1;
            free.remove(i);
        }
    }
}

impl StateArena {
    /// `bytes` (rounded up to `ALIGN`) of device memory in `ctx`; none for
    /// 0. [`Error::InvalidConfig`] where the device has no stream-ordered
    /// allocation: freeing the memory would then wait for every kernel of
    /// the context, another runtime's resident one included.
    pub(crate) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Option<Arc<Self>>> {
        if bytes == 0 {
            return Ok(None);
        }
        let bytes = bytes.checked_next_multiple_of(ALIGN).ok_or_else(|| {
            Error::InvalidConfig(format!("state memory of {bytes} bytes is too large"))
        })?;
        let pools =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?;
        if pools == 0 {
            return Err(Error::InvalidConfig(
                "state memory needs a device with stream-ordered allocation \
                 (Builder::state_memory(0) for none)"
                    .into(),
            ));
        }
        let stream = ctx.new_stream()?;
        // Not zeroed: a memset is a kernel, which waits for room on the
        // device (another resident kernel may hold every multiprocessor);
        // every state is written whole before a task sees it.
        // SAFETY: u8 has no invalid bit patterns, and nothing reads the
        // memory before a state's upload wrote it.
        let memory = unsafe { stream.alloc::<u8>(bytes)? };
        Ok(Some(Arc::new(Self {
            memory,
            stream,
            free: FreeList::new(bytes),
        })))
    }

    /// The device address at `off`.
    fn addr(&self, off: usize) -> u64 {
        // The context tracks no events: the guard records nothing.
        let (base, _guard) = self.memory.device_ptr(&self.stream);
        base + off as u64
    }
}

/// An array of `S` in device memory, for ops on state ([`StateOp`]): made by
/// [`Runtime::state`] from the runtime's state memory, used by
/// [`Runtime::call_on_state`]; its memory goes back to the runtime when it
/// is dropped.
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

    /// Whether it holds none (never: [`Runtime::state`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<S>()
    }

    /// A copy of the state as the last call left it.
    pub fn read(&self) -> Result<Vec<S>> {
        let mut bytes = vec![0u8; self.bytes()];
        let (addr, stream) = (self.arena.addr(self.offset), &self.arena.stream);
        with_current(stream.context(), || {
            // SAFETY: the state's range of the arena, live device memory of
            // the stream's context, is this state's alone; no task uses it
            // (calls take the state `&mut` and return once their task is
            // done); the copy is waited for before `bytes` is read or
            // dropped.
            unsafe {
                result::memcpy_dtoh_async(&mut bytes[..], addr, stream.cu_stream())?;
                result::stream::synchronize(stream.cu_stream())
            }
        })??;
        // Never zero-sized (`Runtime::state` refuses that).
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
        let (addr, stream) = (self.arena.addr(self.offset), &self.arena.stream);
        with_current(stream.context(), || {
            // SAFETY: as in `read`; `data` (as many bytes as the range)
            // lives until the copy is waited for.
            unsafe {
                result::memcpy_htod_async(
                    addr,
                    bytemuck::cast_slice::<S, u8>(data),
                    stream.cu_stream(),
                )?;
                result::stream::synchronize(stream.cu_stream())
            }
        })??;
        Ok(())
    }
}

impl Runtime {
    /// A state holding a copy of `init` (at least one element), in the
    /// runtime's state memory, for ops on state: the copy is waited for
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
                "no {bytes} bytes left of the runtime's state memory (Builder::state_memory)"
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
    /// another runtime ([`Error::InvalidArgument`]); a ring held by an
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
        let mut ticket = unsafe {
            self.thread_producer()
                .submit_unchecked_bytes(op.op(), encoded.as_bytes())?
        };
        self.wait_borrowing(&mut ticket)
    }

    /// [`Runtime::call_on_state`] of an IO task: `input` in the slot's
    /// input area, where the handler reads it (`ctx.input`), and the bytes
    /// it wrote to `ctx.output` returned with the completion, as
    /// [`Runtime::submit_io`] and [`Ticket::wait_output`](crate::Ticket::wait_output)
    /// do. One round trip: a sensor frame in, the state stepped, the
    /// commands out.
    ///
    /// Refuses, with nothing submitted, what [`Runtime::call_on_state`]
    /// refuses, and: a runtime without IO areas ([`Error::InvalidConfig`]);
    /// more input than its areas hold ([`Error::PayloadTooLarge`]). An
    /// output longer than the areas fails the task
    /// ([`Error::Task`], `BadArgs`). Waits as [`Runtime::call_on_state`].
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
        let mut ticket = unsafe {
            self.thread_producer()
                .submit_unchecked_io_bytes(op.op(), encoded.as_bytes(), input)?
        };
        let c = self.wait_borrowing(&mut ticket)?;
        Ok((c, ticket.take_output()))
    }

    /// The arguments of a task of `op` on `state`: the state's address and
    /// length, then `args`; refused as [`Runtime::call_on_state`] says.
    fn state_args<S: Pod, A: Pod>(
        &self,
        op: &StateOp<S, A>,
        state: &DeviceState<S>,
        args: &A,
    ) -> Result<crate::ops::stateful::Encoded> {
        // The arguments' own refusals first: no table lists a state op whose
        // arguments cannot fit a slot, so its check would say OpMismatch.
        op.check_args()?;
        self.shared.ops.check(&op.signature())?;
        if !self
            .shared
            .state
            .as_ref()
            .is_some_and(|a| Arc::ptr_eq(a, &state.arena))
        {
            return Err(Error::InvalidArgument(format!(
                "{}: the state is another runtime's",
                op.name()
            )));
        }
        op.encode(state.arena.addr(state.offset), state.bytes() as u64, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_list_takes_first_fit_and_merges_what_comes_back() {
        let f = FreeList::new(4 * ALIGN);
        assert_eq!(f.take(1), Some(0));
        assert_eq!(f.take(ALIGN + 1), Some(ALIGN));
        assert_eq!(f.take(ALIGN), Some(3 * ALIGN));
        assert_eq!(f.take(1), None, "full");
        assert_eq!(f.take(usize::MAX), None, "too large to round up");
        f.give(ALIGN, ALIGN + 1);
        assert_eq!(f.take(3 * ALIGN), None, "two free, not three");
        f.give(0, 1);
        f.give(3 * ALIGN, ALIGN);
        assert_eq!(*f.ranges(), [(0, 4 * ALIGN)], "merged whole again");
        assert_eq!(f.take(4 * ALIGN), Some(0));
    }
}
