//! What tracing (`pkq::trace`) costs: one runtime's round trip (a NOP
//! task, submit + wait) and its packed throughput (NOP tasks in packed
//! batches, a window of them in flight, one thread), tracing off and on in
//! alternating rounds on the same runtime (`Runtime::set_tracing`), with a
//! buffer large enough that no record is dropped (the JSON says how many
//! were kept and dropped, and which host clock stamped them:
//! `pkq::trace::HostClock`). The round trip alternates in many short
//! rounds, so that a drift of the machine's speed falls on both alike; the
//! "on" row's `x_off_p50_paired` is the median, over the rounds, of a
//! round's p50 over that of the "off" round beside it.
//!
//! Beside them, in the same run, what the two host clock reads a traced
//! task takes cost on this host, read back to back in a loop (rows `host
//! clock read` and `host clock read after loads`: the submit's read, and
//! the take's, behind a load fence), and on the "on" row
//! `x_off_p50_clock_reads`: the "off" p50 plus those two reads, over the
//! "off" p50, the ratio that the clock reads alone would give.
//!
//! `cargo run --release -p pkq-bench --bin trace_cost -- --json pkq-bench/results/trace_cost.json --svg pkq-bench/results/trace_cost.svg`

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use pkq::builtin::NOP;
use pkq::{Runtime, Submit};
use pkq_bench::support::{Latency, at_least_one, plot_percentiles, report, start, write_json};
use serde_json::json;

#[derive(Parser)]
#[command(about = "the round trip and packed throughput with tracing off and on")]
struct Args {
    /// Round-trip rounds of each (off and on alternate, each pair of
    /// rounds starting with the other one).
    #[arg(long, default_value_t = 160, value_parser = at_least_one)]
    rounds: usize,
    /// Timed round trips per round.
    #[arg(long, default_value_t = 2_000, value_parser = at_least_one)]
    samples: usize,
    /// Untimed round trips before each round.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Packed-throughput rounds of each (alternating as the round trip's).
    #[arg(long, default_value_t = 16, value_parser = at_least_one)]
    packed_rounds: usize,
    /// Seconds of packed throughput per round.
    #[arg(long, default_value_t = 0.1)]
    packed_secs: f64,
    /// Tasks per packed batch (32 to a slot).
    #[arg(long, default_value_t = 4096, value_parser = at_least_one)]
    packed: usize,
    /// Records the runtime keeps.
    #[arg(long, default_value_t = 1 << 23)]
    records: usize,
    #[arg(long, default_value_t = 0)]
    device: usize,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// Packed NOP tasks per second for `secs`, two batches in flight.
fn packed_rate(rt: &Runtime, per_batch: usize, secs: f64) -> f64 {
    let args = vec![(); per_batch];
    let mut q: VecDeque<pkq::Batch> = VecDeque::new();
    let mut done = 0u64;
    let t0 = Instant::now();
    let until = Duration::from_secs_f64(secs);
    while t0.elapsed() < until {
        if q.len() >= 2 {
            let mut b = q.pop_front().unwrap();
            let r = b.wait().unwrap();
            assert!(r.iter().all(Result::is_ok));
            done += r.len() as u64;
        }
        q.push_back(rt.submit(NOP.packed(&args)).unwrap());
    }
    for mut b in q {
        done += b.wait().unwrap().len() as u64;
    }
    done as f64 / t0.elapsed().as_secs_f64()
}

/// Nanoseconds per read of the host clock a trace stamps with (`tsc`:
/// the time-stamp counter; else the monotonic clock), read back to back,
/// `after_loads` behind a load fence as a take's read is (the median of
/// nine loops of a million reads).
fn clock_read_ns(clock: pkq::trace::HostClock, after_loads: bool) -> f64 {
    const READS: u32 = 1_000_000;
    let epoch = Instant::now();
    // As pkq reads them: the fence before either clock.
    let read = || -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            if after_loads {
                // SAFETY: LFENCE (SSE2) exists on every x86-64 processor
                // and has no preconditions.
                unsafe { std::arch::x86_64::_mm_lfence() };
            }
            if clock == pkq::trace::HostClock::Tsc {
                // SAFETY: RDTSC exists on every x86-64 processor and has
                // no preconditions.
                return unsafe { std::arch::x86_64::_rdtsc() };
            }
        }
        epoch.elapsed().as_nanos() as u64
    };
    let mut loops: Vec<f64> = (0..9)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..READS {
                std::hint::black_box(read());
            }
            t0.elapsed().as_secs_f64() * 1e9 / f64::from(READS)
        })
        .collect();
    loops.sort_by(f64::total_cmp);
    loops[loops.len() / 2]
}

/// Runs `each(round, on)` for `rounds` pairs of rounds, tracing off
/// (`on` 0) and on (1) in turn, each pair starting with the other one.
fn alternate(rt: &Runtime, rounds: usize, mut each: impl FnMut(usize, usize)) -> pkq::Result<()> {
    for round in 0..rounds {
        for step in 0..2 {
            let on = (round + step) % 2;
            rt.set_tracing(on == 1)?;
            each(round, on);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (clock, info) = start(None, args.device)?;
    let rt = Runtime::builder()
        .device(args.device)
        .trace(args.records)
        .build()?;
    rt.set_tracing(false)?;
    let mut rtt = [
        Latency::new("round trip, tracing off"),
        Latency::new("round trip, tracing on"),
    ];
    // Per round, off and on: its p50 (a pair's ratio is taken below).
    let mut p50s: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    alternate(&rt, args.rounds, |_, on| {
        let l = Latency::measure(
            &rtt[on].name.clone(),
            &clock,
            args.warmup,
            args.samples,
            || rt.submit(NOP.args(&())).and_then(|t| t.wait()).map(|_| ()),
        );
        rtt[on].absorb(&l);
        p50s[on].push(l.p50_us());
    })?;
    let mut paired: Vec<f64> = p50s[1]
        .iter()
        .zip(&p50s[0])
        .map(|(on, off)| on / off)
        .collect();
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    alternate(&rt, args.packed_rounds, |round, on| {
        let rate = packed_rate(&rt, args.packed, args.packed_secs);
        rates[on].push(rate);
        println!(
            "packed round {:>2} tracing {:<3} {:>6.1} M tasks/s",
            round + 1,
            if on == 1 { "on" } else { "off" },
            rate / 1e6
        );
    })?;
    rt.set_tracing(false)?;
    let trace = rt.trace();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let rate = [median(&mut rates[0]), median(&mut rates[1])];
    let paired = median(&mut paired);
    let host_clock = trace.host_clock();
    let reads = [
        ("host clock read", clock_read_ns(host_clock, false)),
        (
            "host clock read after loads",
            clock_read_ns(host_clock, true),
        ),
    ];
    let clock_reads = 1.0 + (reads[0].1 + reads[1].1) / (rtt[0].p50_us() * 1000.0);
    let mut rows = Vec::new();
    for (on, l) in rtt.iter().enumerate() {
        let mut row = l.row("us");
        row.insert(
            "x_off_p50".into(),
            json!((l.p50_us() / rtt[0].p50_us() * 1000.0).round() / 1000.0),
        );
        if on == 1 {
            row.insert(
                "x_off_p50_paired".into(),
                json!((paired * 1000.0).round() / 1000.0),
            );
            row.insert("records_kept".into(), json!(trace.records().len()));
            row.insert("records_dropped".into(), json!(trace.dropped()));
            row.insert("host_clock".into(), json!(host_clock.name()));
            row.insert(
                "x_off_p50_clock_reads".into(),
                json!((clock_reads * 1000.0).round() / 1000.0),
            );
        }
        println!(
            "{:<28} p50 {:>8.3} µs  p99 {:>8.3} µs  ({} rounds of {})",
            l.name,
            l.p50_us(),
            l.quantile_us(0.99),
            args.rounds,
            args.samples
        );
        rows.push(row);
    }
    for (on, name) in [
        "packed throughput, tracing off",
        "packed throughput, tracing on",
    ]
    .iter()
    .enumerate()
    {
        println!(
            "{name:<34} {:>8.1} M tasks/s (median of {} rounds)",
            rate[on] / 1e6,
            args.packed_rounds
        );
        rows.push(
            json!({
                "name": name,
                "tasks_per_s": rate[on].round(),
                "x_off": (rate[on] / rate[0] * 1000.0).round() / 1000.0,
                "rounds": args.packed_rounds,
                "tasks_per_batch": args.packed,
            })
            .as_object()
            .unwrap()
            .clone(),
        );
    }
    for (name, ns) in reads {
        println!("{name:<34} {ns:>8.1} ns ({})", host_clock.name());
        rows.push(
            json!({"name": name, "cost_ns": (ns * 10.0).round() / 10.0, "host_clock": host_clock.name()})
                .as_object()
                .unwrap()
                .clone(),
        );
    }
    println!("round trip, tracing on over off: {paired:.3} (median of the rounds' p50 ratios)");
    println!("round trip, off plus the two clock reads, over off: {clock_reads:.3}");
    println!(
        "trace: {} records kept, {} dropped, host clock {}",
        trace.records().len(),
        trace.dropped(),
        trace.host_clock()
    );
    rt.shutdown()?;
    let rep = report(&info, rows);
    if let Some(path) = &args.json {
        write_json(path, &rep);
    }
    if let Some(path) = &args.svg {
        plot_percentiles(
            path,
            "one round trip, tracing off and on",
            &[&rtt[0], &rtt[1]],
        );
    }
    Ok(())
}
