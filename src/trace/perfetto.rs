//! Perfetto's trace format (protobuf), by hand: the handful of messages a
//! timeline of tasks needs (`Trace`, `TracePacket`, `TrackDescriptor`,
//! `TrackEvent`, `DebugAnnotation`), their field numbers as Perfetto's
//! schema (`protos/perfetto/trace/`) gives them. Encoding protobuf is a
//! few lines; a protobuf crate would bring a code generator and its build
//! step for these five messages.
//!
//! Tracks: "pkq host" (its name says which host clock, `HostClock`) with a child per host thread, "pkq GPU" with a child
//! per device worker (named with the clock map's bound: the device times
//! are mapped onto the host's clock), and under a worker of a lane of
//! blocks or groups a child per block. Each task: an instant "submit" on
//! its submitting thread, a slice on its worker, an instant "seen" on the
//! thread that took its completion, joined by a flow; each block's run of
//! a wide task, a slice on the block's track. Every packet is on
//! one sequence; the first clears its incremental state.

use super::{Trace, op_name};

// Field numbers (Perfetto's schema).
const TRACE_PACKET: u32 = 1;
const PACKET_TIMESTAMP: u32 = 8;
const PACKET_SEQUENCE_ID: u32 = 10;
const PACKET_TRACK_EVENT: u32 = 11;
const PACKET_SEQUENCE_FLAGS: u32 = 13;
const PACKET_TRACK_DESCRIPTOR: u32 = 60;
const TRACK_UUID: u32 = 1;
const TRACK_NAME: u32 = 2;
const TRACK_PARENT_UUID: u32 = 5;
const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
const EVENT_TYPE: u32 = 9;
const EVENT_TRACK_UUID: u32 = 11;
const EVENT_CATEGORIES: u32 = 22;
const EVENT_NAME: u32 = 23;
const EVENT_FLOW_IDS: u32 = 47;
const EVENT_TERMINATING_FLOW_IDS: u32 = 48;
const ANNOTATION_UINT: u32 = 3;
const ANNOTATION_INT: u32 = 4;
const ANNOTATION_NAME: u32 = 10;
// TrackEvent.Type.
const SLICE_BEGIN: u64 = 1;
const SLICE_END: u64 = 2;
const INSTANT: u64 = 3;
// TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED.
const STATE_CLEARED: u64 = 1;
/// This writer's one sequence.
const SEQUENCE: u64 = 0x706b71;

const HOST_ROOT: u64 = 1;
const GPU_ROOT: u64 = 2;

fn thread_track(thread: u32) -> u64 {
    1 << 32 | u64::from(thread)
}

/// A worker's track: its place in `Tracks::workers`.
fn worker_track(at: usize) -> u64 {
    2 << 56 | at as u64
}

/// A block's track: its place in `Tracks::blocks`.
fn block_track(at: usize) -> u64 {
    3 << 56 | at as u64
}

/// A protobuf message being written.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        self.key(field, 0);
        self.varint(v);
        self
    }

    fn int(&mut self, field: u32, v: i64) -> &mut Self {
        // int64: two's complement as a varint.
        self.uint(field, v as u64)
    }

    fn fixed64(&mut self, field: u32, v: u64) -> &mut Self {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    fn str(&mut self, field: u32, s: &str) -> &mut Self {
        self.bytes(field, s.as_bytes())
    }

    fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.0)
    }
}

/// One event to write, by time.
struct Event {
    ts: u64,
    /// Instants and begins before ends at one time.
    order: u8,
    body: Msg,
}

pub(super) fn encode(t: &Trace) -> Vec<u8> {
    let mut trace = Msg::default();
    let mut first = true;
    let mut packet = |trace: &mut Msg, ts: Option<u64>, field: u32, body: &Msg| {
        let mut p = Msg::default();
        if let Some(ts) = ts {
            p.uint(PACKET_TIMESTAMP, ts);
        }
        p.uint(PACKET_SEQUENCE_ID, SEQUENCE);
        if first {
            p.uint(PACKET_SEQUENCE_FLAGS, STATE_CLEARED);
            first = false;
        }
        p.msg(field, body);
        trace.msg(TRACE_PACKET, &p);
    };
    let track = |uuid: u64, parent: Option<u64>, name: &str| {
        let mut d = Msg::default();
        d.uint(TRACK_UUID, uuid).str(TRACK_NAME, name);
        if let Some(p) = parent {
            d.uint(TRACK_PARENT_UUID, p);
        }
        d
    };
    let gpu_name = match t.clock_map() {
        Some(m) => format!(
            "pkq GPU (device times mapped onto the host clock, within {:.0} ns at its anchors; \
             {:.1}% of records outside)",
            m.error_bound_ns,
            100.0 * m.misfit_fraction
        ),
        None => "pkq GPU (device clock, unmapped: too few records)".into(),
    };
    packet(
        &mut trace,
        None,
        PACKET_TRACK_DESCRIPTOR,
        &track(
            HOST_ROOT,
            None,
            &format!("pkq host (clock: {})", t.host_clock()),
        ),
    );
    packet(
        &mut trace,
        None,
        PACKET_TRACK_DESCRIPTOR,
        &track(GPU_ROOT, None, &gpu_name),
    );
    let tracks = super::Tracks::of(t.records.iter(), &t.blocks);
    for &th in &tracks.threads {
        let d = track(
            thread_track(th),
            Some(HOST_ROOT),
            &format!("host thread {th}"),
        );
        packet(&mut trace, None, PACKET_TRACK_DESCRIPTOR, &d);
    }
    for (at, &(lane, w)) in tracks.workers.iter().enumerate() {
        let d = track(
            worker_track(at),
            Some(GPU_ROOT),
            &format!("lane {lane} worker {w}"),
        );
        packet(&mut trace, None, PACKET_TRACK_DESCRIPTOR, &d);
    }
    for (at, &(lane, w, b)) in tracks.blocks.iter().enumerate() {
        let d = track(
            block_track(at),
            Some(worker_track(tracks.worker(lane, w))),
            &format!("lane {lane} worker {w} block {b}"),
        );
        packet(&mut trace, None, PACKET_TRACK_DESCRIPTOR, &d);
    }

    let ns = |v: f64| v.max(0.0).round() as u64;
    let mut events: Vec<Event> = Vec::with_capacity(t.records.len() * 4 + t.blocks.len() * 2);
    for (b, placed) in t.blocks.iter().zip(block_slices(t)) {
        let Some((start, end)) = placed else { continue };
        let uuid = block_track(tracks.block(b.lane, b.worker, b.block));
        let mut begin = Msg::default();
        begin
            .uint(EVENT_TYPE, SLICE_BEGIN)
            .uint(EVENT_TRACK_UUID, uuid)
            .str(EVENT_CATEGORIES, "pkq")
            .str(EVENT_NAME, &format!("block {}", b.block));
        for (key, v) in [
            ("seq", b.seq),
            ("ring", b.ring as u64),
            ("block", b.block as u64),
        ] {
            let mut a = Msg::default();
            a.str(ANNOTATION_NAME, key).uint(ANNOTATION_UINT, v);
            begin.msg(EVENT_DEBUG_ANNOTATIONS, &a);
        }
        push_slice(&mut events, uuid, begin, start, end);
    }
    let placed = device_slices(t);
    for (i, r) in t.records.iter().enumerate() {
        let flow = i as u64 + 1;
        let name = op_name(r.op);
        let annotate = |e: &mut Msg| {
            for (key, v) in [
                ("seq", r.seq),
                ("lane", r.lane as u64),
                ("ring", r.ring as u64),
                ("worker", r.worker as u64),
                ("poller", r.poller as u64),
                ("status", u64::from(r.status)),
                ("tasks", r.tasks as u64),
            ] {
                let mut a = Msg::default();
                a.str(ANNOTATION_NAME, key).uint(ANNOTATION_UINT, v);
                e.msg(EVENT_DEBUG_ANNOTATIONS, &a);
            }
        };
        let mut submit = Msg::default();
        submit
            .uint(EVENT_TYPE, INSTANT)
            .uint(EVENT_TRACK_UUID, thread_track(r.submit_thread))
            .str(EVENT_CATEGORIES, "pkq")
            .str(EVENT_NAME, &format!("submit {name}"))
            .fixed64(EVENT_FLOW_IDS, flow);
        annotate(&mut submit);
        events.push(Event {
            ts: ns(r.submit_ns),
            order: 0,
            body: submit,
        });
        if let (Some((start, end)), Some(seg)) = (placed[i], t.segments(r)) {
            let uuid = worker_track(tracks.worker(r.lane, r.worker));
            let mut begin = Msg::default();
            begin
                .uint(EVENT_TYPE, SLICE_BEGIN)
                .uint(EVENT_TRACK_UUID, uuid)
                .str(EVENT_CATEGORIES, "pkq")
                .str(EVENT_NAME, &name)
                .fixed64(EVENT_FLOW_IDS, flow);
            annotate(&mut begin);
            for (key, v) in [
                ("dispatch_ns", seg.dispatch_ns),
                ("handler_ns", seg.handler_ns),
                ("seen_ns", seg.seen_ns),
            ] {
                let mut a = Msg::default();
                a.str(ANNOTATION_NAME, key)
                    .int(ANNOTATION_INT, v.round() as i64);
                begin.msg(EVENT_DEBUG_ANNOTATIONS, &a);
            }
            push_slice(&mut events, uuid, begin, start, end);
        }
        let mut seen = Msg::default();
        seen.uint(EVENT_TYPE, INSTANT)
            .uint(EVENT_TRACK_UUID, thread_track(r.seen_thread))
            .str(EVENT_CATEGORIES, "pkq")
            .str(EVENT_NAME, &format!("seen {name}"))
            .fixed64(EVENT_TERMINATING_FLOW_IDS, flow);
        annotate(&mut seen);
        events.push(Event {
            ts: ns(r.seen_ns),
            order: 2,
            body: seen,
        });
    }
    // By time; at one time, a worker's end before its next begin.
    events.sort_by_key(|e| (e.ts, e.order));
    for e in &events {
        packet(&mut trace, Some(e.ts), PACKET_TRACK_EVENT, &e.body);
    }
    trace.0
}

/// A slice on track `uuid`: its `begin` event at `start`, its end at `end`.
fn push_slice(events: &mut Vec<Event>, uuid: u64, begin: Msg, start: u64, end: u64) {
    events.push(Event {
        ts: start,
        order: 1,
        body: begin,
    });
    let mut close = Msg::default();
    close
        .uint(EVENT_TYPE, SLICE_END)
        .uint(EVENT_TRACK_UUID, uuid);
    events.push(Event {
        ts: end,
        order: 0,
        body: close,
    });
}

/// Each record's device slice on its worker's track, in ns from the
/// trace's origin (`None`: no clock map), placed in the worker's order (by
/// device start), none starting before the one before it ended: the map's
/// rounding must not make two of one worker's tasks overlap (both exports
/// draw the same slices).
pub(super) fn device_slices(t: &Trace) -> Vec<Option<(u64, u64)>> {
    place(
        t.records.len(),
        t.records.iter().enumerate().filter_map(|(i, r)| {
            let start = t.device_to_host_ns(r.device_start_ns)?;
            let end = t.device_to_host_ns(r.device_end_ns)?;
            Some((i, (r.lane, r.worker, 0), start, end))
        }),
    )
}

/// Each block record's slice on its block's track, placed as
/// [`device_slices`] places a worker's.
pub(super) fn block_slices(t: &Trace) -> Vec<Option<(u64, u64)>> {
    place(
        t.blocks.len(),
        t.blocks.iter().enumerate().filter_map(|(i, b)| {
            let start = t.device_to_host_ns(b.device_start_ns)?;
            let end = t.device_to_host_ns(b.device_end_ns)?;
            Some((i, (b.lane, b.worker, b.block + 1), start, end))
        }),
    )
}

/// A track of slices: (lane, worker, 0) for a worker's, (lane, worker,
/// block + 1) for a block's.
type Track = (usize, usize, usize);

/// Slices `(index, track, start, end)` of `n`, placed on each track in
/// order of their start, none before the one before it ended.
fn place(
    n: usize,
    slices: impl Iterator<Item = (usize, Track, f64, f64)>,
) -> Vec<Option<(u64, u64)>> {
    let ns = |v: f64| v.max(0.0).round() as u64;
    let mut slices: Vec<(usize, Track, u64, u64)> = slices
        .map(|(i, track, start, end)| (i, track, ns(start), ns(end)))
        .collect();
    slices.sort_by_key(|&(_, track, start, _)| (track, start));
    let mut placed: Vec<Option<(u64, u64)>> = vec![None; n];
    let mut last: Option<(Track, u64)> = None;
    for (i, track, start, end) in slices {
        let floor = match last {
            Some((w, e)) if w == track => e,
            _ => 0,
        };
        let start = start.max(floor);
        let end = end.max(start).saturating_add(u64::from(end <= start));
        placed[i] = Some((start, end));
        last = Some((track, end));
    }
    placed
}

#[cfg(test)]
pub(super) mod wire {
    //! A reader of the protobuf wire format, for the tests.

    /// A field's value.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) enum Value {
        Varint(u64),
        Fixed64(u64),
        Bytes(Vec<u8>),
    }

    /// The fields of a message, in order; `None` if it is not well formed.
    pub(crate) fn fields(mut b: &[u8]) -> Option<Vec<(u32, Value)>> {
        fn varint(b: &mut &[u8]) -> Option<u64> {
            let mut v = 0u64;
            for shift in (0..64).step_by(7) {
                let (&byte, rest) = b.split_first()?;
                *b = rest;
                v |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    return Some(v);
                }
            }
            None
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b)?;
            let field = u32::try_from(key >> 3).ok()?;
            let value = match key & 7 {
                0 => Value::Varint(varint(&mut b)?),
                1 => {
                    let (v, rest) = b.split_at_checked(8)?;
                    b = rest;
                    Value::Fixed64(u64::from_le_bytes(v.try_into().ok()?))
                }
                2 => {
                    let n = usize::try_from(varint(&mut b)?).ok()?;
                    let (v, rest) = b.split_at_checked(n)?;
                    b = rest;
                    Value::Bytes(v.to_vec())
                }
                _ => return None,
            };
            out.push((field, value));
        }
        Some(out)
    }
}
