//! The payload rows (`payload <bytes> B, ...`): `bytes` from host memory to
//! host memory each way. pkq copies between two host buffers
//! (`pkq::HostBuffer`, filled in place) with MEMCPY on a warp (up to its
//! limit) and GROUP_MEMCPY wide, through the safe `memcpy` call; `launch`
//! is cudaMemcpyAsync in (from pinned memory) + a copy kernel on device
//! buffers + cudaMemcpyAsync out + sync, `graph` the same three as a CUDA
//! graph, `zero-copy launch` the copy kernel launched on the two host
//! buffers. Every mechanism's output is checked before it is timed.

use std::sync::Arc;

use pkq::HostBuffer;
use pkq::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DriverError, LaunchConfig, PushKernelArg, sys,
};
use pkq::{Runtime, Width};
use pkq_bench::support::{Clock, Latency};

use crate::examples::{BoxError, GraphOf, Launched, OnSms};

const THREADS: u32 = 256;

/// The two host buffers and the two device buffers of one size.
struct Pair {
    bytes: usize,
    input: HostBuffer<u8>,
    output: HostBuffer<u8>,
    dev_in: CudaSlice<u8>,
    dev_out: CudaSlice<u8>,
}

pub struct Payload {
    pairs: Vec<Pair>,
    copy: CudaFunction,
    stream: Arc<CudaStream>,
}

/// Payloads of 1 KiB to 4 MiB each way.
pub const SIZES: [usize; 7] = [
    1 << 10,
    1 << 12,
    1 << 14,
    1 << 16,
    1 << 18,
    1 << 20,
    1 << 22,
];

impl Payload {
    /// Buffers of every size, allocated now (before any resident kernel
    /// runs), inputs filled with a pattern.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self, BoxError> {
        let copy = pkq_bench::floor::function(0, "pkq_copy16_kernel")?;
        let mut pairs = Vec::new();
        for bytes in SIZES {
            let mut input = HostBuffer::<u8>::new(0, bytes)?;
            input
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i * 31 + 7) as u8);
            pairs.push(Pair {
                bytes,
                input,
                output: HostBuffer::new(0, bytes)?,
                dev_in: stream.clone_htod(&vec![0u8; bytes])?,
                dev_out: stream.clone_htod(&vec![0u8; bytes])?,
            });
        }
        Ok(Self {
            pairs,
            copy,
            stream: Arc::clone(stream),
        })
    }

    fn grid(bytes: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((bytes / 16).div_ceil(THREADS as usize) as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// The copy kernel from `src` to `dst` (device addresses of `bytes`).
    fn kernel(&self, src: u64, dst: u64, bytes: usize) -> Result<(), DriverError> {
        let pieces = (bytes / 16) as u32;
        // SAFETY: pkq_copy16_kernel(const uint4*, uint4*, u32): src and dst
        // hold `bytes` (a multiple of 16) each.
        unsafe {
            self.stream
                .launch_builder(&self.copy)
                .arg(&src)
                .arg(&dst)
                .arg(&pieces)
                .launch(Self::grid(bytes))
        }
        .map(drop)
    }

    /// cudaMemcpyAsync in, the kernel on device buffers, cudaMemcpyAsync out.
    fn launch(&self, p: &Pair) -> Result<(), DriverError> {
        let (din, dout) = (
            addr(&p.dev_in, &self.stream),
            addr(&p.dev_out, &self.stream),
        );
        let cu = self.stream.cu_stream();
        // SAFETY: the host buffers are pinned and hold `bytes`, as do the
        // device buffers; the caller synchronizes the stream before the
        // host touches them.
        unsafe { sys::cuMemcpyHtoDAsync_v2(din, p.input.as_ptr().cast(), p.bytes, cu) }.result()?;
        self.kernel(din, dout, p.bytes)?;
        // SAFETY: as above.
        unsafe { sys::cuMemcpyDtoHAsync_v2(p.output.as_ptr().cast_mut().cast(), dout, p.bytes, cu) }
            .result()
    }

    /// The output equals the input; then zeroed for the next check.
    fn check(p: &mut Pair, what: &str) -> Result<(), BoxError> {
        if p.output[..] != p.input[..] {
            return Err(format!("payload {} B, {what}: the output differs", p.bytes).into());
        }
        p.output.fill(0);
        Ok(())
    }

    /// Launch + sync, graph + sync and zero-copy launch + sync at every size.
    pub fn time_launches(
        &mut self,
        clock: &Clock,
        (w, n): (usize, usize),
        sms: usize,
        graph_of: &GraphOf,
    ) -> Result<(Vec<Launched>, Vec<OnSms>), BoxError> {
        let mut rows = Vec::new();
        let mut zero_copy = Vec::new();
        for i in 0..self.pairs.len() {
            let (bytes, launch, graphed, zc) = {
                let p = &self.pairs[i];
                let name = format!("payload {} B", p.bytes);
                let sync = || self.stream.synchronize();
                let launch = Latency::measure(&format!("{name}, launch"), clock, w, n, || {
                    self.launch(p)?;
                    sync()
                });
                let graph = graph_of(&|| self.launch(p))?;
                let graphed = Latency::measure(&format!("{name}, graph"), clock, w, n, || {
                    graph.launch()?;
                    sync()
                });
                let (hin, hout) = (
                    p.input.device_ptr(&self.stream).0,
                    p.output.device_ptr(&self.stream).0,
                );
                let zc =
                    Latency::measure(&format!("{name}, zero-copy launch"), clock, w, n, || {
                        self.kernel(hin, hout, p.bytes)?;
                        sync()
                    });
                (p.bytes, launch, graphed, zc)
            };
            Self::check(&mut self.pairs[i], "zero-copy launch")?;
            self.launch(&self.pairs[i])?;
            self.stream.synchronize()?;
            Self::check(&mut self.pairs[i], "launch")?;
            let used = (Self::grid(bytes).grid_dim.0 as usize).min(sms);
            rows.push((bytes, launch, graphed, used));
            zero_copy.push((bytes, zc, used));
        }
        Ok((rows, zero_copy))
    }

    /// pkq's `memcpy` between the host buffers on `rt` (MEMCPY on a warp up
    /// to its limit, GROUP_MEMCPY wide), checked, then timed.
    pub fn time_pkq(
        &mut self,
        rt: &Runtime,
        mechanism: &str,
        clock: &Clock,
        (w, n): (usize, usize),
    ) -> Result<Vec<(usize, Latency)>, BoxError> {
        let most = if rt.width() == Width::Warp {
            pkq::builtin::MEMCPY_MAX_BYTES
        } else {
            usize::MAX
        };
        let mut rows = Vec::new();
        for p in self.pairs.iter_mut().filter(|p| p.bytes <= most) {
            rt.memcpy(&mut p.output, &p.input)?;
            Self::check(p, mechanism)?;
            let name = format!("payload {} B, {mechanism}", p.bytes);
            let l = Latency::measure(&name, clock, w, n, || rt.memcpy(&mut p.output, &p.input));
            rows.push((p.bytes, l));
        }
        Ok(rows)
    }
}

fn addr(s: &CudaSlice<u8>, stream: &Arc<CudaStream>) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}
