//! GPU tests: the real kernel on random inputs, checked against CPU
//! references, every task counted (none lost, none twice).
//!
//! Our own runner (harness = false): on a machine without a usable GPU it
//! says so and how many tests it skipped, instead of reporting tests that
//! checked nothing as passed. A watchdog fails any test that hangs.
//!
//! Usage: `cargo test --release --test gpu [-- NAME_FILTER...]`.
//!
//! Each module lists its tests (`TESTS`, made with `tests!`); a test
//! function left out of its list is dead code, which this crate denies.
#![deny(dead_code)]

#[path = "../support/mod.rs"]
mod support;

mod faults;
mod isolation;
mod lifecycle;
mod ops;
mod pool;
mod protocol;
mod ptx;
mod sharing;
mod waiting;

use custom_handler as fk;
use pkq::builtin::*;
use pkq::{MemoryState, Submit, Task, Tasks};

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pkq::cudarc::driver::CudaContext;
use pkq::{ARGS_BYTES, Error, IdlePolicy, Op, Runtime, TaskError, TaskStatus};
use support::Rng;

/// The built-in ops' codes, as constants the tests match on.
const NOP_OP: Op = NOP.op();
const ECHO_OP: Op = ECHO.op();
const SPIN_OP: Op = SPIN.op();
const AXPY_OP: Op = AXPY.op();
const MEMCPY_OP: Op = MEMCPY.op();
const GEMV_OP: Op = GEMV.op();

/// A test fails if it runs longer than this (hangs are failures, not waits);
/// under compute-sanitizer, which slows the kernel tens of times, three
/// times as long.
fn watchdog() -> Duration {
    Duration::from_secs(if under_sanitizer() { 360 } else { 120 })
}
const SEQ_WRAP: u64 = 1 << 63;

type Test = (&'static str, fn());

/// A module's list of tests: each function with its name.
macro_rules! tests {
    ($($test:ident),* $(,)?) => {
        &[$((stringify!($test), $test as fn())),*]
    };
}
use tests;

/// Every module's tests, in the order they run.
const MODULES: &[&[Test]] = &[
    pool::TESTS,
    isolation::TESTS,
    protocol::TESTS,
    ops::TESTS,
    lifecycle::TESTS,
    faults::TESTS,
    waiting::TESTS,
    sharing::TESTS,
];

/// Faults, run in a child process (`PKQ_GPU_CHILD=<name>`).
const CHILDREN: &[Test] = &[
    ("trap", faults::child_trap),
    ("illegal_address", faults::child_illegal_address),
    ("no_visible_gpu", faults::child_no_visible_gpu),
    (
        "borrowing_cancel_timeout",
        faults::child_borrowing_cancel_timeout,
    ),
    ("launch_blocking", faults::child_launch_blocking),
    ("pool_trap", pool::child_pool_trap),
    ("pool_trap_one_of_many", pool::child_pool_trap_one_of_many),
    (
        "pool_cancel_beside_a_fault",
        pool::child_pool_cancel_beside_a_fault,
    ),
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
    // As libtest: names to run (substrings), and `--skip NAME` to leave
    // out; other flags (cargo's) are ignored.
    let (mut filters, mut skips) = (Vec::new(), Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--skip" {
            skips.extend(args.next());
        } else if !a.starts_with('-') {
            filters.push(a);
        }
    }
    let selected: Vec<&Test> = MODULES
        .iter()
        .flat_map(|m| m.iter())
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .filter(|(name, _)| !skips.iter().any(|s| name.contains(s.as_str())))
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
        let live = pkq::live_lanes();
        let outcome = catch_unwind(AssertUnwindSafe(test));
        let secs = t0.elapsed().as_secs_f64();
        let skip = SKIPPED.lock().unwrap().take();
        // Every runtime a test built, and every ticket and batch of it, is
        // gone when it returns: its memory must be freed by then.
        let left = pkq::live_lanes().saturating_sub(live);
        if outcome.is_ok() && left > 0 {
            println!("    {left} lane(s) of runtimes still allocated after the test");
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
    pump_echo_via(rt, |a| rt.submit(ECHO_48.args(a)), ids, window, seed, seen);
}

/// [`pump_echo`] through `submit` (a producer's, say).
fn pump_echo_via(
    rt: &Runtime,
    submit: impl Fn(&[u64; 6]) -> pkq::Result<pkq::Ticket>,
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
        let t = submit(&args).expect("submit");
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
