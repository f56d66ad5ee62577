//! What waiting costs: wake-up latency and CPU time per waiting thread, for
//! each of pkq's wait strategies and for CUDA's own waits (launch + event
//! sync under the spin, yield and blocking-sync context flags), with tasks
//! of 2 µs, 100 µs and 1 ms and 1 or 64 waiting threads; the async round
//! trip (tokio, with a busy and with an idle executor) and the completion
//! callback against `cuLaunchHostFunc`. One run:
//!
//!     cargo run --release -p pkq-bench --bin waiting -- --json pkq-bench/results/waiting.json --svg pkq-bench/results/waiting.svg
//!
//! The wake-up latency is the time from the task's end on the device (its
//! `%globaltimer` stamp, placed on the host's clock by a `ClockMap` fitted
//! to pkq round trips before and after the CUDA rows) to the waiting
//! thread running again. The CPU per waiter is the process's user + system
//! time over the row (the completion thread and the driver's threads
//! included) divided by the waiters and the row's wall time: above 1 where
//! one waiter and the completion thread both use a core.

use pkq::Submit;
use pkq::builtin::*;
use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use pkq::cudarc::driver::sys;
use pkq::timing::{ClockMap, Exchange};
use pkq::{Runtime, WaitStrategy};
use pkq_bench::support::{Clock, Latency, at_least_one, positive, report, write_json};
use plotters::prelude::*;
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "what waiting costs: pkq's wait strategies vs CUDA's waits, async, callbacks")]
struct Args {
    /// Round trips timed for the async and callback rows.
    #[arg(long, default_value_t = 5_000, value_parser = at_least_one)]
    samples: usize,
    /// How long each wait row runs (its waiters wait over and over): long
    /// enough for the process's CPU accounting to be exact.
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    row_seconds: f64,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// Task lengths (ns) and their names in the rows.
const LENGTHS: [(u64, &str); 3] = [(2_000, "2 µs"), (100_000, "100 µs"), (1_000_000, "1 ms")];
const WAITERS: [usize; 2] = [1, 64];
const STRATEGIES: [(WaitStrategy, &str); 4] = [
    (WaitStrategy::Spin, "Spin"),
    (WaitStrategy::SpinThenYield, "SpinThenYield"),
    (WaitStrategy::Park, "Park"),
    (WaitStrategy::Monitor, "Monitor"),
];
const CUDA_FLAGS: [(u32, u32, &str); 3] = [
    (
        sys::CUctx_flags::CU_CTX_SCHED_SPIN as u32,
        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
        "spin",
    ),
    (
        sys::CUctx_flags::CU_CTX_SCHED_YIELD as u32,
        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
        "yield",
    ),
    (
        sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32,
        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
            | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32,
        "blocking-sync",
    ),
];

/// One row's raw samples: (host ns when the waiter ran, device end ns).
struct Raw {
    name: String,
    wakes: Vec<(u64, u64)>,
    cpu_per_waiter: f64,
    extra: Map<String, Value>,
}

/// The process's user + system CPU time.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given, which lives here.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Runs `waiters` threads, each taking wake-ups with `one` (which returns
/// the host ns when the waiter ran and the device's end) for `seconds`
/// (at least 20 each), and measures the process's CPU time over it.
fn run_waiters(
    waiters: usize,
    seconds: f64,
    one: impl Fn(usize) -> (u64, u64) + Sync,
) -> (Vec<(u64, u64)>, f64) {
    let all = Mutex::new(Vec::new());
    let until = Mutex::new(None::<Instant>);
    let start = Barrier::new(waiters + 1);
    let (cpu0, t0, cpu1, t1);
    {
        let (all, start, one, until) = (&all, &start, &one, &until);
        let mut cpu_t0 = (Duration::ZERO, Instant::now());
        std::thread::scope(|s| {
            for w in 0..waiters {
                s.spawn(move || {
                    let mut mine = Vec::new();
                    // Warm-up.
                    for _ in 0..2 {
                        one(w);
                    }
                    start.wait();
                    let end = loop {
                        if let Some(end) = *until.lock().unwrap() {
                            break end;
                        }
                        std::thread::yield_now();
                    };
                    while mine.len() < 20 || Instant::now() < end {
                        mine.push(one(w));
                    }
                    all.lock().unwrap().extend(mine);
                });
            }
            start.wait();
            cpu_t0 = (cpu_time(), Instant::now());
            *until.lock().unwrap() = Some(cpu_t0.1 + Duration::from_secs_f64(seconds));
        });
        (cpu0, t0) = cpu_t0;
        (cpu1, t1) = (cpu_time(), Instant::now());
    }
    let wall = (t1 - t0).as_secs_f64();
    let cpu = (cpu1 - cpu0).as_secs_f64();
    (all.into_inner().unwrap(), cpu / wall / waiters as f64)
}

/// `count` round trips of ECHO on `rt` (a Spin wait), as exchanges for the
/// clock map, and their latencies.
fn exchanges(
    rt: &Runtime,
    clock: &Clock,
    count: usize,
    lat: Option<&mut Latency>,
) -> Vec<Exchange> {
    let mut out = Vec::with_capacity(count);
    let mut lat = lat;
    for i in 0..count as u64 {
        let t0 = clock.now();
        let c = rt
            .submit(ECHO.args(&i))
            .unwrap()
            .with_wait(WaitStrategy::Spin)
            .wait()
            .unwrap();
        let t1 = clock.now();
        if let Some(l) = lat.as_deref_mut() {
            l.record_ns(clock.between(t0, t1));
        }
        out.push(Exchange {
            host_send_ns: clock.ns(t0),
            host_recv_ns: clock.ns(t1),
            device_start_ns: c.device_start_ns,
            device_end_ns: c.device_end_ns,
        });
    }
    out
}

fn pkq_runtime() -> pkq::Result<Runtime> {
    Runtime::builder().workers(64).capacity(1024).build()
}

fn pkq_rows(args: &Args, rt: &Runtime, clock: &Clock) -> Vec<Raw> {
    let mut raws = Vec::new();
    let fallback = pkq::monitor_support().err();
    for (how, how_name) in STRATEGIES {
        for (ns, len_name) in LENGTHS {
            for waiters in WAITERS {
                let (wakes, cpu) = run_waiters(waiters, args.row_seconds, |_| {
                    let c = rt
                        .submit(SPIN.args(&ns))
                        .unwrap()
                        .with_wait(how)
                        .wait()
                        .unwrap();
                    (clock.ns(clock.now()), c.device_end_ns)
                });
                let mut extra = Map::new();
                if let (WaitStrategy::Monitor, Some(why)) = (how, fallback) {
                    extra.insert("fallback".into(), json!(format!("SpinThenYield: {why}")));
                }
                let plural = if waiters == 1 { "waiter" } else { "waiters" };
                raws.push(Raw {
                    name: format!("wait: {how_name}, {len_name}, {waiters} {plural}"),
                    wakes,
                    cpu_per_waiter: cpu,
                    extra,
                });
                println!("  {}", raws.last().unwrap().name);
            }
        }
    }
    raws
}

fn ck(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// A context of CUDA's with `flags`, the bench kernel loaded.
struct CudaSide {
    ctx: sys::CUcontext,
    kernel: sys::CUfunction,
}

// SAFETY: a context and a function handle may be used from any thread that
// makes the context current (each thread here does).
unsafe impl Send for CudaSide {}
// SAFETY: as above.
unsafe impl Sync for CudaSide {}

impl CudaSide {
    fn new(flags: u32) -> Self {
        let image = pkq_bench::floor::image().expect("the bench kernels");
        // SAFETY: plain driver calls on handles they create here; the
        // image is a fatbin the driver copies at load.
        unsafe {
            let mut dev = 0;
            ck(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet");
            let mut ctx = std::ptr::null_mut();
            ck(
                sys::cuCtxCreate_v4(&mut ctx, std::ptr::null_mut(), flags, dev),
                "cuCtxCreate",
            );
            let mut module = std::ptr::null_mut();
            ck(
                sys::cuModuleLoadData(&mut module, image.as_ptr().cast()),
                "cuModuleLoadData",
            );
            let mut kernel = std::ptr::null_mut();
            ck(
                sys::cuModuleGetFunction(&mut kernel, module, c"pkq_spin_stamp_kernel".as_ptr()),
                "cuModuleGetFunction",
            );
            Self { ctx, kernel }
        }
    }

    /// A waiter's stream, event and mapped end word on this context (made
    /// current on the calling thread).
    fn waiter(&self, event_flags: u32) -> CudaWaiter {
        // SAFETY: driver calls on this context, current from here on; the
        // mapped word lives until the context is destroyed.
        unsafe {
            ck(sys::cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent");
            let mut stream = std::ptr::null_mut();
            ck(
                sys::cuStreamCreate(
                    &mut stream,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                ),
                "cuStreamCreate",
            );
            let mut event = std::ptr::null_mut();
            ck(sys::cuEventCreate(&mut event, event_flags), "cuEventCreate");
            let mut host = std::ptr::null_mut();
            ck(
                sys::cuMemHostAlloc(&mut host, 64, sys::CU_MEMHOSTALLOC_DEVICEMAP),
                "cuMemHostAlloc",
            );
            let mut dev = 0;
            ck(
                sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0),
                "cuMemHostGetDevicePointer",
            );
            CudaWaiter {
                stream,
                event,
                end: host.cast(),
                end_dev: dev,
                kernel: self.kernel,
            }
        }
    }
}

impl Drop for CudaSide {
    fn drop(&mut self) {
        // SAFETY: every waiter of the context is done (the scope ended).
        unsafe { sys::cuCtxDestroy_v2(self.ctx) };
    }
}

// SAFETY: a waiter is made and used by one thread (the context current
// there); the mutex that holds it only keeps it for that thread.
unsafe impl Send for CudaWaiter {}

struct CudaWaiter {
    stream: sys::CUstream,
    event: sys::CUevent,
    end: *mut u64,
    end_dev: sys::CUdeviceptr,
    kernel: sys::CUfunction,
}

impl CudaWaiter {
    /// Launches the task of `ns` on the waiter's stream.
    fn launch(&self, ns: u64) {
        let mut ns = ns;
        let mut end = self.end_dev;
        let mut params = [
            (&raw mut ns).cast::<std::ffi::c_void>(),
            (&raw mut end).cast::<std::ffi::c_void>(),
        ];
        // SAFETY: the kernel takes (u64, u64*), which `params` point to;
        // the stream is this thread's, on the current context.
        unsafe {
            ck(
                sys::cuLaunchKernel(
                    self.kernel,
                    1,
                    1,
                    1,
                    32,
                    1,
                    1,
                    0,
                    self.stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
                "cuLaunchKernel",
            );
        }
    }

    /// Launch, record, event sync: the host ns when the waiter ran, and the
    /// kernel's end stamp.
    fn round(&self, clock: &Clock, ns: u64) -> (u64, u64) {
        self.launch(ns);
        // SAFETY: the event and stream are this thread's; the end word is
        // mapped memory the kernel wrote before it ended (read after the
        // sync).
        unsafe {
            ck(sys::cuEventRecord(self.event, self.stream), "cuEventRecord");
            ck(sys::cuEventSynchronize(self.event), "cuEventSynchronize");
            let ran = clock.ns(clock.now());
            (ran, std::ptr::read_volatile(self.end))
        }
    }
}

fn cuda_rows(args: &Args, clock: &Clock) -> (Vec<Raw>, Raw) {
    let mut raws = Vec::new();
    let mut host_func = None;
    for (ctx_flags, event_flags, flag_name) in CUDA_FLAGS {
        let side = CudaSide::new(ctx_flags);
        for (ns, len_name) in LENGTHS {
            for waiters in WAITERS {
                let per: Vec<Mutex<Option<CudaWaiter>>> =
                    (0..waiters).map(|_| Mutex::new(None)).collect();
                let (wakes, cpu) = run_waiters(waiters, args.row_seconds, |w| {
                    let mut slot = per[w].lock().unwrap();
                    let waiter = slot.get_or_insert_with(|| side.waiter(event_flags));
                    waiter.round(clock, ns)
                });
                let plural = if waiters == 1 { "waiter" } else { "waiters" };
                raws.push(Raw {
                    name: format!("cuda: {flag_name}, {len_name}, {waiters} {plural}"),
                    wakes,
                    cpu_per_waiter: cpu,
                    extra: Map::new(),
                });
                println!("  {}", raws.last().unwrap().name);
            }
        }
        if host_func.is_none() {
            host_func = Some(host_func_row(&side, clock, args.samples));
        }
    }
    (raws, host_func.unwrap())
}

/// `cuLaunchHostFunc` after a 2 µs kernel: the callback's start against
/// the kernel's end.
fn host_func_row(side: &CudaSide, clock: &Clock, samples: usize) -> Raw {
    struct Ran {
        clock: Clock,
        at: std::sync::atomic::AtomicU64,
    }
    extern "C" fn ran(user: *mut std::ffi::c_void) {
        // SAFETY: `user` is the `Ran` below, alive until the sync returns.
        let r = unsafe { &*(user as *const Ran) };
        r.at.store(
            r.clock.ns(r.clock.now()),
            std::sync::atomic::Ordering::Release,
        );
    }
    let waiter = side.waiter(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32);
    let r = Ran {
        clock: *clock,
        at: std::sync::atomic::AtomicU64::new(0),
    };
    let mut wakes = Vec::with_capacity(samples);
    for i in 0..samples + 20 {
        waiter.launch(2_000);
        // SAFETY: `r` outlives the stream sync below, after which the
        // function has run.
        unsafe {
            ck(
                sys::cuLaunchHostFunc(waiter.stream, Some(ran), (&raw const r).cast_mut().cast()),
                "cuLaunchHostFunc",
            );
            ck(
                sys::cuStreamSynchronize(waiter.stream),
                "cuStreamSynchronize",
            );
        }
        if i >= 20 {
            // SAFETY: written by the kernel before the sync returned.
            let end = unsafe { std::ptr::read_volatile(waiter.end) };
            wakes.push((r.at.load(std::sync::atomic::Ordering::Acquire), end));
        }
    }
    Raw {
        name: "cudaLaunchHostFunc".into(),
        wakes,
        cpu_per_waiter: f64::NAN,
        extra: Map::new(),
    }
}

/// The OS's own wake-up, the floor under `Park`: a thread parks, another
/// unparks it after each task length (spinning meanwhile, as the
/// completion thread does); latency from the unpark call to the parked
/// thread running.
fn os_wake_rows(args: &Args, clock: &Clock) -> Vec<Latency> {
    use std::sync::atomic::{AtomicU64, Ordering::*};
    const STOP: u64 = u64::MAX;
    let mut out = Vec::new();
    for (ns, len_name) in LENGTHS {
        let mut lat = Latency::new(&format!("os wake-up after {len_name} parked"));
        let until = Instant::now() + Duration::from_secs_f64(args.row_seconds / 2.0);
        let (woken, sent) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            let (woken, sent) = (&woken, &sent);
            // The sleeper: parks until the waker's round comes, then stamps
            // its own wake-up.
            let sleeper = s.spawn(move || {
                let mut round = 1;
                loop {
                    while sent.load(Acquire) < round {
                        std::thread::park();
                    }
                    if sent.load(Acquire) == STOP {
                        return;
                    }
                    woken.store(clock.now(), Release);
                    round += 1;
                }
            });
            for round in 1.. {
                woken.store(0, Relaxed);
                clock.spin_until(clock.ns(clock.now()) + ns);
                if Instant::now() >= until {
                    sent.store(STOP, Release);
                    sleeper.thread().unpark();
                    break;
                }
                let t0 = clock.now();
                sent.store(round, Release);
                sleeper.thread().unpark();
                let t1 = loop {
                    match woken.load(Acquire) {
                        0 => std::hint::spin_loop(),
                        t => break t,
                    }
                };
                lat.record_ns(clock.between(t0, t1));
            }
        });
        out.push(lat);
    }
    out
}

/// The callback row: `on_complete` after a 2 µs SPIN task.
fn callback_row(rt: &Runtime, clock: &Clock, samples: usize) -> Raw {
    let mut wakes = Vec::with_capacity(samples);
    for i in 0..samples + 20 {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let c = *clock;
        rt.submit(SPIN.args(&2_000u64))
            .unwrap()
            .on_complete(move |r| {
                let at = c.ns(c.now());
                let _ = tx.send((at, r.unwrap().device_end_ns));
            });
        let w = rx.recv().unwrap();
        if i >= 20 {
            wakes.push(w);
        }
    }
    Raw {
        name: "callback".into(),
        wakes,
        cpu_per_waiter: f64::NAN,
        extra: Map::new(),
    }
}

/// The async round trip of ECHO on a tokio current-thread executor: with
/// another task keeping the executor busy (it never sleeps), and alone
/// (the executor's thread sleeps until the completion thread's wake-up).
fn async_rows(rt: &Arc<Runtime>, clock: &Clock, samples: usize) -> Vec<Latency> {
    let mut out = Vec::new();
    for busy in [true, false] {
        let name = if busy {
            "async round trip"
        } else {
            "async round trip, idle executor"
        };
        let exec = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime");
        let lat = exec.block_on(async {
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let spinner = busy.then(|| {
                let stop = stop.clone();
                tokio::task::spawn(async move {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        tokio::task::yield_now().await;
                    }
                })
            });
            let mut lat = Latency::new(name);
            for i in 0..samples as u64 + 200 {
                let t0 = clock.now();
                let c = rt.submit(ECHO.args(&i)).unwrap().await.unwrap();
                let t1 = clock.now();
                assert_eq!(c.value, pkq::builtin::echo_fold(&[i, 0, 0, 0, 0, 0]));
                if i >= 200 {
                    lat.record_ns(clock.between(t0, t1));
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(s) = spinner {
                s.await.unwrap();
            }
            lat
        });
        out.push(lat);
    }
    out
}

fn quantile_us(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    (v[i] / 1000.0 * 1000.0).round() / 1000.0
}

/// A wake row: latency quantiles through `map`, and the CPU per waiter.
fn wake_row(raw: &Raw, map: &ClockMap, latency_fields: bool) -> Map<String, Value> {
    let mut lat: Vec<f64> = raw
        .wakes
        .iter()
        .map(|&(host, dev)| host as f64 - map.to_host_ns(dev))
        .collect();
    let mut m = Map::new();
    m.insert("name".into(), json!(raw.name));
    let (p50, p99) = if latency_fields {
        ("p50_us", "p99_us")
    } else {
        ("wake_p50_us", "wake_p99_us")
    };
    m.insert(p50.into(), json!(quantile_us(&mut lat, 0.5)));
    m.insert(p99.into(), json!(quantile_us(&mut lat, 0.99)));
    if !latency_fields {
        m.insert(
            "cpu_per_waiter".into(),
            json!((raw.cpu_per_waiter * 1000.0).round() / 1000.0),
        );
    }
    m.insert("samples".into(), json!(raw.wakes.len()));
    m.extend(raw.extra.clone());
    m
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let clock = Clock::calibrate();
    let info = pkq::device_info(0)?;
    println!(
        "{} ({}), pkq {}",
        info.name,
        info.driver,
        pkq::build_info::GIT_COMMIT
    );
    match pkq::monitor_support() {
        Ok(kind) => println!("Monitor: {kind:?}"),
        Err(why) => println!("Monitor falls back to SpinThenYield: {why}"),
    }
    // pkq's rows, the clock map's first round trips before and after them.
    let rt = Arc::new(pkq_runtime()?);
    // Untimed round trips first: the spin row is of a warm runtime.
    exchanges(&rt, &clock, 20_000, None);
    let mut spin = Latency::new("spin round trip");
    let mut fit = exchanges(&rt, &clock, 20_000, Some(&mut spin));
    println!("pkq rows:");
    let mut raws = pkq_rows(&args, &rt, &clock);
    let callback = callback_row(&rt, &clock, args.samples);
    let os_wakes = os_wake_rows(&args, &clock);
    let asyncs = async_rows(&rt, &clock, args.samples * 5);
    fit.extend(exchanges(&rt, &clock, 20_000, None));
    drop(rt);
    // CUDA's rows on contexts of their own, with no resident kernel beside
    // them (contexts on one GPU take turns).
    println!("CUDA rows:");
    let (cuda, host_func) = cuda_rows(&args, &clock);
    raws.extend(cuda);
    let rt = pkq_runtime()?;
    fit.extend(exchanges(&rt, &clock, 20_000, None));
    drop(rt);
    let map = ClockMap::fit(&fit, 256).ok_or("too few round trips to map the clocks")?;
    println!(
        "clock map: error bound {:.0} ns (median {:.0} ns)",
        map.error_bound_ns, map.median_bound_ns
    );

    let mut rows: Vec<Map<String, Value>> = vec![spin.row("us")];
    for raw in &raws {
        rows.push(wake_row(raw, &map, false));
    }
    for lat in &asyncs {
        rows.push(lat.row("us"));
    }
    for lat in &os_wakes {
        rows.push(lat.row("us"));
    }
    rows.push(wake_row(&callback, &map, true));
    rows.push(wake_row(&host_func, &map, true));
    let mut bound = Map::new();
    bound.insert("name".into(), json!("clock map error bound"));
    bound.insert("error_bound_ns".into(), json!(map.error_bound_ns.round()));
    bound.insert("median_bound_ns".into(), json!(map.median_bound_ns.round()));
    rows.push(bound);
    for r in &rows {
        println!("{}", Value::Object(r.clone()));
    }
    if let Some(path) = &args.svg {
        plot(path, &rows)?;
    }
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}

/// Wake p50 against CPU per waiter, one point per row, by mechanism.
fn plot(path: &PathBuf, rows: &[Map<String, Value>]) -> Result<(), Box<dyn std::error::Error>> {
    let points: Vec<(String, f64, f64)> = rows
        .iter()
        .filter_map(|r| {
            let name = r["name"].as_str()?;
            let wake = r.get("wake_p50_us")?.as_f64()?;
            let cpu = r.get("cpu_per_waiter")?.as_f64()?;
            Some((name.to_string(), cpu, wake))
        })
        .collect();
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = points.iter().map(|p| p.2).fold(1.0, f64::max) * 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Wake-up p50 against CPU per waiting thread",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..1.05, (0.1..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("CPU per waiter (fraction of a core)")
        .y_desc("wake-up p50 (µs)")
        .draw()?;
    let kinds = [
        ("wait: Spin,", RED),
        ("wait: SpinThenYield,", MAGENTA),
        ("wait: Park,", BLUE),
        ("wait: Monitor,", CYAN),
        ("cuda: spin,", BLACK),
        ("cuda: yield,", RGBColor(120, 120, 120)),
        ("cuda: blocking-sync,", GREEN),
    ];
    for (prefix, color) in kinds {
        let pts: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.0.starts_with(prefix))
            .map(|p| (p.1, p.2))
            .collect();
        chart
            .draw_series(
                pts.iter()
                    .map(|&(x, y)| Circle::new((x, y), 5, color.filled())),
            )?
            .label(prefix.trim_end_matches(','))
            .legend(move |(x, y)| Circle::new((x, y), 5, color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    println!("wrote {}", path.display());
    Ok(())
}
