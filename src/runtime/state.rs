//! Device state that pkq owns ([`DeviceState`]) and the safe call of an op
//! on it ([`Runtime::call_on_state`]): state a handler keeps between tasks
//! (an integrator, an order book, a model's weights) without a stream
//! synchronization per call.
//!
//! Only pkq touches the memory: it is written at creation and by
//! [`DeviceState::write`], read by [`DeviceState::read`], each a copy on the
//! state's own stream waited for before the call returns, and used by one
//! task at a time (a call takes it `&mut` and returns once the task is
//! done). So a call needs no check of the buffer and no wait for a stream:
//! what it costs over [`Runtime::call_unchecked`] is the op table's check
//! and the argument bytes (`benches/results/custom_handler.json`).

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use crate::error::{Error, Result};
use crate::ops::StateOp;
use crate::runtime::Runtime;
use crate::runtime::ticket::Completion;

/// An array of `S` in device memory, for ops on state ([`StateOp`]): made by
/// [`Runtime::state`], used by [`Runtime::call_on_state`].
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
    /// `len * size_of::<S>()` bytes (cudarc's allocations are 256-byte
    /// aligned: any `S` fits).
    bytes: CudaSlice<u8>,
    len: usize,
    /// The stream of its copies (non-blocking, its own: they never wait for
    /// the resident kernel).
    stream: Arc<CudaStream>,
    _type: PhantomData<S>,
}

impl<S> std::fmt::Debug for DeviceState<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceState")
            .field("len", &self.len)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl<S: Pod> DeviceState<S> {
    /// The number of `S` it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy of the state as the last call left it.
    pub fn read(&self) -> Result<Vec<S>> {
        let bytes = self.stream.clone_dtoh(&self.bytes)?;
        self.stream.synchronize()?;
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
        self.stream
            .memcpy_htod(bytemuck::cast_slice::<S, u8>(data), &mut self.bytes)?;
        self.stream.synchronize()?;
        Ok(())
    }
}

impl Runtime {
    /// Device memory in the runtime's context holding a copy of `init`
    /// (at least one element), for ops on state: the copy is waited for
    /// here, once, never per call. Refuses an empty `init` or a zero-sized
    /// `S` ([`Error::InvalidArgument`]); a runtime without a CUDA kernel
    /// ([`Error::InvalidConfig`]).
    pub fn state<S: Pod>(&self, init: &[S]) -> Result<DeviceState<S>> {
        if init.is_empty() || std::mem::size_of::<S>() == 0 {
            return Err(Error::InvalidArgument(
                "a device state holds at least one element of a type of at least one byte".into(),
            ));
        }
        let kernel = self.shared.engine.cuda().ok_or_else(|| {
            Error::InvalidConfig("device state needs a runtime on a CUDA device".into())
        })?;
        let stream = kernel.context().new_stream()?;
        let bytes = stream.clone_htod(bytemuck::cast_slice::<S, u8>(init))?;
        stream.synchronize()?;
        Ok(DeviceState {
            bytes,
            len: init.len(),
            stream,
            _type: PhantomData,
        })
    }

    /// Runs one task of `op` on `state` with `args` and waits for it: no
    /// stream synchronization and no buffer check per call, since only pkq
    /// touches the state (see [`DeviceState`]).
    ///
    /// Refuses, with nothing submitted: an op the kernel's op table does
    /// not list as a state op of these argument sizes
    /// ([`Error::OpMismatch`]); arguments that do not fit a slot after the
    /// state's address and length ([`Error::PayloadTooLarge`]); a state of
    /// another context than the runtime's ([`Error::InvalidArgument`]);
    /// after shutdown or cancel, [`Error::Closed`]. A handler's failure is
    /// [`Error::Task`]. A wait that ends otherwise (a fault, a stop) stops
    /// the kernel and returns only once it is known to have stopped, so the
    /// state is never used by a task after the call returns.
    pub fn call_on_state<S: Pod, A: Pod>(
        &self,
        op: &StateOp<S, A>,
        state: &mut DeviceState<S>,
        args: &A,
    ) -> Result<Completion> {
        self.shared.ops.check(&op.signature())?;
        let ours = self.shared.engine.cuda().map(|k| k.cu_ctx());
        if Some(state.stream.context().cu_ctx()) != ours {
            return Err(Error::InvalidArgument(format!(
                "{}: the state lives in another context than the runtime's (device {}'s primary \
                 context)",
                op.name(),
                self.shared.device
            )));
        }
        // The context tracks no events: the guard records nothing.
        let (addr, _guard) = state.bytes.device_ptr(&state.stream);
        let encoded = op.encode(addr, state.bytes.len() as u64, args)?;
        // SAFETY: the op table lists the op as a state op, whose handler
        // touches only the state's bytes at `addr`: live device memory of
        // the runtime's context, borrowed exclusively for this call, which
        // waits for the task (or for the kernel to stop) before it returns.
        let ticket = unsafe {
            self.thread_producer()
                .submit_unchecked_bytes(op.op(), encoded.as_bytes())?
        };
        self.wait_borrowing(ticket)
    }
}
