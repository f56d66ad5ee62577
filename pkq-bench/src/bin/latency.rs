//! The main job: round-trip latency of pkq against the ways CUDA offers to
//! run a small piece of work, measured side by side in one process run:
//!
//! * raw floor: a bare ping-pong with a resident kernel through mapped
//!   memory (what any design over mapped memory pays): one word polled by
//!   one and by two staggered poller warps; 64-byte lines polled by as
//!   many warps as the default runtime's (eight), each on a copy of its
//!   own; and 64-byte lines polled by bulk copies into shared memory, four
//!   in flight, from one warp and from two on copies of their own; each
//!   with its one-way split (its echoes carry the device clock), mapped by
//!   a clock map of its own;
//! * cudarc launch + sync: launch an empty kernel, synchronize its stream;
//! * CUDA graph + sync: launch a one-node graph of the empty kernel, sync;
//! * pkq: submit a NOP to the default runtime (`Runtime::builder().build()`,
//!   one worker of eight pollers), wait for its completion; and its one-way
//!   breakdown (host submit cost, pickup, execution, completion visibility)
//!   from the device's timestamps mapped onto the host clock; then the same
//!   round trip with `--fast-workers` workers of `--fast-pollers` poller
//!   warps (the throughput shape: four workers of one poller);
//! * pkq woken from idle, under the spin, quiet and backoff idle policies.
//!
//! Each variant runs alone (no other resident kernel polling), after its own
//! warm-up, from one thread pinned to one core, timed with the TSC. The
//! floors and pkq's two shapes run in `--rounds` rounds, each a fresh
//! instance with its share of the samples, the rounds going through all of
//! them in turn, and each variant's rounds pooled: a back-to-back ping-pong
//! locks into a phase of the device's polling that differs from instance to
//! instance, and the machine drifts over a run.
//!
//! `cargo run --release -p pkq-bench --bin latency -- --json pkq-bench/results/latency.json --svg pkq-bench/results/latency.svg`

use pkq::Submit;
use pkq::builtin::*;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use pkq::cudarc::driver::{LaunchConfig, sys};
use pkq::timing::{ClockMap, Exchange};
use pkq::{IdlePolicy, Runtime};
use pkq_bench::floor::{Floor, Shape};
use pkq_bench::support::{
    Clock, Latency, Pacer, PkqRun, at_least_one, pin, pkq_round_trips, plot_percentiles, report,
    trim, write_json,
};
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "Round-trip latency: pkq vs kernel launch vs CUDA graph vs the raw floor")]
struct Args {
    /// Timed samples per variant.
    #[arg(long, default_value_t = 200_000, value_parser = at_least_one)]
    samples: usize,
    /// Untimed warm-up runs per variant.
    #[arg(long, default_value_t = 20_000)]
    warmup: usize,
    /// Timed samples of the wake-from-idle variants (each waits `--idle-us` first).
    #[arg(long, default_value_t = 2_000, value_parser = at_least_one)]
    idle_samples: usize,
    /// How long the runtime sits idle before each wake-up sample (µs).
    #[arg(long, default_value_t = 1_000)]
    idle_us: u64,
    /// CUDA device index.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Core to pin the measuring thread to (default: the last one).
    #[arg(long)]
    core: Option<usize>,
    /// pkq worker warps (default: the builder's, one).
    #[arg(long)]
    workers: Option<usize>,
    /// Poller warps per pkq worker, 1, 2, 4 or 8 (default: the builder's,
    /// eight for one worker).
    #[arg(long)]
    pollers: Option<u32>,
    /// Poller warps per worker of the second pkq configuration measured,
    /// the throughput shape; 0 leaves it out.
    #[arg(long, default_value_t = 1)]
    fast_pollers: u32,
    /// Workers of the second pkq configuration, the throughput shape.
    #[arg(long, default_value_t = 4)]
    fast_workers: usize,
    /// Rows "random arrival" pause below this many ns before each round
    /// trip, so tasks meet the device's polling at a random phase (as in a
    /// real loop) rather than the one back-to-back ping-pong locks into.
    #[arg(long, default_value_t = 4_000)]
    gap_ns: u64,
    /// Rounds over the floors and pkq's shapes, each with a fresh instance
    /// and `--samples / --rounds` samples (pooled per variant).
    #[arg(long, default_value_t = 4, value_parser = at_least_one)]
    rounds: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the latency distributions as SVG here.
    #[arg(long)]
    svg: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // pkq-bench's module first (see pkq_bench::floor): the floors, the
    // device's costs and the empty kernel come from it.
    pkq_bench::floor::load(args.device)?;
    let core = pin(args.core);
    let clock = Clock::calibrate();
    let info = pkq::device_info(args.device)?;
    println!(
        "{}: device {} ({}), driver {}, pkq {} ({} samples per variant, {} warm-up, thread pinned to core {}, clock read costs {} ns)",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        args.device,
        info.name,
        info.driver,
        pkq::build_info::GIT_COMMIT,
        args.samples,
        args.warmup,
        core.map_or("none".into(), |c| c.to_string()),
        clock.overhead_ns(),
    );
    let (w, n) = (args.warmup, args.samples);

    // Raw floor: one and two pollers on one word, and as many pollers as
    // the latency setting's, each on a copy of 64-byte lines that move on
    // as pkq's slots do; back to back, then with tasks arriving at random
    // moments (a pause below --gap-ns before each).
    let mut floor_one_way = Rows::new();
    let paced = format!(
        "random arrival (gap < {} µs)",
        trim(args.gap_ns as f64 / 1e3)
    );
    // The default runtime's pollers.
    let many = Shape {
        pollers: 8,
        words: 8,
        lines: 1024,
        copies: true,
        depth: 1,
        bulk: false,
    };
    let many_name = format!("raw floor ({} pollers, a copy each)", many.pollers);
    let mut shapes = vec![
        (Shape::pollers(1), "raw floor (1 poller)"),
        (Shape::pollers(2), "raw floor (2 pollers)"),
    ];
    shapes.push((many, many_name.as_str()));
    // One warp's polls in flight together: bulk copies, which a load's
    // wait does not hold up (sm_90 on).
    let bulk = Shape {
        lines: 1024,
        words: 8,
        depth: 4,
        bulk: true,
        ..Shape::pollers(1)
    };
    if pkq_bench::floor::bulk_polls_on(args.device)? {
        shapes.push((bulk, "raw floor (1 poller, 4 bulk copies in flight)"));
        shapes.push((
            Shape {
                pollers: 2,
                copies: true,
                ..bulk
            },
            "raw floor (2 pollers, a copy each, 4 bulk copies in flight)",
        ));
    } else {
        println!("no bulk-copy floors: the device is older than sm_90");
    }
    // Each variant of the floor and of pkq below is measured in `--rounds`
    // rounds, each a fresh instance, and the rounds go through all of them
    // in turn: a back-to-back ping-pong locks into a phase of the device's
    // polling that differs from instance to instance, and the machine
    // drifts over a run, so one instance each would compare two draws.
    let rounds = args.rounds.max(1);
    let (rw, rn) = (w / rounds, n / rounds);
    // Each variant's rounds pooled here.
    let mut floors: Vec<Latency> = shapes.iter().map(|&(_, name)| Latency::new(name)).collect();
    let mut arrivals: Vec<Latency> = shapes
        .iter()
        .map(|&(_, name)| Latency::new(&format!("{name}, {paced}")))
        .collect();
    let mut floor_exchanges: Vec<Vec<Exchange>> = vec![Vec::new(); shapes.len()];
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let fast = match args.fast_workers {
        1 => plural(args.fast_pollers as usize, "poller"),
        w => format!(
            "{} x {}",
            plural(w, "worker"),
            plural(args.fast_pollers as usize, "poller")
        ),
    };
    let mut run = PkqRun::new("pkq round trip");
    let mut pkq_arrivals = vec![Latency::new(&format!("pkq round trip, {paced}"))];
    // The second shape's round trips, back to back and paced.
    let mut fast_runs = (args.fast_pollers != 0).then(|| {
        (
            PkqRun::new(&format!("pkq round trip, {fast}")),
            Latency::new(&format!("pkq round trip, {fast}, {paced}")),
        )
    });
    for _ in 0..rounds {
        for (i, &(shape, name)) in shapes.iter().enumerate() {
            let mut floor = Floor::start(args.device, shape)?;
            let (lat, exchanges) = floor_round_trips(&mut floor, &clock, name, rw, rn);
            floor_exchanges[i].extend(exchanges);
            let paced_lat = Latency::measure_paced(
                &format!("{name}, {paced}"),
                &clock,
                rw,
                rn,
                &mut Pacer::new(args.gap_ns),
                || floor.round_trip(),
            );
            floor.stop()?;
            floors[i].absorb(&lat);
            arrivals[i].absorb(&paced_lat);
        }

        // pkq, busy: back-to-back round trips; the default runtime unless
        // told.
        let mut b = Runtime::builder().device(args.device);
        if let Some(workers) = args.workers {
            b = b.workers(workers);
        }
        if let Some(pollers) = args.pollers {
            b = b.pollers(pollers);
        }
        let rt = b.build()?;
        run.absorb(pkq_round_trips(
            &rt,
            &clock,
            "pkq round trip",
            rw,
            rn,
            &mut Pacer::new(0),
        )?);
        let name = format!("pkq round trip, {paced}");
        let paced_run = pkq_round_trips(&rt, &clock, &name, rw, rn, &mut Pacer::new(args.gap_ns))?;
        pkq_arrivals[0].absorb(&paced_run.round_trip);
        rt.shutdown()?;
        drop(rt);

        // pkq in a second shape (the throughput shape unless told), back to
        // back and paced.
        if let Some((fast_run, fast_paced)) = &mut fast_runs {
            let rt = Runtime::builder()
                .device(args.device)
                .workers(args.fast_workers)
                .pollers(args.fast_pollers)
                .build()?;
            let name = format!("pkq round trip, {fast}");
            fast_run.absorb(pkq_round_trips(
                &rt,
                &clock,
                &name,
                rw,
                rn,
                &mut Pacer::new(0),
            )?);
            let name = format!("pkq round trip, {fast}, {paced}");
            let mut pacer = Pacer::new(args.gap_ns);
            let paced_run = pkq_round_trips(&rt, &clock, &name, rw, rn, &mut pacer)?;
            fast_paced.absorb(&paced_run.round_trip);
            rt.shutdown()?;
        }
    }
    for (exchanges, &(_, name)) in floor_exchanges.iter().zip(&shapes) {
        floor_one_way.extend(floor_split(exchanges, name)?);
    }
    let fast_run = fast_runs.map(|(fast_run, fast_paced)| {
        pkq_arrivals.push(fast_paced);
        fast_run
    });

    // cudarc launch + sync, and a CUDA graph + sync, of an empty kernel.
    let ctx = pkq::context(args.device)?;
    let stream = ctx.new_stream()?;
    let empty = pkq_bench::floor::function(args.device, "pkq_empty_kernel")?;
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let launch_lat = Latency::measure("cudarc launch + sync", &clock, w, n, || {
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
    let graph_lat = Latency::measure("CUDA graph + sync", &clock, w, n, || {
        graph.launch()?;
        stream.synchronize()
    });
    drop(graph);

    // One-way breakdowns from the device's timestamps.
    let (map, mut breakdown) = one_way(&run, "one-way")?;
    if let Some(r) = &fast_run {
        let prefix = format!("one-way, {fast}");
        let (fast_map, rows) = one_way(r, &prefix)?;
        breakdown.extend(rows);
        breakdown.push(map_row(&format!("{prefix}: clock map"), &fast_map));
    }
    breakdown.extend(floor_one_way);

    // pkq woken from idle: each sample after the runtime sat idle.
    let idle = Duration::from_micros(args.idle_us);
    let mut wake = Vec::new();
    for (name, policy) in [
        ("pkq after idle, spin policy", IdlePolicy::Spin),
        (
            "pkq after idle, quiet policy (after 100 µs)",
            IdlePolicy::Quiet {
                after: Duration::from_micros(100),
            },
        ),
        (
            "pkq after idle, backoff policy (spin 50 µs, sleep <= 20 µs)",
            IdlePolicy::Backoff {
                spin: Duration::from_micros(50),
                max_sleep: Duration::from_micros(20),
            },
        ),
    ] {
        let mut b = Runtime::builder().device(args.device).idle(policy);
        if let Some(workers) = args.workers {
            b = b.workers(workers);
        }
        if let Some(pollers) = args.pollers {
            b = b.pollers(pollers);
        }
        let rt = b.build()?;
        let mut lat = Latency::new(name);
        for i in 0..100 + args.idle_samples {
            std::thread::sleep(idle);
            let t0 = clock.now();
            rt.submit(NOP.args(&()))?.wait()?;
            if i >= 100 {
                lat.record_ns(clock.between(t0, clock.now()));
            }
        }
        rt.shutdown()?;
        wake.push(lat);
    }

    // What the device pays per mapped-memory operation, by its own clock.
    let costs = pkq_bench::floor::device_costs(args.device, 20_000)?;

    // Report.
    let pkq_lat = &run.round_trip;
    let best_floor = floors
        .iter()
        .min_by_key(|f| f.hist.value_at_quantile(0.5))
        .unwrap();
    let mut variants: Vec<&Latency> = vec![pkq_lat];
    variants.extend(fast_run.iter().map(|r| &r.round_trip));
    variants.extend(floors.iter());
    variants.extend([&launch_lat, &graph_lat]);
    variants.extend(pkq_arrivals.iter());
    variants.extend(arrivals.iter());
    println!(
        "\n{:<60} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "round trip (µs)", "p50", "p90", "p99", "p99.9", "max", "p50/pkq"
    );
    for l in variants.iter().copied().chain(wake.iter()) {
        println!(
            "{:<60} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2}x",
            l.name,
            l.quantile_us(0.5),
            l.quantile_us(0.9),
            l.quantile_us(0.99),
            l.quantile_us(0.999),
            l.hist.max() as f64 / 1e3,
            l.p50_us() / pkq_lat.p50_us(),
        );
    }
    let mut rows: Vec<Map<String, Value>> = Vec::new();
    for l in variants.iter().copied().chain(wake.iter()) {
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
    for l in std::iter::once(pkq_lat).chain(fast_run.iter().map(|r| &r.round_trip)) {
        println!(
            "\n{} p50 = {:.2}x cudarc launch + sync, {:.2}x CUDA graph + sync, {:.2}x the best raw floor ({})",
            l.name,
            l.p50_us() / launch_lat.p50_us(),
            l.p50_us() / graph_lat.p50_us(),
            l.p50_us() / best_floor.p50_us(),
            best_floor.name,
        );
        for f in &floors {
            println!("  {:.2}x {}", l.p50_us() / f.p50_us(), f.name);
        }
    }
    let best_arrival_floor = arrivals
        .iter()
        .min_by_key(|f| f.hist.value_at_quantile(0.5))
        .unwrap();
    for l in &pkq_arrivals {
        println!(
            "{} p50 = {:.2}x the best raw floor ({})",
            l.name,
            l.p50_us() / best_arrival_floor.p50_us(),
            best_arrival_floor.name,
        );
    }

    println!(
        "\none-way breakdowns of the round trips, pkq's and the floors' (ns; device clock mapped to the host's TSC, NTP style, a map per set of rows; for \"one-way: ...\": offset within ±{:.0} ns at the typical anchor, ±{:.0} ns at worst; {:.1}% of round trips outside the map; %globaltimer step {} ns; SM clock {} MHz):",
        map.median_bound_ns,
        map.error_bound_ns,
        map.misfit_fraction * 100.0,
        costs.globaltimer_step_ns,
        costs.sm_clock_mhz,
    );
    println!(
        "  {:<58} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
    for r in &breakdown {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        if r.contains_key("error_bound_ns") {
            println!(
                "  {}: offset within ±{:.0} ns at the typical anchor, ±{:.0} ns at worst; {:.1}% of round trips outside the map",
                r["name"].as_str().unwrap(),
                f("median_bound_ns"),
                f("error_bound_ns"),
                f("misfit_fraction") * 100.0,
            );
            continue;
        }
        println!(
            "  {:<58} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0}",
            r["name"].as_str().unwrap(),
            f("p50_ns"),
            f("p90_ns"),
            f("p99_ns"),
            f("p99_9_ns"),
            f("max_ns"),
        );
    }
    rows.extend(breakdown);
    let mut clock_row = map_row("clock map (device %globaltimer -> host TSC)", &map);
    clock_row.insert("sm_clock_mhz".into(), json!(costs.sm_clock_mhz));
    clock_row.insert(
        "globaltimer_step_ns".into(),
        json!(costs.globaltimer_step_ns),
    );
    clock_row.insert("host_clock_read_ns".into(), json!(clock.overhead_ns()));
    rows.push(clock_row);

    println!("\ndevice-side costs (GPU clock, mean of 20000 each):");
    for (name, ns) in [
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
        (
            "device: dependent 32-byte read (4 lanes)",
            costs.dependent_wide_read_ns[0],
        ),
        (
            "device: dependent 64-byte read (8 lanes)",
            costs.dependent_wide_read_ns[1],
        ),
        (
            "device: dependent 128-byte read (16 lanes)",
            costs.dependent_wide_read_ns[2],
        ),
    ] {
        println!("  {name:<48} {ns:>8.1} ns");
        rows.push(Map::from_iter([
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

/// A bench's rows.
type Rows = Vec<Map<String, Value>>;

/// `warmup` untimed, then `samples` timed back-to-back round trips of
/// `floor`, with the device clock of each echo.
fn floor_round_trips(
    floor: &mut Floor,
    clock: &Clock,
    name: &str,
    warmup: usize,
    samples: usize,
) -> (Latency, Vec<Exchange>) {
    for _ in 0..warmup {
        floor
            .round_trip()
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
    let mut lat = Latency::new(name);
    let mut exchanges = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t0 = clock.now();
        floor
            .round_trip()
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let t1 = clock.now();
        lat.record_ns(clock.between(t0, t1));
        exchanges.push(Exchange {
            host_send_ns: clock.ns(t0),
            host_recv_ns: clock.ns(t1),
            device_start_ns: floor.echo_device_ns(),
            device_end_ns: floor.echo_device_ns(),
        });
    }
    (lat, exchanges)
}

/// The one-way split of a floor's round trips, with a clock map of their
/// own fitted as pkq's is: the floor's dispatch, to set pkq's beside.
fn floor_split(exchanges: &[Exchange], name: &str) -> Result<Rows, Box<dyn std::error::Error>> {
    let map = fit_map(exchanges)?;
    let prefix = format!("one-way, {name}");
    let (mut there, mut back) = (vec![], vec![]);
    for e in exchanges {
        let seen = map.to_host_ns(e.device_start_ns);
        there.push(seen - e.host_send_ns as f64);
        back.push(e.host_recv_ns as f64 - seen);
    }
    Ok(vec![
        Latency::row_of(
            &format!("{prefix}: stores called -> a poller sees them"),
            "ns",
            &mut there,
        ),
        Latency::row_of(
            &format!("{prefix}: poller sees -> host sees the echo"),
            "ns",
            &mut back,
        ),
        map_row(&format!("{prefix}: clock map"), &map),
    ])
}

/// The clock map fitted to `exchanges`, as every one-way split here fits it.
fn fit_map(exchanges: &[Exchange]) -> Result<ClockMap, Box<dyn std::error::Error>> {
    Ok(ClockMap::fit(exchanges, 256).ok_or("too few round trips to map the clocks")?)
}

/// A row `name` saying how far `map` can be trusted (see `ClockMap`).
fn map_row(name: &str, map: &ClockMap) -> Map<String, Value> {
    Map::from_iter([
        ("name".to_string(), json!(name)),
        (
            "error_bound_ns".to_string(),
            json!(round3(map.error_bound_ns)),
        ),
        (
            "median_bound_ns".to_string(),
            json!(round3(map.median_bound_ns)),
        ),
        (
            "misfit_fraction".to_string(),
            json!(round3(map.misfit_fraction)),
        ),
    ])
}

/// The one-way breakdown of a run's round trips (rows named `prefix: ...`),
/// and the clock map it rests on.
fn one_way(run: &PkqRun, prefix: &str) -> Result<(ClockMap, Rows), Box<dyn std::error::Error>> {
    let exchanges: Vec<_> = run.exchanges.iter().map(|(e, _)| *e).collect();
    let map = fit_map(&exchanges)?;
    let (mut dispatch, mut pickup, mut exec, mut back) = (vec![], vec![], vec![], vec![]);
    for (e, submitted) in &run.exchanges {
        let start = map.to_host_ns(e.device_start_ns);
        let end = map.to_host_ns(e.device_end_ns);
        dispatch.push(start - e.host_send_ns as f64);
        pickup.push(start - *submitted as f64);
        exec.push(e.device_end_ns.saturating_sub(e.device_start_ns) as f64);
        back.push(e.host_recv_ns as f64 - end);
    }
    let mut submit = run.submit.row("ns");
    submit.insert(
        "name".into(),
        json!(format!("{prefix}: submit() call (host)")),
    );
    let rows = vec![
        submit,
        Latency::row_of(
            &format!("{prefix}: submit called -> handler start (dispatch)"),
            "ns",
            &mut dispatch,
        ),
        Latency::row_of(
            &format!("{prefix}: submit returned -> handler start (pickup)"),
            "ns",
            &mut pickup,
        ),
        Latency::row_of(
            &format!("{prefix}: handler start -> end (execution, device clock)"),
            "ns",
            &mut exec,
        ),
        Latency::row_of(
            &format!("{prefix}: handler end -> host sees completion"),
            "ns",
            &mut back,
        ),
    ];
    Ok((map, rows))
}
