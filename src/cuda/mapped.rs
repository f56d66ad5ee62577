//! Mapped, pinned host memory: `cuMemHostAlloc(DEVICEMAP | PORTABLE)` with its
//! device address (cudarc's `PinnedHostSlice` gives no device pointer).
//!
//! Plain write-back pages: measured on the GPU machine, write-combined
//! pages, non-temporal stores and pages registered with `cuMemHostRegister`
//! were no faster for a slot's few words, and slower where they need an
//! `sfence` (docs/design/mapped-memory.md#pages). A plain input of thousands of bytes is the
//! exception: non-temporal stores spare its cold lines a read
//! (`io::write_plain_input`).

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DriverError, sys};

use crate::proto::words::{Backing, Words};
use crate::sync::statics::{Mutex, lock};

/// An allocation of 8-byte words that the host and the device both address.
/// Shared as an `Arc`: every view of it ([`Words`]) and the kernel that
/// uses it hold one, and it is freed when the last goes (later, while a pkq
/// kernel runs in its context: `modules::free`). A kernel gives its
/// reference back only once it is known to have exited (`Kernel`'s drop,
/// or a later look at a dropped one that lingered).
pub(crate) struct MappedBuffer {
    host: NonNull<u64>,
    device: u64,
    words: usize,
    /// Dropped by `driver::drop_context` (the drop's last step).
    ctx: ManuallyDrop<Arc<CudaContext>>,
}

// SAFETY: the buffer is plain memory; all access goes through `Words`
// (atomics, but for the plain bytes `Backing` names), and freeing needs
// only the context, which is Send + Sync.
unsafe impl Send for MappedBuffer {}
// SAFETY: as above.
unsafe impl Sync for MappedBuffer {}

impl MappedBuffer {
    /// `words` zeroed 8-byte words, mapped into the device's address space.
    pub(crate) fn new(ctx: &Arc<CudaContext>, words: usize) -> Result<Arc<Self>, DriverError> {
        // Loom builds model the host protocol over heap words: their atomics
        // are loom's, whose layout is not a word's, so no mapped memory is
        // ever handed out there.
        if cfg!(loom) {
            return Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED));
        }
        let bytes = words
            .max(1)
            .checked_mul(8)
            .ok_or(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        let mut host = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: `host` is a valid out-pointer; the driver returns page-aligned memory.
        crate::cuda::driver::with_current(ctx, || unsafe {
            sys::cuMemHostAlloc(&mut host, bytes, flags)
        })?
        .result()?;
        let host = NonNull::new(host.cast::<u64>())
            .ok_or(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        let mut buffer = Self {
            host,
            device: 0,
            words,
            ctx: ManuallyDrop::new(ctx.clone()),
        };
        let device = &mut buffer.device;
        // SAFETY: `host` was allocated with DEVICEMAP; on failure `buffer` frees it.
        crate::cuda::driver::with_current(ctx, || unsafe {
            sys::cuMemHostGetDevicePointer_v2(device, host.as_ptr().cast(), 0)
        })?
        .result()?;
        // SAFETY: `bytes` bytes live at `host`; nobody else has them yet.
        unsafe { std::ptr::write_bytes(host.as_ptr().cast::<u8>(), 0, bytes) };
        Ok(Arc::new(buffer))
    }

    /// The host view of words `from..from + len` (in bounds: the callers
    /// lay out the allocation they asked for), which keeps the buffer alive.
    pub(crate) fn words(self: &Arc<Self>, from: usize, len: usize) -> Words {
        Words::of(self, from, len).expect("a section inside its mapped allocation")
    }

    /// The host address of its first byte (page-aligned), for memory of
    /// plain bytes that no [`Words`] view covers (`HostBuffer`).
    pub(crate) fn host_bytes(&self) -> *mut u8 {
        self.host.as_ptr().cast()
    }

    /// The device address of word `from`.
    pub(crate) fn device_addr(&self, from: usize) -> u64 {
        assert!(from <= self.words);
        self.device + 8 * from as u64
    }
}

// SAFETY: `words` words, page-aligned, live at `host` until drop; the
// process touches them only through `Words` (atomics). Never built under
// loom (see `new`), where `AtomicU64` is not a word.
unsafe impl Backing for MappedBuffer {
    fn base(&self) -> NonNull<crate::sync::AtomicU64> {
        self.host.cast()
    }

    fn len(&self) -> usize {
        self.words
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`, handed over only
        // here, once every view is gone; a kernel that may still use it
        // holds a reference until it is known to have exited (`Kernel`'s
        // drop).
        unsafe {
            crate::cuda::modules::free(
                &self.ctx,
                crate::cuda::modules::Memory::Pinned(self.host.as_ptr() as usize),
            )
        };
        // SAFETY: taken once, here, as the drop's last step.
        crate::cuda::driver::drop_context(unsafe { ManuallyDrop::take(&mut self.ctx) });
    }
}

/// The stream every host buffer (`HostBuffer`) of `ctx`'s context names:
/// one per context, on which pkq queues nothing; a call on buffers whose streams
/// include it is taken to hand the device host memory
/// ([`is_host_stream`]: its task fences at system scope).
pub(crate) fn host_stream(ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>, DriverError> {
    let mut streams = lock(&HOST_STREAMS);
    // By the driver's handle: every `driver::open` makes another Arc of it.
    if let Some(s) = streams
        .iter()
        .find(|s| s.context().cu_ctx() == ctx.cu_ctx())
    {
        return Ok(Arc::clone(s));
    }
    // A handle of its own, with cudarc's event tracking: device memory a
    // caller allocates on this stream is ordered with the work of their
    // other streams as on any cudarc stream (its events), which pkq's own
    // handle (tracking off: `driver::open`) would not do. Tracking goes on
    // once the handle's stream exists: a tracking handle's first stream
    // would synchronize the context, which waits for every resident kernel.
    let own = CudaContext::new(ctx.ordinal())?;
    // SAFETY: a fresh handle, nothing allocated through it yet.
    unsafe { own.disable_event_tracking() };
    let s = own.new_stream()?;
    // SAFETY: still nothing allocated through it (a stream is no slice), so
    // every slice of this handle has its events; its one stream exists, so
    // a later stream of it does not synchronize the context.
    unsafe { own.enable_event_tracking() };
    streams.push(Arc::clone(&s));
    Ok(s)
}

static HOST_STREAMS: Mutex<Vec<Arc<CudaStream>>> = Mutex::new(Vec::new());

/// Whether `stream` is a context's host-buffer stream ([`host_stream`]).
pub(crate) fn is_host_stream(stream: &Arc<CudaStream>) -> bool {
    lock(&HOST_STREAMS).iter().any(|s| Arc::ptr_eq(s, stream))
}
