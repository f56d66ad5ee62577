//! The ceiling under pkq's throughput: how many reads of mapped host memory
//! the GPU answers per second, for 1 to 256 warps each keeping one read in
//! flight (as pkq's workers do), of 64 bytes (one slot) and of 256 bytes.
//!
//! `cargo run --release --example read_rate -- --json benches/results/read_rate.json`

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;

use clap::Parser;
use serde_json::json;
use support::{report, start, write_json};

#[derive(Parser)]
#[command(about = "reads of host memory per second by the GPU, by warps in flight and size")]
struct Args {
    /// Reads per warp.
    #[arg(long, default_value_t = 2_000)]
    iters: u32,
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (_clock, info) = start(None)?;
    let mut rows = Vec::new();
    println!(
        "\n{:>6} {:>6} {:>16} {:>12} {:>14}",
        "warps", "bytes", "reads/s", "GB/s", "µs per read"
    );
    for bytes in [64u32, 256] {
        for warps in [1u32, 4, 16, 64, 256] {
            // Warm-up, then the measured run.
            pkq::floor::host_read_rate(0, warps, bytes, 100)?;
            let rate = pkq::floor::host_read_rate(0, warps, bytes, args.iters)?;
            let per_read_us = f64::from(warps) / rate * 1e6;
            println!(
                "{warps:>6} {bytes:>6} {rate:>16.0} {:>12.2} {per_read_us:>14.2}",
                rate * f64::from(bytes) / 1e9
            );
            let mut row = serde_json::Map::new();
            row.insert(
                "name".into(),
                json!(format!("{warps} warps, {bytes}-byte reads")),
            );
            row.insert("warps".into(), json!(warps));
            row.insert("bytes".into(), json!(bytes));
            row.insert("reads_per_s".into(), json!(rate.round()));
            row.insert(
                "per_read_us".into(),
                json!((per_read_us * 1000.0).round() / 1000.0),
            );
            rows.push(row);
        }
    }
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}
