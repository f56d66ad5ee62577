//! The runner of the GPU test binaries (harness = false): pkq's
//! `tests/gpu` and pkq-bench's. On a machine without a usable GPU, or from
//! a build without the kernels, it says so and how many tests it skipped,
//! instead of reporting tests that checked nothing as passed; a test may
//! skip itself ([`skip`]) with its reason; a watchdog fails any test that
//! hangs; scenarios that must not share the process (device faults, a
//! hidden GPU) run in a child process of the binary ([`run_child`]).
//!
//! Arguments as libtest's: names to run (substrings), `--skip NAME` to
//! leave out; other flags (cargo's) are ignored.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A test: its name and its function.
pub type Test = (&'static str, fn());

/// A GPU test binary.
pub struct Suite {
    /// What its tests are called in its report ("GPU tests").
    pub what: &'static str,
    /// Its tests, in the order they run.
    pub tests: Vec<&'static Test>,
    /// Scenarios run in a child process (`PKQ_GPU_CHILD=<name>`).
    pub children: &'static [Test],
    /// Why its tests cannot run here, if they cannot.
    pub ready: fn() -> Result<(), String>,
    /// Runs once on a usable GPU, before the first test.
    pub before: fn(),
    /// A count that every test leaves as it found it (pkq's live lanes: a
    /// test's runtimes, tickets and batches are gone, their memory freed,
    /// when it returns), if the suite checks one.
    pub live: Option<fn() -> usize>,
}

/// Why the running test skipped itself, if it did.
static SKIPPED: Mutex<Option<String>> = Mutex::new(None);

/// Whether the suite runs under compute-sanitizer (bundle-run.sh says so).
pub fn under_sanitizer() -> bool {
    std::env::var_os("PKQ_UNDER_SANITIZER").is_some()
}

/// Ends the calling test as skipped (with the reason), not passed.
pub fn skip(why: &str) {
    *SKIPPED.lock().unwrap() = Some(why.to_string());
}

/// A test fails if it runs longer than this (hangs are failures, not
/// waits); under compute-sanitizer, which slows the kernel tens of times,
/// three times as long.
fn watchdog() -> Duration {
    Duration::from_secs(if under_sanitizer() { 360 } else { 120 })
}

impl Suite {
    /// Runs the child scenario the environment names, else the tests the
    /// arguments select; exits non-zero if any failed.
    pub fn main(self) {
        if let Ok(child) = std::env::var("PKQ_GPU_CHILD") {
            let (_, run) = self
                .children
                .iter()
                .find(|(name, _)| *name == child)
                .expect("known child scenario");
            run();
            println!("child {child}: all checks passed");
            return;
        }
        let (mut filters, mut skips) = (Vec::new(), Vec::new());
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            if a == "--skip" {
                skips.extend(args.next());
            } else if !a.starts_with('-') {
                filters.push(a);
            }
        }
        let selected: Vec<&Test> = self
            .tests
            .iter()
            .copied()
            .filter(|(name, _)| {
                filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
            })
            .filter(|(name, _)| !skips.iter().any(|s| name.contains(s.as_str())))
            .collect();
        let what = self.what;
        if let Err(why) = (self.ready)() {
            println!("\nrunning {} {what}", selected.len());
            println!("SKIPPED all {} {what}: {why}", selected.len());
            println!(
                "test result: ok. 0 passed; 0 failed; {} skipped (no GPU); nothing was checked\n",
                selected.len()
            );
            return;
        }
        let info = pkq::device_info(0).expect("device info");
        println!(
            "\nrunning {} {what} on {} (driver {})",
            selected.len(),
            info.name,
            info.driver
        );
        (self.before)();

        let current: Arc<Mutex<(&'static str, Instant)>> =
            Arc::new(Mutex::new(("", Instant::now())));
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
            let live = self.live.map(|count| count());
            let outcome = catch_unwind(AssertUnwindSafe(test));
            let secs = t0.elapsed().as_secs_f64();
            let skip = SKIPPED.lock().unwrap().take();
            let left = match (self.live, live) {
                (Some(count), Some(before)) => count().saturating_sub(before),
                _ => 0,
            };
            if outcome.is_ok() && left > 0 {
                println!("    {left} lane(s) of runtimes still allocated after the test");
            }
            match outcome {
                Ok(()) if left > 0 => {
                    failed.push(name);
                    println!("test {name} ... FAILED ({secs:.2} s)");
                }
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
}

/// Runs child scenario `name` in a child process of this binary (with
/// `env` added), within a bound; fails if it fails, hangs or crashes.
pub fn run_child(name: &str, env: &[(&str, &str)]) {
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
