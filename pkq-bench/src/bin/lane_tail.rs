//! Where a latency lane's tail comes from: queueing behind its own
//! producers, or the bulk lane beside it.
//!
//! A runtime of two lanes: lane 0 the latency shape (one worker of eight
//! pollers), lane 1 a bulk lane (32 workers, 4 rings). Each row times lane
//! 0's tasks, submit to completion read, under one load:
//!
//! * lane 0's producers: one thread submitting and waiting for each task
//!   (closed loop), or three threads each keeping up to `--window` tasks in
//!   flight (open loop: they submit as fast as the ring takes tasks, and
//!   reap in order);
//! * lane 1: idle, or flooded by four threads submitting batches of 256 NOPs
//!   and waiting for them.
//!
//! Rows: `lane 0 <closed|open>, bulk <idle|flooded>` with
//! p50/p90/p99/p99.9/max in µs and the tasks timed. If the open-loop rows'
//! tails are the same with the bulk lane idle and flooded, the tail is
//! queueing behind the lane's own producers; if the closed-loop row's grows
//! with the flood, it is interference.
//!
//! `cargo run --release -p pkq-bench --bin lane_tail -- --json pkq-bench/results/lane_tail.json`

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use pkq::builtin::{ECHO, NOP};
use pkq::{IdlePolicy, Runtime, Submit};
use pkq_bench::support::{Clock, Latency, report, start, write_json};

#[derive(Parser)]
struct Args {
    /// Seconds each row runs.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Tasks each open-loop producer keeps in flight.
    #[arg(long, default_value_t = 1024)]
    window: usize,
    /// Write the rows here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The bulk lane (as the isolation bench's).
fn bulk_lane() -> pkq::Builder {
    Runtime::builder()
        .workers(32)
        .rings(4)
        .capacity(4096)
        .idle(IdlePolicy::Backoff {
            spin: Duration::from_micros(50),
            max_sleep: Duration::from_micros(20),
        })
}

/// Lane 0's tasks for `seconds` from `producers` threads: closed loop
/// (`window` 1) or open loop (`window` in flight each); every task's time
/// from its submit to its completion read.
fn lane0(rt: &Runtime, clock: &Clock, producers: usize, window: usize, seconds: f64) -> Latency {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                s.spawn(move || {
                    pkq_bench::support::pin_helper(p);
                    let mut lat = Latency::new("lane 0");
                    let mut inflight = VecDeque::new();
                    let mut i = 0u64;
                    while Instant::now() < until {
                        while inflight.len() < window {
                            let t0 = clock.now();
                            inflight.push_back((t0, i, rt.submit(ECHO.args(&i)).unwrap()));
                            i += 1;
                        }
                        let (t0, v, t) = inflight.pop_front().unwrap();
                        assert_eq!(t.wait().unwrap().value, v);
                        lat.record_ns(clock.between(t0, clock.now()));
                    }
                    for (t0, v, t) in inflight {
                        assert_eq!(t.wait().unwrap().value, v);
                        lat.record_ns(clock.between(t0, clock.now()));
                    }
                    lat
                })
            })
            .collect();
        let mut all = Latency::new("lane 0");
        for h in handles {
            all.absorb(&h.join().unwrap());
        }
        all
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (clock, info) = start(None, 0)?;
    let rt = Runtime::builder().add_lane(bulk_lane()).build()?;
    let bulk = rt.lane(1).expect("the bulk lane");
    let mut rows = Vec::new();
    for flooded in [false, true] {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            if flooded {
                for k in 0..4 {
                    let stop = &stop;
                    s.spawn(move || {
                        pkq_bench::support::pin_helper(4 + k);
                        let nops = [(); 256];
                        while !stop.load(Ordering::Relaxed) {
                            bulk.submit(NOP.batch(&nops)).unwrap().wait().unwrap();
                        }
                    });
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            for (loop_kind, producers, window) in
                [("closed", 1, 1), ("closed", 3, 1), ("open", 3, args.window)]
            {
                let mut l = lane0(&rt, &clock, producers, window, args.seconds);
                l.name = format!(
                    "lane 0 {loop_kind}, {producers} producer{}, bulk {}",
                    if producers == 1 { "" } else { "s" },
                    if flooded { "flooded" } else { "idle" }
                );
                println!(
                    "{:<48} p50 {:>9.2} us  p99 {:>9.2} us  p99.9 {:>9.2} us  max {:>10.2} us  ({} tasks)",
                    l.name,
                    l.p50_us(),
                    l.quantile_us(0.99),
                    l.quantile_us(0.999),
                    l.hist.max() as f64 / 1e3,
                    l.hist.len()
                );
                let mut row = l.row("us");
                row.insert("producers".into(), producers.into());
                row.insert("window".into(), window.into());
                rows.push(row);
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
    rt.shutdown()?;
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}
