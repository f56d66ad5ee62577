//! The layer rules of `src/`, checked on the source (the library's code,
//! not its tests):
//!
//! * every call of the CUDA driver is under `src/cuda/`;
//! * `src/proto/` (the host protocol) uses no driver crate and nothing of
//!   the layers above it (`cuda`, `runtime`, `pool`, `builtin`);
//! * every atomic, lock and thread handshake goes through the one facade,
//!   `src/sync.rs` (std's, or loom's when the protocol is model-checked);
//! * the files' imports (`crate::` paths) form no circle, and neither do
//!   the top-level modules'.
//!
//! A violation names the file, the line and the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A file's path relative to `src/`, and its numbered lines of code.
type Code = Vec<(String, Vec<(usize, String)>)>;

/// The source root and each library file's path relative to it, with its
/// lines of library code: test modules (`#[cfg(...test...)] mod ... { }`,
/// and files of test modules declared elsewhere) and comments left out.
fn library_code() -> (PathBuf, Code) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for path in rust_files(&root) {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let name = rel.rsplit('/').next().unwrap();
        // Test modules kept in files of their own.
        if matches!(name, "tests.rs" | "loom_tests.rs")
            || rel == "proto/soft.rs"
            || rel == "proto/queue/support.rs"
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        files.push((rel, code_lines(&text)));
    }
    (root, files)
}

/// The lines of `text` outside test modules, without comments.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i64> = None;
    let mut depth: i64 = 0;
    let mut test_attr = false;
    for (i, raw) in text.lines().enumerate() {
        let line = match raw.find("//") {
            Some(at) => &raw[..at],
            None => raw,
        };
        let trimmed = line.trim();
        if skip_depth.is_none() {
            if trimmed.starts_with("#[cfg(") && trimmed.contains("test") {
                test_attr = true;
            } else if test_attr
                && (trimmed.starts_with("mod ") || trimmed.starts_with("pub(crate) mod "))
            {
                if trimmed.ends_with('{') {
                    skip_depth = Some(depth);
                }
                test_attr = false;
            } else if !trimmed.is_empty() && !trimmed.starts_with("#[") {
                test_attr = false;
            }
        }
        let opens = line.matches('{').count() as i64;
        let closes = line.matches('}').count() as i64;
        if skip_depth.is_none() {
            out.push((i + 1, line.to_string()));
        }
        depth += opens - closes;
        if let Some(d) = skip_depth
            && depth <= d
            && closes > 0
        {
            skip_depth = None;
        }
    }
    out
}

#[test]
fn driver_calls_live_under_src_cuda() {
    // Calls of the driver's raw and result layers, and of cudarc's safe
    // calls that reach the driver.
    let forbidden = [
        "result::",
        "sys::cu",
        "sys::CU",
        ".new_stream(",
        ".load_module(",
        ".alloc::<",
        ".alloc_zeros",
        ".synchronize(",
        "launch_builder",
        "memcpy_",
        ".attribute(",
        "CudaContext::new",
    ];
    let (_, files) = library_code();
    let mut bad = Vec::new();
    for (rel, lines) in &files {
        if rel.starts_with("cuda/") {
            continue;
        }
        for (n, line) in lines {
            // `std::result::Result` is no driver call.
            let line = line.replace("std::result::", "");
            if let Some(f) = forbidden.iter().find(|f| line.contains(*f)) {
                bad.push(format!(
                    "src/{rel}:{n}: `{f}` outside src/cuda/: {}",
                    line.trim()
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "driver calls outside src/cuda/:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_protocol_uses_no_driver_and_no_layer_above_it() {
    let forbidden = [
        "cudarc",
        "crate::cuda",
        "crate::runtime",
        "crate::pool",
        "crate::builtin",
    ];
    let (_, files) = library_code();
    let mut bad = Vec::new();
    for (rel, lines) in &files {
        if !rel.starts_with("proto/") {
            continue;
        }
        for (n, line) in lines {
            if let Some(f) = forbidden.iter().find(|f| line.contains(*f)) {
                bad.push(format!(
                    "src/{rel}:{n}: `{f}` in the protocol: {}",
                    line.trim()
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the protocol layer reaches up:\n{}",
        bad.join("\n")
    );
}

#[test]
fn atomics_locks_and_thread_handshakes_go_through_the_facade() {
    let forbidden = [
        "std::sync::atomic",
        "std::sync::Mutex",
        "std::sync::RwLock",
        "std::sync::Condvar",
        "std::sync::OnceLock",
        "std::sync::LazyLock",
        "std::sync::{",
        "std::thread::park",
        "std::thread::yield_now",
        "std::thread::current",
        "std::thread::sleep",
        "std::thread::Thread",
        "Instant::now(",
    ];
    let (_, files) = library_code();
    let mut bad = Vec::new();
    for (rel, lines) in &files {
        if rel == "sync.rs" {
            continue;
        }
        for (n, line) in lines {
            if let Some(f) = forbidden.iter().find(|f| line.contains(*f)) {
                bad.push(format!(
                    "src/{rel}:{n}: `{f}` (use crate::sync): {}",
                    line.trim()
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "atomics, locks or thread handshakes outside src/sync.rs:\n{}",
        bad.join("\n")
    );
}

/// The file a `crate::a::b::...` path names: the longest prefix that is a
/// file of the crate (`a/b.rs` or `a/b/mod.rs`).
fn file_of(root: &Path, path: &[&str]) -> Option<String> {
    for k in (1..=path.len()).rev() {
        let stem = path[..k].join("/");
        for cand in [format!("{stem}.rs"), format!("{stem}/mod.rs")] {
            if root.join(&cand).is_file() {
                return Some(cand);
            }
        }
    }
    None
}

/// Every `crate::` path in `line`, as its segments (a `{...}` group adds
/// each of its members' first segment).
fn crate_paths(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let path: Vec<String> = rest[..end]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if rest[end..].starts_with('{') {
            let group_end = rest[end..].find('}').map_or(rest.len(), |g| end + g);
            for member in rest[end + 1..group_end].split(',') {
                let first = member.trim().split("::").next().unwrap_or("").to_string();
                if !first.is_empty() && first != "self" {
                    let mut p = path.clone();
                    p.push(first);
                    out.push(p);
                }
            }
        }
        out.push(path);
    }
    out
}

/// Whether `graph` has a circle; the first found, as its nodes.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &String,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let from = stack.iter().position(|s| s == n).unwrap();
                let mut c = stack[from..].to_vec();
                c.push(n.clone());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn imports_form_no_circle_between_files_or_modules() {
    let (root, files) = library_code();
    // Files that only declare and re-export (no item of their own) are
    // passed through: an import of `crate::runtime::Lane` is one of the
    // file that defines it.
    let mut files_graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, lines) in &files {
        let entry = files_graph.entry(rel.clone()).or_default();
        for (_, line) in lines {
            for path in crate_paths(line) {
                let segs: Vec<&str> = path.iter().map(String::as_str).collect();
                let Some(to) = file_of(&root, &segs) else {
                    continue;
                };
                let declares_only = to == "lib.rs" || to.ends_with("/mod.rs");
                if to != *rel && !declares_only {
                    entry.insert(to);
                }
            }
        }
    }
    if let Some(c) = circle(&files_graph) {
        panic!("the files' imports form a circle: {}", c.join(" -> "));
    }
    let top = |f: &String| {
        f.split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string()
    };
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in &files_graph {
        let entry = modules.entry(top(from)).or_default();
        for to in tos {
            if top(to) != top(from) {
                entry.insert(top(to));
            }
        }
    }
    if let Some(c) = circle(&modules) {
        panic!(
            "the top-level modules' imports form a circle: {}",
            c.join(" -> ")
        );
    }
}
