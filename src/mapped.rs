//! Mapped, pinned host memory: `cuMemHostAlloc(DEVICEMAP | PORTABLE)` with its
//! device address (cudarc's `PinnedHostSlice` gives no device pointer).

use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, sys};

use crate::queue::Words;

/// The kind of pinned memory submissions are written to, and how the host
/// writes them. Completions are always read from write-back memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SubmissionMemory {
    /// Write-back pages, plain stores: the slot's line sits in the host's
    /// cache until the device's read snoops it out.
    #[default]
    Cached,
    /// Write-back pages, non-temporal stores and an `sfence` (x86-64): the
    /// stores skip the cache, so no read for ownership of a line the device
    /// just read.
    CachedStreaming,
    /// Write-combined pages, plain stores and an `sfence`: the host never
    /// caches them, the device's reads need no snoop.
    WriteCombined,
}

/// An allocation of 8-byte words that the host and the device both address.
/// Freed on drop; the owner must make sure the device no longer touches it.
pub(crate) struct MappedBuffer {
    host: NonNull<u64>,
    device: u64,
    words: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is plain memory; all access goes through `Words`
// (atomics), and freeing needs only the context, which is Send + Sync.
unsafe impl Send for MappedBuffer {}
// SAFETY: as above.
unsafe impl Sync for MappedBuffer {}

impl MappedBuffer {
    /// `words` zeroed 8-byte words, mapped into the device's address space;
    /// write-combined pages when `write_combined` (the host then must not
    /// read them: uncached reads are very slow).
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        words: usize,
        write_combined: bool,
    ) -> Result<Self, DriverError> {
        crate::driver::bind(ctx)?;
        let bytes = words.max(1) * 8;
        let mut host = std::ptr::null_mut();
        let mut flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        if write_combined {
            flags |= sys::CU_MEMHOSTALLOC_WRITECOMBINED;
        }
        // SAFETY: `host` is a valid out-pointer; the driver returns page-aligned memory.
        unsafe { sys::cuMemHostAlloc(&mut host, bytes, flags) }.result()?;
        let host = NonNull::new(host.cast::<u64>())
            .ok_or(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        let mut device = 0;
        // SAFETY: `host` was just allocated with DEVICEMAP.
        let mapped =
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.as_ptr().cast(), 0) };
        if let Err(e) = mapped.result() {
            // SAFETY: allocated above, never shared.
            unsafe { sys::cuMemFreeHost(host.as_ptr().cast()) };
            return Err(e);
        }
        // SAFETY: `bytes` bytes were allocated at `host`; nobody else has it yet.
        unsafe { std::ptr::write_bytes(host.as_ptr().cast::<u8>(), 0, bytes) };
        Ok(Self {
            host,
            device,
            words,
            ctx: ctx.clone(),
        })
    }

    /// The host view of words `from..from + len`.
    pub(crate) fn words(&self, from: usize, len: usize) -> Words {
        assert!(from + len <= self.words);
        // SAFETY: in bounds; 8-byte aligned; the memory lives until drop, and
        // every `Words` user is owned by the same runtime that owns `self`
        // and drops before it.
        unsafe { Words::new(NonNull::new_unchecked(self.host.as_ptr().add(from)), len) }
    }

    /// The device address of word `from`.
    pub(crate) fn device_addr(&self, from: usize) -> u64 {
        assert!(from <= self.words);
        self.device + 8 * from as u64
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // Errors (a context already broken by a device fault) leave nothing to do.
        if crate::driver::bind(&self.ctx).is_ok() {
            // SAFETY: allocated by cuMemHostAlloc in `new`; the owner
            // guarantees the device no longer uses it.
            let _ = unsafe { sys::cuMemFreeHost(self.host.as_ptr().cast()) };
        }
    }
}
