//! Device modules: each loaded into a context once, with its functions and
//! op tables, and kept for the life of the process.
//!
//! The driver waits for the kernels running in a context before it loads a
//! module there, or reads a module's globals (H100, driver 580: a second
//! runtime's `cuModuleLoadData` waited behind the first's resident kernel
//! for as long as it ran, which is forever, and so did the copy of the op
//! table out of a module loaded earlier; `pkq-bench/NOTES.md`). So:
//!
//! * a module is loaded at most once per context, alone, and everything pkq
//!   will want from it (functions, loaded at once rather than at first
//!   launch, and op tables) is taken while nothing of pkq's runs there;
//! * what is not in hand yet is refused, never waited for, while a pkq
//!   kernel runs in the context ([`Error::InvalidConfig`], saying why);
//!   so is a new SM partition of the device (green contexts: [`while_idle`]);
//! * modules are never unloaded: unloading waits the same way;
//! * pinned memory freed while a pkq kernel runs in its context is freed
//!   once none does (freeing may wait the same way): a runtime dropped
//!   beside a long-lived one keeps its rings until that one stops;
//! * the primary context stays retained for the process (the cache holds
//!   it), and a device reset behind pkq's back (`cuDevicePrimaryCtxReset`,
//!   `cudaDeviceReset`) after pkq has loaded a module is not supported.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, sys};

use crate::cuda::image::{Image, check_one_parameter, function, read_op_table};
use crate::error::{Error, Result};
use crate::ops::typed::OpTable;
use crate::proto::layout::PARAMS_BYTES;

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
    /// Pinned memory to free once no pkq kernel runs in its context.
    to_free: Vec<(Arc<CudaContext>, usize)>,
}

impl State {
    /// Whether a pkq kernel runs in the context `ctx_key` (see [`key`]).
    fn busy(&self, ctx_key: usize) -> bool {
        self.running.get(&ctx_key).is_some_and(|&n| n > 0)
    }
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
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

/// A pkq kernel is about to be launched in `ctx` (waits for a load in
/// progress, which cannot then be left waiting for it).
pub(crate) fn started(ctx: &Arc<CudaContext>) {
    *state().running.entry(key(ctx)).or_default() += 1;
}

/// A pkq kernel of `ctx` was seen not to run any more, or its launch failed
/// (once per [`started`]). The last to go frees the memory [`free_pinned`]
/// kept, still holding the lock, so that no launch slips in before the
/// frees.
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
    for (c, host) in now {
        // SAFETY: handed over by `free_pinned` under its contract, and
        // taken out of the list before this, its only free.
        unsafe { free_now(&c, host as *mut u64) };
    }
}

/// Frees pinned memory of `ctx` now, or, while a pkq kernel runs there,
/// once none does (the driver may wait for running kernels to free it: not
/// measured yet, not risked). Decided and done under the lock, so no launch
/// comes between.
///
/// # Safety
/// `host` came from `cuMemHostAlloc` in `ctx`, is handed over once, and
/// nothing uses it any more.
pub(crate) unsafe fn free_pinned(ctx: &Arc<CudaContext>, host: *mut u64) {
    let mut st = state();
    if st.busy(key(ctx)) {
        st.to_free.push((ctx.clone(), host as usize));
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { free_now(ctx, host) };
}

/// Frees pinned memory that `cuMemHostAlloc` gave in `ctx`.
///
/// # Safety
/// `host` came from `cuMemHostAlloc` in `ctx`, is freed once, and nothing
/// uses it any more.
unsafe fn free_now(ctx: &Arc<CudaContext>, host: *mut u64) {
    // Errors (a context already broken by a device fault) leave nothing to do.
    // SAFETY: the caller's contract: a cuMemHostAlloc pointer of `ctx`,
    // freed once.
    let _ = crate::cuda::driver::with_current(ctx, || unsafe { sys::cuMemFreeHost(host.cast()) });
}
