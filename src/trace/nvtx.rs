//! NVTX ranges around pkq's host calls (submit, wait, build, shutdown) with
//! the `nvtx` feature, so that Nsight Systems shows them on each thread's
//! NVTX row beside the application's own. Without the feature a range is
//! nothing at all. With it, a range is one call into NVTX at each end with
//! a static C string (nothing allocated), which returns at once when no
//! profiler is attached.
//!
//! The `nvtx` crate compiles NVTX3's header-only library (`nvtxRangePushA`,
//! `nvtxRangePop`) behind two C functions of its static library,
//! `ffi_range_push` and `ffi_range_pop`; its own macros format their
//! message into a new string each call, so pkq calls those two directly.

/// An open range on the calling thread (pushed on its NVTX stack),
/// popped when dropped.
#[must_use = "a range closes when dropped"]
pub(crate) struct Range(core::marker::PhantomData<*const ()>);

#[cfg(feature = "nvtx")]
mod ffi {
    // Linked from the `nvtx` crate's static library (its build script
    // compiles it; the crate is a dependency of this feature).
    use nvtx as _;

    #[link(name = "nvtx")]
    unsafe extern "C" {
        pub(super) fn ffi_range_push(message: *const core::ffi::c_char) -> core::ffi::c_int;
        pub(super) fn ffi_range_pop() -> core::ffi::c_int;
    }
}

/// Opens the range `name` on the calling thread.
#[inline(always)]
pub(crate) fn range(name: &'static core::ffi::CStr) -> Range {
    #[cfg(feature = "nvtx")]
    // SAFETY: a NUL-terminated string that lives for the program; NVTX
    // copies what it keeps.
    unsafe {
        ffi::ffi_range_push(name.as_ptr());
    }
    #[cfg(not(feature = "nvtx"))]
    let _ = name;
    Range(core::marker::PhantomData)
}

impl Drop for Range {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(feature = "nvtx")]
        // SAFETY: pops the range this guard pushed on this thread (the
        // guard is not Send: it stays on its thread).
        unsafe {
            ffi::ffi_range_pop();
        }
    }
}
