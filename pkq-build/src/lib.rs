//! Compiles CUDA sources into fatbins from a build script, the way pkq
//! compiles its own kernel: the same nvcc discovery, the same architecture
//! flags, pkq's device headers on the include path.
//!
//! A crate that serves its own handlers with pkq (see pkq's README, "Write
//! your own handler") depends on `pkq` and has, in its `build.rs`:
//!
//! ```no_run
//! // build.rs; Cargo.toml: [build-dependencies] pkq-build = "0.1"
//! fn main() {
//!     pkq_build::rerun_if_env_changed();
//!     println!("cargo::rerun-if-changed=cuda");
//!     let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
//!     // pkq's `links = "pkq"` hands its header directory to dependents.
//!     let pkq_include = std::env::var("DEP_PKQ_INCLUDE").expect("pkq is a dependency");
//!     pkq_build::Fatbin::new("cuda/my_handlers.cu")
//!         .include(pkq_include)
//!         .compile(&out.join("my_handlers.fatbin"))
//!         .unwrap_or_else(|e| panic!("{e}"));
//! }
//! ```
//!
//! and embeds the result with
//! `include_bytes!(concat!(env!("OUT_DIR"), "/my_handlers.fatbin"))`, to give
//! to `pkq::Runtime::builder().module(..)`.
//!
//! nvcc is looked for in `NVCC`, then `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`
//! (+ `bin/nvcc`), then `/usr/local/cuda/bin`, then `PATH`. Architectures
//! come from `PKQ_CUDA_ARCHS` (default [`DEFAULT_ARCHS`]): SASS for each,
//! and PTX of the newest for GPUs not yet made.

// The example is a build script, whose `fn main` is the point.
#![allow(clippy::needless_doctest_main)]

// The README's build.rs is compiled (not run) with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::env;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Architectures compiled to SASS when `PKQ_CUDA_ARCHS` is not set.
pub const DEFAULT_ARCHS: &str = "80,86,89,90";

/// The environment variables that decide what [`Fatbin::compile`] does; a
/// build script that uses it should rerun when one changes
/// ([`rerun_if_env_changed`]).
pub const ENV_VARS: &[&str] = &[
    "NVCC",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "PATH",
    "PKQ_CUDA_ARCHS",
];

/// Prints `cargo::rerun-if-env-changed` for each of [`ENV_VARS`].
pub fn rerun_if_env_changed() {
    for var in ENV_VARS {
        println!("cargo::rerun-if-env-changed={var}");
    }
}

/// Why a fatbin was not built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No nvcc was found (the crate can still build without its kernel).
    NoNvcc(String),
    /// `PKQ_CUDA_ARCHS` names no usable architecture.
    BadArchs(String),
    /// nvcc ran and failed: its report.
    Compile(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoNvcc(why) => write!(f, "no nvcc: {why}"),
            Error::BadArchs(why) => write!(f, "PKQ_CUDA_ARCHS: {why}"),
            Error::Compile(report) => write!(f, "nvcc failed:\n{report}"),
        }
    }
}

impl std::error::Error for Error {}

/// What a successful compile produced.
#[derive(Debug, Clone)]
pub struct Built {
    /// The fatbin written.
    pub path: PathBuf,
    /// `nvcc --version`'s last line.
    pub nvcc_version: String,
    /// The architectures compiled to SASS.
    pub archs: String,
    /// ptxas's `-v` report (registers, spills) of every kernel.
    pub ptxas_report: String,
}

/// One `.cu` translation unit to compile into a fatbin.
#[derive(Debug, Clone)]
pub struct Fatbin {
    source: PathBuf,
    includes: Vec<PathBuf>,
    defines: Vec<String>,
}

impl Fatbin {
    /// The translation unit (relative paths are taken from the current
    /// directory, which is the package root in a build script).
    pub fn new(source: impl Into<PathBuf>) -> Self {
        Self {
            source: source.into(),
            includes: Vec::new(),
            defines: Vec::new(),
        }
    }

    /// Adds an include directory (pkq's: `DEP_PKQ_INCLUDE`).
    pub fn include(mut self, dir: impl Into<PathBuf>) -> Self {
        self.includes.push(dir.into());
        self
    }

    /// Adds `-D<define>`.
    pub fn define(mut self, define: &str) -> Self {
        self.defines.push(define.to_string());
        self
    }

    /// The nvcc command that [`compile`](Fatbin::compile) would run.
    pub fn command(&self, nvcc: &Path, out: &Path) -> Result<Command, Error> {
        let archs = archs();
        let mut cmd = Command::new(nvcc);
        cmd.args(["-fatbin", "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v"]);
        for dir in &self.includes {
            cmd.arg("-I").arg(dir);
        }
        // The PyPI layout keeps libcu++ (<cuda/atomic>) under include/cccl.
        if let Some(root) = nvcc.parent().and_then(Path::parent) {
            let cccl = root.join("include").join("cccl");
            if cccl.is_dir() {
                cmd.arg("-I").arg(cccl);
            }
        }
        for d in &self.defines {
            cmd.arg(format!("-D{d}"));
        }
        cmd.args(gencode_flags(&archs)?)
            .arg(&self.source)
            .arg("-o")
            .arg(out);
        Ok(cmd)
    }

    /// Compiles the source into the fatbin `out`.
    pub fn compile(&self, out: &Path) -> Result<Built, Error> {
        let nvcc = find_nvcc().map_err(Error::NoNvcc)?;
        let cmd = self.command(&nvcc, out)?;
        run(cmd, &nvcc, out)
    }
}

/// Runs an nvcc command built by [`Fatbin::command`].
pub fn run(mut cmd: Command, nvcc: &Path, out: &Path) -> Result<Built, Error> {
    let output = cmd
        .output()
        .map_err(|e| Error::NoNvcc(format!("running {}: {e}", nvcc.display())))?;
    let report = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(Error::Compile(format!(
            "{}{report}",
            String::from_utf8_lossy(&output.stdout)
        )));
    }
    Ok(Built {
        path: out.to_path_buf(),
        nvcc_version: nvcc_version(nvcc),
        archs: archs(),
        ptxas_report: report,
    })
}

/// The architectures to compile: `PKQ_CUDA_ARCHS`, or [`DEFAULT_ARCHS`].
pub fn archs() -> String {
    env::var("PKQ_CUDA_ARCHS").unwrap_or_else(|_| DEFAULT_ARCHS.to_string())
}

/// `nvcc --version`'s last line (empty if it cannot be run).
pub fn nvcc_version(nvcc: &Path) -> String {
    Command::new(nvcc)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// Finds nvcc: `NVCC`, then `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT` (+
/// `bin/nvcc`), then `/usr/local/cuda/bin`, then `PATH`.
pub fn find_nvcc() -> Result<PathBuf, String> {
    if let Some(p) = env::var_os("NVCC") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p.canonicalize().unwrap_or(p))
        } else {
            Err(format!("NVCC={} is not a file", p.display()))
        };
    }
    let exe = if cfg!(windows) { "nvcc.exe" } else { "nvcc" };
    let mut candidates: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
        .iter()
        .filter_map(env::var_os)
        .map(|root| PathBuf::from(root).join("bin").join(exe))
        .collect();
    candidates.push(PathBuf::from("/usr/local/cuda/bin").join(exe));
    if let Some(path) = env::var_os("PATH") {
        candidates.extend(env::split_paths(&path).map(|d| d.join(exe)));
    }
    candidates
        .into_iter()
        .find(|c| c.is_file())
        // Resolve links, so that a linked nvcc finds its own include/cccl.
        .map(|c| c.canonicalize().unwrap_or(c))
        .ok_or_else(|| {
            "nvcc not found (looked at NVCC, CUDA_HOME, CUDA_PATH, CUDA_ROOT, /usr/local/cuda/bin \
             and PATH)"
                .to_string()
        })
}

/// Rust constants from a C header's `#define`s, so that one header is the
/// one definition of numbers that CUDA and Rust code share (pkq's
/// `cuda/pkq_layout.h` is made so).
///
/// Every line `#define <prefix><NAME> <integer>` (decimal, or hex with `0x`),
/// optionally followed by a comment `/* <type> */`, becomes
/// `pub const <NAME>: <type> = <integer>;`, with the type `u8`, `u16`,
/// `u32` or `u64` where the comment names one and `usize` otherwise. Other
/// lines (an include guard without a value, a value that is not an
/// integer, other comments, other names) are left out. A build script
/// writes the result into `OUT_DIR` and the crate `include!`s it:
///
/// ```
/// let header = "#define MY_SLOTS 64\n#define MY_STOP 0xff /* u8 */\n#define MY_H\n";
/// let rs = pkq_build::layout_consts(header, "MY_");
/// assert!(rs.contains("pub const SLOTS: usize = 64;"));
/// assert!(rs.contains("pub const STOP: u8 = 255;"));
/// assert!(!rs.contains("pub const H"));
/// ```
pub fn layout_consts(header: &str, prefix: &str) -> String {
    let mut rs = format!(
        "// Generated by pkq_build::layout_consts from the header's `#define {prefix}*` lines. \
         Do not edit.\n"
    );
    let directive = format!("#define {prefix}");
    for line in header.lines() {
        let Some(rest) = line.trim().strip_prefix(directive.as_str()) else {
            continue;
        };
        let (def, comment) = match rest.split_once("/*") {
            Some((d, c)) => (d, c.trim_end_matches("*/").trim()),
            None => (rest, ""),
        };
        let mut it = def.split_whitespace();
        let (Some(name), Some(value)) = (it.next(), it.next()) else {
            continue; // include guard
        };
        let parsed = match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => value.parse::<u64>(),
        };
        let Ok(v) = parsed else { continue };
        let ty = match comment {
            "u8" | "u16" | "u32" | "u64" => comment,
            _ => "usize",
        };
        rs.push_str(&format!("pub const {name}: {ty} = {v};\n"));
    }
    rs
}

/// "80,86,90" -> SASS for each, plus PTX of the newest.
pub fn gencode_flags(archs: &str) -> Result<Vec<String>, Error> {
    let mut nums: Vec<(u32, String)> = Vec::new();
    for a in archs.split([',', ';', ' ']).filter(|a| !a.is_empty()) {
        let a = a
            .trim()
            .trim_start_matches("sm_")
            .trim_start_matches("compute_");
        let digits: String = a.chars().take_while(char::is_ascii_digit).collect();
        let n: u32 = digits.parse().map_err(|_| {
            Error::BadArchs(format!("{a:?} is not an architecture like 90 or sm_90"))
        })?;
        if n < 80 {
            return Err(Error::BadArchs(format!(
                "sm_{a} is older than sm_80, which pkq needs"
            )));
        }
        nums.push((n, a.to_string()));
    }
    let newest = nums
        .iter()
        .max_by_key(|(n, _)| *n)
        .ok_or_else(|| Error::BadArchs("no architecture given".into()))?;
    let mut flags: Vec<String> = nums
        .iter()
        .map(|(_, a)| format!("-gencode=arch=compute_{a},code=sm_{a}"))
        .collect();
    flags.push(format!(
        "-gencode=arch=compute_{0},code=compute_{0}",
        newest.1
    ));
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gencode_for_each_arch_and_ptx_of_the_newest() {
        assert_eq!(
            gencode_flags("80,sm_90").unwrap(),
            [
                "-gencode=arch=compute_80,code=sm_80",
                "-gencode=arch=compute_90,code=sm_90",
                "-gencode=arch=compute_90,code=compute_90"
            ]
        );
        assert!(matches!(gencode_flags("75"), Err(Error::BadArchs(_))));
        assert!(matches!(gencode_flags(""), Err(Error::BadArchs(_))));
        assert!(matches!(gencode_flags("x"), Err(Error::BadArchs(_))));
    }

    #[test]
    fn layout_consts_from_defines_of_the_prefix() {
        let header = "\
#ifndef PKQ_LAYOUT_H
#define PKQ_LAYOUT_H
/* a comment */
#define PKQ_SLOT_BYTES 64
#define PKQ_STOP 0xffffffffffffffff /* u64 */
#define PKQ_SHIFT 56 /* u32 */
#define PKQ_WHAT 3 /* not a type */
#define PKQ_EXPR (1 << 4)
#define OTHER_THING 7
  #define PKQ_INDENTED 0x10 /* u16 */
#endif
";
        let rs = layout_consts(header, "PKQ_");
        let consts: Vec<&str> = rs.lines().skip(1).collect();
        assert_eq!(
            consts,
            [
                "pub const SLOT_BYTES: usize = 64;",
                "pub const STOP: u64 = 18446744073709551615;",
                "pub const SHIFT: u32 = 56;",
                "pub const WHAT: usize = 3;",
                "pub const INDENTED: u16 = 16;",
            ]
        );
        assert!(rs.starts_with("// Generated"));
        assert_eq!(layout_consts(header, "OTHER_").lines().count(), 2);
    }
}
