//! The runtime as a Python object: building it, submitting tasks, and
//! stopping it, without the GIL wherever pkq may wait.

use std::sync::{Arc, Mutex, Weak};

use pkq::{Error, Op, Runtime, Submit, Task, Tasks, WaitStrategy};
use pyo3::prelude::*;
use pyo3::types::PyInt;

use crate::args::{bytes_of, seconds_of};
use crate::detach::detached;
use crate::errors::{IntoPy, Kind, plain};
use crate::state::PyState;
use crate::tasks::{PyBatch, PyTicket};

/// Every runtime built, for `_shutdown_all` (at interpreter exit).
static LIVE: Mutex<Vec<Weak<Runtime>>> = Mutex::new(Vec::new());

/// pkq's resident kernel on one CUDA device, and its submission rings.
///
/// Dropping it (or `__exit__`, or `shutdown()`) drains what was submitted
/// and stops the kernel, without the GIL. While it lives, device-wide
/// synchronization (`torch.cuda.synchronize()`, `cupy.cuda.Device().synchronize()`),
/// frees that give memory back to the driver (`torch.cuda.empty_cache()`,
/// CuPy's `free_all_blocks()`) and module loads in the same process never
/// return: see the package's docs. Any number of threads may submit at
/// once.
#[pyclass(module = "pkq._pkq", name = "Runtime", frozen)]
pub struct PyRuntime {
    /// `None` only while it is dropped.
    rt: Option<Arc<Runtime>>,
}

/// The interpreter's exit (an atexit function, before finalization
/// begins): calls of other threads that return from now on wait for
/// finalization (then hang) or for `detach::EXIT_GRACE` before they ask
/// for the GIL (`detach.rs`); every runtime still alive is shut
/// down (without the GIL), while pkq's completion thread can still take
/// the GIL for an awaited ticket's callback; then the threads whose calls
/// returned before are let take the GIL and go. Errors are ignored.
#[pyfunction]
#[pyo3(name = "_shutdown_all")]
pub(crate) fn shutdown_all(py: Python<'_>) {
    crate::detach::exit_begins();
    let live: Vec<Arc<Runtime>> = match LIVE.lock() {
        Ok(mut l) => l.drain(..).filter_map(|w| w.upgrade()).collect(),
        Err(_) => Vec::new(),
    };
    detached(py, move || {
        for rt in &live {
            let _ = rt.shutdown();
        }
        drop(live);
        crate::detach::wait_for_askers();
    });
}

/// How a wait strategy is named in Python.
fn strategy_of(py: Python<'_>, name: &str) -> PyResult<WaitStrategy> {
    Ok(match name {
        "spin" => WaitStrategy::Spin,
        "spin_then_yield" => WaitStrategy::SpinThenYield,
        "park" => WaitStrategy::Park,
        "monitor" => WaitStrategy::Monitor,
        other => {
            return Err(plain(
                py,
                Kind::InvalidConfig,
                format!(
                    "wait is {other:?}: one of \"spin\", \"spin_then_yield\", \"park\", \"monitor\""
                ),
            ));
        }
    })
}

/// A strategy's Python name.
fn strategy_name(w: WaitStrategy) -> &'static str {
    match w {
        WaitStrategy::Spin => "spin",
        WaitStrategy::SpinThenYield => "spin_then_yield",
        WaitStrategy::Park => "park",
        WaitStrategy::Monitor => "monitor",
    }
}

/// A module's image: `bytes` (or any buffer), or a path to read.
fn image_of(module: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let py = module.py();
    if module.is_instance_of::<pyo3::types::PyString>()
        || module.hasattr("__fspath__").unwrap_or(false)
    {
        let os = py.import("os")?;
        let path: std::path::PathBuf = os.call_method1("fspath", (module,))?.extract()?;
        return detached(py, || std::fs::read(&path)).map_err(PyErr::from);
    }
    if module.is_instance_of::<PyInt>() {
        return Err(plain(
            py,
            Kind::InvalidConfig,
            "module: the image's bytes or a path, not an int",
        ));
    }
    Ok(bytes_of(module)?.as_slice().to_vec())
}

/// Submits `args` (`arg_size` bytes a task) as runs of `[u8; N]`.
fn submit_run<const N: usize>(
    rt: &Runtime,
    op: Op,
    args: &[u8],
    packed: bool,
) -> pkq::Result<Vec<pkq::Batch>> {
    let (tasks, _) = args.as_chunks::<N>();
    submit_parts(rt, op, tasks, packed)
}

/// Submits `args` as pkq batches of at most a ring's capacity of tasks
/// each (a run longer than a ring is refused by pkq), one after another.
fn submit_parts<A: bytemuck::Pod>(
    rt: &Runtime,
    op: Op,
    args: &[A],
    packed: bool,
) -> pkq::Result<Vec<pkq::Batch>> {
    let per = rt.capacity().max(1);
    let run = |c: &[A]| {
        if packed {
            rt.submit(Tasks::raw_packed(op, c))
        } else {
            rt.submit(Tasks::raw_batch(op, c))
        }
    };
    if args.is_empty() {
        // Still checked (op, size, a closed runtime), as pkq checks it.
        return Ok(vec![run(args)?]);
    }
    args.chunks(per).map(run).collect()
}

/// Dispatches a run of `arg_size`-byte tasks to `submit_run::<arg_size>`.
macro_rules! by_size {
    ($size:expr, $rt:expr, $op:expr, $args:expr, $packed:expr; $($n:literal)*) => {
        match $size {
            $($n => submit_run::<$n>($rt, $op, $args, $packed),)*
            _ => Err(pkq::Error::PayloadTooLarge { len: $size, max: pkq::ARGS_BYTES }),
        }
    };
}

impl PyRuntime {
    /// The runtime (always there but while it is dropped).
    #[inline]
    pub(crate) fn rt(&self, py: Python<'_>) -> PyResult<&Runtime> {
        self.rt
            .as_deref()
            .ok_or_else(|| plain(py, Kind::Closed, "the runtime is gone"))
    }

    /// Submits one task of raw argument bytes, waiting for room or not.
    #[inline]
    fn submit_one(
        &self,
        py: Python<'_>,
        op: u16,
        args: Option<&Bound<'_, PyAny>>,
        wait_for_room: bool,
    ) -> PyResult<PyTicket> {
        let rt = self.rt(py)?;
        let t = match args {
            None => submit_with(py, rt, Task::raw(Op(op), &[]), wait_for_room),
            Some(a) => {
                let a = bytes_of(a)?;
                submit_with(py, rt, Task::raw(Op(op), a.as_slice()), wait_for_room)
            }
        };
        t.py(py).map(PyTicket::new)
    }
}

/// `submit` or `try_submit`. A submit that must wait for room waits
/// without the GIL: the room comes from tickets other Python threads take,
/// and from pkq's completion thread, which takes the GIL to resolve awaits.
#[inline]
fn submit_with(
    py: Python<'_>,
    rt: &Runtime,
    task: Task<'_>,
    wait_for_room: bool,
) -> pkq::Result<pkq::Ticket> {
    match rt.try_submit(task) {
        Err(Error::Full) if wait_for_room => detached(py, || rt.submit(task)),
        r => r,
    }
}

impl Drop for PyRuntime {
    /// Drops the runtime (drain, stop, join pkq's completion thread)
    /// without the GIL: that thread may be running a callback that waits
    /// for it (an awaited ticket's).
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            Python::attach(|py| detached(py, move || drop(rt)));
        }
    }
}

#[pymethods]
impl PyRuntime {
    /// Builds the resident kernel on CUDA device `device` and starts it
    /// (without the GIL). Settings left None take pkq's defaults: `workers`
    /// worker warps, `pollers` poller warps per worker (1, 2, 4 or 8),
    /// `rings` submission rings (a power of two), `capacity` slots per ring
    /// (a power of two), `wait` how waits wait ("spin", "spin_then_yield",
    /// "park", "monitor"), `stall_after` seconds after which a silent
    /// worker is reported as `Stalled` (`math.inf`: never),
    /// `state_memory` bytes of device memory for device states (1 MiB by
    /// default; 0 for none, which a device without stream-ordered
    /// allocation needs), `io=(input_bytes, output_bytes)`
    /// IO areas per slot for `submit_io`, `module` a device module of your
    /// own (bytes or a path: fatbin, cubin or PTX) with `kernel` its kernel
    /// name. Limits (else `InvalidConfig`): `capacity` a power of two up to
    /// 2**20; `workers` a power of two up to capacity x rings and pkq's
    /// `MAX_WORKERS`; `rings` at most `workers`; each `io` area at most
    /// 65536 bytes; `stall_after` at least 0.01 s. Raises `NoDriver`,
    /// `NoDevice`, `KernelNotBuilt`, `InvalidConfig`, `InvalidModule`, ...
    /// (subclasses of `pkq.Error`); before pkq sees them, an int setting
    /// outside its type (negative, or past 2**32 for `pollers` and 2**64
    /// for the others) raises Python's `OverflowError`, and a `module` path
    /// that cannot be read the `OSError` of its reading.
    #[new]
    #[pyo3(signature = (
        device = 0, *, workers = None, pollers = None, rings = None, capacity = None,
        wait = None, stall_after = None, state_memory = None, io = None, module = None,
        kernel = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        device: usize,
        workers: Option<usize>,
        pollers: Option<u32>,
        rings: Option<usize>,
        capacity: Option<usize>,
        wait: Option<&str>,
        stall_after: Option<f64>,
        state_memory: Option<usize>,
        io: Option<(usize, usize)>,
        module: Option<&Bound<'_, PyAny>>,
        kernel: Option<&str>,
    ) -> PyResult<Self> {
        let mut b = Runtime::builder().device(device);
        if let Some(w) = workers {
            b = b.workers(w);
        }
        if let Some(p) = pollers {
            b = b.pollers(p);
        }
        if let Some(r) = rings {
            b = b.rings(r);
        }
        if let Some(c) = capacity {
            b = b.capacity(c);
        }
        if let Some(w) = wait {
            b = b.wait_strategy(strategy_of(py, w)?);
        }
        if let Some(s) = stall_after {
            b = b.stall_after(seconds_of(py, "stall_after", s)?);
        }
        if let Some(bytes) = state_memory {
            b = b.state_memory(bytes);
        }
        if let Some((input, output)) = io {
            b = b.io(input, output);
        }
        match (module, kernel) {
            (Some(m), Some(k)) => b = b.module(image_of(m)?, k),
            (None, None) => {}
            (Some(_), None) => {
                return Err(plain(
                    py,
                    Kind::InvalidConfig,
                    "module given without kernel: name the module's kernel (kernel=...)",
                ));
            }
            (None, Some(_)) => {
                return Err(plain(
                    py,
                    Kind::InvalidConfig,
                    "kernel given without module: pass the module's image or path (module=...)",
                ));
            }
        }
        let rt = Arc::new(detached(py, move || b.build()).py(py)?);
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&rt));
        }
        Ok(Self { rt: Some(rt) })
    }

    /// Submits one task of op `op` with raw argument bytes (`bytes`, any
    /// buffer, or an int as 8 little-endian bytes; at most `ARGS_BYTES`),
    /// waiting while the ring is full, and returns its `Ticket`. An op the
    /// kernel's op table lists must get its argument length (`OpMismatch`)
    /// and not dereference device addresses (`UncheckedOp`); an op it does
    /// not list is refused (`OpMismatch`) by a kernel of your own
    /// (`module=`), and sent by pkq's, whose wait then raises `TaskError`
    /// (status 1, unknown op). `op` past 65535 raises `OverflowError`;
    /// `Closed` after shutdown.
    #[pyo3(signature = (op, args = None))]
    fn submit(
        &self,
        py: Python<'_>,
        op: u16,
        args: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTicket> {
        self.submit_one(py, op, args, true)
    }

    /// `submit`, but raises `Full` at once when the ring has no room.
    #[pyo3(signature = (op, args = None))]
    fn try_submit(
        &self,
        py: Python<'_>,
        op: u16,
        args: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTicket> {
        self.submit_one(py, op, args, false)
    }

    /// Submits one IO task: `args` as `submit` takes them, `input` (bytes
    /// or any buffer, at most the runtime's input area) written into its
    /// slot's input area. Needs a runtime built with `io=(...)`
    /// (`InvalidConfig` otherwise). Take its output with
    /// `Ticket.wait_output()`.
    fn submit_io(
        &self,
        py: Python<'_>,
        op: u16,
        args: &Bound<'_, PyAny>,
        input: &Bound<'_, PyAny>,
    ) -> PyResult<PyTicket> {
        let rt = self.rt(py)?;
        let a = bytes_of(args)?;
        let i = bytes_of(input)?;
        let task = Task::raw(Op(op), a.as_slice()).with_input(i.as_slice());
        submit_with(py, rt, task, true).py(py).map(PyTicket::new)
    }

    /// Submits one task and waits for it, without the GIL: its value (an
    /// int). The fastest round trip: one call into Rust. Raises the task's
    /// `TaskError` or what ended the wait (on `Stalled` the task is left to
    /// finish unobserved: use `submit(...).wait(timeout)` to keep it).
    #[pyo3(signature = (op, args = None))]
    fn call(&self, py: Python<'_>, op: u16, args: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let rt = self.rt(py)?;
        let r = match args {
            None => detached(py, || rt.submit(Task::raw(Op(op), &[]))?.wait()),
            Some(a) => {
                let a = bytes_of(a)?;
                let a = a.as_slice();
                detached(py, || rt.submit(Task::raw(Op(op), a))?.wait())
            }
        };
        r.py(py).map(|c| c.value)
    }

    /// A `State` holding a copy of `data` (bytes or any buffer, at least one
    /// byte) in the runtime's state memory (`state_memory=`, 1 MiB by
    /// default), for ops on state; the copy is waited for here. Raises
    /// `InvalidArgument` for no bytes, `InvalidConfig` where the state
    /// memory is missing or too full.
    fn state(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<PyState> {
        self.new_state(py, data)
    }

    /// Runs one task of state op `op` (`PKQ_OP_INFO_STATE` in the module's
    /// table) on `state` with argument bytes `args` (as `submit` takes
    /// them, at most 32), waits for it without the GIL, and returns its
    /// value. Checked against the op table first (`OpMismatch`, the length
    /// compared rounded up to 8 bytes, as the device's argument struct
    /// holds it; `PayloadTooLarge` past 32; `InvalidArgument` for another
    /// runtime's state), nothing submitted. A wait that ends otherwise than
    /// with the task's result returns only once the kernel stopped: no task
    /// touches the state after this returns (a stall does not end it).
    #[pyo3(signature = (op, state, args = None))]
    fn call_on_state(
        &self,
        py: Python<'_>,
        op: u16,
        state: &PyState,
        args: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        self.step_state(py, op, state, args, None).map(|(v, _)| v)
    }

    /// `call_on_state` as an IO task (a runtime built with `io=(...)`):
    /// `input` (bytes or any buffer) in its slot's input area; returns the
    /// value and the bytes the handler wrote.
    #[pyo3(signature = (op, state, args, input))]
    fn call_on_state_io<'py>(
        &self,
        py: Python<'py>,
        op: u16,
        state: &PyState,
        args: Option<&Bound<'_, PyAny>>,
        input: &Bound<'_, PyAny>,
    ) -> PyResult<(u64, Bound<'py, pyo3::types::PyBytes>)> {
        let (value, output) = self.step_state(py, op, state, args, Some(input))?;
        Ok((
            value,
            pyo3::types::PyBytes::new(py, &output.unwrap_or_default()),
        ))
    }

    /// Submits a run of tasks of op `op`, one per `arg_size` bytes of
    /// `args` (bytes or any buffer, such as a NumPy `uint64` array for
    /// 8-byte arguments; for `arg_size=0`, `args` is the number of tasks),
    /// a slot each, or up to 32 to a slot with `packed=True` (`arg_size` at
    /// most 8). Waits for room (without the GIL); a run longer than a ring
    /// goes as several of pkq's batches, one after another (if a later one
    /// is refused, the earlier ones run on unobserved). Returns a `Batch`.
    #[pyo3(signature = (op, args, *, arg_size = 8, packed = false))]
    fn submit_batch(
        &self,
        py: Python<'_>,
        op: u16,
        args: &Bound<'_, PyAny>,
        arg_size: usize,
        packed: bool,
    ) -> PyResult<PyBatch> {
        let rt = self.rt(py)?;
        let op = Op(op);
        if arg_size == 0 {
            let n: usize = args.extract().map_err(|_| {
                plain(
                    py,
                    Kind::InvalidArgument,
                    "with arg_size=0, args is the number of tasks (an int, 0 or more)",
                )
            })?;
            let none = vec![[0u8; 0]; n];
            let parts = detached(py, || submit_parts(rt, op, &none, packed)).py(py)?;
            return Ok(PyBatch::new(parts, n));
        }
        if args.is_instance_of::<PyInt>() {
            return Err(plain(
                py,
                Kind::InvalidArgument,
                "args is a buffer of n * arg_size bytes (an int count only with arg_size=0)",
            ));
        }
        let bytes = bytes_of(args)?;
        let raw = bytes.as_slice();
        if raw.len() % arg_size != 0 {
            return Err(plain(
                py,
                Kind::InvalidArgument,
                format!(
                    "args has {} bytes: not a whole number of {arg_size}-byte tasks",
                    raw.len()
                ),
            ));
        }
        let n = raw.len() / arg_size;
        let parts = detached(py, || {
            by_size!(arg_size, rt, op, raw, packed;
                1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24
                25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48)
        })
        .py(py)?;
        Ok(PyBatch::new(parts, n))
    }

    /// Shuts down (without the GIL): refuses new tasks (`Closed`), waits for
    /// every submitted task, stops the kernel. Tickets stay valid. Later
    /// calls return the first outcome.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let rt = self.rt(py)?;
        detached(py, || rt.shutdown()).py(py)
    }

    /// Stops now (without the GIL), without running what is queued: those
    /// tasks' tickets raise `Cancelled`; tasks that completed keep their
    /// results.
    fn cancel(&self, py: Python<'_>) -> PyResult<()> {
        let rt = self.rt(py)?;
        detached(py, || rt.cancel()).py(py)
    }

    /// Probes the kernel (without the GIL): None while it serves, else
    /// raises what ended it (`DeviceFault`, `KernelStopped` after a
    /// shutdown, `Cancelled`) or `Stalled`.
    fn health(&self, py: Python<'_>) -> PyResult<()> {
        let rt = self.rt(py)?;
        detached(py, || rt.health()).py(py)
    }

    /// The CUDA device index.
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.rt(py)?.device())
    }

    /// Its kernel's worker warps.
    #[getter]
    fn workers(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.rt(py)?.workers())
    }

    /// Its submission rings.
    #[getter]
    fn rings(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.rt(py)?.rings())
    }

    /// Slots per ring.
    #[getter]
    fn capacity(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.rt(py)?.capacity())
    }

    /// How its waits wait, as they work on this machine ("monitor" without
    /// the CPU's monitor instructions reads "spin_then_yield").
    #[getter]
    fn wait_strategy(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(strategy_name(self.rt(py)?.wait_strategy()))
    }

    /// The runtime itself.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// `shutdown()`; an error of it is raised (chained to the body's, if
    /// the body raised).
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.shutdown(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &self.rt {
            Some(rt) => format!(
                "Runtime(device={}, workers={}, rings={}, capacity={})",
                rt.device(),
                rt.workers(),
                rt.rings(),
                rt.capacity()
            ),
            None => "Runtime(gone)".to_string(),
        }
    }
}

/// The argument bytes a task of `args` carries, converted as `submit`
/// converts them (`bytes` as is, an int as 8 little-endian bytes, any other
/// buffer's raw bytes); raises `PayloadTooLarge` past `ARGS_BYTES`, and
/// `InvalidArgument` for what is no bytes.
#[pyfunction]
#[pyo3(signature = (args = None))]
pub(crate) fn task_args<'py>(
    py: Python<'py>,
    args: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    let raw = match args {
        None => Vec::new(),
        Some(a) => bytes_of(a)?.as_slice().to_vec(),
    };
    if raw.len() > pkq::ARGS_BYTES {
        return Err(crate::errors::to_py(
            py,
            pkq::Error::PayloadTooLarge {
                len: raw.len(),
                max: pkq::ARGS_BYTES,
            },
        ));
    }
    Ok(pyo3::types::PyBytes::new(py, &raw))
}

/// Whether this build carries pkq's kernel (nvcc was found when it was
/// compiled).
#[pyfunction]
pub(crate) fn kernel_built() -> bool {
    pkq::kernel_image().is_ok()
}

/// How many CUDA devices the driver reports: raises `NoDriver` without a
/// driver, `NoDevice` where the driver sees no GPU (`CUDA_VISIBLE_DEVICES`
/// empty, say), `CudaError` where it cannot tell.
#[pyfunction]
pub(crate) fn device_count(py: Python<'_>) -> PyResult<usize> {
    detached(py, pkq::device_count).py(py)
}
