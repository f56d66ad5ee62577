//! The README's tables of measurements are rendered from the committed
//! bench results, never typed by hand: these tests render them again and
//! compare. `PKQ_BLESS=1 cargo test --test readme` rewrites the README's
//! blocks.

use serde_json::Value;

fn f(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.2}"))
}

/// A count or a rate, whole.
fn n(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.0}"))
}

fn render(results: Option<&str>) -> String {
    let Some(text) = results else {
        return "(no results committed yet)\n".into();
    };
    let r: Value = serde_json::from_str(text).expect("latency.json parses");
    let commit = r["commit"].as_str().unwrap_or("?");
    let mut out = format!(
        "{}, driver {}, {}, commit `{}`:\n\n",
        r["device"].as_str().unwrap_or("?"),
        r["driver"].as_str().unwrap_or("?"),
        r["date"].as_str().unwrap_or("?"),
        &commit[..commit.len().min(12)],
    );
    out += "| round trip | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | p50 vs pkq |\n";
    out += "|---|---:|---:|---:|---:|---:|---:|\n";
    let rows = r["rows"].as_array().expect("rows");
    for row in rows.iter().filter(|row| row.get("p50_us").is_some()) {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {:.2}x |\n",
            row["name"].as_str().unwrap_or("?"),
            f(&row["p50_us"]),
            f(&row["p90_us"]),
            f(&row["p99_us"]),
            f(&row["p99_9_us"]),
            f(&row["max_us"]),
            row["p50_vs_pkq_x"].as_f64().unwrap_or(f64::NAN),
        );
    }
    for row in rows.iter().filter(|row| row.get("p50_ns").is_some()) {
        let ns = |k: &str| row[k].as_f64().map_or("-".into(), |x| format!("{x:.0}"));
        out += &format!(
            "\n{}: p50 {} ns, p99 {} ns.\n",
            row["name"].as_str().unwrap_or("?"),
            ns("p50_ns"),
            ns("p99_ns")
        );
    }
    for row in rows
        .iter()
        .filter(|row| row.get("error_bound_ns").is_some())
    {
        out += &match row.get("sm_clock_mhz") {
            Some(mhz) => format!(
                "\nOne-way figures map the GPU's clock onto the host's (NTP style: the tightest round trip of each stretch of 256; each set of rows by a map of its own): for the rows \"one-way: ...\" the offset is within ±{} ns at the typical anchor, ±{} ns at worst; the SM clock ran at {} MHz.\n",
                row["median_bound_ns"], row["error_bound_ns"], mhz
            ),
            None => format!(
                "\n{}: the offset is within ±{} ns at the typical anchor, ±{} ns at worst.\n",
                row["name"].as_str().unwrap_or("?"),
                row["median_bound_ns"],
                row["error_bound_ns"]
            ),
        };
    }
    let costs: Vec<&Value> = rows
        .iter()
        .filter(|row| row.get("mean_ns").is_some() && row.get("p50_ns").is_none())
        .collect();
    if !costs.is_empty() {
        out += "\nWhat the device pays per operation on mapped host memory (GPU clock, mean):\n\n";
        out += "| device operation | ns |\n|---|---:|\n";
        for row in costs {
            out += &format!(
                "| {} | {} |\n",
                row["name"].as_str().unwrap_or("?"),
                row["mean_ns"]
            );
        }
    }
    out
}

/// Checks (or with `PKQ_BLESS`, rewrites) the README's block between
/// `<!-- {marker}:begin -->` and `<!-- {marker}:end -->` against `want`.
fn check_block(marker: &str, want: &str, from: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme_path = format!("{root}/README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let (begin, end) = (
        format!("<!-- {marker}:begin -->\n"),
        format!("<!-- {marker}:end -->"),
    );
    let start = readme
        .find(&begin)
        .unwrap_or_else(|| panic!("README has the {marker} begin marker"))
        + begin.len();
    let stop = readme
        .find(&end)
        .unwrap_or_else(|| panic!("README has the {marker} end marker"));
    let have = &readme[start..stop];
    if have != want {
        if std::env::var_os("PKQ_BLESS").is_some() {
            let updated = format!("{}{want}{}", &readme[..start], &readme[stop..]);
            std::fs::write(&readme_path, updated).unwrap();
            println!("README.md {marker} block rewritten from {from}");
            return;
        }
        panic!(
            "README's {marker} block differs from {from}; run PKQ_BLESS=1 cargo test --test readme\n--- want ---\n{want}--- have ---\n{have}"
        );
    }
}

fn results(name: &str) -> Option<Value> {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/pkq-bench/results/{name}")).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} parses: {e}")))
}

fn header(r: &Value) -> String {
    let commit = r["commit"].as_str().unwrap_or("?");
    format!(
        "{}, driver {}, {}, commit `{}`",
        r["device"].as_str().unwrap_or("?"),
        r["driver"].as_str().unwrap_or("?"),
        r["date"].as_str().unwrap_or("?"),
        &commit[..commit.len().min(12)],
    )
}

fn rows(r: &Value) -> &Vec<Value> {
    r["rows"].as_array().expect("rows")
}

/// The row of `r` named `name`, if there is one.
fn row<'a>(r: &'a Value, name: &str) -> Option<&'a Value> {
    rows(r).iter().find(|row| row["name"] == name)
}

/// The real-loop section: the control loop, the payload curve, the risk
/// check and the pipeline, each from its committed results.
fn render_real_loop() -> String {
    let mut out = String::new();
    let none = |name: &str| format!("(no `{name}` committed yet)\n");
    match results("control_loop.json") {
        None => out += &none("control_loop.json"),
        Some(r) => {
            out += &format!("`control_loop.json` ({}):\n\n", header(&r));
            out +=
                "| loop | ticks | p50 µs | p99 µs | p99.9 µs | max µs | misses | deadline µs |\n";
            out += "|---|---:|---:|---:|---:|---:|---:|---:|\n";
            for row in rows(&r) {
                out += &format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    row["name"].as_str().unwrap_or("?"),
                    row["ticks"],
                    f(&row["p50_us"]),
                    f(&row["p99_us"]),
                    f(&row["p99_9_us"]),
                    f(&row["max_us"]),
                    row["misses"],
                    f(&row["deadline_us"]),
                );
            }
        }
    }
    out += "\n";
    match results("payload.json") {
        None => out += &none("payload.json"),
        Some(r) => {
            out += &format!(
                "`payload.json` ({}), round trip p50 in µs, the same bytes each way:\n\n",
                header(&r)
            );
            let mechs = ["pkq", "memcpy+launch+sync", "graph", "zero-copy launch"];
            out += &format!("| each way | {} |\n", mechs.join(" | "));
            out += &format!("|---:|{}\n", "---:|".repeat(mechs.len()));
            let p50 = |name: String| row(&r, &name).map_or("-".into(), |row| f(&row["p50_us"]));
            for size in [8, 256, 1024, 4096, 16384, 65536] {
                let cells: Vec<String> = mechs
                    .iter()
                    .map(|m| p50(format!("{m} payload {size} B")))
                    .collect();
                out += &format!("| {size} B | {} |\n", cells.join(" | "));
            }
            out += &format!(
                "\nThe NOP round trip of the same run: {} µs.\n",
                p50("pkq NOP round trip".into())
            );
        }
    }
    out += "\n";
    match results("risk_check.json") {
        None => out += &none("risk_check.json"),
        Some(r) => {
            out += &format!("`risk_check.json` ({}):\n\n", header(&r));
            out += "| risk check | orders/s offered | p50 µs | p99 µs | p99.9 µs | max µs | orders/s back to back |\n";
            out += "|---|---:|---:|---:|---:|---:|---:|\n";
            for row in rows(&r) {
                out += &format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    row["name"].as_str().unwrap_or("?"),
                    n(&row["rate_per_s"]),
                    f(&row["p50_us"]),
                    f(&row["p99_us"]),
                    f(&row["p99_9_us"]),
                    f(&row["max_us"]),
                    n(&row["max_orders_per_s"]),
                );
            }
        }
    }
    out += "\n";
    match results("pipeline.json") {
        None => out += &none("pipeline.json"),
        Some(r) => {
            out += &format!("`pipeline.json` ({}):\n\n", header(&r));
            out += "| pipeline | tasks/s | tasks/s without overlap | overlap % | tasks a batch | bytes a task |\n";
            out += "|---|---:|---:|---:|---:|---:|\n";
            for row in rows(&r) {
                out += &format!(
                    "| {} | {} | {} | {} | {} | {} |\n",
                    row["name"].as_str().unwrap_or("?"),
                    n(&row["tasks_per_s"]),
                    n(&row["serial_tasks_per_s"]),
                    f(&row["overlap_pct"]),
                    row["batch_tasks"],
                    row["task_bytes"],
                );
            }
        }
    }
    out
}

/// The waiting section: wake-up latency and CPU per waiter of every wait
/// strategy and of CUDA's waits, then the async and callback rows.
fn render_waiting() -> String {
    let Some(r) = results("waiting.json") else {
        return "(no `waiting.json` committed yet)\n".into();
    };
    let mut out = format!(
        "`waiting.json` ({}), wake-up = the task's end on the device to the waiting thread running; CPU = the process's per waiting thread (1 = a whole core):\n\n",
        header(&r)
    );
    out += "| wait | task | waiters | wake p50 µs | wake p99 µs | CPU per waiter |\n";
    out += "|---|---:|---:|---:|---:|---:|\n";
    for row in rows(&r) {
        let name = row["name"].as_str().unwrap_or("?");
        let Some(rest) = name
            .strip_prefix("wait: ")
            .or_else(|| name.strip_prefix("cuda: "))
        else {
            continue;
        };
        let parts: Vec<&str> = rest.split(", ").collect();
        let [how, task, waiters] = parts[..] else {
            continue;
        };
        let how = if name.starts_with("cuda: ") {
            format!("CUDA event sync, {how}")
        } else if row.get("fallback").is_some() {
            format!("{how} (as SpinThenYield here)")
        } else {
            how.to_string()
        };
        out += &format!(
            "| {how} | {task} | {} | {} | {} | {} |\n",
            waiters.split(' ').next().unwrap_or("?"),
            f(&row["wake_p50_us"]),
            f(&row["wake_p99_us"]),
            f(&row["cpu_per_waiter"]),
        );
    }
    let line = |name: &str| {
        row(&r, name)
            .map(|row| {
                format!(
                    "| {name} | {} | {} |\n",
                    f(&row["p50_us"]),
                    f(&row["p99_us"])
                )
            })
            .unwrap_or_default()
    };
    out += "\n| round trip of ECHO | p50 µs | p99 µs |\n|---|---:|---:|\n";
    for name in [
        "spin round trip",
        "async round trip",
        "async round trip, idle executor",
    ] {
        out += &line(name);
    }
    out += "\n| the OS's wake-up, unpark to running (the floor under Park) | p50 µs | p99 µs |\n|---|---:|---:|\n";
    for row in rows(&r) {
        if let Some(name) = row["name"].as_str().filter(|n| n.starts_with("os wake-up")) {
            out += &line(name);
        }
    }
    out += "\n| callback start after a 2 µs task's end | p50 µs | p99 µs |\n|---|---:|---:|\n";
    for name in ["callback", "cudaLaunchHostFunc"] {
        out += &line(name);
    }
    out
}

/// The isolation section: the round trip (latency lane) alone, under an
/// application storm, beside bulk tasks, beside busy cores and another
/// process's kernels; the application's kernels beside pkq; each with and
/// without a partition.
fn render_isolation() -> String {
    let Some(r) = results("isolation.json") else {
        return "(no `isolation.json` committed yet)\n".into();
    };
    let mut out = format!("`isolation.json` ({}):\n\n", header(&r));
    out += "| round trip | partition | p50 µs | p99 µs | p99.9 µs | max µs |\n";
    out += "|---|---|---:|---:|---:|---:|\n";
    for row in rows(&r) {
        let name = row["name"].as_str().unwrap_or("?");
        let Some(rest) = name.strip_prefix("pkq round trip, ") else {
            continue;
        };
        let Some((beside, part)) = rest.rsplit_once(", ") else {
            continue;
        };
        let stalls = row
            .get("stalls_reported")
            .map(|s| format!(" ({s} stalls reported)"))
            .unwrap_or_default();
        out += &format!(
            "| {beside}{stalls} | {part} | {} | {} | {} | {} |\n",
            f(&row["p50_us"]),
            f(&row["p99_us"]),
            f(&row["p99_9_us"]),
            f(&row["max_us"]),
        );
    }
    out += "\n| application kernel | beside | partition | p50 µs (device) | vs alone |\n";
    out += "|---|---|---|---:|---:|\n";
    for row in rows(&r) {
        let name = row["name"].as_str().unwrap_or("?");
        let Some(rest) = name.strip_prefix("app kernel, ") else {
            continue;
        };
        let parts: Vec<&str> = rest.split(", ").collect();
        let [kind, beside, part] = parts[..] else {
            continue;
        };
        let bound = row
            .get("vs_sm_share_bound_x")
            .and_then(Value::as_f64)
            .map(|x| format!(" ({x:.3}x the SM-share bound)"))
            .unwrap_or_default();
        out += &format!(
            "| {kind} | {beside} | {part} | {} | {:.3}x{bound} |\n",
            f(&row["p50_us"]),
            row["vs_alone_x"].as_f64().unwrap_or(f64::NAN),
        );
    }
    let policies: Vec<&Value> = rows(&r)
        .iter()
        .filter(|row| {
            row["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("idle policy, "))
        })
        .collect();
    if let Some(first) = policies.first() {
        out += &format!(
            "\n| idle runtime, on a partition of {} SMs | memory-bound kernel beside it, vs alone | first task after {} ms idle, p50 µs | p99 µs |\n",
            first["partition_sms"], first["pause_ms"]
        );
        out += "|---|---:|---:|---:|\n";
        for row in policies {
            let name = row["name"].as_str().unwrap_or("?");
            out += &format!(
                "| {} | {:.3}x | {} | {} |\n",
                name.trim_start_matches("idle policy, "),
                row["memory_bound_vs_alone_x"].as_f64().unwrap_or(f64::NAN),
                f(&row["after_idle_p50_us"]),
                f(&row["after_idle_p99_us"]),
            );
        }
    }
    out
}

/// The lane-tail table (isolation section): a latency lane's round trip by
/// its own producers (closed or open loop, and how many tasks each keeps
/// in flight) and by the bulk lane beside it (idle or flooded).
fn render_lane_tail() -> String {
    let Some(r) = results("lane_tail.json") else {
        return "(no `lane_tail.json` committed yet)\n".into();
    };
    let mut out = format!(
        "`lane_tail.json` ({}), lane 0's tasks, submit to completion read:\n\n",
        header(&r)
    );
    out += "| lane 0's producers | loop | tasks in flight each | bulk lane | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | tasks |\n";
    out += "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|\n";
    for row in rows(&r) {
        let name = row["name"].as_str().unwrap_or("?");
        // "lane 0 <closed|open>, <n> producer(s), bulk <idle|flooded>"
        let kind = name
            .strip_prefix("lane 0 ")
            .and_then(|rest| rest.split(',').next())
            .unwrap_or("?");
        let bulk = name.rsplit_once("bulk ").map_or("?", |(_, b)| b);
        out += &format!(
            "| {} | {kind} | {} | {bulk} | {} | {} | {} | {} | {} | {} |\n",
            row["producers"],
            row["window"],
            f(&row["p50_us"]),
            f(&row["p90_us"]),
            f(&row["p99_us"]),
            f(&row["p99_9_us"]),
            f(&row["max_us"]),
            row["samples"],
        );
    }
    out
}

/// The pool section: round trips through a pool against a lone runtime,
/// and throughput through pools of 1 to all devices.
fn render_pool() -> String {
    let Some(r) = results("pool.json") else {
        return "(no `pool.json` committed yet)\n".into();
    };
    let mut out = format!("`pool.json` ({}):\n\n", header(&r));
    // A ratio where the row has one, else a dash.
    let x = |v: &Value| v.as_f64().map_or("-".into(), |v| format!("{v:.2}x"));
    out += "| round trip | p50 µs | p99 µs | p99.9 µs | p50 against lone runtimes on its devices |\n|---|---:|---:|---:|---:|\n";
    for row in rows(&r).iter().filter(|row| row.get("p50_us").is_some()) {
        out += &format!(
            "| {} | {} | {} | {} | {} |\n",
            row["name"].as_str().unwrap_or("?"),
            f(&row["p50_us"]),
            f(&row["p99_us"]),
            f(&row["p99_9_us"]),
            x(&row["p50_vs_lone_x"]),
        );
    }
    out += "\n| throughput | M tasks/s | against one GPU |\n|---|---:|---:|\n";
    for row in rows(&r)
        .iter()
        .filter(|row| row.get("tasks_per_s").is_some())
    {
        out += &format!(
            "| {} | {:.1} | {} |\n",
            row["name"].as_str().unwrap_or("?"),
            row["tasks_per_s"].as_f64().unwrap_or(f64::NAN) / 1e6,
            x(&row["vs_1_gpu_x"]),
        );
    }
    out
}

/// The bindings table: the round trip from each language, and CuPy's and
/// PyTorch's launch + stream sync.
fn render_bindings() -> String {
    let Some(r) = results("bindings.json") else {
        return "(no `bindings.json` committed yet)\n".into();
    };
    let mut out = format!("`bindings.json` ({}):\n\n", header(&r));
    let x = |v: &Value| v.as_f64().map_or("-".into(), |v| format!("{v:.2}x"));
    out += "| row | p50 µs | one process's p50 µs | p99 µs | p99.9 µs | p50 against Rust | against CuPy |\n|---|---:|---:|---:|---:|---:|---:|\n";
    for row in rows(&r) {
        out += &format!(
            "| {} | {} | {} to {} | {} | {} | {} | {} |\n",
            row["name"].as_str().unwrap_or("?"),
            f(&row["p50_us"]),
            f(&row["process_p50_min_us"]),
            f(&row["process_p50_max_us"]),
            f(&row["p99_us"]),
            f(&row["p99_9_us"]),
            x(&row["x_rust_p50"]),
            x(&row["x_cupy_p50"]),
        );
    }
    out
}

#[test]
fn bindings_table_matches_committed_results() {
    check_block(
        "bindings",
        &render_bindings(),
        "pkq-bench/results/bindings.json",
    );
}

#[test]
fn pool_section_matches_committed_results() {
    check_block("pool", &render_pool(), "pkq-bench/results/pool.json");
}

#[test]
fn lane_tail_table_matches_committed_results() {
    check_block(
        "lane-tail",
        &render_lane_tail(),
        "pkq-bench/results/lane_tail.json",
    );
}

#[test]
fn isolation_section_matches_committed_results() {
    check_block(
        "isolation",
        &render_isolation(),
        "pkq-bench/results/isolation.json",
    );
}

#[test]
fn waiting_section_matches_committed_results() {
    check_block(
        "waiting",
        &render_waiting(),
        "pkq-bench/results/waiting.json",
    );
}

#[test]
fn readme_table_matches_committed_results() {
    let root = env!("CARGO_MANIFEST_DIR");
    let results = std::fs::read_to_string(format!("{root}/pkq-bench/results/latency.json")).ok();
    check_block(
        "latency-table",
        &render(results.as_deref()),
        "pkq-bench/results/latency.json",
    );
}

#[test]
fn real_loop_section_matches_committed_results() {
    check_block(
        "real-loop",
        &render_real_loop(),
        "pkq-bench/results/{control_loop,payload,risk_check,pipeline}.json",
    );
}

/// Every test that the README's failure table names is a test function of
/// this crate (so a row cannot point at a test that was renamed or removed).
#[test]
fn failure_table_names_existing_tests() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table = readme
        .split("| what happens | what you get | test |")
        .nth(1)
        .expect("the failure table")
        .split("\n\n")
        .next()
        .unwrap();
    fn read_rs(dir: &std::path::Path, into: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                read_rs(&path, into);
            } else if path.extension().is_some_and(|e| e == "rs") {
                *into += &std::fs::read_to_string(path).unwrap();
            }
        }
    }
    let mut sources = String::new();
    for dir in ["src", "tests"] {
        read_rs(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir),
            &mut sources,
        );
    }
    let mut named = 0;
    for row in table.lines().skip(2) {
        let tests = row.trim_end_matches('|').rsplit('|').next().unwrap();
        for name in tests.split('`').skip(1).step_by(2) {
            assert!(
                sources.contains(&format!("fn {name}(")),
                "the README names test {name}, which does not exist"
            );
            named += 1;
        }
        assert!(
            tests.contains('`'),
            "a failure-table row without a test: {row}"
        );
    }
    assert!(named >= 14, "{named}");
}

/// The README's "Write your own handler" code is the example's code: every
/// code block between its markers appears verbatim in the example's files.
#[test]
fn handler_section_is_the_examples_code() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let section = readme
        .split("<!-- handler:begin -->")
        .nth(1)
        .and_then(|s| s.split("<!-- handler:end -->").next())
        .expect("the handler section's markers");
    let files = [
        "examples/custom_handler/fk.cu",
        "examples/custom_handler/src/lib.rs",
    ]
    .map(|f| std::fs::read_to_string(format!("{root}/{f}")).unwrap())
    .concat();
    let mut blocks = 0;
    for (i, part) in section.split("```").enumerate() {
        if i % 2 == 1 {
            let code = part.split_once('\n').map_or("", |(_, c)| c);
            assert!(
                files.contains(code),
                "README block not found verbatim in the example:\n{code}"
            );
            blocks += 1;
        }
    }
    assert!(blocks >= 5, "{blocks}");
}

/// Every repository path the README names in backticks exists (the retired
/// bench notes included: a path that was removed fails here), and every
/// `#anchor` it cites is a heading of that page.
#[test]
fn readme_paths_exist() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    // GitHub's anchor of a heading: lower case, spaces to dashes, other
    // punctuation dropped.
    let slug = |heading: &str| -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    };
    let roots = [
        "cuda/",
        "docs/",
        "examples/",
        "pkq-bench/",
        "pkq-build/",
        "scripts/",
        "src/",
        "tests/",
    ];
    let mut named = 0;
    for token in readme.split('`').skip(1).step_by(2) {
        if token.contains(char::is_whitespace) || !roots.iter().any(|r| token.starts_with(r)) {
            continue;
        }
        let (path, anchor) = token.split_once('#').unwrap_or((token, ""));
        let full = format!("{root}/{path}");
        assert!(
            std::path::Path::new(&full).exists(),
            "the README names {path}, which does not exist"
        );
        if !anchor.is_empty() {
            let page = std::fs::read_to_string(&full).unwrap();
            assert!(
                page.lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .any(|h| slug(h.trim_start_matches('#')) == anchor),
                "the README cites {path}#{anchor}, which is no heading there"
            );
        }
        named += 1;
    }
    assert!(named >= 20, "{named}");
}

/// The tracing section: what tracing costs (`trace_cost.json`) and where
/// the traced control loop's misses went (`control_loop_trace.json`).
fn render_trace() -> String {
    let Some(r) = results("trace_cost.json") else {
        return "(no `trace_cost.json` committed yet)\n".into();
    };
    let mut out = format!("`trace_cost.json` ({}):\n\n", header(&r));
    out += "| row | p50 µs | p99 µs | tasks/s | against off |\n|---|---:|---:|---:|---:|\n";
    for row in rows(&r).iter().filter(|row| row.get("cost_ns").is_none()) {
        let x = row.get("x_off_p50").or_else(|| row.get("x_off"));
        out += &format!(
            "| {} | {} | {} | {} | {} |\n",
            row["name"].as_str().unwrap_or("?"),
            f(&row["p50_us"]),
            f(&row["p99_us"]),
            n(&row["tasks_per_s"]),
            x.and_then(Value::as_f64)
                .map_or("-".into(), |v| format!("{v:.3}x")),
        );
    }
    let x3 = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.3}"));
    let x1 = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.1}"));
    if let (Some(on), Some(read), Some(after)) = (
        row(&r, "round trip, tracing on"),
        row(&r, "host clock read"),
        row(&r, "host clock read after loads"),
    ) {
        out += &format!(
            "\nThe median of the rounds' own on-over-off p50 ratios is {}x. A traced task reads \
             the host clock (`{}`) twice: at its submit, and at its take behind a load fence; \
             read back to back, those reads cost {} and {} ns here, so they alone would make \
             the round trip {}x.\n",
            x3(&on["x_off_p50_paired"]),
            read["host_clock"].as_str().unwrap_or("?"),
            x1(&read["cost_ns"]),
            x1(&after["cost_ns"]),
            x3(&on["x_off_p50_clock_reads"]),
        );
    }
    let Some(c) = results("control_loop_trace.json") else {
        return out + "\n(no `control_loop_trace.json` committed yet)\n";
    };
    let Some(row) = rows(&c)
        .iter()
        .find(|r| r.get("misses_by_segment").is_some())
    else {
        return out;
    };
    let by = row["misses_by_segment"].as_object().expect("segments");
    let mut parts: Vec<(u64, &str)> = by
        .iter()
        .map(|(k, v)| (v.as_u64().unwrap_or(0), k.as_str()))
        .collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.0));
    out += &format!(
        "\n`control_loop_trace.json` ({}): of {} ticks, {} missed their deadline; by the \
         segment that took the most time, {}. The median tick spent {} µs in dispatch, {} µs \
         in the handler and {} µs before its completion was seen; the missed ones {}, {} and \
         {} µs (the trace's clock map is within {} ns at its anchors).\n",
        header(&c),
        row["ticks"],
        row["misses"],
        parts
            .iter()
            .map(|(count, seg)| format!("{count} {seg}"))
            .collect::<Vec<_>>()
            .join(", "),
        f(&row["segment_p50_us"]["dispatch"]),
        f(&row["segment_p50_us"]["handler"]),
        f(&row["segment_p50_us"]["completion seen"]),
        f(&row["missed_segment_p50_us"]["dispatch"]),
        f(&row["missed_segment_p50_us"]["handler"]),
        f(&row["missed_segment_p50_us"]["completion seen"]),
        n(&row["clock_bound_ns"]),
    );
    out
}

#[test]
fn trace_section_matches_committed_results() {
    check_block(
        "trace",
        &render_trace(),
        "pkq-bench/results/trace_cost.json",
    );
}
