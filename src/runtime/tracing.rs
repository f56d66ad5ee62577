//! A runtime's trace: its recorder, switched on at build or at run time,
//! and the snapshots taken of it (`crate::trace`).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::runtime::builder::Builder;
use crate::runtime::lane::{Lane, Runtime};
use crate::trace::recorder::Recorder;
use crate::trace::{DEFAULT_TRACE_RECORDS, Trace, Tracer};

/// The error of a trace buffer the system would not give.
fn no_memory(records: usize) -> Error {
    Error::InvalidConfig(format!(
        "a trace buffer of {records} records ({} MiB): the system would not give the memory",
        (records as u64).saturating_mul(64) >> 20
    ))
}

impl Builder {
    /// The runtime's recorder (on if [`Builder::trace`] named a capacity).
    pub(crate) fn recorder(&self) -> Result<Arc<Recorder>> {
        let r = Recorder::new(self.trace.unwrap_or(DEFAULT_TRACE_RECORDS));
        if self.trace.is_some() && !r.set_on(true) {
            return Err(no_memory(r.capacity()));
        }
        Ok(Arc::new(r))
    }
}

impl Runtime {
    /// The runtime over `lanes`, traced by `recorder`.
    pub(crate) fn new(
        lanes: Vec<Lane>,
        partition: Option<crate::cuda::partition::SmPartition>,
        recorder: Arc<Recorder>,
    ) -> Self {
        let shapes = lanes
            .iter()
            .map(|l| crate::trace::LaneShape {
                blocks: l.blocks.clone(),
                ..l.shared.rings.shape()
            })
            .collect();
        Self {
            lanes: lanes.into_boxed_slice(),
            partition,
            tracer: Tracer::new(recorder, shapes),
        }
    }

    /// Switches the recording of tasks on or off, at any time (see
    /// [`crate::trace`]): a task is recorded when tracing was on at its
    /// submit (switched off, the tasks in flight are still recorded as
    /// their completions are taken; switched on the first time, a submit
    /// that saw it on before the buffer was there is neither recorded nor
    /// counted). The first time
    /// on allocates the buffer ([`Builder::trace`]'s capacity, else
    /// [`DEFAULT_TRACE_RECORDS`]). Records kept stay when it is switched
    /// off.
    ///
    /// Errors: [`Error::InvalidConfig`] where the system would not give the
    /// buffer's memory (tracing stays off).
    pub fn set_tracing(&self, on: bool) -> Result<()> {
        if self.tracer.set_on(on) {
            Ok(())
        } else {
            Err(no_memory(self.tracer.capacity()))
        }
    }

    /// Whether tasks are being recorded.
    pub fn is_tracing(&self) -> bool {
        self.tracer.is_on()
    }

    /// A snapshot of the records kept so far, every lane's, with the
    /// device's times mapped onto the host's clock (see [`Trace`]).
    pub fn trace(&self) -> Trace {
        self.tracer.snapshot()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashSet;

    use crate::builtin::{ECHO, NOP};
    use crate::runtime::{Builder, Runtime, Submit};

    fn soft(b: Builder) -> Runtime {
        b.build_soft(true).expect("the software device starts")
    }

    /// Every (lane, ring, seq) of the records, each once.
    fn keys(t: &crate::trace::Trace) -> HashSet<(usize, usize, u64)> {
        let keys: HashSet<_> = t
            .records()
            .iter()
            .map(|r| (r.lane, r.ring, r.seq))
            .collect();
        assert_eq!(keys.len(), t.records().len(), "a task recorded twice");
        keys
    }

    #[test]
    fn off_records_nothing() {
        let rt = soft(Runtime::builder().capacity(8));
        assert!(!rt.is_tracing());
        for v in 0..20u64 {
            assert_eq!(rt.submit(ECHO.args(&v)).unwrap().wait().unwrap().value, v);
        }
        let t = rt.trace();
        assert_eq!((t.records().len(), t.dropped()), (0, 0));
    }

    #[test]
    fn every_task_once_from_every_thread_tickets_batches_and_dropped_tickets() {
        let n = if cfg!(miri) { 12 } else { 300 };
        // Each thread: n/3 tickets (rounded), their batches of two (two
        // slots, a task each), the dropped ones; then the 32 at the end.
        let expected: usize = (0..n as usize)
            .map(|k| match k % 3 {
                1 => 2,
                _ => 1,
            })
            .sum::<usize>()
            * 3
            + 32;
        // Under Miri a buffer of exactly the records expected: its borrow
        // checks walk every entry of the buffer at each record's write.
        let records = if cfg!(miri) { expected } else { 100_000 };
        let rt = soft(
            Runtime::builder()
                .capacity(8)
                .workers(2)
                .rings(2)
                .trace(records),
        );
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let rt = &rt;
                s.spawn(move || {
                    for k in 0..n {
                        let v = t * 1_000_000 + k;
                        match k % 3 {
                            0 => assert_eq!(
                                rt.submit(ECHO.args(&v)).unwrap().wait().unwrap().value,
                                v
                            ),
                            1 => {
                                let mut b = rt.submit(ECHO.batch(&[v, v + 1])).unwrap();
                                assert_eq!(b.wait().unwrap().len(), 2);
                            }
                            // Dropped unread: recorded when its slot is
                            // taken back.
                            _ => drop(rt.submit(NOP.args(&())).unwrap()),
                        }
                    }
                });
            }
        });
        // Every slot of both rings taken back once more: the dropped
        // tickets' tasks are recorded then.
        for ring in 0..2 {
            let p = rt.producer_on(ring).unwrap();
            for _ in 0..16 {
                p.submit(NOP.args(&())).unwrap().wait().unwrap();
            }
        }
        let t = rt.trace();
        let tasks: usize = t.records().iter().map(|r| r.tasks).sum();
        assert_eq!(t.unfinished(), 0);
        assert_eq!(t.dropped(), 0);
        assert_eq!(keys(&t).len(), t.records().len());
        assert_eq!(tasks, expected, "every task once");
        for r in t.records() {
            assert!(r.seen_ns >= r.submit_ns, "{r:?}");
            assert_eq!(r.status, 0);
            assert!(
                r.worker < 2 && r.ring < 2 && r.worker % 2 == r.ring,
                "{r:?}"
            );
        }
    }

    #[test]
    fn the_drop_count_is_exact_once_full_and_switching_works() {
        let rt = soft(Runtime::builder().capacity(4).trace(10));
        for v in 0..25u64 {
            rt.submit(ECHO.args(&v)).unwrap().wait().unwrap();
        }
        let t = rt.trace();
        assert_eq!((t.records().len(), t.dropped(), t.capacity()), (10, 15, 10));
        // The first ten stay.
        let seqs: Vec<u64> = t.records().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (0..10).collect::<Vec<u64>>());
        rt.set_tracing(false).unwrap();
        for v in 0..5u64 {
            rt.submit(ECHO.args(&v)).unwrap().wait().unwrap();
        }
        assert_eq!(rt.trace().dropped(), 15, "off: not counted");
    }

    /// A submit's time is read before its reservation, so a wait for room
    /// in a full ring counts as dispatch (`TaskRecord::submit_ns`), and
    /// the next submit's time is not the end of that wait.
    #[test]
    #[cfg_attr(miri, ignore = "timing: a spin of the software device")]
    fn a_wait_for_room_counts_as_dispatch() {
        use crate::builtin::SPIN;
        let spin = std::time::Duration::from_millis(60);
        let rt = soft(Runtime::builder().capacity(4).workers(1).trace(100));
        let mut spinning = Vec::new();
        for _ in 0..4 {
            spinning.push(rt.submit(SPIN.args(&(spin.as_nanos() as u64))).unwrap());
        }
        // The ring is full until the first spin ends.
        let t0 = std::time::Instant::now();
        let nop = rt.submit(NOP.args(&())).unwrap();
        let waited = t0.elapsed();
        assert!(waited >= spin / 2, "the submit waited for room: {waited:?}");
        nop.wait().unwrap();
        for t in spinning {
            t.wait().unwrap();
        }
        let t = rt.trace();
        let by_seq = |seq: u64| t.records().iter().find(|r| r.seq == seq).unwrap();
        let (before, after) = (by_seq(3), by_seq(4));
        let gap = after.submit_ns - before.submit_ns;
        assert!(
            gap < (waited / 4).as_nanos() as f64,
            "submitted {gap} ns after the one before it, of a wait of {waited:?}"
        );
        assert!(t.segments(after).unwrap().dispatch_ns >= (waited / 2).as_nanos() as f64);
    }

    #[test]
    fn switched_on_at_run_time() {
        let rt = soft(Runtime::builder().capacity(4));
        rt.submit(NOP.args(&())).unwrap().wait().unwrap();
        rt.set_tracing(true).unwrap();
        assert!(rt.is_tracing());
        for _ in 0..6 {
            rt.submit(NOP.args(&())).unwrap().wait().unwrap();
        }
        let t = rt.trace();
        assert_eq!(t.records().len(), 6);
        assert!(t.records().iter().all(|r| r.op == NOP.op()));
    }

    #[test]
    fn exports_decode() {
        // Under Miri fewer tasks (each export's work grows with them).
        let n = if cfg!(miri) { 12 } else { 40 };
        let rt = soft(Runtime::builder().capacity(8).trace(1000));
        for v in 0..n {
            rt.submit(ECHO.args(&v)).unwrap().wait().unwrap();
        }
        let t = rt.trace();
        let json: serde_json::Value = serde_json::from_str(&t.to_chrome_json()).expect("JSON");
        let events = json["traceEvents"].as_array().unwrap();
        let submits = events
            .iter()
            .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("submit")))
            .count();
        assert_eq!(submits as u64, n);
        assert_eq!(json["otherData"]["records"], n);
        let packets = crate::trace::wire_fields(&t.to_perfetto()).expect("protobuf");
        assert!(
            packets.iter().all(|(field, _)| *field == 1),
            "Trace.packet only"
        );
        let r = &t.records()[10];
        let marks = [(r.submit_ns, "here".to_string())];
        let svg = t.to_svg(r.submit_ns - 1e4, r.seen_ns + 1e4, &marks, "test");
        assert!(svg.starts_with("<svg") && svg.contains("here") && svg.ends_with("</svg>\n"));
    }

    #[test]
    fn the_picture_is_xml_for_any_title_label_and_window() {
        let rt = soft(Runtime::builder().capacity(8).trace(100));
        for _ in 0..5 {
            rt.submit(NOP.args(&())).unwrap().wait().unwrap();
        }
        let t = rt.trace();
        let r = &t.records()[2];
        let marks = [
            (r.submit_ns, "a\u{1}b<&>".to_string()),
            (1e308, "far".into()),
        ];
        for (from, to) in [
            (r.submit_ns - 1e4, r.seen_ns + 1e4),
            (-1e308, 1e308),
            (f64::NAN, 1.0),
            (5.0, f64::INFINITY),
            (3.0, 3.0),
        ] {
            let svg = t.to_svg(from, to, &marks, "t\u{0}\u{1b}itle\u{ffff}");
            let bad: Vec<char> = svg
                .chars()
                .filter(|&c| (u32::from(c) < 0x20 && !"\t\n\r".contains(c)) || c == '\u{ffff}')
                .collect();
            assert!(bad.is_empty(), "{bad:?}");
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{from} {to}");
            assert!(svg.contains("a\u{fffd}b&lt;&amp;&gt;") || !svg.contains(">a"));
        }
    }

    /// A traced task whose ticket was dropped unread, still running when a
    /// shutdown (or a cancel) stops the runtime: no producer will free its
    /// slot any more, so the stop records it once its completion is in.
    #[test]
    fn a_dropped_tickets_task_is_recorded_by_the_stop() {
        use crate::builtin::SPIN;
        // A cancel's case needs the task taken before it: timing, which
        // Miri's scheduler does not keep.
        let cases: &[bool] = if cfg!(miri) { &[true] } else { &[true, false] };
        for &drain in cases {
            let rt = soft(Runtime::builder().capacity(4).trace(100));
            drop(rt.submit(SPIN.args(&20_000_000u64)).unwrap());
            // Taken by the device before the stop (a cancel leaves a task
            // not yet taken unrun, and unrecorded).
            std::thread::sleep(std::time::Duration::from_millis(5));
            if drain {
                rt.shutdown().unwrap();
            } else {
                let _ = rt.cancel();
            }
            let t = rt.trace();
            assert_eq!(
                (t.records().len(), t.unfinished()),
                (1, 0),
                "drain {drain}: the dropped ticket's task"
            );
        }
    }
}
