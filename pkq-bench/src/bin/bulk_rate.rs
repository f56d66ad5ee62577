//! What moving an IO task's bytes between mapped host memory and the SM
//! costs: one block of warps loading (or storing, then fencing) a run of
//! 1 KiB to 64 KiB, by instruction kind, warps and loads in flight per lane.
//! The GPU's clock; mean and fastest of the passes.
//!
//! `cargo run --release -p pkq-bench --bin bulk_rate -- --json pkq-bench/results/bulk_rate.json`

use std::path::PathBuf;

use clap::Parser;
use pkq_bench::bulk::{Bulk, BulkKind, bulk_copy};
use pkq_bench::support::{report, start, write_json};
use serde_json::json;

#[derive(Parser)]
#[command(about = "time to move a run of host memory to or from the SM, by instruction and warps")]
struct Args {
    /// Passes per pattern.
    #[arg(long, default_value_t = 20)]
    iters: u32,
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // pkq-bench's module first (see pkq_bench::floor).
    pkq_bench::floor::load(0)?;
    let (_clock, info) = start(None, 0)?;
    let mut rows = Vec::new();
    for write in [false, true] {
        for bytes in [1024u32, 8192, 65536] {
            let mut best: Option<(f64, String)> = None;
            for kind in BulkKind::ALL {
                if write && kind == BulkKind::RelaxedSysHalf {
                    continue;
                }
                for warps in [1u32, 2, 4, 8, 16, 32] {
                    for inflight in [1u32, 4, 16] {
                        let bulk = Bulk {
                            warps,
                            bytes,
                            write,
                            kind,
                            inflight,
                            iters: args.iters,
                        };
                        let t = bulk_copy(0, &bulk)?;
                        let name = format!(
                            "{} {} {bytes} B, {warps} warps x{inflight}",
                            if write { "store" } else { "load" },
                            kind.name()
                        );
                        let mut row = json!({
                            "name": name,
                            "write": write,
                            "kind": kind.name(),
                            "bytes": bytes,
                            "warps": warps,
                            "inflight": inflight,
                            "mean_us": t.mean_ns / 1e3,
                            "least_us": t.least_ns / 1e3,
                            "gb_per_s": f64::from(bytes) / t.mean_ns,
                        });
                        if best.as_ref().is_none_or(|(b, _)| t.mean_ns < *b) {
                            best = Some((t.mean_ns, name.clone()));
                        }
                        println!(
                            "{name}: mean {:.2} us, least {:.2} us",
                            t.mean_ns / 1e3,
                            t.least_ns / 1e3
                        );
                        rows.push(row.as_object_mut().unwrap().clone());
                    }
                }
            }
            if let Some((ns, name)) = best {
                println!("BEST {name}: {:.2} us", ns / 1e3);
            }
        }
    }
    if let Some(path) = args.json {
        write_json(&path, &report(&info, rows));
    }
    Ok(())
}
