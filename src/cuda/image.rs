//! The device code pkq loads: the embedded kernel images (pkq's worker
//! kernel; with the feature `bench`, the measurement kernels too, in a
//! fatbin of their own), a caller's module, and the lookups done when one
//! is loaded (a kernel by name, its parameter list, its op table).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, sys};
use cudarc::nvrtc::Ptx;

use crate::cuda::driver::error_name;
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
