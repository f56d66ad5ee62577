//! The device buffers the safe buffer calls accept (see [`DeviceBuffer`]).

use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, SyncOnDrop,
};

use crate::runtime::host_buffer::HostBuffer;

#[cfg(doc)]
use crate::Lane;

mod sealed {
    pub trait Sealed {
        /// The device address of a [`HostBuffer`](super::HostBuffer);
        /// `None` for device memory.
        fn host_address(&self) -> Option<u64> {
            None
        }
    }
}

/// A device buffer a safe call reads: one of cudarc's own slices and
/// views, or a [`HostBuffer`] (host memory the device addresses), and no
/// other type. The safe buffer calls ([`Lane::axpy`],
/// [`Lane::memcpy`], ...) take it.
///
/// Those calls hand a buffer's address and length to a handler that reads
/// and writes the device memory behind them, so they must be true.
/// cudarc's [`DevicePtr`] and [`DevicePtrMut`] are traits anyone can
/// implement, with any `len()`, address or stream; a safe call that took
/// them would let safe code make the device write past a buffer. The traits
/// here are sealed: only [`CudaSlice`], [`CudaView`] and [`CudaViewMut`]
/// implement them, whose lengths and addresses cudarc keeps true, and
/// pkq's own [`HostBuffer`].
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// let rt = pkq::Runtime::builder().build()?;
/// let stream = pkq::context(0)?.default_stream();
/// let x = stream.clone_htod(&[1.0f32; 64])?;
/// let mut y = stream.alloc_zeros::<f32>(64)?;
/// rt.axpy(2.0, &x, &mut y)?; // whole slices
/// rt.axpy(2.0, &x.slice(..32), &mut y.slice_mut(32..))?; // views
/// # Ok(())
/// # }
/// ```
///
/// A type of the caller's own is refused at compile time, whatever it
/// claims:
///
/// ```compile_fail
/// use std::sync::Arc;
/// use pkq::cudarc::driver::{
///     CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop, sys::CUdeviceptr,
/// };
///
/// struct Longer<'b>(&'b mut CudaSlice<f32>);
/// impl DeviceSlice<f32> for Longer<'_> {
///     fn len(&self) -> usize {
///         4096 // more than the buffer holds
///     }
///     fn stream(&self) -> &Arc<CudaStream> {
///         self.0.stream()
///     }
/// }
/// impl DevicePtr<f32> for Longer<'_> {
///     fn device_ptr<'a>(&'a self, s: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
///         self.0.device_ptr(s)
///     }
/// }
/// impl DevicePtrMut<f32> for Longer<'_> {
///     fn device_ptr_mut<'a>(&'a mut self, s: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
///         self.0.device_ptr_mut(s)
///     }
/// }
///
/// fn write_past(rt: &pkq::Runtime, x: &mut CudaSlice<f32>, y: &mut CudaSlice<f32>) {
///     let _ = rt.axpy(1.0, &Longer(x), &mut Longer(y));
/// }
/// ```
pub trait DeviceBuffer<T>: DevicePtr<T> + sealed::Sealed {}

/// A device buffer a safe call writes: a [`CudaSlice`], [`CudaViewMut`]
/// or [`HostBuffer`] (sealed, as [`DeviceBuffer`]).
pub trait DeviceBufferMut<T>: DevicePtrMut<T> + sealed::Sealed {}

impl<T> sealed::Sealed for CudaSlice<T> {}
impl<T> sealed::Sealed for HostBuffer<T> {
    fn host_address(&self) -> Option<u64> {
        Some(self.device_addr())
    }
}
impl<T> sealed::Sealed for CudaView<'_, T> {}
impl<T> sealed::Sealed for CudaViewMut<'_, T> {}

impl<T> DeviceBuffer<T> for CudaSlice<T> {}
impl<T> DeviceBuffer<T> for HostBuffer<T> {}
impl<T> DeviceBuffer<T> for CudaView<'_, T> {}
impl<T> DeviceBuffer<T> for CudaViewMut<'_, T> {}

impl<T> DeviceBufferMut<T> for CudaSlice<T> {}
impl<T> DeviceBufferMut<T> for HostBuffer<T> {}
impl<T> DeviceBufferMut<T> for CudaViewMut<'_, T> {}

/// A buffer lent to one task of a built-in call ([`Lane::call_on_lent`]):
/// its device address, its stream, whether it is a host buffer, and, for
/// device memory, cudarc's guard (dropped after the call). A host buffer
/// takes no guard: the task has completed when the call returns, and its
/// guard would synchronize a stream that the built-in calls do not wait
/// for (host memory, which the host orders).
pub(crate) struct Lent<'a> {
    pub(crate) addr: u64,
    pub(crate) stream: &'a Arc<CudaStream>,
    pub(crate) host: bool,
    _guard: Option<SyncOnDrop<'a>>,
}

impl<'a> Lent<'a> {
    /// A host buffer at `host` (its device address), else device memory
    /// whose address and guard `device_ptr` gives; `stream` the buffer's.
    fn new(
        host: Option<u64>,
        stream: &'a Arc<CudaStream>,
        device_ptr: impl FnOnce() -> (u64, SyncOnDrop<'a>),
    ) -> Self {
        match host {
            Some(addr) => Lent {
                addr,
                stream,
                host: true,
                _guard: None,
            },
            None => {
                let (addr, guard) = device_ptr();
                Lent {
                    addr,
                    stream,
                    host: false,
                    _guard: Some(guard),
                }
            }
        }
    }
}

/// `b` lent for reading, `stream` its own (a clone of `b.stream()`).
pub(crate) fn lend<'a, T>(b: &'a impl DeviceBuffer<T>, stream: &'a Arc<CudaStream>) -> Lent<'a> {
    Lent::new(b.host_address(), stream, || b.device_ptr(stream))
}

/// `b` lent for writing, `stream` its own (a clone of `b.stream()`).
pub(crate) fn lend_mut<'a, T>(
    b: &'a mut impl DeviceBufferMut<T>,
    stream: &'a Arc<CudaStream>,
) -> Lent<'a> {
    let host = b.host_address();
    Lent::new(host, stream, || b.device_ptr_mut(stream))
}
