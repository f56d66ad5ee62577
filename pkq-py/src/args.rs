//! What Python hands in: argument bytes (bytes, any buffer, or an int),
//! timeouts, and op codes.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt};

use crate::errors::{Kind, plain};

/// A task's argument bytes as handed in: borrowed from a `bytes` object
/// (no copy), an int's 8 little-endian bytes, or a copy of another buffer's
/// bytes.
pub(crate) enum Bytes<'py> {
    /// A `bytes` object, read in place.
    Borrowed(Bound<'py, PyBytes>),
    /// An int's 8 bytes, little-endian.
    Word([u8; 8]),
    /// A copy of another buffer's bytes (bytearray, memoryview, array,
    /// a NumPy array or scalar: its raw bytes in C order).
    Copied(Bound<'py, PyBytes>),
}

impl Bytes<'_> {
    /// The bytes.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Self::Borrowed(b) | Self::Copied(b) => b.as_bytes(),
            Self::Word(w) => w,
        }
    }
}

/// `obj` as argument bytes: `bytes` as is, an int as its 8 little-endian
/// bytes (0 to 2**64 - 1, or a negative int down to -2**63 in two's
/// complement), anything else through the buffer protocol (a copy of its
/// bytes in C order, as `memoryview(obj).tobytes()`: a NumPy scalar or
/// 0-d array is its dtype's bytes, `np.uint64(3)` the same 8 bytes as
/// `3`). `None` is no bytes.
#[inline]
pub(crate) fn bytes_of<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bytes<'py>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Bytes::Borrowed(b.clone()));
    }
    if obj.is_instance_of::<PyInt>() {
        return word_of(obj).map(|w| Bytes::Word(w.to_le_bytes()));
    }
    let py = obj.py();
    if obj.is_none() {
        return Ok(Bytes::Copied(PyBytes::new(py, &[])));
    }
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(plain(
            py,
            Kind::InvalidArgument,
            "argument bytes: a str is not bytes (encode it first)",
        ));
    }
    // The buffer protocol, not `bytes(obj)`: that takes an object with
    // `__index__` (a NumPy integer) for a count of zero bytes.
    let copy = pyo3::types::PyMemoryView::from(obj).and_then(|m| m.call_method0("tobytes"));
    match copy {
        Ok(b) => Ok(Bytes::Copied(b.cast_into::<PyBytes>()?)),
        Err(e) => Err(plain(
            py,
            Kind::InvalidArgument,
            format!(
                "argument bytes: expected bytes, a buffer or an int, got {} ({e})",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ),
        )),
    }
}

/// An int as a 64-bit word: unsigned, or a negative one in two's complement.
fn word_of(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(w) = obj.extract::<u64>() {
        return Ok(w);
    }
    match obj.extract::<i64>() {
        Ok(w) => Ok(w as u64),
        Err(_) => Err(plain(
            obj.py(),
            Kind::InvalidArgument,
            "an int argument must fit 64 bits (-2**63 to 2**64 - 1)",
        )),
    }
}

/// A timeout in seconds (`None`: no limit) as a duration; `Duration::MAX`
/// waits without a deadline.
pub(crate) fn timeout_of(py: Python<'_>, timeout: Option<f64>) -> PyResult<Duration> {
    match timeout {
        None => Ok(Duration::MAX),
        Some(s) if s.is_nan() || s < 0.0 => Err(plain(
            py,
            Kind::InvalidArgument,
            format!("timeout is {s}: seconds, 0 or more (or None for no limit)"),
        )),
        Some(s) => Ok(Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)),
    }
}

/// A count of seconds as a duration, for settings (`stall_after`):
/// positive; infinity, or more seconds than a duration holds, is no bound
/// (`Duration::MAX`).
pub(crate) fn seconds_of(py: Python<'_>, what: &str, s: f64) -> PyResult<Duration> {
    if s.is_nan() || s <= 0.0 {
        return Err(plain(
            py,
            Kind::InvalidConfig,
            format!("{what} is {s}: a positive number of seconds (or math.inf for none)"),
        ));
    }
    Ok(Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX))
}
