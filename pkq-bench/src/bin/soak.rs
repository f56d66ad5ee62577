//! Soak: several threads submit random tasks for a given time, each result
//! checked against a CPU reference and every ticket accounted for (none
//! lost, none answered wrongly), with throughput and the latency tail over
//! the whole run. (A task run twice answers one ticket; the GPU tests
//! `pollers_race_for_every_task` and the AXPY tests count that on the
//! device.)
//!
//! Each thread keeps up to `--window` tickets in flight and submits a random
//! mix: ECHO with a random payload of 0-48 bytes (its first word a unique
//! task id, so a completion routed to the wrong ticket shows up), NOP, SPIN
//! of up to 2 µs, and an op no handler knows (which must fail with
//! `UnknownOp`). Latency is submit call to result, queueing included.
//!
//! `cargo run --release -p pkq-bench --bin soak -- --seconds 540 --json pkq-bench/results/soak.json`

use pkq::builtin::*;
use pkq::{Submit, Task};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use pkq::{ARGS_BYTES, Error, Op, Runtime, TaskError, TaskStatus, Ticket};
use pkq_bench::support::{Clock, Latency, report, write_json};
use serde_json::json;

#[derive(Parser)]
#[command(about = "Submit random tasks from several threads for a while; check every result")]
struct Args {
    /// How long to submit.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Submitting threads.
    #[arg(long, default_value_t = 4)]
    threads: u64,
    /// Tickets each thread keeps in flight.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Worker warps of the runtime.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    #[arg(long, default_value_t = 0)]
    device: usize,
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What one thread saw.
#[derive(Default)]
struct Tally {
    submitted: u64,
    correct: u64,
    wrong: u64,
    lost: u64,
}

/// A task in flight: its ticket, what it must return, when it was submitted.
struct InFlight {
    ticket: Ticket,
    id: u64,
    want: Result<u64, TaskStatus>,
    spin_ns: u64,
    t0: u64,
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn submit_random(rt: &Runtime, rng: &mut Rng, id: u64, clock: &Clock) -> pkq::Result<InFlight> {
    let t0 = clock.now();
    let (ticket, want, spin_ns) = match rng.next() % 100 {
        0..70 => {
            // ECHO: id in the first word, then random bytes, random length;
            // the device sees the bytes past `len` as zero, and so do we
            // (the payload is a little-endian byte stream, as x86 memory).
            let len = 8 + (rng.next() % (ARGS_BYTES as u64 - 7)) as usize;
            let mut words = [0u64; ARGS_BYTES / 8];
            words[0] = id;
            for w in &mut words[1..] {
                *w = rng.next();
            }
            bytemuck::bytes_of_mut(&mut words)[len..].fill(0);
            let t = rt.submit(Task::raw(ECHO.op(), &bytemuck::bytes_of(&words)[..len]))?;
            (t, Ok(echo_fold(&words)), 0)
        }
        70..90 => (rt.submit(NOP.args(&()))?, Ok(0), 0),
        90..99 => {
            let ns = rng.next() % 2_000;
            (rt.submit(SPIN.args(&ns))?, Ok(0), ns)
        }
        _ => (
            rt.submit(Task::raw(Op(999), bytemuck::bytes_of(&id)))?,
            Err(TaskStatus::UnknownOp),
            0,
        ),
    };
    Ok(InFlight {
        ticket,
        id,
        want,
        spin_ns,
        t0,
    })
}

fn check(f: InFlight, clock: &Clock, tally: &mut Tally, lat: &mut Latency) {
    let got = f.ticket.wait();
    lat.record_ns(clock.between(f.t0, clock.now()));
    let ok = match (got, f.want) {
        (Ok(c), Ok(_)) if f.spin_ns > 0 => c.value >= f.spin_ns,
        (Ok(c), Ok(want)) => c.value == want,
        (Err(Error::Task(TaskError { status, .. })), Err(want)) => status == want,
        (Err(e @ (Error::Task(_) | Error::Stalled { .. })), _) => {
            eprintln!("task {:#x}: {e}", f.id);
            false
        }
        (Err(e), _) => {
            eprintln!("task {:#x} lost: {e}", f.id);
            tally.lost += 1;
            return;
        }
        (Ok(c), Err(_)) => {
            eprintln!("task {:#x}: expected a failure, got {c:?}", f.id);
            false
        }
    };
    if ok {
        tally.correct += 1;
    } else {
        tally.wrong += 1;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let clock = Arc::new(Clock::calibrate());
    let info = pkq::device_info(args.device)?;
    println!(
        "{}: soak of {} s on {} ({}), pkq {}, {} threads x {} in flight, {} workers",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        args.seconds,
        info.name,
        info.driver,
        pkq::build_info::GIT_COMMIT,
        args.threads,
        args.window,
        args.workers,
    );
    let rt = Arc::new(
        Runtime::builder()
            .device(args.device)
            .workers(args.workers)
            .build()?,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let t_start = Instant::now();
    let handles: Vec<_> = (0..args.threads)
        .map(|p| {
            let (rt, stop, done, clock) = (rt.clone(), stop.clone(), done.clone(), clock.clone());
            let window = args.window;
            std::thread::spawn(move || {
                let mut rng = Rng(0x5eed ^ (p << 32));
                let mut tally = Tally::default();
                let mut lat = Latency::new("soak");
                let mut inflight: VecDeque<InFlight> = VecDeque::with_capacity(window);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if inflight.len() == window {
                        check(inflight.pop_front().unwrap(), &clock, &mut tally, &mut lat);
                    }
                    let id = (p << 40) | n;
                    match submit_random(&rt, &mut rng, id, &clock) {
                        Ok(f) => inflight.push_back(f),
                        Err(e) => {
                            eprintln!("thread {p}: submit failed: {e}");
                            tally.lost += 1;
                        }
                    }
                    tally.submitted += 1;
                    n += 1;
                    if n.is_multiple_of(4096) {
                        done.fetch_add(4096, Ordering::Relaxed);
                    }
                }
                while let Some(f) = inflight.pop_front() {
                    check(f, &clock, &mut tally, &mut lat);
                }
                (tally, lat)
            })
        })
        .collect();

    let deadline = t_start + Duration::from_secs(args.seconds);
    let mut last = (Instant::now(), 0u64);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1).min(deadline - Instant::now()));
        if last.0.elapsed() >= Duration::from_secs(30) {
            let d = done.load(Ordering::Relaxed);
            println!(
                "  {:>4.0} s: {:.2} M tasks/s",
                t_start.elapsed().as_secs_f64(),
                (d - last.1) as f64 / last.0.elapsed().as_secs_f64() / 1e6
            );
            last = (Instant::now(), d);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = Tally::default();
    let mut lat = Latency::new("soak: submit to result (queueing included)");
    for h in handles {
        let (t, l) = h.join().expect("a soak thread panicked");
        total.submitted += t.submitted;
        total.correct += t.correct;
        total.wrong += t.wrong;
        total.lost += t.lost;
        lat.hist.add(&l.hist)?;
    }
    let secs = t_start.elapsed().as_secs_f64();
    rt.shutdown()?;
    println!(
        "\n{} tasks in {secs:.1} s ({:.2} M/s): {} correct, {} wrong, {} lost",
        total.submitted,
        total.submitted as f64 / secs / 1e6,
        total.correct,
        total.wrong,
        total.lost,
    );
    println!(
        "latency (µs): p50 {:.2}, p90 {:.2}, p99 {:.2}, p99.9 {:.2}, p99.99 {:.2}, max {:.2}",
        lat.quantile_us(0.5),
        lat.quantile_us(0.9),
        lat.quantile_us(0.99),
        lat.quantile_us(0.999),
        lat.quantile_us(0.9999),
        lat.hist.max() as f64 / 1e3
    );
    let mut row = lat.row("us");
    row.insert("p99_99_us".into(), json!(lat.quantile_us(0.9999)));
    row.insert("seconds".into(), json!((secs * 10.0).round() / 10.0));
    row.insert("threads".into(), json!(args.threads));
    row.insert("window".into(), json!(args.window));
    row.insert("workers".into(), json!(args.workers));
    row.insert("tasks".into(), json!(total.submitted));
    row.insert(
        "tasks_per_s".into(),
        json!((total.submitted as f64 / secs).round()),
    );
    row.insert("correct".into(), json!(total.correct));
    row.insert("wrong".into(), json!(total.wrong));
    row.insert("lost".into(), json!(total.lost));
    if let Some(path) = &args.json {
        write_json(path, &report(&info, vec![row]));
    }
    if total.wrong + total.lost > 0 {
        return Err("the soak found lost or wrong tasks".into());
    }
    Ok(())
}
