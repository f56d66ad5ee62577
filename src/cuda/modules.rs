//! Device modules: each loaded into a context once, with its functions and
//! op tables, and kept for the life of the process.
//!
//! The driver waits for the kernels running in a context before it loads a
//! module there, or reads a module's globals (H100, driver 580: a second
//! runtime's `cuModuleLoadData` waited behind the first's resident kernel
//! for as long as it ran, which is forever, and so did the copy of the op
//! table out of a module loaded earlier; docs/design/module-loading.md#modules).
//! So:
//!
//! * a module is loaded at most once per context, alone, and everything pkq
//!   will want from it (functions, loaded at once rather than at first
//!   launch, and op tables) is taken while nothing of pkq's runs there;
//! * what is not in hand yet is refused, never waited for, while a pkq
//!   kernel runs in the context ([`Error::InvalidConfig`], saying why);
//!   so is a new SM partition of the device (green contexts: [`while_idle`]);
//! * modules are never unloaded: unloading waits the same way;
//! * pinned and device memory freed while a pkq kernel runs in its context
//!   is freed once none does (`cuMemFreeHost` and `cuMemFree` wait the
//!   same way): a runtime dropped beside a long-lived one keeps its rings
//!   and its device memory until that one stops;
//! * a kernel dropped before it was seen to exit (its stop timed out)
//!   lingers ([`Lingering`]): counted as running, its memory kept, until
//!   a later look ([`running_kernels`], any build, a new partition size)
//!   finds its stream finished;
//! * the primary context stays retained for the process (the cache holds
//!   it), and a device reset behind pkq's back (`cuDevicePrimaryCtxReset`,
//!   `cudaDeviceReset`) after pkq has loaded a module is not supported.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, sys};

use crate::cuda::image::{Image, check_one_parameter, function, read_op_table};
use crate::error::{Error, Result};
use crate::layout::PARAMS_BYTES;
use crate::ops::table::OpTable;
use crate::sync::statics::{LazyLock, Mutex, MutexGuard, lock};

/// The embedded module's kernels that the library launches, loaded with it;
/// `true`: a worker kernel, whose op table is read too.
const EMBEDDED_KERNELS: [(&str, bool); 1] = [("pkq_worker_kernel", true)];

/// A kernel ready to launch.
#[derive(Clone)]
pub(crate) struct Loaded {
    pub(crate) function: CudaFunction,
    /// Its op table (worker kernels; empty for the others).
    pub(crate) ops: OpTable,
}

struct Module {
    ctx: usize,
    image: Image,
    module: Arc<CudaModule>,
    kernels: HashMap<String, Loaded>,
}

#[derive(Default)]
struct State {
    modules: Vec<Module>,
    /// pkq kernels launched and not yet seen to end, per context.
    running: HashMap<usize, usize>,
    /// Memory to free once no pkq kernel runs in its context.
    to_free: Vec<(Arc<CudaContext>, Memory)>,
}

impl State {
    /// Whether a pkq kernel runs in the context `ctx_key` (see [`key`]).
    fn busy(&self, ctx_key: usize) -> bool {
        self.running.get(&ctx_key).is_some_and(|&n| n > 0)
    }
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

/// A kernel dropped before it was seen to exit (its stop timed out): still
/// counted among its context's running kernels, its memory kept, until a
/// later look ([`reap`]) finds it exited.
pub(crate) trait Lingering: Send {
    /// Whether it has exited (asks the driver; never blocks).
    fn exited(&self) -> bool;
    /// Takes it out of the running count and releases what it kept; only
    /// once it exited.
    fn release(self: Box<Self>);
}

static LINGERING: LazyLock<Mutex<Vec<Box<dyn Lingering>>>> = LazyLock::new(Mutex::default);

/// Keeps `kernel` until a later look finds it exited ([`reap`]).
pub(crate) fn linger(kernel: Box<dyn Lingering>) {
    lock(&LINGERING).push(kernel);
}

/// Looks again at every lingering kernel (of every context), and releases
/// each that exited (which may free memory kept for it, or for others,
/// once none runs). Holds the list's lock throughout, so that a look that
/// returns has seen every kernel dropped before it (a concurrent one waits);
/// called without the state's lock, which a release takes (the order:
/// this list, a partition's lock, the state).
fn reap() {
    let mut lingering = lock(&LINGERING);
    if lingering.is_empty() {
        return;
    }
    for kernel in std::mem::take(&mut *lingering) {
        if kernel.exited() {
            kernel.release();
        } else {
            lingering.push(kernel);
        }
    }
}

fn state() -> MutexGuard<'static, State> {
    lock(&STATE)
}

fn key(ctx: &Arc<CudaContext>) -> usize {
    ctx.cu_ctx() as usize
}

/// Kernel `name` of `image` in `ctx`, loading what it needs unless a pkq
/// kernel runs in `ctx`. A `worker` kernel comes with its op table, and a
/// caller's worker kernel must take exactly one `pkq_params`.
pub(crate) fn kernel(
    ctx: &Arc<CudaContext>,
    image: &Image,
    name: &str,
    worker: bool,
) -> Result<Loaded> {
    reap();
    let mut st = state();
    let ctx_key = key(ctx);
    let busy = st.busy(ctx_key);
    let refuse = |what: String| {
        refused_while_busy(
            &format!("load {what}"),
            "Build the first runtime with each module and kernel while none runs; later ones \
             reuse them",
        )
    };
    let at = match st
        .modules
        .iter()
        .position(|m| m.ctx == ctx_key && m.image == *image)
    {
        Some(at) => at,
        None => {
            if busy {
                return Err(refuse(format!("a module ({image:?})")));
            }
            // Kept only once everything asked for loaded (a module refused
            // here is unloaded again, with nothing of pkq's running).
            let module = image.load(ctx)?;
            let mut m = Module {
                ctx: ctx_key,
                image: image.clone(),
                module,
                kernels: HashMap::new(),
            };
            let wanted: Vec<(&str, bool)> = match image {
                Image::Embedded => EMBEDDED_KERNELS.to_vec(),
                Image::Caller(_) => vec![(name, worker)],
            };
            for (k, is_worker) in wanted {
                let loaded = load_kernel(ctx, &m.module, &m.image, k, is_worker)?;
                m.kernels.insert(k.to_string(), loaded);
            }
            st.modules.push(m);
            st.modules.len() - 1
        }
    };
    let m = &mut st.modules[at];
    if let Some(k) = m.kernels.get(name) {
        return Ok(k.clone());
    }
    if busy {
        return Err(refuse(format!("kernel {name}")));
    }
    let loaded = load_kernel(ctx, &m.module, image, name, worker)?;
    m.kernels.insert(name.to_string(), loaded.clone());
    Ok(loaded)
}

/// Looks `name` up, has the driver load its code now (not at its first
/// launch, when a resident kernel may be running), and reads its op table.
fn load_kernel(
    ctx: &Arc<CudaContext>,
    module: &Arc<CudaModule>,
    image: &Image,
    name: &str,
    worker: bool,
) -> Result<Loaded> {
    let f = function(module, name)?;
    if let (true, Image::Caller(_)) = (worker, image) {
        check_one_parameter(ctx, &f, name, PARAMS_BYTES)?;
    }
    // SAFETY: a function of `ctx`, made current around the call.
    crate::cuda::driver::with_current(ctx, || unsafe { sys::cuFuncLoad(f.cu_function()) })?
        .result()?;
    let ops = if worker {
        let stream = ctx.new_stream()?;
        read_op_table(module, &stream, name)?
    } else {
        OpTable::default()
    };
    Ok(Loaded { function: f, ops })
}

/// Runs `f` unless a pkq kernel runs in `ctx`, holding the lock a launch
/// takes ([`started`]) so that none starts meanwhile: for driver calls that
/// wait for the device's running kernels, as a module load does (creating
/// a green context waited behind a running kernel for as long as it ran:
/// H100, driver 580), which would wait for a resident kernel forever.
/// [`Error::InvalidConfig`] naming `what` while one runs.
pub(crate) fn while_idle<T>(
    ctx: &Arc<CudaContext>,
    what: &str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    reap();
    let st = state();
    if st.busy(key(ctx)) {
        return Err(refused_while_busy(
            &format!("make {what}"),
            "Build a runtime with each partition size while none runs; later ones reuse it",
        ));
    }
    let out = f();
    drop(st);
    out
}

/// Why `doing` is refused while a pkq kernel runs on the device, and what
/// to do instead ([`Error::InvalidConfig`]).
fn refused_while_busy(doing: &str, instead: &str) -> Error {
    Error::InvalidConfig(format!(
        "cannot {doing} while a pkq kernel (a runtime's resident kernel) runs on this device: \
         the driver would wait for that kernel, which does not end. {instead}"
    ))
}

/// How many pkq kernels run on device `index` now: launched in its primary
/// context (or in an SM partition of it) and not yet seen to end. While one
/// does, pkq refuses, rather than waits for it, what the driver would make
/// wait for every running kernel: loading a module not loaded before, and
/// making an SM partition of a size not made before
/// ([`Error::InvalidConfig`]). A kernel that did not exit by its runtime's
/// stop timeout stays counted (it may still run): while its runtime or a
/// ticket or batch of it lives, until one of their waits sees it exit;
/// after, until this call or a build (of any device) finds it exited. Its
/// memory is then given back
/// ([`MemoryState::GivenBack`](crate::MemoryState::GivenBack)). Errors: what opening the device returns
/// ([`Error::NoDriver`], [`Error::DeviceOutOfRange`], ...).
pub fn running_kernels(index: usize) -> Result<usize> {
    let (_keep, ctx) = crate::cuda::driver::open(index)?;
    reap();
    Ok(state().running.get(&key(&ctx)).copied().unwrap_or(0))
}

/// A pkq kernel is about to be launched in `ctx` (waits for a load in
/// progress, which cannot then be left waiting for it).
pub(crate) fn started(ctx: &Arc<CudaContext>) {
    *state().running.entry(key(ctx)).or_default() += 1;
}

/// A pkq kernel of `ctx` was seen not to run any more, or its launch failed
/// (once per [`started`]). The last to go frees the memory [`free`] kept,
/// still holding the lock, so that no launch slips in before the frees.
pub(crate) fn ended(ctx: &Arc<CudaContext>) {
    let ctx_key = key(ctx);
    let mut st = state();
    let Some(n) = st.running.get_mut(&ctx_key) else {
        return;
    };
    *n = n.saturating_sub(1);
    if *n > 0 {
        return;
    }
    let (now, later) = std::mem::take(&mut st.to_free)
        .into_iter()
        .partition(|(c, _)| key(c) == ctx_key);
    st.to_free = later;
    for (c, memory) in now {
        // SAFETY: handed over by `free` under its contract, and taken out
        // of the list before this, its only free.
        unsafe { free_now(&c, memory) };
        crate::cuda::driver::drop_context(c);
    }
}

/// Memory a pkq kernel used, freed by [`free`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Memory {
    /// Pinned host memory from `cuMemHostAlloc` (its host address).
    Pinned(usize),
    /// Device memory from `cuMemAlloc` (its device address).
    Device(u64),
}

/// Frees `memory` of `ctx` now, or, while a pkq kernel runs there, once
/// none does: `cuMemFreeHost` and `cuMemFree` wait for every kernel
/// running in the context (H200, driver 580: each waited as long as a
/// spinning kernel ran), and a resident one does not end
/// (`docs/design/module-loading.md`). Decided and done under the lock, so
/// no launch comes between.
///
/// # Safety
/// `memory` came from `cuMemHostAlloc` or `cuMemAlloc` in `ctx`, is handed
/// over once, and nothing uses it any more.
pub(crate) unsafe fn free(ctx: &Arc<CudaContext>, memory: Memory) {
    let mut st = state();
    if st.busy(key(ctx)) {
        st.to_free.push((ctx.clone(), memory));
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { free_now(ctx, memory) };
}

/// Frees `memory` of `ctx` now.
///
/// # Safety
/// As [`free`]; freed once.
unsafe fn free_now(ctx: &Arc<CudaContext>, memory: Memory) {
    // Errors (a context already broken by a device fault) leave nothing to do.
    let _ = crate::cuda::driver::with_current(ctx, || match memory {
        // SAFETY: the caller's contract: a cuMemHostAlloc pointer of `ctx`,
        // freed once.
        Memory::Pinned(host) => unsafe { sys::cuMemFreeHost(host as *mut std::ffi::c_void) },
        // SAFETY: the caller's contract: a cuMemAlloc address of `ctx`,
        // freed once.
        Memory::Device(addr) => unsafe { sys::cuMemFree_v2(addr) },
    });
}
