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

/// Where a mapped buffer's pages come from.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pages {
    /// `cuMemHostAlloc(DEVICEMAP | PORTABLE)`: the driver's pinned pages.
    Driver,
    /// The same with `WRITECOMBINED`.
    DriverWriteCombined,
    /// Ordinary (write-back) pages from the Rust allocator, pinned and mapped
    /// with `cuMemHostRegister(DEVICEMAP | PORTABLE)`.
    Registered,
}

/// An allocation of 8-byte words that the host and the device both address.
/// Freed on drop; the owner must make sure the device no longer touches it.
pub(crate) struct MappedBuffer {
    host: NonNull<u64>,
    device: u64,
    words: usize,
    pages: Pages,
    ctx: Arc<CudaContext>,
}

const PAGE: usize = 4096;

// SAFETY: the buffer is plain memory; all access goes through `Words`
// (atomics), and freeing needs only the context, which is Send + Sync.
unsafe impl Send for MappedBuffer {}
// SAFETY: as above.
unsafe impl Sync for MappedBuffer {}

impl MappedBuffer {
    /// `words` zeroed 8-byte words on `pages`, mapped into the device's
    /// address space (write-combined pages must not be read by the host:
    /// uncached reads are very slow).
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        words: usize,
        pages: Pages,
    ) -> Result<Self, DriverError> {
        crate::driver::bind(ctx)?;
        let bytes = (words.max(1) * 8).next_multiple_of(PAGE);
        let oom = DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        let host = match pages {
            Pages::Driver | Pages::DriverWriteCombined => {
                let mut host = std::ptr::null_mut();
                let mut flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
                if pages == Pages::DriverWriteCombined {
                    flags |= sys::CU_MEMHOSTALLOC_WRITECOMBINED;
                }
                // SAFETY: `host` is a valid out-pointer; the driver returns page-aligned memory.
                unsafe { sys::cuMemHostAlloc(&mut host, bytes, flags) }.result()?;
                NonNull::new(host.cast::<u64>()).ok_or(oom)?
            }
            Pages::Registered => {
                let layout = Self::layout(bytes);
                // SAFETY: a non-zero size.
                let host = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>())
                    .ok_or(oom)?;
                let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
                // SAFETY: `bytes` bytes, page-aligned, just allocated.
                let registered =
                    unsafe { sys::cuMemHostRegister_v2(host.as_ptr().cast(), bytes, flags) };
                if let Err(e) = registered.result() {
                    // SAFETY: allocated above with this layout, never shared.
                    unsafe { std::alloc::dealloc(host.as_ptr().cast(), layout) };
                    return Err(e);
                }
                host
            }
        };
        let mut buffer = Self {
            host,
            device: 0,
            words,
            pages,
            ctx: ctx.clone(),
        };
        // SAFETY: `host` is mapped (DEVICEMAP); on failure `buffer` frees it.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut buffer.device, host.as_ptr().cast(), 0) }
            .result()?;
        // SAFETY: `bytes` bytes live at `host`; nobody else has them yet.
        unsafe { std::ptr::write_bytes(host.as_ptr().cast::<u8>(), 0, bytes) };
        Ok(buffer)
    }

    fn layout(bytes: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(bytes, PAGE).expect("page-aligned layout")
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
        let bound = crate::driver::bind(&self.ctx).is_ok();
        let p = self.host.as_ptr().cast();
        match self.pages {
            Pages::Driver | Pages::DriverWriteCombined => {
                if bound {
                    // SAFETY: allocated by cuMemHostAlloc in `new`; the owner
                    // guarantees the device no longer uses it.
                    let _ = unsafe { sys::cuMemFreeHost(p) };
                }
            }
            Pages::Registered => {
                if bound {
                    // SAFETY: registered in `new`; the device no longer uses it.
                    let _ = unsafe { sys::cuMemHostUnregister(p) };
                }
                let bytes = (self.words.max(1) * 8).next_multiple_of(PAGE);
                // SAFETY: allocated in `new` with this layout. Unregistered or
                // not (a context broken by a fault), the memory is ours: no
                // mapping the device could use survives the dead context.
                unsafe { std::alloc::dealloc(p.cast(), Self::layout(bytes)) };
            }
        }
    }
}
