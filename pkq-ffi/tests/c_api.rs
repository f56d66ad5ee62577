//! The C API from C: `tests/c/api.c`, compiled with the `cc` crate's
//! compiler (`-Wall -Werror`, C11) against `include/pkq.h` and this crate's
//! static library, then run; once plain and once under AddressSanitizer.
//! Without a GPU the program checks every error path and says that its GPU
//! part was skipped (printed here, never counted as run).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The static library cargo built with this test, beside it
/// (`target/<profile>/deps/`: `cargo test` does not copy it up a level).
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/c_api-<hash>
    let lib = exe.parent().unwrap().join("libpkq_ffi.a");
    assert!(
        lib.exists(),
        "{} missing: cargo builds it with the tests",
        lib.display()
    );
    lib
}

/// Compiles `tests/c/api.c` into `out` with `extra` flags.
fn compile(out: &Path, extra: &[&str]) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = env!("PKQ_FFI_TARGET");
    let compiler = cc::Build::new()
        .target(target)
        .host(target)
        .opt_level(1)
        .cargo_metadata(false)
        .warnings_into_errors(true)
        .try_get_compiler()
        .expect("a C compiler");
    let mut cmd = compiler.to_command();
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(extra)
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/api.c"))
        .arg(static_lib())
        // What the static library needs of the system (rustc
        // --print native-static-libs, linux-gnu).
        .args([
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ])
        .arg("-o")
        .arg(out);
    let status = cmd.status().expect("the C compiler runs");
    assert!(status.success(), "compiling tests/c/api.c failed: {cmd:?}");
}

fn run(exe: &Path, env: &[(&str, &str)]) {
    let out = Command::new(exe)
        .envs(env.iter().copied())
        .output()
        .expect("the C test runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    // Said where it is seen (the harness keeps a passing test's prints):
    // the GPU part did not run.
    if let Some(line) = stdout.lines().find(|l| l.starts_with("GPU part skipped")) {
        let _ = writeln!(std::io::stderr(), "{}: {line}", exe.display());
    }
    assert!(
        out.status.success(),
        "{} failed: {}",
        exe.display(),
        out.status
    );
    assert!(stdout.contains("C API checks passed"));
}

#[test]
fn c_program_checks_every_call() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join("pkq_c_api");
    compile(&exe, &[]);
    run(&exe, &[]);
}

#[test]
fn c_program_under_address_sanitizer() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join("pkq_c_api_asan");
    compile(&exe, &["-fsanitize=address", "-fno-omit-frame-pointer"]);
    // The CUDA driver reserves address space where ASan's shadow gap lies,
    // and keeps allocations to the end of the process: neither is the C
    // API's (google/sanitizers#629).
    run(
        &exe,
        &[("ASAN_OPTIONS", "protect_shadow_gap=0:detect_leaks=0")],
    );
}
