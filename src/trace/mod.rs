//! A timeline of every task: when the host submitted it, when the device
//! ran it, and when the host saw its completion, for Perfetto
//! ([`Trace::to_perfetto`]) or any viewer of Chrome's trace-event JSON
//! ([`Trace::to_chrome_json`]).
//!
//! Tracing is off unless switched on, per runtime
//! ([`Builder::trace`](crate::Builder::trace) at build, or
//! [`Runtime::set_tracing`](crate::Runtime::set_tracing) at any time). Off,
//! a submit reads one flag more. On, each submit reads the host clock
//! before its reservation and, once its slots are published (on a lane of
//! blocks or groups, once they are reserved), claims an
//! entry per slot in a buffer of the runtime's, bounded by the capacity the
//! builder named, and writes its half (that time, its thread, the op); its
//! ticket or batch carries the entry, and
//! the thread that takes the completion writes the rest. Once the buffer is
//! full, records are counted ([`Trace::dropped`]) and not kept: the first
//! ones stay.
//!
//! A task is recorded once, when tracing was on at its submit (switched off
//! later, the tasks in flight are still recorded): by its ticket or batch
//! when it takes the completion (also when a producer that needed its slot
//! moved the completion aside: the holder records it when it takes it
//! from there, unless it did just before it lost the slot). A task whose
//! ticket was dropped unread is recorded by the dropping thread if its
//! completion had landed, else by the producer that next needs its slot,
//! or by the runtime's stop (shutdown or cancel) if none did (the record's
//! seen time and thread are then that producer's, or the stop's);
//! one whose completion nobody has taken yet is not in a snapshot
//! ([`Trace::unfinished`] counts it), nor is one a cancel left unrun.
//!
//! [`Runtime::trace`](crate::Runtime::trace) takes a snapshot. Its device
//! times are the GPU's `%globaltimer`; the snapshot maps them onto the
//! host's clock with a [`ClockMap`] fitted to the records themselves (every
//! record is a round trip: submit before the device start, completion seen
//! after the device end), and says how far that map may be off
//! ([`ClockMap::error_bound_ns`]).
//!
//! ```no_run
//! # fn main() -> pkq::Result<()> {
//! use pkq::{Runtime, Submit, builtin::NOP};
//! let rt = Runtime::builder().trace(100_000).build()?;
//! for _ in 0..1000 {
//!     rt.submit(NOP.args(&()))?.wait()?;
//! }
//! let trace = rt.trace();
//! assert_eq!(trace.records().len() as u64 + trace.dropped(), 1000);
//! std::fs::write("pkq.pftrace", trace.to_perfetto()).unwrap();
//! # Ok(())
//! # }
//! ```

/// The most records a runtime keeps (8 GiB of them).
pub const MAX_TRACE_RECORDS: usize = 1 << 27;

/// The records a runtime keeps unless [`Builder::trace`](crate::Builder::trace)
/// names another number (64 bytes each: 4 MiB).
pub const DEFAULT_TRACE_RECORDS: usize = 1 << 16;

pub(crate) mod blocks;
mod chrome;
pub(crate) mod nvtx;
mod perfetto;
pub(crate) mod recorder;
mod svg;

pub use blocks::BlockRecord;

use crate::op::Op;
use crate::timing::{ClockMap, Exchange};

/// One task (or one slot of a batch's pack, [`TaskRecord::tasks`] tasks)
/// as a trace recorded it. Host times are nanoseconds from the trace's
/// origin (the runtime's build); device times are the GPU's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskRecord {
    /// The lane (0: the runtime's own).
    pub lane: usize,
    /// The ring of the lane it was submitted to.
    pub ring: usize,
    /// The device worker that ran it.
    pub worker: usize,
    /// The poller warp of that worker that took it.
    pub poller: usize,
    /// Its sequence number in its ring.
    pub seq: u64,
    /// Its op.
    pub op: Op,
    /// Its status code: 0 for success, else the code
    /// [`TaskStatus`](crate::TaskStatus) names (for a pack, the pack's: 0
    /// when the pack ran, whatever its tasks' outcomes, which the pack's
    /// own results say).
    pub status: u8,
    /// How many tasks the slot held (1, or a pack's count).
    pub tasks: usize,
    /// The host thread that submitted it (the process's threads numbered
    /// in the order they first submitted or took a traced task, on any
    /// runtime: a later runtime's first thread need not be 0).
    pub submit_thread: u32,
    /// The host thread that took its completion.
    pub seen_thread: u32,
    /// Host time when it was submitted: when the submit began (before its
    /// slots' reservation, so a wait for room in a full ring counts as
    /// dispatch; a batch's slots share it).
    pub submit_ns: f64,
    /// Host time when its completion was seen: just after the look that
    /// found it (a wait's or `try_result`'s), or, for a completion a
    /// producer moved aside or whose ticket was dropped, when it was taken
    /// from there. Never before the completion landed.
    pub seen_ns: f64,
    /// The GPU's `%globaltimer` when its worker had the whole slot.
    pub device_start_ns: u64,
    /// The GPU's `%globaltimer` when its handler returned.
    pub device_end_ns: u64,
}

/// The time of a task by segment (host nanoseconds; see
/// [`Trace::segments`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segments {
    /// Submit to device start: a submit's wait for room in a full
    /// ring, the slot's way to the device and the worker's pickup (and any
    /// tasks ahead of it).
    pub dispatch_ns: f64,
    /// Device start to device end: the handler.
    pub handler_ns: f64,
    /// Device end to the host seeing the completion
    /// ([`TaskRecord::seen_ns`]): the completion's way back and the
    /// waiter's wake-up.
    pub seen_ns: f64,
}

/// The geometry of a lane, to name each record's worker, and its log of
/// blocks (a lane of blocks or groups).
#[derive(Clone)]
pub(crate) struct LaneShape {
    pub(crate) rings: usize,
    pub(crate) start_seq: u64,
    pub(crate) ring_worker_mask: u64,
    pub(crate) blocks: Option<blocks::BlockLog>,
}

/// What a runtime keeps for its trace: the recorder its rings share, the
/// host clock's rate (measured from the runtime's build on), and its
/// lanes' shapes.
pub(crate) struct Tracer {
    recorder: std::sync::Arc<recorder::Recorder>,
    rate: crate::sync::TickRate,
    lanes: Box<[LaneShape]>,
}

impl Tracer {
    pub(crate) fn new(
        recorder: std::sync::Arc<recorder::Recorder>,
        lanes: Box<[LaneShape]>,
    ) -> Self {
        Self {
            recorder,
            rate: crate::sync::TickRate::start(),
            lanes,
        }
    }

    pub(crate) fn set_on(&self, on: bool) -> bool {
        self.recorder.set_on(on)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.recorder.capacity()
    }

    pub(crate) fn is_on(&self) -> bool {
        self.recorder.is_on()
    }

    /// The records kept so far, as a [`Trace`].
    pub(crate) fn snapshot(&self) -> Trace {
        let r = &self.recorder;
        Trace::new(
            r.snapshot(),
            r.capacity(),
            &self.lanes,
            self.rate.ns_per_tick(),
            self.rate.origin(),
        )
    }
}

/// The host clock a trace's host times come from ([`Trace::host_clock`]),
/// chosen once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HostClock {
    /// x86-64's time-stamp counter (a register read), its rate measured
    /// against the monotonic clock from the runtime's build to the
    /// snapshot: where the processor says the counter is invariant, or
    /// where the operating system's own clock runs on it (Linux's clock
    /// source `tsc`).
    Tsc,
    /// The operating system's monotonic clock (`std::time::Instant`):
    /// where neither vouches for the counter. A read costs a call (tens of
    /// nanoseconds, more in some virtual machines); each traced task reads
    /// it twice.
    Monotonic,
}

impl HostClock {
    /// The one this process uses.
    fn of_process() -> Self {
        if crate::sync::ticks_are_tsc() {
            Self::Tsc
        } else {
            Self::Monotonic
        }
    }

    /// Its name in the exports: `tsc` or `monotonic`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tsc => "tsc",
            Self::Monotonic => "monotonic",
        }
    }
}

impl std::fmt::Display for HostClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A snapshot of a runtime's trace ([`Runtime::trace`](crate::Runtime::trace)).
#[derive(Clone, Debug)]
pub struct Trace {
    host_clock: HostClock,
    records: Vec<TaskRecord>,
    blocks: Vec<BlockRecord>,
    blocks_missing: u64,
    dropped: u64,
    unfinished: u64,
    capacity: usize,
    clock: Option<ClockMap>,
}

impl Trace {
    /// Builds the snapshot from the recorder's raw records.
    pub(crate) fn new(
        snap: recorder::Snapshot,
        capacity: usize,
        lanes: &[LaneShape],
        ns_per_tick: f64,
        origin: u64,
    ) -> Self {
        let host = |tick: u64| tick.wrapping_sub(origin) as i64 as f64 * ns_per_tick;
        let mut records: Vec<TaskRecord> = snap
            .records
            .iter()
            .map(
                |&recorder::Raw {
                     opened: o,
                     closed: c,
                 }| {
                    let worker = lanes.get(usize::from(o.lane)).map_or(0, |l| {
                        let in_ring =
                            (o.seq.wrapping_sub(l.start_seq) & l.ring_worker_mask) as usize;
                        usize::from(o.ring) + l.rings * in_ring
                    });
                    TaskRecord {
                        lane: usize::from(o.lane),
                        ring: usize::from(o.ring),
                        worker,
                        poller: usize::from(c.poller),
                        seq: o.seq,
                        op: Op(o.op),
                        status: c.status,
                        tasks: usize::from(c.tasks.max(1)),
                        submit_thread: o.submit_thread,
                        seen_thread: c.seen_thread,
                        submit_ns: host(o.submit_tick),
                        seen_ns: host(c.seen_tick),
                        device_start_ns: c.device_start_ns,
                        device_end_ns: c.device_end_ns,
                    }
                },
            )
            .collect();
        records.sort_by(|a, b| a.submit_ns.total_cmp(&b.submit_ns));
        let exchanges: Vec<Exchange> = records
            .iter()
            .filter(|r| r.submit_ns >= 0.0)
            .map(|r| Exchange {
                host_send_ns: r.submit_ns as u64,
                host_recv_ns: r.seen_ns as u64,
                device_start_ns: r.device_start_ns,
                device_end_ns: r.device_end_ns,
            })
            .collect();
        let per_anchor = (exchanges.len() / 64).clamp(16, 4096);
        let logs: Vec<Option<Vec<blocks::Logged>>> = lanes
            .iter()
            .map(|l| l.blocks.as_ref().map(blocks::BlockLog::read))
            .collect();
        let (blocks, blocks_missing) = blocks::join(&records, &logs);
        Self {
            host_clock: HostClock::of_process(),
            clock: ClockMap::fit(&exchanges, per_anchor),
            records,
            blocks,
            blocks_missing,
            dropped: snap.dropped,
            unfinished: snap.unfinished,
            capacity,
        }
    }

    /// The records, by submit time.
    pub fn records(&self) -> &[TaskRecord] {
        &self.records
    }

    /// Each block's run of the recorded tasks of lanes of blocks or
    /// groups (`Builder::width`), by lane, ring, sequence number and block:
    /// every block of the task's group, once each. A worker's log holds
    /// its last 256 traced tasks that ran their handler; the blocks of a
    /// task it logged over are not here ([`Trace::blocks_missing`]).
    /// Tracing a wide task adds a system-scope fence to its run (the log's
    /// stores before its completion); a lane of blocks or groups keeps its
    /// log (mapped host memory: 256 x (4 + 2 x blocks) words per worker)
    /// whether or not tracing is ever switched on.
    pub fn blocks(&self) -> &[BlockRecord] {
        &self.blocks
    }

    /// The blocks of `r` (none for a task of a lane of warps).
    pub fn blocks_of(&self, r: &TaskRecord) -> &[BlockRecord] {
        let key = |b: &BlockRecord| (b.lane, b.ring, b.seq);
        let at = self
            .blocks
            .partition_point(|b| key(b) < (r.lane, r.ring, r.seq));
        let n = self.blocks[at..].partition_point(|b| key(b) == (r.lane, r.ring, r.seq));
        &self.blocks[at..at + n]
    }

    /// Records of tasks of lanes of blocks or groups that ran their
    /// handler (succeeded, not a NOP) whose blocks are not in the trace:
    /// their worker logged 256 later traced tasks before the snapshot
    /// (tasks whose records are dropped, the buffer full, are not
    /// logged), or
    /// another recorded task of the worker has the same device start (a
    /// timer coarser than the time between them: no blocks are joined to
    /// a task they might not be of).
    pub fn blocks_missing(&self) -> u64 {
        self.blocks_missing
    }

    /// Records that found the buffer full (not kept): exact.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Records not yet whole when the snapshot was taken: tasks submitted
    /// while tracing whose completion nobody had taken yet (in flight, or
    /// not read by their handle yet, or dropped unread with no producer
    /// needing their slot since, nor a stop), and tasks a cancel left unrun
    /// (never whole); a later snapshot has the others once taken.
    pub fn unfinished(&self) -> u64 {
        self.unfinished
    }

    /// The most records the runtime keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The host clock its host times come from (the exports name it).
    pub fn host_clock(&self) -> HostClock {
        self.host_clock
    }

    /// The map from the GPU's clock onto the host's, fitted to the
    /// records (`None` with fewer than two).
    pub fn clock_map(&self) -> Option<&ClockMap> {
        self.clock.as_ref()
    }

    /// A device time on the host's clock (ns from the trace's origin), if
    /// the trace has a clock map.
    pub fn device_to_host_ns(&self, device_ns: u64) -> Option<f64> {
        self.clock.as_ref().map(|m| m.to_host_ns(device_ns))
    }

    /// Where the time of `r` went, on the host's clock (`None` without a
    /// clock map). The map is within its error bound of the truth at its
    /// anchors and fits a record when the record's device times map inside
    /// its round trip: a segment of such a record may come out below zero
    /// by up to about that bound. Records the map misses
    /// ([`ClockMap::misfit_fraction`] of them: the GPU's clock stepped or
    /// drifted unevenly between anchors) may be off by more.
    pub fn segments(&self, r: &TaskRecord) -> Option<Segments> {
        let start = self.device_to_host_ns(r.device_start_ns)?;
        let end = self.device_to_host_ns(r.device_end_ns)?;
        Some(Segments {
            dispatch_ns: start - r.submit_ns,
            handler_ns: end - start,
            seen_ns: r.seen_ns - end,
        })
    }

    /// The trace as Perfetto's protobuf (`.pftrace`; open it in the
    /// Perfetto UI, <https://ui.perfetto.dev>): one track per host thread
    /// and per device worker, a flow from each submit through its device
    /// run to its completion. Device times are mapped onto the host's
    /// clock (the map's error bound is in the GPU track's name).
    pub fn to_perfetto(&self) -> Vec<u8> {
        perfetto::encode(self)
    }

    /// The trace as Chrome's trace-event JSON (`chrome://tracing`, and the
    /// Perfetto UI too): the same tracks and flows as
    /// [`Trace::to_perfetto`], in microseconds.
    pub fn to_chrome_json(&self) -> String {
        chrome::encode(self)
    }

    /// A picture (SVG) of the host times `from_ns..to_ns`: a row per host
    /// thread (each task's dispatch and its completion's way back) and per
    /// device worker (its handler), with `marks` (host time, label) drawn
    /// as vertical lines, under `title`.
    pub fn to_svg(&self, from_ns: f64, to_ns: f64, marks: &[(f64, String)], title: &str) -> String {
        svg::render(self, from_ns, to_ns, marks, title)
    }

    /// Writes the trace to `path`: Chrome's JSON for a name ending in
    /// `.json`, Perfetto's protobuf otherwise.
    pub fn write(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        let path = path.as_ref();
        if path.extension().is_some_and(|e| e == "json") {
            std::fs::write(path, self.to_chrome_json())
        } else {
            std::fs::write(path, self.to_perfetto())
        }
    }
}

/// The fields of a protobuf message (the tests' reader of exports).
#[cfg(test)]
pub(crate) fn wire_fields(b: &[u8]) -> Option<Vec<(u32, perfetto::wire::Value)>> {
    perfetto::wire::fields(b)
}

/// The tracks of every export, each once, in order: the host threads of
/// some records, the (lane, worker)s of those records and of some blocks,
/// and the (lane, worker, block)s of those blocks. A track's place in its
/// list is its number in an export, so no lane, worker or block count is
/// too large for one.
pub(crate) struct Tracks {
    pub(crate) threads: Vec<u32>,
    pub(crate) workers: Vec<(usize, usize)>,
    pub(crate) blocks: Vec<(usize, usize, usize)>,
}

impl Tracks {
    pub(crate) fn of<'a>(
        records: impl Iterator<Item = &'a TaskRecord> + Clone,
        blocks: &[BlockRecord],
    ) -> Self {
        fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
            v.sort_unstable();
            v.dedup();
            v
        }
        Self {
            threads: sorted(
                records
                    .clone()
                    .flat_map(|r| [r.submit_thread, r.seen_thread])
                    .collect(),
            ),
            // The blocks' workers too: each block's track sits under its
            // worker's.
            workers: sorted(
                records
                    .map(|r| (r.lane, r.worker))
                    .chain(blocks.iter().map(|b| (b.lane, b.worker)))
                    .collect(),
            ),
            blocks: sorted(blocks.iter().map(|b| (b.lane, b.worker, b.block)).collect()),
        }
    }

    /// The place of a worker of the records or blocks in `workers`.
    pub(crate) fn worker(&self, lane: usize, worker: usize) -> usize {
        self.workers
            .binary_search(&(lane, worker))
            .unwrap_or_else(|at| at)
    }

    /// The place of a block of the blocks in `blocks`.
    pub(crate) fn block(&self, lane: usize, worker: usize, block: usize) -> usize {
        self.blocks
            .binary_search(&(lane, worker, block))
            .unwrap_or_else(|at| at)
    }
}

/// The name of a record's slice: the builtin op's name, else its code.
pub(crate) fn op_name(op: Op) -> String {
    op.builtin_name()
        .map_or_else(|| format!("op {}", op.0), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A record of lane 0, ring 0, worker 0: submitted at tick `at`, seen
    /// 6 µs later, run on the device from `device` for 100 ns.
    fn raw(seq: u64, at: u64, device: u64) -> recorder::Raw {
        recorder::Raw {
            opened: recorder::Opened {
                seq,
                submit_tick: at,
                op: 0,
                ring: 0,
                lane: 0,
                submit_thread: 0,
            },
            closed: recorder::Closed {
                seen_tick: at + 6_000,
                device_start_ns: device,
                device_end_ns: device + 100,
                status: 0,
                tasks: 1,
                poller: 0,
                seen_thread: 0,
            },
        }
    }

    /// A trace of `records` on one lane of warps with one ring (1 ns a
    /// tick, from tick 0).
    fn trace_of(records: Vec<recorder::Raw>) -> Trace {
        let snap = recorder::Snapshot {
            records,
            dropped: 0,
            unfinished: 0,
        };
        let lanes = [LaneShape {
            rings: 1,
            start_seq: 0,
            ring_worker_mask: 0,
            blocks: None,
        }];
        Trace::new(snap, 100, &lanes, 1.0, 0)
    }

    /// Two tasks of one worker whose device times are the same (the
    /// device timer is coarser than a short handler) are drawn one after
    /// the other in the Chrome export, as in Perfetto's: a viewer nests
    /// overlapping slices of one track.
    #[test]
    fn one_workers_slices_never_overlap_in_either_export() {
        let base = 1_700_000_000_000_000_000u64;
        let mut records: Vec<recorder::Raw> = (0..20u64)
            .map(|i| raw(i, i * 10_000, base + i * 10_000 + 3_000))
            .collect();
        records.push(raw(20, 50_000, base + 50_000 + 3_000));
        let t = trace_of(records);
        assert!(t.clock.is_some(), "the records fit a clock map");
        let json: serde_json::Value = serde_json::from_str(&t.to_chrome_json()).unwrap();
        let mut slices: Vec<(f64, f64)> = json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "device" && e["ph"] == "X")
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect();
        assert_eq!(slices.len(), 21);
        slices.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in slices.windows(2) {
            assert!(w[1].0 >= w[0].0 + w[0].1 - 1e-9, "overlap {w:?}");
        }
    }

    /// Both exports say which host clock the host times come from.
    #[test]
    fn both_exports_name_the_host_clock() {
        let t = trace_of(
            (0..20)
                .map(|i| raw(i, i * 10_000, 1_000 + i * 10_000))
                .collect(),
        );
        let name = t.host_clock().name();
        let want = if crate::sync::ticks_are_tsc() {
            "tsc"
        } else {
            "monotonic"
        };
        assert_eq!(name, want);
        let json: serde_json::Value = serde_json::from_str(&t.to_chrome_json()).unwrap();
        assert_eq!(json["otherData"]["host_clock"], want);
        let track = format!("pkq host (clock: {want})");
        let pb = t.to_perfetto();
        assert!(
            pb.windows(track.len()).any(|w| w == track.as_bytes()),
            "no track named {track}"
        );
    }

    /// A trace of records of lane 0's worker 0 with blocks of workers of
    /// lanes and workers past any small field (none of them a worker of
    /// the records), and the names of the blocks' tracks.
    fn trace_with_far_blocks() -> (Trace, Vec<String>) {
        let mut t = trace_of(
            (0..20)
                .map(|i| raw(i, i * 10_000, 1_000_000 + i * 10_000 + 3_000))
                .collect(),
        );
        assert!(t.clock.is_some(), "the records fit a clock map");
        let mut want = Vec::new();
        for (k, (lane, worker)) in [(8, 4_464), (40, 70_000), (8, 70_000), (40, 4_464)]
            .into_iter()
            .enumerate()
        {
            for block in [0, 1, 1_025] {
                let at = 1_000_000 + k as u64 * 10_000 + 3_010;
                t.blocks.push(BlockRecord {
                    lane,
                    ring: 0,
                    seq: k as u64,
                    worker,
                    block,
                    device_start_ns: at,
                    device_end_ns: at + 50,
                });
                want.push(format!("lane {lane} worker {worker} block {block}"));
            }
        }
        (t, want)
    }

    /// Blocks of workers of lanes and workers past any small field have
    /// a track each in the Chrome export: a track's number is its place,
    /// not its lane, worker and block packed into bits.
    #[test]
    fn every_block_has_a_track_of_its_own_at_any_lane_or_worker() {
        let (t, mut want) = trace_with_far_blocks();
        let json: serde_json::Value = serde_json::from_str(&t.to_chrome_json()).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let mut named: HashMap<u64, String> = HashMap::new();
        for e in events
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["pid"] != 1)
        {
            let name = e["args"]["name"].as_str().unwrap().to_string();
            if let Some(old) = named.insert(e["tid"].as_u64().unwrap(), name.clone()) {
                panic!("one track for {old} and {name}");
            }
        }
        let mut blocks: Vec<&String> = named.values().filter(|n| n.contains("block")).collect();
        blocks.sort();
        want.sort();
        assert_eq!(blocks, want.iter().collect::<Vec<_>>());
        let slices = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"].as_str().unwrap().starts_with("block "))
            .count();
        assert_eq!(slices, want.len(), "every block drawn");
    }

    /// In the Perfetto export every track's parent is a track it describes,
    /// and a block's is its own worker's, whether or not that worker ran
    /// any of the records.
    #[test]
    fn every_blocks_track_sits_under_its_own_workers() {
        use perfetto::wire::Value;
        let (t, want) = trace_with_far_blocks();
        let bytes = |v: &Value| match v {
            Value::Bytes(b) => b.clone(),
            other => panic!("not a message: {other:?}"),
        };
        // Each track descriptor's (uuid, name, parent).
        let mut tracks: Vec<(u64, String, Option<u64>)> = Vec::new();
        for (_, packet) in wire_fields(&t.to_perfetto()).expect("protobuf") {
            for (field, d) in wire_fields(&bytes(&packet)).expect("packet") {
                if field != 60 {
                    continue;
                }
                let (mut uuid, mut name, mut parent) = (None, String::new(), None);
                for (field, v) in wire_fields(&bytes(&d)).expect("descriptor") {
                    match (field, v) {
                        (1, Value::Varint(u)) => uuid = Some(u),
                        (2, v) => name = String::from_utf8(bytes(&v)).unwrap(),
                        (5, Value::Varint(u)) => parent = Some(u),
                        _ => {}
                    }
                }
                tracks.push((uuid.expect("a uuid"), name, parent));
            }
        }
        let named: HashMap<u64, &str> = tracks.iter().map(|(u, n, _)| (*u, n.as_str())).collect();
        assert_eq!(named.len(), tracks.len(), "one uuid per track");
        let mut blocks = Vec::new();
        for (_, name, parent) in &tracks {
            let parent_name = parent.map(|p| {
                *named
                    .get(&p)
                    .unwrap_or_else(|| panic!("{name}: no parent {p}"))
            });
            if let Some(at) = name.find(" block ") {
                assert_eq!(parent_name, Some(&name[..at]), "{name}");
                blocks.push(name.clone());
            }
        }
        blocks.sort();
        let mut want = want;
        want.sort();
        assert_eq!(blocks, want);
    }

    /// The time axis's labels differ from tick to tick at any window,
    /// down to tens of nanoseconds.
    #[test]
    fn axis_labels_differ_at_every_scale() {
        let empty = recorder::Snapshot {
            records: Vec::new(),
            dropped: 0,
            unfinished: 0,
        };
        let t = Trace::new(empty, 10, &[], 1.0, 0);
        for span in [20.0, 400.0, 3_000.0, 1e6] {
            let svg = t.to_svg(0.0, span, &[], "x");
            let labels: Vec<&str> = svg
                .split("text-anchor=\"middle\">")
                .skip(1)
                .map(|l| l.split('<').next().unwrap())
                .collect();
            assert!(labels.len() > 2, "{span}: {labels:?}");
            let mut distinct = labels.clone();
            distinct.dedup();
            assert_eq!(distinct, labels, "{span}");
        }
    }
}
