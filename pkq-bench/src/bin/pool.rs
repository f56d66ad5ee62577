//! A pool of GPUs against a lone runtime: the single-task round trip
//! through pools of 1 to all devices beside lone runtimes on the same
//! devices (one per device, the pool's against the mean of theirs),
//! and NOP throughput through pools of 1 to all devices, one task per
//! submit and packed, from several producer threads. One run:
//!
//!     cargo run --release -p pkq-bench --bin pool -- --json pkq-bench/results/pool.json
//!
//! Round trips use the default runtime (one worker of eight pollers);
//! throughput uses the throughput shape (64 workers on 4 rings) on every
//! device, producers (`--producers` per device of the pool: each device fed
//! alike) submitting and waiting for batches of 256 (one task per slot) or
//! packed batches of 8192, least-loaded routing.

use pkq::Submit;
use pkq::builtin::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use pkq::{Pool, Runtime};
use pkq_bench::support::{Latency, Pacer, at_least_one, pin_helper, report, start, write_json};
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "a pool of GPUs against a lone runtime: round trip and throughput")]
struct Args {
    /// Round trips timed per row.
    #[arg(long, default_value_t = 50_000)]
    samples: usize,
    /// Producer threads of the throughput rows, per device of the pool.
    #[arg(long, default_value_t = 4, value_parser = at_least_one)]
    producers: usize,
    /// Seconds per throughput row.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Round trips of `submit` (a NOP, waited), each after a random pause
/// below 4 µs.
fn round_trips(
    name: &str,
    clock: &pkq_bench::support::Clock,
    samples: usize,
    submit: impl Fn() -> pkq::Result<pkq::Ticket>,
) -> pkq::Result<Latency> {
    let mut lat = Latency::new(name);
    let mut pacer = Pacer::new(4_000);
    for i in 0..samples + samples / 10 {
        pacer.pause(clock);
        let t0 = clock.now();
        submit()?.wait()?;
        if i >= samples / 10 {
            lat.record_ns(clock.between(t0, clock.now()));
        }
    }
    Ok(lat)
}

/// Tasks per second through `pool` from `producers` threads for `seconds`.
fn throughput(pool: &Pool, producers: usize, seconds: f64, packed: bool) -> f64 {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for k in 0..producers {
            let (stop, done) = (&stop, &done);
            s.spawn(move || {
                pin_helper(k);
                let tasks = vec![(); if packed { 8192 } else { 256 }];
                while !stop.load(Ordering::Relaxed) {
                    let mut b = if packed {
                        pool.submit(NOP.packed(&tasks))
                    } else {
                        pool.submit(NOP.batch(&tasks))
                    }
                    .unwrap();
                    b.wait().unwrap();
                    done.fetch_add(tasks.len() as u64, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (clock, info) = start(None, 0)?;
    let count = pkq::device_count()?;
    let names: Vec<String> = (0..count)
        .map(|d| pkq::device_info(d).map(|i| i.name))
        .collect::<pkq::Result<_>>()?;
    let mut rows = Vec::new();

    // A lone runtime's round trip on each device (device 0's row is the
    // lone runtime's; the others name their device).
    let mut lone_p50 = Vec::new();
    for (d, name) in names.iter().enumerate() {
        let rt = Runtime::builder().device(d).build()?;
        let row_name = match d {
            0 => "lone runtime round trip".to_string(),
            d => format!("lone runtime round trip, device {d}"),
        };
        let lone = round_trips(&row_name, &clock, args.samples, || rt.submit(NOP.args(&())))?;
        rt.shutdown()?;
        drop(rt);
        lone_p50.push(lone.p50_us());
        let mut row = lone.row("us");
        row.insert("devices".into(), json!([name]));
        rows.push(row);
    }

    // Each shape's rate on one GPU (one task per slot, packed).
    let mut one_gpu: [Option<f64>; 2] = [None, None];
    for n in 1..=count {
        let devices: Vec<usize> = (0..n).collect();
        let on: Vec<&String> = names[..n].iter().collect();
        let pool = Pool::builder().devices(&devices).build()?;
        let name = format!("pool round trip, {n} GPU(s)");
        let l = round_trips(&name, &clock, args.samples, || pool.submit(NOP.args(&())))?;
        // Against the lone runtimes of the same devices (the mean of their
        // p50s: the pool spreads its round trips over them).
        let lone = lone_p50[..n].iter().sum::<f64>() / n as f64;
        let mut row = l.row("us");
        row.insert(
            "p50_vs_lone_x".into(),
            json!((l.p50_us() / lone * 1e4).round() / 1e4),
        );
        row.insert("devices".into(), json!(on));
        row.insert("numa_nodes".into(), json!(pool.numa_nodes()));
        rows.push(row);
        pool.shutdown()?;
        drop(pool);

        let pool = Pool::builder()
            .devices(&devices)
            .runtime_builder(Runtime::builder().workers(64).rings(4).capacity(4096))
            .build()?;
        let producers = args.producers * n;
        for (packed, shape) in [
            (false, format!("one task per slot, {producers} producers")),
            (true, format!("packed, {producers} producers")),
        ] {
            let rate = throughput(&pool, producers, args.seconds, packed);
            let mut m = Map::new();
            m.insert(
                "name".into(),
                json!(format!("pool throughput, {n} GPU(s), {shape}")),
            );
            m.insert("tasks_per_s".into(), json!(rate.round()));
            // Against one GPU's of the same shape (fed alike).
            let one = *one_gpu[usize::from(packed)].get_or_insert(rate);
            if n > 1 {
                m.insert("vs_1_gpu_x".into(), json!((rate / one * 1e3).round() / 1e3));
            }
            m.insert("devices".into(), json!(on));
            println!(
                "{}: {:.1} M tasks/s",
                m["name"].as_str().unwrap(),
                rate / 1e6
            );
            rows.push(m);
        }
        pool.shutdown()?;
    }
    for r in &rows {
        println!("{}", Value::Object(r.clone()));
    }
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}
