//! Throughput in one process run: pkq no-op tasks per second from 1, 2, 4
//! and 8 producer threads (each pinned to a core of its own), one task per
//! submit (on one ring, and on a ring per thread) and in batches of 32 and
//! 256 (one thread's batches of 256 also reaped by 1 or 3 other threads,
//! and of 4096 by 3 or 5; packed batches of 4096 and 32768 from 1, 2 and
//! 4); a small real op (ECHO, every result checked, in batches and
//! packed); back-to-back kernel launches per second and CUDA graph kernel
//! nodes per second; and what a running
//! pkq costs an ordinary kernel the application launches on its own stream;
//! one task's round trip on the same runtime once it is idle; where a
//! producer submitting one task at a time spends its time (inside submit,
//! inside wait, elsewhere); and the device's own rate draining a full ring,
//! by its clock.
//!
//! `cargo run --release -p pkq-bench --bin throughput -- --json pkq-bench/results/throughput.json --svg pkq-bench/results/throughput.svg`

use pkq::Submit;
use pkq::builtin::*;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Parser;
use pkq::Runtime;
use pkq::cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg, sys};
use pkq_bench::support::{
    Clock, Latency, one_stream_context, pin_helper, report, start, write_json,
};
use plotters::prelude::*;
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "pkq tasks/s vs kernel launches/s vs CUDA graph nodes/s")]
struct Args {
    /// Seconds per pkq configuration.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Worker warps of the runtime.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Slots of the ring for single submits and the rest (a larger ring is
    /// slower there: its lines leave the host's caches).
    #[arg(long, default_value_t = 16384)]
    capacity: usize,
    /// Slots of the ring for the batched rows: the larger the ring, the
    /// later producers lap the slowest reaper, moving its completions aside
    /// (each row reports how many; docs/design/moved-completions.md).
    #[arg(long, default_value_t = 65536)]
    batch_capacity: usize,
    /// Tasks each producer submitting one at a time keeps in flight.
    #[arg(long, default_value_t = 1024)]
    window: usize,
    /// Tasks each producer submitting batches keeps in flight (at least 8
    /// batches' worth when other threads reap them).
    #[arg(long, default_value_t = 2048)]
    batch_window: usize,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// How a producer submits.
#[derive(Clone, Copy)]
enum Mode {
    Single,
    /// One task per submit through an exclusive producer
    /// (`Runtime::exclusive_producer_on`): no locked instruction to reserve.
    Exclusive,
    Batch(usize),
    /// Batches of this many (`.0`), handed round-robin to `.1` other
    /// threads that reap them (the producer thread only publishes, as an
    /// io_uring submitter does).
    Pipelined(usize, usize),
    /// Packed batches of this many (`Runtime::submit_packed`: 32 tasks a
    /// slot), published and reaped by the same thread.
    Packed(usize),
}

/// Waits for `batch`, whose every result must be Ok; returns its size.
fn reap(mut batch: pkq::Batch) -> u64 {
    let r = batch.wait().unwrap();
    assert!(r.iter().all(Result::is_ok));
    r.len() as u64
}

/// No-op tasks per second from `producers` threads for `secs`, each keeping
/// `window` tasks in flight; every result must be Ok. Producer `i` submits
/// to `rts[i % rts.len()]`.
fn pump(rts: &[&Runtime], producers: usize, mode: Mode, window: usize, secs: f64) -> f64 {
    let start = Barrier::new(producers);
    let dur = Duration::from_secs_f64(secs);
    let (done, took): (Vec<u64>, Vec<f64>) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..producers)
            .map(|i| {
                let start = &start;
                let rt = rts[i % rts.len()];
                s.spawn(move || {
                    pin_helper(i);
                    start.wait();
                    let t0 = Instant::now();
                    let mut done = 0u64;
                    // Producer `i` submits one at a time to ring `i % rings`.
                    let ring = i % rt.rings();
                    let shared = rt.producer_on(ring).unwrap();
                    let exclusive = match mode {
                        Mode::Exclusive => Some(rt.exclusive_producer_on(ring).unwrap()),
                        _ => None,
                    };
                    match mode {
                        Mode::Single | Mode::Exclusive => {
                            let mut q = VecDeque::with_capacity(window);
                            let mut i = 0u64;
                            while i & 255 != 0 || t0.elapsed() < dur {
                                if q.len() == window {
                                    let t: pkq::Ticket = q.pop_front().unwrap();
                                    t.wait().unwrap();
                                    done += 1;
                                }
                                let t = match &exclusive {
                                    Some(p) => p.submit(NOP.args(&())),
                                    None => shared.submit(NOP.args(&())),
                                };
                                q.push_back(t.unwrap());
                                i += 1;
                            }
                            for t in q {
                                t.wait().unwrap();
                                done += 1;
                            }
                        }
                        Mode::Pipelined(b, reapers) => {
                            let args = vec![(); b];
                            let in_flight = (window / b / reapers).max(1);
                            let (txs, reapers): (Vec<_>, Vec<_>) = (0..reapers)
                                .map(|r| {
                                    let (tx, rx) = std::sync::mpsc::sync_channel(in_flight);
                                    let reaper = std::thread::spawn(move || {
                                        pin_helper(producers + i * reapers + r);
                                        rx.into_iter().map(reap).sum::<u64>()
                                    });
                                    (tx, reaper)
                                })
                                .unzip();
                            for tx in txs.iter().cycle() {
                                if t0.elapsed() >= dur {
                                    break;
                                }
                                tx.send(rt.submit(NOP.batch(&args)).unwrap()).unwrap();
                            }
                            drop(txs);
                            done = reapers.into_iter().map(|r| r.join().unwrap()).sum();
                        }
                        Mode::Batch(b) | Mode::Packed(b) => {
                            let args = vec![(); b];
                            let mut q = VecDeque::with_capacity(window / b + 1);
                            while t0.elapsed() < dur {
                                if q.len() * b >= window {
                                    done += reap(q.pop_front().unwrap());
                                }
                                q.push_back(
                                    match mode {
                                        Mode::Packed(_) => rt.submit(NOP.packed(&args)),
                                        _ => rt.submit(NOP.batch(&args)),
                                    }
                                    .unwrap(),
                                );
                            }
                            done += q.into_iter().map(reap).sum::<u64>();
                        }
                    }
                    (done, t0.elapsed().as_secs_f64())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).unzip()
    });
    done.iter().sum::<u64>() as f64 / took.iter().cloned().fold(0.0, f64::max)
}

/// ECHO tasks from 4 threads, every result checked against the host's:
/// 48-byte payloads in batches of 256, or `packed` (`submit_packed`: 8-byte
/// payloads, whose ECHO is the word itself, in batches of 4096): tasks per
/// second.
fn echo_checked(rt: &Runtime, secs: f64, packed: bool) -> f64 {
    let dur = Duration::from_secs_f64(secs);
    let (done, took): (Vec<u64>, Vec<f64>) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|p| {
                s.spawn(move || {
                    pin_helper(p as usize);
                    let t0 = Instant::now();
                    let mut done = 0u64;
                    let mut id = p << 48;
                    // Each batch with the values its results must have.
                    let mut q: VecDeque<(pkq::Batch, Vec<u64>)> = VecDeque::new();
                    let check = |mut batch: pkq::Batch, want: Vec<u64>| {
                        let r = batch.wait().unwrap();
                        for (r, w) in r.iter().zip(&want) {
                            assert_eq!(r.as_ref().unwrap().value, *w);
                        }
                        r.len() as u64
                    };
                    while t0.elapsed() < dur {
                        if q.len() == 4 {
                            let (b, a) = q.pop_front().unwrap();
                            done += check(b, a);
                        }
                        q.push_back(if packed {
                            let words: Vec<u64> = (0..4096)
                                .map(|_| {
                                    id += 1;
                                    id.rotate_left(29) ^ 0x5555
                                })
                                .collect();
                            (rt.submit(ECHO.packed(&words)).unwrap(), words)
                        } else {
                            let args: Vec<[u64; 6]> = (0..256)
                                .map(|_| {
                                    id += 1;
                                    [id, !id, id.rotate_left(17), id ^ 0x5555, id * 3, id >> 3]
                                })
                                .collect();
                            let want = args.iter().map(echo_fold).collect();
                            (rt.submit(ECHO_48.batch(&args)).unwrap(), want)
                        });
                    }
                    for (b, a) in q {
                        done += check(b, a);
                    }
                    (done, t0.elapsed().as_secs_f64())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).unzip()
    });
    done.iter().sum::<u64>() as f64 / took.iter().cloned().fold(0.0, f64::max)
}

/// Where a producer's time goes when it submits one NOP at a time (as
/// `Mode::Single`: `window` in flight, for `secs`): the mean ns per task
/// inside `submit` and inside `Ticket::wait`, on the TSC clock, averaged
/// over `producers`. Returns tasks per second (as `pump`) and those two
/// with the rest of each task's wall time: `[tasks/s, submit, wait, other]`.
fn single_split(
    rt: &Runtime,
    producers: usize,
    window: usize,
    secs: f64,
    clock: &Clock,
) -> [f64; 4] {
    let start = Barrier::new(producers);
    let dur = Duration::from_secs_f64(secs);
    // Per producer: tasks, seconds, and ns per task in submit, in wait, in all.
    let per: Vec<(u64, f64, [f64; 3])> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..producers)
            .map(|i| {
                let start = &start;
                s.spawn(move || {
                    pin_helper(i);
                    let mut q: VecDeque<pkq::Ticket> = VecDeque::with_capacity(window);
                    let (mut n, mut submit, mut wait) = (0u64, 0u64, 0u64);
                    let mut take = |t: pkq::Ticket| {
                        let a = clock.now();
                        t.wait().unwrap();
                        wait += clock.between(a, clock.now());
                    };
                    start.wait();
                    let t0 = Instant::now();
                    while n & 255 != 0 || t0.elapsed() < dur {
                        if q.len() == window {
                            take(q.pop_front().unwrap());
                        }
                        let a = clock.now();
                        let t = rt.submit(NOP.args(&())).unwrap();
                        submit += clock.between(a, clock.now());
                        q.push_back(t);
                        n += 1;
                    }
                    q.into_iter().for_each(&mut take);
                    let took = t0.elapsed().as_secs_f64();
                    let per_task = |ns: f64| ns / n as f64;
                    (
                        n,
                        took,
                        [submit as f64, wait as f64, took * 1e9].map(per_task),
                    )
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mean = |k: usize| per.iter().map(|p| p.2[k]).sum::<f64>() / producers as f64;
    let [submit, wait, wall] = [0, 1, 2].map(mean);
    let took = per.iter().map(|p| p.1).fold(0.0, f64::max);
    let rate = per.iter().map(|p| p.0).sum::<u64>() as f64 / took;
    [rate, submit, wait, wall - submit - wait]
}

/// The device's own rate, apart from how fast producers feed it: 16 batches
/// of 4096 NOPs (a ring of 65536 at once) published without waiting, then
/// reaped, on a runtime of `workers` warps with no other pkq kernel running.
/// Rated by the device's clock over the middle 80% of task starts (the edges
/// are the ramp-up and the stragglers), beside the host's rate of publishing
/// and of the whole run; of 3 runs, the one the device rates best. Returns
/// `[device, host publish, host end to end]` tasks per second.
fn device_drain(workers: usize) -> Result<[f64; 3], Box<dyn std::error::Error>> {
    const BATCHES: usize = 16;
    const BATCH: usize = 4096;
    let rt = Runtime::builder()
        .workers(workers)
        .capacity(BATCHES * BATCH)
        .build()?;
    let args = vec![(); BATCH];
    for _ in 0..4 {
        reap(rt.submit(NOP.batch(&args))?);
    }
    let mut best = [0.0f64; 3];
    for _ in 0..3 {
        let t0 = Instant::now();
        let batches = (0..BATCHES)
            .map(|_| rt.submit(NOP.batch(&args)))
            .collect::<pkq::Result<Vec<_>>>()?;
        let publish = t0.elapsed().as_secs_f64();
        let mut starts = Vec::with_capacity(BATCHES * BATCH);
        for mut b in batches {
            for r in b.wait()? {
                starts.push(r.expect("NOP task failed").device_start_ns);
            }
        }
        let all = t0.elapsed().as_secs_f64();
        starts.sort_unstable();
        let n = starts.len();
        let middle_s = (starts[n * 9 / 10] - starts[n / 10]).max(1) as f64 * 1e-9;
        let device = 0.8 * n as f64 / middle_s;
        if device > best[0] {
            best = [device, n as f64 / publish, n as f64 / all];
        }
    }
    rt.shutdown()?;
    Ok(best)
}

fn row(name: &str, key: &str, v: f64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert(key.into(), json!(v.round()));
    m
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // pkq-bench's module first, before any pkq runtime starts (see
    // pkq_bench::floor).
    pkq_bench::floor::load(0)?;
    let (clock, info) = start(None, 0)?;

    // Everything that may wait for the context comes before the runtime.
    let ctx = one_stream_context()?;
    let stream = ctx.new_stream()?;
    let module = pkq_bench::floor::load(0)?;
    let empty = module.load_function("pkq_empty_kernel")?;
    let gemv = module.load_function("pkq_gemv_kernel")?;
    const DIM: u32 = 4096;
    let a = stream.alloc_zeros::<f32>((DIM * DIM) as usize)?;
    let x = stream.alloc_zeros::<f32>(DIM as usize)?;
    let mut y = stream.alloc_zeros::<f32>(DIM as usize)?;
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let (ap, _ga) = a.device_ptr(&stream);
    let (xp, _gx) = x.device_ptr(&stream);
    let (yp, _gy) = y.device_ptr_mut(&stream);
    // The application's own kernel: y = A x over 4096 x 4096 (64 MiB read),
    // one warp per row.
    let work = || -> Result<(), pkq::cudarc::driver::DriverError> {
        let cfg = LaunchConfig {
            grid_dim: (DIM / 8, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: pkq_gemv_kernel(const float*, const float*, float*, u32,
        // u32) over the buffers above, of DIM x DIM, DIM and DIM floats.
        unsafe {
            stream
                .launch_builder(&gemv)
                .arg(&ap)
                .arg(&xp)
                .arg(&yp)
                .arg(&DIM)
                .arg(&DIM)
                .launch(cfg)?;
        }
        stream.synchronize()
    };
    // Each launch + sync timed on its own: [p50, p99, mean] in µs. The
    // median is the typical cost; a mean of 200 takes in any pause of the
    // host (one of 5 ms adds 25 µs to it).
    let time_work = |n: usize| -> Result<[f64; 3], pkq::cudarc::driver::DriverError> {
        let mut us = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            work()?;
            us.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let mean = us.iter().sum::<f64>() / n as f64;
        us.sort_by(f64::total_cmp);
        Ok([us[n / 2], us[n * 99 / 100], mean])
    };
    time_work(20)?;
    let work_alone = time_work(200)?;

    // Launches per second: back to back on one stream, one sync at the end.
    let n = 50_000;
    // SAFETY: pkq_empty_kernel takes no parameters.
    unsafe { stream.launch_builder(&empty).launch(one) }?;
    stream.synchronize()?;
    let t0 = Instant::now();
    for _ in 0..n {
        // SAFETY: as above.
        unsafe { stream.launch_builder(&empty).launch(one) }?;
    }
    stream.synchronize()?;
    let launches = n as f64 / t0.elapsed().as_secs_f64();

    // CUDA graph kernel nodes per second: a graph of 1000 empty kernels.
    let nodes = 1000;
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    for _ in 0..nodes {
        // SAFETY: as above; captured, not run.
        unsafe { stream.launch_builder(&empty).launch(one) }?;
    }
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))?
        .ok_or("stream capture produced no graph")?;
    graph.upload()?;
    graph.launch()?;
    stream.synchronize()?;
    let reps = 50;
    let t0 = Instant::now();
    for _ in 0..reps {
        graph.launch()?;
    }
    stream.synchronize()?;
    let graph_nodes = (reps * nodes) as f64 / t0.elapsed().as_secs_f64();
    drop(graph);

    let mut rows = Vec::new();
    let mut bars: Vec<(String, f64)> = Vec::new();
    println!("\n{:<50}{:>16}", "", "tasks/s");
    let mut best_batched_1 = 0.0f64;
    let mut pipelined_1 = 0.0f64;
    let mut packed_1 = 0.0f64;
    let mut single_4 = 0.0f64;
    // One pump per row: its rate, and the completions producers moved
    // aside meanwhile (`Runtime::moved_completions`).
    let mut pump_row = |rt: &Runtime, producers: usize, mode: Mode| {
        let window = match mode {
            Mode::Single | Mode::Exclusive => args.window,
            Mode::Batch(_) => args.batch_window,
            // Several batches in flight per reaping thread, however large.
            Mode::Pipelined(b, _) => args.batch_window.max(8 * b),
            Mode::Packed(b) => args.batch_window.max(4 * b),
        };
        let moved = rt.moved_completions();
        let rate = pump(&[rt], producers, mode, window, args.seconds);
        let moved = rt.moved_completions() - moved;
        let rings = match rt.rings() {
            1 => String::new(),
            r => format!(", {r} rings"),
        };
        let name = match mode {
            Mode::Single => format!("pkq NOP, {producers} producer(s), one task per submit{rings}"),
            Mode::Exclusive => {
                format!("pkq NOP, {producers} exclusive producer(s), one task per submit{rings}")
            }
            Mode::Batch(b) => format!("pkq NOP, {producers} producer(s), batches of {b}"),
            Mode::Pipelined(b, 1) => format!(
                "pkq NOP, {producers} producer(s), batches of {b}, reaped by another thread"
            ),
            Mode::Pipelined(b, r) => format!(
                "pkq NOP, {producers} producer(s), batches of {b}, reaped by {r} other threads"
            ),
            Mode::Packed(b) => format!("pkq NOP, {producers} producer(s), packed batches of {b}"),
        };
        println!("{name:<50}{rate:>16.0}  ({moved} completions moved)");
        match mode {
            Mode::Batch(_) if producers == 1 => best_batched_1 = best_batched_1.max(rate),
            Mode::Pipelined(..) => pipelined_1 = pipelined_1.max(rate),
            Mode::Packed(_) if producers == 1 => packed_1 = packed_1.max(rate),
            Mode::Single | Mode::Exclusive if producers == 4 => single_4 = single_4.max(rate),
            _ => {}
        }
        let mut m = row(&name, "tasks_per_s", rate);
        m.insert("moved_tasks".into(), json!(moved));
        m.insert("ring_slots".into(), json!(rt.capacity()));
        m.insert("workers".into(), json!(rt.workers()));
        m.insert("rings".into(), json!(rt.rings()));
        rows.push(m);
        bars.push((name, rate));
    };
    // The batched rows on a ring of their own, then the single submits on
    // the runtime the rows after them use (one resident kernel at a time).
    let batch_rt = Runtime::builder()
        .workers(args.workers)
        .capacity(args.batch_capacity)
        .build()?;
    for producers in [1usize, 2, 4, 8] {
        for b in [32, 256] {
            pump_row(&batch_rt, producers, Mode::Batch(b));
        }
        if producers == 1 {
            for reapers in [1, 3] {
                pump_row(&batch_rt, producers, Mode::Pipelined(256, reapers));
            }
            // Batches that span several slots of each worker: most of a
            // batch's lines are not being polled while they are written
            // (docs/design/packs-and-batches.md#batches-spanning-several-slots-of-each-worker).
            for reapers in [3, 5] {
                pump_row(&batch_rt, producers, Mode::Pipelined(4096, reapers));
            }
        }
        // Packed: 32 tasks a slot (`Runtime::submit_packed`).
        if producers <= 4 {
            for b in [4096, 32768] {
                pump_row(&batch_rt, producers, Mode::Packed(b));
            }
        }
    }
    batch_rt.shutdown()?;
    // One task per submit, a ring per producer (the same workers and slots
    // in all, spread over the rings): nothing on the submit path shared.
    for producers in [2usize, 4, 8].into_iter().filter(|&p| p <= args.workers) {
        let rings_rt = Runtime::builder()
            .workers(args.workers)
            .rings(producers)
            .capacity(args.capacity / producers)
            .build()?;
        pump_row(&rings_rt, producers, Mode::Single);
        pump_row(&rings_rt, producers, Mode::Exclusive);
        rings_rt.shutdown()?;
    }
    let rt = Runtime::builder()
        .workers(args.workers)
        .capacity(args.capacity)
        .build()?;
    for producers in [1usize, 2, 4, 8] {
        pump_row(&rt, producers, Mode::Single);
    }
    pump_row(&rt, 1, Mode::Exclusive);
    // Four producers that share nothing: a runtime each (its own ring, tail
    // and kernel, a quarter of the workers), beside rings of one runtime
    // above. (This row runs while the runtime above idles.)
    {
        let own: Vec<Runtime> = (0..4)
            .map(|_| {
                Runtime::builder()
                    .workers((args.workers / 4).max(1))
                    .capacity(args.capacity / 4)
                    .build()
            })
            .collect::<pkq::Result<_>>()?;
        let refs: Vec<&Runtime> = own.iter().collect();
        let rate = pump(&refs, 4, Mode::Single, args.window, args.seconds);
        let name = "pkq NOP, 4 producers, one task per submit, a runtime each";
        println!("{name:<50}{rate:>16.0}");
        rows.push(row(name, "tasks_per_s", rate));
        for rt in own {
            rt.shutdown()?;
        }
    }
    // One task per submit again, split: the host's time inside submit, inside
    // wait and elsewhere, per task (what bounds the one-at-a-time rows).
    for producers in [1usize, 4] {
        let [rate, submit, wait, other] = single_split(&rt, producers, args.window, 0.7, &clock);
        let name =
            format!("pkq NOP, {producers} producer(s), one task per submit: host time split");
        println!(
            "{name:<50}{rate:>16.0}  (ns per task: submit {submit:.0}, wait {wait:.0}, other {other:.0})"
        );
        let mut m = row(&name, "tasks_per_s", rate);
        for (key, ns) in [
            ("submit_ns", submit),
            ("wait_ns", wait),
            ("other_ns", other),
        ] {
            m.insert(key.into(), json!((ns * 10.0).round() / 10.0));
        }
        rows.push(m);
    }
    // One task at a time on the same runtime, now idle: the round trip the
    // latency bench measures, with this many workers polling.
    std::thread::sleep(Duration::from_millis(20));
    let idle_rt = Latency::measure(
        "pkq round trip, idle runtime",
        &clock,
        2_000,
        20_000,
        || rt.submit(NOP.args(&()))?.wait().map(drop),
    );
    println!(
        "{:<50}{:>13.2} µs",
        "pkq round trip p50, idle runtime",
        idle_rt.p50_us()
    );
    rows.push(idle_rt.row("us"));
    let echo = echo_checked(&rt, args.seconds, false);
    println!(
        "{:<50}{echo:>16.0}",
        "pkq ECHO, 4 producers, batches of 256, checked"
    );
    rows.push(row(
        "pkq ECHO (48-byte payload, every result checked), 4 producers, batches of 256",
        "tasks_per_s",
        echo,
    ));
    bars.push(("pkq ECHO, checked, 4 x 256".into(), echo));
    let echo = echo_checked(&rt, args.seconds, true);
    println!(
        "{:<50}{echo:>16.0}",
        "pkq ECHO, 4 producers, packed batches of 4096, checked"
    );
    rows.push(row(
        "pkq ECHO (8-byte payload, every result checked), 4 producers, packed batches of 4096",
        "tasks_per_s",
        echo,
    ));
    bars.push(("pkq ECHO, checked, packed, 4 x 4096".into(), echo));

    // The application's kernel with pkq idle, then busy.
    let work_idle = time_work(200)?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let work_busy = std::thread::scope(|s| {
        let pumping = s.spawn(|| {
            pin_helper(0);
            let args = vec![(); 256];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rt.submit(NOP.batch(&args)).unwrap().wait().unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        let t = time_work(200);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        pumping.join().unwrap();
        t
    })?;
    rt.shutdown()?;

    // The device draining a full ring on a runtime of its own, built now
    // that none runs (it reuses the module the first runtime loaded).
    let [device, publish, end_to_end] = device_drain(args.workers)?;
    let name = "device drain: 65536 NOPs published at once, rate by the device's clock";
    println!(
        "{name:<50}{device:>16.0}  (host: published at {publish:.0}/s, {end_to_end:.0}/s end to end)"
    );
    let mut m = row(name, "device_tasks_per_s", device);
    m.insert("host_publish_tasks_per_s".into(), json!(publish.round()));
    m.insert(
        "host_end_to_end_tasks_per_s".into(),
        json!(end_to_end.round()),
    );
    rows.push(m);

    println!("{:<50}{launches:>16.0}", "kernel launches (back to back)");
    println!(
        "{:<50}{graph_nodes:>16.0}",
        "CUDA graph kernel nodes (1000-node graph)"
    );
    rows.push(row(
        "kernel launches, back to back, one sync",
        "per_s",
        launches,
    ));
    rows.push(row(
        "CUDA graph kernel nodes (graphs of 1000)",
        "per_s",
        graph_nodes,
    ));
    bars.push(("kernel launches".into(), launches));
    bars.push(("CUDA graph kernel nodes".into(), graph_nodes));
    println!(
        "\napplication kernel (y = A x, 4096 x 4096) launch + sync, p50: alone {:.1} µs, \
         pkq idle {:.1} µs ({:.3}x), pkq busy {:.1} µs ({:.3}x)",
        work_alone[0],
        work_idle[0],
        work_idle[0] / work_alone[0],
        work_busy[0],
        work_busy[0] / work_alone[0]
    );
    for (name, v) in [
        ("application kernel alone", work_alone),
        ("application kernel, pkq idle (spinning)", work_idle),
        ("application kernel, pkq busy (NOP batches)", work_busy),
    ] {
        let mut m = Map::new();
        m.insert("name".into(), json!(name));
        let [p50, p99, mean] = v;
        m.insert("p50_us".into(), json!((p50 * 100.0).round() / 100.0));
        m.insert("p99_us".into(), json!((p99 * 100.0).round() / 100.0));
        m.insert("mean_us".into(), json!((mean * 100.0).round() / 100.0));
        m.insert(
            "vs_alone_x".into(),
            json!((p50 / work_alone[0] * 1000.0).round() / 1000.0),
        );
        rows.push(m);
    }
    let best = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let best_vs_graph = best / graph_nodes;
    let mut summary = Map::new();
    summary.insert("name".into(), json!("targets"));
    summary.insert(
        "batched_1_producer_tasks_per_s".into(),
        json!(best_batched_1.round()),
    );
    summary.insert(
        "pipelined_1_producer_tasks_per_s".into(),
        json!(pipelined_1.round()),
    );
    summary.insert(
        "packed_1_producer_tasks_per_s".into(),
        json!(packed_1.round()),
    );
    summary.insert(
        "single_4_producers_tasks_per_s".into(),
        json!(single_4.round()),
    );
    summary.insert("best_tasks_per_s".into(), json!(best.round()));
    summary.insert(
        "best_vs_graph_nodes_x".into(),
        json!((best_vs_graph * 100.0).round() / 100.0),
    );
    summary.insert("workers".into(), json!(args.workers));
    summary.insert("capacity".into(), json!(args.capacity));
    summary.insert("window_tasks".into(), json!(args.window));
    summary.insert("batch_window_tasks".into(), json!(args.batch_window));
    summary.insert("batch_capacity".into(), json!(args.batch_capacity));
    rows.push(summary);
    println!(
        "\nbatched, 1 producer: {:.1} M/s ({:.1} M/s with reaping threads, {:.1} M/s packed); one at a time, 4 producers: {:.1} M/s; best pkq rate {:.1} M/s, {:.1}x graph nodes",
        best_batched_1 / 1e6,
        pipelined_1 / 1e6,
        packed_1 / 1e6,
        single_4 / 1e6,
        best / 1e6,
        best_vs_graph
    );
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    if let Some(path) = &args.svg {
        plot(path, &bars)?;
    }
    Ok(())
}

/// One bar per row, tasks (or launches, nodes) per second on a log scale.
fn plot(path: &PathBuf, bars: &[(String, f64)]) -> Result<(), Box<dyn std::error::Error>> {
    let hi = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let lo = bars.iter().map(|b| b.1).fold(f64::MAX, f64::min).max(1.0);
    let root = SVGBackend::new(path, (1100, 220 + 26 * bars.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("per second (log scale)", ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(430)
        .build_cartesian_2d((lo / 2.0..hi * 2.0).log_scale(), 0..bars.len())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(bars.len())
        .y_label_formatter(&|i| bars.get(*i).map(|b| b.0.clone()).unwrap_or_default())
        .x_desc("per second")
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (name, v))| {
        let color = if name.starts_with("pkq") { BLUE } else { RED };
        Rectangle::new([(lo / 2.0, i), (*v, i + 1)], color.mix(0.7).filled())
    }))?;
    root.present()?;
    println!("wrote {}", path.display());
    Ok(())
}
