//! GPU tests: the real kernel on random inputs, checked against CPU
//! references, every task counted (none lost, none twice).
//!
//! Our own runner (harness = false, `tests/support/runner.rs`): on a
//! machine without a usable GPU it says so and how many tests it skipped,
//! instead of reporting tests that checked nothing as passed. A watchdog
//! fails any test that hangs.
//!
//! Usage: `cargo test --release --test gpu [-- NAME_FILTER...]`.
//!
//! Each module lists its tests (`TESTS`, made with `tests!`); a test
//! function left out of its list is dead code, which this crate denies.
#![deny(dead_code)]

#[path = "../support/mod.rs"]
mod support;

mod examples;
mod faults;
mod isolation;
mod lifecycle;
mod ops;
mod pool;
mod protocol;
mod ptx;
mod sharing;
mod tracing;
mod waiting;
mod width;

use custom_handler as fk;
use pkq::builtin::*;
use pkq::{MemoryState, Submit, Task, Tasks};

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pkq::cudarc::driver::CudaContext;
use pkq::{ARGS_BYTES, Error, IdlePolicy, Op, Runtime, TaskError, TaskStatus};
use support::Rng;
use support::runner::{Suite, Test, run_child, skip, under_sanitizer};

/// The built-in ops' codes, as constants the tests match on.
const NOP_OP: Op = NOP.op();
const ECHO_OP: Op = ECHO.op();
const SPIN_OP: Op = SPIN.op();
const AXPY_OP: Op = AXPY.op();
const MEMCPY_OP: Op = MEMCPY.op();
const GEMV_OP: Op = GEMV.op();

const SEQ_WRAP: u64 = 1 << 63;

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
    tracing::TESTS,
    width::TESTS,
    examples::TESTS,
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
    (
        "kernel_outlives_its_runtime",
        lifecycle::child_kernel_outlives_its_runtime,
    ),
    ("pool_trap", pool::child_pool_trap),
    ("pool_trap_one_of_many", pool::child_pool_trap_one_of_many),
    (
        "pool_cancel_beside_a_fault",
        pool::child_pool_cancel_beside_a_fault,
    ),
];

fn main() {
    Suite {
        what: "GPU tests",
        tests: MODULES.iter().flat_map(|m| m.iter()).collect(),
        children: CHILDREN,
        ready: gpu_ready,
        before: || {},
        // Every runtime a test built, and every ticket and batch of it, is
        // gone when it returns: its memory must be freed by then.
        live: Some(pkq::live_lanes),
    }
    .main();
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
