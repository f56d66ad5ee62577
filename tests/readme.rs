//! The README's table of measurements is rendered from the committed bench
//! results, never typed by hand: this test renders it again and compares.
//! `PKQ_BLESS=1 cargo test --test readme` rewrites the README's block.

use serde_json::Value;

const BEGIN: &str = "<!-- latency-table:begin -->\n";
const END: &str = "<!-- latency-table:end -->";

fn f(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.2}"))
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

#[test]
fn readme_table_matches_committed_results() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme_path = format!("{root}/README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let results = std::fs::read_to_string(format!("{root}/benches/results/latency.json")).ok();
    let want = render(results.as_deref());
    let start = readme
        .find(BEGIN)
        .expect("README has the table's begin marker")
        + BEGIN.len();
    let end = readme.find(END).expect("README has the table's end marker");
    let have = &readme[start..end];
    if have != want {
        if std::env::var_os("PKQ_BLESS").is_some() {
            let updated = format!("{}{want}{}", &readme[..start], &readme[end..]);
            std::fs::write(&readme_path, updated).unwrap();
            println!("README.md table rewritten from benches/results/latency.json");
            return;
        }
        panic!(
            "README's table differs from benches/results/latency.json; run PKQ_BLESS=1 cargo test --test readme\n--- want ---\n{want}--- have ---\n{have}"
        );
    }
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
        "examples/custom_handler/fk.rs",
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
