//! Build script: generates the Rust side of the shared layout from
//! `cuda/pkq_layout.h` (`pkq_build::layout_consts`), and compiles
//! `cuda/pkq.cu` (the worker kernel's translation unit; the other files in
//! `cuda/` are headers it includes, and that handler authors include) with
//! nvcc into one fatbin that the crate embeds. It compiles nothing else:
//! pkq's measurement kernels and the examples' handlers are built by their
//! own crates (`pkq-bench/`, `examples/custom_handler/`), as a dependent
//! builds its own.
//!
//! nvcc is found by `pkq_build::find_nvcc` (`NVCC`, then `CUDA_HOME`,
//! `CUDA_PATH`, `CUDA_ROOT`, then `/usr/local/cuda/bin`, then `PATH`). Without
//! nvcc (or under `DOCS_RS`) the crate still builds; creating a runtime then
//! returns `Error::KernelNotBuilt` with the reason and the fix.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "src/ptxas.rs"]
mod ptxas;

const LAYOUT_HEADER: &str = "cuda/pkq_layout.h";
const KERNEL_SOURCE: &str = "cuda/pkq.cu";
const WORKER_KERNEL: &str = "pkq_worker_kernel";

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());

    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=cuda");
    pkq_build::rerun_if_env_changed();
    println!("cargo::rerun-if-env-changed=DOCS_RS");
    // The cuda/ headers are exported for downstream build scripts
    // (DEP_PKQ_INCLUDE).
    println!(
        "cargo::metadata=include={}",
        manifest.join("cuda").display()
    );

    let header = fs::read_to_string(manifest.join(LAYOUT_HEADER)).expect("read cuda/pkq_layout.h");
    // `#define PKQ_<NAME> <integer> /* <type> */` -> `pub const <NAME>: <type> = <integer>;`
    fs::write(
        out.join("layout_gen.rs"),
        pkq_build::layout_consts(&header, "PKQ_"),
    )
    .unwrap();

    let kernel = compile_kernel(&manifest, &out);
    fs::write(out.join("kernel_gen.rs"), kernel_module(&kernel)).unwrap();
    fs::write(
        out.join("build_info_gen.rs"),
        build_info(&manifest, &kernel),
    )
    .unwrap();
}

struct Kernel {
    /// Ok(fatbin path) or Err(why there is no kernel).
    fatbin: Result<PathBuf, String>,
    nvcc_version: String,
    archs: String,
}

fn compile_kernel(manifest: &Path, out: &Path) -> Kernel {
    let archs = pkq_build::archs();
    let none = |why: String| {
        println!(
            "cargo::warning=pkq: {why}; the crate builds, but Runtime::build() on pkq's own kernel will return Error::KernelNotBuilt (one on a module of your own, Builder::module, is unaffected)"
        );
        Kernel {
            fatbin: Err(why),
            nvcc_version: String::new(),
            archs: archs.clone(),
        }
    };
    if env::var_os("DOCS_RS").is_some() {
        return none("DOCS_RS is set, so the CUDA kernel was not compiled".into());
    }
    let nvcc = match pkq_build::find_nvcc() {
        Ok(n) => n,
        Err(why) => return none(why),
    };
    let version = pkq_build::nvcc_version(&nvcc);
    let fatbin = out.join("pkq.fatbin");
    let mut cmd = pkq_build::Fatbin::new(KERNEL_SOURCE)
        .include(manifest.join("cuda"))
        .command(&nvcc, &fatbin)
        .unwrap_or_else(|e| panic!("pkq: {e}"));
    cmd.current_dir(manifest);

    // The script also reruns when git's HEAD or index moves (for the commit
    // id); skip nvcc when its inputs are what they were last time.
    let stamp = out.join("pkq.fatbin.stamp");
    let report_path = out.join("ptxas_report.txt");
    let key = input_key(manifest, &cmd, &version);
    if fatbin.is_file()
        && report_path.is_file()
        && fs::read_to_string(&stamp).is_ok_and(|s| s == key)
    {
        return Kernel {
            fatbin: Ok(fatbin),
            nvcc_version: version,
            archs,
        };
    }
    let built = pkq_build::run(cmd, &nvcc, &fatbin)
        .unwrap_or_else(|e| panic!("pkq: compiling {KERNEL_SOURCE}: {e}"));
    fs::write(&report_path, &built.ptxas_report).unwrap();
    fs::write(&stamp, &key).unwrap();
    for s in ptxas::spills(&built.ptxas_report) {
        if s.function == WORKER_KERNEL && (s.stores > 0 || s.loads > 0) {
            println!(
                "cargo::warning=pkq: ptxas spills in {}: {} bytes stored, {} bytes loaded",
                s.function, s.stores, s.loads
            );
        }
    }
    Kernel {
        fatbin: Ok(fatbin),
        nvcc_version: version,
        archs,
    }
}

/// A digest of everything nvcc's output depends on: the command line, the
/// compiler's version and every file under cuda/.
fn input_key(manifest: &Path, cmd: &Command, nvcc_version: &str) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    format!("{cmd:?}").hash(&mut h);
    nvcc_version.hash(&mut h);
    let mut files: Vec<PathBuf> = fs::read_dir(manifest.join("cuda"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        f.hash(&mut h);
        fs::read(&f).unwrap_or_default().hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

/// `kernel_gen.rs`: `FATBIN`, the worker kernel's fatbin (16-byte aligned),
/// or Err(why it was not built).
fn kernel_module(kernel: &Kernel) -> String {
    let mut rs = String::from("// Generated by build.rs. Do not edit.\n");
    match &kernel.fatbin {
        Ok(path) => writeln!(
            rs,
            "#[repr(C, align(16))]\nstruct Aligned<T: ?Sized>(T);\n\
             static IMAGE: &Aligned<[u8]> = &Aligned(*include_bytes!({path:?}));\n\
             /// The fatbin compiled from cuda/pkq.cu (16-byte aligned).\n\
             pub(crate) const FATBIN: Result<&[u8], &str> = Ok(&IMAGE.0);"
        ),
        Err(why) => writeln!(
            rs,
            "pub(crate) const FATBIN: Result<&[u8], &str> = Err({why:?});"
        ),
    }
    .unwrap();
    rs
}

fn build_info(manifest: &Path, kernel: &Kernel) -> String {
    let commit = git_commit(manifest);
    let report = if kernel.fatbin.is_ok() {
        "include_str!(concat!(env!(\"OUT_DIR\"), \"/ptxas_report.txt\"))".to_string()
    } else {
        "\"\"".to_string()
    };
    format!(
        "// Generated by build.rs. Do not edit.\n\
         /// The git commit the crate was built from (`-dirty` when the work tree differed), or \"unknown\".\n\
         pub const GIT_COMMIT: &str = {commit:?};\n\
         /// `nvcc --version`'s last line, empty when the kernel was not built.\n\
         pub const NVCC_VERSION: &str = {:?};\n\
         /// The architectures compiled to SASS (`PKQ_CUDA_ARCHS`).\n\
         pub const CUDA_ARCHS: &str = {:?};\n\
         /// ptxas's `-v` report for the worker kernel's fatbin (cuda/pkq.cu), empty when not built.\n\
         pub const PTXAS_REPORT: &str = {report};\n",
        kernel.nvcc_version, kernel.archs
    )
}

/// The commit of pkq's own checkout, or "unknown". git is run only when pkq
/// is built from its own repository (a clone whose root is the manifest
/// directory), never in a dependent's build: not when `PKQ_NO_GIT` is set
/// (to anything but `0`), not without `<manifest>/.git` (a crates.io or
/// vendored copy), and not in a copy that cargo unpacked or checked out
/// itself (a registry crate or a `git = ..` dependency: those carry cargo's
/// `.cargo-ok` marker and live under `CARGO_HOME`). Cargo does not tell a
/// build script whether its package is the one being built
/// (`CARGO_PRIMARY_PACKAGE` is set for rustc only), hence these checks.
fn git_commit(manifest: &Path) -> String {
    println!("cargo::rerun-if-env-changed=PKQ_NO_GIT");
    if env::var_os("PKQ_NO_GIT").is_some_and(|v| !v.is_empty() && v != "0") {
        return "unknown".into();
    }
    let git_dir = manifest.join(".git");
    if !git_dir.exists() || manifest.join(".cargo-ok").exists() || in_cargo_home(manifest) {
        return "unknown".into();
    }
    for f in ["HEAD", "index", "refs/heads"] {
        let p = git_dir.join(f);
        if p.exists() {
            println!("cargo::rerun-if-changed={}", p.display());
        }
    }
    let run = |args: &[&str]| {
        Command::new("git")
            .current_dir(manifest)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = run(&["rev-parse", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty =
        run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}-dirty") } else { head }
}

/// Whether `dir` lies under cargo's home (`CARGO_HOME`, else `~/.cargo`),
/// where cargo unpacks registry crates and checks out git dependencies.
fn in_cargo_home(dir: &Path) -> bool {
    let home = env::var_os("CARGO_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| env::home_dir().map(|h| h.join(".cargo")));
    let Some(home) = home else { return false };
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    canon(dir).starts_with(canon(&home))
}
