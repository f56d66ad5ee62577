//! The C API from C and C++: `tests/c/api.c` (C11, against `include/pkq.h`)
//! and `tests/cpp/api.cpp` (C++17, against `include/pkq.hpp`), compiled with
//! the `cc` crate's compilers (`-Wall -Wextra -Werror`) and this crate's
//! static library, then run: the C program plain and under
//! AddressSanitizer, the C++ one with exceptions, without them, and under
//! AddressSanitizer. Without a GPU each program checks every error path and
//! says that its GPU part was skipped (printed here, never counted as
//! run).

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

/// The C program, or the C++ one.
#[derive(Clone, Copy)]
enum Lang {
    C,
    Cpp,
}

/// Compiles the `lang` program into `out` with `extra` flags.
fn compile(lang: Lang, out: &Path, extra: &[&str]) {
    let source = match lang {
        Lang::C => "pkq-ffi/tests/c/api.c",
        Lang::Cpp => "pkq-ffi/tests/cpp/api.cpp",
    };
    compile_source(lang, source, out, extra);
}

/// Compiles `source` (a path from the repository's root) into `out`.
fn compile_source(lang: Lang, source: &str, out: &Path, extra: &[&str]) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = env!("PKQ_FFI_TARGET");
    let compiler = cc::Build::new()
        .cpp(matches!(lang, Lang::Cpp))
        .target(target)
        .host(target)
        .opt_level(1)
        .cargo_metadata(false)
        .warnings_into_errors(true)
        .try_get_compiler()
        .expect("a C and a C++ compiler");
    let std = match lang {
        Lang::C => "-std=c11",
        Lang::Cpp => "-std=c++17",
    };
    let mut cmd = compiler.to_command();
    cmd.args([std, "-Wall", "-Wextra", "-Werror", "-g"])
        .args(extra)
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(manifest.join("..").join(source))
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
    assert!(status.success(), "compiling {source} failed: {cmd:?}");
}

fn run(exe: &Path, env: &[(&str, &str)], passed: &str) {
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
    assert!(stdout.contains(passed));
}

/// The CUDA driver reserves address space where ASan's shadow gap lies,
/// and keeps allocations to the end of the process: neither is the C
/// API's (google/sanitizers#629).
const ASAN: &[(&str, &str)] = &[("ASAN_OPTIONS", "protect_shadow_gap=0:detect_leaks=0")];
const ASAN_FLAGS: &[&str] = &["-fsanitize=address", "-fno-omit-frame-pointer"];

fn check(lang: Lang, name: &str, flags: &[&str], env: &[(&str, &str)]) {
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    compile(lang, &exe, flags);
    let passed = match lang {
        Lang::C => "C API checks passed",
        Lang::Cpp => "C++ API checks passed",
    };
    run(&exe, env, passed);
}

#[test]
fn c_program_checks_every_call() {
    check(Lang::C, "pkq_c_api", &[], &[]);
}

#[test]
fn c_program_under_address_sanitizer() {
    check(Lang::C, "pkq_c_api_asan", ASAN_FLAGS, ASAN);
}

#[test]
fn cpp_program_checks_every_wrapper() {
    check(Lang::Cpp, "pkq_cpp_api", &[], &[]);
}

#[test]
fn cpp_program_without_exceptions() {
    check(Lang::Cpp, "pkq_cpp_api_noexcept", &["-fno-exceptions"], &[]);
}

#[test]
fn cpp_program_under_address_sanitizer() {
    check(Lang::Cpp, "pkq_cpp_api_asan", ASAN_FLAGS, ASAN);
}

/// The examples and the bench's programs in C and C++ build, warnings
/// refused (they need a GPU to run: the GPU bundle runs the bench's).
#[test]
fn examples_and_bench_programs_compile() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for (lang, source) in [
        (Lang::C, "examples/c/round_trip.c"),
        (Lang::Cpp, "examples/cpp/hot_loop.cpp"),
        (Lang::C, "pkq-bench/bindings/round_trip.c"),
        (Lang::Cpp, "pkq-bench/bindings/round_trip.cpp"),
    ] {
        let name = source.replace('/', "_");
        compile_source(lang, source, &dir.join(name), &[]);
    }
}
