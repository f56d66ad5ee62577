//! Device memory pkq owns outside a kernel's own (a runtime's state memory,
//! [`StateMemory`]), and the waits on a caller's streams that the safe
//! buffer calls make ([`synchronize`]).

use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, result, sys};

use crate::cuda::driver::with_current;
use crate::error::{Error, Result};

/// Waits for the work queued on `stream` (a caller's), in the relaxed
/// capture mode (`with_current`): a graph that another thread captures in
/// global mode is neither broken by this wait nor refuses it.
pub(crate) fn synchronize(stream: &Arc<CudaStream>) -> Result<()> {
    with_current(stream.context(), || {
        // SAFETY: a live stream (borrowed) of the context made current
        // around the call.
        unsafe { result::stream::synchronize(stream.cu_stream()) }
    })??;
    Ok(())
}

/// Whether `stream` is of the context `ctx` (its driver handle).
pub(crate) fn same_context(stream: &Arc<CudaStream>, ctx: sys::CUcontext) -> bool {
    stream.context().cu_ctx() == ctx
}

/// Device memory allocated stream-ordered on a stream of its own (so that
/// neither its allocation nor its free, nor its copies, wait for a running
/// kernel), with copies in and out that are waited for.
pub(crate) struct StateMemory {
    memory: ManuallyDrop<CudaSlice<u8>>,
    /// Non-blocking, its own: its copies never wait for the resident kernel.
    stream: ManuallyDrop<Arc<CudaStream>>,
}

/// Freed stream-ordered on its own stream, with its context pushed around
/// cudarc's drops and the thread's own put back
/// ([`drop_in_context`](crate::cuda::driver::drop_in_context)).
impl Drop for StateMemory {
    fn drop(&mut self) {
        let ctx = self.stream.context().clone();
        // SAFETY: each taken exactly once, here; not used after.
        let (memory, stream) = unsafe {
            (
                ManuallyDrop::take(&mut self.memory),
                ManuallyDrop::take(&mut self.stream),
            )
        };
        // The slice first: its free is queued on the stream.
        crate::cuda::driver::drop_in_context(ctx, (memory, stream));
    }
}

impl StateMemory {
    /// `bytes` bytes (not zeroed) on `ctx`'s device. Refuses a device
    /// without stream-ordered allocation ([`Error::InvalidConfig`]): a
    /// plain `cuMemFree` waits for every kernel of the context, a resident
    /// one too.
    pub(crate) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
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
        Ok(Self {
            memory: ManuallyDrop::new(memory),
            stream: ManuallyDrop::new(stream),
        })
    }

    /// The device address at `off`.
    pub(crate) fn addr(&self, off: usize) -> u64 {
        // The context tracks no events: the guard records nothing.
        let (base, _guard) = self.memory.device_ptr(&self.stream);
        base + off as u64
    }

    /// Copies `out.len()` bytes from `off` into `out`, and waits for it.
    ///
    /// # Safety
    /// `off..off + out.len()` lies inside the memory, and no device work
    /// writes it meanwhile.
    pub(crate) unsafe fn read(&self, off: usize, out: &mut [u8]) -> Result<()> {
        let (addr, stream) = (self.addr(off), &self.stream);
        with_current(stream.context(), || {
            // SAFETY: the caller's range of live device memory of the
            // stream's context; the copy is waited for before `out` is read
            // or dropped.
            unsafe {
                result::memcpy_dtoh_async(out, addr, stream.cu_stream())?;
                result::stream::synchronize(stream.cu_stream())
            }
        })??;
        Ok(())
    }

    /// Copies `data` to `off`, and waits for it.
    ///
    /// # Safety
    /// `off..off + data.len()` lies inside the memory, and no device work
    /// reads or writes it meanwhile.
    pub(crate) unsafe fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        let (addr, stream) = (self.addr(off), &self.stream);
        with_current(stream.context(), || {
            // SAFETY: as in `read`; `data` lives until the copy is waited
            // for.
            unsafe {
                result::memcpy_htod_async(addr, data, stream.cu_stream())?;
                result::stream::synchronize(stream.cu_stream())
            }
        })??;
        Ok(())
    }
}
