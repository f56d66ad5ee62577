//! The design sweep behind pkq's defaults (benches/NOTES.md): round-trip
//! latency of the raw floor and of pkq under each combination of the knobs
//! that could move it, in one process run, interleaved over rounds so that
//! drift of the machine spreads over all variants alike.
//!
//! * floor: poller warps (1, 2, 4);
//! * pkq: workers (1, 4) x poller warps per worker (1, 2, 4).
//!
//! `cargo run --release --example latency_variants -- --json benches/results/latency_variants.json`

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;

use clap::Parser;
use pkq::Runtime;
use pkq::floor::Floor;
use serde_json::json;
use support::{Clock, Latency, pin, pkq_round_trips, report, write_json};

#[derive(Parser)]
#[command(about = "pkq and raw-floor latency under each design variant")]
struct Args {
    /// Timed samples per variant and round.
    #[arg(long, default_value_t = 25_000)]
    samples: usize,
    /// Rounds over all variants (samples are pooled).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Untimed warm-up per variant and round.
    #[arg(long, default_value_t = 3_000)]
    warmup: usize,
    #[arg(long, default_value_t = 0)]
    device: usize,
    #[arg(long)]
    core: Option<usize>,
    #[arg(long)]
    json: Option<PathBuf>,
}

/// A variant's pooled samples: round trips, and submit calls for pkq.
struct Variant {
    round_trip: Latency,
    submit: Option<Latency>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    pin(args.core);
    let clock = Clock::calibrate();
    let info = pkq::device_info(args.device)?;
    println!(
        "{} ({}), pkq {}",
        info.name,
        info.driver,
        pkq::build_info::GIT_COMMIT
    );

    let mut variants: Vec<Variant> = Vec::new();
    for round in 0..args.rounds {
        let mut i = 0;
        let mut pool = |round_trip: Latency,
                        submit: Option<Latency>|
         -> Result<(), Box<dyn std::error::Error>> {
            if round == 0 {
                variants.push(Variant { round_trip, submit });
            } else {
                let v = &mut variants[i];
                v.round_trip.hist.add(&round_trip.hist)?;
                if let (Some(a), Some(b)) = (&mut v.submit, &submit) {
                    a.hist.add(&b.hist)?;
                }
            }
            i += 1;
            Ok(())
        };
        for pollers in [1, 2, 4] {
            let name = format!("floor: {pollers} poller(s)");
            let mut floor = Floor::start(args.device, pollers)?;
            let l = Latency::measure(&name, &clock, args.warmup, args.samples, || {
                floor.round_trip()
            });
            floor.stop()?;
            pool(l, None)?;
        }
        for workers in [1usize, 4] {
            for pollers in [1, 2, 4] {
                let name = format!("pkq: {workers} worker(s), {pollers} poller(s) each");
                let rt = Runtime::builder()
                    .device(args.device)
                    .workers(workers)
                    .pollers(pollers)
                    .build()?;
                let run = pkq_round_trips(&rt, &clock, &name, args.warmup, args.samples)?;
                rt.shutdown()?;
                pool(run.round_trip, Some(run.submit))?;
            }
        }
        println!("round {} done", round + 1);
    }

    println!(
        "\n{:<44} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10}",
        "round trip (µs)", "p50", "p90", "p99", "p99.9", "max", "submit ns"
    );
    let mut rows = Vec::new();
    for v in &variants {
        let lat = &v.round_trip;
        let sub = v.submit.as_ref().map(|s| s.hist.value_at_quantile(0.5));
        println!(
            "{:<44} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>10}",
            lat.name,
            lat.quantile_us(0.5),
            lat.quantile_us(0.9),
            lat.quantile_us(0.99),
            lat.quantile_us(0.999),
            lat.hist.max() as f64 / 1e3,
            sub.map_or("-".into(), |s| s.to_string()),
        );
        let mut row = lat.row("us");
        if let Some(s) = &v.submit {
            row.insert("submit_p50_ns".into(), json!(s.hist.value_at_quantile(0.5)));
            row.insert(
                "submit_p99_ns".into(),
                json!(s.hist.value_at_quantile(0.99)),
            );
        }
        rows.push(row);
    }
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}
