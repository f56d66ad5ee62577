//! The ceilings under pkq's throughput: how many accesses of mapped host
//! memory the GPU answers per second, by warps in flight (one access of
//! each kind in flight per warp, as pkq's workers have) and by size: reads
//! alone, posted writes alone (several warps to a 64-byte line, or each its
//! own lines), and a write followed by a read, which is a task's pattern
//! (its completion, then the next poll).
//!
//! `cargo run --release -p pkq-bench --bin access_rate -- --json pkq-bench/results/access_rate.json`

use std::path::PathBuf;

use clap::Parser;
use pkq_bench::floor::{Access, host_access_rate};
use pkq_bench::support::{report, start, write_json};
use serde_json::json;

#[derive(Parser)]
#[command(about = "accesses of host memory per second by the GPU, by warps in flight and size")]
struct Args {
    /// Accesses per warp.
    #[arg(long, default_value_t = 2_000)]
    iters: u32,
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // pkq-bench's module first (see pkq_bench::floor).
    pkq_bench::floor::load(0)?;
    let (_clock, info) = start(None, 0)?;
    let mut patterns = Vec::new();
    for bytes in [64u32, 256] {
        for warps in [1u32, 2, 4, 16, 64, 256] {
            patterns.push(Access::reads(warps, bytes, args.iters));
        }
    }
    for (bytes, stride) in [
        (8u32, 8u32),
        (32, 32),
        (32, 64),
        (64, 64),
        (128, 128),
        (256, 256),
    ] {
        for warps in [16u32, 64, 256] {
            patterns.push(Access {
                write_bytes: bytes,
                write_stride: stride,
                ..Access::reads(warps, 0, args.iters)
            });
        }
    }
    // One line for all: do a few warps (a worker's pollers) already queue
    // behind each other, or only many?
    for warps in [1u32, 2, 4, 16, 64, 256] {
        patterns.push(Access {
            same_line: true,
            ..Access::reads(warps, 64, args.iters)
        });
    }
    for warps in [16u32, 64, 256] {
        patterns.push(Access {
            host_writing: true,
            ..Access::reads(warps, 64, args.iters)
        });
        patterns.push(Access {
            write_bytes: 32,
            write_stride: 32,
            host_writing: true,
            ..Access::reads(warps, 64, args.iters)
        });
    }
    for (read, write, stride) in [
        (64u32, 32u32, 32u32),
        (64, 32, 64),
        (64, 64, 64),
        (256, 128, 128),
    ] {
        for warps in [16u32, 64, 256] {
            patterns.push(Access {
                write_bytes: write,
                write_stride: stride,
                ..Access::reads(warps, read, args.iters)
            });
        }
    }
    println!(
        "\n{:>6} {:>6} {:>6} {:>7} {:>16} {:>10} {:>10}",
        "warps", "read", "write", "stride", "accesses/s", "GB/s", "µs each"
    );
    let mut rows = Vec::new();
    for a in patterns {
        // Warm-up, then the measured run.
        host_access_rate(0, &Access { iters: 100, ..a })?;
        let rate = host_access_rate(0, &a)?;
        let per_us = f64::from(a.warps) / rate * 1e6;
        let gbs = rate * f64::from(a.read_bytes + a.write_bytes) / 1e9;
        println!(
            "{:>6} {:>6} {:>6} {:>7} {rate:>16.0} {gbs:>10.2} {per_us:>10.2}{}",
            a.warps,
            a.read_bytes,
            a.write_bytes,
            a.write_stride,
            match (a.same_line, a.host_writing) {
                (true, _) => "  all warps the same line",
                (_, true) => "  host storing to the lines read",
                _ => "",
            }
        );
        let mut name = match (a.read_bytes, a.write_bytes) {
            (r, 0) => format!("{} warps, {r}-byte reads", a.warps),
            (0, w) => format!(
                "{} warps, {w}-byte writes {} apart",
                a.warps, a.write_stride
            ),
            (r, w) => format!(
                "{} warps, {w}-byte write ({} apart) then {r}-byte read",
                a.warps, a.write_stride
            ),
        };
        if a.same_line {
            name.push_str(", all of the same line");
        }
        if a.host_writing {
            name.push_str(", the host storing to the lines read");
        }
        let mut row = serde_json::Map::new();
        row.insert("name".into(), json!(name));
        row.insert("warps".into(), json!(a.warps));
        row.insert("read_bytes".into(), json!(a.read_bytes));
        row.insert("write_bytes".into(), json!(a.write_bytes));
        row.insert("write_stride_bytes".into(), json!(a.write_stride));
        row.insert("same_line".into(), json!(a.same_line));
        row.insert("host_writing".into(), json!(a.host_writing));
        row.insert("accesses_per_s".into(), json!(rate.round()));
        row.insert(
            "per_access_us".into(),
            json!((per_us * 1000.0).round() / 1000.0),
        );
        rows.push(row);
    }
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}
