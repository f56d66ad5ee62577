//! What the measurement kernels run on, over plain cudarc: the device's
//! primary context with pkq-bench's module loaded into it once ([`Device`]),
//! mapped pinned host memory ([`Mapped`]), and a kernel launched on a stream
//! of its own and watched until it exits ([`Launched`]).
//!
//! Modules are loaded once per device and kept for the process, and pinned
//! memory is never freed (it goes back to a pool for the next measurement):
//! the driver waits for the context's running kernels before it loads or
//! unloads a module, and may wait the same way to free pinned memory, and a
//! pkq runtime's resident kernel never ends. See `floor`'s docs for the
//! order this asks of a program.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pkq::cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, DriverError, LaunchArgs, LaunchConfig, sys,
};
use pkq::cudarc::nvrtc::Ptx;

use crate::{Error, Result, error_name};

/// Every kernel of `cuda/bench.cu`, each loaded (`cuFuncLoad`) with the
/// module: a kernel whose code the driver loads lazily, at its first launch,
/// would have that launch wait for the context's running kernels.
pub(crate) const KERNELS: [&str; 14] = [
    "pkq_floor_kernel",
    "pkq_costs_kernel",
    "pkq_access_rate_kernel",
    "pkq_bulk_kernel",
    "pkq_empty_kernel",
    "pkq_copy_io_kernel",
    "pkq_copy16_kernel",
    "pkq_gemv_kernel",
    "pkq_app_gemv_kernel",
    "pkq_spin_stamp_kernel",
    "pkq_smid_kernel",
    "pkq_fma_kernel",
    "pkq_dot_kernel",
    "pkq_wide_gemv_kernel",
];

/// A device's primary context with pkq-bench's module loaded.
pub(crate) struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) module: Arc<CudaModule>,
    functions: HashMap<&'static str, CudaFunction>,
}

impl Device {
    /// Kernel `name` of the module (one of [`KERNELS`]).
    pub(crate) fn function(&self, name: &str) -> Result<CudaFunction> {
        self.functions.get(name).cloned().ok_or_else(|| {
            Error::InvalidArgument(format!("pkq-bench's module has no kernel {name:?}"))
        })
    }
}

/// The loaded devices, by ordinal, for the process.
static DEVICES: LazyLock<Mutex<HashMap<usize, Arc<Device>>>> = LazyLock::new(Mutex::default);

/// Device `ordinal` with pkq-bench's module `image` loaded: from the cache,
/// or loaded now (under the cache's lock, so once per device).
pub(crate) fn device(ordinal: usize, image: &'static [u8]) -> Result<Arc<Device>> {
    let mut devices = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(d) = devices.get(&ordinal) {
        return Ok(d.clone());
    }
    // The primary context (what pkq's runtimes on the device serve in),
    // through pkq's checked opening: a typed error where cudarc's
    // CudaContext::new would panic (no driver).
    let ctx = pkq::context(ordinal)?;
    // The driver waits for every running kernel of the context before it
    // loads a module, and a pkq runtime's never ends: refuse rather than
    // wait forever.
    let running = pkq::running_kernels(ordinal)?;
    if running > 0 {
        return Err(Error::InvalidArgument(format!(
            "pkq-bench's module must be loaded on device {ordinal} before any pkq runtime \
             starts there ({running} pkq kernel(s) run now): call pkq_bench::floor::load first"
        )));
    }
    // SAFETY: this Arc is pkq-bench's own. Nothing is allocated through it
    // that relies on cudarc's event tracking: the mapped memory comes from
    // the driver directly, and each kernel runs on its own stream, watched
    // by polling. Without tracking, creating a stream does not synchronize
    // the context, which would wait behind a running kernel (a pkq
    // runtime's never ends).
    unsafe { ctx.disable_event_tracking() };
    let module = ctx.load_module(Ptx::from_binary(image.to_vec()))?;
    let mut functions = HashMap::new();
    for name in KERNELS {
        let f = module.load_function(name)?;
        make_current(&ctx)?;
        // SAFETY: a function of the module just loaded into `ctx`, which
        // is current on this thread.
        unsafe { sys::cuFuncLoad(f.cu_function()) }.result()?;
        functions.insert(name, f);
    }
    let d = Arc::new(Device {
        ctx,
        module,
        functions,
    });
    devices.insert(ordinal, d.clone());
    Ok(d)
}

/// Run of mapped pinned host memory: `len` zeroed 8-byte words the host
/// reads and writes as atomics and the device addresses at
/// [`Mapped::device_addr`]. Never freed: dropped, it is leaked (the kernel
/// that used it may still run); [`Mapped::recycle`]d once its kernel is
/// known to have exited, the next measurement on the device reuses it.
pub(crate) struct Mapped {
    host: NonNull<AtomicU64>,
    device: u64,
    /// Words in use.
    len: usize,
    /// Words allocated.
    cap: usize,
    /// The context it belongs to (`CUcontext` as an address).
    ctx: usize,
}

// SAFETY: the memory is reached only through atomics (`at`) and the
// device's addresses, and is never freed, so a `Mapped` may move between
// and be shared by threads.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

/// Recycled runs, for the process.
static POOL: Mutex<Vec<Mapped>> = Mutex::new(Vec::new());

impl Mapped {
    /// `words` zeroed words in `dev`'s context: the smallest recycled run
    /// that holds them, or a fresh one (`cuMemHostAlloc` with DEVICEMAP and
    /// PORTABLE, and its device address).
    pub(crate) fn new(dev: &Device, words: usize) -> Result<Self> {
        let words = words.max(1);
        let ctx = dev.ctx.cu_ctx() as usize;
        let reused = {
            let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
            let best = pool
                .iter()
                .enumerate()
                .filter(|(_, m)| m.ctx == ctx && m.cap >= words)
                .min_by_key(|(_, m)| m.cap)
                .map(|(i, _)| i);
            best.map(|i| pool.swap_remove(i))
        };
        let mut m = match reused {
            Some(m) => m,
            None => Self::alloc(dev, words)?,
        };
        m.len = words;
        // SAFETY: `cap >= words` words live at `host`; no kernel uses them
        // (a fresh run, or a recycled one whose kernel exited) and no other
        // host thread has them.
        unsafe { std::ptr::write_bytes(m.host.as_ptr(), 0, words) };
        Ok(m)
    }

    fn alloc(dev: &Device, words: usize) -> Result<Self> {
        let bytes = words * 8;
        let mut host = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        make_current(&dev.ctx)?;
        // SAFETY: `host` is a valid out-pointer; the context is current.
        unsafe { sys::cuMemHostAlloc(&mut host, bytes, flags) }.result()?;
        let host = NonNull::new(host.cast::<AtomicU64>())
            .ok_or(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        let mut device = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in the current
        // context; `device` is a valid out-pointer. (On failure the run is
        // leaked, as all of pkq-bench's pinned memory is.)
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.as_ptr().cast(), 0) }
            .result()?;
        Ok(Self {
            host,
            device,
            len: words,
            cap: words,
            ctx: dev.ctx.cu_ctx() as usize,
        })
    }

    /// Word `i` (below [`Mapped::len`]), for the host's atomic loads and
    /// stores.
    pub(crate) fn at(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len, "word {i} of {}", self.len);
        // SAFETY: within the run, page-aligned and never freed; AtomicU64
        // has u64's layout, and the host touches the words only as atomics.
        unsafe { &*self.host.as_ptr().add(i) }
    }

    /// The device address of word `i` (up to [`Mapped::len`]).
    pub(crate) fn device_addr(&self, i: usize) -> u64 {
        assert!(i <= self.len);
        self.device + 8 * i as u64
    }

    /// Gives the run back for the next measurement: only once no kernel
    /// that was given its address may still run.
    pub(crate) fn recycle(self) {
        POOL.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self);
    }
}

/// What a kernel's stream says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Running,
    Exited,
    /// The driver reports a device fault (sticky: taken to be this
    /// kernel's, as nothing else of pkq-bench's runs).
    Faulted(DriverError),
}

/// A kernel of pkq-bench's module on a stream of its own, launched once,
/// with the mapped memory it works on. When it is dropped known to have
/// exited, its memory is recycled and its stream destroyed; while it may
/// still run, both are leaked rather than freed under it.
pub(crate) struct Launched {
    device: Arc<Device>,
    function: CudaFunction,
    stream: std::mem::ManuallyDrop<Arc<CudaStream>>,
    memory: Vec<Mapped>,
    launched: AtomicBool,
    exited: AtomicBool,
}

impl Launched {
    /// Kernel `name` of `device`'s module, ready to launch on a new stream,
    /// with the mapped memory it is to be given.
    pub(crate) fn new(device: &Arc<Device>, name: &str, memory: Vec<Mapped>) -> Result<Self> {
        let function = device.function(name)?;
        let stream = device.ctx.new_stream()?;
        Ok(Self {
            device: device.clone(),
            function,
            stream: std::mem::ManuallyDrop::new(stream),
            memory,
            launched: AtomicBool::new(false),
            exited: AtomicBool::new(false),
        })
    }

    /// Launches the kernel.
    ///
    /// # Safety
    /// `push_args` must push exactly the kernel's parameters, by reference
    /// to values that outlive this call, and any addresses among them must
    /// stay valid while the kernel runs (pkq-bench's mapped memory does: it
    /// is never freed).
    pub(crate) unsafe fn launch<'a>(
        &'a self,
        cfg: LaunchConfig,
        push_args: impl FnOnce(&mut LaunchArgs<'a>),
    ) -> Result<()> {
        if launches_block() {
            return Err(Error::InvalidArgument(
                "CUDA_LAUNCH_BLOCKING is set: the launch of a kernel that waits for the host \
                 would never return (unset it, or set it to 0)"
                    .into(),
            ));
        }
        assert!(
            !self.launched.swap(true, Ordering::AcqRel),
            "a measurement kernel is launched once"
        );
        let mut builder = self.stream.launch_builder(&self.function);
        push_args(&mut builder);
        // SAFETY: the caller vouches for the arguments.
        let launched = unsafe { builder.launch(cfg) };
        if let Err(e) = launched {
            self.exited.store(true, Ordering::Release);
            return Err(e.into());
        }
        Ok(())
    }

    /// Asks the stream (without waiting) whether the kernel still runs.
    pub(crate) fn state(&self) -> State {
        if self.exited.load(Ordering::Acquire) || !self.launched.load(Ordering::Acquire) {
            return State::Exited;
        }
        if let Err(e) = make_current(&self.device.ctx) {
            return State::Faulted(e);
        }
        // SAFETY: a live stream of the context current on this thread.
        match unsafe { sys::cuStreamQuery(self.stream.cu_stream()) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => State::Running,
            sys::CUresult::CUDA_SUCCESS => {
                self.exited.store(true, Ordering::Release);
                State::Exited
            }
            e => State::Faulted(DriverError(e)),
        }
    }

    /// Polls the stream until the kernel has exited (`Ok`), faulted, or
    /// `limit` passed ([`Error::Timeout`]).
    pub(crate) fn wait_exit(&self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            match self.state() {
                State::Exited => return Ok(()),
                State::Faulted(e) => return Err(Error::Fault(error_name(e))),
                State::Running if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(20));
                }
                State::Running => return Err(Error::Timeout("exit")),
            }
        }
    }

    /// Its mapped memory `i` (in the order given to [`Launched::new`]).
    pub(crate) fn mem(&self, i: usize) -> &Mapped {
        &self.memory[i]
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if self.state() == State::Exited {
            for m in self.memory.drain(..) {
                m.recycle();
            }
            // SAFETY: dropped once, here; the kernel on it has exited.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.stream) };
        }
        // Else the kernel may still run: its memory (dropped, never freed)
        // and its stream are leaked.
    }
}

/// Makes `ctx` the calling thread's current context (as cudarc's calls
/// do), without cudarc's `bind_to_thread`, which would also report errors
/// that earlier drops recorded on the context (not this call's).
fn make_current(ctx: &CudaContext) -> Result<(), DriverError> {
    // SAFETY: the context is alive (borrowed); making it current has no
    // other effect.
    unsafe { sys::cuCtxSetCurrent(ctx.cu_ctx()) }.result()
}

/// Whether the driver makes every launch wait for its kernel to end
/// (`CUDA_LAUNCH_BLOCKING`, a non-zero number): a floor's launch would then
/// never return.
fn launches_block() -> bool {
    std::env::var("CUDA_LAUNCH_BLOCKING")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .is_some_and(|v| v != 0)
}
