//! A fixed-rate control loop, pkq against its launch-based twins in one run.
//!
//! Each tick: a sensor frame (64 channels sampled 4 times, 1 KiB) in, an
//! 8-motor PID step plus a 64 x 64 observer on a controller whose state
//! stays on the device (`control_loop/control.cu`), 64 outputs
//! (256 B) back, the commands applied to a simulated plant on the host.
//! Mechanisms: pkq (`Lane::call_on_state_io`: one IO task on device
//! state, the latency setting), and the same step as an ordinary kernel:
//! cudaMemcpyAsync in + launch + cudaMemcpyAsync out + stream sync
//! (`launch`), and those three as a CUDA graph + sync (`graph`). A fourth
//! row, `host floor`, touches no GPU: each tick only spins for as long as
//! pkq's median tick at that rate (its commands are zero). Its misses are
//! what this machine's own interruptions of a spinning thread cost a loop
//! of that tick length.
//!
//! A tick is due every period; the loop spins until it is due (the thread
//! owns its core), then builds the frame. Latency is from the frame being
//! ready to the commands applied; jitter is how late the tick started; a
//! miss is a tick whose commands were applied later than 20% of the period
//! after the tick was due (a late start counts).
//!
//! `cargo run --release -p pkq-bench --bin control_loop -- --json pkq-bench/results/control_loop.json --svg pkq-bench/results/control_loop.svg`
//!
//! With `--trace FILE`, pkq's run at the highest rate is traced
//! (`pkq::trace`; Perfetto's format, or Chrome's JSON for a name ending in
//! `.json`), and each missed tick is put down to the segment of the tick
//! that took the most time: the late start, the host's own work (building
//! the frame, applying the commands), the dispatch (submit to device
//! start), the handler, or the completion's way back (device end to seen).
//! The counts go into the pkq row (`misses_by_segment`); `--trace-svg`
//! draws the few milliseconds around the worst miss, the misses marked:
//!
//! `control_loop --mechanisms pkq --rates 10 --ticks 1000000 --trace control_loop.pftrace --trace-svg pkq-bench/results/control_loop_trace.svg --json pkq-bench/results/control_loop_trace.json`

mod control;

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use control::{CtlState, FRAME_BYTES, Frame, OUT_BYTES, Outputs, Plant};
use pkq::cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg, result, sys};
use pkq::cudarc::nvrtc::Ptx;
use pkq_bench::support::{
    Clock, Latency, at_least_one, one_stream_context, positive, report, start, trim, write_json,
};
use plotters::prelude::*;
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "a fixed-rate control loop: pkq vs launch + memcpy + sync vs a CUDA graph")]
struct Args {
    /// Loop rates in kHz.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 10.0], value_parser = positive)]
    rates: Vec<f64>,
    /// Ticks per rate and mechanism, one per rate (the last repeats).
    #[arg(long, value_delimiter = ',', default_values_t = [20_000usize, 1_000_000], value_parser = at_least_one)]
    ticks: Vec<usize>,
    /// The mechanisms to run, of pkq, launch, graph, host (the host floor:
    /// padded to pkq's median tick at the rate, or to 8 µs without pkq).
    #[arg(long, value_delimiter = ',', default_values_t = ["pkq".to_string(), "launch".to_string(), "graph".to_string(), "host".to_string()])]
    mechanisms: Vec<String>,
    /// The core the loop's thread is pinned to (default: the last).
    #[arg(long)]
    core: Option<usize>,
    #[arg(long)]
    json: Option<PathBuf>,
    /// Latency over time at the highest rate.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Trace pkq's run at the highest rate into this file.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// With `--trace`: a picture of the milliseconds around the worst miss.
    #[arg(long)]
    trace_svg: Option<PathBuf>,
}

/// Ticks checked against the host's reference at the start of each run.
const CHECKED: u64 = 2_000;
/// Unpaced, unrecorded ticks before each run.
const WARMUP: u64 = 2_000;
/// The host floor's tick where no pkq run of its rate gives one.
const HOST_PAD_NS: u64 = 8_000;

/// One run of the loop: every tick's latency and start delay, in ns.
struct Run {
    name: String,
    latency_ns: Vec<u32>,
    jitter_ns: Vec<u32>,
    /// From the tick's due time to its commands applied: a miss is over a
    /// fifth of the period.
    due_ns: Vec<u32>,
    /// The task's time on the device, where the mechanism reports it.
    device_ns: Vec<u32>,
    period_ns: u64,
}

impl Run {
    /// The median tick, from the frame ready to the commands applied.
    fn median_ns(&self) -> u64 {
        let mut l = self.latency_ns.clone();
        l.sort_unstable();
        l.get(l.len() / 2).map_or(0, |&v| u64::from(v))
    }

    fn misses(&self) -> usize {
        let bound = self.period_ns / 5;
        self.due_ns
            .iter()
            .filter(|&&l| u64::from(l) > bound)
            .count()
    }

    fn row(&self) -> Map<String, Value> {
        let mut lat = Latency::new(&self.name);
        for &l in &self.latency_ns {
            lat.record_ns(u64::from(l));
        }
        let mut jit = Latency::new("jitter");
        for &j in &self.jitter_ns {
            jit.record_ns(u64::from(j));
        }
        let mut m = lat.row("us");
        m.remove("samples");
        m.insert("ticks".into(), json!(self.latency_ns.len()));
        m.insert("misses".into(), json!(self.misses()));
        m.insert(
            "deadline_us".into(),
            json!(self.period_ns as f64 / 5.0 / 1e3),
        );
        m.insert("jitter_p50_us".into(), json!(jit.quantile_us(0.5)));
        m.insert("jitter_p99_us".into(), json!(jit.quantile_us(0.99)));
        m.insert("jitter_max_us".into(), json!(jit.hist.max() as f64 / 1e3));
        if !self.device_ns.is_empty() {
            let mut d = self.device_ns.clone();
            d.sort_unstable();
            m.insert(
                "device_p50_us".into(),
                json!(f64::from(d[d.len() / 2]) / 1e3),
            );
        }
        // Where in the run the misses fell, by tenths.
        let bound = self.period_ns / 5;
        let tenth = self.due_ns.len().div_ceil(10).max(1);
        let by_tenth: Vec<usize> = self
            .due_ns
            .chunks(tenth)
            .map(|c| c.iter().filter(|&&l| u64::from(l) > bound).count())
            .collect();
        m.insert("misses_by_tenth".into(), json!(by_tenth));
        m
    }
}

/// Keeps a finished run with its row, printed as it finishes.
fn finish(runs: &mut Vec<(f64, Run, Map<String, Value>)>, rate: f64, run: Run) {
    let row = run.row();
    print_row(&row);
    runs.push((rate, run, row));
}

/// One line of the table: a run's row.
fn print_row(m: &Map<String, Value>) {
    let us = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:<34}{:>9}{:>8.2}{:>8.2}{:>8.2}{:>9.2}{:>8}{:>10.2}",
        m["name"].as_str().unwrap_or("?"),
        m["ticks"].as_u64().unwrap_or(0),
        us("p50_us"),
        us("p99_us"),
        us("p99_9_us"),
        us("max_us"),
        m["misses"].as_u64().unwrap_or(0),
        us("jitter_p99_us"),
    );
}

/// Runs `ticks` ticks at `rate_khz` of `step` (frame in, outputs out),
/// checking the first `checked` against the host's reference.
fn run_loop(
    name: String,
    clock: &Clock,
    rate_khz: f64,
    ticks: u64,
    checked: u64,
    mut step: impl FnMut(&Frame, &mut Outputs) -> Result<u64, Box<dyn std::error::Error>>,
) -> Result<Run, Box<dyn std::error::Error>> {
    let period_ns = (1e6 / rate_khz).round() as u64;
    let dt = period_ns as f32 * 1e-9;
    let mut plant = Plant::new(11);
    let mut reference = CtlState::new(dt, 5);
    let mut frame: Frame = [0.0; control::CHANNELS * control::SAMPLES];
    let mut out: Outputs = [0.0; control::CHANNELS];
    let mut worst = 0.0f32;
    // The check runs unpaced, first: the device's state follows the
    // reference's for the first `checked` ticks.
    for _ in 0..checked {
        plant.frame(&mut frame);
        step(&frame, &mut out)?;
        let want = reference.step(&frame).expect("finite frames");
        worst = worst.max(control::max_error(&out, &want));
        plant.apply(&out, dt);
    }
    if worst > 1e-3 {
        return Err(format!("{name}: outputs differ from the reference by {worst:e}").into());
    }
    for _ in 0..WARMUP {
        plant.frame(&mut frame);
        step(&frame, &mut out)?;
        plant.apply(&out, dt);
    }
    let mut latency_ns = Vec::with_capacity(ticks as usize);
    let mut jitter_ns = Vec::with_capacity(ticks as usize);
    let mut due_ns = Vec::with_capacity(ticks as usize);
    let mut device_ns = Vec::new();
    let origin = clock.ns(clock.now()) + period_ns;
    for k in 0..ticks {
        let due = origin + k * period_ns;
        let now = clock.spin_until(due);
        jitter_ns.push((clock.ns(now) - due).min(u64::from(u32::MAX)) as u32);
        plant.frame(&mut frame);
        let t0 = clock.now();
        let device = step(&frame, &mut out)?;
        plant.apply(&out, dt);
        let t1 = clock.now();
        latency_ns.push(clock.between(t0, t1).min(u64::from(u32::MAX)) as u32);
        due_ns.push((clock.ns(t1) - due).min(u64::from(u32::MAX)) as u32);
        if device != 0 {
            device_ns.push(device.min(u64::from(u32::MAX)) as u32);
        }
    }
    if !plant.position.iter().all(|p| p.is_finite()) {
        return Err(format!("{name}: the plant diverged").into());
    }
    Ok(Run {
        name,
        latency_ns,
        jitter_ns,
        due_ns,
        device_ns,
        period_ns,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if control::IMAGE.is_empty() {
        println!("skipped: pkq-bench was built without nvcc, so control.cu was not compiled");
        return Ok(());
    }
    let ticks_at = |i: usize| args.ticks[i.min(args.ticks.len() - 1)] as u64;
    let (clock, info) = start(args.core, 0)?;
    println!(
        "{:<34}{:>9}{:>8}{:>8}{:>8}{:>9}{:>8}{:>10}",
        "tick to commands (µs)", "ticks", "p50", "p99", "p99.9", "max", "misses", "jit p99"
    );

    // The launch-based twins first: nothing that may wait for the context
    // runs once the resident kernel does.
    let ctx = one_stream_context()?;
    let stream = ctx.new_stream()?;
    let kernel = ctx
        .load_module(Ptx::from_binary(control::IMAGE.to_vec()))?
        .load_function(control::LAUNCHED)?;
    // SAFETY: page-locked buffers, uninitialized: the frame's is written
    // before every copy in, the outputs' read only after a copy out wrote
    // it; both by this thread alone, while no copy that uses them is in
    // flight (each tick syncs).
    let (mut host_frame, host_out) = unsafe {
        (
            ctx.alloc_pinned::<f32>(control::CHANNELS * control::SAMPLES)?,
            ctx.alloc_pinned::<f32>(control::CHANNELS)?,
        )
    };
    let dev_frame = stream.alloc_zeros::<f32>(control::CHANNELS * control::SAMPLES)?;
    let dev_out = stream.alloc_zeros::<f32>(control::CHANNELS)?;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    // Each run with its row, printed as it finishes.
    let mut runs: Vec<(f64, Run, Map<String, Value>)> = Vec::new();
    for (i, &rate) in args.rates.iter().enumerate() {
        let dt = (1e6 / rate).round() as f32 * 1e-9;
        for graph in [false, true] {
            if !args
                .mechanisms
                .iter()
                .any(|m| m == if graph { "graph" } else { "launch" })
            {
                continue;
            }
            let state = stream.clone_htod(bytemuck::bytes_of(&CtlState::new(dt, 5)))?;
            let (state_p, frame_p, out_p) = {
                use pkq::cudarc::driver::DevicePtr;
                (
                    state.device_ptr(&stream).0,
                    dev_frame.device_ptr(&stream).0,
                    dev_out.device_ptr(&stream).0,
                )
            };
            let pinned_frame = host_frame.as_mut_ptr()? as *const u8;
            let pinned_out = host_out.as_ptr()? as *mut u8;
            // The tick on the stream: the frame in, the step, the outputs out.
            let enqueue = |s: &Arc<CudaStream>| -> Result<(), pkq::cudarc::driver::DriverError> {
                // SAFETY: the pinned buffers and device buffers of the
                // sizes copied, used by nothing else while in flight;
                // ctl_kernel(ctl_state*, const float*, float*) with one warp.
                unsafe {
                    result::memcpy_htod_async(
                        frame_p,
                        std::slice::from_raw_parts(pinned_frame, FRAME_BYTES),
                        s.cu_stream(),
                    )?;
                    s.launch_builder(&kernel)
                        .arg(&state_p)
                        .arg(&frame_p)
                        .arg(&out_p)
                        .launch(cfg)?;
                    result::memcpy_dtoh_async(
                        std::slice::from_raw_parts_mut(pinned_out, OUT_BYTES),
                        out_p,
                        s.cu_stream(),
                    )
                }
            };
            let graph_exec = if graph {
                stream
                    .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
                enqueue(&stream)?;
                let g = stream
                    .end_capture(sys::CUgraphInstantiate_flags(0))?
                    .ok_or("stream capture produced no graph")?;
                g.upload()?;
                Some(g)
            } else {
                None
            };
            let name = format!(
                "control loop {} kHz, {}",
                trim(rate),
                if graph { "graph" } else { "launch" }
            );
            let run = run_loop(name, &clock, rate, ticks_at(i), CHECKED, |frame, out| {
                // SAFETY: as above: no copy is in flight between ticks.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        frame.as_ptr() as *const u8,
                        pinned_frame as *mut u8,
                        FRAME_BYTES,
                    );
                }
                match &graph_exec {
                    Some(g) => g.launch()?,
                    None => enqueue(&stream)?,
                }
                stream.synchronize()?;
                // SAFETY: the copy out completed (synchronized above).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        pinned_out,
                        out.as_mut_ptr() as *mut u8,
                        OUT_BYTES,
                    );
                }
                Ok(0)
            })?;
            drop(graph_exec);
            finish(&mut runs, rate, run);
            drop(state);
        }
    }
    stream.synchronize()?;

    // pkq: the latency setting, one IO task on device state per tick.
    let top = args.rates.iter().copied().fold(f64::MIN, f64::max);
    let traced = args.trace.is_some() || args.trace_svg.is_some();
    let top_ticks = ticks_at(args.rates.iter().position(|&r| r == top).unwrap_or(0));
    let rt = control::runtime(traced.then(|| (top_ticks + CHECKED + WARMUP) as usize))?;
    rt.set_tracing(false)?;
    let pkq_rates = if args.mechanisms.iter().any(|m| m == "pkq") {
        &args.rates[..]
    } else {
        &[]
    };
    for (i, &rate) in pkq_rates.iter().enumerate() {
        let dt = (1e6 / rate).round() as f32 * 1e-9;
        let mut state = rt.state(&[CtlState::new(dt, 5)])?;
        let mut stepped = 0u64;
        let name = format!("control loop {} kHz, pkq", trim(rate));
        let trace_this = traced && rate == top;
        rt.set_tracing(trace_this)?;
        let run = run_loop(name, &clock, rate, ticks_at(i), CHECKED, |frame, out| {
            let (c, bytes) =
                rt.call_on_state_io(&control::STEP, &mut state, &(), bytemuck::bytes_of(frame))?;
            stepped += 1;
            if c.value != stepped || bytes.len() != OUT_BYTES {
                return Err(format!(
                    "tick {stepped}: the device counted {} ticks and sent {} bytes",
                    c.value,
                    bytes.len()
                )
                .into());
            }
            bytemuck::bytes_of_mut(out).copy_from_slice(&bytes);
            Ok(c.device_time().as_nanos() as u64)
        })?;
        rt.set_tracing(false)?;
        if trace_this {
            let trace = rt.trace();
            let mut row = run.row();
            explain_misses(&trace, &run, &args, &mut row)?;
            print_row(&row);
            runs.push((rate, run, row));
        } else {
            finish(&mut runs, rate, run);
        }
    }
    rt.shutdown()?;

    // The host floor: a tick that only spins for pkq's median tick of the
    // same rate, with no GPU in the loop (and commands of zero).
    if args.mechanisms.iter().any(|m| m == "host") {
        for (i, &rate) in args.rates.iter().enumerate() {
            let pad_ns = runs
                .iter()
                .find(|(r, run, _)| *r == rate && run.name.ends_with("pkq"))
                .map_or(HOST_PAD_NS, |(_, run, _)| run.median_ns());
            let name = format!("control loop {} kHz, host floor", trim(rate));
            // Nothing to check: the tick computes nothing.
            let run = run_loop(name, &clock, rate, ticks_at(i), 0, |_, out| {
                let t0 = clock.now();
                *out = [0.0; control::CHANNELS];
                clock.spin_until(clock.ns(t0) + pad_ns);
                Ok(0)
            })?;
            finish(&mut runs, rate, run);
        }
    }

    // Rows: per rate, pkq, launch, graph, host floor.
    let mut order: Vec<&(f64, Run, Map<String, Value>)> = runs.iter().collect();
    let rank = |n: &str| {
        ["pkq", "launch", "graph", "host floor"]
            .iter()
            .position(|m| n.ends_with(m))
    };
    order.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(rank(&a.1.name).cmp(&rank(&b.1.name)))
    });
    println!();
    println!(
        "{:<34}{:>9}{:>8}{:>8}{:>8}{:>9}{:>8}{:>10}",
        "tick to commands (µs)", "ticks", "p50", "p99", "p99.9", "max", "misses", "jit p99"
    );
    for (.., row) in &order {
        print_row(row);
    }
    if let Some(path) = &args.json {
        let rows = order.iter().map(|(.., row)| row.clone()).collect();
        write_json(path, &report(&info, rows));
    }
    if let Some(path) = &args.svg {
        let top = args.rates.iter().copied().fold(f64::MIN, f64::max);
        let series: Vec<&Run> = order
            .iter()
            .filter(|(r, ..)| *r == top)
            .map(|(_, run, _)| run)
            .collect();
        plot(path, top, &series)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The segments of a tick, in the order they happen.
const SEGMENTS: [&str; 5] = [
    "late start",
    "host",
    "dispatch",
    "handler",
    "completion seen",
];

/// Puts each missed tick of `run` (pkq's, traced) down to its largest
/// segment; writes the trace (and its picture) where `args` says; adds the
/// counts (and each segment's median over missed and over all ticks) to
/// `row`.
fn explain_misses(
    trace: &pkq::trace::Trace,
    run: &Run,
    args: &Args,
    row: &mut Map<String, Value>,
) -> Result<(), Box<dyn std::error::Error>> {
    let ticks = run.latency_ns.len();
    let records = trace.records();
    if trace.dropped() != 0 || records.len() < ticks {
        return Err(format!(
            "the trace kept {} records and dropped {}: fewer than the {ticks} ticks",
            records.len(),
            trace.dropped()
        )
        .into());
    }
    // One task a tick on one thread: the last `ticks` records, by submit
    // time, are the paced ticks in order.
    let paced = &records[records.len() - ticks..];
    let bound = run.period_ns / 5;
    // Per tick, each segment's nanoseconds.
    let segments = |k: usize| -> Option<[f64; 5]> {
        let r = &paced[k];
        let s = trace.segments(r)?;
        let round = r.seen_ns - r.submit_ns;
        Some([
            f64::from(run.jitter_ns[k]),
            // The rest of the tick: the frame built, the submit and wait
            // calls outside the round trip, the commands applied.
            f64::from(run.due_ns[k]) - f64::from(run.jitter_ns[k]) - round,
            s.dispatch_ns,
            s.handler_ns,
            s.seen_ns,
        ])
    };
    let missed: Vec<usize> = (0..ticks)
        .filter(|&k| u64::from(run.due_ns[k]) > bound)
        .collect();
    let mut counts = [0usize; 5];
    let mut per_missed: [Vec<f64>; 5] = Default::default();
    for &k in &missed {
        let seg = segments(k).ok_or("the trace has no clock map")?;
        let top = (0..5).max_by(|&a, &b| seg[a].total_cmp(&seg[b])).unwrap();
        counts[top] += 1;
        for (v, s) in per_missed.iter_mut().zip(seg) {
            v.push(s);
        }
    }
    let mut per_all: [Vec<f64>; 5] = Default::default();
    for k in (0..ticks).step_by((ticks / 100_000).max(1)) {
        if let Some(seg) = segments(k) {
            for (v, s) in per_all.iter_mut().zip(seg) {
                v.push(s);
            }
        }
    }
    let median_us = |v: &mut Vec<f64>| -> Value {
        if v.is_empty() {
            return Value::Null;
        }
        v.sort_by(f64::total_cmp);
        json!((v[v.len() / 2] / 10.0).round() / 100.0)
    };
    let mut by = Map::new();
    let mut missed_median = Map::new();
    let mut all_median = Map::new();
    for (i, name) in SEGMENTS.iter().enumerate() {
        by.insert(name.to_string(), json!(counts[i]));
        missed_median.insert(name.to_string(), median_us(&mut per_missed[i]));
        all_median.insert(name.to_string(), median_us(&mut per_all[i]));
    }
    row.insert("misses_by_segment".into(), Value::Object(by));
    row.insert("missed_segment_p50_us".into(), Value::Object(missed_median));
    row.insert("segment_p50_us".into(), Value::Object(all_median));
    let map = trace.clock_map().ok_or("the trace has no clock map")?;
    row.insert("clock_bound_ns".into(), json!(map.error_bound_ns.round()));
    row.insert("trace_records".into(), json!(records.len()));
    println!(
        "misses by segment: {}",
        SEGMENTS
            .iter()
            .zip(counts)
            .map(|(n, c)| format!("{n} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(path) = &args.trace {
        trace.write(path)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.trace_svg {
        // The worst miss (or the worst tick, with none), and a few
        // milliseconds around it.
        let worst = missed
            .iter()
            .copied()
            .max_by_key(|&k| run.due_ns[k])
            .or_else(|| (0..ticks).max_by_key(|&k| run.due_ns[k]))
            .unwrap_or(0);
        let at = paced[worst].submit_ns;
        let half = 8.0 * run.period_ns as f64;
        let marks: Vec<(f64, String)> = missed
            .iter()
            .map(|&k| {
                let seg = segments(k).unwrap_or_default();
                let top = (0..5).max_by(|&a, &b| seg[a].total_cmp(&seg[b])).unwrap();
                (
                    paced[k].submit_ns,
                    format!(
                        "missed by {:.0} µs: {}",
                        (f64::from(run.due_ns[k]) - bound as f64) / 1e3,
                        SEGMENTS[top]
                    ),
                )
            })
            .collect();
        let title = format!(
            "{}: {} ms around its worst tick, from its trace (misses marked)",
            run.name,
            trim(2.0 * half / 1e6)
        );
        std::fs::write(path, trace.to_svg(at - half, at + half, &marks, &title))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Latency over time: each mechanism's median and worst tick per window of
/// a tenth of a second (log scale), with the deadline.
fn plot(path: &PathBuf, rate_khz: f64, runs: &[&Run]) -> Result<(), Box<dyn std::error::Error>> {
    let window = ((rate_khz * 100.0) as usize).max(1);
    let summarize = |run: &Run| -> Vec<(f64, f64, f64)> {
        run.latency_ns
            .chunks(window)
            .enumerate()
            .map(|(w, c)| {
                let mut v = c.to_vec();
                v.sort_unstable();
                let t = (w * window) as f64 * run.period_ns as f64 / 1e9;
                (
                    t,
                    v[v.len() / 2] as f64 / 1e3,
                    *v.last().unwrap() as f64 / 1e3,
                )
            })
            .collect()
    };
    // Per mechanism: (window start s, median µs, worst µs) per window.
    type Windows = Vec<(f64, f64, f64)>;
    let data: Vec<(String, Windows)> = runs
        .iter()
        .map(|r| (r.name.clone(), summarize(r)))
        .collect();
    let t_max = data
        .iter()
        .flat_map(|(_, p)| p.last().map(|x| x.0))
        .fold(0.1, f64::max);
    let deadline = runs.first().map_or(1.0, |r| r.period_ns as f64 / 5.0 / 1e3);
    let hi = data
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.2))
        .fold(deadline, f64::max);
    let lo = data
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(f64::MAX, f64::min)
        .min(deadline);
    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "control loop at {} kHz: tick to commands over time (median and worst per {} ms)",
                trim(rate_khz),
                trim(window as f64 / rate_khz)
            ),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..t_max, (lo * 0.8..hi * 1.3).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("latency (µs, log scale)")
        .draw()?;
    let colors = [BLUE, RED, GREEN, MAGENTA];
    for (i, (name, pts)) in data.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.2)),
                color.mix(0.35).stroke_width(1),
            ))?
            .label(format!("{name}: worst"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.35)));
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.1)),
                color.stroke_width(2),
            ))?
            .label(format!("{name}: median"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, deadline), (t_max, deadline)],
            BLACK.stroke_width(1),
        ))?
        .label("deadline (20% of the period)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
