//! Every interleaving (loom) of the host threads that meet on a slot:
//! producers reserving and moving completions, tickets taking or
//! dropping theirs, shutdown closing the tail.
use super::support::*;
use super::*;
use loom::thread;
use std::sync::Arc;

/// A one-slot queue whose task 0 is published and completed with 7.
fn completed_slot() -> (Arc<Memory>, Arc<Queue>) {
    let geo = Geometry::new(1).unwrap();
    let mem = Memory::new(geo);
    let q = Arc::new(mem.queue(geo, 0));
    let s = q.try_reserve().unwrap();
    q.publish(s, &SlotImage::new(0, &[]).unwrap());
    complete(&q, s, 7);
    (mem, q)
}

#[test]
fn loom_a_moved_pack_keeps_its_own_results() {
    // A producer that moves a completed pack out of its slot must read
    // the pack's results before it frees the slot: once freed, another
    // producer can reserve the next lap and the device overwrite them.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let geo = Geometry::new(1).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, 0));
        let first = q.try_reserve().unwrap();
        q.publish_packs(first, crate::layout::OP_ECHO, &[1u64, 2, 3]);
        q.complete_pack(first, &[1, 2, 3]);
        // The mover: needs the slot, moves the pack's completion aside.
        let qa = q.clone();
        let mover = thread::spawn(move || qa.try_reserve());
        // Another producer, and the device serving what it publishes.
        let qb = q.clone();
        let next = thread::spawn(move || {
            if let Ok(seq) = qb.try_reserve() {
                qb.publish_packs(seq, crate::layout::OP_ECHO, &[7u64, 8, 9]);
                qb.complete_pack(seq, &[7, 8, 9]);
            }
        });
        next.join().unwrap();
        let _ = mover.join().unwrap();
        let Take::Done(done) = q.take(first) else {
            panic!("the pack completed")
        };
        assert_eq!(done.results.as_deref(), Some(&[1, 2, 3][..]));
    });
}

#[test]
fn loom_producer_moving_vs_ticket_taking() {
    loom::model(|| {
        let (_mem, q) = completed_slot();
        let q1 = q.clone();
        let producer = thread::spawn(move || q1.try_reserve());
        let got = q.take(0).done();
        assert_eq!(producer.join().unwrap(), Ok(1));
        assert_eq!(
            got.map(|c| c.value),
            Some(7),
            "the ticket gets its completion"
        );
        assert!(q.overflow().entries.is_empty(), "nothing left behind");
    });
}

#[test]
fn loom_two_producers_race_for_one_completed_slot() {
    loom::model(|| {
        let (_mem, q) = completed_slot();
        let (qa, qb) = (q.clone(), q.clone());
        let a = thread::spawn(move || qa.try_reserve());
        let b = thread::spawn(move || qb.try_reserve());
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let mut got = [a, b];
        got.sort_by_key(|r| format!("{r:?}"));
        assert_eq!(
            got,
            [Err(Refusal::Full), Ok(1)],
            "one wins, one finds task 1 in flight"
        );
        assert_eq!(
            q.take(0).done().map(|c| c.value),
            Some(7),
            "the move lost nothing"
        );
        assert!(q.overflow().entries.is_empty());
        assert_eq!(q.moved(), 1, "counted once");
    });
}

#[test]
fn loom_ticket_dropped_while_a_producer_moves_its_completion() {
    loom::model(|| {
        let (_mem, q) = completed_slot();
        let q1 = q.clone();
        let producer = thread::spawn(move || q1.try_reserve());
        q.detach(0);
        assert_eq!(producer.join().unwrap(), Ok(1));
        assert!(
            q.overflow().entries.is_empty(),
            "a dropped ticket leaves no entry"
        );
    });
}

#[test]
fn loom_batch_and_single_producers_never_overlap() {
    loom::model(|| {
        let geo = Geometry::new(4).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, 0));
        let (qa, qb) = (q.clone(), q.clone());
        let a = thread::spawn(move || qa.try_reserve_many(3));
        let b = thread::spawn(move || qb.try_reserve());
        let start = a.join().unwrap().unwrap();
        let single = b.join().unwrap().unwrap();
        let batch: Vec<u64> = (start..start + 3).collect();
        assert!(!batch.contains(&single), "{batch:?} and {single}");
        let mut all = batch;
        all.push(single);
        all.sort();
        assert_eq!(all, [0, 1, 2, 3]);
    });
}

#[test]
fn loom_producers_get_distinct_sequence_numbers() {
    loom::model(|| {
        let geo = Geometry::new(2).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, 0));
        let (qa, qb) = (q.clone(), q.clone());
        let a = thread::spawn(move || qa.try_reserve());
        let b = thread::spawn(move || qb.try_reserve());
        let mut got = [a.join().unwrap().unwrap(), b.join().unwrap().unwrap()];
        got.sort();
        assert_eq!(got, [0, 1]);
        assert_eq!(q.try_reserve(), Err(Refusal::Full));
    });
}

/// Gives back `n` orphan shares, as `Shared::release` does; whether
/// they were the last.
fn release(shares: &AtomicU64, n: u64) -> bool {
    let before = shares.fetch_sub(n, Ordering::AcqRel);
    assert!(
        before >= n,
        "{n} given back of {before}: one was never counted"
    );
    before == n
}

#[test]
fn loom_ticket_takes_while_the_runtime_is_dropped() {
    loom::model(|| {
        let (_mem, q) = completed_slot();
        let shares = Arc::new(AtomicU64::new(1));
        let (q1, s1) = (q.clone(), shares.clone());
        // The ticket: takes its completion, then is dropped.
        let ticket = thread::spawn(move || {
            let mut held = 0;
            let got = q1.take(0).counted(&mut held).map(|c| c.cqe.value);
            let last = held > 0 && release(&s1, held);
            (got, last)
        });
        q.orphan(&shares);
        let runtime_last = release(&shares, 1);
        let (got, ticket_last) = ticket.join().unwrap();
        assert_eq!(got, Some(7), "the completion, either way");
        assert!(runtime_last ^ ticket_last, "exactly one frees");
        assert_eq!(shares.load(Ordering::Relaxed), 0);
        assert!(q.overflow().entries.is_empty());
    });
}

#[test]
fn loom_ticket_dropped_unread_while_the_runtime_is_dropped() {
    loom::model(|| {
        let geo = Geometry::new(1).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, 0));
        let s = q.try_reserve().unwrap(); // never completes
        let shares = Arc::new(AtomicU64::new(1));
        let (q1, s1) = (q.clone(), shares.clone());
        let ticket = thread::spawn(move || q1.detach(s) && release(&s1, 1));
        q.orphan(&shares);
        let runtime_last = release(&shares, 1);
        let ticket_last = ticket.join().unwrap();
        assert!(runtime_last ^ ticket_last, "exactly one frees");
        assert_eq!(shares.load(Ordering::Relaxed), 0);
        assert!(q.overflow().entries.is_empty());
    });
}

#[test]
fn loom_close_races_a_reservation() {
    loom::model(|| {
        let geo = Geometry::new(2).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, 0));
        let q1 = q.clone();
        let producer = thread::spawn(move || q1.try_reserve());
        let end = q.close();
        match producer.join().unwrap() {
            Ok(seq) => assert!(seq < end, "a reservation that won is before the end"),
            Err(r) => assert_eq!((r, end), (Refusal::Closed, 0)),
        }
        assert_eq!(q.try_reserve(), Err(Refusal::Closed));
        assert_eq!(q.incomplete(end), end as usize, "reserved, never completed");
    });
}

#[test]
fn loom_a_plain_mark_only_moves_forward() {
    // Pollers of an older completion may mark its plain output late,
    // after the taker of a newer one marked its own: the newer mark
    // stays, whatever the order (PLAIN in pkq_layout.h).
    loom::model(|| {
        let (q, _h2d, _out) = io_queue(1, (8, 16));
        let q = Arc::new(q);
        fn io(q: &Queue) -> &Io {
            q.io.as_ref().unwrap()
        }
        let q1 = q.clone();
        let late = thread::spawn(move || io(&q1).note_plain(q1.geo, 3));
        io(&q).note_plain(q.geo, 4);
        late.join().unwrap();
        assert_eq!(io(&q).plain[0].load(Ordering::Relaxed), 4 | FLAG);
        assert!(io(&q).fresh(q.geo, 4 + 255), "255 laps on");
        assert!(!io(&q).fresh(q.geo, 4 + 256), "256 laps on");
    });
}

#[test]
fn loom_an_output_landing_after_its_entry_is_taken_whole() {
    // The device's output words may reach the host after the entry:
    // the ticket takes the task only once every word has, and a
    // producer of the next lap frees the slot only then.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let (q, _h2d, out) = io_queue(1, (8, 16));
        let q = Arc::new(q);
        let seq = q.try_reserve().unwrap();
        q.publish(seq, &SlotImage::new(10, &[]).unwrap().with_input(0));
        let (qd, od) = (q.clone(), out.clone());
        let device = thread::spawn(move || {
            complete_io(&qd, &od, seq, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], true)
        });
        let qp = q.clone();
        let producer = thread::spawn(move || qp.try_reserve());
        let got = loop {
            match q.take(seq) {
                Take::Done(done) => break done.output,
                _ => thread::yield_now(),
            }
        };
        device.join().unwrap();
        assert_eq!(got.as_deref(), Some(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10][..]));
        let _ = producer.join().unwrap();
    });
}

#[test]
fn loom_an_exclusive_producer_races_a_close() {
    // The holder's plain tail stores against the closer: every
    // reservation it keeps is before the end, every one before the end
    // it kept (none lost to a drain, none run after it).
    loom::model(|| {
        let geo = Geometry::new(4).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, 0));
        q.hold().unwrap();
        let q1 = q.clone();
        let producer = thread::spawn(move || [q1.try_reserve_held(1), q1.try_reserve_held(2)]);
        let end = q.close();
        let got = producer.join().unwrap();
        let kept: u64 = match got {
            [Ok(0), Ok(1)] => 3,
            [Ok(0), Err(Refusal::Closed)] => 1,
            [Err(Refusal::Closed), Err(Refusal::Closed)] => 0,
            other => panic!("{other:?}"),
        };
        assert_eq!(end, kept, "the end counts exactly the kept reservations");
        assert_eq!(q.try_reserve_held(1), Err(Refusal::Closed));
        assert_eq!(q.incomplete(end), end as usize);
    });
}

#[test]
fn loom_a_release_races_a_close_and_a_shared_producer() {
    // The holder gives the ring back while a closer closes it and a
    // shared producer tries it: a close never lets a later shared
    // reservation through, and the end counts the holder's.
    loom::model(|| {
        let geo = Geometry::new(4).unwrap();
        let mem = Memory::new(geo);
        let q = Arc::new(mem.queue(geo, 0));
        q.hold().unwrap();
        assert_eq!(q.try_reserve_held(1), Ok(0));
        let (q1, q2) = (q.clone(), q.clone());
        let holder = thread::spawn(move || q1.release());
        let shared = thread::spawn(move || q2.try_reserve());
        let end = q.close();
        holder.join().unwrap();
        match shared.join().unwrap() {
            Ok(seq) => assert_eq!((seq, end), (1, 2), "reserved before the close"),
            Err(Refusal::Held | Refusal::Closed) => assert_eq!(end, 1),
            Err(r) => panic!("{r:?}"),
        }
        assert_eq!(q.try_reserve(), Err(Refusal::Closed));
        assert_eq!(q.hold(), Err(Refusal::Closed));
    });
}

#[test]
fn loom_a_lapping_producer_waits_for_a_publish_to_every_copy() {
    // With a copy of the slots per poller, the device may complete a
    // task from one copy while its producer is still writing the other;
    // a producer lapping the ring must not publish the slot's next lap
    // until then, or the late stores would overwrite it.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let geo = Geometry::new(1).unwrap();
        let (mem, extra) = (Memory::new(geo), Memory::new(geo));
        let q = Arc::new(
            mem.queue(geo, 0)
                .with_copies(vec![extra.sq.clone()].into_boxed_slice()),
        );
        let image = |id: u64| SlotImage::new(crate::layout::OP_ECHO, &id.to_le_bytes()).unwrap();
        assert_eq!(q.try_reserve(), Ok(0));
        let qa = q.clone();
        let first = thread::spawn(move || qa.publish(0, &image(0)));
        // The device, reading only the first copy.
        let read = move |m: &Memory, seq: u64| m.task(geo, seq).map(|t| t.args[0]);
        // One look each (loom explores when): the device completes the
        // task if it finds it whole; the lapping producer publishes the
        // next lap if the slot is free for it.
        let (md, qd) = (mem.clone(), q.clone());
        let device = thread::spawn(move || {
            if read(&md, 0).is_some() {
                complete(&qd, 0, 0);
            }
        });
        let qb = q.clone();
        let lapping = thread::spawn(move || {
            let got = qb.try_reserve();
            if let Ok(seq) = got {
                qb.publish(seq, &image(seq));
            }
            got
        });
        first.join().unwrap();
        device.join().unwrap();
        if lapping.join().unwrap() == Ok(1) {
            assert_eq!(read(&mem, 1), Some(1));
            assert_eq!(read(&extra, 1), Some(1), "the copy holds the later lap");
        }
    });
}

/// A one-slot traced queue (recorder on) whose task 0 is published, its
/// entry opened, and completed with 7 where `completed`.
fn traced_slot(completed: bool) -> (Arc<Memory>, Arc<Queue>, Arc<Recorder>, EntryId) {
    let geo = Geometry::new(1).unwrap();
    let mem = Memory::new(geo);
    let recorder = Arc::new(Recorder::new(4));
    assert!(recorder.set_on(true));
    let q = Arc::new(mem.queue(geo, 0).with_trace(recorder.clone(), 0, 0, false));
    let s = q.try_reserve().unwrap();
    q.publish_at(s, &SlotImage::new(0, &[]).unwrap(), true);
    let entry = q.trace_open(s, 1, 0, traced_start());
    if completed {
        complete(&q, s, 7);
    }
    (mem, q, recorder, entry)
}

/// Task 0's record, whole, and the only one.
fn recorded_once(recorder: &Recorder) {
    let snap = recorder.snapshot();
    assert_eq!((snap.dropped, snap.unfinished), (0, 0));
    let seqs: Vec<u64> = snap.records.iter().map(|r| r.opened.seq).collect();
    assert_eq!(seqs, [0], "recorded once");
}

#[test]
fn loom_a_traced_completion_taken_or_moved_is_recorded_once() {
    loom::model(|| {
        let (_mem, q, recorder, entry) = traced_slot(true);
        let q1 = q.clone();
        let producer = thread::spawn(move || q1.try_reserve());
        let got = q.take_traced(0, entry).done();
        assert_eq!(producer.join().unwrap(), Ok(1));
        assert_eq!(got.map(|c| c.value), Some(7));
        recorded_once(&recorder);
    });
}

#[test]
fn loom_a_traced_ticket_dropped_in_flight_is_recorded_by_the_producer_that_frees_its_slot() {
    loom::model(|| {
        let (_mem, q, recorder, entry) = traced_slot(false);
        let q1 = q.clone();
        // The device completes task 0; a producer then needs its slot.
        let producer = thread::spawn(move || {
            complete(&q1, 0, 7);
            q1.try_reserve()
        });
        q.detach_traced(0, entry);
        if producer.join().unwrap().is_err() {
            // It looked before the ticket was dropped: the next one frees it.
            assert_eq!(q.try_reserve(), Ok(1));
        }
        assert!(q.overflow().entries.is_empty());
        recorded_once(&recorder);
    });
}

#[test]
fn loom_a_traced_ticket_dropped_as_its_slot_is_lapped_leaves_no_stale_entry() {
    // Ticket 0 is dropped while its completion lands and a producer moves
    // it aside, publishes lap 1 into the slot, and drops lap 1's ticket
    // too: ticket 0, held up, must not leave its entry for lap 1's.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let (_mem, q, recorder, e0) = traced_slot(false);
        let q1 = q.clone();
        let dropped = thread::spawn(move || {
            q1.detach_traced(0, e0);
        });
        complete(&q, 0, 7);
        let lapped = q.try_reserve().is_ok_and(|s1| {
            q.publish_at(s1, &SlotImage::new(0, &[]).unwrap(), true);
            let e1 = q.trace_open(s1, 1, 0, traced_start());
            q.detach_traced(s1, e1);
            complete(&q, s1, 8);
            true
        });
        dropped.join().unwrap();
        if lapped {
            assert_eq!(q.try_reserve(), Ok(2));
            let snap = recorder.snapshot();
            let mut seqs: Vec<u64> = snap.records.iter().map(|r| r.opened.seq).collect();
            seqs.sort_unstable();
            assert_eq!((seqs, snap.unfinished), (vec![0, 1], 0), "each once");
        }
    });
}

/// A traced submit's start (its entries claimed after its stores).
fn traced_start() -> Option<TraceStart> {
    Some(TraceStart {
        tick: ticks(),
        logs: false,
        claimed: None,
        marked: 0,
    })
}
