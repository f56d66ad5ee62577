//! The host side of `submit`: encode the arguments, reserve a sequence
//! number, publish the slot, on a ring that nobody consumes (reset, untimed,
//! between batches). No GPU needed: it measures what a producer thread pays
//! when the slot's cache line is its own, for one copy of the slot. On the
//! GPU machine, `--example latency`'s "submit() call" rows measure the
//! runtime's own shapes with the device polling: the default shape writes a
//! copy of the slot for each of its pollers.
//!
//! `cargo bench --bench submit` (criterion); with `PKQ_BENCH_JSON=path` the
//! medians are also written as a pkq bench report.

#[path = "../examples/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::Criterion;
use pkq::Op;
use pkq::host_ring::HostRing;
use serde_json::{Map, Value, json};

const CAPACITY: u64 = 1024;

/// `iters` submits of `args`, timed in batches of one ring's capacity;
/// with `held`, as an exclusive producer submits.
fn timed<A: bytemuck::Pod>(
    ring: &mut HostRing,
    iters: u64,
    op: Op,
    args: &A,
    held: bool,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        ring.reset();
        if held {
            ring.hold().unwrap();
        }
        let n = (iters - done).min(CAPACITY);
        let t0 = Instant::now();
        for _ in 0..n {
            let seq = if held {
                ring.submit_held(op, black_box(args))
            } else {
                ring.submit(op, black_box(args))
            };
            black_box(seq.unwrap());
        }
        total += t0.elapsed();
        done += n;
    }
    total
}

/// `iters` tasks of `op` submitted in batches of `batch`, each completed
/// as a device would and reaped as `Batch::wait` does: per task, what the
/// host pays around the device.
fn timed_batches<A: bytemuck::Pod>(
    ring: &mut HostRing,
    iters: u64,
    op: Op,
    args: &[A],
) -> Duration {
    let batch = args.len() as u64;
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        ring.reset();
        let t0 = Instant::now();
        for _ in 0..CAPACITY / batch {
            let first = ring.submit_batch(op, black_box(args)).unwrap();
            for k in 0..batch {
                ring.complete(first + k, k);
            }
            for k in 0..batch {
                black_box(ring.take(first + k).unwrap());
            }
        }
        total += t0.elapsed();
        done += CAPACITY;
    }
    // Per task: criterion divides by `iters`, which counted tasks.
    total.mul_f64(iters as f64 / done as f64)
}

/// `iters` NOP tasks submitted in packed batches of 4096 (128 packs of
/// 32), each pack completed as a device would (32 result words and the
/// completion) and reaped as a packed `Batch` does: per task, what the
/// host pays around the device.
fn timed_packs(ring: &mut HostRing, iters: u64) -> Duration {
    const TASKS: u64 = 4096;
    let (nops, values) = ([(); TASKS as usize], [0u64; 32]);
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        ring.reset();
        let t0 = Instant::now();
        for _ in 0..CAPACITY / (TASKS / 32) {
            let first = ring.submit_packed(Op::NOP, black_box(&nops)).unwrap();
            for k in 0..TASKS / 32 {
                ring.complete_pack(first + k, &values);
            }
            for k in 0..TASKS / 32 {
                black_box(ring.take_pack(first + k).unwrap());
            }
        }
        total += t0.elapsed();
        done += CAPACITY * 32;
    }
    total.mul_f64(iters as f64 / done as f64)
}

const CASES: [&str; 5] = [
    "nop_no_args",
    "nop_no_args_exclusive_producer",
    "echo_48_byte_args",
    "batch_256_nop_submit_complete_reap",
    "packed_4096_nop_submit_complete_reap",
];

fn benches(c: &mut Criterion) {
    let mut ring = HostRing::new(CAPACITY as usize).unwrap();
    let mut g = c.benchmark_group("submit");
    g.bench_function(CASES[0], |b| {
        b.iter_custom(|iters| timed(&mut ring, iters, Op::NOP, &(), false))
    });
    g.bench_function(CASES[1], |b| {
        b.iter_custom(|iters| timed(&mut ring, iters, Op::NOP, &(), true))
    });
    g.bench_function(CASES[2], |b| {
        b.iter_custom(|iters| timed(&mut ring, iters, Op::ECHO, &[7u64; 6], false))
    });
    let nops = [(); 256];
    g.bench_function(CASES[3], |b| {
        b.iter_custom(|iters| timed_batches(&mut ring, iters, Op::NOP, &nops))
    });
    g.bench_function(CASES[4], |b| {
        b.iter_custom(|iters| timed_packs(&mut ring, iters))
    });
    g.finish();
}

fn main() {
    let out = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("pkq-criterion"));
    let mut c = Criterion::default()
        .output_directory(&out)
        .configure_from_args();
    benches(&mut c);
    c.final_summary();
    let Some(path) = std::env::var_os("PKQ_BENCH_JSON") else {
        return;
    };
    let mut rows = Vec::new();
    for case in CASES {
        let file = out
            .join("submit")
            .join(case)
            .join("new")
            .join("estimates.json");
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let est: Value = serde_json::from_str(&text).unwrap();
        let point = |k: &str| est[k]["point_estimate"].as_f64().unwrap_or(f64::NAN);
        rows.push(Map::from_iter([
            ("name".to_string(), json!(format!("host submit, {case}"))),
            (
                "median_ns".to_string(),
                json!((point("median") * 100.0).round() / 100.0),
            ),
            (
                "mean_ns".to_string(),
                json!((point("mean") * 100.0).round() / 100.0),
            ),
        ]));
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let device = pkq::device_info(0).unwrap_or(pkq::DeviceInfo {
        name: "no GPU".into(),
        compute_capability: (0, 0),
        multiprocessors: 0,
        driver: "none".into(),
    });
    let mut rep = support::report(&device, rows);
    rep["device"] = json!(format!("{} (host CPU: {cpu})", device.name));
    support::write_json(std::path::Path::new(&path), &rep);
}
