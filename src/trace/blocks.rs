//! The blocks of wide tasks: each block's run of a traced task on a lane of
//! blocks or groups, as the device logs it (TRACE LOG in
//! `cuda/pkq_layout.h`: per worker, its last `TRACE_LOG_TASKS` traced
//! tasks, every word tagged), read at a snapshot and joined to the task's
//! record by its worker and device start.
//!
//! Words and their writers: the log is mapped host memory, written by each
//! worker's poller warp only (the device), read here (relaxed loads: each
//! word is taken only with its entry's tag, so no order among them is
//! needed, TAGGED WORDS).

use std::collections::HashMap;
use std::sync::Arc;

use crate::layout::{TRACE_LOG_HEADER_WORDS, TRACE_LOG_TASKS};
use crate::sync::{AtomicU64, Ordering};

use super::TaskRecord;

/// One block's run of a wide task, as a trace recorded it (see
/// [`Trace::blocks`](super::Trace::blocks)): device times are the GPU's
/// clock, as [`TaskRecord`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRecord {
    /// The lane of the task.
    pub lane: usize,
    /// Its ring.
    pub ring: usize,
    /// Its sequence number in its ring.
    pub seq: u64,
    /// The device worker (the group) that ran it.
    pub worker: usize,
    /// The block, of the group's (0: the worker's poller's).
    pub block: usize,
    /// The GPU's `%globaltimer` when the block began running the handler.
    /// The log keeps each block's times as 32-bit offsets from the task's
    /// device start, from 0 (a block that began before it reads as the
    /// start) to about 4.29 s (`u32::MAX` ns: later times read as that).
    pub device_start_ns: u64,
    /// The GPU's `%globaltimer` when all its threads had finished it (as
    /// clamped as the start).
    pub device_end_ns: u64,
}

/// The words a log is read from: the lane's mapped host memory (a
/// `proto::words::Words` view, which keeps it alive).
pub(crate) trait LogWords: Send + Sync {
    fn all(&self) -> &[AtomicU64];
}

/// A wide lane's log, as the host reads it.
#[derive(Clone)]
pub(crate) struct BlockLog {
    words: Arc<dyn LogWords>,
    workers: usize,
    blocks: usize,
}

/// One whole entry of the log: the task's device start and each block's
/// start and end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Logged {
    pub(crate) worker: usize,
    pub(crate) start: u64,
    pub(crate) blocks: Vec<(u64, u64)>,
}

impl BlockLog {
    /// Words of one entry of a group of `blocks` blocks.
    pub(crate) fn entry_words(blocks: usize) -> usize {
        TRACE_LOG_HEADER_WORDS + 2 * blocks
    }

    /// Words of the log of `workers` groups of `blocks` blocks.
    pub(crate) fn words_for(workers: usize, blocks: usize) -> usize {
        workers * TRACE_LOG_TASKS * Self::entry_words(blocks)
    }

    /// The log in `words` (of [`BlockLog::words_for`] words) of `workers`
    /// groups of `blocks` blocks.
    pub(crate) fn new(words: Arc<dyn LogWords>, workers: usize, blocks: usize) -> Self {
        assert_eq!(words.all().len(), Self::words_for(workers, blocks));
        Self {
            words,
            workers,
            blocks,
        }
    }

    /// The entries whose every word carries their tag.
    pub(crate) fn read(&self) -> Vec<Logged> {
        let per = Self::entry_words(self.blocks);
        let mut out = Vec::new();
        for worker in 0..self.workers {
            for e in 0..TRACE_LOG_TASKS {
                let at = (worker * TRACE_LOG_TASKS + e) * per;
                let w = &self.words.all()[at..at + per];
                let word = |k: usize| w[k].load(Ordering::Relaxed);
                let tag = word(3) >> 32;
                let whole = tag != 0 && (0..per).all(|k| word(k) >> 32 == tag);
                if !whole || word(2) & 0xffff_ffff != self.blocks as u64 {
                    continue;
                }
                let low = |k: usize| word(k) & 0xffff_ffff;
                let start = low(0) | low(1) << 32;
                let blocks = (0..self.blocks)
                    .map(|r| {
                        let k = TRACE_LOG_HEADER_WORDS + 2 * r;
                        // Device-written words: wrapping, never a panic.
                        (start.wrapping_add(low(k)), start.wrapping_add(low(k + 1)))
                    })
                    .collect();
                out.push(Logged {
                    worker,
                    start,
                    blocks,
                });
            }
        }
        out
    }
}

/// The blocks of `records` found in `logs` (each lane's entries, `None`
/// for a lane of warps), by lane, ring, sequence number and block; and how
/// many records of a wide lane that ran their handler have none (their
/// worker logged later tasks over them, or another of its tasks had the
/// same device start).
pub(crate) fn join(
    records: &[TaskRecord],
    logs: &[Option<Vec<Logged>>],
) -> (Vec<BlockRecord>, u64) {
    // A worker's tasks by device start; two of one start (a timer coarser
    // than the time between them) name no task: neither gets blocks.
    let mut by_start: HashMap<(usize, usize, u64), Option<&Logged>> = HashMap::new();
    for (lane, log) in logs.iter().enumerate() {
        for l in log.iter().flatten() {
            by_start
                .entry((lane, l.worker, l.start))
                .and_modify(|e| *e = None)
                .or_insert(Some(l));
        }
    }
    let mut starts: HashMap<(usize, usize, u64), usize> = HashMap::new();
    for r in records {
        *starts
            .entry((r.lane, r.worker, r.device_start_ns))
            .or_default() += 1;
    }
    let mut blocks = Vec::new();
    let mut missing = 0;
    for r in records {
        if !matches!(logs.get(r.lane), Some(Some(_))) {
            continue;
        }
        let key = (r.lane, r.worker, r.device_start_ns);
        let found = by_start
            .get(&key)
            .copied()
            .flatten()
            .filter(|_| starts[&key] == 1);
        match found {
            Some(l) => {
                blocks.extend(
                    l.blocks
                        .iter()
                        .enumerate()
                        .map(|(block, &(s, e))| BlockRecord {
                            lane: r.lane,
                            ring: r.ring,
                            seq: r.seq,
                            worker: r.worker,
                            block,
                            device_start_ns: s,
                            device_end_ns: e,
                        }),
                )
            }
            // A NOP is answered by the poller alone, and a task that
            // failed before its handler ran (or was cut short) has no
            // blocks to log.
            None if r.status == 0 && r.op != crate::builtin::NOP.op() => missing += 1,
            None => {}
        }
    }
    blocks.sort_by_key(|b| (b.lane, b.ring, b.seq, b.block));
    (blocks, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Heap(Vec<AtomicU64>);

    impl LogWords for Heap {
        fn all(&self) -> &[AtomicU64] {
            &self.0
        }
    }

    /// Writes the entry of the `t`-th traced task of `worker` as the
    /// device does.
    fn put(log: &BlockLog, worker: usize, t: u64, start: u64, times: &[(u64, u64)]) {
        let per = BlockLog::entry_words(log.blocks);
        let at = (worker * TRACE_LOG_TASKS + (t as usize % TRACE_LOG_TASKS)) * per;
        let tag = ((t % 0xffff_ffff) + 1) << 32;
        let w = &log.words.all()[at..at + per];
        w[0].store(tag | (start & 0xffff_ffff), Ordering::Relaxed);
        w[1].store(tag | start >> 32, Ordering::Relaxed);
        w[2].store(tag | log.blocks as u64, Ordering::Relaxed);
        w[3].store(tag, Ordering::Relaxed);
        for (r, &(s, e)) in times.iter().enumerate() {
            w[4 + 2 * r].store(tag | (s - start), Ordering::Relaxed);
            w[5 + 2 * r].store(tag | (e - start), Ordering::Relaxed);
        }
    }

    fn record(worker: usize, seq: u64, start: u64) -> TaskRecord {
        TaskRecord {
            lane: 1,
            ring: 0,
            worker,
            poller: 0,
            seq,
            op: crate::op::Op(9),
            status: 0,
            tasks: 1,
            submit_thread: 0,
            seen_thread: 0,
            submit_ns: 0.0,
            seen_ns: 0.0,
            device_start_ns: start,
            device_end_ns: start + 1_000,
        }
    }

    /// Whole entries are joined to their records, a torn one (a word of
    /// another lap's) and an overwritten one are not, and the records
    /// without blocks are counted.
    #[test]
    fn entries_join_their_records_and_torn_ones_do_not() {
        let (workers, blocks) = (2, 3);
        let words = (0..BlockLog::words_for(workers, blocks))
            .map(|_| AtomicU64::new(0))
            .collect();
        let log = BlockLog::new(Arc::new(Heap(words)), workers, blocks);
        let base = 1_700_000_000_000_000_000u64;
        let times = |s: u64| [(s + 10, s + 500), (s + 20, s + 600), (s + 30, s + 700)];
        put(&log, 0, 0, base, &times(base));
        put(&log, 1, 0, base + 5, &times(base + 5));
        // Worker 1's second task, torn: one block's end is another lap's.
        put(&log, 1, 1, base + 9_000, &times(base + 9_000));
        let per = BlockLog::entry_words(blocks);
        let torn = per + 4 + 2 * 2 + 1;
        let w = &log.words.all()[TRACE_LOG_TASKS * per..];
        w[torn].store(7 << 32 | 5, Ordering::Relaxed);
        // Worker 0's task 1 written over by task 1 + TRACE_LOG_TASKS.
        put(&log, 0, 1, base + 20_000, &times(base + 20_000));
        let later = base + 90_000;
        put(&log, 0, 1 + TRACE_LOG_TASKS as u64, later, &times(later));

        let entries = log.read();
        assert_eq!(entries.len(), 3);
        let records = [
            record(0, 1, base),
            record(1, 2, base + 5),
            record(1, 3, base + 9_000),
            record(0, 4, base + 20_000),
            record(0, 5, later),
        ];
        let logs = [None, Some(entries)];
        let (got, missing) = join(&records, &logs);
        assert_eq!(
            missing, 2,
            "the torn entry's record and the overwritten one's"
        );
        let seqs: Vec<(u64, usize)> = got.iter().map(|b| (b.seq, b.block)).collect();
        assert_eq!(
            seqs,
            [
                (1, 0),
                (1, 1),
                (1, 2),
                (2, 0),
                (2, 1),
                (2, 2),
                (5, 0),
                (5, 1),
                (5, 2)
            ]
        );
        assert_eq!(
            (got[4].device_start_ns, got[4].device_end_ns),
            (base + 5 + 20, base + 5 + 600)
        );
        // Two tasks of one worker with one device start: neither gets
        // blocks, both counted.
        let twin = TaskRecord {
            seq: 6,
            ..records[0]
        };
        let (got, missing) = join(&[records[0], twin], &logs);
        assert_eq!((got.len(), missing), (0, 2));
        // A lane of warps has no log: its records are not counted.
        let (none, missing) = join(
            &[TaskRecord {
                lane: 0,
                ..records[0]
            }],
            &logs,
        );
        assert_eq!((none.len(), missing), (0, 0));
    }
}
