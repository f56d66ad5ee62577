//! Device states as Python objects: bytes kept in a runtime's state memory
//! on the device, read and written by the host, stepped by the tasks of
//! the module's state ops ([`pkq::DeviceState`], [`pkq::Lane::call_on_state_raw`]).

use std::sync::Mutex;

use pkq::{DeviceState, Op};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::args::bytes_of;
use crate::detach::detached;
use crate::errors::IntoPy;
use crate::runtime::PyRuntime;

/// Bytes of device memory kept between tasks, made by `Runtime.state(data)`
/// (a copy of `data`), for the ops on state of a module of your own
/// (`PKQ_OP_INFO_STATE`): `Runtime.call_on_state` hands a task the state's
/// address and length, and only pkq touches the memory, so a call checks
/// no buffer and waits for no stream. `read()` and `write()` copy it out
/// and in; `len()` is its size in bytes. It may outlive its runtime (its
/// memory is freed with the last of them). One call at a time uses it: a
/// second thread's call waits for the first's.
#[pyclass(module = "pkq._pkq", name = "State", frozen)]
pub struct PyState {
    state: Mutex<DeviceState<u8>>,
    len: usize,
}

impl PyState {
    /// `f` on the state, without the GIL (a call may wait for another
    /// thread's, which waits for a task).
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut DeviceState<u8>) -> pkq::Result<T> + Send,
    ) -> PyResult<T> {
        detached(py, || match self.state.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        })
        .py(py)
    }
}

#[pymethods]
impl PyState {
    /// The state's bytes, copied from the device (the copy waited for).
    fn read<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.with(py, |s| s.read())?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Copies `data` (bytes or any buffer, exactly `len(state)` bytes, else
    /// `InvalidArgument`) into the state, and waits for the copy.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = bytes_of(data)?;
        let data = data.as_slice();
        self.with(py, |s| s.write(data))
    }

    fn __len__(&self) -> usize {
        self.len
    }
}

/// A runtime's calls on states, defined here beside the state.
impl PyRuntime {
    pub(crate) fn new_state(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<PyState> {
        let rt = self.rt(py)?;
        let data = bytes_of(data)?;
        let data = data.as_slice();
        let state = detached(py, || rt.state(data)).py(py)?;
        Ok(PyState {
            len: data.len(),
            state: Mutex::new(state),
        })
    }

    pub(crate) fn step_state(
        &self,
        py: Python<'_>,
        op: u16,
        state: &PyState,
        args: Option<&Bound<'_, PyAny>>,
        input: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u64, Option<Vec<u8>>)> {
        let rt = self.rt(py)?;
        let args = args.map(bytes_of).transpose()?;
        let args = args.as_ref().map_or(&[][..], |a| a.as_slice());
        let input = input.map(bytes_of).transpose()?;
        match &input {
            None => state
                .with(py, |s| rt.call_on_state_raw(Op(op), s, args))
                .map(|c| (c.value, None)),
            Some(input) => {
                let input = input.as_slice();
                state
                    .with(py, |s| rt.call_on_state_raw_io(Op(op), s, args, input))
                    .map(|(c, out)| (c.value, Some(out)))
            }
        }
    }
}
