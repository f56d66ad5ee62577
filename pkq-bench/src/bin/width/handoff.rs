//! Where an empty wide task's time goes, from traces (`Runtime::trace`):
//! lanes of 8 blocks and of one block per SM, tracing on, GROUP_EMPTY one
//! after another. Rows `empty <n> warps, pkq wide, traced: <segment>`, in
//! nanoseconds: on the GPU's clock, `device start -> block 0 start` (the
//! poller's hand-off in its own block), `device start -> last block start`
//! (the task's way through device memory to the last of the other blocks)
//! and `last block end -> device end` (the arrivals' way back to the poller,
//! with the trace log's writes and their system-scope fence, which only a
//! traced task pays); on the host's clock (mapped), `dispatch` and
//! `completion seen` ([`pkq::trace::Segments`]).

use std::collections::HashSet;

use pkq::builtin::GROUP_EMPTY;
use pkq::{Runtime, Submit};
use pkq_bench::support::Latency;
use serde_json::{Map, Value};

/// Tasks per round: fewer than a worker's log of blocks holds, so that a
/// trace taken after each round has every block of the round's tasks.
const ROUND: usize = 200;

/// The rows of a lane of `blocks` blocks of `warps` warps, from `rounds`
/// rounds of ROUND traced tasks (after one round untraced).
pub(crate) fn rows(
    blocks: u32,
    warps: u32,
    rounds: usize,
) -> Result<Vec<Map<String, Value>>, Box<dyn std::error::Error>> {
    let rt = Runtime::builder()
        .width(super::lane_width(blocks, warps))
        .trace(rounds * ROUND + ROUND)
        .build()?;
    for _ in 0..ROUND {
        rt.submit(GROUP_EMPTY.args(&()))?.wait()?;
    }
    let mut own = Vec::new();
    let mut last_start = Vec::new();
    let mut fan_in = Vec::new();
    let mut dispatch = Vec::new();
    let mut seen = Vec::new();
    let mut counted = HashSet::new();
    rt.set_tracing(true)?;
    for _ in 0..rounds {
        for _ in 0..ROUND {
            rt.submit(GROUP_EMPTY.args(&()))?.wait()?;
        }
        let t = rt.trace();
        for r in t.records() {
            let b = t.blocks_of(r);
            if b.len() != blocks as usize || !counted.insert(r.seq) {
                continue;
            }
            let start = r.device_start_ns as f64;
            let first = b
                .iter()
                .find(|b| b.block == 0)
                .map_or(start, |b| b.device_start_ns as f64);
            let latest_start = b.iter().map(|b| b.device_start_ns).max().unwrap_or(0) as f64;
            let latest_end = b.iter().map(|b| b.device_end_ns).max().unwrap_or(0) as f64;
            own.push(first - start);
            last_start.push(latest_start - start);
            fan_in.push(r.device_end_ns as f64 - latest_end);
            if let Some(s) = t.segments(r) {
                dispatch.push(s.dispatch_ns);
                seen.push(s.seen_ns);
            }
        }
    }
    rt.shutdown()?;
    let name = |segment: &str| {
        format!(
            "empty {} warps, pkq wide, traced: {segment}",
            blocks * warps
        )
    };
    let mut out = Vec::new();
    for (segment, samples) in [
        ("dispatch (host clock)", &mut dispatch),
        ("device start -> block 0 start", &mut own),
        ("device start -> last block start", &mut last_start),
        ("last block end -> device end", &mut fan_in),
        ("completion seen (host clock)", &mut seen),
    ] {
        if samples.is_empty() {
            return Err(format!("{}: no traced task had all its blocks", name(segment)).into());
        }
        let row = Latency::row_of(&name(segment), "ns", samples);
        println!(
            "{:<64} p50 {:>8} ns  p99 {:>8} ns",
            name(segment),
            row["p50_ns"],
            row["p99_ns"]
        );
        out.push(row);
    }
    Ok(out)
}
