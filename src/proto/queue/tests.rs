//! The host protocol against a software device: a thread that does what
//! the resident kernel does, over heap memory.
use super::support::*;
use super::*;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Serves slots like one device worker of `workers` (ECHO folds, any other
/// op completes with value 0) until `stop`.
pub(crate) fn device_worker(
    mem: Arc<Memory>,
    geo: Geometry,
    start: u64,
    worker: u64,
    workers: u64,
    stop: Arc<AtomicBool>,
) {
    let cq = &mem.cq;
    let mut seq = seq_add(start, worker);
    while !stop.load(Ordering::Relaxed) {
        let (slot, tag) = (geo.slot(seq), geo.tag(seq));
        let Some(task) = mem.task(geo, seq) else {
            // Tests run more threads than cores: let the producers run.
            std::thread::yield_now();
            continue;
        };
        let run = |args: &[u64; 6]| {
            if task.op == crate::layout::OP_ECHO {
                crate::builtin::echo_fold(args)
            } else {
                0
            }
        };
        let value = if task.pack == 0 {
            run(&task.args)
        } else {
            // A pack: each task's argument word in, its result word out,
            // then the completion (PACKS in pkq_layout.h).
            let (pack_args, pack_results) = (&mem.pack_args, &mem.pack_results);
            // The argument words carry no tag: an acquire fence after
            // the slot's loads orders them, as the kernel's system
            // fence does (the producer put a release fence between).
            fence(Ordering::Acquire);
            for j in 0..task.pack {
                let at = slot * PACK_TASKS + j;
                let arg = pack_args.at(at).load(Ordering::Relaxed);
                pack_results
                    .at(at)
                    .store(run(&[arg, 0, 0, 0, 0, 0]), Ordering::Relaxed);
            }
            0
        };
        let cqe = Cqe {
            status: 0,
            pack: task.pack as u8,
            flags: 0,
            poller: 0,
            value,
            t_start: seq,
            t_end: seq,
        };
        for (k, w) in cqe.encode(tag).iter().enumerate() {
            cq.at(slot * CQE_WORDS + k).store(*w, Ordering::Release);
        }
        seq = seq_add(seq, workers);
    }
}

fn echo(id: u64) -> SlotImage {
    SlotImage::new(crate::layout::OP_ECHO, &id.to_le_bytes()).unwrap()
}

#[test]
fn full_only_while_the_device_has_not_completed() {
    let geo = Geometry::new(4).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    let seqs: Vec<u64> = (0..4).map(|_| q.try_reserve().unwrap()).collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    assert_eq!(q.try_reserve(), Err(Refusal::Full));
    assert_eq!(q.take(0).done(), None);
    complete(&q, 0, 9);
    // The ticket of 0 has not taken its completion: the producer moves it
    // to the overflow map instead of waiting for the ticket.
    assert_eq!(q.try_reserve(), Ok(4));
    assert_eq!(q.try_reserve(), Err(Refusal::Full));
    assert_eq!(q.take(0).done().map(|c| c.value), Some(9));
    assert!(q.overflow().entries.is_empty());
    assert_eq!(q.moved(), 1);
    // Taken directly when nobody needed the slot first.
    complete(&q, 1, 11);
    assert_eq!(q.take(1).done().map(|c| c.value), Some(11));
    assert_eq!(q.try_reserve(), Ok(5));
    assert_eq!(q.moved(), 1, "a slot its ticket freed is not a move");
}

#[test]
fn a_moved_completion_survives_the_slot_reuse() {
    let geo = Geometry::new(2).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    let a = q.try_reserve().unwrap();
    let _b = q.try_reserve().unwrap();
    complete(&q, a, 1);
    let c = q.try_reserve().unwrap(); // moves a's completion out
    assert_eq!(c, 2);
    complete(&q, c, 3); // the device overwrote the entry with c's
    assert_eq!(q.take(a).done().map(|x| x.value), Some(1));
    assert_eq!(q.take(c).done().map(|x| x.value), Some(3));
}

#[test]
fn detached_slot_is_reclaimed_once_complete() {
    let geo = Geometry::new(2).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    let a = q.try_reserve().unwrap();
    q.publish(a, &echo(1));
    let b = q.try_reserve().unwrap();
    complete(&q, b, 0);
    assert!(q.take(b).done().is_some());
    q.detach(a); // a's ticket dropped while a is in flight
    // The next number, 2, uses a's slot: refused while a is incomplete.
    assert_eq!(q.try_reserve(), Err(Refusal::Full));
    complete(&q, a, 0);
    assert_eq!(q.try_reserve(), Ok(2)); // reclaimed, nothing kept
    assert!(q.overflow().entries.is_empty());
    assert_eq!(q.moved(), 0, "a detached task's completion is not kept");
    assert_eq!(q.try_reserve(), Ok(3)); // b's slot, taken
    assert_eq!(q.try_reserve(), Err(Refusal::Full));
}

#[test]
fn dropping_a_moved_ticket_leaves_nothing_behind() {
    let geo = Geometry::new(1).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    let a = q.try_reserve().unwrap();
    complete(&q, a, 5);
    assert_eq!(q.try_reserve(), Ok(1));
    assert_eq!(q.overflow().entries.len(), 1);
    q.detach(a);
    assert!(q.overflow().entries.is_empty());
}

#[test]
fn orphaning_hands_each_live_task_one_share() {
    // Four slots: a taken, b detached, c completed and held, d held and
    // never completed, e moved to the overflow map and held.
    let geo = Geometry::new(4).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    let [a, b, c, d] = [(); 4].map(|()| q.try_reserve().unwrap());
    complete(&q, a, 1);
    assert_eq!(q.take(a).done().map(|x| x.value), Some(1));
    q.detach(b);
    complete(&q, c, 3);
    complete(&q, b, 2);
    let e = q.try_reserve().unwrap(); // a's slot, freed by its take
    complete(&q, e, 5);
    let f = q.try_reserve().unwrap(); // b's slot: detached, reclaimed
    assert_eq!(q.try_reserve(), Ok(6)); // c's slot: c's completion moves
    complete(&q, f, 6);
    assert!(q.take(f).done().is_some());
    // Live: c (moved), d, e, 6.
    let shares = AtomicU64::new(1);
    q.orphan(&shares);
    assert_eq!(shares.load(Ordering::Relaxed), 5, "the runtime's and four");
    assert_eq!(q.try_reserve(), Err(Refusal::Closed));
    let mut held = 0;
    assert_eq!(q.take(c).counted(&mut held).map(|x| x.cqe.value), Some(3));
    assert_eq!(q.take(e).counted(&mut held).map(|x| x.cqe.value), Some(5));
    assert_eq!(q.take(d), Take::Orphaned(None), "never completed");
    held += 1;
    assert_eq!(q.take(d), Take::Pending, "one share per task");
    assert!(!q.detach(d), "already counted");
    assert!(q.detach(6), "dropped unread: a share too");
    held += 1;
    assert_eq!(held, 4, "as counted, less the runtime's own");
    assert!(q.overflow().entries.is_empty());
}

#[test]
fn copies_start_as_the_slots_and_get_every_publish() {
    // Several pollers per worker each poll a copy of the slots: every
    // copy must read as not yet published at first, and as whole with
    // the task's tag after each publish, lap after lap.
    let geo = Geometry::new(2).unwrap();
    let mem = Memory::new(geo);
    let extra: Vec<Arc<Memory>> = (0..3).map(|_| Memory::new(geo)).collect();
    let q = mem
        .queue(geo, 5)
        .with_copies(extra.iter().map(|m| m.sq.clone()).collect());
    let read = |m: &Memory, seq: u64| m.task(geo, seq);
    for m in std::iter::once(&mem).chain(&extra) {
        assert!(read(m, 5).is_none() && read(m, 6).is_none());
    }
    for seq in 5..13 {
        assert_eq!(q.try_reserve(), Ok(seq));
        q.publish(seq, &echo(seq));
        for m in std::iter::once(&mem).chain(&extra) {
            let task = read(m, seq).expect("every copy whole");
            assert_eq!((task.op, task.args[0]), (crate::layout::OP_ECHO, seq));
        }
        // A task not yet complete shows every copy and the publish mark.
        let state = q.debug_state();
        assert!(
            state.contains(&format!("seq {seq} reserved")) && state.contains("copy 3: words"),
            "{state}"
        );
        assert!(
            state.contains(&format!("publish of every copy done for seq {seq}")),
            "{state}"
        );
        complete(&q, seq, seq);
        assert!(matches!(q.take(seq), Take::Done(_)));
    }
}

#[test]
fn a_slot_with_copies_waits_for_its_publish_to_finish() {
    // With copies, the device can complete a task from one copy while
    // its producer is still writing the others: a producer that laps
    // the ring must not take the slot until that publish is done, or
    // the late stores would land over the next lap's task.
    let geo = Geometry::new(2).unwrap();
    let mem = Memory::new(geo);
    let extra = Memory::new(geo);
    let q = mem
        .queue(geo, 0)
        .with_copies(vec![extra.sq.clone()].into_boxed_slice());
    for seq in 0..2 {
        assert_eq!(q.try_reserve(), Ok(seq));
    }
    q.publish(1, &echo(1));
    // Task 0 is reserved, its publish not done, and yet complete (from
    // the copy its producer wrote first); task 1 published and complete.
    complete(&q, 0, 0);
    complete(&q, 1, 1);
    // The slot of 1 is free for 3 once 1's completion is moved aside,
    // but 0's slot is not free for 2 until 0's publish is done.
    assert_eq!(q.try_reserve(), Err(Refusal::Full));
    q.publish(0, &echo(0));
    assert_eq!(q.try_reserve(), Ok(2));
    assert_eq!(q.try_reserve(), Ok(3));
    assert_eq!(q.moved(), 2);
}

#[test]
fn packs_round_trip_on_the_software_device() {
    let geo = Geometry::new(8).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let devs: Vec<_> = (0..2)
        .map(|w| {
            let (m, s) = (mem.clone(), stop.clone());
            std::thread::spawn(move || device_worker(m, geo, 0, w, 2, s))
        })
        .collect();
    let mut rng = crate::test_rng::Rng::new(5);
    for _ in 0..crate::test_rng::cases(2000) {
        let n = 1 + (rng.next() % (8 * PACK_TASKS as u64)) as usize;
        let args: Vec<u64> = (0..n).map(|_| rng.next()).collect();
        let slots = n.div_ceil(PACK_TASKS);
        let first = loop {
            match q.try_reserve_many(slots) {
                Ok(s) => break s,
                Err(_) => std::thread::yield_now(),
            }
        };
        q.publish_packs(first, crate::layout::OP_ECHO, &args);
        for (d, want) in args.chunks(PACK_TASKS).enumerate() {
            let seq = seq_add(first, d as u64);
            let done = loop {
                if let Take::Done(c) = q.take(seq) {
                    break c;
                }
                std::thread::yield_now();
            };
            assert_eq!(usize::from(done.cqe.pack), want.len());
            // ECHO of one word is the word.
            assert_eq!(done.results.as_deref(), Some(want));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for d in devs {
        d.join().unwrap();
    }
}

#[test]
fn a_moved_pack_keeps_its_results() {
    let geo = Geometry::new(1).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    let a = q.try_reserve().unwrap();
    q.publish_packs(a, crate::layout::OP_ECHO, &[1u64, 2, 3]);
    q.complete_pack(a, &[1, 2, 3]);
    // A producer needs the slot: it moves the completion, results and
    // all, before the next lap overwrites them.
    let b = q.try_reserve().unwrap();
    q.publish_packs(b, crate::layout::OP_ECHO, &[7u64]);
    q.complete_pack(b, &[7]);
    let Take::Done(moved) = q.take(a) else {
        panic!("a's completion was moved, not lost")
    };
    assert_eq!(moved.results.as_deref(), Some(&[1, 2, 3][..]));
    let Take::Done(own) = q.take(b) else {
        panic!("b completed")
    };
    assert_eq!(own.results.as_deref(), Some(&[7][..]));
    // Orphaned with its results, too.
    let c = q.try_reserve().unwrap();
    q.publish_packs(c, crate::layout::OP_NOP, &[(); 2]);
    q.complete_pack(c, &[0, 0]);
    let shares = AtomicU64::new(1);
    q.orphan(&shares);
    let Take::Orphaned(Some(o)) = q.take(c) else {
        panic!("orphaned with its completion")
    };
    assert_eq!(o.results.as_deref(), Some(&[0, 0][..]));
}

#[test]
fn batches_reserve_all_or_nothing() {
    let geo = Geometry::new(8).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    assert_eq!(q.try_reserve_many(3), Ok(0));
    assert_eq!(q.try_reserve(), Ok(3));
    assert_eq!(q.try_reserve_many(5), Err(Refusal::Full), "only 4 free");
    assert_eq!(q.try_reserve_many(4), Ok(4));
    assert_eq!(q.try_reserve_many(1), Err(Refusal::Full));
    // Tasks 1 and 2 complete (their tickets have not read them): a batch
    // moves both completions out and takes their slots once 0 is done.
    complete(&q, 1, 11);
    complete(&q, 2, 12);
    assert_eq!(q.try_reserve_many(3), Err(Refusal::Full), "slot of 0 first");
    complete(&q, 0, 10);
    assert_eq!(q.try_reserve_many(3), Ok(8));
    for (seq, v) in [(0, 10), (1, 11), (2, 12)] {
        assert_eq!(q.take(seq).done().map(|c| c.value), Some(v));
    }
    assert!(q.overflow().entries.is_empty());
    q.close();
    assert_eq!(q.try_reserve_many(1), Err(Refusal::Closed));
}

#[test]
fn close_refuses_and_counts_incomplete() {
    let geo = Geometry::new(8).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    for _ in 0..3 {
        let s = q.try_reserve().unwrap();
        q.publish(s, &echo(s));
    }
    let end = q.close();
    assert_eq!(end, 3);
    assert!(q.is_closed());
    assert_eq!(q.try_reserve(), Err(Refusal::Closed));
    assert_eq!(q.incomplete(end), 3);
}

/// Runs `tasks` ECHO tasks from `producers` threads against `workers`
/// software workers, each producer keeping up to `window` tickets, and
/// checks every result arrives exactly once. With `held`, the one
/// producer holds the ring and reserves as an exclusive producer.
fn end_to_end(
    cap: usize,
    workers: u64,
    producers: u64,
    tasks: u64,
    window: usize,
    start: u64,
    held: bool,
) {
    assert!(!held || producers == 1);
    // Miri interprets every step: a few laps of the ring still check the
    // protocol (and the wrap), in minutes rather than hours.
    let tasks = if cfg!(miri) {
        tasks.min(4 * cap as u64)
    } else {
        tasks
    };
    let geo = Geometry::new(cap).unwrap();
    let mem = Memory::new(geo);
    let q = Arc::new(mem.queue(geo, start));
    let stop = Arc::new(AtomicBool::new(false));
    let devs: Vec<_> = (0..workers)
        .map(|w| {
            let (m, s) = (mem.clone(), stop.clone());
            std::thread::spawn(move || device_worker(m, geo, start, w, workers, s))
        })
        .collect();
    let seen: Arc<Vec<AtomicU64>> = Arc::new((0..tasks).map(|_| AtomicU64::new(0)).collect());
    if held {
        q.hold().unwrap();
    }
    let prods: Vec<_> = (0..producers)
        .map(|p| {
            let (q, seen) = (q.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut inflight = std::collections::VecDeque::new();
                let reap = |inflight: &mut std::collections::VecDeque<(u64, u64)>| {
                    let (seq, id) = inflight.pop_front().unwrap();
                    let c = loop {
                        if let Some(c) = q.take(seq).done() {
                            break c;
                        }
                        std::thread::yield_now();
                    };
                    assert_eq!(c.value, crate::builtin::echo_fold(&[id, 0, 0, 0, 0, 0]));
                    seen[id as usize].fetch_add(1, Ordering::Relaxed);
                };
                for id in (p..tasks).step_by(producers as usize) {
                    let seq = loop {
                        let reserved = if held {
                            q.try_reserve_held(1)
                        } else {
                            q.try_reserve()
                        };
                        match reserved {
                            Ok(s) => break s,
                            Err(Refusal::Full) if !inflight.is_empty() => reap(&mut inflight),
                            Err(Refusal::Full) => std::thread::yield_now(),
                            Err(r) => unreachable!("{r:?}"),
                        }
                    };
                    q.publish(seq, &echo(id));
                    inflight.push_back((seq, id));
                    if inflight.len() >= window {
                        reap(&mut inflight);
                    }
                }
                while !inflight.is_empty() {
                    reap(&mut inflight);
                }
            })
        })
        .collect();
    for p in prods {
        p.join().unwrap();
    }
    if held {
        q.release();
    }
    let end = q.close();
    assert_eq!(end, seq_add(start, tasks), "every reservation counted once");
    assert_eq!(q.incomplete(end), 0);
    stop.store(true, Ordering::Relaxed);
    for d in devs {
        d.join().unwrap();
    }
    assert!(
        seen.iter().all(|c| c.load(Ordering::Relaxed) == 1),
        "every task exactly once"
    );
}

#[test]
fn software_device_one_producer_many_laps() {
    end_to_end(64, 1, 1, 20_000, 48, 0, false);
}

#[test]
fn software_device_many_producers_many_workers() {
    end_to_end(64, 4, 4, 40_000, 8, 0, false);
}

#[test]
fn producers_holding_more_tickets_than_slots_never_deadlock() {
    // 4 producers x 40 held tickets > 64 slots: a laggard's completed,
    // unread tickets must not stop the ring.
    end_to_end(64, 2, 4, 40_000, 40, 0, false);
}

#[test]
fn software_device_across_the_sequence_wrap() {
    end_to_end(16, 2, 2, 5_000, 4, SEQ_MASK - 1000, false);
}

#[test]
fn an_exclusive_producer_across_the_sequence_wrap() {
    end_to_end(16, 2, 1, 5_000, 4, SEQ_MASK - 1000, true);
}

#[test]
fn an_output_counts_only_once_every_word_landed() {
    let (q, _h2d, out) = io_queue(2, (32, 100));
    let (at, tag) = (0, q.geo.tag(0));
    let seq = q.try_reserve().unwrap();
    let image = q.write_input(
        seq,
        &[1, 2, 3],
        SlotImage::new(10, &[]).unwrap().with_input(3),
    );
    q.publish(seq, &image);
    let bytes: Vec<u8> = (0..40).collect();
    // The entry landed first; one word of the output still missing.
    complete_io(&q, &out, seq, &bytes, true);
    out.at(at + 2)
        .store(tagged(0, tag.wrapping_sub(1)), Ordering::Relaxed);
    assert_eq!(q.poll(seq), None, "not complete while a word is missing");
    assert_eq!(q.try_reserve(), Ok(1));
    assert_eq!(
        q.try_reserve(),
        Err(Refusal::Full),
        "nor freed for the next lap"
    );
    complete_io(&q, &out, seq, &bytes, true);
    let Take::Done(done) = q.take(seq) else {
        panic!("complete now")
    };
    assert_eq!(done.output.as_deref(), Some(&bytes[..]));
    // Moved aside by a producer of the next lap, it keeps its output.
    complete_io(&q, &out, 1, &[7; 9], false);
    let s2 = q.try_reserve().unwrap();
    q.publish(s2, &SlotImage::new(10, &[]).unwrap());
    assert_eq!(q.try_reserve(), Ok(3), "slot 1 freed, its output moved");
    let Take::Done(moved) = q.take(1) else {
        panic!("moved")
    };
    assert_eq!(moved.output.as_deref(), Some(&[7u8; 9][..]));
}

#[test]
fn an_output_of_256_laps_before_is_not_taken_for_this_laps() {
    // The tag is the lap's low byte: a slot whose lap 0 left an output
    // and whose lap 256 completes before its own output lands must not
    // hand lap 0's output to lap 256.
    let (q, _h2d, out) = io_queue(1, (8, 64));
    let io_task = || SlotImage::new(10, &[]).unwrap().with_input(0);
    let seq = q.try_reserve().unwrap();
    q.publish(seq, &io_task());
    complete_io(&q, &out, seq, &[9; 40], false);
    assert!(matches!(q.take(seq), Take::Done(_)));
    for _ in 1..256 {
        let seq = q.try_reserve().unwrap();
        q.publish(seq, &SlotImage::new(0, &[]).unwrap());
        complete(&q, seq, 0);
        assert!(matches!(q.take(seq), Take::Done(_)));
    }
    let seq = q.try_reserve().unwrap();
    assert_eq!(seq, 256);
    q.publish(seq, &io_task());
    // Only the entry has landed.
    q.complete(
        seq,
        &Cqe {
            flags: crate::layout::CQE_OUTPUT,
            poller: 0,
            ..Cqe::ok(0)
        },
    );
    assert_eq!(
        q.take(seq),
        Take::Pending,
        "lap 0's output is not lap 256's"
    );
    complete_io(&q, &out, seq, &[4; 3], true);
    let Take::Done(done) = q.take(seq) else {
        panic!("complete now")
    };
    assert_eq!(done.output.as_deref(), Some(&[4u8; 3][..]));
}

#[test]
fn a_held_full_ring_once_closed_is_closed_not_full() {
    let geo = Geometry::new(4).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    q.hold().unwrap();
    assert_eq!(q.try_reserve_held(4), Ok(0));
    assert_eq!(q.try_reserve_held(1), Err(Refusal::Full));
    assert_eq!(q.close(), 4);
    assert_eq!(q.try_reserve_held(1), Err(Refusal::Closed));
    assert_eq!(q.hold(), Err(Refusal::Closed), "closed comes before held");
}

#[test]
fn a_held_ring_refuses_everyone_else_until_released() {
    let geo = Geometry::new(4).unwrap();
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0);
    assert_eq!(q.try_reserve(), Ok(0));
    q.hold().unwrap();
    assert_eq!(q.hold(), Err(Refusal::Held), "one holder at a time");
    assert_eq!(q.try_reserve(), Err(Refusal::Held));
    assert_eq!(q.try_reserve_many(2), Err(Refusal::Held));
    assert_eq!(
        q.try_reserve_held(2),
        Ok(1),
        "the holder goes on from the tail"
    );
    q.release();
    assert_eq!(q.try_reserve(), Ok(3), "and hands its tail back");
    q.hold().unwrap();
    assert_eq!(
        q.try_reserve_held(1),
        Err(Refusal::Full),
        "slot 0 is in flight"
    );
    complete(&q, 0, 1);
    assert_eq!(q.try_reserve_held(1), Ok(4));
    // Closed while held: counted, then refused, for good.
    assert_eq!(q.close(), 5);
    assert_eq!(q.close(), 5, "every closer gets the same end");
    complete(&q, 1, 1);
    assert_eq!(q.try_reserve_held(1), Err(Refusal::Closed));
    q.release();
    assert_eq!(q.try_reserve(), Err(Refusal::Closed));
    assert_eq!(q.hold(), Err(Refusal::Closed));
    assert_eq!(q.incomplete(5), 3);
}

/// A traced queue of `slots` slots and its recorder (on).
fn traced(slots: usize) -> (Arc<Recorder>, Arc<Memory>, Geometry) {
    let geo = Geometry::new(slots).unwrap();
    let recorder = Arc::new(Recorder::new(64));
    assert!(recorder.set_on(true));
    (recorder, Memory::new(geo), geo)
}

/// A traced submit of `id`, as `runtime::submit` does it: the clock,
/// the reservation, the slot's stores, then its entry.
fn submit_traced(q: &Queue, id: u64) -> (u64, EntryId) {
    let tick = q.trace_tick();
    assert!(tick.is_some());
    let seq = q.try_reserve().unwrap();
    q.publish_at(seq, &echo(id), true);
    (seq, q.trace_open(seq, 1, crate::layout::OP_ECHO, tick))
}

#[test]
fn a_completion_is_never_seen_before_it_landed() {
    // The device's completion lands while the holder's thread is held up
    // (an interrupt, a preemption) just before its look: the record's seen
    // time must still come after the landing, else the trace shows the
    // host seeing a completion before the device wrote it.
    use crate::proto::queue::test_hook::{self, Point};
    use std::cell::Cell;
    use std::rc::Rc;
    let (recorder, mem, geo) = traced(4);
    let q = Arc::new(mem.queue(geo, 0).with_trace(recorder.clone(), 0, 0, false));
    let (seq, entry) = submit_traced(&q, 1);
    let landed = Rc::new(Cell::new(0));
    let (device, at) = (q.clone(), landed.clone());
    test_hook::set(Point::BeforeLook, move || {
        complete(&device, seq, 7);
        at.set(crate::sync::ticks());
    });
    assert_eq!(q.take_traced(seq, entry).done().map(|c| c.value), Some(7));
    let records = recorder.snapshot().records;
    assert_eq!(records.len(), 1);
    assert!(
        records[0].closed.seen_tick >= landed.get(),
        "seen at tick {}, landed at {}",
        records[0].closed.seen_tick,
        landed.get()
    );
}

#[test]
fn a_traced_task_is_recorded_once_on_every_path_to_its_completion() {
    let (recorder, mem, geo) = traced(2);
    let q = mem.queue(geo, 0).with_trace(recorder.clone(), 1, 3, false);
    // Taken from its slot.
    let (a, ea) = submit_traced(&q, 1);
    let before = crate::sync::ticks();
    complete(&q, a, 1);
    assert!(q.take_traced(a, ea).done().is_some());
    // Moved aside by the producer that needed its slot, then taken from
    // the overflow map by its holder.
    let (b, eb) = submit_traced(&q, 2);
    let (c, ec) = submit_traced(&q, 3);
    complete(&q, b, 2);
    let (d, ed) = submit_traced(&q, 4); // b's slot: b's completion moved
    assert_eq!(q.moved(), 1);
    assert!(q.take_traced(b, eb).done().is_some());
    // Dropped unread in flight: recorded by the producer that frees its
    // slot once it completed.
    q.detach_traced(c, ec);
    complete(&q, c, 3);
    // Switched off after its submit: still recorded (on at its submit).
    recorder.set_on(false);
    complete(&q, d, 4);
    assert!(q.take_traced(d, ed).done().is_some());
    assert_eq!(q.try_reserve(), Ok(4)); // c's slot, freed
    let snap = recorder.snapshot();
    assert_eq!((snap.dropped, snap.unfinished), (0, 0));
    let mut seqs: Vec<u64> = snap.records.iter().map(|r| r.opened.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, [a, b, c, d], "every task once");
    for r in &snap.records {
        let (o, c) = (&r.opened, &r.closed);
        assert_eq!((o.lane, o.ring, o.op), (1, 3, crate::layout::OP_ECHO));
        assert!(c.seen_tick >= o.submit_tick, "{r:?}");
        assert_eq!((c.status, c.tasks), (0, 1));
    }
    let ra = snap.records.iter().find(|r| r.opened.seq == a).unwrap();
    assert!(
        ra.opened.submit_tick <= before && ra.closed.seen_tick >= before,
        "{ra:?}"
    );
    // Off: nothing claimed.
    assert_eq!(q.trace_tick(), None);
    assert_eq!(q.trace_open(4, 1, 0, None), EntryId::NONE);
}

/// A queue of `geo` traced by a recorder of `capacity` records, switched
/// on, as a ring whose device logs blocks where `logs`; and a reader of
/// the trace bit of a slot's header.
fn traced_ring(geo: Geometry, capacity: usize, logs: bool) -> (Arc<Recorder>, Arc<Memory>, Queue) {
    let recorder = Arc::new(Recorder::new(capacity));
    assert!(recorder.set_on(true));
    let mem = Memory::new(geo);
    let q = mem.queue(geo, 0).with_trace(recorder.clone(), 0, 0, logs);
    (recorder, mem, q)
}

/// The trace bit of `seq`'s header.
fn header_bit(mem: &Memory, geo: Geometry, seq: u64) -> u64 {
    let word = mem
        .sq
        .at(geo.slot(seq) * SLOT_WORDS)
        .load(Ordering::Relaxed);
    (word >> crate::layout::HEADER_TRACE_BIT) & 1
}

/// A traced submit of one ECHO, as `Task`'s: its sequence number.
fn submit_one(q: &Queue) -> u64 {
    let start = q.trace_tick();
    assert!(start.is_some(), "on");
    let seq = q.try_reserve().unwrap();
    let start = q.trace_claim(start, 1);
    q.publish_at(seq, &echo(seq), TraceStart::marked(start) != 0);
    q.trace_open(seq, 1, crate::layout::OP_ECHO, start);
    seq
}

#[test]
fn tasks_past_a_full_trace_buffer_are_counted_but_not_marked_for_the_devices_log() {
    // A wide lane logs the blocks of each task whose header carries the
    // trace bit into a log of its last traced tasks: a task whose record
    // is dropped must not carry it, or its blocks evict those of records
    // kept.
    let geo = Geometry::new(8).unwrap();
    let (recorder, mem, q) = traced_ring(geo, 2, true);
    let kept = [submit_one(&q), submit_one(&q)];
    let dropped = [submit_one(&q), submit_one(&q)];
    for seq in kept {
        assert_eq!(header_bit(&mem, geo, seq), 1, "kept {seq}");
    }
    for seq in dropped {
        assert_eq!(header_bit(&mem, geo, seq), 0, "dropped {seq}");
    }
    assert!(recorder.is_on(), "still on: its drops are counted");
    assert_eq!(recorder.snapshot().dropped, 2);
    // Switched on again (and off and on): still full, never marked.
    assert!(recorder.set_on(true));
    assert!(recorder.set_on(false));
    assert_eq!(q.trace_tick(), None);
    assert!(recorder.set_on(true));
    let seq = submit_one(&q);
    assert_eq!(header_bit(&mem, geo, seq), 0);
    assert_eq!(recorder.snapshot().dropped, 3);
}

#[test]
fn a_batch_that_runs_past_the_end_of_the_trace_buffer_marks_only_its_kept_slots() {
    // Two entries left, a run of six slots: the first two are kept (and
    // marked for the device's log), the other four only counted.
    let geo = Geometry::new(8).unwrap();
    let (recorder, mem, q) = traced_ring(geo, 2, true);
    let start = q.trace_tick();
    let first = q.try_reserve_many(6).unwrap();
    let start = q.trace_claim(start, 6);
    let args: Vec<u64> = (0..6).collect();
    q.publish_run(
        first,
        crate::layout::OP_ECHO,
        &args,
        TraceStart::marked(start),
    );
    q.trace_open(first, 6, crate::layout::OP_ECHO, start);
    let bits: Vec<u64> = (0..6).map(|k| header_bit(&mem, geo, first + k)).collect();
    assert_eq!(bits, [1, 1, 0, 0, 0, 0]);
    let snap = recorder.snapshot();
    assert_eq!((snap.records.len(), snap.dropped), (0, 4));
    assert_eq!(snap.unfinished, 2, "opened, not yet taken");
}

#[test]
fn a_ring_whose_device_logs_no_blocks_marks_no_slot_and_claims_after_its_stores() {
    let geo = Geometry::new(8).unwrap();
    let (recorder, mem, q) = traced_ring(geo, 4, false);
    let start = q.trace_tick();
    assert_eq!(
        q.trace_claim(start, 1),
        start,
        "nothing claimed before the stores"
    );
    let seq = submit_one(&q);
    assert_eq!(header_bit(&mem, geo, seq), 0);
    assert_eq!(
        recorder.snapshot().unfinished,
        1,
        "claimed and opened after"
    );
}

/// Completes `seq` with device times `t` and `t + 1`.
fn complete_at(q: &Queue, seq: u64, t: u64) {
    q.complete(
        seq,
        &Cqe {
            t_start: t,
            t_end: t + 1,
            ..Cqe::ok(seq)
        },
    );
}

/// Task 0 of a one-slot ring completes and is moved aside by the next
/// lap's producer; 255 laps later its slot holds lap 256's completion,
/// whose tag is lap 0's (a tag is a lap's low eight bits). Returns the
/// holder's sequence number and entry.
fn moved_and_lapped(q: &Queue) -> (u64, EntryId) {
    let (a, ea) = submit_traced(q, 1);
    complete_at(q, a, 1_000);
    for lap in 1..=256u64 {
        let s = q.try_reserve().unwrap();
        assert_eq!(s, lap);
        q.publish(s, &echo(s));
        complete_at(q, s, 50_000 + s);
        if lap < 256 {
            assert!(q.take(s).done().is_some());
        }
    }
    assert_eq!(q.moved(), 1);
    (a, ea)
}

#[test]
fn a_moved_completion_looked_at_laps_later_is_recorded_as_its_own() {
    for dropped in [false, true] {
        let (recorder, mem, geo) = traced(1);
        let q = mem.queue(geo, 0).with_trace(recorder.clone(), 0, 0, false);
        let (a, ea) = moved_and_lapped(&q);
        if dropped {
            assert!(!q.detach_traced(a, ea));
        } else {
            let got = q.take_traced(a, ea).done().expect("from the overflow map");
            assert_eq!(got.t_start, 1_000, "the ticket gets its own completion");
        }
        let records = recorder.snapshot().records;
        assert_eq!(records.len(), 1);
        let c = &records[0].closed;
        assert_eq!(
            (c.device_start_ns, c.device_end_ns),
            (1_000, 1_001),
            "dropped {dropped}: the record holds lap 256's completion: {c:?}"
        );
    }
}
