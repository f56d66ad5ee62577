//! The main job: round-trip latency of pkq against the ways CUDA offers to
//! run a small piece of work, measured side by side in one process run:
//!
//! * raw floor: a bare one-word ping-pong with a resident kernel through
//!   mapped memory (what any design over mapped memory pays);
//! * cudarc launch + sync: launch an empty kernel, synchronize its stream;
//! * CUDA graph + sync: launch a one-node graph of the empty kernel, sync;
//! * pkq: submit a NOP, wait for its completion.
//!
//! Each variant runs alone (no other resident kernel polling), after its own
//! warm-up, from one thread pinned to one core.
//!
//! `cargo run --release --example latency -- --json benches/results/latency.json --svg benches/results/latency.svg`

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use pkq::cudarc::driver::{CudaContext, LaunchConfig, sys};
use pkq::cudarc::nvrtc::Ptx;
use pkq::{Op, Runtime};
use serde_json::json;
use support::{Latency, pin, plot_percentiles, report, write_json};

#[derive(Parser)]
#[command(about = "Round-trip latency: pkq vs kernel launch vs CUDA graph vs the raw floor")]
struct Args {
    /// Timed samples per variant.
    #[arg(long, default_value_t = 200_000)]
    samples: usize,
    /// Untimed warm-up runs per variant.
    #[arg(long, default_value_t = 20_000)]
    warmup: usize,
    /// CUDA device index.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Core to pin the measuring thread to (default: the last one).
    #[arg(long)]
    core: Option<usize>,
    /// pkq worker warps.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the latency distributions as SVG here.
    #[arg(long)]
    svg: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let core = pin(args.core);
    let info = pkq::device_info(args.device)?;
    println!(
        "{}: device {} ({}), driver {}, pkq {} ({} samples per variant, {} warm-up, thread pinned to core {})",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        args.device,
        info.name,
        info.driver,
        pkq::build_info::GIT_COMMIT,
        args.samples,
        args.warmup,
        core.map_or("none".into(), |c| c.to_string()),
    );
    let (w, n) = (args.warmup, args.samples);

    // Raw floor.
    let mut floor = pkq::floor::Floor::start(args.device)?;
    let floor_lat = Latency::measure("raw floor (1 poller)", w, n, || floor.round_trip());
    floor.stop()?;

    // cudarc launch + sync, and a CUDA graph + sync, of an empty kernel.
    let ctx = CudaContext::new(args.device)?;
    let stream = ctx.new_stream()?;
    let module = ctx.load_module(Ptx::from_binary(pkq::kernel_image()?.to_vec()))?;
    let empty = module.load_function("pkq_empty_kernel")?;
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let launch_lat = Latency::measure("cudarc launch + sync", w, n, || {
        // SAFETY: pkq_empty_kernel takes no parameters.
        unsafe { stream.launch_builder(&empty).launch(one) }?;
        stream.synchronize()
    });
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    // SAFETY: as above; captured, not run.
    unsafe { stream.launch_builder(&empty).launch(one) }?;
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))?
        .ok_or("stream capture produced no graph")?;
    graph.upload()?;
    let graph_lat = Latency::measure("CUDA graph + sync", w, n, || {
        graph.launch()?;
        stream.synchronize()
    });
    drop(graph);

    // pkq.
    let rt = Runtime::builder()
        .device(args.device)
        .workers(args.workers)
        .build()?;
    let mut submit_lat = Latency::new("pkq submit() call (host)");
    let mut pkq_lat = Latency::new("pkq round trip");
    for i in 0..w + n {
        let t0 = Instant::now();
        let ticket = rt.submit(Op::NOP, &())?;
        let t1 = Instant::now();
        ticket.wait()?;
        let t2 = Instant::now();
        if i >= w {
            submit_lat.record_ns((t1 - t0).as_nanos() as u64);
            pkq_lat.record_ns((t2 - t0).as_nanos() as u64);
        }
    }
    rt.shutdown()?;

    // What the device pays per mapped-memory operation, by its own clock.
    let costs = pkq::floor::device_costs(args.device, 20_000)?;

    // Report.
    let variants = [&pkq_lat, &floor_lat, &launch_lat, &graph_lat];
    println!(
        "\n{:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12}",
        "round trip (us)", "p50", "p90", "p99", "p99.9", "max", "p50 / pkq"
    );
    for l in variants {
        println!(
            "{:<28} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>11.2}x",
            l.name,
            l.quantile_us(0.5),
            l.quantile_us(0.9),
            l.quantile_us(0.99),
            l.quantile_us(0.999),
            l.hist.max() as f64 / 1e3,
            l.p50_us() / pkq_lat.p50_us(),
        );
    }
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "ns", "ns", "ns", "ns", "ns"
    );
    let s = &submit_lat.hist;
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>9} {:>9}",
        submit_lat.name,
        s.value_at_quantile(0.5),
        s.value_at_quantile(0.9),
        s.value_at_quantile(0.99),
        s.value_at_quantile(0.999),
        s.max()
    );
    println!(
        "\npkq p50 = {:.2}x cudarc launch + sync, {:.2}x CUDA graph + sync, {:.2}x the raw floor",
        pkq_lat.p50_us() / launch_lat.p50_us(),
        pkq_lat.p50_us() / graph_lat.p50_us(),
        pkq_lat.p50_us() / floor_lat.p50_us(),
    );

    println!("\ndevice-side costs (GPU clock, mean of 20000 each):");
    let cost_rows = [
        (
            "device: dependent read of mapped host memory",
            costs.dependent_read_ns,
        ),
        (
            "device: relaxed store to host memory (issue)",
            costs.relaxed_store_ns,
        ),
        ("device: store + fence.sc.sys", costs.store_fence_sys_ns),
        ("device: st.release.sys", costs.release_store_sys_ns),
        (
            "device: store + __threadfence (gpu scope)",
            costs.store_fence_gpu_ns,
        ),
    ];
    for (name, ns) in cost_rows {
        println!("  {name:<48} {ns:>8.1} ns");
    }

    let mut rows = Vec::new();
    for l in variants {
        let mut row = l.row("us");
        row.insert(
            "p50_vs_pkq_x".into(),
            json!(round3(l.p50_us() / pkq_lat.p50_us())),
        );
        row.insert(
            "p99_vs_pkq_x".into(),
            json!(round3(l.quantile_us(0.99) / pkq_lat.quantile_us(0.99))),
        );
        rows.push(row);
    }
    rows.push(submit_lat.row("ns"));
    for (name, ns) in cost_rows {
        rows.push(serde_json::Map::from_iter([
            ("name".to_string(), json!(name)),
            ("mean_ns".to_string(), json!((ns * 10.0).round() / 10.0)),
        ]));
    }
    let rep = report(&info, rows);
    if let Some(path) = &args.json {
        write_json(path, &rep);
    }
    if let Some(path) = &args.svg {
        let title = format!("Round-trip latency on {} ({} samples each)", info.name, n);
        plot_percentiles(path, &title, &variants);
    }
    Ok(())
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
