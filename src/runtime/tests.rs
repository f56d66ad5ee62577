//! The runtime's lifecycle against the software device (`proto::soft`): the
//! real `Runtime`, `Ticket` and `Batch`, on any machine, and under Miri.

use crate::test_support::values;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::builtin::*;
use crate::error::Error;
use crate::runtime::shared::Shared;
use crate::runtime::{Builder, Runtime, Submit};

/// A runtime on the software device, a thread per poller.
fn soft(b: Builder) -> Runtime {
    b.build_soft(true).expect("the software device starts")
}

/// Whether the runtime's memory was freed (its `Shared` dropped).
fn freed(w: &Weak<Shared>) -> bool {
    w.strong_count() == 0
}

#[test]
fn a_batch_outliving_its_runtime_never_touches_it() {
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let mut taken = rt.submit(ECHO.batch(&[1u64, 2])).unwrap();
    while taken.poll().unwrap() < 2 {
        std::thread::yield_now();
    }
    let mut empty = rt.submit(ECHO.batch(&[] as &[u64])).unwrap();
    let memory = Arc::downgrade(&rt.shared);
    drop(rt);
    // No task left to any handle: the memory is gone, and the batches must
    // not read it (Miri reports the use after free if they do).
    assert!(freed(&memory));
    assert_eq!(values(taken.wait().unwrap()), [1, 2]);
    assert!(empty.wait().unwrap().is_empty());
}

#[test]
fn the_last_share_frees_through_the_arc_pointer() {
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let ticket = rt.submit(ECHO.args(&5u64)).unwrap();
    let mut batch = rt.submit(ECHO.packed(&[6u64, 7])).unwrap();
    let memory = Arc::downgrade(&rt.shared);
    // The drop drains both tasks, then hands each holder a share: the
    // memory lives on for them.
    drop(rt);
    assert!(!freed(&memory));
    assert_eq!(ticket.wait().unwrap().value, 5);
    assert!(!freed(&memory));
    // The last share given back rebuilds the `Arc` from the handle's
    // pointer to drop it (Miri checks the pointer may do that).
    let results = batch.wait().unwrap();
    assert_eq!(results[1].as_ref().unwrap().value, 7);
    drop(batch);
    assert!(freed(&memory));
}

/// A runtime's memory watch says when its memory was given back: in use
/// while a ticket of its holds a task, given back once the last is gone.
#[test]
fn the_memory_watch_sees_the_memory_given_back() {
    use crate::runtime::MemoryState;
    let rt = soft(
        Runtime::builder()
            .capacity(4)
            .workers(1)
            .add_lane(Runtime::builder()),
    );
    let watch = rt.memory_watch();
    let ticket = rt.lane(1).unwrap().submit(ECHO.args(&9u64)).unwrap();
    assert_eq!(watch.state(), MemoryState::InUse);
    drop(rt);
    assert_eq!(watch.state(), MemoryState::InUse, "kept for the ticket");
    assert_eq!(ticket.wait().unwrap().value, 9);
    assert_eq!(watch.state(), MemoryState::GivenBack);
}

/// Health after a shutdown says the kernel stopped, as documented (on the
/// runtime and on each lane); after a cancel, that it was cancelled.
#[test]
fn health_after_a_stop_says_why() {
    let rt = soft(
        Runtime::builder()
            .capacity(4)
            .workers(1)
            .add_lane(Runtime::builder()),
    );
    rt.health().unwrap();
    rt.shutdown().unwrap();
    for health in [
        rt.health(),
        rt.lane(0).unwrap().health(),
        rt.lane(1).unwrap().health(),
    ] {
        match health {
            Err(Error::KernelStopped(why)) => assert!(why.contains("shut down"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    rt.cancel().unwrap();
    assert!(matches!(rt.health(), Err(Error::Cancelled)));
}

/// Lane 0's own callback panics are read apart from the other lanes'; the
/// runtime's count is their sum.
#[test]
fn each_lane_counts_its_own_callback_panics() {
    let rt = soft(
        Runtime::builder()
            .capacity(4)
            .workers(1)
            .add_lane(Runtime::builder()),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    for lane in [0, 1, 1] {
        let tx = tx.clone();
        rt.lane(lane)
            .unwrap()
            .submit(ECHO.args(&1u64))
            .unwrap()
            .on_complete(move |_| {
                tx.send(()).unwrap();
                panic!("a callback's panic");
            });
    }
    for _ in 0..3 {
        rx.recv().unwrap();
    }
    let settled = |rt: &Runtime| {
        (0..1000).any(|_| {
            std::thread::sleep(Duration::from_millis(1));
            rt.callback_panics() == 3
        })
    };
    assert!(settled(&rt));
    assert_eq!(rt.lane(0).unwrap().callback_panics(), 1);
    assert_eq!(rt.lane(1).unwrap().callback_panics(), 2);
}

#[test]
fn huge_durations_never_panic() {
    let rt = soft(
        Runtime::builder()
            .capacity(4)
            .workers(1)
            .start_timeout(Duration::MAX)
            .stop_timeout(Duration::MAX),
    );
    let mut t = rt.submit(ECHO.args(&3u64)).unwrap();
    assert_eq!(t.wait_timeout(Duration::MAX).unwrap().value, 3);
    // Once more, on the completed ticket.
    assert_eq!(t.wait_timeout(Duration::MAX).unwrap().value, 3);
    rt.cancel().unwrap();
    rt.shutdown().unwrap();
    let rt = soft(Runtime::builder().stop_timeout(Duration::MAX));
    rt.shutdown().unwrap();
    // Probes and stall checks with the largest intervals (a probe interval
    // past the largest is refused: waits learn of a fault only at a probe).
    assert!(matches!(
        Runtime::builder()
            .probe_interval(Duration::MAX)
            .stall_after(Duration::MAX)
            .build_soft(true),
        Err(Error::InvalidConfig(_))
    ));
    let rt = soft(
        Runtime::builder()
            .probe_interval(Duration::from_secs(1))
            .stall_after(Duration::MAX),
    );
    for _ in 0..3 {
        rt.health().unwrap();
    }
    assert_eq!(
        rt.submit(ECHO.args(&4u64)).unwrap().wait().unwrap().value,
        4
    );
    rt.shutdown().unwrap();
}

#[test]
fn submits_after_a_fault_are_the_fault_also_once_closed() {
    // A device fault latched, then the stop a call on borrowed buffers
    // makes (which closes the rings): later calls say the fault, not Closed.
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let fault = Error::DeviceFault("CUDA_ERROR_ILLEGAL_ADDRESS".into());
    let _ = rt.shared.device.fail(fault);
    let _ = rt.shared.stop(false);
    assert!(rt.shared.is_closed());
    assert!(matches!(
        rt.submit(NOP.args(&())),
        Err(Error::DeviceFault(_))
    ));
    assert!(matches!(
        rt.try_submit(NOP.args(&())),
        Err(Error::DeviceFault(_))
    ));
    assert!(matches!(
        rt.submit(ECHO.batch(&[1u64])),
        Err(Error::DeviceFault(_))
    ));
    assert!(matches!(
        rt.exclusive_producer_on(0),
        Err(Error::DeviceFault(_))
    ));
}

#[test]
fn submits_after_close_are_closed() {
    for cancel in [false, true] {
        let rt = soft(Runtime::builder().capacity(4).workers(1));
        if cancel {
            rt.cancel().unwrap();
        } else {
            rt.shutdown().unwrap();
        }
        let none: &[u64] = &[];
        assert!(matches!(rt.submit(ECHO.batch(none)), Err(Error::Closed)));
        assert!(matches!(rt.submit(ECHO.packed(none)), Err(Error::Closed)));
        assert!(matches!(rt.submit(ECHO.batch(&[1u64])), Err(Error::Closed)));
        assert!(matches!(rt.submit(NOP.args(&())), Err(Error::Closed)));
        assert!(matches!(rt.try_submit(NOP.args(&())), Err(Error::Closed)));
    }
}

#[test]
#[cfg_attr(miri, ignore = "many runtimes, each with threads: minutes under Miri")]
fn cancel_wins_over_the_liveness_probe() {
    // A supervisor probing health while a cancel stops the kernel: whoever
    // sees the kernel gone first, pending tasks report the cancel.
    for round in 0..200 {
        let rt = Arc::new(soft(
            Runtime::builder()
                .capacity(16)
                .workers(1)
                .probe_interval(Duration::from_micros(1)),
        ));
        let tickets: Vec<_> = (0..8)
            .map(|_| rt.submit(SPIN.args(&200_000u64)).unwrap())
            .collect();
        let done = Arc::new(AtomicBool::new(false));
        let prober = {
            let (rt, done) = (rt.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let _ = rt.health();
                }
            })
        };
        rt.cancel().unwrap();
        done.store(true, Ordering::Relaxed);
        prober.join().unwrap();
        for t in tickets {
            match t.wait() {
                Ok(_) | Err(Error::Cancelled) => {}
                Err(e) => panic!("round {round}: a cancelled task reported {e}"),
            }
        }
        assert!(matches!(rt.health(), Err(Error::Cancelled)));
    }
}

#[test]
#[cfg_attr(miri, ignore = "waits out a stall bound of real time")]
fn a_long_task_stalls_its_worker_whatever_its_pollers() {
    // A worker runs its tasks one after another, whatever its pollers: a
    // long task holds up the one behind it, and both waiters learn of the
    // stall, though the worker's other pollers keep beating.
    let bound = Duration::from_millis(20);
    let rt = soft(
        Runtime::builder()
            .capacity(8)
            .workers(1)
            .pollers(4)
            .stall_after(bound),
    );
    let mut long = rt.submit(SPIN.args(&300_000_000u64)).unwrap();
    let mut behind = rt.submit(ECHO.args(&9u64)).unwrap();
    for t in [&mut long, &mut behind] {
        match t.wait_timeout(Duration::from_millis(250)) {
            Err(Error::Stalled { worker: 0, silent }) => assert!(silent > bound),
            other => panic!("expected Stalled on worker 0, got {other:?}"),
        }
    }
    // Each wait reports the stall again until the long task is done; the
    // tickets stay valid.
    for (t, want) in [(&mut long, 300_000_000), (&mut behind, 9)] {
        let value = loop {
            match t.wait_timeout(Duration::from_secs(5)) {
                Ok(c) => break c.value,
                Err(Error::Stalled { worker: 0, .. }) => std::thread::sleep(bound),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(value, want);
    }
    rt.shutdown().unwrap();
}

#[test]
fn every_task_once_through_the_real_runtime() {
    // Several producers, every submit path, against the software device's
    // multi-poller workers: every result arrives, once.
    let n = if cfg!(miri) { 40 } else { 4000 };
    // Not a test of stalls: under Miri a software worker's thread can go
    // unscheduled past any bound of real time, which a wait reports as
    // `Stalled`, as documented.
    let rt = soft(
        Runtime::builder()
            .capacity(16)
            .workers(2)
            .pollers(2)
            .stall_after(Duration::MAX),
    );
    std::thread::scope(|s| {
        for p in 0..3u64 {
            let rt = &rt;
            s.spawn(move || {
                for i in 0..n {
                    let id = p << 32 | i;
                    match i % 3 {
                        0 => {
                            assert_eq!(rt.submit(ECHO.args(&id)).unwrap().wait().unwrap().value, id)
                        }
                        1 => {
                            let args = [id, id + 1];
                            let r = rt.submit(ECHO.batch(&args)).unwrap().wait().unwrap();
                            assert_eq!(r[1].as_ref().unwrap().value, id + 1);
                        }
                        _ => {
                            let args: Vec<u64> = (0..40).map(|k| id + k).collect();
                            let r = rt.submit(ECHO.packed(&args)).unwrap().wait().unwrap();
                            for (a, r) in args.iter().zip(&r) {
                                assert_eq!(r.as_ref().unwrap().value, *a);
                            }
                        }
                    }
                }
            });
        }
    });
    rt.shutdown().unwrap();
}

#[test]
fn typed_batches_check_their_op() {
    use crate::ops::TypedOp;
    let rt = soft(Runtime::builder().capacity(8).workers(2));
    let args = [[1u64, 0, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0]];
    let r = rt.submit(ECHO_48.batch(&args)).unwrap().wait().unwrap();
    assert_eq!((r[0].unwrap().value, r[1].unwrap().value), (1, 2));
    assert_eq!(
        rt.submit(SPIN.batch(&[10u64])).unwrap().wait().unwrap()[0]
            .unwrap()
            .value,
        10
    );
    assert!(matches!(
        rt.submit(AXPY.batch(&[crate::builtin::AxpyArgs::default()])),
        Err(Error::UncheckedOp(_))
    ));
    const WRONG: TypedOp<u32> = TypedOp::new(SPIN.op().0, "SPIN as u32");
    assert!(matches!(
        rt.submit(WRONG.batch(&[1])),
        Err(Error::OpMismatch { .. })
    ));
    rt.shutdown().unwrap();
}

#[test]
fn producers_name_their_ring() {
    let rt = soft(Runtime::builder().capacity(8).workers(4).rings(4));
    assert!(matches!(rt.producer_on(4), Err(Error::InvalidArgument(_))));
    let turns: Vec<usize> = (0..8).map(|_| rt.producer().ring()).collect();
    assert_eq!(turns, [0, 1, 2, 3, 0, 1, 2, 3]);
    std::thread::scope(|s| {
        for ring in 0..4 {
            let p = rt.producer_on(ring).unwrap();
            s.spawn(move || {
                let t = p.submit(ECHO.args(&(ring as u64))).unwrap();
                assert_eq!(t.ring(), ring);
                assert_eq!(t.wait().unwrap().value, ring as u64);
                let r = p.submit(ECHO.packed(&[7u64, 8])).unwrap().wait().unwrap();
                assert_eq!(r[1].unwrap().value, 8);
            });
        }
    });
    rt.shutdown().unwrap();
}

#[test]
fn a_handle_ending_its_ownership_touches_nothing_after() {
    // The runtime is dropped (and its memory freed: the ticket took its
    // task, so it holds no share) right after the ticket's compare-and-swap
    // and before the ticket's call returns: nothing on the way out may still
    // hold a reference into that memory (Miri: no protected reference to a
    // freed allocation).
    use crate::proto::queue::test_hook::{self, Point};
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let mut t = rt.submit(ECHO.args(&8u64)).unwrap();
    let memory = Arc::downgrade(&rt.shared);
    let rt = std::cell::RefCell::new(Some(rt));
    let rt = std::rc::Rc::new(rt);
    let dropper = rt.clone();
    test_hook::set(Point::OwnershipEnded, move || {
        drop(dropper.borrow_mut().take())
    });
    assert_eq!(t.wait_timeout(Duration::from_secs(10)).unwrap().value, 8);
    assert!(rt.borrow().is_none() && freed(&memory));
    // The same through a batch.
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let mut b = rt.submit(ECHO.batch(&[9u64])).unwrap();
    let memory = Arc::downgrade(&rt.shared);
    let rt = std::rc::Rc::new(std::cell::RefCell::new(Some(rt)));
    let dropper = rt.clone();
    test_hook::set(Point::OwnershipEnded, move || {
        drop(dropper.borrow_mut().take())
    });
    assert_eq!(b.wait().unwrap()[0].unwrap().value, 9);
    assert!(freed(&memory));
}

#[test]
fn an_exclusive_producer_holds_its_ring_until_dropped() {
    let rt = soft(Runtime::builder().capacity(8).workers(2).rings(2));
    {
        let p = rt.exclusive_producer_on(1).unwrap();
        assert_eq!(p.ring(), 1);
        assert!(matches!(rt.exclusive_producer_on(1), Err(Error::RingHeld)));
        assert!(matches!(
            rt.producer_on(1).unwrap().submit(NOP.args(&())),
            Err(Error::RingHeld)
        ));
        assert!(matches!(
            rt.producer_on(1).unwrap().submit(ECHO.batch(&[1u64])),
            Err(Error::RingHeld)
        ));
        let none: &[u64] = &[];
        assert!(matches!(
            rt.producer_on(1).unwrap().submit(ECHO.batch(none)),
            Err(Error::RingHeld)
        ));
        assert!(p.submit(ECHO.batch(none)).unwrap().is_empty());
        // The first free ring.
        let q = rt.exclusive_producer().unwrap();
        assert_eq!(q.ring(), 0);
        assert!(matches!(rt.exclusive_producer(), Err(Error::RingHeld)));
        // Every submit path, through more laps than the ring has slots.
        for i in 0..20u64 {
            assert_eq!(p.submit(ECHO.args(&i)).unwrap().wait().unwrap().value, i);
        }
        let args: Vec<u64> = (0..6).collect();
        let b = p.submit(ECHO.batch(&args)).unwrap().wait().unwrap();
        assert!(
            b.iter()
                .enumerate()
                .all(|(i, r)| r.as_ref().unwrap().value == i as u64)
        );
        let words: Vec<u64> = (0..100).collect();
        let b = p.submit(ECHO.packed(&words)).unwrap().wait().unwrap();
        assert!(
            b.iter()
                .zip(&words)
                .all(|(r, w)| r.as_ref().unwrap().value == *w)
        );
        assert!(matches!(
            p.submit(ECHO.batch(&[0u64; 9])),
            Err(Error::InvalidArgument(_))
        ));
        let mut t = p.try_submit(ECHO.args(&7u64)).unwrap();
        assert_eq!(t.wait_timeout(Duration::from_secs(5)).unwrap().value, 7);
        // Moved to another thread, it goes on from where it was.
        std::thread::scope(|s| {
            s.spawn(move || {
                assert_eq!(p.submit(ECHO.args(&8u64)).unwrap().wait().unwrap().value, 8);
            });
        });
    }
    // Given back: shared producers go on from the holder's tail.
    for ring in 0..2 {
        let p = rt.producer_on(ring).unwrap();
        assert_eq!(p.submit(ECHO.args(&3u64)).unwrap().wait().unwrap().value, 3);
    }
    rt.shutdown().unwrap();
    assert!(matches!(rt.exclusive_producer_on(0), Err(Error::Closed)));
}

#[test]
fn a_shutdown_drains_what_an_exclusive_producer_submitted() {
    let rt = soft(Runtime::builder().capacity(16).workers(1));
    let p = rt.exclusive_producer_on(0).unwrap();
    let tickets: Vec<_> = (0..10u64)
        .map(|i| p.submit(ECHO.args(&i)).unwrap())
        .collect();
    rt.shutdown().unwrap();
    assert!(matches!(p.submit(NOP.args(&())), Err(Error::Closed)));
    assert!(matches!(p.submit(ECHO.batch(&[1u64])), Err(Error::Closed)));
    drop(p);
    for (i, t) in tickets.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, i as u64);
    }
    assert!(matches!(
        rt.producer_on(0).unwrap().submit(NOP.args(&())),
        Err(Error::Closed)
    ));
}

#[test]
#[cfg_attr(miri, ignore = "many runtimes, each with threads: minutes under Miri")]
fn every_task_an_exclusive_producer_kept_runs_though_a_shutdown_races_it() {
    // The holder's plain tail stores against a shutdown on another thread
    // (the membarrier pair, for real): a submit either is refused with
    // Closed or its task runs and reports its own result.
    for round in 0..200u64 {
        let rt = soft(Runtime::builder().capacity(8).workers(1));
        let kept = std::thread::scope(|s| {
            let p = rt.exclusive_producer_on(0).unwrap();
            let submitter = s.spawn(move || {
                let mut kept = Vec::new();
                for i in 0.. {
                    match p.submit(ECHO.args(&(round * 1000 + i))) {
                        Ok(t) => kept.push((round * 1000 + i, t)),
                        Err(Error::Closed) => break,
                        Err(e) => panic!("round {round}: {e}"),
                    }
                }
                kept
            });
            std::thread::sleep(Duration::from_micros(round % 50));
            rt.shutdown().unwrap();
            submitter.join().unwrap()
        });
        for (want, t) in kept {
            assert_eq!(t.wait().unwrap().value, want, "round {round}");
        }
    }
}

#[test]
fn device_state_needs_a_cuda_runtime_and_an_element() {
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    assert!(matches!(rt.state(&[1u64]), Err(Error::InvalidConfig(_))));
    assert!(matches!(
        rt.state::<u64>(&[]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(rt.state(&[(); 2]), Err(Error::InvalidArgument(_))));
    // States start on 256 bytes: a type aligned to more is refused.
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C, align(512))]
    struct Wide([u8; 512]);
    assert!(matches!(
        rt.state(&[Wide([0; 512])]),
        Err(Error::InvalidArgument(_))
    ));
}

/// A COPY_IO task of `n_in` random input bytes and `n_out` output bytes
/// under a random key, submitted to `rt`, with what checks it.
fn copy_io(
    rt: &Runtime,
    rng: &mut crate::test_rng::Rng,
    n_in: usize,
    n_out: usize,
) -> (crate::Ticket, Vec<u8>, crate::builtin::CopyIoArgs) {
    let input: Vec<u8> = (0..n_in).map(|_| rng.next() as u8).collect();
    let args = crate::builtin::CopyIoArgs {
        out_len: n_out as u32,
        key: rng.next() as u32,
    };
    (rt.submit(COPY_IO.io(&args, &input)).unwrap(), input, args)
}

/// Waits for a task of [`copy_io`] and checks its output and value.
fn check_copy_io((t, input, args): (crate::Ticket, Vec<u8>, crate::builtin::CopyIoArgs)) {
    let (c, out) = t.wait_output().unwrap();
    let key = args.key as u8;
    assert_eq!(out.len(), args.out_len as usize);
    assert!(
        out.iter()
            .enumerate()
            .all(|(i, &b)| b == input.get(i).copied().unwrap_or(0) ^ key),
        "output of {} bytes from an input of {}",
        args.out_len,
        input.len()
    );
    assert_eq!(c.value, input.iter().map(|&b| u64::from(b)).sum::<u64>());
}

#[test]
fn plain_and_tagged_streams_share_slots_across_laps() {
    use crate::layout::IO_PLAIN_MIN_BYTES;
    // Streams on both sides of IO_PLAIN_MIN_BYTES, each way, on few slots
    // over many laps: plain bytes and tagged words take turns in the same
    // areas, and the software device checks every task's fresh mark
    // against the plain streams it moved (PLAIN in cuda/pkq_layout.h).
    let most = IO_PLAIN_MIN_BYTES + 700;
    let rt = soft(
        Runtime::builder()
            .capacity(2)
            .workers(1)
            .io(most, most)
            .stall_after(Duration::MAX),
    );
    let mut rng = crate::test_rng::Rng::new(90);
    let len = |rng: &mut crate::test_rng::Rng| -> usize {
        match rng.next() % 4 {
            0 => (rng.next() % 40) as usize,
            1 => IO_PLAIN_MIN_BYTES - 1 - (rng.next() % 8) as usize,
            2 => IO_PLAIN_MIN_BYTES + (rng.next() % 8) as usize,
            _ => most - (rng.next() % 700) as usize,
        }
    };
    // Mixed streams first, then three stretches of small tagged ones, each
    // longer than the fresh window (300 laps of the 2 slots), after a lap
    // of each slot whose output alone is plain (a window starts), then
    // whose input alone is (none starts): every window must start and end
    // right. Under Miri (for the shared
    // words' accesses), few and short: the windows do not end there.
    let (mixed, stretch): (usize, usize) = if cfg!(miri) { (6, 20) } else { (750, 600) };
    let tasks = mixed + 3 * stretch;
    let mut held = std::collections::VecDeque::new();
    for i in 0..tasks {
        let small = |rng: &mut crate::test_rng::Rng| (rng.next() % 40) as usize;
        let (n_in, n_out) = match i.checked_sub(mixed).map(|j| (j / stretch, j % stretch)) {
            None => (len(&mut rng), len(&mut rng)),
            Some((1, 0 | 1)) => (small(&mut rng), IO_PLAIN_MIN_BYTES),
            Some((2, 0 | 1)) => (most, small(&mut rng)),
            Some(_) => (small(&mut rng), small(&mut rng)),
        };
        held.push_back(copy_io(&rt, &mut rng, n_in, n_out));
        if held.len() > 1 {
            check_copy_io(held.pop_front().unwrap());
        }
    }
    held.into_iter().for_each(check_copy_io);
}

#[test]
fn plain_streams_across_threads_and_moved_completions() {
    use crate::layout::IO_PLAIN_MIN_BYTES;
    // Three producers on 8 slots, each holding up to 5 tickets and dropping
    // every seventh unread: producers move completions aside and free
    // detached slots, so plain outputs are marked by `poll` on every path
    // that frees a slot; the software device checks each task's mark.
    let most = IO_PLAIN_MIN_BYTES + 100;
    let rt = soft(
        Runtime::builder()
            .capacity(8)
            .workers(2)
            .io(most, most)
            .stall_after(Duration::MAX),
    );
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let rt = &rt;
            s.spawn(move || {
                let mut rng = crate::test_rng::Rng::new(80 + t);
                let mut held = std::collections::VecDeque::new();
                let len = |rng: &mut crate::test_rng::Rng| match rng.next() % 3 {
                    0 => IO_PLAIN_MIN_BYTES + (rng.next() % 101) as usize,
                    _ => (rng.next() % 30) as usize,
                };
                // Under Miri, few: each plain stream is some thousand
                // interpreted accesses.
                for i in 0..if cfg!(miri) { 7 } else { 1_500 } {
                    let (n_in, n_out) = (len(&mut rng), len(&mut rng));
                    let task = copy_io(rt, &mut rng, n_in, n_out);
                    if i % 7 == 6 {
                        drop(task);
                        continue;
                    }
                    held.push_back(task);
                    if held.len() > 5 {
                        check_copy_io(held.pop_front().unwrap());
                    }
                }
                held.into_iter().for_each(check_copy_io);
            });
        }
    });
}

#[test]
fn io_tasks_bring_back_their_output_across_laps_and_threads() {
    use crate::builtin::CopyIoArgs;
    // No stall bound: under Miri, a worker's thread can go unscheduled for
    // longer than the default while five threads share two cores.
    let rt = soft(
        Runtime::builder()
            .capacity(8)
            .workers(2)
            .io(600, 700)
            .stall_after(Duration::MAX),
    );
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let rt = &rt;
            s.spawn(move || {
                let mut rng = crate::test_rng::Rng::new(70 + t);
                let mut held = std::collections::VecDeque::new();
                for _ in 0..crate::test_rng::cases(3_000).max(20) {
                    let (n_in, n_out) = ((rng.next() % 601) as usize, (rng.next() % 701) as usize);
                    held.push_back(copy_io(rt, &mut rng, n_in, n_out));
                    if held.len() > 5 {
                        check_copy_io(held.pop_front().unwrap());
                    }
                }
                held.into_iter().for_each(check_copy_io);
            });
        }
    });
    // An output over the area fails the task; nothing else is refused by
    // the device.
    let over = CopyIoArgs {
        out_len: 701,
        key: 0,
    };
    assert!(matches!(
        rt.submit(COPY_IO.io(&over, &[1, 2, 3]))
            .unwrap()
            .wait_output(),
        Err(Error::Task(crate::TaskError {
            status: crate::TaskStatus::BadArgs,
            ..
        }))
    ));
    // Another op as an IO task: its value, no output.
    let (c, out) = rt
        .submit(ECHO.io(&9u64, &[5; 10]))
        .unwrap()
        .wait_output()
        .unwrap();
    assert_eq!((c.value, out.len()), (9, 0));
    // Refused on the host, nothing submitted.
    assert!(matches!(
        rt.submit(COPY_IO.io(&over, &[0; 601])),
        Err(Error::PayloadTooLarge { len: 601, max: 600 })
    ));
    let plain = soft(Runtime::builder().capacity(4).workers(1));
    assert!(matches!(
        plain.submit(COPY_IO.io(&over, &[])),
        Err(Error::InvalidConfig(_))
    ));
    rt.shutdown().unwrap();
}

#[test]
fn lanes_stop_with_their_runtime_and_their_tickets_outlive_it() {
    let rt = soft(
        Runtime::builder()
            .capacity(4)
            .add_lane(Runtime::builder().capacity(8).workers(2)),
    );
    assert_eq!(rt.lanes(), 2);
    assert!(rt.lane(2).is_none());
    let bulk = rt.lane(1).unwrap();
    assert_eq!(bulk.workers(), 2);
    let lane_memory = Arc::downgrade(&bulk.shared);
    let t = bulk.submit(ECHO.args(&9u64)).unwrap();
    let mut b = bulk.submit(ECHO.batch(&[1u64, 2, 3])).unwrap();
    assert_eq!(
        rt.submit(ECHO.args(&4u64)).unwrap().wait().unwrap().value,
        4
    );
    rt.health().unwrap();
    drop(rt);
    // Every lane stopped with the runtime (after draining): the handles
    // still report their results, then the lane's memory goes with them.
    assert_eq!(t.wait().unwrap().value, 9);
    assert_eq!(values(b.wait().unwrap()), [1, 2, 3]);
    drop(b);
    assert!(freed(&lane_memory));
}

#[test]
fn shutdown_and_cancel_reach_every_lane() {
    let rt = soft(Runtime::builder().add_lane(Runtime::builder()));
    rt.shutdown().unwrap();
    assert!(matches!(
        rt.lane(1).unwrap().submit(NOP.args(&())),
        Err(Error::Closed)
    ));
    let rt = soft(Runtime::builder().add_lane(Runtime::builder()));
    let _ = rt.cancel();
    assert!(matches!(
        rt.lane(1).unwrap().submit(NOP.args(&())),
        Err(Error::Closed)
    ));
}

/// A runtime of two rings of one worker each (capacity 2), whose worker 0
/// (ring 0) runs one task well past the stall bound; and ring 1's producer.
fn one_ring_stalled() -> (Runtime, crate::Ticket) {
    let rt = soft(
        Runtime::builder()
            .capacity(2)
            .workers(2)
            .rings(2)
            .stall_after(Duration::from_millis(50)),
    );
    let long = rt
        .producer_on(0)
        .unwrap()
        .submit(SPIN.args(&300_000_000u64))
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    (rt, long)
}

#[test]
#[cfg_attr(
    miri,
    ignore = "tasks of milliseconds of real time: minutes under Miri"
)]
fn submits_waiting_for_room_are_not_stalled_by_another_rings_worker() {
    // They wait on the worker whose slot they need (ring 1's), which keeps
    // completing tasks.
    let (rt, long) = one_ring_stalled();
    let p = rt.producer_on(1).unwrap();
    let tickets: Vec<_> = (0..40)
        .map(|i| p.submit(SPIN.args(&2_000_000u64)).map_err(|e| (i, e)))
        .collect::<std::result::Result<_, _>>()
        .expect("a submit waiting for room on ring 1");
    for t in tickets {
        t.wait().unwrap();
    }
    drop(long);
    rt.shutdown().ok();
}

#[test]
#[cfg_attr(
    miri,
    ignore = "tasks of milliseconds of real time: minutes under Miri"
)]
fn batches_are_not_stalled_by_another_rings_worker() {
    // A batch's wait watches the worker of its first task not taken.
    let (rt, long) = one_ring_stalled();
    let p = rt.producer_on(1).unwrap();
    for round in 0..20 {
        let mut batch = p.submit(SPIN.batch(&[2_000_000u64; 2])).unwrap();
        let results = batch
            .wait()
            .map_err(|e| (round, e))
            .expect("a batch on ring 1");
        assert_eq!(values(results).len(), 2);
    }
    drop(long);
    rt.shutdown().ok();
}

/// One worker on the software device, stopping within `stop_timeout`,
/// with a stall bound (10 s) no task of these tests reaches.
fn one_worker(capacity: usize, stop_timeout: Duration) -> Builder {
    Runtime::builder()
        .capacity(capacity)
        .workers(1)
        .stop_timeout(stop_timeout)
        .stall_after(Duration::from_secs(10))
}

#[test]
#[cfg_attr(
    miri,
    ignore = "tasks of milliseconds of real time: minutes under Miri"
)]
fn a_cancel_stops_a_shutdown_that_is_draining() {
    // Four 100 ms tasks; a shutdown drains them; a cancel 20 ms in stops
    // now: it does not wait for the drain, the tasks still queued report
    // Cancelled, and the shutdown returns.
    let rt = soft(one_worker(16, Duration::from_secs(10)));
    let tickets: Vec<_> = (0..4)
        .map(|_| rt.submit(SPIN.args(&100_000_000u64)).unwrap())
        .collect();
    std::thread::scope(|s| {
        let shutdown = s.spawn(|| rt.shutdown());
        std::thread::sleep(Duration::from_millis(20));
        let t0 = std::time::Instant::now();
        rt.cancel().unwrap();
        let took = t0.elapsed();
        // The running task finishes (at most 100 ms); the queued ones do not run.
        assert!(took < Duration::from_millis(250), "cancel took {took:?}");
        shutdown.join().unwrap().unwrap();
    });
    let cancelled = tickets
        .into_iter()
        .map(|t| t.wait())
        .filter(|r| matches!(r, Err(Error::Cancelled)))
        .count();
    assert!(cancelled >= 2, "{cancelled} tasks cancelled");
    assert!(matches!(rt.submit(NOP.args(&())), Err(Error::Closed)));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "tasks of milliseconds of real time: minutes under Miri"
)]
fn a_shutdown_whose_drain_runs_out_of_time_says_so() {
    // A 200 ms task, a 20 ms stop timeout: the drain gives up and the
    // shutdown returns KernelTimeout (not a wait's Timeout: no task is
    // still tracked); the task left behind the running one reports the
    // shutdown. A cancel after it changes nothing: it returns the same
    // outcome, and the tickets' errors stay what the shutdown said.
    let rt = soft(one_worker(16, Duration::from_millis(20)));
    let _long = rt.submit(SPIN.args(&200_000_000u64)).unwrap();
    let queued = rt.submit(NOP.args(&())).unwrap();
    let outcome = rt.shutdown();
    assert!(
        matches!(outcome, Err(Error::KernelTimeout(_))),
        "{outcome:?}"
    );
    assert!(matches!(rt.cancel(), Err(Error::KernelTimeout(_))));
    let r = queued.wait();
    assert!(matches!(r, Err(Error::KernelStopped(_))), "{r:?}");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "tasks of milliseconds of real time: minutes under Miri"
)]
fn a_cancel_after_the_drain_gave_up_leaves_the_shutdowns_outcome() {
    // The drain gives up at 100 ms; a cancel at 120 ms cuts nothing short.
    let rt = soft(one_worker(16, Duration::from_millis(100)));
    let _long = rt.submit(SPIN.args(&150_000_000u64)).unwrap();
    std::thread::scope(|s| {
        let shutdown = s.spawn(|| rt.shutdown());
        std::thread::sleep(Duration::from_millis(120));
        let cancel = rt.cancel();
        let shutdown = shutdown.join().unwrap();
        assert!(
            matches!(shutdown, Err(Error::KernelTimeout(_))),
            "{shutdown:?}"
        );
        assert!(matches!(cancel, Err(Error::KernelTimeout(_))), "{cancel:?}");
    });
}

/// A runtime with one more lane, each of one worker.
fn two_lanes() -> Runtime {
    let lane = || one_worker(64, Duration::from_secs(10));
    soft(lane().add_lane(lane()))
}

#[test]
#[cfg_attr(
    miri,
    ignore = "tasks of milliseconds of real time: minutes under Miri"
)]
fn a_cancel_reaches_every_lane_at_once() {
    // Lane 0 runs a 300 ms task; lane 1 has 40 tasks of 5 ms queued: the
    // cancel does not wait for lane 0's kernel before it tells lane 1's.
    let rt = two_lanes();
    let _long = rt.submit(SPIN.args(&300_000_000u64)).unwrap();
    let lane = rt.lane(1).unwrap();
    let tickets: Vec<_> = (0..40)
        .map(|_| lane.submit(SPIN.args(&5_000_000u64)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(10));
    rt.cancel().unwrap();
    let ran = tickets
        .into_iter()
        .map(crate::Ticket::wait)
        .filter(Result::is_ok)
        .count();
    assert!(ran <= 8, "{ran} of lane 1's 40 queued tasks ran");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "tasks of milliseconds of real time: minutes under Miri"
)]
fn a_shutdown_closes_every_lane_at_once() {
    // While lane 0 drains, lane 1 refuses new tasks too.
    let rt = two_lanes();
    let _long = rt.submit(SPIN.args(&200_000_000u64)).unwrap();
    std::thread::scope(|s| {
        let shutdown = s.spawn(|| rt.shutdown());
        std::thread::sleep(Duration::from_millis(30));
        assert!(matches!(rt.submit(NOP.args(&())), Err(Error::Closed)));
        let r = rt.lane(1).unwrap().submit(NOP.args(&()));
        assert!(matches!(r, Err(Error::Closed)), "{:?}", r.map(|_| ()));
        shutdown.join().unwrap().unwrap();
    });
}

/// The exclusive producer's doc example, on the software device: held, its
/// ring is refused to others; moved to another thread and dropped there, it
/// gives the ring back. (The example asked for two rings of one worker,
/// which `build` refuses.)
#[test]
#[cfg_attr(miri, ignore = "real-time waits on the software device")]
fn exclusive_producer_doc_example() {
    let rt = soft(Runtime::builder().workers(2).rings(2));
    let p = rt.exclusive_producer_on(1).unwrap();
    assert!(matches!(
        rt.producer_on(1).unwrap().submit(NOP.args(&())),
        Err(Error::RingHeld)
    ));
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 0..1000u64 {
                assert_eq!(p.submit(ECHO.args(&i)).unwrap().wait().unwrap().value, i);
            }
        });
    });
    rt.producer_on(1)
        .unwrap()
        .submit(NOP.args(&()))
        .unwrap()
        .wait()
        .unwrap();
    assert!(matches!(
        Runtime::builder().rings(2).build_soft(true),
        Err(Error::InvalidConfig(_))
    ));
}

/// A task that completed before a shutdown's drain ended, or that a cancel
/// let finish, reports its result: never the stop. A waiter whose last look
/// missed the completion, and that then sees the error the kernel's exit
/// latched, looks at its task once more and returns the result. Both a
/// ticket's and a batch's waits, racing a shutdown or a cancel, lap after
/// lap.
#[test]
#[cfg_attr(miri, ignore = "real-time races on the software device")]
fn a_task_completed_before_the_stop_reports_its_result() {
    // Threads that keep every core busy, so that a waiter is often
    // preempted between its last look at the task and its look at the
    // runtime's health.
    let busy = Arc::new(AtomicBool::new(true));
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let busy = busy.clone();
            std::thread::spawn(move || {
                while busy.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let mut wrong = Vec::new();
    for round in 0..2000u64 {
        let cancel = round % 2 == 1;
        let rt = Arc::new(soft(
            Runtime::builder()
                .capacity(8)
                .workers(1)
                .probe_interval(Duration::from_micros(20))
                // The hogs (and a loaded machine) may hold the software
                // device's thread off the cores past the default stall
                // bound: a wait's Stalled is not what is tested here.
                .stall_after(Duration::from_secs(3600)),
        ));
        let spin = 100_000 + (round % 50) * 2_000;
        let mut t = rt.submit(SPIN.args(&spin)).unwrap();
        let mut b = rt.submit(SPIN.batch(&[spin])).unwrap();
        let rt2 = rt.clone();
        let stop = std::thread::spawn(move || {
            if cancel {
                std::thread::sleep(Duration::from_micros(150 + (round % 37) * 3));
                rt2.cancel()
            } else {
                rt2.shutdown()
            }
        });
        let (rt_, rb) = if round % 4 < 2 {
            let rt_ = t.wait_timeout(Duration::from_secs(20)).map(|_| ());
            (rt_, b.wait_timeout(Duration::from_secs(20)).map(|_| ()))
        } else {
            let rb = b.wait_timeout(Duration::from_secs(20)).map(|_| ());
            (t.wait_timeout(Duration::from_secs(20)).map(|_| ()), rb)
        };
        let stopped = stop.join().unwrap();
        // A shutdown drains: every task completes. A cancel's errors must
        // be for tasks that did not.
        let completed_after = |r: &Result<(), Error>, done: bool| r.is_err() && done;
        let t_done = matches!(t.try_result(), Ok(Some(_)));
        let b_done = b.poll().is_ok_and(|n| n == 1);
        if (!cancel && stopped.is_ok() && (rt_.is_err() || rb.is_err()))
            || completed_after(&rt_, t_done)
            || completed_after(&rb, b_done)
        {
            wrong.push((round, rt_.err(), rb.err()));
        }
    }
    busy.store(false, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert!(
        wrong.is_empty(),
        "{} waits reported an error for a task that completed: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

#[test]
fn the_software_device_refuses_wide_lanes() {
    let b = Runtime::builder().width(crate::Width::Block { warps: 4 });
    assert!(matches!(b.build_soft(true), Err(Error::InvalidConfig(_))));
}

#[test]
fn a_batch_wait_with_a_timeout_collects_arrived_completions_within_it() {
    // Every completion has arrived before the wait: a wait whose deadline
    // has passed collects a bounded run of them, not all, and returns
    // `Timeout`; waits go on from there until the batch is done.
    use crate::runtime::batch::TAKES_PER_CLOCK_READ;
    let capacity = if cfg!(miri) { 256 } else { 1 << 12 };
    let rt = soft(Runtime::builder().capacity(capacity).workers(1));
    let n = capacity - 1;
    let mut b = rt.submit(NOP.batch(&vec![(); n])).unwrap();
    // One worker runs its tasks in order: the batch's completed first.
    rt.submit(NOP.args(&())).unwrap().wait().unwrap();
    let collected = |b: &crate::Batch| b.results().iter().filter(|r| r.is_some()).count();
    let mut calls = 0;
    loop {
        let before = collected(&b);
        calls += 1;
        match b.wait_timeout(Duration::ZERO) {
            Ok(results) => {
                assert_eq!(results.len(), n);
                assert!(results.iter().all(Result::is_ok));
                break;
            }
            Err(Error::Timeout) => {
                let got = collected(&b) - before;
                assert!(
                    (1..=2 * TAKES_PER_CLOCK_READ).contains(&got),
                    "call {calls} collected {got} past its deadline"
                );
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(
        calls > 1,
        "all {n} collected by a wait whose deadline had passed"
    );
}

#[test]
fn a_submit_whose_ring_a_fault_closes_as_it_reserves_is_the_fault() {
    // The submit's own checks pass; then, before its reservation, another
    // thread latches a device fault and the stop it leads to closes the
    // rings: the submit says the fault, as one after the stop does.
    use crate::proto::queue::test_hook::{self, Point};
    type Call = fn(&Runtime) -> Option<Error>;
    let calls: [(&str, Call); 4] = [
        ("submit", |rt| rt.submit(NOP.args(&())).err()),
        ("try_submit", |rt| rt.try_submit(NOP.args(&())).err()),
        ("batch", |rt| rt.submit(ECHO.batch(&[1u64, 2])).err()),
        ("exclusive producer", |rt| {
            let p = rt.exclusive_producer_on(0).ok()?;
            p.submit(NOP.args(&())).err()
        }),
    ];
    for (name, call) in calls {
        let rt = soft(Runtime::builder().capacity(4).workers(1));
        let shared = rt.shared.clone();
        test_hook::set(Point::BeforeReserve, move || {
            let _ = shared
                .device
                .fail(Error::DeviceFault("CUDA_ERROR_ILLEGAL_ADDRESS".into()));
            let _ = shared.stop(false);
        });
        let got = call(&rt);
        assert!(
            matches!(got, Some(Error::DeviceFault(_))),
            "{name}: {got:?}"
        );
    }
}

#[test]
fn a_batch_wait_past_its_deadline_says_what_ended_the_runtime() {
    // A fault latched with tasks still running: a wait whose deadline has
    // passed says the fault, as a ticket's does, not Timeout.
    let rt = soft(Runtime::builder().capacity(8).workers(1));
    let mut b = rt
        .submit(SPIN.batch(&[2_000_000_000u64, 2_000_000_000]))
        .unwrap();
    let mut t = rt.submit(SPIN.args(&2_000_000_000u64)).unwrap();
    let _ = rt
        .shared
        .device
        .fail(Error::DeviceFault("CUDA_ERROR_ILLEGAL_ADDRESS".into()));
    for timeout in [Duration::ZERO, Duration::from_micros(1)] {
        let got = t.wait_timeout(timeout);
        assert!(matches!(got, Err(Error::DeviceFault(_))), "ticket: {got:?}");
        let got = b.wait_timeout(timeout);
        assert!(matches!(got, Err(Error::DeviceFault(_))), "batch: {got:?}");
    }
}
