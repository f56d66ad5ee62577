//! The life of a resident kernel: launch, liveness, and the rule that
//! nothing it may touch is freed while it lives.

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, DriverError, LaunchArgs, LaunchConfig, sys,
};

use crate::cuda::driver::error_name;
use crate::cuda::image::Image;
use crate::cuda::mapped::MappedBuffer;
use crate::cuda::partition::Green;
use crate::error::{Error, Result};
use crate::ops::table::OpTable;
use crate::sync::{AtomicBool, Mutex, OnceLock, Ordering, lock};

/// Device memory a kernel works in ([`Kernel::device_memory`]), by how it
/// is freed.
#[derive(Clone, Copy, Debug)]
enum Scratch {
    /// Allocated stream-ordered on the kernel's stream, and freed so
    /// (devices with memory pools).
    Pooled(u64),
    /// Allocated with `cuMemAlloc`, and freed by `modules::free` (once no
    /// pkq kernel runs in the context: `cuMemFree` waits for them all).
    Plain(u64),
}

impl Scratch {
    fn addr(self) -> u64 {
        match self {
            Self::Pooled(a) | Self::Plain(a) => a,
        }
    }
}

/// What the kernel's stream says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KernelState {
    Running,
    Finished,
    /// The driver reports a device fault (sticky). It reports one on every
    /// context of the process, not only the one whose kernel faulted (two
    /// GPUs: after a trap on one, every call on the other returned it while
    /// the other's kernels ran on), so this alone does not say that this
    /// kernel ended: whoever has more evidence decides and calls
    /// [`Kernel::end`] (a runtime: its pollers' heartbeats).
    Faulted(DriverError),
    /// This thread could not ask (the call that failed, and how): says
    /// nothing about the kernel.
    Unknown(&'static str, DriverError),
}

/// A kernel that stays resident on its own stream, with a reference to the
/// mapped memory it works on. The memory and the stream are released only
/// once the kernel is known to have exited: at its drop, or, for one that
/// may still run then, once a later look finds it exited
/// ([`crate::cuda::modules::Lingering`]); one found dead by a fault keeps
/// them for the process. (Its module stays loaded for the process: see
/// [`crate::cuda::modules`].)
pub(crate) struct Kernel {
    /// Dropped by `driver::drop_context` (the drop's last step).
    ctx: ManuallyDrop<Arc<CudaContext>>,
    /// The multiprocessors its stream's kernels may run on: the device's,
    /// or its SM partition's.
    sms: usize,
    /// The partition's lock, held around calls that make its green context
    /// current (see `Green`).
    part_lock: Option<Arc<Mutex<()>>>,
    stream: ManuallyDrop<Arc<CudaStream>>,
    function: ManuallyDrop<CudaFunction>,
    memory: ManuallyDrop<Vec<Arc<MappedBuffer>>>,
    /// Device memory the kernel works in (IO scratch), released with
    /// `memory`.
    device_memory: Vec<Scratch>,
    /// Launched and not yet known to have ended (exited, or found dead).
    live: AtomicBool,
    /// How it ended, once known: `None` by an exit, `Some` by the fault the
    /// driver reported. The first known stays (every later look reports it).
    ended: OnceLock<Option<DriverError>>,
    /// Nothing of it runs: not launched (or its launch failed), or seen to
    /// exit (its stream finished, or its runtime saw every poller leave).
    /// Only then is its memory released (at its drop, or once a later look
    /// finds a dropped kernel exited: `Remains`); a kernel found dead by a
    /// fault keeps it for the process (the driver refuses every free once
    /// it reports one anyway).
    gone: AtomicBool,
    /// Set once its memory was released (see `gone`): freed, or handed to
    /// `modules::free` for once no pkq kernel runs in the context.
    released: Arc<AtomicBool>,
    /// Memory owned elsewhere that the kernel works on (a runtime's state
    /// arena): a reference kept until its own memory is released, so that
    /// none of it is freed under a kernel that may still run.
    kept: Vec<Arc<dyn Send + Sync>>,
    /// Counted among the context's running pkq kernels
    /// ([`crate::cuda::modules::started`]): from just before the launch until the
    /// stream is first seen to have ended, or the launch failed.
    counted: AtomicBool,
    /// The module's op table for this kernel (worker kernels; empty for the
    /// others).
    pub(crate) ops: OpTable,
}

impl Kernel {
    /// Kernel `name` of `image` (see [`crate::cuda::modules`]) with its own
    /// stream. `ctx` must not track events (`driver::open` turns it off), so
    /// that creating the stream never synchronizes the context. A `worker`
    /// kernel's module must export its op table, and a caller's worker
    /// kernel must take exactly one `pkq_params` (the embedded one's is
    /// checked at build time, in layout.rs: asking the driver would show as
    /// an API error in every sanitizer run). With `part`, the stream is the
    /// partition's: the kernel runs on its SMs only (the module stays the
    /// device's: a green context shares the primary context's modules).
    pub(crate) fn from_image(
        ctx: &Arc<CudaContext>,
        image: &Image,
        name: &str,
        worker: bool,
        memory: Vec<Arc<MappedBuffer>>,
        part: Option<&Green>,
    ) -> Result<Self> {
        let loaded = crate::cuda::modules::kernel(ctx, image, name, worker)?;
        let (stream, sms) = match part {
            Some(part) => (part.stream()?, part.sms()),
            None => {
                let sms = ctx
                    .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
                (ctx.new_stream()?, sms.max(0) as usize)
            }
        };
        Ok(Self {
            ctx: ManuallyDrop::new(ctx.clone()),
            sms,
            part_lock: part.map(Green::shared_lock),
            stream: ManuallyDrop::new(stream),
            function: ManuallyDrop::new(loaded.function),
            memory: ManuallyDrop::new(memory),
            device_memory: Vec::new(),
            live: AtomicBool::new(false),
            ended: OnceLock::new(),
            gone: AtomicBool::new(true),
            released: Arc::new(AtomicBool::new(false)),
            kept: Vec::new(),
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
        if crate::cuda::driver::launches_block() {
            return Err(Error::InvalidConfig(
                "CUDA_LAUNCH_BLOCKING is set: every kernel launch would wait for its kernel to \
                 end, and a resident kernel never ends (unset it, or set it to 0)"
                    .into(),
            ));
        }
        assert!(
            !self.live.swap(true, Ordering::AcqRel),
            "a resident kernel is launched once"
        );
        self.gone.store(false, Ordering::Release);
        let mut builder = self.stream.launch_builder(&self.function);
        push_args(&mut builder);
        // Counted before it can run: a module load that starts after this
        // is refused rather than left waiting for this kernel.
        self.counted.store(true, Ordering::Release);
        crate::cuda::modules::started(&self.ctx);
        // cudarc makes the stream's context current (a partition's green
        // one): keep the thread's.
        let launched = self.bound(|| {
            // SAFETY: the caller vouches for the arguments.
            unsafe { builder.launch(cfg) }
        });
        if let Err(e) = launched {
            self.uncount();
            self.gone.store(true, Ordering::Release);
            self.live.store(false, Ordering::Release);
            return Err(e.into());
        }
        Ok(())
    }

    /// Asks the stream (non-blocking) whether the kernel still runs; once
    /// it is known to have ended, how. A stream seen finished is an exit
    /// ([`Kernel::exited`]); a fault is not an end (see
    /// [`KernelState::Faulted`]).
    pub(crate) fn state(&self) -> KernelState {
        if !self.live.load(Ordering::Acquire) {
            return self.outcome();
        }
        match query(&self.ctx, &self.stream) {
            Err(e) => failed("cuCtxPushCurrent", e.0),
            Ok(sys::CUresult::CUDA_ERROR_NOT_READY) => KernelState::Running,
            Ok(sys::CUresult::CUDA_SUCCESS) => self.exited(),
            Ok(e) => failed("cuStreamQuery", e),
        }
    }

    /// How it ended (the first end known), once not live: `Finished` for an
    /// exit (or before a launch), `Faulted` for a fault.
    fn outcome(&self) -> KernelState {
        match self.ended.get() {
            Some(Some(e)) => KernelState::Faulted(*e),
            _ => KernelState::Finished,
        }
    }

    /// Ends the kernel by the fault `fault` it was found dead by (its
    /// runtime: no heartbeat): no longer live, out of the context's running
    /// count; its memory is kept (see `gone`). Returns how it ended: an end
    /// known before stays.
    pub(crate) fn end(&self, fault: DriverError) -> KernelState {
        self.finish(Some(fault))
    }

    /// The kernel exited (its stream finished, or every poller left its
    /// loop): as [`Kernel::end`], and its memory may be released. Returns
    /// how it ended (a fault found before stays).
    pub(crate) fn exited(&self) -> KernelState {
        self.gone.store(true, Ordering::Release);
        self.finish(None)
    }

    fn finish(&self, how: Option<DriverError>) -> KernelState {
        // Before it is no longer live: a look that finds it so reports it.
        let _ = self.ended.set(how);
        self.uncount();
        self.live.store(false, Ordering::Release);
        self.outcome()
    }
}

/// What a failed driver call says about the kernel: nothing, for errors of
/// the calling thread's API use; a fault the driver reports, for the rest.
fn failed(call: &'static str, code: sys::CUresult) -> KernelState {
    use sys::CUresult::*;
    match code {
        CUDA_ERROR_INVALID_CONTEXT
        | CUDA_ERROR_INVALID_HANDLE
        | CUDA_ERROR_NOT_INITIALIZED
        | CUDA_ERROR_DEINITIALIZED => KernelState::Unknown(call, DriverError(code)),
        e => KernelState::Faulted(DriverError(e)),
    }
}

/// Polls `verdict` until it says the kernel ended (`Finished`: `Ok`; by a
/// fault: [`Error::DeviceFault`]) or `deadline` passes (none: no limit;
/// then [`Error::KernelTimeout`]).
pub(crate) fn wait_ended(
    deadline: Option<Instant>,
    verdict: impl Fn() -> KernelState,
) -> Result<()> {
    loop {
        match verdict() {
            KernelState::Finished => return Ok(()),
            KernelState::Faulted(e) => return Err(Error::DeviceFault(error_name(e))),
            KernelState::Running | KernelState::Unknown(..)
                if deadline.is_none_or(|d| crate::sync::now() < d) =>
            {
                crate::sync::sleep(Duration::from_micros(20));
            }
            KernelState::Running | KernelState::Unknown(..) => {
                return Err(Error::KernelTimeout("exit in time"));
            }
        }
    }
}

impl Kernel {
    /// `f`, a cudarc call on the kernel's stream that makes the stream's
    /// context current, with the thread's own context kept and, for a
    /// partition's stream, the partition's lock held.
    fn bound<T>(
        &self,
        f: impl FnOnce() -> std::result::Result<T, DriverError>,
    ) -> std::result::Result<T, DriverError> {
        let _one = self.part_lock.as_ref().map(|l| lock(l));
        crate::cuda::driver::with_current(&self.ctx, f).and_then(|r| r)
    }

    /// Takes the kernel out of the running count, once.
    fn uncount(&self) {
        if self.counted.swap(false, Ordering::AcqRel) {
            crate::cuda::modules::ended(&self.ctx);
        }
    }

    /// Lets a launch of this kernel give each block `bytes` of dynamic
    /// shared memory (over the default 48 KiB, the device must allow it);
    /// whether it may.
    pub(crate) fn allow_dynamic_shared(&self, bytes: usize) -> bool {
        if bytes <= 48 << 10 {
            return true;
        }
        let Ok(bytes) = i32::try_from(bytes) else {
            return false;
        };
        matches!(
            crate::cuda::driver::with_current(&self.ctx, || {
                self.function.set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes,
                )
            }),
            Ok(Ok(()))
        )
    }

    /// How many blocks of `threads` threads of this kernel the device keeps
    /// resident at once, each with `dynamic_shared` bytes of dynamic shared
    /// memory: the driver's occupancy figure per multiprocessor (registers,
    /// shared memory, launch bounds) times the multiprocessors.
    pub(crate) fn max_resident_blocks(&self, threads: u32, dynamic_shared: usize) -> Result<usize> {
        let per_sm = crate::cuda::driver::with_current(&self.ctx, || {
            self.function
                .occupancy_max_active_blocks_per_multiprocessor(threads, dynamic_shared, None)
        })??;
        Ok(per_sm as usize * self.sms)
    }

    /// `bytes` of device memory (not zeroed) for the kernel to work in,
    /// allocated now (before the launch: nothing is allocated on the device
    /// while the kernel runs) and released with the kernel's other memory,
    /// once it is seen to have exited: freed then, or, while another pkq
    /// kernel runs in the context, once none does (`modules::free`: a
    /// `cuMemFree` would wait for that kernel). Its device address.
    pub(crate) fn device_memory(&mut self, bytes: usize) -> Result<u64> {
        use cudarc::driver::result;
        // Not zeroed: a memset is a kernel, which waits for room on a device
        // that another resident kernel may fill; the kernel writes this
        // memory before it reads it.
        let pools = self
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?;
        let scratch = self.bound(|| {
            if pools != 0 {
                // Stream-ordered on the kernel's own stream, empty now: its
                // free, queued behind the kernel, never waits for another.
                // SAFETY: an allocation on a live stream of the context made
                // current around the call, freed once, in the drop.
                let addr = unsafe { result::malloc_async(self.stream.cu_stream(), bytes.max(1)) }?;
                self.stream.synchronize().map(|()| Scratch::Pooled(addr))
            } else {
                // SAFETY: a plain allocation of the context made current
                // around the call, freed once, by `modules::free` in the
                // drop.
                unsafe { result::malloc_sync(bytes.max(1)) }.map(Scratch::Plain)
            }
        })?;
        self.device_memory.push(scratch);
        Ok(scratch.addr())
    }

    /// `words` zeroed words of mapped host memory for the kernel to write
    /// (allocated now, before the launch), released with the kernel's
    /// other mapped memory.
    pub(crate) fn mapped_memory(&mut self, words: usize) -> Result<Arc<MappedBuffer>> {
        let buffer = MappedBuffer::new(&self.ctx, words)?;
        self.memory.push(buffer.clone());
        Ok(buffer)
    }

    /// [`Kernel::device_memory`], zeroed by a copy on the kernel's stream
    /// from host memory (a copy engine's work: no kernel, so it needs no
    /// room on a device another resident kernel may fill), done before
    /// this returns.
    pub(crate) fn zeroed_device_memory(&mut self, bytes: usize) -> Result<u64> {
        use cudarc::driver::result;
        let addr = self.device_memory(bytes)?;
        let zeros = vec![0u8; bytes];
        self.bound(|| {
            // SAFETY: `addr` holds `bytes` bytes of this context's device
            // memory, allocated above; `zeros` outlives the copy, which the
            // stream's synchronize waits for.
            unsafe { result::memcpy_htod_async(addr, &zeros, self.stream.cu_stream()) }?;
            self.stream.synchronize()
        })?;
        Ok(addr)
    }

    /// The multiprocessors its stream's kernels may run on.
    pub(crate) fn sms(&self) -> usize {
        self.sms
    }

    /// Whether the kernel may still run (launched, and not yet seen to end).
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Whether nothing of it runs (see `gone`): never launched, or seen to
    /// exit.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// What says whether its memory was released: set at its drop, or, for
    /// a kernel that may still run then, once a later look finds it exited;
    /// never for one found dead by a fault.
    pub(crate) fn released(&self) -> Arc<AtomicBool> {
        self.released.clone()
    }

    /// Keeps `memory` (owned elsewhere, used by the kernel) alive until the
    /// kernel's own memory is released.
    pub(crate) fn keep(&mut self, memory: Arc<dyn Send + Sync>) {
        self.kept.push(memory);
    }

    /// The driver handle of the kernel's context.
    pub(crate) fn cu_ctx(&self) -> sys::CUcontext {
        self.ctx.cu_ctx()
    }
}

/// Asks `stream` (the kernel's, of `ctx` or of a partition's green context
/// of it) whether its work has finished, without waiting: the driver's
/// answer, or why it could not be asked.
fn query(
    ctx: &Arc<CudaContext>,
    stream: &CudaStream,
) -> std::result::Result<sys::CUresult, DriverError> {
    // SAFETY: a live stream, queried with `ctx` (its context, or the
    // primary context its green context was made from) current around the
    // call; the query makes no context current.
    crate::cuda::driver::with_current(ctx, || unsafe { sys::cuStreamQuery(stream.cu_stream()) })
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // Not seen to exit (a stop that timed out, a fault): ask once more.
        if !self.gone.load(Ordering::Acquire) {
            let _ = self.state();
        }
        // SAFETY: each `ManuallyDrop` field is taken exactly once, here,
        // and not used after (the kernel is being dropped).
        let remains = unsafe {
            Remains {
                ctx: Arc::clone(&self.ctx),
                part_lock: self.part_lock.clone(),
                stream: ManuallyDrop::new(ManuallyDrop::take(&mut self.stream)),
                function: ManuallyDrop::new(ManuallyDrop::take(&mut self.function)),
                memory: ManuallyDrop::new(ManuallyDrop::take(&mut self.memory)),
                kept: ManuallyDrop::new(std::mem::take(&mut self.kept)),
                device_memory: std::mem::take(&mut self.device_memory),
                counted: self.counted.swap(false, Ordering::AcqRel),
                released: self.released.clone(),
            }
        };
        if self.gone.load(Ordering::Acquire) {
            remains.release();
        } else if self.live.load(Ordering::Acquire) {
            // It may still run (a stop that timed out): released once a
            // later look sees its stream finished.
            crate::cuda::modules::linger(Box::new(remains));
        }
        // Else found dead by a fault, which may have been judged wrongly,
        // and the driver refuses every free after one anyway: the remains
        // are dropped unreleased, which keeps what they hold for the
        // process (never freed under a kernel that may still use it, nor
        // its module's code).
        // SAFETY: taken once, here, as the drop's last step.
        crate::cuda::driver::drop_context(unsafe { ManuallyDrop::take(&mut self.ctx) });
    }
}

/// What a dropped kernel leaves behind: its stream, its function, the
/// memory it worked on, and its place in the context's running count.
/// Dropped unreleased, it keeps them for the process (the `ManuallyDrop`
/// fields, and device memory freed only by a release); only
/// [`Remains::release`], once the kernel exited, gives them back.
struct Remains {
    ctx: Arc<CudaContext>,
    part_lock: Option<Arc<Mutex<()>>>,
    stream: ManuallyDrop<Arc<CudaStream>>,
    function: ManuallyDrop<CudaFunction>,
    memory: ManuallyDrop<Vec<Arc<MappedBuffer>>>,
    kept: ManuallyDrop<Vec<Arc<dyn Send + Sync>>>,
    device_memory: Vec<Scratch>,
    /// Still counted among the context's running pkq kernels.
    counted: bool,
    released: Arc<AtomicBool>,
}

impl Remains {
    /// Out of the running count, then everything freed (pinned memory and
    /// plain device memory by `modules::free`: at once, or once no other
    /// pkq kernel runs in the context); says so in `released`. Only for a
    /// kernel that exited.
    fn release(mut self) {
        if self.counted {
            crate::cuda::modules::ended(&self.ctx);
        }
        // cudarc makes the contexts current to release: keep the thread's.
        let part_lock = self.part_lock.clone();
        let _one = part_lock.as_ref().map(|l| lock(l));
        // SAFETY: each taken exactly once, here; `self` is dropped after,
        // its `ManuallyDrop` fields untouched.
        let (stream, function, memory, kept) = unsafe {
            (
                ManuallyDrop::take(&mut self.stream),
                ManuallyDrop::take(&mut self.function),
                ManuallyDrop::take(&mut self.memory),
                ManuallyDrop::take(&mut self.kept),
            )
        };
        let device_memory = std::mem::take(&mut self.device_memory);
        let _ = crate::cuda::driver::with_current(&self.ctx, || {
            for s in &device_memory {
                if let Scratch::Pooled(addr) = *s {
                    // SAFETY: allocated stream-ordered by `device_memory` on
                    // this stream, freed once; the kernel that used it
                    // exited.
                    let _ = unsafe { cudarc::driver::result::free_async(addr, stream.cu_stream()) };
                }
            }
            drop(kept);
            drop(memory);
            drop(function);
            drop(stream);
        });
        for s in device_memory {
            if let Scratch::Plain(addr) = s {
                // SAFETY: allocated by `device_memory` in this context,
                // handed over once; the kernel that used it exited.
                unsafe {
                    crate::cuda::modules::free(
                        &self.ctx,
                        crate::cuda::modules::Memory::Device(addr),
                    )
                };
            }
        }
        self.released.store(true, Ordering::Release);
        crate::cuda::driver::drop_context(self.ctx);
    }
}

impl crate::cuda::modules::Lingering for Remains {
    fn exited(&self) -> bool {
        matches!(
            query(&self.ctx, &self.stream),
            Ok(sys::CUresult::CUDA_SUCCESS)
        )
    }

    fn release(self: Box<Self>) {
        (*self).release();
    }
}
