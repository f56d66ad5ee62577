//! Completions, tickets and batches as Python objects, and the asyncio
//! bridge: a ticket's `__await__` resolves an asyncio future from pkq's
//! completion thread (`Ticket::on_complete`) through
//! `loop.call_soon_threadsafe`.

use std::time::Duration;

use pkq::{Batch, Completion, Error, Ticket};
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyList};

use crate::args::timeout_of;
use crate::detach::detached;
use crate::errors::{IntoPy, Kind, plain, task_error, to_py};

/// A finished task's result: the handler's 8-byte value and the GPU's
/// clock (`%globaltimer`, ns) when the task started and when its handler
/// returned. Immutable.
#[pyclass(module = "pkq._pkq", name = "Completion", frozen, eq, hash)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PyCompletion {
    /// The handler's 8-byte result, as an unsigned int.
    #[pyo3(get)]
    value: u64,
    /// The GPU's clock (ns) when the task started.
    #[pyo3(get)]
    device_start_ns: u64,
    /// The GPU's clock (ns) when its handler returned.
    #[pyo3(get)]
    device_end_ns: u64,
}

impl From<Completion> for PyCompletion {
    #[inline]
    fn from(c: Completion) -> Self {
        Self {
            value: c.value,
            device_start_ns: c.device_start_ns,
            device_end_ns: c.device_end_ns,
        }
    }
}

#[pymethods]
impl PyCompletion {
    /// A completion of these fields (for tests and type checks: tasks make
    /// their own).
    #[new]
    #[pyo3(signature = (value, device_start_ns = 0, device_end_ns = 0))]
    fn new(value: u64, device_start_ns: u64, device_end_ns: u64) -> Self {
        Self {
            value,
            device_start_ns,
            device_end_ns,
        }
    }

    /// How long the handler ran on the device, in ns, by the GPU's clock.
    #[getter]
    fn device_time_ns(&self) -> u64 {
        self.device_end_ns.saturating_sub(self.device_start_ns)
    }

    fn __repr__(&self) -> String {
        format!(
            "Completion(value={}, device_start_ns={}, device_end_ns={})",
            self.value, self.device_start_ns, self.device_end_ns
        )
    }
}

/// The error a consumed ticket or batch raises.
fn consumed(py: Python<'_>, what: &str) -> PyErr {
    plain(
        py,
        Kind::TicketConsumed,
        format!(
            "this {what} was consumed: its result was taken (wait, poll or await) or it was released"
        ),
    )
}

/// Whether a wait that ended in `e` leaves the task with its ticket (a
/// timeout, a stall: it may still complete).
fn keeps_task(e: &Error) -> bool {
    matches!(e, Error::Timeout | Error::Stalled { .. })
}

/// The handle of one submitted task (`Runtime.submit`). Wait for it
/// (`wait`, `wait_output`), poll it (`poll`), or `await` it in a running
/// asyncio loop. The call that takes its result (a wait or poll that
/// returns or raises the task's own outcome, an await) consumes it, as
/// `release` does; a consumed ticket raises `TicketConsumed`. A `Timeout`
/// or `Stalled` leaves it holding the task. A ticket may outlive its
/// runtime: shutting down drains its task first. One thread at a time.
#[pyclass(module = "pkq._pkq", name = "Ticket")]
pub struct PyTicket {
    t: Option<Ticket>,
}

impl PyTicket {
    pub(crate) fn new(t: Ticket) -> Self {
        Self { t: Some(t) }
    }

    /// The ticket, unless consumed.
    fn live(&mut self, py: Python<'_>) -> PyResult<&mut Ticket> {
        self.t.as_mut().ok_or_else(|| consumed(py, "ticket"))
    }

    /// Waits up to `timeout`, without the GIL; the ticket is consumed unless
    /// the wait ended in a timeout or a stall. Returns the result and, for
    /// `with_output`, the task's output.
    fn wait_inner(
        &mut self,
        py: Python<'_>,
        timeout: Option<f64>,
        with_output: bool,
    ) -> PyResult<(Completion, Option<Vec<u8>>)> {
        let d = timeout_of(py, timeout)?;
        let t = self.live(py)?;
        let (r, out) = detached(py, || {
            let r = t.wait_timeout(d);
            let out = (with_output && r.is_ok()).then(|| t.output().unwrap_or_default().to_vec());
            (r, out)
        });
        match r {
            Err(e) if keeps_task(&e) => Err(to_py(py, e)),
            r => {
                self.t = None;
                r.py(py).map(|c| (c, out))
            }
        }
    }

    /// Takes the ticket for an await in the running loop (without one, the
    /// ticket is kept and asyncio's `RuntimeError` raised).
    fn awaiting(&mut self, py: Python<'_>, with_output: bool) -> PyResult<Awaiting> {
        let get_loop = GET_RUNNING_LOOP.import(py, "asyncio", "get_running_loop")?;
        let event_loop = get_loop.call0()?.unbind();
        let t = self.t.take().ok_or_else(|| consumed(py, "ticket"))?;
        Ok(Awaiting {
            t: Some(t),
            event_loop,
            fut: None,
            with_output,
        })
    }
}

/// How long an awaited ticket is polled, without the GIL and without
/// yielding to the loop, before its future is handed to pkq's completion
/// thread: a task done by then (a round trip takes a few µs) costs no
/// thread hand-off and no wake-up of the loop.
const AWAIT_SPIN: Duration = Duration::from_micros(20);

/// An `await` of a ticket: its first step polls the task for up to
/// [`AWAIT_SPIN`]; a task not done by then gets a future of the loop,
/// resolved from pkq's completion thread through
/// `loop.call_soon_threadsafe`, which the step yields to the loop (as an
/// asyncio future's own `__await__` does).
#[pyclass(module = "pkq._pkq", name = "_Awaiting")]
pub struct Awaiting {
    t: Option<Ticket>,
    event_loop: Py<PyAny>,
    fut: Option<Py<PyAny>>,
    with_output: bool,
}

impl Awaiting {
    /// The value an await returns: the completion, or `(completion,
    /// output)` for `wait_output_async`.
    fn value<'py>(
        &self,
        py: Python<'py>,
        c: Completion,
        t: &Ticket,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Bound::new(py, PyCompletion::from(c))?;
        if self.with_output {
            let out = PyBytes::new(py, t.output().unwrap_or_default());
            Ok((c, out).into_pyobject(py)?.into_any())
        } else {
            Ok(c.into_any())
        }
    }
}

/// Ends an await with `value`.
fn done(value: Bound<'_, PyAny>) -> PyErr {
    // One argument: a tuple value stays whole (StopIteration(*args)).
    PyStopIteration::new_err((value.unbind(),))
}

#[pymethods]
impl Awaiting {
    /// Itself: it is its own iterator.
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Itself.
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// One step of the await: its value (as `StopIteration`), or the future
    /// to wait on.
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(fut) = self.fut.take() {
            let f = fut.bind(py);
            if !f.call_method0("done")?.is_truthy()? {
                // Stepped before the future is done (not by asyncio's
                // task): it is still what to wait on.
                let f = f.clone();
                self.fut = Some(fut);
                return Ok(f);
            }
            // Resumed once the future is done: its result, or its error;
            // the await is over (a second one raises `TicketConsumed`, as
            // for a task that was done within the first poll).
            let r = f.call_method0("result")?;
            return Err(done(r));
        }
        let mut t = self.t.take().ok_or_else(|| consumed(py, "ticket"))?;
        let polled = detached(py, || {
            let until = std::time::Instant::now() + AWAIT_SPIN;
            loop {
                match t.try_result() {
                    Ok(None) if std::time::Instant::now() < until => std::hint::spin_loop(),
                    other => break other,
                }
            }
        });
        match polled {
            Ok(Some(c)) => return Err(done(self.value(py, c, &t)?)),
            Err(e) => return Err(to_py(py, e)),
            Ok(None) => {}
        }
        let event_loop = self.event_loop.bind(py);
        let fut = event_loop.call_method0("create_future")?;
        let target = Target {
            event_loop: self.event_loop.clone_ref(py),
            fut: fut.clone().unbind(),
        };
        // Without the GIL: where no completion thread can take the callback
        // (the runtime was dropped), pkq runs it here, once the task is done.
        let with_output = self.with_output;
        detached(py, move || {
            if with_output {
                t.on_output(move |r| target.deliver(r.map(|(c, out)| (c, Some(out)))));
            } else {
                t.on_complete(move |r| target.deliver(r.map(|c| (c, None))));
            }
        });
        // What a future's own `__await__` does before it yields itself: the
        // asyncio task then waits for it.
        fut.setattr("_asyncio_future_blocking", true)?;
        self.fut = Some(fut.clone().unbind());
        Ok(fut)
    }
}

/// `asyncio.get_running_loop`, looked up once.
static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
/// This module's `_resolve`, made once.
static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Sets the result or exception of an asyncio future unless it is done
/// already (cancelled): what `call_soon_threadsafe` runs in the loop's
/// thread for a ticket's `__await__`.
#[pyfunction]
#[pyo3(name = "_resolve")]
pub(crate) fn resolve(fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if fut.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    if ok {
        fut.call_method1("set_result", (value,))?;
    } else {
        fut.call_method1("set_exception", (value,))?;
    }
    Ok(())
}

/// An awaited ticket's loop and future.
struct Target {
    event_loop: Py<PyAny>,
    fut: Py<PyAny>,
}

impl Target {
    /// Hands `r` to the future, through the loop (on pkq's completion
    /// thread, or the awaiting thread where pkq runs the callback there).
    /// A loop that is closed by now gets nothing, nor one whose interpreter
    /// is finalized (`try_attach`; a thread that asks for the GIL as
    /// finalization begins is a case `detach.rs` leaves open).
    fn deliver(self, r: pkq::Result<(Completion, Option<Vec<u8>>)>) {
        Python::try_attach(move |py| {
            let made = (|| -> PyResult<(bool, Bound<'_, PyAny>)> {
                Ok(match r {
                    Ok((c, None)) => (true, Bound::new(py, PyCompletion::from(c))?.into_any()),
                    Ok((c, Some(out))) => (
                        true,
                        (
                            Bound::new(py, PyCompletion::from(c))?,
                            PyBytes::new(py, &out),
                        )
                            .into_pyobject(py)?
                            .into_any(),
                    ),
                    Err(e) => (false, to_py(py, e).into_value(py).into_bound(py).into_any()),
                })
            })();
            let (ok, value) = match made {
                Ok(v) => v,
                Err(e) => (false, e.into_value(py).into_bound(py).into_any()),
            };
            let resolve = RESOLVE.get_or_try_init(py, || {
                wrap_pyfunction!(resolve, py).map(|f| f.into_any().unbind())
            });
            if let Ok(resolve) = resolve {
                // A closed loop refuses (RuntimeError): nobody awaits any more.
                let _ = self.event_loop.bind(py).call_method1(
                    "call_soon_threadsafe",
                    (resolve.bind(py), self.fut.bind(py), ok, value),
                );
            }
            drop(self);
        });
    }
}

#[pymethods]
impl PyTicket {
    /// Waits for the task (without the GIL) and returns its `Completion`,
    /// consuming the ticket. `timeout` in seconds (None: no limit; 0: look
    /// once). Raises `Timeout` or `Stalled` with the ticket kept; the task's
    /// `TaskError`, or what ended the runtime (`DeviceFault`, `Cancelled`,
    /// `KernelStopped`), with the ticket consumed.
    #[pyo3(signature = (timeout = None))]
    fn wait(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<PyCompletion> {
        self.wait_inner(py, timeout, false).map(|(c, _)| c.into())
    }

    /// `wait` for an IO task (`Runtime.submit_io`): `(Completion, bytes)`,
    /// the bytes its handler wrote (empty for a task that wrote none).
    #[pyo3(signature = (timeout = None))]
    fn wait_output<'py>(
        &mut self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<(PyCompletion, Bound<'py, PyBytes>)> {
        let (c, out) = self.wait_inner(py, timeout, true)?;
        Ok((
            c.into(),
            PyBytes::new(py, out.as_deref().unwrap_or_default()),
        ))
    }

    /// Looks once without waiting: `None` while the task runs (the ticket
    /// kept); else its `Completion`, or its error raised, the ticket
    /// consumed. A poll learns of a dead kernel but not of a stalled worker
    /// (`wait` reports that). An IO task's output: `wait_output(0)`.
    fn poll(&mut self, py: Python<'_>) -> PyResult<Option<PyCompletion>> {
        let r = self.live(py)?.try_result();
        match r {
            Ok(None) => Ok(None),
            r => {
                self.t = None;
                r.py(py).map(|c| c.map(Into::into))
            }
        }
    }

    /// Lets go of the task without its result (it runs on unobserved); the
    /// ticket is consumed. A consumed ticket is left as it is.
    fn release(&mut self) {
        self.t = None;
    }

    /// Whether the ticket was consumed (its result taken, or released).
    #[getter]
    fn consumed(&self) -> bool {
        self.t.is_none()
    }

    /// The task's op code (None once consumed).
    #[getter]
    fn op(&self) -> Option<u16> {
        self.t.as_ref().map(|t| t.op().0)
    }

    /// The task's sequence number in its ring (None once consumed).
    #[getter]
    fn seq(&self) -> Option<u64> {
        self.t.as_ref().map(Ticket::seq)
    }

    /// `await ticket` in a running asyncio loop: the task's `Completion`
    /// (or its error raised). The await first polls the task for up to 20
    /// µs without yielding to the loop (a round trip takes a few); a task
    /// not done by then is delivered from pkq's completion thread with
    /// `loop.call_soon_threadsafe`. Consumes the ticket at once (raises
    /// `TicketConsumed` for a consumed one; without a running loop the
    /// ticket is kept and `RuntimeError` raised). Cancelling the awaiting
    /// task leaves the task to run on unobserved.
    fn __await__(&mut self, py: Python<'_>) -> PyResult<Awaiting> {
        self.awaiting(py, false)
    }

    /// `await ticket.wait_output_async()`: as `__await__`, for an IO task:
    /// `(Completion, bytes)`. Returns an awaitable; call it in a running
    /// loop (else `RuntimeError`, the ticket kept), and await it once (a
    /// second await raises `TicketConsumed`).
    fn wait_output_async(&mut self, py: Python<'_>) -> PyResult<Awaiting> {
        self.awaiting(py, true)
    }

    fn __repr__(&self) -> String {
        match &self.t {
            Some(t) => format!("Ticket(op={}, seq={})", t.op().0, t.seq()),
            None => "Ticket(consumed)".to_string(),
        }
    }
}

/// NumPy's `frombuffer` and `uint64`, if NumPy imports (looked up once).
static NUMPY: PyOnceLock<Option<(Py<PyAny>, Py<PyAny>)>> = PyOnceLock::new();

/// `values` as a NumPy `uint64` array (writable) where NumPy imports and
/// `as_list` is false, else as a list of ints.
pub(crate) fn values_out<'py>(
    py: Python<'py>,
    values: &[u64],
    as_list: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let numpy = NUMPY.get_or_init(py, || {
        let np = py.import("numpy").ok()?;
        let frombuffer = np.getattr("frombuffer").ok()?.unbind();
        let uint64 = np.getattr("uint64").ok()?.unbind();
        Some((frombuffer, uint64))
    });
    match numpy {
        Some((frombuffer, uint64)) if !as_list => {
            let mut raw = Vec::with_capacity(values.len() * 8);
            for v in values {
                raw.extend_from_slice(&v.to_ne_bytes());
            }
            let buf = PyByteArray::new(py, &raw);
            frombuffer.bind(py).call1((buf, uint64.bind(py)))
        }
        _ => Ok(PyList::new(py, values)?.into_any()),
    }
}

/// The handle of a run of tasks of one op (`Runtime.submit_batch`), in
/// submission order. Wait for them together (`wait`) or poll how many are
/// done (`poll`). A run longer than a ring is submitted as several of pkq's
/// batches, one after another (each waits for room); this handle holds
/// them all. `wait` consumes it once it returns or raises the tasks'
/// outcome; `Timeout` and `Stalled` keep it. One thread at a time.
#[pyclass(module = "pkq._pkq", name = "Batch")]
pub struct PyBatch {
    parts: Option<Vec<Batch>>,
    n: usize,
}

impl PyBatch {
    pub(crate) fn new(parts: Vec<Batch>, n: usize) -> Self {
        Self {
            parts: Some(parts),
            n,
        }
    }
}

/// What a batch's wait came to: every value, or the first failed task.
enum Reaped {
    Values(Vec<u64>),
    Failed(usize, pkq::TaskError),
}

#[pymethods]
impl PyBatch {
    /// Waits for every task (without the GIL) and returns their values in
    /// submission order: a NumPy `uint64` array where NumPy imports (unless
    /// `as_list`), else a list of ints. Raises the first failed task's
    /// `TaskError` (its `.index` the task's position), consuming the batch
    /// (the other tasks' results are dropped); `Timeout` (`timeout` in
    /// seconds, None for no limit) or `Stalled` keep the batch to wait on
    /// again; what ended the runtime consumes it.
    #[pyo3(signature = (timeout = None, *, as_list = false))]
    fn wait<'py>(
        &mut self,
        py: Python<'py>,
        timeout: Option<f64>,
        as_list: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let d = timeout_of(py, timeout)?;
        let parts = self.parts.as_mut().ok_or_else(|| consumed(py, "batch"))?;
        let n = self.n;
        let r = detached(py, || -> pkq::Result<Reaped> {
            let deadline = std::time::Instant::now().checked_add(d);
            let mut values = Vec::with_capacity(n);
            let mut failed = None;
            for part in parts.iter_mut() {
                let left = match deadline {
                    Some(at) => at.saturating_duration_since(std::time::Instant::now()),
                    None => Duration::MAX,
                };
                for r in part.wait_timeout(left)? {
                    match r {
                        Ok(c) => values.push(c.value),
                        Err(e) => {
                            failed.get_or_insert((values.len(), e));
                            values.push(0);
                        }
                    }
                }
            }
            Ok(match failed {
                Some((i, e)) => Reaped::Failed(i, e),
                None => Reaped::Values(values),
            })
        });
        match r {
            Err(e) if keeps_task(&e) => Err(to_py(py, e)),
            r => {
                self.parts = None;
                match r.py(py)? {
                    Reaped::Values(v) => values_out(py, &v, as_list),
                    Reaped::Failed(i, e) => Err(task_error(py, e, Some(i))),
                }
            }
        }
    }

    /// How many of its tasks are done so far (taking what arrived); never
    /// blocks. Raises what ended the runtime before they completed.
    fn poll(&mut self, py: Python<'_>) -> PyResult<usize> {
        let parts = self.parts.as_mut().ok_or_else(|| consumed(py, "batch"))?;
        let mut done = 0;
        for p in parts.iter_mut() {
            done += p.poll().py(py)?;
        }
        Ok(done)
    }

    /// Lets go of the tasks without their results (they run on
    /// unobserved); the batch is consumed.
    fn release(&mut self) {
        self.parts = None;
    }

    /// Whether the batch was consumed.
    #[getter]
    fn consumed(&self) -> bool {
        self.parts.is_none()
    }

    /// The number of tasks.
    fn __len__(&self) -> usize {
        self.n
    }

    fn __repr__(&self) -> String {
        format!(
            "Batch(len={}{})",
            self.n,
            if self.parts.is_none() {
                ", consumed"
            } else {
                ""
            }
        )
    }
}
