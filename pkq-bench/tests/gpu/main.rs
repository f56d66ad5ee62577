//! GPU tests of pkq-bench: the measurement tools (the raw floor, device
//! costs, access rates, the order of module loads beside a runtime) and
//! the bench programs' handlers (control_loop's and risk_check's) against
//! CPU references.
//!
//! Our own runner (harness = false), pkq's `tests/support/runner.rs`: on a machine
//! without a usable GPU, or from a build without the kernels, it says so
//! and how many tests it skipped, instead of reporting tests that checked
//! nothing as passed. A watchdog fails any test that hangs.
//!
//! Usage: `cargo test --release -p pkq-bench --test gpu [-- NAME_FILTER...]`.

#[path = "../../src/bin/control_loop/control.rs"]
mod control;
#[path = "../../src/bin/risk_check/book.rs"]
mod risk;
#[path = "../../../tests/support/mod.rs"]
mod support;

mod handlers;
mod tools;

use std::time::Instant;

use pkq::{Error, Runtime, TaskError, TaskStatus};
use pkq_bench::floor::{Floor, Shape};
use support::Rng;
use support::runner::{Suite, Test, run_child, skip, under_sanitizer};

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

fn main() {
    Suite {
        what: "pkq-bench GPU tests",
        tests: TESTS.iter().collect(),
        children: CHILDREN,
        ready: gpu_ready,
        // pkq-bench's module first, before any runtime starts (see
        // pkq_bench::floor).
        before: || {
            pkq_bench::floor::load(0).expect("pkq-bench's module");
        },
        live: None,
    }
    .main();
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
