//! The same round trip (a NOP task submitted and waited for, on a default
//! runtime) from Rust, C, C++ and Python (sync and asyncio), beside a CuPy
//! `RawKernel` launch + stream sync and a PyTorch op + stream sync: what a
//! Python user would otherwise pick. Each language runs in a fresh process
//! of its own (Rust's: this program started again), one after another in
//! an order drawn afresh each round, for `--rounds` rounds (their samples
//! pooled), its thread pinned to the last core once its runtime runs, timed
//! by its language's monotonic clock. One run, on a GPU host with the
//! programs the GPU bundle builds (`scripts/gpu-bundle.sh`) and the wheel
//! installed:
//!
//!     bindings --c round_trip_c --cpp round_trip_cpp \
//!       --python "python3 pkq-py/bench/round_trip.py" \
//!       --json pkq-bench/results/bindings.json --svg pkq-bench/results/bindings.svg
//!
//! The C and C++ programs (`pkq-bench/bindings/`) take `SAMPLES WARMUP OUT`
//! and write each sample's nanoseconds to OUT, one a line; the Python script
//! takes `--samples --warmup --raw DIR` and writes one such file per row it
//! measured (`DIR/<row>.txt`, the row named in its first line `# <name>`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use clap::Parser;
use pkq::builtin::NOP;
use pkq::{Runtime, Submit};
use pkq_bench::rng::Rng;
use pkq_bench::support::{Latency, at_least_one, pin, plot_percentiles, report, write_json};
use serde_json::json;

#[derive(Parser)]
#[command(about = "the round trip from Rust, C, C++ and Python, beside CuPy and PyTorch")]
struct Args {
    /// Timed round trips per language and round.
    #[arg(long, default_value_t = 4_000, value_parser = at_least_one)]
    samples: usize,
    /// Untimed round trips first, per language and round: a fresh
    /// process's driver settles over the first tens of milliseconds.
    #[arg(long, default_value_t = 20_000)]
    warmup: usize,
    /// Rounds over the languages (their samples pooled per row), each in
    /// an order of its own (a seeded shuffle: every language comes first,
    /// last, and after each other one alike): drift of the machine over the
    /// run, what a process leaves behind for the next, and what differs
    /// between one process and the next (where its rings land) reach every
    /// row alike. One process's p50 spreads over more than the languages
    /// differ by (each row says how far: `process_p50_min_us`,
    /// `process_p50_max_us`), so many short rounds pin a row's p50 down
    /// better than a few long ones.
    #[arg(long, default_value_t = 48, value_parser = at_least_one)]
    rounds: usize,
    /// The C program (pkq-bench/bindings/round_trip.c, built).
    #[arg(long)]
    c: PathBuf,
    /// The C++ program (pkq-bench/bindings/round_trip.cpp, built).
    #[arg(long)]
    cpp: PathBuf,
    /// The command running pkq-py/bench/round_trip.py (split at spaces).
    #[arg(long)]
    python: String,
    #[arg(long, default_value_t = 0)]
    device: usize,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Internal: run Rust's round trips in this process and write their
    /// samples to this file, as the C and C++ programs do (the bench starts
    /// itself so, so that every language runs in a fresh process).
    #[arg(long, hide = true)]
    rust_child: Option<PathBuf>,
}

/// The rows, in the order of the report.
const ROWS: [&str; 7] = [
    "round trip, rust",
    "round trip, c",
    "round trip, cpp",
    "round trip, python",
    "round trip, python asyncio",
    "cupy launch + sync",
    "torch op + sync",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(out) = &args.rust_child {
        return Ok(rust_child(&args, out)?);
    }
    let info = pkq::device_info(args.device)?;
    println!(
        "{} ({}), pkq {}; {} rounds of {} samples ({} warm-up) per language",
        info.name,
        info.driver,
        pkq::build_info::GIT_COMMIT,
        args.rounds,
        args.samples,
        args.warmup
    );
    let dir = std::env::temp_dir().join(format!("pkq-bindings-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows: Vec<Latency> = ROWS.iter().map(|n| Latency::new(n)).collect();
    // Each row's p50 in each process (one a round).
    let mut spread: Vec<Vec<f64>> = vec![Vec::new(); ROWS.len()];
    let mut absent: Vec<String> = Vec::new();
    let mut rng = Rng(0x5eed_b1d5);
    for round in 0..args.rounds {
        // Rust, C, C++, Python, in a fresh order (Fisher-Yates).
        let mut order = [0, 1, 2, 3];
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        println!("round {} (order {order:?})", round + 1);
        for step in order {
            match step {
                0 => {
                    let out = dir.join("0.txt");
                    run(Command::new(std::env::current_exe()?)
                        .args(["--c", "-", "--cpp", "-", "--python", "-"])
                        .arg("--samples")
                        .arg(args.samples.to_string())
                        .arg("--warmup")
                        .arg(args.warmup.to_string())
                        .arg("--device")
                        .arg(args.device.to_string())
                        .arg("--rust-child")
                        .arg(&out))?;
                    let mut l = Latency::new(ROWS[0]);
                    read_samples(&out, &mut l)?;
                    note(&l, &mut spread[0]);
                    rows[0].absorb(&l);
                }
                1 | 2 => {
                    let program = if step == 1 { &args.c } else { &args.cpp };
                    let out = dir.join(format!("{step}.txt"));
                    run(Command::new(program)
                        .arg(args.samples.to_string())
                        .arg(args.warmup.to_string())
                        .arg(&out))?;
                    let mut l = Latency::new(ROWS[step]);
                    read_samples(&out, &mut l)?;
                    note(&l, &mut spread[step]);
                    rows[step].absorb(&l);
                }
                _ => python(
                    &args,
                    &dir.join(format!("python-{round}")),
                    &mut rows,
                    &mut spread,
                )?,
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let rust_p50 = rows[0].p50_us();
    let cupy_p50 = rows[5].p50_us();
    let python_p50 = rows[3].p50_us();
    let mut out = Vec::new();
    for (l, p50s) in rows.iter().zip(&spread) {
        if l.hist.is_empty() {
            println!("{}: not measured (the Python script says why)", l.name);
            absent.push(l.name.clone());
            continue;
        }
        let mut row = l.row("us");
        let p50 = l.p50_us();
        let (lo, hi) = p50s.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
        row.insert("processes".into(), json!(p50s.len()));
        row.insert("process_p50_min_us".into(), json!(ratio(lo, 1.0)));
        row.insert("process_p50_max_us".into(), json!(ratio(hi, 1.0)));
        row.insert("x_rust_p50".into(), json!(ratio(p50, rust_p50)));
        if l.name.starts_with("round trip, python") && !rows[5].hist.is_empty() {
            row.insert("x_cupy_p50".into(), json!(ratio(p50, cupy_p50)));
        }
        if l.name == "round trip, python asyncio" {
            row.insert("x_python_p50".into(), json!(ratio(p50, python_p50)));
        }
        println!(
            "{:<28} p50 {:>8.3} µs  p99 {:>8.3} µs  ({:.3}x Rust)",
            l.name,
            p50,
            l.quantile_us(0.99),
            ratio(p50, rust_p50)
        );
        out.push(row);
    }
    let mut rep = report(&info, out);
    if !absent.is_empty() {
        rep["not_measured"] = json!(absent);
    }
    if let Some(path) = &args.json {
        write_json(path, &rep);
    }
    if let Some(path) = &args.svg {
        let measured: Vec<&Latency> = rows.iter().filter(|l| !l.hist.is_empty()).collect();
        plot_percentiles(
            path,
            "one round trip by language, and CuPy/PyTorch's launch + stream sync",
            &measured,
        );
    }
    Ok(())
}

/// Prints one process's p50 and keeps it in `p50s` (the pooled rows hide
/// how they spread).
fn note(l: &Latency, p50s: &mut Vec<f64>) {
    println!("{:<28} p50 {:>8.3} µs", l.name, l.p50_us());
    p50s.push(l.p50_us());
}

/// One run of the Python script: its rows' samples into `rows`.
fn python(
    args: &Args,
    raw: &Path,
    rows: &mut [Latency],
    spread: &mut [Vec<f64>],
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(raw)?;
    let mut words = args.python.split_whitespace();
    let mut cmd = Command::new(words.next().ok_or("--python is empty")?);
    cmd.args(words)
        .arg("--samples")
        .arg(args.samples.to_string())
        .arg("--warmup")
        .arg(args.warmup.to_string())
        .arg("--raw")
        .arg(raw);
    run(&mut cmd)?;
    for entry in std::fs::read_dir(raw)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let name = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# "))
            .ok_or_else(|| format!("{}: no '# <row>' first line", path.display()))?;
        let k = ROWS
            .iter()
            .position(|r| *r == name)
            .ok_or_else(|| format!("{}: unknown row {name:?}", path.display()))?;
        let mut l = Latency::new(ROWS[k]);
        read_samples(&path, &mut l)?;
        spread[k].push(l.p50_us());
        rows[k].absorb(&l);
    }
    Ok(())
}

fn ratio(a: f64, b: f64) -> f64 {
    (a / b * 1000.0).round() / 1000.0
}

/// Rust's round trips, timed as the other languages' are (the monotonic
/// clock around submit + wait), on a runtime of its own in this process,
/// the thread pinned once it runs; their nanoseconds to `out`, one a line.
fn rust_child(args: &Args, out: &Path) -> pkq::Result<()> {
    let rt = Runtime::builder().device(args.device).build()?;
    pin(None);
    let mut ns = Vec::with_capacity(args.samples);
    for i in 0..args.warmup + args.samples {
        let t0 = Instant::now();
        rt.submit(NOP.args(&()))?.wait()?;
        let dt = t0.elapsed().as_nanos() as u64;
        if i >= args.warmup {
            ns.push(dt);
        }
    }
    rt.shutdown()?;
    let text: String = ns.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(out, text)
        .map_err(|e| pkq::Error::InvalidArgument(format!("{}: {e}", out.display())))
}

fn run(cmd: &mut Command) -> Result<(), Box<dyn std::error::Error>> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !status.success() {
        return Err(format!("{cmd:?}: {status}").into());
    }
    Ok(())
}

/// Records the nanoseconds in `path` (one a line; `#` lines skipped).
fn read_samples(path: &Path, into: &mut Latency) -> Result<(), Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut n = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        into.record_ns(line.trim().parse()?);
        n += 1;
    }
    if n == 0 {
        return Err(format!("{}: no samples", path.display()).into());
    }
    Ok(())
}
