//! pkq's errors as Python exceptions: a base `pkq.Error(Exception)` and one
//! subclass per variant of `pkq::Error`, made once when the module is
//! imported (some have a built-in class as a second base: `Timeout` is a
//! `TimeoutError`, the argument errors are `ValueError`s).

use pyo3::exceptions::{PyException, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// One exception class: its name, its docstring, and the built-in class it
/// also derives from, if any.
struct Class {
    name: &'static str,
    doc: &'static str,
    also: Also,
}

/// A built-in exception a class derives from besides `pkq.Error`.
#[derive(Clone, Copy)]
enum Also {
    Nothing,
    Value,
    Timeout,
}

/// Indices into [`CLASSES`] (and the classes made from it), by name.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Base = 0,
    NoDriver,
    NoDevice,
    DeviceOutOfRange,
    UnsupportedDevice,
    PartitionUnsupported,
    NotServing,
    NoServingDevice,
    KernelNotBuilt,
    InvalidModule,
    OpMismatch,
    KernelMissing,
    InvalidConfig,
    PayloadTooLarge,
    InvalidArgument,
    UncheckedOp,
    Full,
    Closed,
    RingHeld,
    Timeout,
    TaskError,
    DeviceFault,
    Stalled,
    Cancelled,
    KernelStopped,
    KernelTimeout,
    CudaError,
    TicketConsumed,
}

/// Every exception class, in [`Kind`]'s order; `Error` first, the base of
/// the others.
const CLASSES: [Class; 28] = [
    Class {
        name: "Error",
        doc: "Base class of every pkq error. An error pkq's Rust API adds in a later version, which this package does not name yet, is raised as this class itself.",
        also: Also::Nothing,
    },
    Class {
        name: "NoDriver",
        doc: "The CUDA driver library (libcuda.so.1) could not be loaded.",
        also: Also::Nothing,
    },
    Class {
        name: "NoDevice",
        doc: "The CUDA driver loaded but reports no usable GPU.",
        also: Also::Nothing,
    },
    Class {
        name: "DeviceOutOfRange",
        doc: "The device index is not below the number of devices (.index, .count).",
        also: Also::Value,
    },
    Class {
        name: "UnsupportedDevice",
        doc: "The device cannot run pkq: compute capability below 8.0, no mapped host memory, or a driver older than CUDA 12.4.",
        also: Also::Nothing,
    },
    Class {
        name: "PartitionUnsupported",
        doc: "SM partitions are not available on this device or driver.",
        also: Also::Nothing,
    },
    Class {
        name: "NotServing",
        doc: "A device of a pool no longer serves.",
        also: Also::Nothing,
    },
    Class {
        name: "NoServingDevice",
        doc: "No device of a pool serves any more.",
        also: Also::Nothing,
    },
    Class {
        name: "KernelNotBuilt",
        doc: "pkq was compiled without nvcc, so this wheel carries no kernel: rebuild it with NVCC set (or pass a module of your own).",
        also: Also::Nothing,
    },
    Class {
        name: "InvalidModule",
        doc: "The module given to Runtime(module=...) could not serve: the driver refused the image, or its kernel does not take pkq's parameters.",
        also: Also::Nothing,
    },
    Class {
        name: "OpMismatch",
        doc: "A task's op and argument bytes and the kernel's op table disagree (.op_name, .code, .why).",
        also: Also::Value,
    },
    Class {
        name: "KernelMissing",
        doc: "The module has no kernel of the name given.",
        also: Also::Nothing,
    },
    Class {
        name: "InvalidConfig",
        doc: "A runtime setting is out of range, or the runtime lacks what a call needs (IO areas for an IO task, ...).",
        also: Also::Value,
    },
    Class {
        name: "PayloadTooLarge",
        doc: "Argument or input bytes do not fit where they go (.len, .max).",
        also: Also::Value,
    },
    Class {
        name: "InvalidArgument",
        doc: "An argument is out of range (a batch's buffer not a whole number of tasks, a negative timeout, ...).",
        also: Also::Value,
    },
    Class {
        name: "UncheckedOp",
        doc: "The op dereferences device pointers or faults the device: this package submits no such task.",
        also: Also::Value,
    },
    Class {
        name: "Full",
        doc: "try_submit found no room in the submission ring.",
        also: Also::Nothing,
    },
    Class {
        name: "Closed",
        doc: "The runtime is shut down (or shutting down): no new tasks.",
        also: Also::Nothing,
    },
    Class {
        name: "RingHeld",
        doc: "An exclusive producer holds the ring.",
        also: Also::Nothing,
    },
    Class {
        name: "Timeout",
        doc: "A wait ran past its timeout; the ticket (or batch) still holds its task: wait again, poll, or release it. Also a TimeoutError.",
        also: Also::Timeout,
    },
    Class {
        name: "TaskError",
        doc: "The device ran the task and its handler reported a failure: .status (1 unknown op, 2 bad arguments, 3 stopped, 16 and up a module's own), .status_name, .op (the op code) and .index (the task's position in its batch; None for a single task).",
        also: Also::Nothing,
    },
    Class {
        name: "DeviceFault",
        doc: "The kernel faulted (a trap, an illegal address, ...) or none of its pollers moved within the stall bound. The CUDA context keeps the error for the rest of the process.",
        also: Also::Nothing,
    },
    Class {
        name: "Stalled",
        doc: "The task's worker has not polled for longer than the stall bound (.worker, .silent in seconds). The ticket keeps its task: a later wait may still see it complete.",
        also: Also::Nothing,
    },
    Class {
        name: "Cancelled",
        doc: "Runtime.cancel() stopped the kernel before the task ran.",
        also: Also::Nothing,
    },
    Class {
        name: "KernelStopped",
        doc: "The resident kernel is no longer serving tasks (after a shutdown, this is what health() reports).",
        also: Also::Nothing,
    },
    Class {
        name: "KernelTimeout",
        doc: "The resident kernel did not start, or did not exit, in time.",
        also: Also::Nothing,
    },
    Class {
        name: "CudaError",
        doc: "A CUDA driver call failed.",
        also: Also::Nothing,
    },
    Class {
        name: "TicketConsumed",
        doc: "The ticket (or batch) was consumed already: its result was taken by wait, poll or await, or it was released. Not a pkq::Error of the Rust API: this package's own.",
        also: Also::Nothing,
    },
];

/// The classes made from [`CLASSES`], once per process.
static MADE: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// Makes every class (once) and returns them in [`Kind`]'s order.
fn classes(py: Python<'_>) -> PyResult<&Vec<Py<PyType>>> {
    MADE.get_or_try_init(py, || {
        let mut made: Vec<Py<PyType>> = Vec::with_capacity(CLASSES.len());
        let type_of = py.get_type::<PyType>();
        for c in &CLASSES {
            let mut bases = Vec::new();
            if let Some(base) = made.first() {
                bases.push(base.bind(py).clone());
            } else {
                bases.push(py.get_type::<PyException>());
            }
            match c.also {
                Also::Nothing => {}
                Also::Value => bases.push(py.get_type::<PyValueError>()),
                Also::Timeout => bases.push(py.get_type::<PyTimeoutError>()),
            }
            let dict = PyDict::new(py);
            dict.set_item("__module__", "pkq")?;
            dict.set_item("__doc__", c.doc)?;
            let class = type_of.call1((c.name, PyTuple::new(py, bases)?, dict))?;
            made.push(class.cast_into::<PyType>()?.unbind());
        }
        Ok(made)
    })
}

/// Adds every class to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for (class, c) in classes(m.py())?.iter().zip(CLASSES.iter()) {
        m.add(c.name, class.bind(m.py()))?;
    }
    Ok(())
}

/// An exception of class `kind` with message `msg`, the attributes `attrs`
/// set on it.
pub(crate) fn raise(
    py: Python<'_>,
    kind: Kind,
    msg: String,
    attrs: &[(&str, Bound<'_, PyAny>)],
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let class = classes(py)?[kind as usize].bind(py);
        let e = class.call1((msg.clone(),))?;
        for (name, value) in attrs {
            e.setattr(*name, value)?;
        }
        Ok(PyErr::from_value(e))
    })();
    // Making the exception failed (no memory, ...): that error goes up.
    made.unwrap_or_else(|e| e)
}

/// A plain exception of class `kind`.
pub(crate) fn plain(py: Python<'_>, kind: Kind, msg: impl Into<String>) -> PyErr {
    raise(py, kind, msg.into(), &[])
}

/// The number a task status has on the device (`pkq_ffi`'s numbering: 1
/// unknown op, 2 bad arguments, 3 stopped, a module's own as is; -1 for one
/// this version of pkq cannot name).
fn status_code(status: pkq::TaskStatus) -> i64 {
    match status {
        pkq::TaskStatus::UnknownOp => 1,
        pkq::TaskStatus::BadArgs => 2,
        pkq::TaskStatus::Stopped => 3,
        pkq::TaskStatus::Other(code) => code.into(),
        _ => -1,
    }
}

/// A failed task as `pkq.TaskError`, with `.index` its position where it is
/// a batch's (None for a single task's).
pub(crate) fn task_error(py: Python<'_>, t: pkq::TaskError, index: Option<usize>) -> PyErr {
    let mut msg = t.to_string();
    if let Some(i) = index {
        msg = format!("task {i} of the batch: {msg}");
    }
    let mut attrs = vec![
        (
            "status",
            status_code(t.status)
                .into_pyobject(py)
                .map(|o| o.into_any()),
        ),
        (
            "status_name",
            t.status.to_string().into_pyobject(py).map(|o| o.into_any()),
        ),
        ("op", t.op.0.into_pyobject(py).map(|o| o.into_any())),
    ];
    attrs.push(("index", index.into_pyobject(py).map(|o| o.into_any())));
    let attrs: Vec<(&str, Bound<'_, PyAny>)> = attrs
        .into_iter()
        .filter_map(|(k, v)| v.ok().map(|v| (k, v)))
        .collect();
    raise(py, Kind::TaskError, msg, &attrs)
}

/// `e` as its exception.
pub(crate) fn to_py(py: Python<'_>, e: pkq::Error) -> PyErr {
    use pkq::Error as E;
    let msg = e.to_string();
    // Attribute values: ints and strings only, whose conversion cannot fail.
    let int = |v: u64| -> Bound<'_, PyAny> {
        v.into_pyobject(py)
            .map(|o| o.into_any())
            .unwrap_or_else(|e| match e {})
    };
    let s = |v: &str| -> Bound<'_, PyAny> { pyo3::types::PyString::new(py, v).into_any() };
    let float = |v: f64| -> Bound<'_, PyAny> { pyo3::types::PyFloat::new(py, v).into_any() };
    let (kind, attrs): (Kind, Vec<(&str, Bound<'_, PyAny>)>) = match &e {
        E::NoDriver(_) => (Kind::NoDriver, vec![]),
        E::NoDevice(_) => (Kind::NoDevice, vec![]),
        E::DeviceOutOfRange { index, count } => (
            Kind::DeviceOutOfRange,
            vec![("index", int(*index as u64)), ("count", int(*count as u64))],
        ),
        E::UnsupportedDevice { index, name, why } => (
            Kind::UnsupportedDevice,
            vec![
                ("index", int(*index as u64)),
                ("name", s(name)),
                ("why", s(why)),
            ],
        ),
        E::PartitionUnsupported(_) => (Kind::PartitionUnsupported, vec![]),
        E::NotServing(d) => (Kind::NotServing, vec![("device", int(*d as u64))]),
        E::NoServingDevice => (Kind::NoServingDevice, vec![]),
        E::KernelNotBuilt(_) => (Kind::KernelNotBuilt, vec![]),
        E::InvalidModule(_) => (Kind::InvalidModule, vec![]),
        E::OpMismatch { op, code, why } => (
            Kind::OpMismatch,
            vec![
                ("op_name", s(op)),
                ("code", int((*code).into())),
                ("why", s(why)),
            ],
        ),
        E::KernelMissing(name) => (Kind::KernelMissing, vec![("kernel", s(name))]),
        E::InvalidConfig(_) => (Kind::InvalidConfig, vec![]),
        E::PayloadTooLarge { len, max } => (
            Kind::PayloadTooLarge,
            vec![("len", int(*len as u64)), ("max", int(*max as u64))],
        ),
        E::InvalidArgument(_) => (Kind::InvalidArgument, vec![]),
        E::UncheckedOp(op) => (Kind::UncheckedOp, vec![("op", int(op.0.into()))]),
        E::Full => (Kind::Full, vec![]),
        E::Closed => (Kind::Closed, vec![]),
        E::RingHeld => (Kind::RingHeld, vec![]),
        E::Timeout => (Kind::Timeout, vec![]),
        E::Task(t) => return task_error(py, *t, None),
        E::DeviceFault(_) => (Kind::DeviceFault, vec![]),
        E::Stalled { worker, silent } => (
            Kind::Stalled,
            vec![
                ("worker", int(*worker as u64)),
                ("silent", float(silent.as_secs_f64())),
            ],
        ),
        E::Cancelled => (Kind::Cancelled, vec![]),
        E::KernelStopped(_) => (Kind::KernelStopped, vec![]),
        E::KernelTimeout(_) => (Kind::KernelTimeout, vec![]),
        E::Cuda(_) => (Kind::CudaError, vec![]),
        // A variant a later pkq adds: the base class, its message kept.
        _ => (Kind::Base, vec![]),
    };
    raise(py, kind, msg, &attrs)
}

/// `pkq::Result` into `PyResult`, the error made into its exception.
pub(crate) trait IntoPy<T> {
    /// The result, its error as its exception.
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for pkq::Result<T> {
    #[inline]
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}
