//! Opening a device: the checks that turn a missing driver, a missing GPU or
//! an unsuitable one into a typed error instead of a panic.

use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use crate::error::{Error, Result};

/// Loads the driver library and initializes it.
pub(crate) fn init() -> Result<()> {
    // SAFETY: only tries to dlopen libcuda; nothing is called through it.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoDriver("libcuda could not be loaded".into()));
    }
    result::init().map_err(|e| match e.0 {
        sys::CUresult::CUDA_ERROR_NO_DEVICE => Error::NoDevice("the driver found no GPU".into()),
        _ => Error::NoDriver(format!("cuInit failed: {}", error_name(e))),
    })
}

/// How many CUDA devices the driver reports.
pub fn device_count() -> Result<usize> {
    init()?;
    Ok(result::device::get_count()? as usize)
}

/// Device `index` as an ordinal the driver takes: [`Error::NoDevice`] where
/// the driver reports none (whether `cuInit` said so or counted none),
/// [`Error::DeviceOutOfRange`] past the last.
fn ordinal(index: usize) -> Result<i32> {
    let count = device_count()?;
    if count == 0 {
        return Err(Error::NoDevice("the driver reports no GPU".into()));
    }
    i32::try_from(index)
        .ok()
        .filter(|_| index < count)
        .ok_or(Error::DeviceOutOfRange { index, count })
}

/// Device `index`'s primary context, as cudarc's [`CudaContext`], for the
/// streams and buffers of your own that pkq's calls take; or the typed
/// error: [`Error::NoDriver`], [`Error::NoDevice`],
/// [`Error::DeviceOutOfRange`]. Open it with this rather than
/// `CudaContext::new`, which panics where no driver can be loaded. It is the
/// context a runtime on that device serves in; create its streams before
/// building a runtime (see the README's rules for sharing the GPU). As
/// cudarc's `CudaContext::new`, it makes the context current on the
/// calling thread; pkq's other calls leave the thread's current context as
/// they found it.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// let ctx = pkq::context(0)?;
/// let stream = ctx.new_stream()?;
/// let rt = pkq::Runtime::builder().device(0).build()?;
/// let mut y = stream.clone_htod(&[1.0f32; 8])?;
/// let x = stream.clone_htod(&[2.0f32; 8])?;
/// rt.axpy(0.5, &x, &mut y)?;
/// # Ok(()) }
/// ```
pub fn context(index: usize) -> Result<Arc<CudaContext>> {
    ordinal(index)?;
    Ok(CudaContext::new(index)?)
}

/// Drops `what`, then pkq's handle `ctx`, with the context pushed on the
/// calling thread ([`with_current`]): cudarc's drops make a context current
/// (a stream's and a slice's their own, a context's last handle its
/// context, to release it), which would leave it current on a thread whose
/// CUDA runtime works on another; pushed around the drops and popped
/// after, the thread's own stays current. A push that fails drops them all
/// the same.
pub(crate) fn drop_in_context<T>(ctx: Arc<CudaContext>, what: T) {
    let raw = ctx.cu_ctx();
    // SAFETY: `ctx` keeps the context alive until the closure drops it,
    // after the push (a context's drop sets the top entry to the same
    // context, never pushes, so the pop takes the entry pushed).
    let _ = unsafe {
        with_current_raw(raw, move || {
            drop(what);
            drop(ctx);
        })
    };
}

/// [`drop_in_context`] of the handle alone.
pub(crate) fn drop_context(ctx: Arc<CudaContext>) {
    drop_in_context(ctx, ());
}

/// The calling thread's current context, made current again when this is
/// dropped: cudarc makes the contexts it opens and those it creates streams
/// in current on the calling thread, and a call of pkq's that opens a
/// device (a build, a host buffer, a report) must leave the thread's
/// context as it found it (a thread whose CUDA runtime works on another
/// device would otherwise go on on pkq's). Made by [`open`], whose caller
/// holds it for the whole call, declared before anything of the context
/// (dropped after it: a context's drop makes it current too).
#[must_use]
pub(crate) struct KeepCurrent(sys::CUcontext);

impl Drop for KeepCurrent {
    fn drop(&mut self) {
        // SAFETY: the context current when this was taken (alive: the
        // caller's, whose call this is), or null, which leaves none.
        let _ = unsafe { sys::cuCtxSetCurrent(self.0) };
    }
}

/// pkq's own handle on device `index`'s primary context, once the device is
/// known to exist and to support pkq, with cudarc's event tracking off;
/// and what puts back the calling thread's own context (the handle is
/// current on it until then, cudarc's way).
pub(crate) fn open(index: usize) -> Result<(KeepCurrent, Arc<CudaContext>)> {
    ordinal(index)?;
    let mut current = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the driver is loaded and initialized
    // (`ordinal`). A thread with no current context gets null.
    unsafe { sys::cuCtxGetCurrent(&mut current) }.result()?;
    let keep = KeepCurrent(current);
    let ctx = CudaContext::new(index)?;
    let (major, minor) = ctx.compute_capability()?;
    let unsupported = |why: String| Error::UnsupportedDevice {
        index,
        name: ctx.name().unwrap_or_default(),
        why,
    };
    if major < 8 {
        return Err(unsupported(format!(
            "compute capability {major}.{minor}; pkq needs 8.0 or newer"
        )));
    }
    if ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? == 0 {
        return Err(unsupported("it cannot map host memory".into()));
    }
    let mut version = 0;
    // SAFETY: a valid out-pointer; the driver is initialized (the context
    // exists). Present in every driver cudarc loads.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
    driver_new_enough(version).map_err(unsupported)?;
    // SAFETY: this Arc is pkq's own (callers keep theirs; the host
    // buffers' stream has a handle of its own, `mapped::host_stream`), and
    // tracking is off before anything is allocated through it: the
    // CudaSlices it backs
    // (state memory, IO scratch) are freed only after the kernel that uses
    // them exited, so nothing relies on its event tracking. Without it,
    // creating a stream does not synchronize the context, which would wait
    // behind any kernel already running (a resident one never ends).
    unsafe { ctx.disable_event_tracking() };
    Ok((keep, ctx))
}

/// The first driver API version with every driver call pkq makes outside
/// SM partitions (`cuFuncLoad`, `cuFuncGetParamInfo`: CUDA 12.4). cudarc
/// loads libcuda at run time and panics on a call the loaded driver lacks,
/// so an older one is refused before any.
const DRIVER_SINCE: i32 = 12040;

/// `Ok` if a driver of API `version` has every call pkq makes; else why not.
fn driver_new_enough(version: i32) -> std::result::Result<(), String> {
    if version < DRIVER_SINCE {
        return Err(format!(
            "its driver supports CUDA {}.{}; pkq needs a driver for CUDA 12.4 or newer",
            version / 1000,
            version % 1000 / 10
        ));
    }
    Ok(())
}

/// Runs `f` with `ctx` current on the calling thread, then restores whatever
/// context the thread had (pkq's own driver calls, made from the caller's
/// threads while they wait, must not move those threads to another
/// context). Unlike cudarc's `bind_to_thread`, it neither reports errors that
/// earlier drops recorded on the context (they are not the caller's) nor
/// skips the call when the thread's current handle compares equal.
///
/// `f` runs in the relaxed stream-capture mode (the thread's own mode is
/// restored after): pkq's calls touch only its own streams and memory, so
/// a CUDA graph that another thread captures in global mode neither
/// refuses them (its stream queries would read as faults) nor is
/// invalidated by them.
pub(crate) fn with_current<T>(
    ctx: &CudaContext,
    f: impl FnOnce() -> T,
) -> Result<T, cudarc::driver::DriverError> {
    // SAFETY: the context is alive (borrowed) for the whole call.
    unsafe { with_current_raw(ctx.cu_ctx(), f) }
}

/// [`with_current`] of a context's driver handle.
///
/// # Safety
/// `ctx` is a live context when it is pushed, at the start of the call.
unsafe fn with_current_raw<T>(
    ctx: sys::CUcontext,
    f: impl FnOnce() -> T,
) -> Result<T, cudarc::driver::DriverError> {
    // SAFETY: the caller's contract; pushing it has no other effect.
    unsafe { sys::cuCtxPushCurrent_v2(ctx) }.result()?;
    let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: a valid in/out pointer; it sets this thread's mode only, and
    // gives back the one it had, restored below.
    let relaxed = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }.result();
    let out = f();
    if relaxed.is_ok() {
        // SAFETY: as above; puts back the thread's own mode.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
    let mut popped = std::ptr::null_mut();
    // SAFETY: pops exactly the context pushed above.
    let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    Ok(out)
}

/// Whether the driver makes every launch wait for its kernel to end
/// (`CUDA_LAUNCH_BLOCKING`, a debugging aid: the driver takes a non-zero
/// number as on): a resident kernel's launch would then never return.
pub(crate) fn launches_block() -> bool {
    blocking(std::env::var("CUDA_LAUNCH_BLOCKING").ok().as_deref())
}

/// Whether `CUDA_LAUNCH_BLOCKING` of value `v` (unset: `None`) turns it on.
fn blocking(v: Option<&str>) -> bool {
    v.and_then(|v| v.trim().parse::<i64>().ok())
        .is_some_and(|v| v != 0)
}

/// Device `index`'s PCI address as the driver gives it ("0000:3B:00.0").
pub(crate) fn pci_bus_id(index: usize) -> Result<String> {
    let dev = result::device::get(ordinal(index)?)?;
    let mut buf = [0u8; 32];
    // SAFETY: the driver writes at most `len` bytes (one less than the
    // buffer: its last byte stays zero) into the buffer.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr().cast(), buf.len() as i32 - 1, dev) }
        .result()?;
    let id = std::ffi::CStr::from_bytes_until_nul(&buf).unwrap_or_default();
    Ok(id.to_string_lossy().into_owned())
}

/// CUDA's name of a driver error, such as `CUDA_ERROR_ILLEGAL_ADDRESS`.
pub(crate) fn error_name(e: cudarc::driver::DriverError) -> String {
    e.error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0))
}

/// What a bench report says about the device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// The device's name, such as "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// The kernel driver's version (such as "580.159.04") and the CUDA
    /// version the driver supports.
    pub driver: String,
}

/// Facts about device `index` for reports. Errors: those of [`context`]
/// ([`Error::NoDriver`], [`Error::NoDevice`], [`Error::DeviceOutOfRange`]),
/// [`Error::UnsupportedDevice`] for a device pkq cannot run on (compute
/// capability below 8.0, no mapped host memory, a driver older than CUDA
/// 12.4), and [`Error::Cuda`] for a driver call that fails.
pub fn device_info(index: usize) -> Result<DeviceInfo> {
    let (_keep, ctx) = open(index)?;
    let mut api = 0;
    // SAFETY: valid out-pointer; the driver is initialized by `open`.
    unsafe { sys::cuDriverGetVersion(&mut api) }.result()?;
    // "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  580.159.04  Release Build ..."
    let kernel_module = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|v| {
            v.lines().next()?.split_whitespace().find_map(|t| {
                let version = t.split('.').count() >= 2
                    && t.split('.')
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
                version.then(|| t.to_string())
            })
        });
    let cuda = format!("CUDA {}.{}", api / 1000, (api % 1000) / 10);
    Ok(DeviceInfo {
        name: ctx.name()?,
        compute_capability: ctx.compute_capability()?,
        multiprocessors: ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        driver: match kernel_module {
            Some(k) => format!("{k} ({cuda})"),
            None => cuda,
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn launch_blocking_is_a_non_zero_number() {
        for (v, on) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some(" 0 "), false),
            (Some("yes"), false),
            (Some("1"), true),
            (Some(" 1\n"), true),
            (Some("-1"), true),
            (Some("2"), true),
        ] {
            assert_eq!(blocking(v), on, "{v:?}");
        }
    }

    use super::*;

    #[test]
    fn drivers_older_than_cuda_12_4_are_refused() {
        assert!(driver_new_enough(12030).unwrap_err().contains("CUDA 12.3"));
        assert!(driver_new_enough(11080).is_err());
        assert!(driver_new_enough(12040).is_ok() && driver_new_enough(13000).is_ok());
    }
}
