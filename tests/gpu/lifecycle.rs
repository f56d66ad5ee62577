//! The lifecycle of runtimes and their handles: shutdown, drop, cancel,
//! stalls and liveness, refusals of bad settings and input.

use super::*;

pub(crate) fn shutdown_with_tasks_in_flight() {
    let rt = Runtime::builder().capacity(8192).build().unwrap();
    let mut rng = Rng::new(3);
    let tickets: Vec<_> = (0..8000u64)
        .map(|id| {
            let args = echo_args(&mut rng, id);
            (rt.submit(ECHO_48.args(&args)).unwrap(), echo_fold(&args))
        })
        .collect();
    let t0 = Instant::now();
    rt.shutdown().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        t0.elapsed()
    );
    assert!(matches!(rt.submit(NOP.args(&())), Err(Error::Closed)));
    for (t, want) in tickets {
        assert_eq!(t.wait().unwrap().value, want);
    }
}

pub(crate) fn drop_with_tickets_alive() {
    // Tickets and batches count no reference to the runtime: its memory
    // must live exactly as long as the last of them that still needs it.
    let rt = Runtime::builder().capacity(4096).build().unwrap();
    let memory = rt.memory_watch();
    let tickets: Vec<_> = (0..3000u64)
        .map(|i| rt.submit(ECHO.args(&i)).unwrap())
        .collect();
    let args: Vec<u64> = (3000..3500u64).collect();
    let mut batch = rt.submit(ECHO.batch(&args)).unwrap();
    let unread = rt.submit(ECHO.args(&1u64)).unwrap();
    let mut early = rt.submit(ECHO.args(&2u64)).unwrap();
    let wait = Duration::from_secs(5);
    assert_eq!(early.wait_timeout(wait).unwrap().value, 2);
    drop(rt);
    assert_eq!(memory.state(), MemoryState::InUse, "kept for its tickets");
    drop(unread);
    for (i, t) in tickets.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, i as u64);
    }
    assert_eq!(memory.state(), MemoryState::InUse, "kept for the batch");
    let results = batch.wait().unwrap();
    assert_eq!(results.len(), args.len(), "every task's result");
    for (r, a) in results.iter().zip(&args) {
        assert_eq!(r.unwrap().value, *a);
    }
    // A batch keeps its shares until it is dropped (it may be waited on
    // again).
    assert_eq!(
        memory.state(),
        MemoryState::InUse,
        "kept until the batch goes"
    );
    drop(batch);
    assert_eq!(
        memory.state(),
        MemoryState::GivenBack,
        "freed with the last"
    );
    // A ticket taken before the drop keeps its result, and no share.
    assert_eq!(early.wait_timeout(wait).unwrap().value, 2);
}

pub(crate) fn dropped_tickets_free_their_slots() {
    let rt = Runtime::builder().capacity(64).build().unwrap();
    for round in 0..200u64 {
        // Drop 40 tickets unread, then make sure the ring still cycles.
        for i in 0..40u64 {
            drop(rt.submit(ECHO.args(&(round * 100 + i))).unwrap());
        }
        let v = rt.submit(ECHO.args(&round)).unwrap().wait().unwrap().value;
        assert_eq!(v, round);
    }
    rt.shutdown().unwrap();
}

pub(crate) fn two_runtimes_in_sequence() {
    for round in 0..2u64 {
        let rt = Runtime::builder().capacity(256).build().unwrap();
        for i in 0..10_000u64 {
            assert_eq!(
                rt.submit(ECHO.args(&(i ^ round)))
                    .unwrap()
                    .wait()
                    .unwrap()
                    .value,
                i ^ round
            );
        }
        drop(rt);
    }
}

pub(crate) fn runtimes_side_by_side() {
    // The driver waits for running kernels before it loads a module (a
    // resident kernel never ends): a second runtime, and a runtime started
    // and stopped beside the others, use what the first runtime loaded, and
    // anything new is refused rather than waited for. (A floor beside a
    // runtime: pkq-bench's tests.)
    if under_sanitizer() {
        // compute-sanitizer runs one kernel at a time: the second resident
        // kernel would wait for the first forever.
        return skip("two resident kernels at once, which a sanitizer runs one after the other");
    }
    let a = Runtime::builder().workers(2).capacity(256).build().unwrap();
    let b = Runtime::builder().workers(2).capacity(256).build().unwrap();
    let echo_on = |rt: &pkq::Lane, salt: u64| {
        for i in 0..20_000u64 {
            let v = (i << 1) | salt;
            assert_eq!(rt.submit(ECHO.args(&v)).unwrap().wait().unwrap().value, v);
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| echo_on(&a, 0));
        s.spawn(|| echo_on(&b, 1));
    });
    let image = pkq::kernel_image().unwrap();
    match Runtime::builder()
        .module(image, "no_kernel_loaded_yet")
        .build()
    {
        Err(Error::InvalidConfig(why)) => {
            assert!(why.contains("while a pkq kernel"), "{why}");
            println!("    refused: {why}");
        }
        other => panic!("a new module while runtimes run: {other:?}"),
    }
    b.shutdown().unwrap();
    let c = Runtime::builder().workers(1).capacity(64).build().unwrap();
    echo_on(&c, 1);
    echo_on(&a, 0);
    a.shutdown().unwrap();
    c.shutdown().unwrap();
}

pub(crate) fn bad_input_is_a_typed_error() {
    let count = pkq::device_count().unwrap();
    assert!(matches!(
        Runtime::builder().device(count + 3).build(),
        Err(Error::DeviceOutOfRange { index, count: c }) if index == count + 3 && c == count
    ));
    assert!(matches!(
        Runtime::builder().capacity(1000).build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        Runtime::builder().workers(3).build(),
        Err(Error::InvalidConfig(_))
    ));
    let rt = Runtime::builder().build().unwrap();
    assert!(matches!(
        rt.submit(Task::raw(ECHO_OP, &[0u8; ARGS_BYTES + 1])),
        Err(Error::PayloadTooLarge { len: 49, max: 48 })
    ));
    assert!(matches!(
        rt.submit(AXPY.args(&AxpyArgs::default())),
        Err(Error::UncheckedOp(AXPY_OP))
    ));
    // A listed op's arguments are what its table says: SPIN takes a u64,
    // NOP nothing; ECHO up to 48 bytes.
    for refused in [
        rt.submit(Task::raw(SPIN_OP, bytemuck::bytes_of(&1u32)))
            .map(drop),
        rt.submit(Task::raw(NOP_OP, bytemuck::bytes_of(&1u64)))
            .map(drop),
        rt.submit(Tasks::raw_batch(SPIN_OP, &[[1u64; 2]])).map(drop),
        rt.submit(Tasks::raw_packed(NOP_OP, &[1u8])).map(drop),
    ] {
        assert!(
            matches!(refused, Err(Error::OpMismatch { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(
        rt.submit(Task::raw(ECHO_OP, bytemuck::bytes_of(&7u16)))
            .unwrap()
            .wait()
            .unwrap()
            .value,
        7
    );
    assert!(matches!(
        rt.submit(Task::raw(Op(999), bytemuck::bytes_of(&())))
            .unwrap()
            .wait(),
        Err(Error::Task(TaskError {
            op: Op(999),
            status: TaskStatus::UnknownOp
        }))
    ));
    // Still serving after every refusal.
    assert_eq!(
        rt.submit(ECHO.args(&77u64)).unwrap().wait().unwrap().value,
        77
    );
    rt.shutdown().unwrap();
    assert!(matches!(rt.submit(NOP.args(&())), Err(Error::Closed)));
}

pub(crate) fn liveness_probes_from_many_threads() {
    // Probe on every check (interval 0) from 8 threads at once: probing is
    // shared, never mistaken for a fault, and costs no correctness.
    let rt = Runtime::builder()
        .capacity(64)
        .workers(2)
        .probe_interval(Duration::ZERO)
        .build()
        .unwrap();
    pump_from_threads(&rt, 80_000, 8, 16, 500);
    rt.shutdown().unwrap();
}

pub(crate) fn idle_backoff_wakes_up_for_each_task() {
    let rt = Runtime::builder()
        .idle(IdlePolicy::Backoff {
            spin: Duration::from_micros(10),
            max_sleep: Duration::from_micros(50),
        })
        .pollers(2)
        .build()
        .unwrap();
    let mut worst = Duration::ZERO;
    for i in 0..300u64 {
        std::thread::sleep(Duration::from_micros(300));
        let t0 = Instant::now();
        assert_eq!(rt.submit(ECHO.args(&i)).unwrap().wait().unwrap().value, i);
        worst = worst.max(t0.elapsed());
    }
    println!("    slowest wake-up round trip: {worst:?}");
    assert!(
        worst < Duration::from_millis(50),
        "a sleeping worker took {worst:?} to answer"
    );
    rt.shutdown().unwrap();
}

pub(crate) fn idle_quiet_pollers_serve_every_task() {
    // Eight pollers that go quiet after 20 µs without a task: bursts after
    // pauses on both sides of that, from two threads, every result checked
    // and counted; a 5 ms task with a burst queued behind it (the pollers go
    // quiet while it runs); a wait after 100 ms of quiet with a 30 ms stall
    // bound (quiet pollers beat); a shutdown while quiet.
    let rt = Runtime::builder()
        .capacity(64)
        .idle(IdlePolicy::Quiet {
            after: Duration::from_micros(20),
        })
        .stall_after(Duration::from_millis(30))
        .build()
        .unwrap();
    let seen = counters(2 * 400 * 16);
    let sent = AtomicU64::new(0);
    std::thread::scope(|s| {
        for thread in 0..2u64 {
            let (rt, seen, sent) = (&rt, &seen, &sent);
            s.spawn(move || {
                let mut rng = Rng::new(40 + thread);
                for round in 0..400u64 {
                    std::thread::sleep(Duration::from_micros(rng.below(120)));
                    let n = 1 + rng.below(16);
                    sent.fetch_add(n, Ordering::Relaxed);
                    let tickets: Vec<_> = (0..n)
                        .map(|i| {
                            let id = (thread * 400 + round) * 16 + i;
                            let args = echo_args(&mut rng, id);
                            (
                                id,
                                rt.submit(ECHO_48.args(&args)).unwrap(),
                                echo_fold(&args),
                            )
                        })
                        .collect();
                    for (id, t, want) in tickets {
                        assert_eq!(t.wait().unwrap().value, want, "task {id}");
                        seen[id as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let done: u64 = seen.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) <= 1));
    assert_eq!(done, sent.load(Ordering::Relaxed));
    let long = rt.submit(SPIN.args(&5_000_000u64)).unwrap();
    let queued: Vec<_> = (0..32u64)
        .map(|i| rt.submit(ECHO.args(&i)).unwrap())
        .collect();
    assert!(long.wait().unwrap().value >= 5_000_000);
    for (i, t) in queued.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, i as u64);
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        rt.submit(ECHO.args(&9u64)).unwrap().wait().unwrap().value,
        9
    );
    std::thread::sleep(Duration::from_millis(5));
    let t0 = Instant::now();
    rt.shutdown().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "shutdown took {:?}",
        t0.elapsed()
    );
}

pub(crate) fn quiet_pollers_read_their_stop_words() {
    // A 300 ms task on poller 0 (the one poller that never goes quiet); the
    // other seven go quiet after 20 µs. A cancel 50 ms in: the quiet
    // pollers read their own stop words and stop while the task still runs,
    // though no other warp wakes them. Which poller takes the task is a
    // race: runtimes are built until poller 0 took it (its state word still
    // says position 0, the others' beats say 1).
    // "state 2": PKQ_WORKER_STOPPED (cuda/pkq_layout.h).
    let stopped = |rt: &pkq::Lane| rt.debug_state().matches("state 2,").count();
    for attempt in 0..64 {
        let rt = Runtime::builder()
            .idle(IdlePolicy::Quiet {
                after: Duration::from_micros(20),
            })
            .stall_after(Duration::from_secs(10))
            .build()
            .unwrap();
        let long = rt.submit(SPIN.args(&300_000_000u64)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let state = rt.debug_state();
        let runner: Vec<&str> = state.lines().filter(|l| l.contains("position 0")).collect();
        if runner != ["  worker 0 poller 0: state 1, position 0"] {
            rt.cancel().unwrap();
            continue;
        }
        assert_eq!(stopped(&rt), 0, "{state}");
        std::thread::scope(|s| {
            let t0 = Instant::now();
            let cancel = s.spawn(|| rt.cancel());
            let mut seen = 0;
            while t0.elapsed() < Duration::from_millis(150) && seen < 7 {
                std::thread::sleep(Duration::from_millis(1));
                seen = stopped(&rt);
            }
            assert_eq!(
                seen,
                7,
                "pollers stopped while the task ran: {}",
                rt.debug_state()
            );
            cancel.join().unwrap().unwrap();
        });
        assert!(long.wait().unwrap().value >= 300_000_000);
        println!(
            "    poller 0 took the task at attempt {attempt}; 7 quiet pollers stopped on their own"
        );
        return;
    }
    panic!("poller 0 never took the task in 64 runtimes");
}

pub(crate) fn spin_op_and_wait_timeout_keeps_the_task() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let mut t = rt.submit(SPIN.args(&50_000_000u64)).unwrap();
    let t0 = Instant::now();
    assert!(matches!(
        t.wait_timeout(Duration::from_millis(5)),
        Err(Error::Timeout)
    ));
    // Still tracked: the same ticket completes.
    let c = t.wait_timeout(Duration::from_secs(5)).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(40));
    assert!(c.value >= 50_000_000 && c.value < 60_000_000, "{c:?}");
    assert!(c.device_time() >= Duration::from_millis(49));
    assert!(matches!(
        rt.submit(SPIN.args(&(SPIN_MAX_NS + 1))).unwrap().wait(),
        Err(Error::Task(TaskError {
            op: SPIN_OP,
            status: TaskStatus::BadArgs
        }))
    ));
    rt.shutdown().unwrap();
}

pub(crate) fn stalled_worker_is_reported() {
    let bound = Duration::from_millis(30);
    let rt = Runtime::builder()
        .workers(2)
        .stall_after(bound)
        .build()
        .unwrap();
    // Worker 0 runs a 400 ms task; worker 1 stays free.
    let long = rt.submit(SPIN.args(&400_000_000u64)).unwrap();
    assert_eq!(
        rt.submit(ECHO.args(&5u64)).unwrap().wait().unwrap().value,
        5
    );
    let mut behind = rt.submit(ECHO.args(&6u64)).unwrap(); // worker 0, queued
    let t0 = Instant::now();
    match behind.wait_timeout(Duration::from_secs(2)) {
        Err(Error::Stalled { worker: 0, silent }) => assert!(silent > bound),
        other => panic!("expected Stalled on worker 0, got {other:?}"),
    }
    let took = t0.elapsed();
    println!("    stall of worker 0 reported after {took:?} (bound {bound:?})");
    assert!(took < Duration::from_millis(200), "{took:?}");
    assert!(matches!(rt.health(), Err(Error::Stalled { worker: 0, .. })));
    // Worker 1 still serves meanwhile; nothing was latched.
    assert_eq!(
        rt.submit(ECHO.args(&7u64)).unwrap().wait().unwrap().value,
        7
    );
    // The queued task completes once the long one is done; until then each
    // wait reports the stall again, and the ticket stays valid.
    let value = loop {
        match behind.wait_timeout(Duration::from_secs(2)) {
            Ok(c) => break c.value,
            Err(Error::Stalled { worker: 0, .. }) => {
                assert!(t0.elapsed() < Duration::from_secs(2))
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(value, 6);
    assert!(long.wait().unwrap().value >= 400_000_000);
    let t1 = Instant::now();
    while rt.health().is_err() {
        assert!(t1.elapsed() < Duration::from_secs(1), "{:?}", rt.health());
        std::thread::sleep(Duration::from_millis(2));
    }
    rt.shutdown().unwrap();
}

/// With one worker per ring, a long task stalls only its own ring: a wait
/// behind it reports that ring's worker, and another thread's ring serves.
pub(crate) fn a_stall_is_reported_on_its_ring() {
    let bound = Duration::from_millis(30);
    let rt = Runtime::builder()
        .workers(2)
        .rings(2)
        .stall_after(bound)
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let rt = &rt;
        s.spawn(move || {
            let long = rt.submit(SPIN.args(&300_000_000u64)).unwrap();
            let ring = long.ring();
            let mut behind = rt.submit(ECHO.args(&9u64)).unwrap();
            tx.send(ring).unwrap();
            match behind.wait_timeout(Duration::from_secs(2)) {
                // One worker per ring: the worker's index is the ring's.
                Err(Error::Stalled { worker, silent }) => {
                    assert_eq!(worker, ring);
                    assert!(silent > bound);
                }
                other => panic!("expected Stalled on worker {ring}, got {other:?}"),
            }
            let value = loop {
                match behind.wait_timeout(Duration::from_secs(2)) {
                    Ok(c) => break c.value,
                    Err(Error::Stalled { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            };
            assert_eq!(value, 9);
            assert!(long.wait().unwrap().value >= 300_000_000);
        });
        s.spawn(move || {
            let stalled = rx.recv().unwrap();
            let t0 = Instant::now();
            let t = rt.submit(ECHO.args(&4u64)).unwrap();
            assert_ne!(t.ring(), stalled, "the second thread is on the other ring");
            assert_eq!(t.wait().unwrap().value, 4);
            assert!(
                t0.elapsed() < Duration::from_millis(100),
                "{:?}",
                t0.elapsed()
            );
        });
    });
    rt.shutdown().unwrap();
}

/// A worker running long tasks back to back polls once per task; it must
/// still beat between them, so that only a task longer than the stall bound
/// is reported (a worker that beat every 8th poll only was reported stalled).
pub(crate) fn back_to_back_long_tasks_are_not_stalls() {
    let rt = Runtime::builder()
        .workers(1)
        .stall_after(Duration::from_millis(300))
        .build()
        .unwrap();
    let tickets: Vec<_> = (0..6)
        .map(|_| rt.submit(SPIN.args(&150_000_000u64)).unwrap())
        .collect();
    let t0 = Instant::now();
    for t in tickets {
        let c = t.wait().unwrap();
        assert!(c.value >= 150_000_000);
    }
    assert!(t0.elapsed() >= Duration::from_millis(850));
    // The tasks of a pack, too: the worker beats between them.
    let t0 = Instant::now();
    let results = rt
        .submit(SPIN.packed(&[150_000_000u64; 6]))
        .unwrap()
        .wait()
        .unwrap();
    assert!(results.iter().all(|r| r.unwrap().value >= 150_000_000));
    assert!(t0.elapsed() >= Duration::from_millis(850));
    rt.shutdown().unwrap();
}

pub(crate) fn cancel_resolves_every_ticket() {
    let rt = Arc::new(Runtime::builder().workers(2).build().unwrap());
    let tickets: Vec<_> = (0..400)
        .map(|_| rt.submit(SPIN.args(&1_000_000u64)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let t0 = Instant::now();
    rt.cancel().unwrap();
    let cancel_took = t0.elapsed();
    let (mut done, mut cancelled) = (0, 0);
    for t in tickets {
        let t1 = Instant::now();
        match t.wait() {
            Ok(c) => {
                assert!(c.value >= 1_000_000);
                done += 1;
            }
            Err(Error::Cancelled) => cancelled += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(t1.elapsed() < Duration::from_millis(100));
    }
    println!("    cancel took {cancel_took:?}: {done} tasks had completed, {cancelled} cancelled");
    assert!(cancel_took < Duration::from_millis(100), "{cancel_took:?}");
    assert!(
        done >= 2 && cancelled >= 100,
        "{done} done, {cancelled} cancelled"
    );
    assert!(matches!(rt.submit(NOP.args(&())), Err(Error::Closed)));
    assert!(matches!(rt.health(), Err(Error::Cancelled)));
    rt.shutdown().unwrap(); // the first outcome
}

/// What `cancel` documents: each poller starts at most
/// `PKQ_STOP_POLL_INTERVAL` (8) more slots once the stop is set, a packed
/// slot's tasks all together. One worker of one poller, 1 ms tasks one to
/// a slot, then 0.2 ms tasks 32 to a slot, then a worker of 8 pollers and
/// 20 µs tasks: the tasks that completed are at most those that could have
/// started before the cancel returned, plus 8 slots' worth per poller.
pub(crate) fn cancel_starts_at_most_8_more_slots_per_poller() {
    const MORE: usize = 8;
    for (packed, pollers) in [(false, 1u32), (true, 1), (false, 8)] {
        let rt = Runtime::builder()
            .workers(1)
            .pollers(pollers)
            .build()
            .unwrap();
        let (spin_ns, per_slot, tasks) = if packed {
            (200_000u64, 32usize, 32 * 40)
        } else if pollers > 1 {
            (20_000u64, 1, 2000)
        } else {
            (1_000_000u64, 1, 200)
        };
        let more = MORE * pollers as usize;
        let t0 = Instant::now();
        // Submits, then (once cancelled) waits: every task's value or
        // Cancelled.
        let wait: Box<dyn FnOnce() -> Vec<Result<u64, Error>>> = if packed {
            let mut batch = rt.submit(SPIN.packed(&vec![spin_ns; tasks])).unwrap();
            Box::new(move || {
                let _ = batch.wait();
                batch
                    .results()
                    .iter()
                    .map(|r| match r {
                        Some(Ok(c)) => Ok(c.value),
                        Some(Err(e)) => panic!("a SPIN failed: {e:?}"),
                        None => Err(Error::Cancelled),
                    })
                    .collect()
            })
        } else {
            let tickets: Vec<_> = (0..tasks)
                .map(|_| rt.submit(SPIN.args(&spin_ns)).unwrap())
                .collect();
            Box::new(move || {
                tickets
                    .into_iter()
                    .map(|t| t.wait().map(|c| c.value))
                    .collect()
            })
        };
        std::thread::sleep(Duration::from_millis(3));
        rt.cancel().unwrap();
        let before = t0.elapsed();
        // Slots that could have started before the cancel returned.
        let started = (before.as_nanos() / (spin_ns as u128 * per_slot as u128)) as usize + 1;
        let results = wait();
        let done = results.iter().filter(|r| r.is_ok()).count();
        println!(
            "    {per_slot} a slot, {pollers} pollers: {done} of {tasks} tasks completed; at most {started} slots could start before the cancel returned"
        );
        assert!(
            done <= (started + more) * per_slot,
            "{done} tasks completed"
        );
        for r in &results {
            match r {
                Ok(v) => assert!(*v >= spin_ns, "a SPIN of {spin_ns} ns said {v}"),
                Err(Error::Cancelled) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(results.iter().any(|r| matches!(r, Err(Error::Cancelled))));
    }
}

pub(crate) fn cancelled_tickets_outlive_their_runtime() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let memory = rt.memory_watch();
    let tickets: Vec<_> = (0..100)
        .map(|_| rt.submit(SPIN.args(&100_000u64)).unwrap())
        .collect();
    let args = [0u64; 50];
    let mut batch = rt.submit(ECHO.batch(&args)).unwrap();
    rt.cancel().unwrap();
    drop(rt);
    assert_eq!(memory.state(), MemoryState::InUse);
    let (mut done, mut cancelled) = (0, 0);
    for t in tickets {
        match t.wait() {
            Ok(_) => done += 1,
            Err(Error::Cancelled) => cancelled += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(cancelled > 0, "{done} done, {cancelled} cancelled");
    assert!(matches!(batch.wait(), Err(Error::Cancelled)));
    drop(batch);
    assert_eq!(
        memory.state(),
        MemoryState::GivenBack,
        "freed with the last"
    );
}

/// A runtime dropped while its kernel runs past the cancel's stop timeout
/// (a SPIN of 2 s): while the kernel runs, it stays counted
/// (`running_kernels`), its memory is kept, and a build that would load a
/// module is refused; once it exited, such a build (which looks first)
/// succeeds, the lingering kernel is counted no more and its memory is
/// given back. In a child: a fresh process, whose module is not loaded
/// yet.
pub(crate) fn a_kernel_that_outlived_its_runtime_is_released_once_it_exits() {
    if fk::IMAGE.is_empty() {
        return skip("the custom-handler example's module was not built");
    }
    run_child("kernel_outlives_its_runtime", &[]);
}

pub(crate) fn child_kernel_outlives_its_runtime() {
    let rt = faults::one_worker_stopping_within_50_ms();
    let memory = rt.memory_watch();
    let spin = Duration::from_secs(2);
    let t0 = Instant::now();
    let long = rt.submit(SPIN.args(&(spin.as_nanos() as u64))).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let c = rt.cancel();
    assert!(matches!(c, Err(Error::KernelTimeout(_))), "{c:?}");
    drop(long);
    drop(rt);
    assert_eq!(memory.state(), MemoryState::Kept);
    assert_eq!(pkq::running_kernels(0).unwrap(), 1);
    match fk::runtime() {
        Err(Error::InvalidConfig(msg)) if msg.contains("module") => {}
        other => panic!(
            "a module load beside a running kernel: {:?}",
            other.map(|_| ())
        ),
    }
    assert!(
        t0.elapsed() < spin,
        "the checks above took {:?}",
        t0.elapsed()
    );
    assert_eq!(memory.state(), MemoryState::Kept);
    std::thread::sleep(spin.saturating_sub(t0.elapsed()) + Duration::from_millis(200));
    let rt = fk::runtime().unwrap();
    assert_eq!(memory.state(), MemoryState::GivenBack);
    assert_eq!(
        pkq::running_kernels(0).unwrap(),
        1,
        "the new runtime's alone"
    );
    rt.shutdown().unwrap();
    drop(rt);
    assert_eq!(pkq::running_kernels(0).unwrap(), 0);
}

pub(crate) fn panicking_producers_leave_the_runtime_usable() {
    let rt = Arc::new(Runtime::builder().capacity(64).workers(2).build().unwrap());
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // the panics are expected
    let handles: Vec<_> = (0..8u64)
        .map(|p| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for i in 0..1000u64 {
                    held.push(rt.submit(ECHO.args(&(p * 1_000_000 + i))).unwrap());
                    if i == 100 + 50 * p {
                        panic!("producer {p} panics holding {} tickets", held.len());
                    }
                }
            })
        })
        .collect();
    let panicked = handles
        .into_iter()
        .map(|h| h.join())
        .filter(Result::is_err)
        .count();
    std::panic::set_hook(prev);
    assert_eq!(panicked, 8);
    // Every slot the dropped tickets held is reclaimed: a full run of ECHOs
    // through the 64-slot ring, checked.
    let seen: Vec<AtomicU64> = (0..20_000).map(|_| AtomicU64::new(0)).collect();
    pump_echo(&rt, 0..20_000, 48, 11, &seen);
    assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
    rt.shutdown().unwrap();
}

/// Workers and pollers that the device cannot keep resident at once would
/// wait for each other forever: refused before the launch, saying the
/// limit; the largest shape that fits runs.
pub(crate) fn settings_that_cannot_be_resident_are_refused() {
    let sms = pkq::device_info(0).unwrap().multiprocessors as usize;
    // One block of 8 warps per worker of 8 pollers, one such block per
    // multiprocessor at most (the kernel's registers).
    let too_many = (sms + 1).next_power_of_two();
    for (workers, pollers) in [(1024, 8), (too_many, 8)] {
        let t0 = Instant::now();
        match Runtime::builder()
            .capacity(1024)
            .workers(workers)
            .pollers(pollers)
            .build()
        {
            Err(Error::InvalidConfig(msg)) => {
                assert!(msg.contains("resident at once"), "{msg}")
            }
            other => panic!("{workers} x {pollers}: expected InvalidConfig, got {other:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
    let fits = too_many / 2;
    let rt = Runtime::builder()
        .capacity(1024)
        .workers(fits)
        .pollers(8)
        .build()
        .unwrap();
    let tickets: Vec<_> = (0..4 * fits as u64)
        .map(|i| rt.submit(ECHO.args(&i)).unwrap())
        .collect();
    for (i, t) in tickets.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, i as u64);
    }
    rt.shutdown().unwrap();
}

/// Lanes with IO areas that would fill half an SM's shared memory per
/// block in one lane and more than half in the other:
/// every lane's blocks must be resident at once, so `build` serves, or
/// refuses with InvalidConfig before the launch, and never waits for
/// blocks that cannot start. (Lanes keep their rooms in device memory; on
/// the H100 this case is refused, pkq's 8-warp blocks taking an SM each.)
pub(crate) fn lanes_with_io_rooms_are_all_resident() {
    let t0 = Instant::now();
    let built = Runtime::builder()
        .capacity(1024)
        .workers(1024)
        .pollers(1)
        .io(6720, 6720)
        .start_timeout(Duration::from_secs(5))
        .add_lane(
            Runtime::builder()
                .capacity(8)
                .workers(8)
                .pollers(8)
                .io(65536, 65536),
        )
        .build();
    println!(
        "    build: {:?} after {:?}",
        built.as_ref().err(),
        t0.elapsed()
    );
    match built {
        Ok(rt) => {
            for lane in 0..rt.lanes() {
                let l = rt.lane(lane).unwrap();
                for i in 0..64u64 {
                    assert_eq!(l.submit(ECHO.args(&i)).unwrap().wait().unwrap().value, i);
                }
            }
            rt.shutdown().unwrap();
        }
        Err(Error::InvalidConfig(why)) => assert!(t0.elapsed() < Duration::from_secs(2), "{why}"),
        Err(e) => panic!("lanes that cannot all be resident: {e}"),
    }
}

/// A supervisor probing health while a cancel stops the kernel: pending
/// tasks report the cancel, whoever sees the kernel gone first.
pub(crate) fn cancel_wins_over_the_liveness_probe() {
    for round in 0..20 {
        let rt = Arc::new(
            Runtime::builder()
                .workers(2)
                .probe_interval(Duration::from_micros(10))
                .build()
                .unwrap(),
        );
        let tickets: Vec<_> = (0..200)
            .map(|_| rt.submit(SPIN.args(&100_000u64)).unwrap())
            .collect();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let prober = {
            let (rt, stop) = (rt.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = rt.health();
                }
            })
        };
        std::thread::sleep(Duration::from_millis(2));
        rt.cancel().unwrap();
        stop.store(true, Ordering::Relaxed);
        prober.join().unwrap();
        for t in tickets {
            match t.wait() {
                Ok(_) | Err(Error::Cancelled) => {}
                Err(e) => panic!("round {round}: a cancelled task reported {e}"),
            }
        }
    }
}

/// A CUDA graph captured in global mode on another thread of the process
/// while the runtime serves: its waiters' probes, a safe buffer call (which
/// synchronizes the buffers' stream, not the captured one) and a state's
/// read go on, the runtime serves on, and the capture completes.
pub(crate) fn a_graph_captured_in_global_mode_elsewhere() {
    use pkq::cudarc::driver::sys;
    let ctx = pkq::context(0).unwrap();
    // SAFETY: each buffer is used on one stream only, so cudarc's events
    // (whose waits a capture would take in from outside) are not needed.
    unsafe { ctx.disable_event_tracking() };
    let captured_stream = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let mut buf = captured_stream.alloc_zeros::<u8>(1024).unwrap();
    let x = other.clone_htod(&[1.0f32; 64]).unwrap();
    let mut y = other.alloc_zeros::<f32>(64).unwrap();
    captured_stream.synchronize().unwrap();
    other.synchronize().unwrap();
    let rt = Runtime::builder().state_memory(4096).build().unwrap();
    let state = rt.state(&[7u32; 4]).unwrap();
    rt.submit(NOP.args(&())).unwrap().wait().unwrap();
    captured_stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    captured_stream.memset_zeros(&mut buf).unwrap();
    let during = std::thread::scope(|s| {
        s.spawn(|| {
            let spin = rt.submit(SPIN.args(&50_000_000u64)).unwrap().wait();
            let health = rt.health();
            let park = rt
                .submit(SPIN.args(&20_000_000u64))
                .unwrap()
                .with_wait(pkq::WaitStrategy::Park)
                .wait();
            let axpy = rt.axpy(2.0, &x, &mut y);
            let read = state.read();
            (
                spin.map(|c| c.value),
                health,
                park.map(|c| c.value),
                axpy,
                read,
            )
        })
        .join()
        .unwrap()
    });
    let graph = captured_stream.end_capture(sys::CUgraphInstantiate_flags(0));
    println!("    during the capture: {during:?}");
    println!("    the capture: {:?}", graph.as_ref().map(|g| g.is_some()));
    let after = (
        rt.health(),
        rt.submit(NOP.args(&())).unwrap().wait().map(|c| c.value),
    );
    println!("    after: {after:?}");
    let (spin, health, park, axpy, read) = &during;
    assert!(spin.is_ok() && health.is_ok() && park.is_ok(), "{during:?}");
    assert!(
        axpy.is_ok() && matches!(read, Ok(v) if v == &[7u32; 4]),
        "{during:?}"
    );
    assert!(after.0.is_ok() && after.1.is_ok(), "{after:?}");
    assert!(
        matches!(graph, Ok(Some(_))),
        "the capture broke: {:?}",
        graph.err()
    );
    assert!(other.clone_dtoh(&y).unwrap().iter().all(|&v| v == 2.0));
}

/// This module's GPU tests, in the order they run (`main.rs` runs every
/// module's list; a test function left out of it is dead code, which the
/// runner's `#![deny(dead_code)]` refuses).
pub(crate) const TESTS: &[Test] = tests![
    shutdown_with_tasks_in_flight,
    drop_with_tickets_alive,
    dropped_tickets_free_their_slots,
    two_runtimes_in_sequence,
    runtimes_side_by_side,
    bad_input_is_a_typed_error,
    back_to_back_long_tasks_are_not_stalls,
    liveness_probes_from_many_threads,
    idle_backoff_wakes_up_for_each_task,
    idle_quiet_pollers_serve_every_task,
    quiet_pollers_read_their_stop_words,
    spin_op_and_wait_timeout_keeps_the_task,
    stalled_worker_is_reported,
    a_stall_is_reported_on_its_ring,
    cancel_resolves_every_ticket,
    cancel_starts_at_most_8_more_slots_per_poller,
    cancelled_tickets_outlive_their_runtime,
    a_kernel_that_outlived_its_runtime_is_released_once_it_exits,
    panicking_producers_leave_the_runtime_usable,
    settings_that_cannot_be_resident_are_refused,
    lanes_with_io_rooms_are_all_resident,
    a_graph_captured_in_global_mode_elsewhere,
    cancel_wins_over_the_liveness_probe,
];
