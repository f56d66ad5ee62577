//! Traces (`pkq::trace`) of the real kernel: every task of a run recorded
//! exactly once, from several threads, with tickets, batches and packs;
//! host submit <= device start <= device end <= host seen, within the
//! clock map's bound; the drop count exact once the buffer is full; the
//! exports whole; every block of a traced wide task once, inside the task.

use super::*;
use std::collections::HashMap;

pub(crate) const TESTS: &[Test] = tests![
    every_task_once_in_time_order_within_the_bound,
    the_drop_count_is_exact_on_the_device,
    every_block_of_a_traced_wide_task_once_within_it,
    tasks_past_a_full_buffer_leave_the_kept_ones_blocks,
];

/// Random ECHO values from three threads (tickets in a window, batches,
/// packs), then every record checked against what was submitted.
pub(crate) fn every_task_once_in_time_order_within_the_bound() {
    let rt = Runtime::builder()
        .workers(4)
        .rings(2)
        .capacity(256)
        .trace(1 << 20)
        .build()
        .unwrap();
    let per_thread = 20_000u64;
    let tasks = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (rt, tasks) = (&rt, &tasks);
            s.spawn(move || {
                let mut rng = Rng::new(40 + t);
                let mut window: VecDeque<(u64, pkq::Ticket)> = VecDeque::new();
                let mut k = 0;
                while k < per_thread {
                    match rng.next() % 8 {
                        // A batch (a slot each) or a packed one (32 a slot).
                        pick @ (0 | 1) => {
                            let n = 1 + (rng.next() % 64) as usize;
                            let vals: Vec<u64> = (0..n).map(|_| rng.next()).collect();
                            let tasks_of = if pick == 0 {
                                ECHO.batch(&vals)
                            } else {
                                ECHO.packed(&vals)
                            };
                            let mut b = rt.submit(tasks_of).unwrap();
                            let got: Vec<u64> = b
                                .wait()
                                .unwrap()
                                .into_iter()
                                .map(|r| r.unwrap().value)
                                .collect();
                            assert_eq!(got, vals);
                            tasks.fetch_add(n as u64, Ordering::Relaxed);
                            k += n as u64;
                        }
                        _ => {
                            let v = rng.next();
                            window.push_back((v, rt.submit(ECHO.args(&v)).unwrap()));
                            if window.len() > 8 {
                                let (v, t) = window.pop_front().unwrap();
                                assert_eq!(t.wait().unwrap().value, v);
                            }
                            tasks.fetch_add(1, Ordering::Relaxed);
                            k += 1;
                        }
                    }
                }
                for (v, t) in window {
                    assert_eq!(t.wait().unwrap().value, v);
                }
            });
        }
    });
    let trace = rt.trace();
    assert_eq!((trace.dropped(), trace.unfinished()), (0, 0));
    let counted: usize = trace.records().iter().map(|r| r.tasks).sum();
    assert_eq!(
        counted as u64,
        tasks.load(Ordering::Relaxed),
        "every task once"
    );
    let mut keys: HashMap<(usize, u64), usize> = HashMap::new();
    for r in trace.records() {
        *keys.entry((r.ring, r.seq)).or_default() += 1;
        assert_eq!(r.status, 0, "{r:?}");
        assert!(
            r.worker < 4 && r.worker % 2 == r.ring && r.poller < 8,
            "{r:?}"
        );
        assert!(r.device_end_ns >= r.device_start_ns, "{r:?}");
        assert!(r.seen_ns >= r.submit_ns, "{r:?}");
    }
    assert!(keys.values().all(|&n| n == 1), "a slot recorded twice");
    let map = trace.clock_map().expect("a clock map from the records");
    let bound = map.error_bound_ns;
    let mut late = 0;
    for r in trace.records() {
        let start = trace.device_to_host_ns(r.device_start_ns).unwrap();
        let end = trace.device_to_host_ns(r.device_end_ns).unwrap();
        // The map is fitted per stretch: within its bound (and a
        // nanosecond of rounding) of the true order.
        if start < r.submit_ns - bound - 1.0 || end > r.seen_ns + bound + 1.0 {
            late += 1;
        }
    }
    println!(
        "{} records of {} tasks; clock map bound {:.0} ns (median {:.0}), misfit {:.4}; {} outside the bound",
        trace.records().len(),
        counted,
        bound,
        map.median_bound_ns,
        map.misfit_fraction,
        late
    );
    // The map's own misfits (round trips whose interval it misses, the
    // clocks moving between anchors) are the only ones allowed out.
    assert!(
        late as f64 <= (map.misfit_fraction * trace.records().len() as f64).ceil(),
        "{late} records outside the clock map's bound"
    );
    let json: Vec<u8> = trace.to_chrome_json().into_bytes();
    assert!(json.starts_with(b"{\"traceEvents\":["));
    assert!(!trace.to_perfetto().is_empty());
}

/// A buffer of 1000 records and 5000 round trips: the first 1000 kept,
/// 4000 counted as dropped.
pub(crate) fn the_drop_count_is_exact_on_the_device() {
    let rt = Runtime::builder().trace(1000).build().unwrap();
    let mut rng = Rng::new(7);
    for _ in 0..5000 {
        let v = rng.next();
        assert_eq!(rt.submit(ECHO.args(&v)).unwrap().wait().unwrap().value, v);
    }
    let t = rt.trace();
    assert_eq!((t.records().len(), t.dropped()), (1000, 4000));
    rt.set_tracing(false).unwrap();
    rt.submit(NOP.args(&())).unwrap().wait().unwrap();
    assert_eq!(rt.trace().dropped(), 4000);
}

/// Lanes of blocks and of groups beside a lane of warps, tracing switched
/// off and on while threads submit random tasks to every lane: each
/// recorded task of a wide lane that ran its handler has every block of
/// its group once, each inside the task's device start and end; tasks
/// submitted while tracing was off have no blocks; once a worker logged
/// more tasks than its log holds, the records of the earlier ones are
/// counted as missing, exactly.
pub(crate) fn every_block_of_a_traced_wide_task_once_within_it() {
    const LOG: u64 = 256;
    let group = Runtime::builder()
        .capacity(16)
        .workers(2)
        .width(pkq::Width::Group {
            blocks: 4,
            warps: 8,
        });
    // Under a sanitizer, which runs one kernel at a time, the group's lane
    // alone (lane 0).
    let (rt, wide, blocks_of_lane): (Runtime, Vec<usize>, Vec<usize>) = if under_sanitizer() {
        (group.trace(1 << 16).build().unwrap(), vec![0], vec![4])
    } else {
        let rt = Runtime::builder()
            .capacity(64)
            .trace(1 << 16)
            .add_lane(
                Runtime::builder()
                    .capacity(16)
                    .workers(2)
                    .width(pkq::Width::Block { warps: 4 }),
            )
            .add_lane(group)
            .build()
            .unwrap();
        (rt, vec![1, 2], vec![0, 1, 4])
    };
    let run = |n: u64, seed: u64| {
        std::thread::scope(|s| {
            for (t, &lane) in wide.iter().enumerate() {
                let rt = &rt;
                s.spawn(move || {
                    let lane = rt.lane(lane).unwrap();
                    let mut rng = Rng::new(seed + t as u64);
                    let mut window = VecDeque::new();
                    for _ in 0..n {
                        // Mostly group tasks, some NOPs (answered by the
                        // poller alone: no blocks).
                        let ticket = if rng.next().is_multiple_of(8) {
                            lane.submit(NOP.args(&()))
                        } else {
                            lane.submit(GROUP_EMPTY.args(&()))
                        };
                        window.push_back(ticket.unwrap());
                        if window.len() > 1 + (rng.next() % 8) as usize {
                            window.pop_front().unwrap().wait().unwrap();
                        }
                    }
                    for t in window {
                        t.wait().unwrap();
                    }
                });
            }
            if wide[0] != 0 {
                let rt = &rt;
                s.spawn(move || {
                    let mut rng = Rng::new(seed + 100);
                    for _ in 0..n {
                        let v = rng.next();
                        assert_eq!(rt.submit(ECHO.args(&v)).unwrap().wait().unwrap().value, v);
                    }
                });
            }
        });
    };
    // Traced, not traced, traced: more tasks per worker than its log
    // holds.
    run(400, 1);
    rt.set_tracing(false).unwrap();
    run(100, 2);
    rt.set_tracing(true).unwrap();
    run(400, 3);
    let t = rt.trace();
    assert_eq!((t.dropped(), t.unfinished()), (0, 0));
    let mut per_worker: HashMap<(usize, usize), u64> = HashMap::new();
    let mut checked = 0;
    for r in t.records() {
        let blocks = t.blocks_of(r);
        let ran = r.op == GROUP_EMPTY.op() && r.status == 0;
        if !wide.contains(&r.lane) || !ran {
            assert!(blocks.is_empty(), "blocks of a task that ran none: {r:?}");
            continue;
        }
        *per_worker.entry((r.lane, r.worker)).or_default() += 1;
        if blocks.is_empty() {
            continue; // logged over: counted below
        }
        checked += 1;
        let want = blocks_of_lane[r.lane];
        let ranks: Vec<usize> = blocks.iter().map(|b| b.block).collect();
        assert_eq!(ranks, (0..want).collect::<Vec<_>>(), "blocks of {r:?}");
        for b in blocks {
            assert_eq!(
                (b.lane, b.ring, b.seq, b.worker),
                (r.lane, r.ring, r.seq, r.worker)
            );
            assert!(
                r.device_start_ns <= b.device_start_ns
                    && b.device_start_ns <= b.device_end_ns
                    && b.device_end_ns <= r.device_end_ns,
                "block {b:?} outside its task {r:?}"
            );
        }
    }
    let missing: u64 = per_worker.values().map(|&n| n.saturating_sub(LOG)).sum();
    println!(
        "{} records, {} wide tasks with their blocks, {} blocks, {} missing (logged over)",
        t.records().len(),
        checked,
        t.blocks().len(),
        t.blocks_missing()
    );
    assert!(checked > 0);
    assert_eq!(t.blocks_missing(), missing);
    assert_eq!(
        t.blocks().len() as u64,
        per_worker
            .iter()
            .map(|(&(lane, _), &n)| n.min(LOG) * blocks_of_lane[lane] as u64)
            .sum::<u64>()
    );
    // The exports carry them: a track per block.
    let json: serde_json::Value = serde_json::from_str(&t.to_chrome_json()).unwrap();
    let block_slices = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().is_some_and(|n| n.starts_with("block ")))
        .count();
    assert_eq!(block_slices, t.blocks().len());
    assert!(!t.to_perfetto().is_empty());
}

/// A trace buffer far smaller than a wide lane's log, then many more
/// traced wide tasks, one at a time (tracing switched on again now and
/// then) or as one batch that runs past the buffer's end: the records
/// kept have all their blocks, as tasks whose records were dropped are
/// not logged over them.
pub(crate) fn tasks_past_a_full_buffer_leave_the_kept_ones_blocks() {
    const KEPT: usize = 16;
    const TASKS: usize = 600;
    let blocks = 4u32;
    for batched in [false, true] {
        let rt = Runtime::builder()
            .capacity(1024)
            .workers(1)
            .width(pkq::Width::Group { blocks, warps: 4 })
            .trace(KEPT)
            .build()
            .unwrap();
        rt.set_tracing(true).unwrap();
        if batched {
            let results = rt
                .submit(GROUP_EMPTY.batch(&[(); TASKS]))
                .unwrap()
                .wait()
                .unwrap();
            assert!(results.iter().all(Result::is_ok));
        } else {
            for k in 0..TASKS {
                if k % 50 == 0 {
                    rt.set_tracing(true).unwrap();
                }
                rt.submit(GROUP_EMPTY.args(&())).unwrap().wait().unwrap();
            }
        }
        let t = rt.trace();
        assert_eq!(
            (t.records().len(), t.dropped()),
            (KEPT, (TASKS - KEPT) as u64),
            "batched {batched}"
        );
        assert_eq!(
            t.blocks_missing(),
            0,
            "batched {batched}: the kept records' blocks were logged over"
        );
        for r in t.records() {
            let ranks: Vec<usize> = t.blocks_of(r).iter().map(|b| b.block).collect();
            assert_eq!(
                ranks,
                (0..blocks as usize).collect::<Vec<_>>(),
                "batched {batched}: blocks of {r:?}"
            );
        }
    }
}
