//! Host buffers ([`HostBuffer`]): pinned host memory mapped into the
//! device's address space, which pkq allocates and the caller fills and
//! reads in place, handed to a task's handler by the safe buffer calls
//! with its length (the registered buffers of io_uring).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};

use crate::cuda::mapped::{MappedBuffer, host_stream};
use crate::error::{Error, Result};
use crate::runtime::lane::Lane;

/// Pinned host memory of `len` elements of `T`, mapped into the device's
/// address space: the caller reads and writes it as a slice (it derefs to
/// `[T]`), and a task's handler reads and writes the same bytes across
/// PCIe, with no copy into or out of pkq's IO areas and no size limit but
/// the op's. Made zeroed by [`Lane::host_buffer`].
///
/// The safe buffer calls ([`Lane::memcpy`], [`Lane::axpy`], ... and a
/// module's own calls on [`DeviceBuffer`](crate::DeviceBuffer)s) take it
/// as they take a device buffer: its length is checked against the op's,
/// it is borrowed for the call (exclusively where the handler writes it),
/// and the task is marked [`Task::writing_host_memory`](crate::Task::writing_host_memory),
/// so what the handler wrote is in the slice once the call returns. Unlike
/// a device buffer's, its stream ([`DeviceSlice::stream`]) is not
/// synchronized by the built-in calls: it is host memory, which the host
/// orders. What the host wrote before the call, the task reads. (A
/// module's own call through [`Lane::call_on_buffers`] synchronizes every
/// stream it is given, this one included, and the buffer's `device_ptr`
/// guard synchronizes it once more when it drops.)
///
/// It is pinned memory: a cudarc copy into or out of a slice of it
/// (`stream.memcpy_dtoh(&dev, &mut buf[..])`) is asynchronous and runs on
/// after its call returns (cudarc treats a `[T]` as pageable memory, whose
/// copies finish before they return), for pkq's calls as for the host's
/// own reads: synchronize that copy's stream before the buffer's next use.
/// A cudarc copy given the buffer itself (`stream.memcpy_htod(&v, &mut
/// buf)`) has finished when it returns (its guard synchronizes the stream).
/// Bandwidth is what the handler keeps in flight over the round trip: a
/// wide lane's ops ([`Width`](crate::Width)) move it with every thread.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// let rt = pkq::Runtime::builder()
///     .width(pkq::Width::Group { blocks: 8, warps: 8 })
///     .build()?;
/// let mut input = rt.host_buffer::<u8>(64 << 10)?;
/// let mut output = rt.host_buffer::<u8>(64 << 10)?;
/// input.fill(7); // in place: no copy to send
/// rt.memcpy(&mut output, &input)?; // the device reads and writes host memory
/// assert!(output.iter().all(|&b| b == 7));
/// # Ok(())
/// # }
/// ```
///
/// Its memory is released when it drops (while a resident kernel runs in
/// its context, once none does: freeing pinned memory waits for every
/// kernel of the context).
pub struct HostBuffer<T> {
    memory: Arc<MappedBuffer>,
    len: usize,
    /// Its context's host-buffer stream (`cuda::mapped::host_stream`).
    stream: Arc<CudaStream>,
    _type: PhantomData<T>,
}

// SAFETY: the buffer owns its memory (plain bytes, `T: Send`); the device
// touches it only during a call that borrows the buffer.
unsafe impl<T: Send> Send for HostBuffer<T> {}
// SAFETY: shared access is reads only, on the host and on the device.
unsafe impl<T: Sync> Sync for HostBuffer<T> {}

impl<T> std::fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("len", &self.len)
            .field("device_addr", &self.memory.device_addr(0))
            .finish()
    }
}

impl Lane {
    /// A [`HostBuffer`] of `len` zeroed elements of `T` in the context of
    /// this lane's device ([`HostBuffer::new`]).
    pub fn host_buffer<T: Pod>(&self, len: usize) -> Result<HostBuffer<T>> {
        HostBuffer::new(self.shared.settings.device, len)
    }
}

/// The largest alignment of a [`HostBuffer`]'s element type: a page of
/// x86-64, the alignment of the driver's pinned host memory.
const HOST_BUFFER_ALIGN: usize = 4096;

impl<T: Pod> HostBuffer<T> {
    /// `len` zeroed elements of `T` (at least one element of at least one
    /// byte, at most `isize::MAX` bytes, and a `T` aligned to at most a
    /// page, 4096 bytes, which is what the driver's pinned memory
    /// guarantees; else [`Error::InvalidArgument`], before the driver is
    /// asked) in device
    /// `device`'s primary
    /// context, where pkq's runtimes run (before or while they run).
    /// Allocating pinned memory may take milliseconds: make buffers up
    /// front and reuse them.
    pub fn new(device: usize, len: usize) -> Result<Self> {
        let size = std::mem::size_of::<T>();
        // At most isize::MAX bytes: what a slice can cover (and its words,
        // rounded up, still fit a usize).
        let bytes = len
            .checked_mul(size)
            .filter(|&b| b > 0 && b <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "a host buffer holds at least one element of at least one byte, \
                     and at most isize::MAX bytes (asked: {len} of {size} bytes)"
                ))
            })?;
        let align = std::mem::align_of::<T>();
        if align > HOST_BUFFER_ALIGN {
            return Err(Error::InvalidArgument(format!(
                "a host buffer's elements are aligned to at most {HOST_BUFFER_ALIGN} bytes \
                 (a page: what pinned memory is), not {align}"
            )));
        }
        // pkq's own handle (cudarc's event tracking off: a first stream of a
        // tracking handle synchronizes the context, which waits for every
        // resident kernel there). Page-aligned memory: `T`'s alignment, at
        // most a page's (checked above), holds.
        let (_keep, ctx) = crate::cuda::driver::open(device)?;
        let memory = MappedBuffer::new(&ctx, bytes.div_ceil(8))?;
        Ok(HostBuffer {
            memory,
            len,
            stream: host_stream(&ctx)?,
            _type: PhantomData,
        })
    }

    /// Its elements.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `len` elements of T (Pod: any bytes are a value) live,
        // page-aligned, at the host address until drop; the device writes
        // them only during a call that borrows the buffer exclusively, so
        // not while this shared borrow lives.
        unsafe { std::slice::from_raw_parts(self.memory.host_bytes().cast::<T>(), self.len) }
    }

    /// Its elements, to fill in place.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; the exclusive borrow keeps every task
        // (and every other view) off the buffer while it lives.
        unsafe { std::slice::from_raw_parts_mut(self.memory.host_bytes().cast::<T>(), self.len) }
    }
}

impl<T> HostBuffer<T> {
    /// The buffer's address in the device's address space.
    pub(crate) fn device_addr(&self) -> u64 {
        self.memory.device_addr(0)
    }
}

impl<T: Pod> Deref for HostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Pod> DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T> DeviceSlice<T> for HostBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }

    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for HostBuffer<T> {
    /// Its device address. The guard synchronizes `stream` when it drops:
    /// work that cudarc queues on the buffer is done before its borrow
    /// ends (the host may touch the bytes as soon as it does).
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.device_addr(), SyncOnDrop::Sync(Some(stream)))
    }
}

impl<T> DevicePtrMut<T> for HostBuffer<T> {
    /// As [`DevicePtr::device_ptr`].
    fn device_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.device_addr(), SyncOnDrop::Sync(Some(stream)))
    }
}
