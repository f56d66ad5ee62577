//! The example crates' handlers as width workloads: forward kinematics of
//! `n` poses (`fk <n>, ...`: custom_handler's FK on a warp, FK_WIDE wide,
//! `fk_kernel` launched a thread per pose) and a book of `n` European
//! options priced by Black-Scholes (`options <n>, ...`: the options
//! example's PRICE on a warp, PRICE_WIDE wide, `price_kernel` launched a
//! thread per option). Every mechanism's output is checked against the
//! example's f64 reference before it is timed.

use std::sync::Arc;

use pkq::cudarc::driver::{
    CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, DriverError, LaunchConfig,
    PushKernelArg,
};
use pkq::cudarc::nvrtc::Ptx;
use pkq::{Runtime, Submit, TypedOp, Width};
use pkq_bench::support::{Clock, Latency};

/// Threads per block of the launched kernels (a thread per pose or option).
const THREADS: u32 = 256;

/// One workload: its sizes, the warp op's limit, and how each mechanism
/// runs and checks a task of a size.
pub struct Workload {
    /// The rows' first word ("fk", "options").
    pub work: &'static str,
    /// What the SVG's title calls it.
    pub caption: &'static str,
    pub sizes: Vec<usize>,
    /// The largest size of the warp op.
    warp_max: usize,
    /// The module (fatbin) and its resident kernel.
    image: &'static [u8],
    kernel: &'static str,
    stream: Arc<CudaStream>,
    launched: CudaFunction,
    /// Device addresses of the input and the output.
    input: u64,
    output: u64,
    /// What a task writes fills this many bytes of the output per item.
    out_bytes: usize,
    /// The output's buffer (NaNs copied over it after each check), and
    /// the input's (kept alive: the tasks use its address).
    out: CudaSlice<u8>,
    _input: CudaSlice<u8>,
    kind: Kind,
}

enum Kind {
    Fk {
        q: Vec<f32>,
    },
    Options {
        book: Vec<options::OptionIn>,
        rate: f32,
    },
}

pub type BoxError = Box<dyn std::error::Error>;

/// What makes a graph of the launches a closure issues (main's `graph_of`).
pub type GraphOf<'a> =
    dyn Fn(&dyn Fn() -> Result<(), DriverError>) -> Result<CudaGraph, BoxError> + 'a;

/// One size's row of a mechanism and the SMs it used.
pub type OnSms = (usize, Latency, usize);

/// One size's measurements: launch + sync, graph + sync, the SMs the
/// launch used.
pub type Launched = (usize, Latency, Latency, usize);

impl Kind {
    /// (rows' first word, SVG title, sizes, the warp op's largest size,
    /// module, resident kernel, launched kernel, output bytes per item)
    #[allow(clippy::type_complexity)]
    fn facts(
        &self,
    ) -> (
        &'static str,
        &'static str,
        Vec<usize>,
        usize,
        &'static [u8],
        &'static str,
        &'static str,
        usize,
    ) {
        match self {
            Kind::Fk { .. } => (
                "fk",
                "forward kinematics of n poses",
                vec![1, 16, 256, 1024, 4096, 16_384],
                custom_handler::MAX_N,
                custom_handler::IMAGE,
                custom_handler::KERNEL,
                "fk_kernel",
                48,
            ),
            Kind::Options { .. } => (
                "options",
                "Black-Scholes prices and greeks of n options",
                vec![1, 100, 1_000, 10_000, 100_000, 1_000_000],
                10_000.min(options::MAX_N),
                options::IMAGE,
                options::KERNEL,
                options::LAUNCHED_KERNEL,
                32,
            ),
        }
    }

    fn input(&self) -> &[u8] {
        match self {
            Kind::Fk { q } => bytemuck::cast_slice(q),
            Kind::Options { book, .. } => bytemuck::cast_slice(book),
        }
    }
}

impl Workload {
    /// FK of up to 16384 random poses, buffers allocated now (before any
    /// resident kernel runs).
    pub fn fk(stream: &Arc<CudaStream>) -> Result<Self, BoxError> {
        let q = custom_handler::random_angles(16_384, 0xf4);
        Self::new(stream, Kind::Fk { q })
    }

    /// Books of 1 to 1 000 000 random options.
    pub fn options(stream: &Arc<CudaStream>) -> Result<Self, BoxError> {
        let book = options::random_book(1_000_000, 0x0b5);
        Self::new(stream, Kind::Options { book, rate: 0.03 })
    }

    /// The input copied to the device, room for the output (NaNs), and the
    /// module's launched kernel loaded.
    fn new(stream: &Arc<CudaStream>, kind: Kind) -> Result<Self, BoxError> {
        let (work, caption, sizes, warp_max, image, kernel, launched, out_bytes) = kind.facts();
        if image.is_empty() {
            return Err("an example crate was built without nvcc".into());
        }
        let launched = stream
            .context()
            .load_module(Ptx::from_binary(image.to_vec()))?
            .load_function(launched)?;
        let most = *sizes.last().unwrap();
        let input = stream.clone_htod(kind.input())?;
        let out = stream.clone_htod(&vec![0xffu8; out_bytes * most])?;
        Ok(Self {
            work,
            caption,
            sizes,
            warp_max,
            image,
            kernel,
            stream: Arc::clone(stream),
            launched,
            input: addr(&input, stream),
            output: addr(&out, stream),
            out_bytes,
            out,
            _input: input,
            kind,
        })
    }

    fn grid(size: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (size.div_ceil(THREADS as usize) as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// The launched kernel over a grid of a thread per item.
    fn launch(&self, size: usize) -> Result<(), DriverError> {
        let n = size as u32;
        let mut b = self.stream.launch_builder(&self.launched);
        b.arg(&self.input).arg(&self.output).arg(&n);
        let rate;
        if let Kind::Options { rate: r, .. } = &self.kind {
            rate = *r;
            b.arg(&rate);
        }
        // SAFETY: fk_kernel(const float*, float*, u32) and
        // price_kernel(u64, u64, u32, float): the input and output hold
        // `size` items of each (allocated for the largest size).
        unsafe { b.launch(Self::grid(size)) }.map(drop)
    }

    /// Whether the output's first `size` items match the reference; NaNs
    /// copied over them after (the next check sees only what its task wrote).
    fn check(&self, size: usize, what: &str) -> Result<(), BoxError> {
        let got = self
            .stream
            .clone_dtoh(&self.out.slice(..self.out_bytes * size))?;
        let ok = match &self.kind {
            Kind::Fk { q } => {
                let pose: Vec<f32> = got
                    .chunks_exact(4)
                    .map(bytemuck::pod_read_unaligned)
                    .collect();
                custom_handler::max_error(&q[..6 * size], &pose) < 1e-4
            }
            Kind::Options { book, rate } => {
                let got: Vec<options::Greeks> = got
                    .chunks_exact(32)
                    .map(bytemuck::pod_read_unaligned)
                    .collect();
                options::max_rel_error(&book[..size], *rate, &got) <= 1e-5
            }
        };
        let nan = vec![0xffu8; self.out_bytes * size];
        // SAFETY: output holds out_bytes x the largest size bytes.
        unsafe {
            pkq::cudarc::driver::result::memcpy_htod_async(
                self.output,
                &nan,
                self.stream.cu_stream(),
            )
        }?;
        self.stream.synchronize()?;
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{} {size}, {what}: output differs from the reference",
                self.work
            )
            .into())
        }
    }

    /// Launch + sync and graph + sync at every size.
    pub fn time_launches(
        &self,
        clock: &Clock,
        (w, n): (usize, usize),
        sms: usize,
        graph_of: &GraphOf,
    ) -> Result<Vec<Launched>, BoxError> {
        let mut rows = Vec::new();
        for &size in &self.sizes {
            let name = format!("{} {size}", self.work);
            self.launch(size)?;
            self.stream.synchronize()?;
            self.check(size, "launch")?;
            let launch = Latency::measure(&format!("{name}, launch"), clock, w, n, || {
                self.launch(size)?;
                self.stream.synchronize()
            });
            let graph = graph_of(&|| self.launch(size))?;
            let graphed = Latency::measure(&format!("{name}, graph"), clock, w, n, || {
                graph.launch()?;
                self.stream.synchronize()
            });
            let blocks = Self::grid(size).grid_dim.0 as usize;
            rows.push((size, launch, graphed, blocks.min(sms)));
        }
        Ok(rows)
    }

    /// The runtime of the workload's module on a lane of `width`.
    pub fn runtime(&self, width: Width) -> pkq::Result<Runtime> {
        Runtime::builder()
            .module(self.image, self.kernel)
            .width(width)
            .build()
    }

    /// The workload's op on `rt` (the warp op on a lane of warps, up to its
    /// limit; the group op on a wider lane) at every size, checked, then
    /// timed as `<work> <size>, <mechanism>`.
    pub fn time_pkq(
        &self,
        rt: &Runtime,
        mechanism: &str,
        clock: &Clock,
        (w, n): (usize, usize),
    ) -> Result<Vec<(usize, Latency)>, BoxError> {
        let wide = rt.width() != Width::Warp;
        let most = if wide { usize::MAX } else { self.warp_max };
        let mut rows = Vec::new();
        for &size in self.sizes.iter().filter(|&&s| s <= most) {
            let call = || self.call(rt, wide, size);
            call()?;
            self.check(size, mechanism)?;
            let l = Latency::measure(
                &format!("{} {size}, {mechanism}", self.work),
                clock,
                w,
                n,
                call,
            );
            rows.push((size, l));
        }
        Ok(rows)
    }

    fn call(&self, rt: &Runtime, wide: bool, size: usize) -> pkq::Result<()> {
        let n = size as u32;
        match &self.kind {
            Kind::Fk { .. } => {
                let op = if wide {
                    &custom_handler::FK_WIDE
                } else {
                    &custom_handler::FK
                };
                let args = custom_handler::FkArgs {
                    q: self.input,
                    pose: self.output,
                    n,
                    reserved: 0,
                };
                submit(rt, op, &args)
            }
            Kind::Options { rate, .. } => {
                let op = if wide {
                    &options::PRICE_WIDE
                } else {
                    &options::PRICE
                };
                let args = options::PriceArgs {
                    book: self.input,
                    out: self.output,
                    n,
                    rate: *rate,
                };
                submit(rt, op, &args)
            }
        }
    }
}

/// A task of `op` with `args`, waited for.
fn submit<A: bytemuck::Pod>(rt: &Runtime, op: &TypedOp<A>, args: &A) -> pkq::Result<()> {
    // SAFETY: the workload's input and output hold its largest size's items
    // and live as long as the process.
    rt.submit(unsafe { op.args(args).unchecked() })?
        .wait()
        .map(drop)
}

/// The device address of `s` (its stream synchronized before any task).
fn addr(s: &CudaSlice<u8>, stream: &Arc<CudaStream>) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}
