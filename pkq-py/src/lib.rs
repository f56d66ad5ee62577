//! pkq's Python package, `pkq._pkq`: the extension module behind
//! `import pkq` (the Python half lives in `python/pkq`).
//!
//! It wraps pkq's public Rust API: [`pkq::Runtime`] built from keyword
//! settings, tasks of raw argument bytes ([`pkq::Task::raw`],
//! [`pkq::Tasks::raw_batch`], [`pkq::Tasks::raw_packed`]), their
//! [`pkq::Ticket`]s and [`pkq::Batch`]es, device states
//! ([`pkq::DeviceState`] of bytes, stepped by
//! [`pkq::Lane::call_on_state_raw`]), and every [`pkq::Error`] as an
//! exception class. Every call that may wait (waits, submits of runs,
//! builds, shutdown, cancel, a runtime's drop) releases the GIL: pkq's
//! completion thread takes it to resolve awaited tickets, and a runtime's
//! drop waits for that thread.

mod args;
mod detach;
mod errors;
mod runtime;
mod state;
mod tasks;

use pyo3::prelude::*;

/// pkq's resident CUDA kernel from Python (the extension module; import
/// `pkq`).
#[pymodule]
fn _pkq(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<runtime::PyRuntime>()?;
    m.add_class::<state::PyState>()?;
    m.add_class::<tasks::PyTicket>()?;
    m.add_class::<tasks::Awaiting>()?;
    m.add_class::<tasks::PyBatch>()?;
    m.add_class::<tasks::PyCompletion>()?;
    errors::register(m)?;
    m.add_function(wrap_pyfunction!(runtime::kernel_built, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::task_args, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::shutdown_all, m)?)?;
    m.add_function(wrap_pyfunction!(tasks::resolve, m)?)?;
    m.add("NOP", pkq::builtin::NOP.op().0)?;
    m.add("ECHO", pkq::builtin::ECHO.op().0)?;
    m.add("SPIN", pkq::builtin::SPIN.op().0)?;
    m.add("COPY_IO", pkq::builtin::COPY_IO.op().0)?;
    m.add("ARGS_BYTES", pkq::ARGS_BYTES)?;
    m.add("SPIN_MAX_NS", pkq::builtin::SPIN_MAX_NS)?;
    m.add("FIRST_USER_OP", pkq::Op::FIRST_USER.0)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
