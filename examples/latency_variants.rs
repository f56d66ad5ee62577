//! The design sweep behind pkq's defaults (benches/NOTES.md): round-trip
//! latency of the raw floor and of pkq under each combination of the knobs
//! that could move it, in one process run, interleaved over rounds so that
//! drift of the machine spreads over all variants alike.
//!
//! * floor: loads in flight (1, 2, 4) x ping memory (cached, cached with
//!   streaming stores, write-combined);
//! * pkq: loads in flight per worker (1, 2, 4) x submission memory (same
//!   three) x workers (1, 4).
//!
//! `cargo run --release --example latency_variants -- --json benches/results/latency_variants.json`

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;

use clap::Parser;
use pkq::floor::{Floor, Pollers};
use pkq::{Pages, Runtime, SubmissionMemory};
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
    /// Sweep only the floor, only pkq, or both.
    #[arg(long, default_value = "all", value_parser = ["floor", "pkq", "all"])]
    what: String,
}

const MEMORIES: [(SubmissionMemory, &str); 3] = [
    (SubmissionMemory::Cached, "cached"),
    (SubmissionMemory::CachedStreaming, "cached+streaming"),
    (SubmissionMemory::WriteCombined, "write-combined"),
];

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

    for (name, c) in pkq::floor::host_costs(args.device)? {
        println!(
            "host costs, {name:<40} dependent load {:>7.1} ns, 64-byte line store {:>7.1} ns, + sfence {:>7.1} ns",
            c.dependent_load_ns, c.line_store_ns, c.line_store_sfence_ns
        );
    }
    // (name, round trip, submit call) per variant, pooled over rounds.
    let mut results: Vec<(String, Latency, Option<Latency>)> = Vec::new();
    fn slot(results: &mut Vec<(String, Latency, Option<Latency>)>, name: String) -> usize {
        match results.iter().position(|(n, _, _)| *n == name) {
            Some(i) => i,
            None => {
                results.push((name.clone(), Latency::new(&name), None));
                results.len() - 1
            }
        }
    }
    const PAGES: [(Pages, &str); 2] = [
        (Pages::Driver, "driver pages"),
        (Pages::Registered, "registered pages"),
    ];
    for round in 0..args.rounds {
        for pollers in [Pollers::InFlight(1), Pollers::Warps(2)]
            .into_iter()
            .filter(|_| args.what != "pkq")
        {
            for (pages, pname) in PAGES {
                for (memory, mname) in MEMORIES {
                    let name = format!("floor: {pollers:?}, {pname}, {mname}");
                    let mut floor = Floor::start_on(args.device, pollers, memory, pages)?;
                    let l = Latency::measure(&name, &clock, args.warmup, args.samples, || {
                        floor.round_trip()
                    });
                    floor.stop()?;
                    let i = slot(&mut results, name);
                    results[i].1.hist.add(&l.hist)?;
                }
            }
        }
        for workers in [1usize, 4].into_iter().filter(|_| args.what != "floor") {
            for (pages, pname) in PAGES {
                for (memory, mname) in MEMORIES {
                    let name = format!("pkq: {workers} worker(s), {pname}, {mname}");
                    let rt = Runtime::builder()
                        .device(args.device)
                        .workers(workers)
                        .pages(pages)
                        .submission_memory(memory)
                        .build()?;
                    let run = pkq_round_trips(&rt, &clock, &name, args.warmup, args.samples)?;
                    rt.shutdown()?;
                    let i = slot(&mut results, name);
                    results[i].1.hist.add(&run.round_trip.hist)?;
                    match &mut results[i].2 {
                        Some(s) => s.hist.add(&run.submit.hist)?,
                        none => *none = Some(run.submit),
                    }
                }
            }
        }
        println!("round {} done", round + 1);
    }

    println!(
        "\n{:<52} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10}",
        "round trip (µs)", "p50", "p90", "p99", "p99.9", "max", "submit ns"
    );
    let mut rows = Vec::new();
    for (name, lat, submit) in &results {
        let sub = submit.as_ref().map(|s| s.hist.value_at_quantile(0.5));
        println!(
            "{:<52} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>10}",
            name,
            lat.quantile_us(0.5),
            lat.quantile_us(0.9),
            lat.quantile_us(0.99),
            lat.quantile_us(0.999),
            lat.hist.max() as f64 / 1e3,
            sub.map_or("-".into(), |s| s.to_string()),
        );
        let mut row = lat.row("us");
        if let Some(s) = submit {
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
