//! Isolation: pkq's round trip while the GPU and the host are busy, and
//! what a running pkq costs the application's own kernels; with and
//! without an SM partition (`Builder::sm_partition`). One run:
//!
//!     cargo run --release -p pkq-bench --bin isolation -- --json pkq-bench/results/isolation.json --svg pkq-bench/results/isolation.svg
//!
//! The runtime is the default shape (one worker of eight pollers), which
//! spins while tasks come and for `IdlePolicy::DEFAULT_QUIET_AFTER` after
//! the last and then sleeps between polls, asking sleeps of up to 5 µs
//! (`IdlePolicy::Backoff`), with a bulk lane of 32 workers that backs off
//! when idle (`Builder::lane`); the JSON's `runtime` says so. Its round trip (a NOP on the
//! latency lane, p50/p99/p99.9) is measured alone; under an application
//! storm (a memory-bound and a compute-bound kernel back to back on another
//! stream: the partition's rest with a partition, a primary-context stream
//! without); under a flood of bulk tasks on the bulk lane of the same
//! runtime (four threads, packed batches of 8192 NOPs; and batches of 256
//! NOPs, one task per slot); beside CPU-heavy threads of another process on every other
//! core; and beside another process's kernels on the GPU (time-slicing
//! between the two processes' contexts), counting any stall reported. The
//! application's kernels (memory-bound: y = A x, A 4096 x 4096, at the HBM's
//! bandwidth: a block of 512 threads per row, 16-byte loads; compute-bound:
//! chains of FMAs in registers) are timed (p50 of the time between CUDA
//! events around a launch queued behind another, so that the host's
//! submission stays out of it, taken again where the host queued it late;
//! launch + sync on the host beside it) alone on the
//! whole GPU with no pkq, alone on the rest of the device, beside pkq idle
//! and beside pkq busy (round trips on the latency lane and a packed flood
//! on the bulk lane). The rows "pkq idle" are timed in turn with the whole
//! GPU alone, seven rounds of: a runtime of the bench's shape built and
//! left idle past `IdlePolicy::DEFAULT_QUIET_AFTER`, the kernel beside it,
//! the runtime dropped, and the kernel alone (before that in even rounds,
//! after it in odd ones); they give the medians of both
//! (`alone_interleaved_p50_us`) and each round's ratio
//! (`rounds_vs_alone_x`). Each ratio to "alone" of the
//! other rows of a runtime compares with the whole GPU alone timed right
//! before that runtime was built and right after it was dropped
//! (`alone_adjacent_p50_us`), so that the GPU's drift over the run stays
//! out of it; the rows "alone, no partition" are the mean of the start and
//! the end of the run. The rows "idle policy" set what idling costs a
//! memory-bound kernel on the rest of a partition (timed as the rows "pkq
//! idle", in five rounds) against what it costs the first task after a
//! pause (`pause_ms`), by idle policy and shape. `--bulk-sweep` prints the latency lane's round trip
//! beside bulk lanes of other sizes and floods instead; `--idle-sweep` the
//! rows "idle policy" alone.

use pkq::Submit;
use pkq::builtin::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use pkq::cudarc::driver::{CudaFunction, CudaStream, DevicePtr, LaunchConfig, PushKernelArg, sys};
use pkq::{Error, IdlePolicy, Runtime, Width};
use pkq_bench::support::{
    Clock, Latency, Pacer, at_least_one, pin_helper, plot_percentiles, report, start, write_json,
};
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "pkq's round trip beside busy GPUs and hosts, with and without an SM partition")]
struct Args {
    /// Round trips timed per row.
    #[arg(long, default_value_t = 50_000, value_parser = at_least_one)]
    samples: usize,
    /// Times per application-kernel row (each of the device's time and of
    /// launch + sync on the host; three launches a time).
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    app_runs: usize,
    /// The runtime's partition, in SMs (rounded up by the device).
    #[arg(long, default_value_t = 8)]
    sms: usize,
    /// How long the other process keeps the GPU busy (seconds, at least 1).
    #[arg(long, default_value_t = 3.0, value_parser = at_least_a_second)]
    neighbour_seconds: f64,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Internal: run as the other process that keeps the GPU busy for this
    /// many seconds.
    #[arg(long, hide = true)]
    gpu_neighbour: Option<f64>,
    /// Instead of the rows: the latency lane's round trip beside bulk lanes
    /// of 8, 32 and 64 workers flooded one task per slot and packed, by
    /// 1 to 4 threads, printed.
    #[arg(long)]
    bulk_sweep: bool,
    /// Instead of every row: the rows "idle policy" alone, printed.
    #[arg(long)]
    idle_sweep: bool,
    /// Internal: run as the other process that keeps every core but the
    /// last busy for this many seconds.
    #[arg(long, hide = true)]
    cpu_neighbour: Option<f64>,
}

const DIM: u32 = 4096;
/// The compute-bound kernel: enough blocks that a launch is hundreds of
/// waves on any partition (its time follows the SMs it gets).
const FMA_BLOCKS: u32 = 1 << 18;
const FMA_ITERS: u32 = 64;

const KINDS: [Kind; 2] = [Kind::Memory, Kind::Compute];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Memory,
    Compute,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Compute => "compute",
        }
    }
}

/// The application: its two kernels and their buffers (device addresses).
struct App {
    gemv: CudaFunction,
    fma: CudaFunction,
    a: u64,
    x: u64,
    y: u64,
    out: u64,
}

impl App {
    fn launch(&self, kind: Kind, stream: &Arc<CudaStream>) -> Result<(), Error> {
        // SAFETY: pkq_app_gemv_kernel(const float*, const float*, float*,
        // u32, u32) over A (DIM x DIM), x and y (DIM), 16-byte aligned
        // (device allocations), DIM a multiple of 4; pkq_fma_kernel(float*,
        // u32) over `out` (FMA_BLOCKS floats). The buffers outlive every
        // launch (the app lives for the run, and each stream is synchronized
        // before the next row).
        unsafe {
            match kind {
                Kind::Memory => stream
                    .launch_builder(&self.gemv)
                    .arg(&self.a)
                    .arg(&self.x)
                    .arg(&self.y)
                    .arg(&DIM)
                    .arg(&DIM)
                    .launch(LaunchConfig {
                        grid_dim: (DIM, 1, 1),
                        block_dim: (512, 1, 1),
                        shared_mem_bytes: 0,
                    })?,
                Kind::Compute => stream
                    .launch_builder(&self.fma)
                    .arg(&self.out)
                    .arg(&FMA_ITERS)
                    .launch(LaunchConfig {
                        grid_dim: (FMA_BLOCKS, 1, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: 0,
                    })?,
            };
        }
        Ok(())
    }

    /// `runs` times on `stream`: the kernel's time on the device and one
    /// launch + sync on the host; their medians, µs. The device's time is
    /// between events recorded right before and after a launch queued
    /// behind another of the same kernel: the start event waits for the
    /// first to end, so the host's time to submit the timed launch stays
    /// out of it. A time whose start event had already passed when the
    /// timed launch was queued (the host was late) is taken again.
    fn time(&self, kind: Kind, stream: &Arc<CudaStream>, runs: usize) -> Result<[f64; 2], Error> {
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        for _ in 0..50 {
            self.launch(kind, stream)?;
            stream.synchronize()?;
        }
        let (mut device, mut host) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
        let mut late = 0;
        while device.len() < runs {
            if host.len() < runs {
                let t0 = Instant::now();
                self.launch(kind, stream)?;
                stream.synchronize()?;
                host.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            self.launch(kind, stream)?;
            let start = stream.record_event(timed)?;
            self.launch(kind, stream)?;
            let queued_in_time = !start.is_complete();
            let end = stream.record_event(timed)?;
            stream.synchronize()?;
            if queued_in_time {
                device.push(f64::from(start.elapsed_ms(&end)?) * 1e3);
            } else {
                late += 1;
                assert!(
                    late <= runs,
                    "the host queued the timed launch late {late} times"
                );
            }
        }
        Ok([median(device), median(host)])
    }

    /// Both kernels back to back on `stream` until `stop`.
    fn storm(&self, stream: &Arc<CudaStream>, stop: &AtomicBool) -> Result<u64, Error> {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            self.launch(Kind::Memory, stream)?;
            self.launch(Kind::Compute, stream)?;
            stream.synchronize()?;
            n += 2;
        }
        Ok(n)
    }
}

/// What must outlive the application's launches (its buffers and module).
type Keep = Vec<Box<dyn std::any::Any>>;

/// The application's module and buffers, on the device's primary context
/// (before any pkq kernel runs: the driver would wait for it to load).
fn app() -> Result<(App, Arc<CudaStream>, Keep), Box<dyn std::error::Error>> {
    let ctx = pkq_bench::support::one_stream_context()?;
    let stream = ctx.new_stream()?;
    let module = pkq_bench::floor::load(0)?;
    let a = stream.alloc_zeros::<f32>((DIM * DIM) as usize)?;
    let x = stream.alloc_zeros::<f32>(DIM as usize)?;
    let y = stream.alloc_zeros::<f32>(DIM as usize)?;
    let out = stream.alloc_zeros::<f32>(FMA_BLOCKS as usize)?;
    stream.synchronize()?;
    let addr = |s: &pkq::cudarc::driver::CudaSlice<f32>| s.device_ptr(&stream).0;
    let app = App {
        gemv: module.load_function("pkq_app_gemv_kernel")?,
        fma: module.load_function("pkq_fma_kernel")?,
        a: addr(&a),
        x: addr(&x),
        y: addr(&y),
        out: addr(&out),
    };
    let keep: Vec<Box<dyn std::any::Any>> = vec![
        Box::new(a),
        Box::new(x),
        Box::new(y),
        Box::new(out),
        Box::new(module),
    ];
    Ok((app, stream, keep))
}

/// `samples` NOP round trips on `rt`, each after a random pause below 4
/// µs (tasks meet the device's polling at a random phase); stalls counted
/// (the round trip is retried), other errors end the run.
fn round_trips(rt: &Runtime, clock: &Clock, name: &str, samples: usize) -> (Latency, u64) {
    let mut lat = Latency::new(name);
    let mut pacer = Pacer::new(4_000);
    let mut stalls = 0;
    for i in 0..samples + samples / 10 {
        pacer.pause(clock);
        let t0 = clock.now();
        match rt.submit(NOP.args(&())).and_then(|t| t.wait()) {
            Ok(_) => {}
            Err(Error::Stalled { .. }) => {
                stalls += 1;
                continue;
            }
            Err(e) => panic!("{name}: {e}"),
        }
        if i >= samples / 10 {
            lat.record_ns(clock.between(t0, clock.now()));
        }
    }
    (lat, stalls)
}

fn round_trip_row(l: &Latency, stalls: Option<u64>) -> Map<String, Value> {
    let mut row = l.row("us");
    if let Some(s) = stalls {
        row.insert("stalls_reported".into(), json!(s));
    }
    row
}

/// An application row before its report: its name, kind (index into `KINDS`), times
/// [device, host], the SM-share bound it is judged by (if any), and what
/// it compares with.
type AppRow = (String, usize, [f64; 2], Option<f64>, Reference);

/// What an application row's ratios compare with.
#[derive(Clone)]
enum Reference {
    /// The whole GPU alone right before runtime `k` was built and right
    /// after it was dropped (`adjacent[k]`).
    Adjacent(usize),
    /// The whole GPU alone, timed in turn with the row (its median), and
    /// the row's ratio in each round (device times).
    Interleaved([f64; 2], Vec<f64>),
}

/// The idle runtimes `idle_policies` compares: a name, and the shape.
fn idle_configs() -> Vec<(String, pkq::Builder)> {
    let backoff = |max_sleep_us| IdlePolicy::Backoff {
        spin: Duration::from_micros(50),
        max_sleep: Duration::from_micros(max_sleep_us),
    };
    vec![
        (
            "latency lane, spin".into(),
            Runtime::builder().idle(IdlePolicy::Spin),
        ),
        (
            format!(
                "latency lane, quiet after {} ms (the default)",
                IdlePolicy::DEFAULT_QUIET_AFTER.as_millis()
            ),
            Runtime::builder(),
        ),
        (
            "latency lane, backoff to 5 us".into(),
            Runtime::builder().idle(backoff(5)),
        ),
        (
            "latency lane, backoff to 20 us".into(),
            Runtime::builder().idle(backoff(20)),
        ),
        (
            "latency lane, backoff to 100 us".into(),
            Runtime::builder().idle(backoff(100)),
        ),
        ("bulk lane of 32, backoff to 20 us".into(), bench_bulk()),
        (
            format!(
                "wide lane over every SM, quiet after {} ms (the default)",
                IdlePolicy::DEFAULT_QUIET_AFTER.as_millis()
            ),
            Runtime::builder().width(EVERY_SM),
        ),
        (
            "wide lane over every SM, backoff to 5 us".into(),
            Runtime::builder().width(EVERY_SM).idle(backoff(5)),
        ),
        (
            "wide lane over every SM, backoff to 5 us with no spin".into(),
            Runtime::builder()
                .width(EVERY_SM)
                .idle(IdlePolicy::Backoff {
                    spin: Duration::ZERO,
                    max_sleep: Duration::from_micros(5),
                }),
        ),
        (
            "latency lane quiet + bulk lane of 32 backoff to 20 us".into(),
            Runtime::builder().add_lane(bench_bulk()),
        ),
        (
            format!("{} (the bench's)", bench_runtime_name()),
            bench_runtime(),
        ),
    ]
}

/// A lane of groups of a block of eight warps on each SM of the partition.
const EVERY_SM: Width = Width::Group {
    blocks: 0,
    warps: 8,
};

/// The pause before each task of the rows "idle policy".
const IDLE_PAUSE: Duration = Duration::from_millis(15);

/// What idling costs, by idle policy and shape (`idle_configs`), on an
/// `--sms` partition: the memory-bound kernel on the rest of the device
/// beside the idle runtime against the whole GPU alone (`idle_rounds`, five
/// rounds), and the round trip of a NOP submitted after `IDLE_PAUSE`
/// without a task (the first task after a pause), 100 of them.
fn idle_policies(
    app: &App,
    primary: &Arc<CudaStream>,
    clock: &Clock,
    args: &Args,
) -> Result<Vec<Map<String, Value>>, Error> {
    let mut rows = Vec::new();
    for (name, b) in idle_configs() {
        let name = name.as_str();
        let b = b.sm_partition(args.sms);
        let (idle, alone, ratios) = idle_rounds(app, primary, &b, Kind::Memory, 5, args.app_runs)?;
        let rt = b.build()?;
        let sms = rt.sm_partition().map_or(0, |p| p.sms());
        let mut after = Latency::new(name);
        for _ in 0..100 {
            std::thread::sleep(IDLE_PAUSE);
            let t0 = clock.now();
            rt.submit(NOP.args(&()))?.wait()?;
            after.record_ns(clock.between(t0, clock.now()));
        }
        rt.shutdown()?;
        let mut row = Map::new();
        row.insert("name".into(), json!(format!("idle policy, {name}")));
        row.insert("partition_sms".into(), json!(sms));
        row.insert("pause_ms".into(), json!(IDLE_PAUSE.as_millis()));
        row.insert(
            "memory_bound_vs_alone_x".into(),
            json!(x4(idle[0] / alone[0])),
        );
        let rounds: Vec<f64> = ratios.iter().map(|&r| x4(r)).collect();
        row.insert("rounds_vs_alone_x".into(), json!(rounds));
        row.insert("after_idle_p50_us".into(), us(after.p50_us()));
        row.insert("after_idle_p99_us".into(), us(after.quantile_us(0.99)));
        row.insert("after_idle_max_us".into(), us(after.quantile_us(1.0)));
        println!(
            "{name}: memory-bound {:.3}x alone; first task after a pause p50 {:.2} us",
            idle[0] / alone[0],
            after.p50_us()
        );
        rows.push(row);
    }
    Ok(rows)
}

/// The bench's runtime: a latency lane of the default shape that spins
/// while tasks come and for `IdlePolicy::DEFAULT_QUIET_AFTER` after the
/// last, then sleeps between polls, asking sleeps of up to 5 µs (a lane
/// that polls host memory without pause slows a memory-bound kernel
/// beside it: the rows "idle policy"), and the bulk lane.
fn bench_runtime() -> pkq::Builder {
    Runtime::builder()
        .idle(IdlePolicy::Backoff {
            spin: IdlePolicy::DEFAULT_QUIET_AFTER,
            max_sleep: Duration::from_micros(5),
        })
        .add_lane(bench_bulk())
}

/// What `bench_runtime` is, in words (the JSON's `runtime`).
fn bench_runtime_name() -> String {
    format!(
        "latency lane spin {} ms then backoff to 5 us + bulk lane of 32 backoff to 20 us",
        IdlePolicy::DEFAULT_QUIET_AFTER.as_millis()
    )
}

/// The bench's bulk lane: 32 workers that back off when idle (their
/// pollers' reads of host memory would otherwise cost a memory-bound
/// kernel beside it).
fn bench_bulk() -> pkq::Builder {
    Runtime::builder()
        .workers(32)
        .rings(4)
        .capacity(4096)
        .idle(IdlePolicy::Backoff {
            spin: Duration::from_micros(50),
            max_sleep: Duration::from_micros(20),
        })
}

/// Rounds of the idle measurement: each times the whole GPU alone, then
/// the kernel beside a freshly built idle runtime.
const IDLE_ROUNDS: usize = 7;

/// What `idle_rounds` measures: the medians [device, host] beside the idle
/// runtime and alone, and each round's device ratio.
type IdleRounds = ([f64; 2], [f64; 2], Vec<f64>);

/// `kind` beside an idle runtime of `b`, timed in turn with the whole GPU
/// alone (no pkq), `rounds` times: a runtime built, left idle for twice
/// `IdlePolicy::DEFAULT_QUIET_AFTER`, the kernel timed on the rest of its
/// partition (or on `primary` without one), the runtime dropped; and the
/// kernel alone on `primary`, before that in even rounds and after it in
/// odd ones. The medians over the rounds [device, host]
/// beside the runtime and alone, and each round's device ratio: the GPU's
/// drift over a run moves both alike.
fn idle_rounds(
    app: &App,
    primary: &Arc<CudaStream>,
    b: &pkq::Builder,
    kind: Kind,
    rounds: usize,
    runs: usize,
) -> Result<IdleRounds, Error> {
    let (mut idle, mut alone, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alone first in even rounds, last in odd ones: a drift within a
        // round cancels.
        let first = if round % 2 == 0 {
            Some(app.time(kind, primary, runs)?)
        } else {
            None
        };
        let rt = b.clone().build()?;
        let stream = match rt.sm_partition() {
            Some(p) => p.app_stream()?,
            None => primary.clone(),
        };
        std::thread::sleep(2 * IdlePolicy::DEFAULT_QUIET_AFTER);
        let t = app.time(kind, &stream, runs)?;
        rt.shutdown()?;
        drop(rt);
        let a = match first {
            Some(a) => a,
            None => app.time(kind, primary, runs)?,
        };
        ratios.push(t[0] / a[0]);
        idle.push(t);
        alone.push(a);
    }
    let medians = |v: &[[f64; 2]]| [0, 1].map(|k| median(v.iter().map(|t| t[k]).collect()));
    Ok((medians(&idle), medians(&alone), ratios))
}

/// The median of `v` (its upper middle where the count is even); `v` not
/// empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A time in µs as the JSON holds it: to the ns.
fn us(v: f64) -> Value {
    json!((v * 1000.0).round() / 1000.0)
}

/// A ratio as the JSON holds it: four decimals.
fn x4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

/// An application-kernel row: `[device, host]` medians (µs) against the
/// kernel's alone.
fn app_row(
    name: String,
    t: [f64; 2],
    alone: [f64; 2],
    extra: &[(&str, f64)],
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert("p50_us".into(), us(t[0]));
    m.insert("vs_alone_x".into(), json!(x4(t[0] / alone[0])));
    m.insert("launch_sync_p50_us".into(), us(t[1]));
    m.insert("launch_sync_vs_alone_x".into(), json!(x4(t[1] / alone[1])));
    for (k, v) in extra {
        m.insert((*k).into(), json!(x4(*v)));
    }
    m
}

/// Keeps the bulk lane flooded (four threads, packed batches of 8192
/// NOPs) and, if `round_trips`, the latency lane busy, until `stop`; tasks
/// done.
fn busy(rt: &Runtime, round_trips: bool, stop: &AtomicBool, done: &AtomicU64) {
    flood(rt, 4, 8192, true, round_trips, stop, done)
}

/// [`busy`] with `threads` flooding threads submitting batches of `batch`
/// (`packed`: 32 tasks to a slot, `submit_packed`).
fn flood(
    rt: &Runtime,
    threads: usize,
    batch: usize,
    packed: bool,
    round_trips: bool,
    stop: &AtomicBool,
    done: &AtomicU64,
) {
    std::thread::scope(|s| {
        for k in 0..threads {
            s.spawn(move || {
                pin_helper(k);
                let bulk = rt.lane(1).expect("a bulk lane");
                while !stop.load(Ordering::Relaxed) {
                    let tasks = vec![(); batch];
                    let mut b = if packed {
                        bulk.submit(NOP.packed(&tasks)).unwrap()
                    } else {
                        bulk.submit(NOP.batch(&tasks)).unwrap()
                    };
                    b.wait().unwrap();
                    done.fetch_add(batch as u64, Ordering::Relaxed);
                }
            });
        }
        if round_trips {
            s.spawn(move || {
                pin_helper(threads);
                while !stop.load(Ordering::Relaxed) {
                    rt.submit(NOP.args(&())).unwrap().wait().unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
}

/// The other process that keeps the GPU busy: the application's kernels on
/// its own context for `seconds`.
fn gpu_neighbour(seconds: f64) -> Result<(), Box<dyn std::error::Error>> {
    let (app, stream, _keep) = app()?;
    let stop = AtomicBool::new(false);
    let n = std::thread::scope(|s| {
        let storm = s.spawn(|| app.storm(&stream, &stop));
        // The parent measures from this line on (see `neighbour`).
        println!("{NEIGHBOUR_READY}");
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        storm.join().unwrap()
    })?;
    println!("gpu neighbour: {n} kernels");
    Ok(())
}

/// The other process that keeps every core but the last busy.
fn cpu_neighbour(seconds: f64) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    std::thread::scope(|s| {
        for k in 0..cores.saturating_sub(1).max(1) {
            s.spawn(move || {
                pin_helper(k);
                let mut x = 1u64;
                while Instant::now() < end {
                    for _ in 0..10_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    std::hint::black_box(x);
                }
            });
        }
    });
}

/// What the GPU neighbour prints once its storm has started.
const NEIGHBOUR_READY: &str = "gpu neighbour: storming";

/// Runs this program as the other process (`flag` with `seconds`).
fn neighbour(flag: &str, seconds: f64) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .arg(flag)
        .arg(seconds.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting the neighbour process")
}

/// Waits until the GPU neighbour says its storm started (its CUDA set-up
/// done); the rest of what it prints is echoed once it exits.
fn await_storm(
    child: &mut std::process::Child,
) -> Result<std::io::BufReader<std::process::ChildStdout>, Box<dyn std::error::Error>> {
    use std::io::BufRead;
    let mut out = std::io::BufReader::new(child.stdout.take().ok_or("no pipe to the neighbour")?);
    let mut line = String::new();
    while line.trim_end() != NEIGHBOUR_READY {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            return Err("the GPU neighbour ended before its storm started".into());
        }
    }
    Ok(out)
}

/// Seconds, at least 1 (the GPU neighbour's run; the parent measures for
/// all but the last half second of it).
fn at_least_a_second(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 1.0 => Ok(v),
        _ => Err(format!("{s:?}: a number of seconds, at least 1")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(s) = args.cpu_neighbour {
        cpu_neighbour(s);
        return Ok(());
    }
    // pkq-bench's module first, before any pkq runtime starts (see
    // pkq_bench::floor).
    pkq_bench::floor::load(0)?;
    if let Some(s) = args.gpu_neighbour {
        return gpu_neighbour(s);
    }
    let (clock, info) = start(None, 0)?;
    if args.idle_sweep {
        let (app, primary, _keep) = app()?;
        for r in idle_policies(&app, &primary, &clock, &args)? {
            println!("{}", Value::Object(r));
        }
        return Ok(());
    }
    if args.bulk_sweep {
        for (workers, pollers) in [(8, 1), (32, 1), (64, 1)] {
            for idle in [false] {
                let mut bulk = Runtime::builder()
                    .workers(workers)
                    .pollers(pollers)
                    .rings(4.min(workers))
                    .capacity(4096);
                if idle {
                    bulk = bulk.idle(IdlePolicy::Backoff {
                        spin: Duration::from_micros(50),
                        max_sleep: Duration::from_micros(20),
                    });
                }
                let rt = Runtime::builder().add_lane(bulk).build()?;
                let (alone, _) = round_trips(&rt, &clock, "alone", args.samples);
                for (threads, batch, packed) in [
                    (4, 256, false),
                    (1, 8192, true),
                    (2, 8192, true),
                    (4, 8192, true),
                    (4, 1024, true),
                ] {
                    let stop = AtomicBool::new(false);
                    let done = AtomicU64::new(0);
                    let t0 = Instant::now();
                    let l = std::thread::scope(|s| {
                        s.spawn(|| flood(&rt, threads, batch, packed, false, &stop, &done));
                        let r = round_trips(&rt, &clock, "bulk", args.samples);
                        stop.store(true, Ordering::Relaxed);
                        r.0
                    });
                    let rate = done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
                    println!(
                        "bulk {workers}x{pollers} backoff {idle}: {threads} threads x {batch} packed {packed}: p50 {:.3} vs alone {:.3} = {:.3}x, p99 {:.2}, {:.1} M tasks/s",
                        l.p50_us(),
                        alone.p50_us(),
                        l.p50_us() / alone.p50_us(),
                        l.quantile_us(0.99),
                        rate / 1e6
                    );
                }
                rt.shutdown()?;
            }
        }
        return Ok(());
    }
    let (app, primary, _keep) = app()?;
    let n = args.samples;
    let mut rows = Vec::new();
    let mut plotted = Vec::new();

    // The application alone on the whole GPU: no pkq.
    // Measured now and again at the end (no pkq either time); rows compare
    // with the mean of the two. Every other application row is kept as
    // (name, kind, times, SM-share bound if the compute-bound one is
    // judged by it) until then.
    let mut first_alone = [[0.0; 2]; 2];
    for (i, kind) in KINDS.into_iter().enumerate() {
        first_alone[i] = app.time(kind, &primary, args.app_runs)?;
    }
    // What idling costs, by idle policy (first: each prints its line as it
    // comes, should a later phase fail).
    let policies = idle_policies(&app, &primary, &clock, &args)?;
    let mut app_rows: Vec<AppRow> = Vec::new();
    // The whole GPU alone right before each runtime and right after it.
    let mut adjacent: Vec<[[f64; 2]; 2]> = Vec::new();
    let device_sms = info.multiprocessors as f64;

    for partitioned in [false, true] {
        let label = if partitioned {
            "partition"
        } else {
            "no partition"
        };
        let mut b = bench_runtime();
        if partitioned {
            b = b.sm_partition(args.sms);
        }
        let around = adjacent.len();
        // Beside idle runtimes of this shape, in turn with the whole GPU
        // alone.
        let mut idle_rows = Vec::new();
        for kind in KINDS {
            idle_rows.push(idle_rounds(
                &app,
                &primary,
                &b,
                kind,
                IDLE_ROUNDS,
                args.app_runs,
            )?);
        }
        let mut before = [[0.0; 2]; 2];
        for (i, kind) in KINDS.into_iter().enumerate() {
            before[i] = app.time(kind, &primary, args.app_runs)?;
        }
        let rt = b.build()?;
        let (stream, app_sms) = match rt.sm_partition() {
            Some(p) => {
                println!(
                    "partition: {} SMs for pkq, {} for the application",
                    p.sms(),
                    p.app_sms()
                );
                (p.app_stream()?, p.app_sms() as f64)
            }
            None => (primary.clone(), device_sms),
        };
        let bound = device_sms / app_sms;
        // The application's kernels beside pkq busy first, before the
        // neighbours' phases.
        for (i, (kind, (idle, alone, ratios))) in KINDS.into_iter().zip(idle_rows).enumerate() {
            let judged = (kind == Kind::Compute && partitioned).then_some(bound);
            let name = format!("app kernel, {}-bound, pkq idle, {label}", kind.name());
            let reference = Reference::Interleaved(alone, ratios);
            app_rows.push((name, i, idle, judged, reference));
            let stop = AtomicBool::new(false);
            let done = AtomicU64::new(0);
            let busy_t = std::thread::scope(|s| {
                s.spawn(|| busy(&rt, true, &stop, &done));
                std::thread::sleep(Duration::from_millis(50));
                let t = app.time(kind, &stream, args.app_runs);
                stop.store(true, Ordering::Relaxed);
                t
            })?;
            let name = format!("app kernel, {}-bound, pkq busy, {label}", kind.name());
            app_rows.push((name, i, busy_t, judged, Reference::Adjacent(around)));
            println!(
                "app kernel, {}-bound, {label}: idle {:.1} µs, busy {:.1} µs",
                kind.name(),
                idle[0],
                busy_t[0],
            );
        }

        let (l, _) = round_trips(&rt, &clock, &format!("pkq round trip, alone, {label}"), n);
        let alone_p50 = l.p50_us();
        rows.push(round_trip_row(&l, None));
        plotted.push(l);

        let stop = AtomicBool::new(false);
        let (l, kernels) = std::thread::scope(|s| {
            let storm = s.spawn(|| {
                pin_helper(0);
                app.storm(&stream, &stop)
            });
            let r = round_trips(&rt, &clock, &format!("pkq round trip, storm, {label}"), n);
            stop.store(true, Ordering::Relaxed);
            (r.0, storm.join().unwrap())
        });
        println!("  storm: {} application kernels", kernels?);
        rows.push(round_trip_row(&l, None));
        plotted.push(l);

        // Bulk traffic on the same runtime: packed (32 tasks to a slot, as
        // bulk work is best pushed), and one task per slot.
        for (packed, beside, batch) in
            [(true, "bulk", 8192), (false, "bulk one task per slot", 256)]
        {
            let stop = AtomicBool::new(false);
            let done = AtomicU64::new(0);
            let t0 = Instant::now();
            let l = std::thread::scope(|s| {
                s.spawn(|| flood(&rt, 4, batch, packed, false, &stop, &done));
                let r = round_trips(
                    &rt,
                    &clock,
                    &format!("pkq round trip, {beside}, {label}"),
                    n,
                );
                stop.store(true, Ordering::Relaxed);
                r.0
            });
            let rate = done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
            let mut row = round_trip_row(&l, None);
            row.insert("p50_vs_alone_x".into(), json!(x4(l.p50_us() / alone_p50)));
            row.insert("bulk_tasks_per_s".into(), json!(rate.round()));
            rows.push(row);
            if packed {
                plotted.push(l);
            }
        }

        let mut hog = neighbour("--cpu-neighbour", 1.0 + n as f64 * 4e-6);
        std::thread::sleep(Duration::from_millis(200));
        let (l, _) = round_trips(
            &rt,
            &clock,
            &format!("pkq round trip, cpu neighbour, {label}"),
            n,
        );
        hog.wait()?;
        rows.push(round_trip_row(&l, None));

        // Another process's kernels: the two processes' contexts share the
        // GPU by time slices, whatever the partition.
        let mut other = neighbour("--gpu-neighbour", args.neighbour_seconds);
        let mut said = await_storm(&mut other)?;
        let until = Instant::now() + Duration::from_secs_f64(args.neighbour_seconds - 0.5);
        let mut lat = Latency::new(&format!("pkq round trip, other process, {label}"));
        let mut stalls = 0;
        while Instant::now() < until {
            let (l, s) = round_trips(&rt, &clock, "", 1000);
            lat.hist.add(&l.hist).unwrap();
            stalls += s;
        }
        other.wait()?;
        std::io::copy(&mut said, &mut std::io::stdout())?;
        rows.push(round_trip_row(&lat, Some(stalls)));
        plotted.push(lat);

        let part = rt.sm_partition().cloned();
        rt.shutdown()?;
        drop(rt);
        let mut mean = [[0.0; 2]; 2];
        for (i, kind) in KINDS.into_iter().enumerate() {
            let after = app.time(kind, &primary, args.app_runs)?;
            mean[i] = [0, 1].map(|k| (before[i][k] + after[k]) / 2.0);
        }
        adjacent.push(mean);
        // The rest of the device with no pkq running: what the partition
        // alone costs the application.
        if let Some(p) = part {
            let stream = p.app_stream()?;
            for (i, kind) in KINDS.into_iter().enumerate() {
                let t = app.time(kind, &stream, args.app_runs)?;
                let name = format!("app kernel, {}-bound, alone, partition", kind.name());
                let judged = (kind == Kind::Compute).then_some(bound);
                app_rows.push((name, i, t, judged, Reference::Adjacent(around)));
            }
        }
    }

    let mut alone = [[0.0; 2]; 2];
    for (i, kind) in KINDS.into_iter().enumerate() {
        let last = app.time(kind, &primary, args.app_runs)?;
        alone[i] = [0, 1].map(|k| (first_alone[i][k] + last[k]) / 2.0);
        let mut row = app_row(
            format!("app kernel, {}-bound, alone, no partition", kind.name()),
            alone[i],
            alone[i],
            &[],
        );
        row.insert("first_p50_us".into(), json!(first_alone[i][0]));
        row.insert("last_p50_us".into(), json!(last[0]));
        rows.push(row);
    }
    for (name, i, t, judged, against) in app_rows {
        let (reference, ratios) = match against {
            Reference::Adjacent(k) => (adjacent[k][i], None),
            Reference::Interleaved(alone, ratios) => (alone, Some(ratios)),
        };
        let mut extra: Vec<(&str, f64)> = match judged {
            Some(bound) => vec![
                ("sm_share_bound_x", bound),
                ("vs_sm_share_bound_x", t[0] / (reference[0] * bound)),
            ],
            None => vec![],
        };
        let alone_key = if ratios.is_some() {
            "alone_interleaved_p50_us"
        } else {
            "alone_adjacent_p50_us"
        };
        extra.push((alone_key, reference[0]));
        let beside_pkq = name.contains(", pkq ");
        let mut row = app_row(name, t, reference, &extra);
        if beside_pkq {
            row.insert("runtime".into(), json!(bench_runtime_name()));
        }
        if let Some(r) = ratios {
            let r: Vec<f64> = r.iter().map(|&x| x4(x)).collect();
            row.insert("rounds_vs_alone_x".into(), json!(r));
        }
        rows.push(row);
    }
    rows.extend(policies);
    for r in &rows {
        println!("{}", Value::Object(r.clone()));
    }
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    if let Some(path) = &args.svg {
        let series: Vec<&Latency> = plotted.iter().collect();
        plot_percentiles(
            path,
            "pkq round trip: alone, under a storm, beside bulk, beside another process",
            &series,
        );
    }
    Ok(())
}
