//! SM partitions: green contexts (CUDA 12.4+) that confine the work
//! launched on their streams to a set of a device's multiprocessors. A
//! runtime's kernel runs on one part, the application's kernels on the
//! other.
//!
//! Green contexts are made once per device and size and kept for the
//! process, like the modules ([`crate::cuda::modules`]): a stream or context
//! handed out can never outlive what it belongs to, and a device has few
//! sizes (its SMs over the granularity).
//!
//! Every driver call here needs a driver for CUDA 12.4, and cudarc's
//! loader panics on a symbol the driver lacks: the contexts handed here come
//! from [`crate::cuda::driver::open`], which refuses an older driver.

use std::sync::Arc;

use crate::sync::statics;
use crate::sync::{Mutex, MutexGuard, lock};

use cudarc::driver::{CudaContext, CudaStream, sys};

use crate::cuda::driver::error_name;
use crate::error::{Error, Result};

/// What a device allows in SM partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmGranularity {
    /// The device's multiprocessors.
    pub sms: usize,
    /// The fewest a partition has (8 on Hopper); smaller requests are
    /// rounded up to it.
    pub min: usize,
    /// A partition's size is a multiple of this (8 on Hopper); requests are
    /// rounded up to it.
    pub align: usize,
}

/// Whether device `index` can be partitioned, and at what granularity; or
/// why not ([`Error::PartitionUnsupported`], or what opening the device
/// returns: [`Error::UnsupportedDevice`], a driver error).
/// A partition leaves the application at least one group of SMs: the whole
/// device is refused.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// match pkq::sm_partition_support(0) {
///     Ok(g) => println!("{} SMs, partitions from {} SMs by {} (less than the whole)", g.sms, g.min, g.align),
///     Err(e) => println!("no partitions: {e}"),
/// }
/// # Ok(()) }
/// ```
pub fn sm_partition_support(index: usize) -> Result<SmGranularity> {
    let (_keep, ctx) = crate::cuda::driver::open(index)?;
    support(&ctx)
}

/// The device's answer for `ctx`'s device (a context from
/// [`crate::cuda::driver::open`]: its driver has green contexts).
pub(crate) fn support(ctx: &CudaContext) -> Result<SmGranularity> {
    let full = device_sms(ctx)?;
    Ok(granularity(&full))
}

/// The device's whole SM resource.
fn device_sms(ctx: &CudaContext) -> Result<sys::CUdevResource> {
    // SAFETY: all-zero is a valid bit pattern of this plain C struct (type
    // INVALID), which the driver overwrites.
    let mut full: sys::CUdevResource = unsafe { std::mem::zeroed() };
    // SAFETY: the driver is new enough (checked by the caller); a valid
    // device and out-pointer.
    unsafe {
        sys::cuDeviceGetDevResource(
            ctx.cu_device(),
            &mut full,
            sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
        )
    }
    .result()
    .map_err(|e| refused("cuDeviceGetDevResource", e))?;
    Ok(full)
}

fn refused(call: &str, e: cudarc::driver::DriverError) -> Error {
    Error::PartitionUnsupported(format!("{call}: {}", error_name(e)))
}

/// The sizes a split of `full` may have.
fn granularity(full: &sys::CUdevResource) -> SmGranularity {
    // SAFETY: an SM resource (the driver filled it as one): `sm` is the
    // union's field in use.
    let sm = unsafe { full.__bindgen_anon_1.sm };
    let sms = sm.smCount as usize;
    #[cfg(feature = "cuda-13000")]
    let (min, align) = (
        sm.minSmPartitionSize as usize,
        sm.smCoscheduledAlignment as usize,
    );
    // CUDA 12 reports neither: the driver's documented values by
    // architecture (a split rounds up to them anyway).
    #[cfg(not(feature = "cuda-13000"))]
    let (min, align) = (8, 8);
    SmGranularity {
        sms,
        min: min.max(1),
        align: align.max(1),
    }
}

/// One side of a split: a green context and its cudarc handle.
pub(crate) struct Green {
    /// Held around every call of pkq's that makes this context current:
    /// CUDA documents a green context as current to one thread at a time.
    lock: Arc<Mutex<()>>,
    /// A stream made before event tracking was turned on (the rest's
    /// part): later streams then never synchronize the context.
    _first: Option<Arc<CudaStream>>,
    /// The green context as a `CUcontext`, for cudarc. Never dropped (kept
    /// in [`SPLITS`]): cudarc would try to destroy it as an ordinary
    /// context (which the driver refuses for a green one).
    ctx: Arc<CudaContext>,
    sms: usize,
}

impl Green {
    /// A new non-blocking stream whose kernels run on this part's SMs only.
    /// Its cudarc context is the green one: cudarc makes it current on the
    /// calling thread around the stream's calls, as it does for any context.
    pub(crate) fn stream(&self) -> Result<Arc<CudaStream>> {
        let _one = self.lock();
        // cudarc makes the context current to create it: keep the thread's.
        Ok(crate::cuda::driver::with_current(&self.ctx, || {
            self.ctx.new_stream()
        })??)
    }

    pub(crate) fn sms(&self) -> usize {
        self.sms
    }

    /// The lock held around pkq's calls that make this context current.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        lock(&self.lock)
    }

    /// The lock, for a kernel that outlives this borrow.
    pub(crate) fn shared_lock(&self) -> Arc<Mutex<()>> {
        self.lock.clone()
    }

    pub(crate) fn ctx(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}

/// A device's SMs split in two: `first` (at least the SMs asked for) and
/// `rest` (the others).
pub(crate) struct Split {
    pub(crate) device: usize,
    pub(crate) first: Green,
    pub(crate) rest: Green,
}

/// Every split made so far, for the process.
static SPLITS: statics::Mutex<Vec<Arc<Split>>> = statics::Mutex::new(Vec::new());

/// Device `ctx`'s SMs split into a part of at least `sms` SMs (rounded up to
/// what the device allows) and the rest; the same split for the same device
/// and size. Errors: [`Error::PartitionUnsupported`] (the driver refused);
/// [`Error::InvalidConfig`] where the rounded size leaves no SM over, or
/// exceeds the device.
pub(crate) fn split(ctx: &Arc<CudaContext>, device: usize, sms: usize) -> Result<Arc<Split>> {
    let g = support(ctx)?;
    let granted = sms
        .max(g.min)
        .checked_next_multiple_of(g.align)
        .unwrap_or(usize::MAX);
    if granted >= g.sms {
        return Err(Error::InvalidConfig(format!(
            "an SM partition of {sms} SMs would leave none of device {device}'s {} SMs to the \
             application's part (the largest is {})",
            g.sms,
            g.sms.saturating_sub(1) / g.align * g.align
        )));
    }
    let mut splits = statics::lock(&SPLITS);
    if let Some(s) = splits
        .iter()
        .find(|s| s.device == device && s.first.sms == granted)
    {
        return Ok(s.clone());
    }
    // A green context's creation waits for the device's running kernels:
    // refused while a pkq kernel runs, and no launch meanwhile.
    crate::cuda::modules::while_idle(ctx, &format!("an SM partition of {granted} SMs"), || {
        let full = device_sms(ctx)?;
        // SAFETY: zeroed plain C structs the driver overwrites.
        let mut first: sys::CUdevResource = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut rest: sys::CUdevResource = unsafe { std::mem::zeroed() };
        let mut groups = 1;
        // SAFETY: one result slot (`groups`), a valid SM resource of this
        // device, a remainder slot; the driver is new enough.
        unsafe {
            sys::cuDevSmResourceSplitByCount(
                &mut first,
                &mut groups,
                &full,
                &mut rest,
                0,
                granted as u32,
            )
        }
        .result()
        .map_err(|e| refused("cuDevSmResourceSplitByCount", e))?;
        let got = granularity(&first).sms;
        let left = granularity(&rest).sms;
        // The driver's size, where the granularity predicted another.
        if let Some(s) = splits
            .iter()
            .find(|s| s.device == device && s.first.sms == got)
        {
            return Ok(s.clone());
        }
        if groups != 1 || got == 0 || left == 0 {
            return Err(Error::InvalidConfig(format!(
                "device {device} split {granted} SMs as {groups} part(s) of {got} and {left} left: \
                 no part would be left to the application"
            )));
        }
        let first = green(ctx, device, &mut first, got, false)?;
        let rest = match green(ctx, device, &mut rest, left, true) {
            Ok(rest) => rest,
            Err(e) => {
                // Never dropped, like every green context (see `Green::ctx`).
                std::mem::forget(first);
                return Err(e);
            }
        };
        let split = Arc::new(Split {
            device,
            first,
            rest,
        });
        splits.push(split.clone());
        Ok(split)
    })
}

/// A green context of `resource` (`sms` SMs) on `ctx`'s device.
/// `tracked`: cudarc's event tracking on (the application's part, whose
/// streams and slices users order through cudarc), after one stream was
/// made without it; off for the runtime's part (a resident kernel never
/// ends, and tracking would synchronize the context behind it).
fn green(
    ctx: &Arc<CudaContext>,
    device: usize,
    resource: &mut sys::CUdevResource,
    sms: usize,
    tracked: bool,
) -> Result<Green> {
    let mut desc = std::ptr::null_mut();
    // SAFETY: one valid SM resource from a split; a valid out-pointer.
    unsafe { sys::cuDevResourceGenerateDesc(&mut desc, resource, 1) }
        .result()
        .map_err(|e| refused("cuDevResourceGenerateDesc", e))?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: a descriptor just made; the default stream flag is required.
    unsafe {
        sys::cuGreenCtxCreate(
            &mut handle,
            desc,
            ctx.cu_device(),
            sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
        )
    }
    .result()
    .map_err(|e| refused("cuGreenCtxCreate", e))?;
    let mut cu_ctx = std::ptr::null_mut();
    // SAFETY: a green context just made; a valid out-pointer.
    if let Err(e) = unsafe { sys::cuCtxFromGreenCtx(&mut cu_ctx, handle) }.result() {
        // SAFETY: made above, used by nothing yet.
        let _ = unsafe { sys::cuGreenCtxDestroy(handle) };
        return Err(refused("cuCtxFromGreenCtx", e));
    }
    // cudarc makes the context current on this thread: keep the thread's.
    // SAFETY: a valid context of this device whose life is the green
    // context's, which is never destroyed; the wrapper is never dropped
    // (kept in `SPLITS`), so cudarc never destroys it.
    let wrapped = match crate::cuda::driver::with_current(ctx, || unsafe {
        CudaContext::from_raw_context(device, ctx.cu_device(), cu_ctx)
    }) {
        Ok(Ok(w)) => w,
        Ok(Err(e)) | Err(e) => {
            // SAFETY: made above; no stream or wrapper of it is left.
            let _ = unsafe { sys::cuGreenCtxDestroy(handle) };
            return Err(refused("cuCtxFromGreenCtx", e));
        }
    };
    // SAFETY: with tracking on, cudarc's first stream would synchronize the
    // context (behind a resident kernel that never ends): off while pkq
    // makes its first stream; on again for the application's part, whose
    // slices cudarc orders across its streams from then on.
    unsafe { wrapped.disable_event_tracking() };
    let mut first = None;
    if tracked {
        first = Some(crate::cuda::driver::with_current(&wrapped, || {
            wrapped.new_stream()
        })??);
        // SAFETY: see above: a stream exists, so later ones never
        // synchronize the context.
        unsafe { wrapped.enable_event_tracking() };
    }
    Ok(Green {
        lock: Arc::new(Mutex::new(())),
        _first: first,
        ctx: wrapped,
        sms,
    })
}

/// The SMs a runtime built with [`Builder::sm_partition`](crate::Builder::sm_partition)
/// runs on, and the rest of the device, for the application's own kernels.
///
/// Only work launched on the rest's streams ([`SmPartition::app_stream`])
/// stays off the runtime's SMs: kernels launched on any other stream of the
/// device (the primary context's, `pkq::context(i)?.new_stream()`, the
/// runtime API's) may use every SM, the runtime's included. The parts are
/// green contexts, kept for the process (a stream never outlives its part),
/// one split per device and size: runtimes built with the same size share
/// its SMs (pkq checks only one runtime's lanes against them), and splits
/// of different sizes are each cut from the whole device, so they overlap:
/// use one partition size per device in a process, and lanes for several
/// resident kernels in it. CUDA documents a green context as current to
/// one thread at a time: pkq serializes its own calls on each part; use the
/// rest's streams from one thread at a time.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// let rt = pkq::Runtime::builder().sm_partition(8).build()?;
/// let part = rt.sm_partition().expect("built with a partition");
/// println!("pkq on {} SMs, the application on {}", part.sms(), part.app_sms());
/// let stream = part.app_stream()?;
/// let x = stream.clone_htod(&[1.0f32; 1024])?; // and launch on `stream`
/// # let _ = x;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SmPartition {
    split: Arc<Split>,
}

impl SmPartition {
    pub(crate) fn new(split: Arc<Split>) -> Self {
        Self { split }
    }

    /// The runtime's part.
    pub(crate) fn runtime_part(&self) -> &Green {
        &self.split.first
    }

    /// The device index.
    pub fn device(&self) -> usize {
        self.split.device
    }

    /// The SMs the runtime's kernel runs on: the size asked for, rounded up
    /// to what the device allows ([`sm_partition_support`]).
    pub fn sms(&self) -> usize {
        self.split.first.sms()
    }

    /// The SMs of the rest of the device, for the application.
    pub fn app_sms(&self) -> usize {
        self.split.rest.sms()
    }

    /// The rest of the device as a cudarc context (a green context, with
    /// cudarc's event tracking on): it shares memory and modules with the
    /// device's primary context. Load modules through the primary context
    /// (`pkq::context(i)`) before building the runtime: the driver waits
    /// for running kernels to load one, and the runtime's never ends. Only
    /// the streams of [`SmPartition::app_stream`] keep kernels on the
    /// rest's SMs. cudarc makes this context current on each thread that
    /// uses its streams; CUDA documents a green context as current to one
    /// thread at a time: use the rest's streams from one thread at a time.
    /// pkq's safe calls on device buffers ([`Lane::axpy`](crate::Lane::axpy),
    /// [`Lane::call_on_buffers`](crate::Lane::call_on_buffers)) take
    /// buffers of the primary context only, and refuse this context's
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)).
    pub fn app_context(&self) -> &Arc<CudaContext> {
        self.split.rest.ctx()
    }

    /// A new non-blocking stream on the rest of the device: kernels launched
    /// on it run on [`SmPartition::app_sms`] SMs only, never on the runtime's.
    pub fn app_stream(&self) -> Result<Arc<CudaStream>> {
        self.split.rest.stream()
    }
}

impl std::fmt::Debug for SmPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmPartition")
            .field("device", &self.device())
            .field("sms", &self.sms())
            .field("app_sms", &self.app_sms())
            .finish()
    }
}
