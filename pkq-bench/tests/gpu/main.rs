//! GPU tests of pkq-bench: the measurement tools (the raw floor, device
//! costs, access rates, the order of module loads beside a runtime) and
//! the bench programs' handlers (control_loop's and risk_check's) against
//! CPU references.
//!
//! Our own runner (harness = false), as pkq's `tests/gpu`: on a machine
//! without a usable GPU, or from a build without the kernels, it says so
//! and how many tests it skipped, instead of reporting tests that checked
//! nothing as passed. A watchdog fails any test that hangs.
//!
//! Usage: `cargo test --release -p pkq-bench --test gpu [-- NAME_FILTER...]`.

#[path = "../../src/bin/control_loop/control.rs"]
mod control;
#[path = "../../src/bin/risk_check/book.rs"]
mod risk;
#[path = "../support/mod.rs"]
mod support;

mod handlers;
mod tools;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pkq::{Error, Runtime, TaskError, TaskStatus};
use pkq_bench::floor::{Floor, Shape};
use support::Rng;

/// A test fails if it runs longer than this (hangs are failures, not waits);
/// under compute-sanitizer three times as long.
fn watchdog() -> Duration {
    Duration::from_secs(if under_sanitizer() { 360 } else { 120 })
}

type Test = (&'static str, fn());

const TESTS: &[Test] = &[
    ("floor_ping_pong", tools::floor_ping_pong),
    (
        "device_costs_and_clock_map",
        tools::device_costs_and_clock_map,
    ),
    (
        "host_access_rate_is_measured",
        tools::host_access_rate_is_measured,
    ),
    ("bulk_copies_are_timed", tools::bulk_copies_are_timed),
    (
        "a_floor_beside_a_running_runtime",
        tools::a_floor_beside_a_running_runtime,
    ),
    (
        "no_visible_gpu_is_an_error",
        tools::no_visible_gpu_is_an_error,
    ),
    ("state_io_random_vs_cpu", handlers::state_io_random_vs_cpu),
    (
        "risk_check_random_vs_cpu",
        handlers::risk_check_random_vs_cpu,
    ),
];

/// Scenarios run in a child process of this binary (`PKQ_GPU_CHILD=<name>`).
const CHILDREN: &[Test] = &[("no_visible_gpu", tools::child_no_visible_gpu)];

/// Why the running test skipped itself, if it did.
static SKIPPED: Mutex<Option<String>> = Mutex::new(None);

/// Whether the suite runs under compute-sanitizer (`PKQ_UNDER_SANITIZER`).
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
    let selected: Vec<&Test> = TESTS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .filter(|(name, _)| !skips.iter().any(|s| name.contains(s.as_str())))
        .collect();
    if let Err(why) = gpu_ready() {
        println!("\nrunning {} pkq-bench GPU tests", selected.len());
        println!("SKIPPED all {} pkq-bench GPU tests: {why}", selected.len());
        println!(
            "test result: ok. 0 passed; 0 failed; {} skipped (no GPU); nothing was checked\n",
            selected.len()
        );
        return;
    }
    let info = pkq::device_info(0).expect("device info");
    println!(
        "\nrunning {} pkq-bench GPU tests on {} (driver {})",
        selected.len(),
        info.name,
        info.driver
    );
    // pkq-bench's module first, before any runtime starts (see
    // pkq_bench::floor).
    pkq_bench::floor::load(0).expect("pkq-bench's module");

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
        let outcome = catch_unwind(AssertUnwindSafe(test));
        let secs = t0.elapsed().as_secs_f64();
        let skip = SKIPPED.lock().unwrap().take();
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

/// Why GPU tests cannot run here, if they cannot: no kernels (pkq's or
/// pkq-bench's), or no device.
fn gpu_ready() -> Result<(), String> {
    pkq::kernel_image().map_err(|e| e.to_string())?;
    pkq_bench::floor::image().map_err(|e| e.to_string())?;
    match pkq::device_count() {
        Ok(0) => Err("the driver reports no CUDA device".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
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
