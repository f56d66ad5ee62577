//! Where a kernel launch beats pkq's GEMV op: `y = A x` for square sizes
//! from 8 to 256, as a task of the resident kernel (one warp) and as an
//! ordinary kernel launch + stream sync (one warp per row, the same
//! arithmetic), in one process run. Writes JSON (p50..max per size and
//! variant, and the crossover) and an SVG of p50 against size.
//!
//! `cargo run --release -p pkq-bench --bin gemv_crossover -- --json pkq-bench/results/gemv_crossover.json --svg pkq-bench/results/gemv_crossover.svg`

use pkq::Submit;
use std::path::PathBuf;

use clap::Parser;
use pkq::Runtime;
use pkq::builtin::{GEMV, GemvArgs};
use pkq::cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use pkq_bench::support::{Latency, one_stream_context, plot_by_size, report, start, write_json};
use serde_json::json;

#[derive(Parser)]
#[command(about = "pkq's GEMV op vs an ordinary GEMV kernel launch, by size")]
struct Args {
    #[arg(long, default_value_t = 5_000)]
    samples: usize,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // pkq-bench's module first, before any pkq runtime starts (see
    // pkq_bench::floor).
    pkq_bench::floor::load(0)?;
    let (clock, info) = start(None, 0)?;
    // Buffers, launched kernels and their stream come first: nothing that
    // may wait for the context runs once the resident kernel does.
    let ctx = one_stream_context()?;
    let stream = ctx.new_stream()?;
    let kernel = pkq_bench::floor::function(0, "pkq_gemv_kernel")?;
    let dims = [8usize, 16, 32, 64, 128, 192, 256];
    let mut bufs = Vec::new();
    for &d in &dims {
        let a: Vec<f32> = (0..d * d).map(|i| (i % 7) as f32 * 0.25).collect();
        let x: Vec<f32> = (0..d).map(|i| (i % 5) as f32).collect();
        bufs.push((
            d,
            stream.clone_htod(&a)?,
            stream.clone_htod(&x)?,
            stream.alloc_zeros::<f32>(d)?,
            stream.alloc_zeros::<f32>(d)?,
        ));
    }
    let launch =
        |a: &_, x: &_, y: &mut _, d: u32| -> Result<(), pkq::cudarc::driver::DriverError> {
            let cfg = LaunchConfig {
                grid_dim: (d.div_ceil(8), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: pkq_gemv_kernel(const float*, const float*, float*, u32, u32)
            // over d x d, d and d floats.
            unsafe {
                stream
                    .launch_builder(&kernel)
                    .arg(a)
                    .arg(x)
                    .arg(y)
                    .arg(&d)
                    .arg(&d)
                    .launch(cfg)?;
            }
            Ok(())
        };
    {
        let (d, a, x, _, y) = &mut bufs[0];
        launch(a, x, y, *d as u32)?;
        stream.synchronize()?;
    }

    let rt = Runtime::builder().build()?;
    let mut rows = Vec::new();
    let mut series: Vec<(String, Vec<(f64, f64)>)> = vec![
        (
            "pkq GEMV, safe call (syncs the buffers' stream)".into(),
            vec![],
        ),
        ("pkq GEMV task (call_unchecked + wait)".into(), vec![]),
        ("kernel launch + stream sync".into(), vec![]),
    ];
    let mut crossover = None;
    println!(
        "\n{:<52}{:>8}{:>8}{:>9}",
        "y = A x (µs)", "p50", "p99", "max"
    );
    for (d, a, x, y_pkq, y_launch) in bufs.iter_mut() {
        let d = *d;
        let safe = Latency::measure(
            &format!("pkq GEMV safe call, {d}x{d}"),
            &clock,
            300,
            args.samples,
            || rt.gemv(&*a, d, d, &*x, &mut *y_pkq),
        );
        let (ap, _ga) = a.device_ptr(&stream);
        let (xp, _gx) = x.device_ptr(&stream);
        let (yp, _gy) = y_pkq.device_ptr_mut(&stream);
        let g = GemvArgs {
            a: ap,
            x: xp,
            y: yp,
            rows: d as u32,
            cols: d as u32,
        };
        let task = Latency::measure(
            &format!("pkq GEMV task, {d}x{d}"),
            &clock,
            300,
            args.samples,
            || {
                // SAFETY: the buffers above, of d x d, d and d floats, stay
                // borrowed (their guards alive) while each task runs.
                unsafe { rt.submit(GEMV.args(&g).unchecked()) }
                    .and_then(|t| t.wait())
                    .map(drop)
            },
        );
        drop((_ga, _gx, _gy));
        let launched = Latency::measure(
            &format!("kernel launch + sync, {d}x{d}"),
            &clock,
            300,
            args.samples,
            || {
                launch(&*a, &*x, &mut *y_launch, d as u32)?;
                stream.synchronize()
            },
        );
        let (got, want) = (stream.clone_dtoh(y_pkq)?, stream.clone_dtoh(y_launch)?);
        assert_eq!(got, want, "{d}x{d}: the op and the kernel disagree");
        for (i, l) in [&safe, &task, &launched].into_iter().enumerate() {
            println!(
                "{:<52}{:>8.2}{:>8.2}{:>9.2}",
                l.name,
                l.p50_us(),
                l.quantile_us(0.99),
                l.hist.max() as f64 / 1e3
            );
            let mut row = l.row("us");
            row.insert("dim".into(), json!(d));
            rows.push(row);
            series[i].1.push((d as f64, l.p50_us()));
        }
        if crossover.is_none() && launched.p50_us() < task.p50_us() {
            crossover = Some(d);
        }
    }
    rt.shutdown()?;
    match crossover {
        Some(d) => println!("\nthe launch wins from {d}x{d} (p50 of the task vs launch + sync)"),
        None => println!("\nthe pkq task wins at every size up to 256x256"),
    }
    let mut summary = serde_json::Map::new();
    summary.insert(
        "name".into(),
        json!("crossover: smallest size where launch + sync beats the task (p50)"),
    );
    summary.insert("crossover_dim".into(), json!(crossover));
    rows.push(summary);
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    if let Some(path) = &args.svg {
        plot_by_size(
            path,
            "y = A x, A square: p50 by size",
            "rows = columns",
            264.0,
            false,
            &series,
        )?;
    }
    Ok(())
}
