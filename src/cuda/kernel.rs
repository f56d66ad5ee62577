//! The embedded kernel images (pkq's worker kernel; with the feature
//! `bench`, the measurement kernels too, in a fatbin of their own), and the
//! life of a resident kernel: launch, liveness, and the rule that nothing it
//! may touch is freed while it lives.

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, DriverError, LaunchArgs, LaunchConfig, sys,
};
use cudarc::nvrtc::Ptx;

use crate::cuda::driver::error_name;
use crate::cuda::mapped::MappedBuffer;
use crate::error::{Error, Result};
use crate::ops::typed::OpTable;

include!(concat!(env!("OUT_DIR"), "/kernel_gen.rs"));

/// The fatbin compiled from `cuda/pkq.cu` when pkq was built: SASS for the
/// architectures in [`build_info::CUDA_ARCHS`](crate::build_info::CUDA_ARCHS)
/// and PTX of the newest. [`Error::KernelNotBuilt`] when nvcc was missing.
pub fn image() -> Result<&'static [u8]> {
    FATBIN.map_err(Error::KernelNotBuilt)
}

/// The fatbin compiled from `cuda/pkq_bench.cu` (the measurement kernels:
/// `pkq_floor_kernel`, `pkq_costs_kernel`, `pkq_access_rate_kernel`, and
/// the examples' `pkq_empty_kernel` and `pkq_gemv_kernel`), built with the
/// same nvcc and architectures as [`image`]. [`Error::KernelNotBuilt`] when
/// nvcc was missing.
#[cfg(feature = "bench")]
pub fn bench_image() -> Result<&'static [u8]> {
    BENCH_FATBIN.map_err(Error::KernelNotBuilt)
}

/// A device module to load: pkq's embedded one (the worker kernel), the
/// measurement kernels' (feature `bench`), or one of the caller's (equal
/// when the bytes are).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Image {
    Embedded,
    #[cfg(feature = "bench")]
    Bench,
    Caller(Arc<[u8]>),
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Embedded => f.write_str("embedded"),
            #[cfg(feature = "bench")]
            Self::Bench => f.write_str("bench"),
            Self::Caller(bytes) => write!(f, "caller's ({} bytes)", bytes.len()),
        }
    }
}

impl Image {
    /// Loads the module into `ctx`; a refused image is
    /// [`Error::InvalidModule`] (an embedded one's absence, [`Error::KernelNotBuilt`]).
    pub(crate) fn load(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaModule>> {
        let bytes = match self {
            Self::Embedded => image()?.to_vec(),
            #[cfg(feature = "bench")]
            Self::Bench => bench_image()?.to_vec(),
            Self::Caller(bytes) => bytes.to_vec(),
        };
        ctx.load_module(Ptx::from_binary(bytes))
            .map_err(|e| match self {
                Self::Embedded => Error::Cuda(e),
                #[cfg(feature = "bench")]
                Self::Bench => Error::Cuda(e),
                Self::Caller(_) => Error::InvalidModule(format!(
                    "the driver refused the image ({})",
                    error_name(e)
                )),
            })
    }
}

/// Looks `name` up in `module`; [`Error::KernelMissing`] if it has none.
pub(crate) fn function(module: &Arc<CudaModule>, name: &str) -> Result<CudaFunction> {
    module.load_function(name).map_err(|e| match e.0 {
        sys::CUresult::CUDA_ERROR_NOT_FOUND => Error::KernelMissing(name.to_string()),
        _ => Error::Cuda(e),
    })
}

/// Checks that `f` takes exactly one parameter of `bytes` bytes (the kernel
/// ABI every pkq kernel has: one struct by value), so that a launch never
/// hands a kernel arguments it reads differently.
pub(crate) fn check_one_parameter(
    ctx: &Arc<CudaContext>,
    f: &CudaFunction,
    name: &str,
    bytes: usize,
) -> Result<()> {
    let info = |index: usize| {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: a function of `ctx`, made current around the call, and two
        // valid out-pointers.
        let r = crate::cuda::driver::with_current(ctx, || unsafe {
            sys::cuFuncGetParamInfo(f.cu_function(), index, &mut offset, &mut size)
        })?;
        Ok::<_, Error>((r, size))
    };
    let (first, size) = info(0)?;
    let (second, _) = info(1)?;
    if first == sys::CUresult::CUDA_SUCCESS
        && size == bytes
        && second != sys::CUresult::CUDA_SUCCESS
    {
        return Ok(());
    }
    Err(Error::InvalidModule(format!(
        "kernel {name} does not take exactly one {bytes}-byte pkq_params argument"
    )))
}

/// Reads `<kernel>_op_count` and `<kernel>_ops` (PKQ_OP_TABLE) from the
/// module, on `stream` (a stream of pkq's own, while none of pkq's kernels
/// runs: see `modules`; never the legacy
/// stream, which would wait for a resident kernel of another runtime).
pub(crate) fn read_op_table(
    module: &Arc<CudaModule>,
    stream: &Arc<CudaStream>,
    kernel: &str,
) -> Result<OpTable> {
    let missing = |what: &str| {
        Error::InvalidModule(format!(
            "it exports no {what} for kernel {kernel}: declare its ops with \
             PKQ_OP_TABLE({kernel}, ...) (cuda/pkq.cuh)"
        ))
    };
    let read = |symbol: String| -> Result<Option<Vec<u8>>> {
        match module.get_global(&symbol, stream) {
            Ok(view) => {
                let bytes = stream.clone_dtoh(&view)?;
                // The copy is asynchronous: the bytes are there after this.
                stream.synchronize()?;
                Ok(Some(bytes))
            }
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
            Err(e) => Err(e.into()),
        }
    };
    let count = read(format!("{kernel}_op_count"))?.ok_or_else(|| missing("op count"))?;
    let count: [u8; 4] = count
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| missing("4-byte op count"))?;
    let rows = read(format!("{kernel}_ops"))?.ok_or_else(|| missing("op table"))?;
    OpTable::parse(&rows, u32::from_le_bytes(count))
}

/// What the kernel's stream says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KernelState {
    Running,
    Finished,
    /// The stream reports an error from the device (sticky: the kernel is dead).
    Faulted(DriverError),
    /// This thread could not ask (the call that failed, and how): says
    /// nothing about the kernel.
    Unknown(&'static str, DriverError),
}

/// A kernel that stays resident on its own stream, with a reference to the
/// mapped memory it works on. The memory and the stream are released only once the kernel is
/// known to have ended; if it never ends they are leaked, never freed under
/// it. (Its module stays loaded for the process: see [`crate::cuda::modules`].)
pub(crate) struct Kernel {
    ctx: Arc<CudaContext>,
    stream: ManuallyDrop<Arc<CudaStream>>,
    function: ManuallyDrop<CudaFunction>,
    memory: ManuallyDrop<Vec<Arc<MappedBuffer>>>,
    /// Launched and not yet seen to end.
    live: AtomicBool,
    /// Counted among the context's running pkq kernels
    /// ([`crate::cuda::modules::started`]): from just before the launch until the
    /// stream is first seen to have ended, or the launch failed.
    counted: AtomicBool,
    /// The module's op table for this kernel (worker kernels; empty for the
    /// others).
    pub(crate) ops: OpTable,
}

impl Kernel {
    /// Kernel `name` of the measurement kernels' module (feature `bench`), as
    /// [`Kernel::from_image`] gives it.
    #[cfg(feature = "bench")]
    pub(crate) fn bench(
        ctx: &Arc<CudaContext>,
        name: &str,
        memory: Vec<Arc<MappedBuffer>>,
    ) -> Result<Self> {
        Self::from_image(ctx, &Image::Bench, name, false, memory)
    }

    /// Kernel `name` of `image` (see [`crate::cuda::modules`]) with its own
    /// stream. `ctx` must not track events (`driver::open` turns it off), so
    /// that creating the stream never synchronizes the context. A `worker`
    /// kernel's module must export its op table, and a caller's worker
    /// kernel must take exactly one `pkq_params` (the embedded one's is
    /// checked at build time, in layout.rs: asking the driver would show as
    /// an API error in every sanitizer run).
    pub(crate) fn from_image(
        ctx: &Arc<CudaContext>,
        image: &Image,
        name: &str,
        worker: bool,
        memory: Vec<Arc<MappedBuffer>>,
    ) -> Result<Self> {
        let loaded = crate::cuda::modules::kernel(ctx, image, name, worker)?;
        let stream = ctx.new_stream()?;
        Ok(Self {
            ctx: ctx.clone(),
            stream: ManuallyDrop::new(stream),
            function: ManuallyDrop::new(loaded.function),
            memory: ManuallyDrop::new(memory),
            live: AtomicBool::new(false),
            counted: AtomicBool::new(false),
            ops: loaded.ops,
        })
    }

    /// Launches the kernel once.
    ///
    /// # Safety
    /// `push_args` must push exactly the kernel's parameters, by reference to
    /// values that outlive this call, and any addresses among them must stay
    /// valid while the kernel runs (the mapped memory of `self` does).
    pub(crate) unsafe fn launch<'a>(
        &'a self,
        cfg: LaunchConfig,
        push_args: impl FnOnce(&mut LaunchArgs<'a>),
    ) -> Result<()> {
        assert!(
            !self.live.swap(true, Ordering::AcqRel),
            "a resident kernel is launched once"
        );
        let mut builder = self.stream.launch_builder(&self.function);
        push_args(&mut builder);
        // Counted before it can run: a module load that starts after this
        // is refused rather than left waiting for this kernel.
        self.counted.store(true, Ordering::Release);
        crate::cuda::modules::started(&self.ctx);
        // SAFETY: the caller vouches for the arguments.
        if let Err(e) = unsafe { builder.launch(cfg) } {
            self.uncount();
            self.live.store(false, Ordering::Release);
            return Err(e.into());
        }
        Ok(())
    }

    /// Asks the stream (non-blocking) whether the kernel still runs. Once it
    /// is seen not to, it leaves the context's running count.
    pub(crate) fn state(&self) -> KernelState {
        use sys::CUresult::*;
        // SAFETY: a valid stream of the context made current around the call.
        let queried = crate::cuda::driver::with_current(&self.ctx, || unsafe {
            sys::cuStreamQuery(self.stream.cu_stream())
        });
        let result = match queried {
            Ok(r) => r,
            Err(e) => return KernelState::Unknown("cuCtxPushCurrent", e),
        };
        let state = match result {
            CUDA_ERROR_NOT_READY => KernelState::Running,
            CUDA_SUCCESS => KernelState::Finished,
            // Errors of the calling thread's API use, not of the device.
            e @ (CUDA_ERROR_INVALID_CONTEXT
            | CUDA_ERROR_INVALID_HANDLE
            | CUDA_ERROR_NOT_INITIALIZED
            | CUDA_ERROR_DEINITIALIZED) => KernelState::Unknown("cuStreamQuery", DriverError(e)),
            e => KernelState::Faulted(DriverError(e)),
        };
        if let KernelState::Finished | KernelState::Faulted(_) = state {
            self.uncount();
        }
        state
    }

    /// Polls until the kernel has ended (normally or by a fault) or
    /// `deadline` (none: no limit).
    pub(crate) fn wait_finished(&self, deadline: Option<Instant>) -> Result<()> {
        if !self.live.load(Ordering::Acquire) {
            return Ok(());
        }
        loop {
            match self.state() {
                KernelState::Running | KernelState::Unknown(..)
                    if deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    std::thread::sleep(Duration::from_micros(20));
                }
                KernelState::Running | KernelState::Unknown(..) => {
                    return Err(Error::KernelTimeout("exit in time"));
                }
                KernelState::Finished => {
                    self.live.store(false, Ordering::Release);
                    return Ok(());
                }
                KernelState::Faulted(e) => {
                    // A faulted kernel is dead too (the error is sticky).
                    self.live.store(false, Ordering::Release);
                    return Err(Error::DeviceFault(error_name(e)));
                }
            }
        }
    }
}

impl Kernel {
    /// Takes the kernel out of the running count, once.
    fn uncount(&self) {
        if self.counted.swap(false, Ordering::AcqRel) {
            crate::cuda::modules::ended(&self.ctx);
        }
    }

    /// How many blocks of `threads` threads of this kernel the device keeps
    /// resident at once: the driver's occupancy figure per multiprocessor
    /// (registers, shared memory, launch bounds) times the multiprocessors.
    pub(crate) fn max_resident_blocks(&self, threads: u32) -> Result<usize> {
        let per_sm = crate::cuda::driver::with_current(&self.ctx, || {
            self.function
                .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)
        })??;
        let sms = self
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(per_sm as usize * sms.max(0) as usize)
    }

    /// Whether the kernel may still run (launched, and not yet seen to end).
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// The driver handle of the kernel's context.
    pub(crate) fn cu_ctx(&self) -> sys::CUcontext {
        self.ctx.cu_ctx()
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // Not yet seen to end (a stop that timed out): ask once more.
        if self.live.load(Ordering::Acquire)
            && !matches!(
                self.state(),
                KernelState::Finished | KernelState::Faulted(_)
            )
        {
            // The kernel may still read or write this memory (and run this
            // module's code): leak them rather than free them under it.
            return;
        }
        // SAFETY: each field is dropped exactly once, here, and not used after.
        unsafe {
            ManuallyDrop::drop(&mut self.memory);
            ManuallyDrop::drop(&mut self.function);
            ManuallyDrop::drop(&mut self.stream);
        }
    }
}
