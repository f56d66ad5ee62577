//! The design sweep behind pkq's defaults (docs/design/default-shape.md,
//! docs/design/slot-copies-per-poller.md): round-trip
//! latency of the raw floor and of pkq under each combination of the knobs
//! that could move it, in one process run, interleaved over rounds so that
//! drift of the machine spreads over all variants alike.
//!
//! * floor: poller warps (1, 2, 8) x 8 words per ping (64 bytes polled,
//!   as pkq's slot) x ping lines (1, or a ring of 1024 that the rounds go
//!   through, as pkq's slots do) x a copy each or one for all x loads in
//!   flight per poller (1, 2, 4), with the host's stores timed alone;
//! * pkq: workers (1, 4) x poller warps per worker (1, 2) x slots (1,
//!   1024);
//! * each back to back, and with a random pause before each round trip;
//! * then the same pause before every round trip, 0 to 1000 ns, for the
//!   two-poller floor and pkq with one worker of one or two pollers: a
//!   back-to-back round trip locks into a phase of the device's polling,
//!   and where the host's next store lands in it (its pause, and its own
//!   turnaround) decides whether the store catches the next read of the
//!   line or waits for the one after (docs/design/measurement-method.md#phase-locking).
//!
//! `cargo run --release -p pkq-bench --bin latency_variants -- --json pkq-bench/results/latency_variants.json`

use std::path::PathBuf;

use clap::Parser;
use pkq::Runtime;
use pkq_bench::floor::{Floor, Shape};
use pkq_bench::support::{Latency, Pacer, pkq_round_trips, report, start, write_json};
use serde_json::json;

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
    /// Each variant also runs with a random pause (uniform below this many
    /// ns) before each round trip: tasks arriving at a random phase of the
    /// device's polling instead of back to back.
    #[arg(long, default_value_t = 4_000)]
    gap_ns: u64,
}

/// A variant's pooled samples: round trips, and the host's part (the
/// submit call for pkq, the stores for the floor).
struct Variant {
    round_trip: Latency,
    submit: Option<Latency>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // pkq-bench's module first (see pkq_bench::floor): the floors come
    // from it.
    pkq_bench::floor::load(args.device)?;
    let (clock, info) = start(args.core, args.device)?;

    // What a std clock read costs here (the VM's clocksource decides).
    let mut instant = Latency::new("Instant::now() (host)");
    for _ in 0..100_000 {
        let t0 = clock.now();
        std::hint::black_box(std::time::Instant::now());
        instant.record_ns(clock.between(t0, clock.now()));
    }
    println!(
        "Instant::now(): p50 {} ns, p99 {} ns (TSC read: {} ns)",
        instant.hist.value_at_quantile(0.5),
        instant.hist.value_at_quantile(0.99),
        clock.overhead_ns()
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
        for gap in [0, args.gap_ns] {
            let paced = if gap == 0 {
                String::new()
            } else {
                format!(", random gap < {gap} ns")
            };
            for (pollers, words, lines, copies, depth) in [
                (1, 8, 1, false, 1),
                (1, 8, 1024, false, 1),
                (1, 8, 1024, false, 2),
                (1, 8, 1024, false, 4),
                (2, 8, 1, false, 1),
                (2, 8, 1024, false, 1),
                (2, 8, 1024, false, 2),
                (2, 8, 1, true, 1),
                (2, 8, 1024, true, 1),
                (8, 8, 1024, true, 1),
                (8, 8, 1024, true, 2),
            ] {
                let copied = if copies { ", a copy each" } else { "" };
                let in_flight = if depth > 1 {
                    format!(", {depth} loads in flight")
                } else {
                    String::new()
                };
                let name = format!(
                    "floor: {pollers} poller(s), {words} word(s), {lines} line(s){copied}{in_flight}{paced}"
                );
                let shape = Shape {
                    pollers,
                    words,
                    lines,
                    copies,
                    depth,
                    bulk: false,
                };
                let mut floor = Floor::start(args.device, shape)?;
                let mut round_trip = Latency::new(&name);
                let mut send = Latency::new(&format!("{name}: host stores"));
                let mut pacer = Pacer::new(gap);
                for i in 0..args.warmup + args.samples {
                    pacer.pause(&clock);
                    let t0 = clock.now();
                    floor.send();
                    let t1 = clock.now();
                    floor.await_echo()?;
                    let t2 = clock.now();
                    if i >= args.warmup {
                        send.record_ns(clock.between(t0, t1));
                        round_trip.record_ns(clock.between(t0, t2));
                    }
                }
                floor.stop()?;
                pool(round_trip, Some(send))?;
            }
            for (workers, pollers, capacity) in [
                (1usize, 1u32, 1024usize),
                (1, 1, 1),
                (1, 2, 1024),
                (1, 2, 1),
                (4, 1, 1024),
                (4, 2, 1024),
            ] {
                let name = format!(
                    "pkq: {workers} worker(s), {pollers} poller(s), {capacity} slot(s){paced}"
                );
                let rt = Runtime::builder()
                    .device(args.device)
                    .workers(workers)
                    .pollers(pollers)
                    .capacity(capacity)
                    .build()?;
                let mut pacer = Pacer::new(gap);
                let run =
                    pkq_round_trips(&rt, &clock, &name, args.warmup, args.samples, &mut pacer)?;
                rt.shutdown()?;
                pool(run.round_trip, Some(run.submit))?;
            }
        }
        println!("round {} done", round + 1);
    }

    // The phase sweep: one pause for every round trip of a run.
    for pause in (0..=1000).step_by(100) {
        let paced = format!(", fixed pause {pause} ns");
        let name = format!("floor: 2 poller(s), 8 word(s), 1 line(s){paced}");
        let shape = Shape {
            pollers: 2,
            words: 8,
            lines: 1,
            copies: false,
            depth: 1,
            bulk: false,
        };
        let mut floor = Floor::start(args.device, shape)?;
        let mut round_trip = Latency::new(&name);
        let mut pacer = Pacer::fixed(pause);
        for i in 0..args.warmup + args.samples {
            pacer.pause(&clock);
            let t0 = clock.now();
            floor.round_trip()?;
            if i >= args.warmup {
                round_trip.record_ns(clock.between(t0, clock.now()));
            }
        }
        floor.stop()?;
        variants.push(Variant {
            round_trip,
            submit: None,
        });
        for pollers in [1, 2] {
            let name = format!("pkq: 1 worker(s), {pollers} poller(s), 1024 slot(s){paced}");
            let rt = Runtime::builder()
                .device(args.device)
                .workers(1)
                .pollers(pollers)
                .capacity(1024)
                .build()?;
            let mut pacer = Pacer::fixed(pause);
            let run = pkq_round_trips(&rt, &clock, &name, args.warmup, args.samples, &mut pacer)?;
            rt.shutdown()?;
            variants.push(Variant {
                round_trip: run.round_trip,
                submit: Some(run.submit),
            });
        }
    }

    println!(
        "\n{:<72} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10}",
        "round trip (µs)", "p50", "p90", "p99", "p99.9", "max", "host ns"
    );
    let mut rows = Vec::new();
    for v in &variants {
        let lat = &v.round_trip;
        let sub = v.submit.as_ref().map(|s| s.hist.value_at_quantile(0.5));
        println!(
            "{:<72} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>10}",
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
            row.insert("host_p50_ns".into(), json!(s.hist.value_at_quantile(0.5)));
            row.insert("host_p99_ns".into(), json!(s.hist.value_at_quantile(0.99)));
        }
        rows.push(row);
    }
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}
