//! GPU tests: the real kernel on random inputs, checked against CPU
//! references, every task counted (none lost, none twice).
//!
//! Our own runner (harness = false): on a machine without a usable GPU it
//! says so and how many tests it skipped, instead of reporting tests that
//! checked nothing as passed. A watchdog fails any test that hangs.
//!
//! Usage: `cargo test --release --test gpu [-- NAME_FILTER...]`.

#[path = "../examples/custom_handler/fk.rs"]
mod fk;
mod support;

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pkq::cudarc::driver::CudaContext;
use pkq::floor::{Floor, Shape};
use pkq::{ARGS_BYTES, AxpyArgs, Error, IdlePolicy, Op, Runtime, TaskStatus, echo_fold};
use support::Rng;

/// A test fails if it runs longer than this (hangs are failures, not waits);
/// under compute-sanitizer, which slows the kernel tens of times, three
/// times as long.
fn watchdog() -> Duration {
    Duration::from_secs(if under_sanitizer() { 360 } else { 120 })
}
const SEQ_WRAP: u64 = 1 << 63;

type Test = (&'static str, fn());

const TESTS: &[Test] = &[
    (
        "echo_million_through_1024_slots",
        echo_million_through_1024_slots,
    ),
    ("echo_from_four_producers", echo_from_four_producers),
    ("workers_1_8_32_64", workers_1_8_32_64),
    ("sequence_wrap_at_2_pow_63", sequence_wrap_at_2_pow_63),
    ("axpy_random_vs_cpu", axpy_random_vs_cpu),
    (
        "axpy_bad_args_reported_by_device",
        axpy_bad_args_reported_by_device,
    ),
    (
        "shutdown_with_tasks_in_flight",
        shutdown_with_tasks_in_flight,
    ),
    ("drop_with_tickets_alive", drop_with_tickets_alive),
    (
        "dropped_tickets_free_their_slots",
        dropped_tickets_free_their_slots,
    ),
    ("two_runtimes_in_sequence", two_runtimes_in_sequence),
    ("runtimes_side_by_side", runtimes_side_by_side),
    ("bad_input_is_a_typed_error", bad_input_is_a_typed_error),
    (
        "modules_without_a_fitting_kernel_are_refused",
        modules_without_a_fitting_kernel_are_refused,
    ),
    ("no_visible_gpu_is_no_device", no_visible_gpu_is_no_device),
    ("builtin_ops_random_vs_cpu", builtin_ops_random_vs_cpu),
    (
        "typed_ops_are_checked_against_the_op_table",
        typed_ops_are_checked_against_the_op_table,
    ),
    ("custom_handler_vs_reference", custom_handler_vs_reference),
    ("batches_submit_and_reap", batches_submit_and_reap),
    ("host_access_rate_is_measured", host_access_rate_is_measured),
    (
        "back_to_back_long_tasks_are_not_stalls",
        back_to_back_long_tasks_are_not_stalls,
    ),
    (
        "eight_producers_ten_million_each",
        eight_producers_ten_million_each,
    ),
    (
        "holding_tickets_never_blocks_submit",
        holding_tickets_never_blocks_submit,
    ),
    (
        "producers_holding_more_than_the_ring",
        producers_holding_more_than_the_ring,
    ),
    (
        "liveness_probes_from_many_threads",
        liveness_probes_from_many_threads,
    ),
    ("floor_ping_pong", floor_ping_pong),
    ("pollers_race_for_every_task", pollers_race_for_every_task),
    (
        "idle_backoff_wakes_up_for_each_task",
        idle_backoff_wakes_up_for_each_task,
    ),
    ("device_costs_and_clock_map", device_costs_and_clock_map),
    (
        "callers_context_is_kept_and_foreign_buffers_refused",
        callers_context_is_kept_and_foreign_buffers_refused,
    ),
    (
        "spin_op_and_wait_timeout_keeps_the_task",
        spin_op_and_wait_timeout_keeps_the_task,
    ),
    ("stalled_worker_is_reported", stalled_worker_is_reported),
    (
        "rings_spread_threads_and_lose_nothing",
        rings_spread_threads_and_lose_nothing,
    ),
    (
        "a_stall_is_reported_on_its_ring",
        a_stall_is_reported_on_its_ring,
    ),
    ("cancel_resolves_every_ticket", cancel_resolves_every_ticket),
    ("packed_batches_random_vs_cpu", packed_batches_random_vs_cpu),
    (
        "cancelled_tickets_outlive_their_runtime",
        cancelled_tickets_outlive_their_runtime,
    ),
    (
        "panicking_producers_leave_the_runtime_usable",
        panicking_producers_leave_the_runtime_usable,
    ),
    (
        "settings_that_cannot_be_resident_are_refused",
        settings_that_cannot_be_resident_are_refused,
    ),
    (
        "a_worker_runs_its_tasks_one_after_another",
        a_worker_runs_its_tasks_one_after_another,
    ),
    (
        "cancel_wins_over_the_liveness_probe",
        cancel_wins_over_the_liveness_probe,
    ),
    // Faults leave a sticky error in the process's CUDA context: each runs
    // in a child process of this binary.
    ("trap_faults_every_waiter", trap_faults_every_waiter),
    (
        "illegal_address_faults_every_waiter",
        illegal_address_faults_every_waiter,
    ),
];

/// Faults, run in a child process (`PKQ_GPU_CHILD=<name>`).
const CHILDREN: &[Test] = &[
    ("trap", child_trap),
    ("illegal_address", child_illegal_address),
    ("no_visible_gpu", child_no_visible_gpu),
];

/// Why the running test skipped itself, if it did.
static SKIPPED: Mutex<Option<String>> = Mutex::new(None);

/// Whether the suite runs under compute-sanitizer (bundle-run.sh says so).
fn under_sanitizer() -> bool {
    std::env::var_os("PKQ_UNDER_SANITIZER").is_some()
}

/// Ends the calling test as skipped (with the reason), not passed.
fn skip(why: &str) {
    *SKIPPED.lock().unwrap() = Some(why.to_string());
}

fn main() {
    if let Ok(child) = std::env::var("PKQ_GPU_CHILD") {
        let (_, run) = CHILDREN
            .iter()
            .find(|(name, _)| *name == child)
            .expect("known child scenario");
        run();
        println!("child {child}: all checks passed");
        return;
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<&Test> = TESTS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    if let Err(why) = gpu_ready() {
        println!("\nrunning {} GPU tests", selected.len());
        println!("SKIPPED all {} GPU tests: {why}", selected.len());
        println!(
            "test result: ok. 0 passed; 0 failed; {} skipped (no GPU); nothing was checked\n",
            selected.len()
        );
        return;
    }
    let info = pkq::device_info(0).expect("device info");
    println!(
        "\nrunning {} GPU tests on {} (driver {})",
        selected.len(),
        info.name,
        info.driver
    );

    let current: Arc<Mutex<(&'static str, Instant)>> = Arc::new(Mutex::new(("", Instant::now())));
    {
        let current = current.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let (name, since) = *current.lock().unwrap();
                if !name.is_empty() && since.elapsed() > watchdog() {
                    println!(
                        "test {name} ... FAILED: still running after {:?} (hang)",
                        watchdog()
                    );
                    std::process::exit(2);
                }
            }
        });
    }
    let (mut passed, mut failed, mut skipped) = (0, Vec::new(), 0);
    for (name, test) in selected {
        *current.lock().unwrap() = (name, Instant::now());
        let t0 = Instant::now();
        let live = pkq::live_runtimes();
        let outcome = catch_unwind(AssertUnwindSafe(test));
        let secs = t0.elapsed().as_secs_f64();
        let skip = SKIPPED.lock().unwrap().take();
        // Every runtime a test built, and every ticket and batch of it, is
        // gone when it returns: its memory must be freed by then.
        let left = pkq::live_runtimes().saturating_sub(live);
        if outcome.is_ok() && left > 0 {
            println!("    {left} runtime(s) still allocated after the test");
        }
        let outcome = outcome.and_then(|()| {
            if left > 0 {
                Err(Box::new("leak"))
            } else {
                Ok(())
            }
        });
        match outcome {
            Ok(()) if skip.is_some() => {
                skipped += 1;
                println!("test {name} ... SKIPPED: {}", skip.unwrap());
            }
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok ({secs:.2} s)");
            }
            Err(_) => {
                failed.push(name);
                println!("test {name} ... FAILED ({secs:.2} s)");
            }
        }
    }
    *current.lock().unwrap() = ("", Instant::now());
    let verdict = if failed.is_empty() { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {} failed; {skipped} skipped\n",
        failed.len()
    );
    if !failed.is_empty() {
        println!("failures: {failed:?}");
        std::process::exit(1);
    }
}

/// Why GPU tests cannot run here, if they cannot.
fn gpu_ready() -> Result<(), String> {
    pkq::kernel_image().map_err(|e| e.to_string())?;
    match pkq::device_count() {
        Ok(0) => Err("the driver reports no CUDA device".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Random ECHO arguments whose first word is `id`.
fn echo_args(rng: &mut Rng, id: u64) -> [u64; ARGS_BYTES / 8] {
    let mut a: [u64; 6] = std::array::from_fn(|_| rng.next());
    a[0] = id;
    a
}

/// Pushes `tasks` ECHO tasks with ids `ids` through `rt`, keeping up to
/// `window` tickets in flight; checks every result; marks `seen[id]`.
fn pump_echo(
    rt: &Runtime,
    ids: impl Iterator<Item = u64>,
    window: usize,
    seed: u64,
    seen: &[AtomicU64],
) {
    let mut rng = Rng::new(seed);
    let mut inflight: VecDeque<(pkq::Ticket, u64, u64)> = VecDeque::with_capacity(window);
    let mut ring = None;
    let check = |(mut t, id, want): (pkq::Ticket, u64, u64)| {
        let c = match t.wait_timeout(Duration::from_secs(20)) {
            Ok(c) => c,
            Err(Error::Timeout) => {
                panic!("task {id} (seq {}) stalled:\n{}", t.seq(), rt.debug_state())
            }
            Err(e) => panic!("task {id}: {e}"),
        };
        assert_eq!(c.value, want, "task {id}: wrong echo");
        assert!(c.device_end_ns >= c.device_start_ns);
        seen[id as usize].fetch_add(1, Ordering::Relaxed);
    };
    for id in ids {
        let args = echo_args(&mut rng, id);
        let t = rt.submit(Op::ECHO, &args).expect("submit");
        assert_eq!(
            *ring.get_or_insert(t.ring()),
            t.ring(),
            "a thread stays on its ring"
        );
        inflight.push_back((t, id, echo_fold(&args)));
        if inflight.len() >= window {
            check(inflight.pop_front().unwrap());
        }
    }
    inflight.into_iter().for_each(check);
}

/// `producers` threads push ECHO tasks 0..n (interleaved ids) through `rt`,
/// each keeping up to `window` tickets; every result is checked and every
/// task must be seen exactly once.
fn pump_from_threads(rt: &Runtime, n: u64, producers: u64, window: usize, seed: u64) {
    let seen = counters(n);
    std::thread::scope(|s| {
        for p in 0..producers {
            let seen = &seen;
            s.spawn(move || {
                pump_echo(
                    rt,
                    (p..n).step_by(producers as usize),
                    window,
                    seed + p,
                    seen,
                )
            });
        }
    });
    assert_each_once(&seen);
}

fn assert_each_once(seen: &[AtomicU64]) {
    let bad: Vec<(usize, u64)> = seen
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .enumerate()
        .filter(|&(_, n)| n != 1)
        .take(5)
        .collect();
    assert!(
        bad.is_empty(),
        "tasks not seen exactly once (id, times): {bad:?}"
    );
}

fn counters(n: u64) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

fn echo_million_through_1024_slots() {
    let rt = Runtime::builder().capacity(1024).build().unwrap();
    let n = 1_000_000;
    let seen = counters(n);
    let t0 = Instant::now();
    pump_echo(&rt, 0..n, 768, 1, &seen);
    let dt = t0.elapsed();
    assert_each_once(&seen);
    rt.shutdown().unwrap();
    println!(
        "    {n} echo tasks ({} laps) in {dt:.2?}: {:.2} M tasks/s",
        n / 1024,
        n as f64 / dt.as_secs_f64() / 1e6
    );
}

fn echo_from_four_producers() {
    for round in 0..3 {
        let rt = Runtime::builder()
            .capacity(1024)
            .workers(8)
            .build()
            .unwrap();
        pump_from_threads(&rt, 400_000, 4, 128, 10 * round);
        rt.shutdown().unwrap();
    }
}

fn workers_1_8_32_64() {
    for workers in [1, 8, 32, 64] {
        let rt = Runtime::builder()
            .capacity(1024)
            .workers(workers)
            .build()
            .unwrap();
        assert_eq!(rt.workers(), workers);
        let n = 50_000;
        let seen = counters(n);
        pump_echo(&rt, 0..n, 900, workers as u64, &seen);
        assert_each_once(&seen);
        rt.shutdown().unwrap();
    }
}

fn sequence_wrap_at_2_pow_63() {
    let start = SEQ_WRAP - 10_000;
    let rt = Runtime::builder()
        .capacity(256)
        .workers(4)
        .start_sequence(start)
        .build()
        .unwrap();
    let n = 30_000;
    let seen = counters(n);
    pump_echo(&rt, 0..n, 200, 7, &seen);
    assert_each_once(&seen);
    let t = rt.submit(Op::NOP, &()).unwrap();
    assert!(
        t.seq() < 30_000,
        "sequence numbers wrapped to small values, got {}",
        t.seq()
    );
    t.wait().unwrap();
    rt.shutdown().unwrap();
}

/// Every buffer is allocated before the runtime starts: compute-sanitizer's
/// memcheck judges a kernel's accesses by the allocations that existed when
/// it was launched, so it flags (falsely) a resident kernel's reads of
/// buffers allocated later (benches/NOTES.md).
fn axpy_random_vs_cpu() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(42);
    let mut sizes = vec![0usize, 1, 3, 4, 5, 31, 32, 33, 127, 1000, 4095, 4096];
    sizes.extend((0..40).map(|_| 1 + rng.below(4096) as usize));
    let cases: Vec<_> = sizes
        .into_iter()
        .map(|n| {
            let a = rng.unit() * 4.0;
            let x: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
            let y: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
            let xd = stream.clone_htod(&x).unwrap();
            let yd = stream.clone_htod(&y).unwrap();
            (a, x, y, xd, yd)
        })
        .collect();
    let xd = stream.clone_htod(&[1.0f32; 8]).unwrap();
    let mut yd = stream.clone_htod(&[1.0f32; 9]).unwrap();
    let rt = Runtime::builder().build().unwrap();
    assert!(matches!(
        rt.axpy(1.0, &xd, &mut yd),
        Err(Error::InvalidArgument(_))
    ));
    for (a, x, y, xd, mut yd) in cases {
        let n = x.len();
        rt.axpy(a, &xd, &mut yd).unwrap();
        let got = stream.clone_dtoh(&yd).unwrap();
        for i in 0..n {
            let want = a.mul_add(x[i], y[i]);
            assert_eq!(
                got[i].to_bits(),
                want.to_bits(),
                "n {n}, i {i}: {} vs {want}",
                got[i]
            );
        }
        // Run again on the same buffers: the device must see the new y.
        rt.axpy(-a, &xd, &mut yd).unwrap();
        let back = stream.clone_dtoh(&yd).unwrap();
        for i in 0..n {
            assert_eq!(
                back[i].to_bits(),
                (-a).mul_add(x[i], got[i]).to_bits(),
                "second pass n {n}, i {i}"
            );
        }
    }
    rt.shutdown().unwrap();
}

fn axpy_bad_args_reported_by_device() {
    let rt = Runtime::builder().build().unwrap();
    let args = AxpyArgs {
        x: 0,
        y: 0,
        n: 4097,
        a: 1.0,
    };
    // SAFETY: n is over the limit, so the device refuses the task before it
    // touches any address.
    let t = unsafe { rt.submit_unchecked(Op::AXPY, &args) }.unwrap();
    assert!(matches!(
        t.wait(),
        Err(Error::Task {
            op: Op::AXPY,
            status: TaskStatus::BadArgs
        })
    ));
    let args = AxpyArgs {
        x: 0,
        y: 0,
        n: 16,
        a: 1.0,
    };
    // SAFETY: null pointers are refused by the device before any access.
    let t = unsafe { rt.submit_unchecked(Op::AXPY, &args) }.unwrap();
    assert!(matches!(
        t.wait(),
        Err(Error::Task {
            status: TaskStatus::BadArgs,
            ..
        })
    ));
    // The runtime still serves.
    assert_eq!(
        rt.submit(Op::ECHO, &[5u64]).unwrap().wait().unwrap().value,
        5
    );
    rt.shutdown().unwrap();
}

fn shutdown_with_tasks_in_flight() {
    let rt = Runtime::builder().capacity(8192).build().unwrap();
    let mut rng = Rng::new(3);
    let tickets: Vec<_> = (0..8000u64)
        .map(|id| {
            let args = echo_args(&mut rng, id);
            (rt.submit(Op::ECHO, &args).unwrap(), echo_fold(&args))
        })
        .collect();
    let t0 = Instant::now();
    rt.shutdown().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        t0.elapsed()
    );
    assert!(matches!(rt.submit(Op::NOP, &()), Err(Error::Closed)));
    for (t, want) in tickets {
        assert_eq!(t.wait().unwrap().value, want);
    }
}

fn drop_with_tickets_alive() {
    // Tickets and batches count no reference to the runtime: its memory
    // must live exactly as long as the last of them that still needs it.
    let before = pkq::live_runtimes();
    let rt = Runtime::builder().capacity(4096).build().unwrap();
    let tickets: Vec<_> = (0..3000u64)
        .map(|i| rt.submit(Op::ECHO, &[i]).unwrap())
        .collect();
    let args: Vec<[u64; 1]> = (3000..3500u64).map(|i| [i]).collect();
    let mut batch = rt.submit_batch(Op::ECHO, &args).unwrap();
    let unread = rt.submit(Op::ECHO, &[1u64]).unwrap();
    let mut early = rt.submit(Op::ECHO, &[2u64]).unwrap();
    let wait = Duration::from_secs(5);
    assert_eq!(early.wait_timeout(wait).unwrap().value, 2);
    drop(rt);
    assert_eq!(pkq::live_runtimes(), before + 1, "kept for its tickets");
    drop(unread);
    for (i, t) in tickets.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, i as u64);
    }
    assert_eq!(pkq::live_runtimes(), before + 1, "kept for the batch");
    let results = batch.wait().unwrap();
    for (r, a) in results.iter().zip(&args) {
        assert_eq!(r.unwrap().value, a[0]);
    }
    // A batch keeps its shares until it is dropped (it may be waited on
    // again).
    assert_eq!(pkq::live_runtimes(), before + 1, "kept until the batch goes");
    drop(batch);
    assert_eq!(pkq::live_runtimes(), before, "freed with the last");
    // A ticket taken before the drop keeps its result, and no share.
    assert_eq!(early.wait_timeout(wait).unwrap().value, 2);
}

fn packed_batches_random_vs_cpu() {
    // Packed batches of random sizes (one task to a full ring of packs) and
    // kinds, several in flight and reaped in order, on 2 rings from 2
    // threads; every result checked against the host's, every task counted
    // once.
    let rt = Runtime::builder()
        .capacity(128)
        .workers(8)
        .rings(2)
        .build()
        .unwrap();
    let tasks = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (rt, tasks) = (&rt, &tasks);
            s.spawn(move || {
                let mut rng = Rng::new(40 + t);
                let mut inflight: VecDeque<(pkq::Batch, Vec<Option<u64>>)> = VecDeque::new();
                let check = |(mut batch, want): (pkq::Batch, Vec<Option<u64>>)| {
                    let got = batch.wait().unwrap();
                    assert_eq!(got.len(), want.len());
                    for (g, w) in got.iter().zip(&want) {
                        match w {
                            Some(v) => assert_eq!(g.unwrap().value, *v),
                            None => assert_eq!(*g, Err(TaskStatus::BadArgs)),
                        }
                    }
                    tasks.fetch_add(want.len() as u64, Ordering::Relaxed);
                };
                for round in 0..300 {
                    let n = 1 + (rng.next() % (128 * 32)) as usize;
                    let (batch, want) = match round % 4 {
                        // ECHO of one word is the word.
                        0 => {
                            let a: Vec<u64> = (0..n).map(|_| rng.next()).collect();
                            (
                                rt.submit_packed(Op::ECHO, &a),
                                a.iter().map(|&v| Some(v)).collect(),
                            )
                        }
                        // Shorter arguments arrive zero-padded.
                        1 => {
                            let a: Vec<u32> = (0..n).map(|_| rng.next() as u32).collect();
                            let want = a.iter().map(|&v| Some(u64::from(v))).collect();
                            (rt.submit_packed(Op::ECHO, &a), want)
                        }
                        2 => (rt.submit_packed(Op::NOP, &vec![(); n]), vec![Some(0); n]),
                        // SPIN of 0 ns, or over the limit: a failed task
                        // among good ones reports its own status.
                        _ => {
                            let a: Vec<u64> = (0..n.min(300))
                                .map(|_| {
                                    if rng.next().is_multiple_of(5) {
                                        u64::MAX
                                    } else {
                                        0
                                    }
                                })
                                .collect();
                            let want = a.iter().map(|&v| (v == 0).then_some(0)).collect();
                            (rt.submit_packed(Op::SPIN, &a), want)
                        }
                    };
                    inflight.push_back((batch.unwrap(), want));
                    if inflight.len() > 2 {
                        check(inflight.pop_front().unwrap());
                    }
                }
                inflight.into_iter().for_each(check);
            });
        }
    });
    // Batches of up to a whole ring, three in flight: producers move
    // completions (results and all) out of the slots they need.
    println!(
        "    {} packed tasks checked, {} completions moved",
        tasks.load(Ordering::Relaxed),
        rt.moved_completions()
    );
    // SPIN's results are the nanoseconds waited: at least those asked.
    let r = rt
        .submit_packed(Op::SPIN, &[2_000u64; 40])
        .unwrap()
        .wait()
        .unwrap();
    assert!(r.iter().all(|r| r.unwrap().value >= 2_000));
    // Unknown ops fail per task; unread packed batches give their slots back.
    let r = rt
        .submit_packed(Op(999), &[(); 70])
        .unwrap()
        .wait()
        .unwrap();
    assert!(r.iter().all(|r| *r == Err(TaskStatus::UnknownOp)));
    for _ in 0..300 {
        drop(rt.submit_packed(Op::NOP, &[(); 100]).unwrap());
    }
    assert!(
        rt.submit_packed(Op::NOP, &[(); 0])
            .unwrap()
            .wait()
            .unwrap()
            .is_empty()
    );
    // Refused with nothing submitted.
    assert!(matches!(
        rt.submit_packed(Op::NOP, &[(); 128 * 32 + 1]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        rt.submit_packed(Op::ECHO, &[[0u64; 2]; 3]),
        Err(Error::PayloadTooLarge { len: 16, max: 8 })
    ));
    rt.shutdown().unwrap();
}

fn cancelled_tickets_outlive_their_runtime() {
    let before = pkq::live_runtimes();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let tickets: Vec<_> = (0..100)
        .map(|_| rt.submit(Op::SPIN, &100_000u64).unwrap())
        .collect();
    let args = [[0u64; 1]; 50];
    let mut batch = rt.submit_batch(Op::ECHO, &args).unwrap();
    rt.cancel().unwrap();
    drop(rt);
    assert_eq!(pkq::live_runtimes(), before + 1);
    let (mut done, mut cancelled) = (0, 0);
    for t in tickets {
        match t.wait() {
            Ok(_) => done += 1,
            Err(Error::Cancelled) => cancelled += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(cancelled > 0, "{done} done, {cancelled} cancelled");
    assert!(matches!(batch.wait(), Err(Error::Cancelled)));
    drop(batch);
    assert_eq!(pkq::live_runtimes(), before, "freed with the last");
}

fn dropped_tickets_free_their_slots() {
    let rt = Runtime::builder().capacity(64).build().unwrap();
    for round in 0..200u64 {
        // Drop 40 tickets unread, then make sure the ring still cycles.
        for i in 0..40u64 {
            drop(rt.submit(Op::ECHO, &[round * 100 + i]).unwrap());
        }
        let v = rt.submit(Op::ECHO, &[round]).unwrap().wait().unwrap().value;
        assert_eq!(v, round);
    }
    rt.shutdown().unwrap();
}

fn two_runtimes_in_sequence() {
    for round in 0..2u64 {
        let rt = Runtime::builder().capacity(256).build().unwrap();
        for i in 0..10_000u64 {
            assert_eq!(
                rt.submit(Op::ECHO, &[i ^ round])
                    .unwrap()
                    .wait()
                    .unwrap()
                    .value,
                i ^ round
            );
        }
        drop(rt);
    }
}

fn runtimes_side_by_side() {
    // The driver waits for running kernels before it loads a module (a
    // resident kernel never ends): a second runtime, a floor, and a runtime
    // started and stopped beside the others all use what the first runtime
    // loaded, and anything new is refused rather than waited for.
    if under_sanitizer() {
        // compute-sanitizer runs one kernel at a time: the second resident
        // kernel would wait for the first forever.
        return skip("two resident kernels at once, which a sanitizer runs one after the other");
    }
    let a = Runtime::builder().workers(2).capacity(256).build().unwrap();
    let b = Runtime::builder().workers(2).capacity(256).build().unwrap();
    let echo_on = |rt: &Runtime, salt: u64| {
        for i in 0..20_000u64 {
            let v = (i << 1) | salt;
            assert_eq!(rt.submit(Op::ECHO, &[v]).unwrap().wait().unwrap().value, v);
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| echo_on(&a, 0));
        s.spawn(|| echo_on(&b, 1));
    });
    let mut floor = Floor::start(0, Shape::pollers(1)).unwrap();
    floor.round_trip().unwrap();
    floor.stop().unwrap();
    let image = pkq::kernel_image().unwrap();
    match Runtime::builder()
        .module(image, "no_kernel_loaded_yet")
        .build()
    {
        Err(Error::InvalidConfig(why)) => {
            assert!(why.contains("while a pkq kernel"), "{why}");
            println!("    refused: {why}");
        }
        other => panic!("a new module while runtimes run: {other:?}"),
    }
    b.shutdown().unwrap();
    let c = Runtime::builder().workers(1).capacity(64).build().unwrap();
    echo_on(&c, 1);
    echo_on(&a, 0);
    a.shutdown().unwrap();
    c.shutdown().unwrap();
}

fn bad_input_is_a_typed_error() {
    let count = pkq::device_count().unwrap();
    assert!(matches!(
        Runtime::builder().device(count + 3).build(),
        Err(Error::DeviceOutOfRange { index, count: c }) if index == count + 3 && c == count
    ));
    assert!(matches!(
        Runtime::builder().capacity(1000).build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        Runtime::builder().workers(3).build(),
        Err(Error::InvalidConfig(_))
    ));
    let rt = Runtime::builder().build().unwrap();
    assert!(matches!(
        rt.submit_bytes(Op::ECHO, &[0u8; ARGS_BYTES + 1]),
        Err(Error::PayloadTooLarge { len: 49, max: 48 })
    ));
    assert!(matches!(
        rt.submit(Op::AXPY, &AxpyArgs::default()),
        Err(Error::UncheckedOp(Op::AXPY))
    ));
    // A listed op's arguments are what its table says: SPIN takes a u64,
    // NOP nothing; ECHO up to 48 bytes.
    for refused in [
        rt.submit(Op::SPIN, &1u32).map(drop),
        rt.submit(Op::NOP, &1u64).map(drop),
        rt.submit_batch(Op::SPIN, &[[1u64; 2]]).map(drop),
        rt.submit_packed(Op::NOP, &[1u8]).map(drop),
    ] {
        assert!(
            matches!(refused, Err(Error::OpMismatch { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(rt.submit(Op::ECHO, &7u16).unwrap().wait().unwrap().value, 7);
    assert!(matches!(
        rt.submit(Op(999), &()).unwrap().wait(),
        Err(Error::Task {
            op: Op(999),
            status: TaskStatus::UnknownOp
        })
    ));
    // Still serving after every refusal.
    assert_eq!(
        rt.submit(Op::ECHO, &[77u64]).unwrap().wait().unwrap().value,
        77
    );
    rt.shutdown().unwrap();
    assert!(matches!(rt.submit(Op::NOP, &()), Err(Error::Closed)));
}

/// `Builder::module` refuses, with typed errors and nothing started: an
/// image the driver cannot load, a kernel the module lacks, and kernels
/// whose parameters are not one `pkq_params`. The embedded image under the
/// worker kernel's name serves.
fn modules_without_a_fitting_kernel_are_refused() {
    let image = pkq::kernel_image().unwrap();
    let build = |bytes: &[u8], kernel: &str| Runtime::builder().module(bytes, kernel).build();
    match build(&[0u8; 64], "pkq_worker_kernel") {
        Err(Error::InvalidModule(why)) => println!("    garbage image: {why}"),
        other => panic!("garbage image: {other:?}"),
    }
    match build(image, "no_such_kernel") {
        Err(Error::KernelMissing(name)) => assert_eq!(name, "no_such_kernel"),
        other => panic!("missing kernel: {other:?}"),
    }
    for wrong in ["pkq_empty_kernel", "pkq_floor_kernel", "pkq_costs_kernel"] {
        match build(image, wrong) {
            Err(Error::InvalidModule(why)) => assert!(why.contains(wrong), "{why}"),
            other => panic!("{wrong}: {other:?}"),
        }
    }
    let rt = build(image, "pkq_worker_kernel").unwrap();
    assert_eq!(
        rt.submit(Op::ECHO, &[8u64]).unwrap().wait().unwrap().value,
        8
    );
    rt.shutdown().unwrap();
}

fn holding_tickets_never_blocks_submit() {
    let rt = Runtime::builder().capacity(16).workers(1).build().unwrap();
    // Hold 10x the ring's slots of tickets: completions nobody read yet move
    // to the host, so submit only ever waits for the device.
    let held: Vec<_> = (0..160u64)
        .map(|i| rt.submit(Op::ECHO, &[i]).unwrap())
        .collect();
    let tried: Vec<_> = (0..16u64)
        .map(|i| {
            loop {
                match rt.try_submit(Op::ECHO, &[1000 + i]) {
                    Ok(t) => break t,
                    Err(Error::Full) => std::hint::spin_loop(), // the device is still at it
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .collect();
    // Every task from the 17th on needed the slot of one held 16 before.
    assert_eq!(rt.moved_completions(), 160);
    for (i, t) in held.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, i as u64);
    }
    for (i, t) in tried.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, 1000 + i as u64);
    }
    rt.shutdown().unwrap();
}

fn producers_holding_more_than_the_ring() {
    // 8 producers x 200 held tickets on 256 slots: a laggard's unread
    // completions must not stop the others (they move to the host).
    for round in 0..3 {
        let rt = Runtime::builder().capacity(256).workers(8).build().unwrap();
        pump_from_threads(&rt, 200_000, 8, 200, 100 * round);
        rt.shutdown().unwrap();
    }
}

fn liveness_probes_from_many_threads() {
    // Probe on every check (interval 0) from 8 threads at once: probing is
    // shared, never mistaken for a fault, and costs no correctness.
    let rt = Runtime::builder()
        .capacity(64)
        .workers(2)
        .probe_interval(Duration::ZERO)
        .build()
        .unwrap();
    pump_from_threads(&rt, 80_000, 8, 16, 500);
    rt.shutdown().unwrap();
}

fn floor_ping_pong() {
    for (pollers, words, lines, copies) in [
        (1, 1, 1, false),
        (2, 1, 1, false),
        (4, 1, 1, false),
        (1, 8, 64, false),
        (2, 4, 3, false),
        (2, 8, 1, true),
        (4, 8, 5, true),
        (8, 8, 1024, true),
    ] {
        let shape = Shape {
            pollers,
            words,
            lines,
            copies,
        };
        let mut floor = Floor::start(0, shape).unwrap();
        let t0 = Instant::now();
        let first = floor.echo_device_ns();
        let mut last = first;
        // Past 2^16 rounds: the echo word carries the round's low 16 bits.
        let rounds = 70_000;
        for _ in 0..rounds {
            floor.round_trip().unwrap();
            // Each echo's device clock: later than the round before's,
            // which the host saw before it sent this one.
            assert!(floor.echo_device_ns() > last, "{shape:?}");
            last = floor.echo_device_ns();
        }
        let host_ns = t0.elapsed().as_nanos() as f64;
        let device_ns = (last - first) as f64;
        println!(
            "    floor, {shape:?}: {:.2} us per round trip (mean), device clock over the rounds {:.3}x the host's",
            host_ns / 1e3 / f64::from(rounds),
            device_ns / host_ns
        );
        assert!((0.9..1.02).contains(&(device_ns / host_ns)), "{shape:?}");
        floor.stop().unwrap();
    }
    for bad in [(3, 1, 1), (16, 1, 1), (1, 2, 1), (1, 1, 0), (1, 1, 1025)] {
        let (pollers, words, lines) = bad;
        let shape = Shape {
            pollers,
            words,
            lines,
            copies: false,
        };
        assert!(matches!(
            Floor::start(0, shape),
            Err(pkq::Error::InvalidConfig(_))
        ));
    }
}

fn pollers_race_for_every_task() {
    // Every task is claimed by exactly one of a worker's pollers, also when
    // several see it at once and when the ring laps quickly (each poller on
    // a copy of the slots of its own; (4, 4, 4): one slot per worker, so a
    // worker polls the next lap of a slot right after completing its task).
    for (workers, pollers, capacity) in [
        (1, 2, 4),
        (1, 4, 8),
        (4, 2, 64),
        (4, 4, 4),
        (4, 4, 1024),
        (1, 8, 8),
        (2, 8, 1024),
        (8, 1, 64),
    ] {
        let rt = Runtime::builder()
            .capacity(capacity)
            .workers(workers)
            .pollers(pollers)
            .build()
            .unwrap();
        let n = 40_000;
        let seen = counters(n);
        pump_echo(&rt, 0..n, capacity.min(100), pollers as u64, &seen);
        assert_each_once(&seen);
        rt.shutdown().unwrap();
    }
}

fn idle_backoff_wakes_up_for_each_task() {
    let rt = Runtime::builder()
        .idle(IdlePolicy::Backoff {
            spin: Duration::from_micros(10),
            max_sleep: Duration::from_micros(50),
        })
        .pollers(2)
        .build()
        .unwrap();
    let mut worst = Duration::ZERO;
    for i in 0..300u64 {
        std::thread::sleep(Duration::from_micros(300));
        let t0 = Instant::now();
        assert_eq!(rt.submit(Op::ECHO, &[i]).unwrap().wait().unwrap().value, i);
        worst = worst.max(t0.elapsed());
    }
    println!("    slowest wake-up round trip: {worst:?}");
    assert!(
        worst < Duration::from_millis(50),
        "a sleeping worker took {worst:?} to answer"
    );
    rt.shutdown().unwrap();
}

fn device_costs_and_clock_map() {
    let c = pkq::floor::device_costs(0, 2_000).unwrap();
    println!("    {c:?}");
    assert!(c.dependent_read_ns > 200.0 && c.dependent_read_ns < 20_000.0);
    for wide in c.dependent_wide_read_ns {
        assert!(wide > 200.0 && wide < 20_000.0, "{c:?}");
    }
    assert!(c.globaltimer_step_ns > 0 && c.globaltimer_step_ns < 10_000);
    let rt = Runtime::builder().build().unwrap();
    let origin = Instant::now();
    let ns = |t: Instant| (t - origin).as_nanos() as u64;
    let ex: Vec<_> = (0..20_000)
        .map(|_| {
            let t0 = Instant::now();
            let c = rt.submit(Op::NOP, &()).unwrap().wait().unwrap();
            pkq::timing::Exchange {
                host_send_ns: ns(t0),
                host_recv_ns: ns(Instant::now()),
                device_start_ns: c.device_start_ns,
                device_end_ns: c.device_end_ns,
            }
        })
        .collect();
    let map = pkq::timing::ClockMap::fit(&ex, 256).unwrap();
    println!(
        "    clock map: bound {:.0} ns (median {:.0}), {:.1}% misfit",
        map.error_bound_ns,
        map.median_bound_ns,
        map.misfit_fraction * 100.0
    );
    // Mapped onto the host's clock, every device stamp falls within its own
    // round trip, give or take the stated bound.
    for e in &ex {
        let start = map.to_host_ns(e.device_start_ns);
        assert!(start > e.host_send_ns as f64 - map.error_bound_ns - 1_000.0);
        assert!(start < e.host_recv_ns as f64 + map.error_bound_ns + 1_000.0);
    }
    rt.shutdown().unwrap();
}

fn callers_context_is_kept_and_foreign_buffers_refused() {
    use pkq::cudarc::driver::sys;
    // Buffers of another context on the same device are not the runtime's.
    let other = CudaContext::new_non_primary(0, 0).unwrap();
    let stream = other.default_stream();
    let x = stream.clone_htod(&[1.0f32; 4]).unwrap();
    let mut y = stream.clone_htod(&[1.0f32; 4]).unwrap();
    let rt = Runtime::builder()
        .probe_interval(Duration::ZERO)
        .build()
        .unwrap();
    assert!(matches!(
        rt.axpy(1.0, &x, &mut y),
        Err(Error::InvalidArgument(_))
    ));
    // pkq's own driver calls (here the liveness probe of try_result, due on
    // every call) leave the calling thread's current context as they found it.
    other.bind_to_thread().unwrap();
    let current = || {
        let mut c = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { sys::cuCtxGetCurrent(&mut c) };
        c
    };
    let before = current();
    assert_eq!(before, other.cu_ctx());
    let mut t = rt.submit(Op::ECHO, &[3u64]).unwrap();
    let c = loop {
        if let Some(c) = t.try_result().unwrap() {
            break c;
        }
    };
    assert_eq!(c.value, 3);
    assert_eq!(current(), before, "the thread's current context changed");
    rt.shutdown().unwrap();
    drop((x, y));
}

fn spin_op_and_wait_timeout_keeps_the_task() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let mut t = rt.submit(Op::SPIN, &50_000_000u64).unwrap();
    let t0 = Instant::now();
    assert!(matches!(
        t.wait_timeout(Duration::from_millis(5)),
        Err(Error::Timeout)
    ));
    // Still tracked: the same ticket completes.
    let c = t.wait_timeout(Duration::from_secs(5)).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(40));
    assert!(c.value >= 50_000_000 && c.value < 60_000_000, "{c:?}");
    assert!(c.device_time() >= Duration::from_millis(49));
    assert!(matches!(
        rt.submit(Op::SPIN, &(pkq::SPIN_MAX_NS + 1)).unwrap().wait(),
        Err(Error::Task {
            op: Op::SPIN,
            status: TaskStatus::BadArgs
        })
    ));
    rt.shutdown().unwrap();
}

fn stalled_worker_is_reported() {
    let bound = Duration::from_millis(30);
    let rt = Runtime::builder()
        .workers(2)
        .stall_after(bound)
        .build()
        .unwrap();
    // Worker 0 runs a 400 ms task; worker 1 stays free.
    let long = rt.submit(Op::SPIN, &400_000_000u64).unwrap();
    assert_eq!(
        rt.submit(Op::ECHO, &[5u64]).unwrap().wait().unwrap().value,
        5
    );
    let mut behind = rt.submit(Op::ECHO, &[6u64]).unwrap(); // worker 0, queued
    let t0 = Instant::now();
    match behind.wait_timeout(Duration::from_secs(2)) {
        Err(Error::Stalled { worker: 0, silent }) => assert!(silent > bound),
        other => panic!("expected Stalled on worker 0, got {other:?}"),
    }
    let took = t0.elapsed();
    println!("    stall of worker 0 reported after {took:?} (bound {bound:?})");
    assert!(took < Duration::from_millis(200), "{took:?}");
    assert!(matches!(rt.health(), Err(Error::Stalled { worker: 0, .. })));
    // Worker 1 still serves meanwhile; nothing was latched.
    assert_eq!(
        rt.submit(Op::ECHO, &[7u64]).unwrap().wait().unwrap().value,
        7
    );
    // The queued task completes once the long one is done; until then each
    // wait reports the stall again, and the ticket stays valid.
    let value = loop {
        match behind.wait_timeout(Duration::from_secs(2)) {
            Ok(c) => break c.value,
            Err(Error::Stalled { worker: 0, .. }) => {
                assert!(t0.elapsed() < Duration::from_secs(2))
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(value, 6);
    assert!(long.wait().unwrap().value >= 400_000_000);
    let t1 = Instant::now();
    while rt.health().is_err() {
        assert!(t1.elapsed() < Duration::from_secs(1), "{:?}", rt.health());
        std::thread::sleep(Duration::from_millis(2));
    }
    rt.shutdown().unwrap();
}

fn cancel_resolves_every_ticket() {
    let rt = Arc::new(Runtime::builder().workers(2).build().unwrap());
    let tickets: Vec<_> = (0..400)
        .map(|_| rt.submit(Op::SPIN, &1_000_000u64).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let t0 = Instant::now();
    rt.cancel().unwrap();
    let cancel_took = t0.elapsed();
    let (mut done, mut cancelled) = (0, 0);
    for t in tickets {
        let t1 = Instant::now();
        match t.wait() {
            Ok(c) => {
                assert!(c.value >= 1_000_000);
                done += 1;
            }
            Err(Error::Cancelled) => cancelled += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(t1.elapsed() < Duration::from_millis(100));
    }
    println!("    cancel took {cancel_took:?}: {done} tasks had completed, {cancelled} cancelled");
    assert!(cancel_took < Duration::from_millis(100), "{cancel_took:?}");
    assert!(
        done >= 2 && cancelled >= 100,
        "{done} done, {cancelled} cancelled"
    );
    assert!(matches!(rt.submit(Op::NOP, &()), Err(Error::Closed)));
    assert!(matches!(rt.health(), Err(Error::Cancelled)));
    rt.shutdown().unwrap(); // the first outcome
}

/// Workers and pollers that the device cannot keep resident at once would
/// wait for each other forever: refused before the launch, saying the
/// limit; the largest shape that fits runs.
fn settings_that_cannot_be_resident_are_refused() {
    let sms = pkq::device_info(0).unwrap().multiprocessors as usize;
    // One block of 8 warps per worker of 8 pollers, one such block per
    // multiprocessor at most (the kernel's registers).
    let too_many = (sms + 1).next_power_of_two();
    for (workers, pollers) in [(1024, 8), (too_many, 8)] {
        let t0 = Instant::now();
        match Runtime::builder()
            .capacity(1024)
            .workers(workers)
            .pollers(pollers)
            .build()
        {
            Err(Error::InvalidConfig(msg)) => {
                assert!(msg.contains("resident at once"), "{msg}")
            }
            other => panic!("{workers} x {pollers}: expected InvalidConfig, got {other:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
    let fits = too_many / 2;
    let rt = Runtime::builder()
        .capacity(1024)
        .workers(fits)
        .pollers(8)
        .build()
        .unwrap();
    let tickets: Vec<_> = (0..4 * fits as u64)
        .map(|i| rt.submit(Op::ECHO, &[i]).unwrap())
        .collect();
    for (i, t) in tickets.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, i as u64);
    }
    rt.shutdown().unwrap();
}

/// A worker runs its tasks one after another, whatever its pollers: the
/// task behind a long one starts after it ended, and the long task's own
/// waiter learns of the stall.
fn a_worker_runs_its_tasks_one_after_another() {
    let bound = Duration::from_millis(30);
    let rt = Runtime::builder()
        .workers(1)
        .pollers(8)
        .stall_after(bound)
        .build()
        .unwrap();
    for _ in 0..3 {
        let mut long = rt.submit(Op::SPIN, &100_000_000u64).unwrap();
        let mut behind = rt.submit(Op::ECHO, &[5u64]).unwrap();
        match long.wait_timeout(Duration::from_secs(1)) {
            Err(Error::Stalled { worker: 0, silent }) => assert!(silent > bound),
            other => panic!("expected Stalled on worker 0, got {other:?}"),
        }
        let done = |t: &mut pkq::Ticket| loop {
            match t.wait_timeout(Duration::from_secs(2)) {
                Ok(c) => break c,
                Err(Error::Stalled { worker: 0, .. }) => std::thread::sleep(bound),
                Err(e) => panic!("{e}"),
            }
        };
        let (l, b) = (done(&mut long), done(&mut behind));
        assert_eq!(b.value, 5);
        assert!(
            b.device_start_ns >= l.device_end_ns && b.device_end_ns >= l.device_end_ns,
            "the task behind ran from {} ns before the long one ended",
            l.device_end_ns.saturating_sub(b.device_start_ns)
        );
    }
    rt.shutdown().unwrap();
}

/// A supervisor probing health while a cancel stops the kernel: pending
/// tasks report the cancel, whoever sees the kernel gone first.
fn cancel_wins_over_the_liveness_probe() {
    for round in 0..20 {
        let rt = Arc::new(
            Runtime::builder()
                .workers(2)
                .probe_interval(Duration::from_micros(10))
                .build()
                .unwrap(),
        );
        let tickets: Vec<_> = (0..200)
            .map(|_| rt.submit(Op::SPIN, &100_000u64).unwrap())
            .collect();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let prober = {
            let (rt, stop) = (rt.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = rt.health();
                }
            })
        };
        std::thread::sleep(Duration::from_millis(2));
        rt.cancel().unwrap();
        stop.store(true, Ordering::Relaxed);
        prober.join().unwrap();
        for t in tickets {
            match t.wait() {
                Ok(_) | Err(Error::Cancelled) => {}
                Err(e) => panic!("round {round}: a cancelled task reported {e}"),
            }
        }
    }
}

fn panicking_producers_leave_the_runtime_usable() {
    let rt = Arc::new(Runtime::builder().capacity(64).workers(2).build().unwrap());
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // the panics are expected
    let handles: Vec<_> = (0..8u64)
        .map(|p| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for i in 0..1000u64 {
                    held.push(rt.submit(Op::ECHO, &[p * 1_000_000 + i]).unwrap());
                    if i == 100 + 50 * p {
                        panic!("producer {p} panics holding {} tickets", held.len());
                    }
                }
            })
        })
        .collect();
    let panicked = handles
        .into_iter()
        .map(|h| h.join())
        .filter(Result::is_err)
        .count();
    std::panic::set_hook(prev);
    assert_eq!(panicked, 8);
    // Every slot the dropped tickets held is reclaimed: a full run of ECHOs
    // through the 64-slot ring, checked.
    let seen: Vec<AtomicU64> = (0..20_000).map(|_| AtomicU64::new(0)).collect();
    pump_echo(&rt, 0..20_000, 48, 11, &seen);
    assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
    rt.shutdown().unwrap();
}

/// Runs child scenario `name` in a child process of this binary (with
/// `env` added), within a bound; fails if it fails, hangs or crashes.
fn run_child(name: &str, env: &[(&str, &str)]) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env("PKQ_GPU_CHILD", name)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("child {name} still running after 60 s (hang)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = child.wait_with_output().unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        println!("    | {line}");
    }
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        println!("    ! {line}");
    }
    assert!(status.success(), "child {name}: {status}");
}

/// Faults on purpose, which a sanitizer reports as errors.
fn run_fault_child(name: &str) {
    if under_sanitizer() {
        return skip("faults on purpose, which a sanitizer reports as errors");
    }
    run_child(name, &[]);
}

fn trap_faults_every_waiter() {
    run_fault_child("trap");
}

fn illegal_address_faults_every_waiter() {
    run_fault_child("illegal_address");
}

/// The driver with every GPU hidden (`CUDA_VISIBLE_DEVICES=`): the case of
/// a machine with a driver and no GPU.
fn no_visible_gpu_is_no_device() {
    if under_sanitizer() {
        return skip("a sanitized child sees every GPU, CUDA_VISIBLE_DEVICES or not");
    }
    run_child("no_visible_gpu", &[("CUDA_VISIBLE_DEVICES", "")]);
}

fn child_no_visible_gpu() {
    let t0 = Instant::now();
    let err = Runtime::builder().build().unwrap_err();
    println!("build with no visible GPU: {err} ({:?})", t0.elapsed());
    assert!(matches!(err, Error::NoDevice(_)), "{err:?}");
    assert!(matches!(
        pkq::device_count(),
        Err(Error::NoDevice(_)) | Ok(0)
    ));
    assert!(Floor::start(0, Shape::pollers(1)).is_err());
}

fn child_trap() {
    // SAFETY: TRAP dereferences nothing; it kills the kernel on purpose.
    fault_scenario("TRAP", |rt| unsafe { rt.submit_unchecked(Op::TRAP, &()) });
}

fn child_illegal_address() {
    // An address no allocation has: AXPY's first load faults.
    let args = AxpyArgs {
        x: 0x7f00_dead_0000,
        y: 0x7f00_dead_0000,
        n: 64,
        a: 1.0,
    };
    // SAFETY: deliberately not: the addresses are invalid, to fault the
    // device; nothing on the host reads or writes through them.
    fault_scenario("AXPY on an unmapped address", |rt| unsafe {
        rt.submit_unchecked(Op::AXPY, &args)
    });
}

/// Three 2-second tasks on workers 0..3 and a waiter on each, then `fault`
/// on worker 3: every waiter and every later call must report the device
/// fault, before the 2-second tasks could have ended, nothing may hang or
/// panic; then a fresh runtime is tried after dropping the faulted one.
/// (Issue 6 asks for 100 ms; the driver's stream query reports the fault
/// 150-600 ms after it on the H100 of the GPU machine: see benches/NOTES.md.)
fn fault_scenario(what: &str, fault: impl FnOnce(&Runtime) -> pkq::Result<pkq::Ticket>) {
    const BOUND: Duration = Duration::from_millis(1500);
    let rt = Arc::new(Runtime::builder().workers(4).build().unwrap());
    let spins: Vec<_> = (0..3)
        .map(|_| rt.submit(Op::SPIN, &2_000_000_000u64).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(5));
    let t0 = Instant::now();
    let waiters: Vec<_> = spins
        .into_iter()
        .map(|t| std::thread::spawn(move || (t.wait(), t0.elapsed())))
        .collect();
    let faulty = fault(&rt).unwrap();
    let fault_result = faulty.wait();
    let took = t0.elapsed();
    let name = match &fault_result {
        Err(Error::DeviceFault(name)) => name.clone(),
        other => panic!("{what}: expected DeviceFault, got {other:?}"),
    };
    println!("{what}: DeviceFault({name}) after {took:?}");
    assert!(name.starts_with("CUDA_ERROR_"), "{name}");
    assert!(took < BOUND, "{took:?}");
    for w in waiters {
        let (r, took) = w.join().unwrap();
        assert!(matches!(r, Err(Error::DeviceFault(_))), "{r:?}");
        assert!(took < BOUND, "a waiter learned after {took:?}");
    }
    // Every later call reports it, at once.
    let t1 = Instant::now();
    assert!(matches!(
        rt.submit(Op::NOP, &()),
        Err(Error::DeviceFault(_))
    ));
    assert!(matches!(
        rt.try_submit(Op::NOP, &()),
        Err(Error::DeviceFault(_))
    ));
    assert!(matches!(rt.health(), Err(Error::DeviceFault(_))));
    assert!(rt.shutdown().is_err());
    let rt = Arc::try_unwrap(rt).ok().unwrap();
    drop(rt);
    println!("later calls, shutdown and drop took {:?}", t1.elapsed());
    assert!(t1.elapsed() < Duration::from_secs(1));

    // A fresh runtime in the same process, once the faulted one is gone.
    let t2 = Instant::now();
    match Runtime::builder().build() {
        Ok(rt) => {
            let v = rt.submit(Op::ECHO, &[42u64]).unwrap().wait();
            println!("fresh runtime after the fault: built; ECHO gave {v:?}");
            assert_eq!(v.unwrap().value, 42);
            rt.shutdown().unwrap();
        }
        Err(e) => println!("fresh runtime after the fault: refused with {e}"),
    }
    assert!(t2.elapsed() < Duration::from_secs(15));
}

/// What one warp computes in `f32`: lane `l` chains fused multiply-adds over
/// columns `l, l + 32, ...`, then the lanes add in the shuffle butterfly
/// (16, 8, 4, 2, 1), as `warp_sum` does; bit for bit.
fn warp_dot_f32(a: &[f32], x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 32];
    for (l, acc) in lanes.iter_mut().enumerate() {
        for c in (l..a.len()).step_by(32) {
            *acc = a[c].mul_add(x[c], *acc);
        }
    }
    butterfly(lanes)
}

fn butterfly<T: Copy + std::ops::Add<Output = T>>(mut lanes: [T; 32]) -> T {
    for o in [16, 8, 4, 2, 1] {
        let before = lanes;
        for l in 0..32 {
            lanes[l] = before[l] + before[l ^ o];
        }
    }
    lanes[0]
}

/// DOT's sum in `f64`, as the device adds it (each product is exact).
fn warp_dot_f64(x: &[f32], y: Option<&[f32]>) -> f64 {
    let mut lanes = [0.0f64; 32];
    for (l, acc) in lanes.iter_mut().enumerate() {
        for i in (l..x.len()).step_by(32) {
            *acc += x[i] as f64 * y.map_or(1.0, |y| y[i] as f64);
        }
    }
    butterfly(lanes)
}

/// MEMCPY, MEMSET, DOT, sum, GEMV and FIR on random inputs and sizes (edge
/// sizes included, unaligned byte ranges for the copies), each compared
/// with its CPU reference bit for bit; then the limits, refused on the host
/// and (through `call_unchecked`) on the device. Buffers are allocated
/// before the runtime starts (see axpy_random_vs_cpu).
fn builtin_ops_random_vs_cpu() {
    use pkq::builtin::{self, DotArgs, FirArgs, GemvArgs};
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(5);
    let vec = |rng: &mut Rng, n: usize| -> Vec<f32> { (0..n).map(|_| rng.unit()).collect() };

    // Copies: byte buffers, at offsets 0..16 for every alignment.
    let bytes: Vec<u8> = (0..70_000).map(|_| rng.next() as u8).collect();
    let src = stream.clone_htod(&bytes).unwrap();
    let mut dst = stream.alloc_zeros::<u8>(70_000).unwrap();
    let copies: Vec<(usize, usize, usize)> = [0usize, 1, 15, 16, 17, 4096, 65_535, 65_536]
        .into_iter()
        .chain((0..30).map(|_| rng.below(65_537) as usize))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|len| (len, rng.below(16) as usize, rng.below(16) as usize))
        .collect();
    // DOT / sum.
    let dots: Vec<_> = [0usize, 1, 31, 32, 33, 65_536]
        .into_iter()
        .chain((0..10).map(|_| rng.below(65_537) as usize))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|n| {
            let (x, y) = (vec(&mut rng, n), vec(&mut rng, n));
            let xd = stream.clone_htod(&x).unwrap();
            let yd = stream.clone_htod(&y).unwrap();
            (x, y, xd, yd)
        })
        .collect();
    // GEMV.
    let gemvs: Vec<_> = [
        (1usize, 1usize),
        (256, 256),
        (1, 256),
        (256, 1),
        (17, 255),
        (0, 5),
    ]
    .into_iter()
    .chain((0..12).map(|_| (1 + rng.below(256) as usize, 1 + rng.below(256) as usize)))
    .collect::<Vec<_>>()
    .into_iter()
    .map(|(r, c)| {
        let (a, x) = (vec(&mut rng, r * c), vec(&mut rng, c));
        let ad = stream.clone_htod(&a).unwrap();
        let xd = stream.clone_htod(&x).unwrap();
        let yd = stream.alloc_zeros::<f32>(r).unwrap();
        (r, c, a, x, ad, xd, yd)
    })
    .collect();
    // FIR.
    let firs: Vec<_> = [(1usize, 1usize), (65_536, 64), (33, 32), (1, 64), (0, 3)]
        .into_iter()
        .chain((0..12).map(|_| (rng.below(5000) as usize, 1 + rng.below(64) as usize)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|(n, taps)| {
            let (x, h) = (vec(&mut rng, n + taps - 1), vec(&mut rng, taps));
            let xd = stream.clone_htod(&x).unwrap();
            let hd = stream.clone_htod(&h).unwrap();
            let yd = stream.alloc_zeros::<f32>(n).unwrap();
            (n, taps, x, h, xd, hd, yd)
        })
        .collect();
    let big = stream.alloc_zeros::<f32>(65_537).unwrap();
    let mut big_out = stream.alloc_zeros::<f32>(65_537).unwrap();

    let rt = Runtime::builder().build().unwrap();
    let mut want = vec![0u8; 70_000];
    for &(len, so, d_o) in &copies {
        rt.memcpy(&mut dst.slice_mut(d_o..d_o + len), &src.slice(so..so + len))
            .unwrap();
        want[d_o..d_o + len].copy_from_slice(&bytes[so..so + len]);
        assert_eq!(
            stream.clone_dtoh(&dst).unwrap(),
            want,
            "memcpy {len} bytes, {so} -> {d_o}"
        );
        let byte = rng.next() as u8;
        let at = rng.below(16) as usize;
        rt.memset(&mut dst.slice_mut(at..at + len / 2), byte)
            .unwrap();
        want[at..at + len / 2].fill(byte);
        assert_eq!(
            stream.clone_dtoh(&dst).unwrap(),
            want,
            "memset {} at {at}",
            len / 2
        );
    }
    for (x, y, xd, yd) in &dots {
        assert_eq!(
            rt.dot(xd, yd).unwrap().to_bits(),
            warp_dot_f64(x, Some(y)).to_bits()
        );
        assert_eq!(
            rt.sum(xd).unwrap().to_bits(),
            warp_dot_f64(x, None).to_bits()
        );
    }
    for (r, c, a, x, ad, xd, mut yd) in gemvs {
        rt.gemv(&ad, r, c, &xd, &mut yd).unwrap();
        let got = stream.clone_dtoh(&yd).unwrap();
        for i in 0..r {
            let w = warp_dot_f32(&a[i * c..(i + 1) * c], &x);
            assert_eq!(got[i].to_bits(), w.to_bits(), "gemv {r}x{c}, row {i}");
        }
    }
    for (n, taps, x, h, xd, hd, mut yd) in firs {
        rt.fir(&xd, &hd, &mut yd).unwrap();
        let got = stream.clone_dtoh(&yd).unwrap();
        for i in 0..n {
            let w = (0..taps).fold(0.0f32, |s, k| h[k].mul_add(x[i + k], s));
            assert_eq!(
                got[i].to_bits(),
                w.to_bits(),
                "fir n {n}, taps {taps}, i {i}"
            );
        }
    }

    // Over the limits: refused on the host, before anything runs...
    let bad = |r: pkq::Result<()>| assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    bad(rt.memcpy(&mut dst.slice_mut(0..65_537), &src.slice(0..65_537)));
    bad(rt.memcpy(&mut dst.slice_mut(0..10), &src.slice(0..11)));
    bad(rt.memset(&mut dst.slice_mut(0..65_537), 1));
    bad(rt.dot(&big, &big).map(drop));
    bad(rt.sum(&big).map(drop));
    bad(rt.gemv(
        &big,
        257,
        255,
        &big.slice(0..255),
        &mut big_out.slice_mut(0..257),
    ));
    bad(rt.gemv(&big, 2, 3, &big.slice(0..3), &mut big_out.slice_mut(0..2)));
    bad(rt.fir(
        &big.slice(0..10),
        &big.slice(0..65),
        &mut big_out.slice_mut(0..1),
    ));
    bad(rt.fir(
        &big.slice(0..10),
        &big.slice(0..0),
        &mut big_out.slice_mut(0..10),
    ));
    bad(rt.fir(
        &big.slice(0..10),
        &big.slice(0..2),
        &mut big_out.slice_mut(0..10),
    ));
    // ... and on the device, which checks every limit itself.
    let bad_args = |t: pkq::Result<pkq::Ticket>| {
        let r = t.unwrap().wait();
        assert!(
            matches!(
                r,
                Err(Error::Task {
                    status: TaskStatus::BadArgs,
                    ..
                })
            ),
            "{r:?}"
        );
    };
    // SAFETY: each is refused by the device before it touches memory (sizes
    // over the limits, or null addresses).
    unsafe {
        bad_args(rt.call_unchecked(
            &builtin::DOT,
            &DotArgs {
                x: 0,
                y: 0,
                n: 65_537,
                reserved: 0,
            },
        ));
        bad_args(rt.call_unchecked(
            &builtin::DOT,
            &DotArgs {
                x: 0,
                y: 0,
                n: 5,
                reserved: 0,
            },
        ));
        bad_args(rt.call_unchecked(
            &builtin::GEMV,
            &GemvArgs {
                a: 0,
                x: 0,
                y: 0,
                rows: 300,
                cols: 1,
            },
        ));
        bad_args(rt.call_unchecked(
            &builtin::FIR,
            &FirArgs {
                x: 0,
                h: 0,
                y: 0,
                n: 1,
                taps: 65,
            },
        ));
    }
    // Still serving.
    assert_eq!(
        rt.call(&builtin::ECHO, &[6, 0, 0, 0, 0, 0])
            .unwrap()
            .wait()
            .unwrap()
            .value,
        6
    );
    rt.shutdown().unwrap();
}

/// A declared op is checked against the kernel's op table, by name: at call
/// and, with `Builder::op`, at load; ops that take pointers need the unsafe
/// call.
fn typed_ops_are_checked_against_the_op_table() {
    use pkq::TypedOp;
    let rt = Runtime::builder().build().unwrap();
    let spun = rt.call(&pkq::builtin::SPIN, &1000).unwrap().wait().unwrap();
    assert!(spun.value >= 1000, "{spun:?}");
    let short_echo: TypedOp<[u64; 2]> = TypedOp::new(Op::ECHO.0, "SHORT_ECHO");
    match rt.call(&short_echo, &[1, 2]) {
        Err(Error::OpMismatch { op, code, why }) => {
            assert_eq!((op.as_str(), code), ("SHORT_ECHO", Op::ECHO.0));
            println!("    refused: {}", Error::OpMismatch { op, code, why });
        }
        other => panic!("{other:?}"),
    }
    let unknown: TypedOp<u64> = TypedOp::new(4000, "NOT_THERE");
    assert!(matches!(
        rt.call(&unknown, &1),
        Err(Error::OpMismatch { code: 4000, .. })
    ));
    assert!(matches!(
        rt.call(&pkq::builtin::GEMV, &Default::default()),
        Err(Error::UncheckedOp(Op::GEMV))
    ));
    // Raw submits of ops the table flags as dereferencing are refused too.
    assert!(matches!(
        rt.submit(Op::MEMCPY, &[0u64; 3]),
        Err(Error::UncheckedOp(_))
    ));
    rt.shutdown().unwrap();
    match Runtime::builder().op(&short_echo).build() {
        Err(Error::OpMismatch { op, .. }) => assert_eq!(op, "SHORT_ECHO"),
        other => panic!("{other:?}"),
    }
}

/// The custom-handler example's module (fk.cu, built by build.rs with
/// pkq-build): forward kinematics of random configurations against the
/// `f64` reference, the handler's own status for a NaN, its length checks,
/// and a stale argument struct refused at load by the op's name.
fn custom_handler_vs_reference() {
    if fk::IMAGE.is_empty() {
        return skip("pkq was built without nvcc, so fk.cu was not compiled");
    }
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(12);
    let batches: Vec<_> = [1usize, 31, 32, 33, 1000, fk::MAX_N]
        .into_iter()
        .map(|n| {
            let q: Vec<f32> = (0..6 * n)
                .map(|_| rng.unit() * std::f32::consts::PI)
                .collect();
            let qd = stream.clone_htod(&q).unwrap();
            let pd = stream.alloc_zeros::<f32>(12 * n).unwrap();
            (n, q, qd, pd)
        })
        .collect();
    let mut nan = vec![0.5f32; 12];
    nan[7] = f32::INFINITY;
    let nan_d = stream.clone_htod(&nan).unwrap();
    let mut out = stream.alloc_zeros::<f32>(24).unwrap();

    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Stale {
        q: u64,
        pose: u64,
    }
    let stale: pkq::TypedOp<Stale> = pkq::TypedOp::with_pointers(fk::FK.op().0, "FK");
    match Runtime::builder()
        .module(fk::IMAGE, fk::KERNEL)
        .op(&stale)
        .build()
    {
        Err(e @ Error::OpMismatch { .. }) => {
            assert!(e.to_string().contains("FK"), "{e}");
            println!("    stale struct: {e}");
        }
        other => panic!("{other:?}"),
    }
    let rt = fk::runtime().unwrap();
    for (n, q, qd, mut pd) in batches {
        assert_eq!(fk::forward_kinematics(&rt, &qd, &mut pd).unwrap(), n as u64);
        let err = fk::max_error(&q, &stream.clone_dtoh(&pd).unwrap());
        assert!(err < 1e-4, "n {n}: largest error {err}");
    }
    assert!(matches!(
        fk::forward_kinematics(&rt, &nan_d, &mut out),
        Err(Error::Task {
            status: TaskStatus::Other(fk::STATUS_NOT_FINITE),
            ..
        })
    ));
    assert!(matches!(
        fk::forward_kinematics(&rt, &nan_d.slice(0..6), &mut out),
        Err(Error::InvalidArgument(_))
    ));
    // An op the module's table does not list is refused by the safe calls
    // (a module may fall back on anything); sent anyway, this module's
    // handlers answer it UnknownOp.
    assert!(matches!(
        rt.submit(Op::ECHO, &[1u64]),
        Err(Error::OpMismatch { code: 1, .. })
    ));
    // SAFETY: fk.cu's handlers answer ops other than FK without reading
    // anything.
    let t = unsafe { rt.submit_unchecked(Op::ECHO, &[1u64]) }.unwrap();
    assert!(matches!(
        t.wait(),
        Err(Error::Task {
            status: TaskStatus::UnknownOp,
            ..
        })
    ));
    rt.shutdown().unwrap();
}

/// Batches: results in submission order; a batch larger than the ring
/// (several runs, waiting for room); reaping as they come; a dropped
/// unread batch leaves the ring usable; an empty batch; refusals.
fn batches_submit_and_reap() {
    let rt = Runtime::builder().capacity(64).workers(4).build().unwrap();
    let mut rng = Rng::new(21);
    assert!(matches!(
        rt.submit_batch(Op::NOP, &[(); 65]),
        Err(Error::InvalidArgument(_))
    ));
    for len in [1usize, 7, 63, 64, 64, 33] {
        let args: Vec<_> = (0..len as u64).map(|i| echo_args(&mut rng, i)).collect();
        let mut batch = rt.submit_batch(Op::ECHO, &args).unwrap();
        assert_eq!(batch.len(), len);
        let seqs: Vec<u64> = batch.seqs().collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order");
        let results = batch.wait().unwrap();
        for (r, a) in results.iter().zip(&args) {
            assert_eq!(r.as_ref().unwrap().value, echo_fold(a));
        }
    }
    // Reaped as they come.
    let mut batch = rt.submit_batch(Op::SPIN, &[20_000u64; 16]).unwrap();
    let mut seen = 0;
    while seen < 16 {
        let done = batch.poll().unwrap();
        assert!(done >= seen);
        seen = done;
    }
    assert!(
        batch
            .results()
            .iter()
            .all(|r| r.unwrap().unwrap().value >= 20_000)
    );
    // Unread batches dropped: their slots come back.
    for _ in 0..20 {
        drop(rt.submit_batch(Op::NOP, &[(); 50]).unwrap());
    }
    let results = rt
        .submit_batch(Op::ECHO, &[[9u64]; 64])
        .unwrap()
        .wait()
        .unwrap();
    assert!(results.iter().all(|r| r.unwrap().value == 9));
    // Failures per task; refusals for the whole batch.
    let r = rt.submit_batch(Op(999), &[(); 3]).unwrap().wait().unwrap();
    assert!(r.iter().all(|r| *r == Err(TaskStatus::UnknownOp)));
    assert!(
        rt.submit_batch(Op::NOP, &[(); 0])
            .unwrap()
            .wait()
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        rt.submit_batch(Op::GEMV, &[0u64; 4]),
        Err(Error::UncheckedOp(Op::GEMV))
    ));
    assert!(matches!(
        rt.submit_batch(Op::ECHO, &[[0u64; 7]]),
        Err(Error::PayloadTooLarge { .. })
    ));
    rt.shutdown().unwrap();
    assert!(matches!(
        rt.submit_batch(Op::NOP, &[()]),
        Err(Error::Closed)
    ));
}

/// Issue 4's load: 8 producer threads x 10 M tasks each, in batches of
/// random sizes (1 to 256) and single submits, of random ops (ECHO with
/// random payloads, NOP, short SPIN, an unknown op), every result checked
/// and every task counted once. Under a sanitizer, which slows every access
/// a hundredfold or more, 50 000 tasks per producer (it says so).
/// 8 threads on 4 rings of 64 slots (16 workers): every ring gets two of
/// them, each thread's tasks stay in its ring, windows past the ring's size
/// force moved completions; random ECHO payloads one at a time, then in
/// batches, every result checked, every task seen once; then shutdown
/// drains tasks in flight on every ring.
fn rings_spread_threads_and_lose_nothing() {
    let rt = Runtime::builder()
        .capacity(64)
        .workers(16)
        .rings(4)
        .build()
        .unwrap();
    assert_eq!(rt.rings(), 4);
    let (n, producers) = (400_000u64, 8u64);
    let seen = counters(n);
    let rings: Vec<usize> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..producers)
            .map(|p| {
                let (rt, seen) = (&rt, &seen);
                s.spawn(move || {
                    let ring = rt.submit(Op::NOP, &()).unwrap().ring();
                    pump_echo(rt, (p..n).step_by(producers as usize), 100, 77 + p, seen);
                    assert_eq!(rt.submit(Op::NOP, &()).unwrap().ring(), ring);
                    ring
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_each_once(&seen);
    for r in 0..4 {
        let on = rings.iter().filter(|&&x| x == r).count();
        assert_eq!(on, 2, "ring {r} has {on} of the threads: {rings:?}");
    }
    let moved = rt.moved_completions();
    assert!(
        moved > 0,
        "windows of 100 on 64 slots must move completions"
    );

    // Batches of random sizes from 4 threads, two in flight each.
    let counted: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|p| {
                let rt = &rt;
                s.spawn(move || {
                    let mut rng = Rng::new(500 + p);
                    let mut inflight: VecDeque<(pkq::Batch, Vec<[u64; 6]>)> = VecDeque::new();
                    let mut done = 0u64;
                    let mut check = |(mut b, args): (pkq::Batch, Vec<[u64; 6]>)| {
                        let results = b.wait().unwrap();
                        for (r, a) in results.iter().zip(&args) {
                            assert_eq!(r.unwrap().value, echo_fold(a));
                        }
                        done += results.len() as u64;
                    };
                    for _ in 0..2_000 {
                        let len = 1 + rng.below(64) as usize;
                        let args: Vec<[u64; 6]> = (0..len)
                            .map(|_| std::array::from_fn(|_| rng.next()))
                            .collect();
                        inflight.push_back((rt.submit_batch(Op::ECHO, &args).unwrap(), args));
                        if inflight.len() > 2 {
                            check(inflight.pop_front().unwrap());
                        }
                    }
                    inflight.into_iter().for_each(&mut check);
                    done
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    println!(
        "    {n} single and {} batched tasks on 4 rings, {} completions moved",
        counted.iter().sum::<u64>(),
        rt.moved_completions()
    );

    // Tasks in flight on every ring when shutdown begins: all complete.
    let tickets: Vec<pkq::Ticket> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let rt = &rt;
                s.spawn(move || {
                    (0..40)
                        .map(|_| rt.submit(Op::SPIN, &20_000u64).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let mut on: Vec<usize> = tickets.iter().map(|t| t.ring()).collect();
    on.sort();
    on.dedup();
    assert_eq!(on, [0, 1, 2, 3]);
    rt.shutdown().unwrap();
    for t in tickets {
        assert!(t.wait().unwrap().value >= 20_000);
    }
}

/// With one worker per ring, a long task stalls only its own ring: a wait
/// behind it reports that ring's worker, and another thread's ring serves.
fn a_stall_is_reported_on_its_ring() {
    let bound = Duration::from_millis(30);
    let rt = Runtime::builder()
        .workers(2)
        .rings(2)
        .stall_after(bound)
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let rt = &rt;
        s.spawn(move || {
            let long = rt.submit(Op::SPIN, &300_000_000u64).unwrap();
            let ring = long.ring();
            let mut behind = rt.submit(Op::ECHO, &[9u64]).unwrap();
            tx.send(ring).unwrap();
            match behind.wait_timeout(Duration::from_secs(2)) {
                // One worker per ring: the worker's index is the ring's.
                Err(Error::Stalled { worker, silent }) => {
                    assert_eq!(worker, ring);
                    assert!(silent > bound);
                }
                other => panic!("expected Stalled on worker {ring}, got {other:?}"),
            }
            let value = loop {
                match behind.wait_timeout(Duration::from_secs(2)) {
                    Ok(c) => break c.value,
                    Err(Error::Stalled { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            };
            assert_eq!(value, 9);
            assert!(long.wait().unwrap().value >= 300_000_000);
        });
        s.spawn(move || {
            let stalled = rx.recv().unwrap();
            let t0 = Instant::now();
            let t = rt.submit(Op::ECHO, &[4u64]).unwrap();
            assert_ne!(t.ring(), stalled, "the second thread is on the other ring");
            assert_eq!(t.wait().unwrap().value, 4);
            assert!(
                t0.elapsed() < Duration::from_millis(100),
                "{:?}",
                t0.elapsed()
            );
        });
    });
    rt.shutdown().unwrap();
}

fn eight_producers_ten_million_each() {
    let sanitized = under_sanitizer();
    let per_producer: u64 = if sanitized { 50_000 } else { 10_000_000 };
    if sanitized {
        println!("    under a sanitizer: {per_producer} tasks per producer, not 10 M");
    }
    let rt = Runtime::builder()
        .capacity(16_384)
        .workers(64)
        .build()
        .unwrap();
    let t0 = Instant::now();
    let counted: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8u64)
            .map(|p| {
                let rt = &rt;
                s.spawn(move || {
                    let mut rng = Rng::new(1000 + p);
                    let mut done = 0u64;
                    let mut inflight: VecDeque<(pkq::Batch, Op, Vec<[u64; 6]>)> = VecDeque::new();
                    let check = |mut batch: pkq::Batch, op: Op, args: Vec<[u64; 6]>| -> u64 {
                        let results = batch.wait().unwrap();
                        assert_eq!(results.len(), args.len());
                        for (r, a) in results.iter().zip(&args) {
                            match op {
                                Op::ECHO => assert_eq!(r.unwrap().value, echo_fold(a)),
                                Op::NOP => assert_eq!(r.unwrap().value, 0),
                                Op::SPIN => assert!(r.unwrap().value >= a[0]),
                                _ => assert_eq!(*r, Err(TaskStatus::UnknownOp)),
                            }
                        }
                        results.len() as u64
                    };
                    let mut submitted = 0u64;
                    while submitted < per_producer {
                        let n = (1 + rng.below(256)).min(per_producer - submitted) as usize;
                        let op = match rng.below(100) {
                            0..=59 => Op::ECHO,
                            60..=89 => Op::NOP,
                            90..=97 => Op(4000),
                            _ => Op::SPIN,
                        };
                        let args: Vec<[u64; 6]> = (0..n)
                            .map(|_| match op {
                                Op::SPIN => [rng.below(500), 0, 0, 0, 0, 0],
                                _ => std::array::from_fn(|_| rng.next()),
                            })
                            .collect();
                        if n == 1 {
                            // Single submits too.
                            let c = rt.submit(op, &args[0]).unwrap().wait();
                            match op {
                                Op::ECHO => assert_eq!(c.unwrap().value, echo_fold(&args[0])),
                                Op::NOP | Op::SPIN => assert!(c.is_ok()),
                                _ => assert!(matches!(c, Err(Error::Task { .. }))),
                            }
                            done += 1;
                        } else {
                            if inflight.len() == 8 {
                                let (b, o, a) = inflight.pop_front().unwrap();
                                done += check(b, o, a);
                            }
                            inflight.push_back((rt.submit_batch(op, &args).unwrap(), op, args));
                        }
                        submitted += n as u64;
                    }
                    for (b, o, a) in inflight {
                        done += check(b, o, a);
                    }
                    done
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let took = t0.elapsed();
    assert!(counted.iter().all(|&c| c == per_producer), "{counted:?}");
    let total: u64 = counted.iter().sum();
    println!(
        "    {total} tasks checked in {took:.1?} ({:.1} M/s)",
        total as f64 / took.as_secs_f64() / 1e6
    );
    rt.shutdown().unwrap();
}

/// One warp's reads of host memory take a PCIe round trip each (0.3 to
/// 10 µs, a wide bound), more warps answer more reads per second, and
/// writes are measured too.
fn host_access_rate_is_measured() {
    use pkq::floor::{Access, host_access_rate};
    let one = host_access_rate(0, &Access::reads(1, 64, 500)).unwrap();
    let per_read_us = 1e6 / one;
    println!("    1 warp: {one:.0} reads/s ({per_read_us:.2} µs each)");
    assert!((0.3..10.0).contains(&per_read_us), "{per_read_us}");
    let eight = host_access_rate(0, &Access::reads(8, 64, 500)).unwrap();
    println!("    8 warps: {eight:.0} reads/s");
    assert!(eight > 2.0 * one, "{eight} vs {one}");
    let writes = Access {
        write_bytes: 32,
        write_stride: 32,
        ..Access::reads(8, 0, 500)
    };
    let w = host_access_rate(0, &writes).unwrap();
    println!("    8 warps: {w:.0} 32-byte writes/s");
    assert!(w > one, "{w} vs {one}");
}

/// A worker running long tasks back to back polls once per task; it must
/// still beat between them, so that only a task longer than the stall bound
/// is reported (review of 4dc8bec: it beat every 8th poll only).
fn back_to_back_long_tasks_are_not_stalls() {
    let rt = Runtime::builder()
        .workers(1)
        .stall_after(Duration::from_millis(300))
        .build()
        .unwrap();
    let tickets: Vec<_> = (0..6)
        .map(|_| rt.submit(Op::SPIN, &150_000_000u64).unwrap())
        .collect();
    let t0 = Instant::now();
    for t in tickets {
        let c = t.wait().unwrap();
        assert!(c.value >= 150_000_000);
    }
    assert!(t0.elapsed() >= Duration::from_millis(850));
    // The tasks of a pack, too: the worker beats between them.
    let t0 = Instant::now();
    let results = rt
        .submit_packed(Op::SPIN, &[150_000_000u64; 6])
        .unwrap()
        .wait()
        .unwrap();
    assert!(results.iter().all(|r| r.unwrap().value >= 150_000_000));
    assert!(t0.elapsed() >= Duration::from_millis(850));
    rt.shutdown().unwrap();
}
