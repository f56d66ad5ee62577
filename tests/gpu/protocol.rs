//! The ring protocol on the real kernel: every task once, across laps, the
//! sequence wrap, producers, rings, batches, packs and pollers.

use super::*;

pub(crate) fn echo_million_through_1024_slots() {
    let rt = Runtime::builder().capacity(1024).build().unwrap();
    let n = 1_000_000;
    let seen = counters(n);
    let t0 = Instant::now();
    pump_echo(&rt, 0..n, 768, 1, &seen);
    let dt = t0.elapsed();
    assert_each_once(&seen);
    rt.shutdown().unwrap();
    println!(
        "    {n} echo tasks ({} laps) in {dt:.2?}: {:.2} M tasks/s",
        n / 1024,
        n as f64 / dt.as_secs_f64() / 1e6
    );
}

pub(crate) fn echo_from_four_producers() {
    for round in 0..3 {
        let rt = Runtime::builder()
            .capacity(1024)
            .workers(8)
            .build()
            .unwrap();
        pump_from_threads(&rt, 400_000, 4, 128, 10 * round);
        rt.shutdown().unwrap();
    }
}

pub(crate) fn workers_1_8_32_64() {
    for workers in [1, 8, 32, 64] {
        let rt = Runtime::builder()
            .capacity(1024)
            .workers(workers)
            .build()
            .unwrap();
        assert_eq!(rt.workers(), workers);
        let n = 50_000;
        let seen = counters(n);
        pump_echo(&rt, 0..n, 900, workers as u64, &seen);
        assert_each_once(&seen);
        rt.shutdown().unwrap();
    }
}

pub(crate) fn sequence_wrap_at_2_pow_63() {
    let start = SEQ_WRAP - 10_000;
    let rt = Runtime::builder()
        .capacity(256)
        .workers(4)
        .start_sequence(start)
        .build()
        .unwrap();
    let n = 30_000;
    let seen = counters(n);
    pump_echo(&rt, 0..n, 200, 7, &seen);
    assert_each_once(&seen);
    let t = rt.submit(NOP.args(&())).unwrap();
    assert!(
        t.seq() < 30_000,
        "sequence numbers wrapped to small values, got {}",
        t.seq()
    );
    t.wait().unwrap();
    rt.shutdown().unwrap();
}

/// Batches: results in submission order; a batch larger than the ring
/// (several runs, waiting for room); reaping as they come; a dropped
/// unread batch leaves the ring usable; an empty batch; refusals.
pub(crate) fn batches_submit_and_reap() {
    let rt = Runtime::builder().capacity(64).workers(4).build().unwrap();
    let mut rng = Rng::new(21);
    assert!(matches!(
        rt.submit(NOP.batch(&[(); 65])),
        Err(Error::InvalidArgument(_))
    ));
    for len in [1usize, 7, 63, 64, 64, 33] {
        let args: Vec<_> = (0..len as u64).map(|i| echo_args(&mut rng, i)).collect();
        let mut batch = rt.submit(ECHO_48.batch(&args)).unwrap();
        assert_eq!(batch.len(), len);
        let seqs: Vec<u64> = batch.seqs().collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order");
        let results = batch.wait().unwrap();
        assert_eq!(results.len(), args.len(), "every task's result");
        for (r, a) in results.iter().zip(&args) {
            assert_eq!(r.as_ref().unwrap().value, echo_fold(a));
        }
    }
    // Reaped as they come.
    let mut batch = rt.submit(SPIN.batch(&[20_000u64; 16])).unwrap();
    let mut seen = 0;
    while seen < 16 {
        let done = batch.poll().unwrap();
        assert!(done >= seen);
        seen = done;
    }
    assert!(
        batch
            .results()
            .iter()
            .all(|r| r.unwrap().unwrap().value >= 20_000)
    );
    // Unread batches dropped: their slots come back.
    for _ in 0..20 {
        drop(rt.submit(NOP.batch(&[(); 50])).unwrap());
    }
    let results = rt.submit(ECHO.batch(&[9u64; 64])).unwrap().wait().unwrap();
    assert!(results.iter().all(|r| r.unwrap().value == 9));
    // Failures per task; refusals for the whole batch.
    let r = rt
        .submit(Tasks::raw_batch(Op(999), &[(); 3]))
        .unwrap()
        .wait()
        .unwrap();
    assert!(
        r.iter()
            .all(|r| r.unwrap_err().status == TaskStatus::UnknownOp)
    );
    assert!(
        rt.submit(NOP.batch(&[(); 0]))
            .unwrap()
            .wait()
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        rt.submit(GEMV.batch(&[GemvArgs::default(); 4])),
        Err(Error::UncheckedOp(GEMV_OP))
    ));
    assert!(matches!(
        rt.submit(Tasks::raw_batch(ECHO_OP, &[[0u64; 7]])),
        Err(Error::PayloadTooLarge { .. })
    ));
    rt.shutdown().unwrap();
    assert!(matches!(rt.submit(NOP.batch(&[()])), Err(Error::Closed)));
}

/// A heavy load: 8 producer threads x 10 M tasks each, in batches of
/// random sizes (1 to 256) and single submits, of random ops (ECHO with
/// random payloads, NOP, short SPIN, an unknown op), every result checked
/// and every task counted once. Under a sanitizer, which slows every access
/// a hundredfold or more, 50 000 tasks per producer (it says so).
pub(crate) fn eight_producers_ten_million_each() {
    let sanitized = under_sanitizer();
    let per_producer: u64 = if sanitized { 50_000 } else { 10_000_000 };
    if sanitized {
        println!("    under a sanitizer: {per_producer} tasks per producer, not 10 M");
    }
    let rt = Runtime::builder()
        .capacity(16_384)
        .workers(64)
        .build()
        .unwrap();
    let t0 = Instant::now();
    let counted: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8u64)
            .map(|p| {
                let rt = &rt;
                s.spawn(move || {
                    let mut rng = Rng::new(1000 + p);
                    let mut done = 0u64;
                    let mut inflight: VecDeque<(pkq::Batch, Op, Vec<[u64; 6]>)> = VecDeque::new();
                    let check = |mut batch: pkq::Batch, op: Op, args: Vec<[u64; 6]>| -> u64 {
                        let results = batch.wait().unwrap();
                        assert_eq!(results.len(), args.len());
                        assert_eq!(results.len(), args.len(), "every task's result");
                        for (r, a) in results.iter().zip(&args) {
                            match op {
                                ECHO_OP => assert_eq!(r.unwrap().value, echo_fold(a)),
                                NOP_OP => assert_eq!(r.unwrap().value, 0),
                                SPIN_OP => assert!(r.unwrap().value >= a[0]),
                                _ => assert_eq!(
                                    r.unwrap_err(),
                                    TaskError {
                                        op,
                                        status: TaskStatus::UnknownOp
                                    }
                                ),
                            }
                        }
                        results.len() as u64
                    };
                    let mut submitted = 0u64;
                    while submitted < per_producer {
                        let n = (1 + rng.below(256)).min(per_producer - submitted) as usize;
                        let op = match rng.below(100) {
                            0..=59 => ECHO_OP,
                            60..=89 => NOP_OP,
                            90..=97 => Op(4000),
                            _ => SPIN_OP,
                        };
                        let args: Vec<[u64; 6]> = (0..n)
                            .map(|_| match op {
                                SPIN_OP => [rng.below(500), 0, 0, 0, 0, 0],
                                _ => std::array::from_fn(|_| rng.next()),
                            })
                            .collect();
                        if n == 1 {
                            // Single submits too (each op with the argument
                            // bytes its table lists: NOP none, SPIN a u64).
                            let c = match op {
                                NOP_OP => rt.submit(Task::raw(op, bytemuck::bytes_of(&()))),
                                SPIN_OP => {
                                    rt.submit(Task::raw(op, bytemuck::bytes_of(&args[0][0])))
                                }
                                _ => rt.submit(Task::raw(op, bytemuck::bytes_of(&args[0]))),
                            }
                            .unwrap()
                            .wait();
                            match op {
                                ECHO_OP => assert_eq!(c.unwrap().value, echo_fold(&args[0])),
                                NOP_OP | SPIN_OP => assert!(c.is_ok()),
                                _ => assert!(matches!(c, Err(Error::Task(_)))),
                            }
                            done += 1;
                        } else {
                            if inflight.len() == 8 {
                                let (b, o, a) = inflight.pop_front().unwrap();
                                done += check(b, o, a);
                            }
                            let batch = match op {
                                NOP_OP => rt.submit(Tasks::raw_batch(op, &vec![(); n])),
                                SPIN_OP => {
                                    let ns: Vec<u64> = args.iter().map(|a| a[0]).collect();
                                    rt.submit(Tasks::raw_batch(op, &ns))
                                }
                                _ => rt.submit(Tasks::raw_batch(op, &args)),
                            };
                            inflight.push_back((batch.unwrap(), op, args));
                        }
                        submitted += n as u64;
                    }
                    for (b, o, a) in inflight {
                        done += check(b, o, a);
                    }
                    done
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let took = t0.elapsed();
    assert!(counted.iter().all(|&c| c == per_producer), "{counted:?}");
    let total: u64 = counted.iter().sum();
    println!(
        "    {total} tasks checked in {took:.1?} ({:.1} M/s)",
        total as f64 / took.as_secs_f64() / 1e6
    );
    rt.shutdown().unwrap();
}

pub(crate) fn holding_tickets_never_blocks_submit() {
    let rt = Runtime::builder().capacity(16).workers(1).build().unwrap();
    // Hold 10x the ring's slots of tickets: completions nobody read yet move
    // to the host, so submit only ever waits for the device.
    let held: Vec<_> = (0..160u64)
        .map(|i| rt.submit(ECHO.args(&i)).unwrap())
        .collect();
    let tried: Vec<_> = (0..16u64)
        .map(|i| {
            loop {
                match rt.try_submit(ECHO.args(&(1000 + i))) {
                    Ok(t) => break t,
                    Err(Error::Full) => std::hint::spin_loop(), // the device is still at it
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .collect();
    // Every task from the 17th on needed the slot of one held 16 before.
    assert_eq!(rt.moved_completions(), 160);
    for (i, t) in held.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, i as u64);
    }
    for (i, t) in tried.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap().value, 1000 + i as u64);
    }
    rt.shutdown().unwrap();
}

pub(crate) fn producers_holding_more_than_the_ring() {
    // 8 producers x 200 held tickets on 256 slots: a laggard's unread
    // completions must not stop the others (they move to the host).
    for round in 0..3 {
        let rt = Runtime::builder().capacity(256).workers(8).build().unwrap();
        pump_from_threads(&rt, 200_000, 8, 200, 100 * round);
        rt.shutdown().unwrap();
    }
}

pub(crate) fn pollers_race_for_every_task() {
    // Every task is claimed by exactly one of a worker's pollers, also when
    // several see it at once and when the ring laps quickly (each poller on
    // a copy of the slots of its own; (4, 4, 4): one slot per worker, so a
    // worker polls the next lap of a slot right after completing its task).
    // A task run twice would write the same ECHO completion twice, which
    // no count on the host can see: each shape also runs AXPY tasks that
    // add 1 to an element of their own (y starts at 0), and every element
    // must end at exactly 1. Buffers made before the runtimes start (see
    // axpy_random_vs_cpu).
    const ELEMENTS: usize = 20_000;
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let x = stream.clone_htod(&vec![1.0f32; ELEMENTS]).unwrap();
    let ys: Vec<_> = (0..8)
        .map(|_| stream.alloc_zeros::<f32>(ELEMENTS).unwrap())
        .collect();
    stream.synchronize().unwrap();
    for ((workers, pollers, capacity), y) in [
        (1, 2, 4),
        (1, 4, 8),
        (4, 2, 64),
        (4, 4, 4),
        (4, 4, 1024),
        (1, 8, 8),
        (2, 8, 1024),
        (8, 1, 64),
    ]
    .into_iter()
    .zip(ys)
    {
        let rt = Runtime::builder()
            .capacity(capacity)
            .workers(workers)
            .pollers(pollers)
            .build()
            .unwrap();
        let n = 40_000;
        let seen = counters(n);
        pump_echo(&rt, 0..n, capacity.min(100), pollers as u64, &seen);
        assert_each_once(&seen);
        let (xp, yp) = {
            use pkq::cudarc::driver::DevicePtr;
            (x.device_ptr(&stream).0, y.device_ptr(&stream).0)
        };
        let window = capacity.min(100);
        let mut inflight = VecDeque::with_capacity(window);
        for i in 0..ELEMENTS as u64 {
            let args = AxpyArgs {
                x: xp + 4 * i,
                y: yp + 4 * i,
                n: 1,
                a: 1.0,
            };
            // SAFETY: one element of x and of y each, live until the
            // tasks completed (every ticket is waited for below, before
            // the buffers are read or dropped); no two tasks share one.
            inflight.push_back(unsafe { rt.submit(AXPY.args(&args).unchecked()) }.unwrap());
            if inflight.len() == window {
                inflight.pop_front().unwrap().wait().unwrap();
            }
        }
        for t in inflight {
            t.wait().unwrap();
        }
        let got = stream.clone_dtoh(&y).unwrap();
        let wrong: Vec<_> = got
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 1.0)
            .take(5)
            .collect();
        assert!(
            wrong.is_empty(),
            "({workers}, {pollers}, {capacity}): elements not added to exactly once: {wrong:?}"
        );
        rt.shutdown().unwrap();
    }
}

/// 8 threads on 4 rings of 64 slots (16 workers): every ring gets two of
/// them, each thread's tasks stay in its ring, windows past the ring's size
/// force moved completions; random ECHO payloads one at a time, then in
/// batches, every result checked, every task seen once; then shutdown
/// drains tasks in flight on every ring.
pub(crate) fn rings_spread_threads_and_lose_nothing() {
    let rt = Runtime::builder()
        .capacity(64)
        .workers(16)
        .rings(4)
        .build()
        .unwrap();
    assert_eq!(rt.rings(), 4);
    let (n, producers) = (400_000u64, 8u64);
    let seen = counters(n);
    let rings: Vec<usize> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..producers)
            .map(|p| {
                let (rt, seen) = (&rt, &seen);
                s.spawn(move || {
                    let ring = rt.submit(NOP.args(&())).unwrap().ring();
                    pump_echo(rt, (p..n).step_by(producers as usize), 100, 77 + p, seen);
                    assert_eq!(rt.submit(NOP.args(&())).unwrap().ring(), ring);
                    ring
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_each_once(&seen);
    for r in 0..4 {
        let on = rings.iter().filter(|&&x| x == r).count();
        assert_eq!(on, 2, "ring {r} has {on} of the threads: {rings:?}");
    }
    let moved = rt.moved_completions();
    assert!(
        moved > 0,
        "windows of 100 on 64 slots must move completions"
    );

    // Batches of random sizes from 4 threads, two in flight each.
    let counted: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|p| {
                let rt = &rt;
                s.spawn(move || {
                    let mut rng = Rng::new(500 + p);
                    let mut inflight: VecDeque<(pkq::Batch, Vec<[u64; 6]>)> = VecDeque::new();
                    let mut done = 0u64;
                    let mut check = |(mut b, args): (pkq::Batch, Vec<[u64; 6]>)| {
                        let results = b.wait().unwrap();
                        assert_eq!(results.len(), args.len(), "every task's result");
                        for (r, a) in results.iter().zip(&args) {
                            assert_eq!(r.unwrap().value, echo_fold(a));
                        }
                        done += results.len() as u64;
                    };
                    for _ in 0..2_000 {
                        let len = 1 + rng.below(64) as usize;
                        let args: Vec<[u64; 6]> = (0..len)
                            .map(|_| std::array::from_fn(|_| rng.next()))
                            .collect();
                        inflight.push_back((rt.submit(ECHO_48.batch(&args)).unwrap(), args));
                        if inflight.len() > 2 {
                            check(inflight.pop_front().unwrap());
                        }
                    }
                    inflight.into_iter().for_each(&mut check);
                    done
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    println!(
        "    {n} single and {} batched tasks on 4 rings, {} completions moved",
        counted.iter().sum::<u64>(),
        rt.moved_completions()
    );

    // Tasks in flight on every ring when shutdown begins: all complete.
    let tickets: Vec<pkq::Ticket> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let rt = &rt;
                s.spawn(move || {
                    (0..40)
                        .map(|_| rt.submit(SPIN.args(&20_000u64)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let mut on: Vec<usize> = tickets.iter().map(|t| t.ring()).collect();
    on.sort();
    on.dedup();
    assert_eq!(on, [0, 1, 2, 3]);
    rt.shutdown().unwrap();
    for t in tickets {
        assert!(t.wait().unwrap().value >= 20_000);
    }
}

pub(crate) fn packed_batches_random_vs_cpu() {
    // Packed batches of random sizes (one task to a full ring of packs) and
    // kinds, several in flight and reaped in order, on 2 rings from 2
    // threads; every result checked against the host's, every task counted
    // once.
    let rt = Runtime::builder()
        .capacity(128)
        .workers(8)
        .rings(2)
        .build()
        .unwrap();
    let tasks = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (rt, tasks) = (&rt, &tasks);
            s.spawn(move || {
                let mut rng = Rng::new(40 + t);
                let mut inflight: VecDeque<(pkq::Batch, Vec<Option<u64>>)> = VecDeque::new();
                let check = |(mut batch, want): (pkq::Batch, Vec<Option<u64>>)| {
                    let got = batch.wait().unwrap();
                    assert_eq!(got.len(), want.len());
                    assert_eq!(got.len(), want.len(), "every task's result");
                    for (g, w) in got.iter().zip(&want) {
                        match w {
                            Some(v) => assert_eq!(g.unwrap().value, *v),
                            None => assert_eq!(g.unwrap_err().status, TaskStatus::BadArgs),
                        }
                    }
                    tasks.fetch_add(want.len() as u64, Ordering::Relaxed);
                };
                for round in 0..300 {
                    let n = 1 + (rng.next() % (128 * 32)) as usize;
                    let (batch, want) = match round % 4 {
                        // ECHO of one word is the word.
                        0 => {
                            let a: Vec<u64> = (0..n).map(|_| rng.next()).collect();
                            (
                                rt.submit(ECHO.packed(&a)),
                                a.iter().map(|&v| Some(v)).collect(),
                            )
                        }
                        // Shorter arguments arrive zero-padded.
                        1 => {
                            let a: Vec<u32> = (0..n).map(|_| rng.next() as u32).collect();
                            let want = a.iter().map(|&v| Some(u64::from(v))).collect();
                            (rt.submit(Tasks::raw_packed(ECHO_OP, &a)), want)
                        }
                        2 => (rt.submit(NOP.packed(&vec![(); n])), vec![Some(0); n]),
                        // SPIN of 0 ns, or over the limit: a failed task
                        // among good ones reports its own status.
                        _ => {
                            let a: Vec<u64> = (0..n.min(300))
                                .map(|_| {
                                    if rng.next().is_multiple_of(5) {
                                        u64::MAX
                                    } else {
                                        0
                                    }
                                })
                                .collect();
                            let want = a.iter().map(|&v| (v == 0).then_some(0)).collect();
                            (rt.submit(SPIN.packed(&a)), want)
                        }
                    };
                    inflight.push_back((batch.unwrap(), want));
                    if inflight.len() > 2 {
                        check(inflight.pop_front().unwrap());
                    }
                }
                inflight.into_iter().for_each(check);
            });
        }
    });
    // Batches of up to a whole ring, three in flight: producers move
    // completions (results and all) out of the slots they need.
    println!(
        "    {} packed tasks checked, {} completions moved",
        tasks.load(Ordering::Relaxed),
        rt.moved_completions()
    );
    // SPIN's results are the nanoseconds waited: at least those asked.
    let r = rt
        .submit(SPIN.packed(&[2_000u64; 40]))
        .unwrap()
        .wait()
        .unwrap();
    assert!(r.iter().all(|r| r.unwrap().value >= 2_000));
    // Unknown ops fail per task; unread packed batches give their slots back.
    let r = rt
        .submit(Tasks::raw_packed(Op(999), &[(); 70]))
        .unwrap()
        .wait()
        .unwrap();
    assert!(
        r.iter()
            .all(|r| r.unwrap_err().status == TaskStatus::UnknownOp)
    );
    for _ in 0..300 {
        drop(rt.submit(NOP.packed(&[(); 100])).unwrap());
    }
    assert!(
        rt.submit(NOP.packed(&[(); 0]))
            .unwrap()
            .wait()
            .unwrap()
            .is_empty()
    );
    // Refused with nothing submitted.
    assert!(matches!(
        rt.submit(NOP.packed(&[(); 128 * 32 + 1])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        rt.submit(Tasks::raw_packed(ECHO_OP, &[[0u64; 2]; 3])),
        Err(Error::PayloadTooLarge { len: 16, max: 8 })
    ));
    rt.shutdown().unwrap();
}

/// A worker runs its tasks one after another, whatever its pollers: the
/// task behind a long one starts after it ended, and the long task's own
/// waiter learns of the stall.
pub(crate) fn a_worker_runs_its_tasks_one_after_another() {
    let bound = Duration::from_millis(30);
    let rt = Runtime::builder()
        .workers(1)
        .pollers(8)
        .stall_after(bound)
        .build()
        .unwrap();
    for _ in 0..3 {
        let mut long = rt.submit(SPIN.args(&100_000_000u64)).unwrap();
        let mut behind = rt.submit(ECHO.args(&5u64)).unwrap();
        match long.wait_timeout(Duration::from_secs(1)) {
            Err(Error::Stalled { worker: 0, silent }) => assert!(silent > bound),
            other => panic!("expected Stalled on worker 0, got {other:?}"),
        }
        let done = |t: &mut pkq::Ticket| loop {
            match t.wait_timeout(Duration::from_secs(2)) {
                Ok(c) => break c,
                Err(Error::Stalled { worker: 0, .. }) => std::thread::sleep(bound),
                Err(e) => panic!("{e}"),
            }
        };
        let (l, b) = (done(&mut long), done(&mut behind));
        assert_eq!(b.value, 5);
        assert!(
            b.device_start_ns >= l.device_end_ns && b.device_end_ns >= l.device_end_ns,
            "the task behind ran from {} ns before the long one ended",
            l.device_end_ns.saturating_sub(b.device_start_ns)
        );
    }
    rt.shutdown().unwrap();
}

/// Exclusive producers (plain tail stores, no compare-and-swap), one per
/// ring, with slot copies: every task once, singles, batches and packs
/// checked against the host; the other submits refused while they hold
/// their rings; then shutdowns racing them: every task a submit kept runs
/// and reports its own result.
pub(crate) fn exclusive_producers_random_vs_cpu() {
    let rt = Runtime::builder()
        .capacity(64)
        .workers(16)
        .pollers(2)
        .rings(4)
        .build()
        .unwrap();
    let (n, producers) = (400_000u64, 4u64);
    let seen = counters(n);
    std::thread::scope(|s| {
        for p in 0..producers {
            let (rt, seen) = (&rt, &seen);
            let ex = rt.exclusive_producer_on(p as usize).unwrap();
            s.spawn(move || {
                pump_echo_via(
                    rt,
                    |a| ex.submit(ECHO_48.args(a)),
                    (p..n).step_by(producers as usize),
                    100,
                    900 + p,
                    seen,
                );
                let mut rng = Rng::new(950 + p);
                for _ in 0..500 {
                    let len = 1 + rng.below(64) as usize;
                    let args: Vec<[u64; 6]> = (0..len)
                        .map(|_| std::array::from_fn(|_| rng.next()))
                        .collect();
                    let got = ex.submit(ECHO_48.batch(&args)).unwrap().wait().unwrap();
                    assert_eq!(got.len(), args.len(), "every task's result");
                    for (r, a) in got.iter().zip(&args) {
                        assert_eq!(r.unwrap().value, echo_fold(a));
                    }
                    let words: Vec<u64> = (0..1 + rng.below(2048)).map(|_| rng.next()).collect();
                    let got = ex.submit(ECHO.packed(&words)).unwrap().wait().unwrap();
                    assert_eq!(got.len(), words.len(), "every task's result");
                    for (r, w) in got.iter().zip(&words) {
                        assert_eq!(r.unwrap().value, *w);
                    }
                }
            });
        }
        // Held rings refuse everyone else meanwhile.
        for ring in 0..4 {
            assert!(matches!(
                rt.exclusive_producer_on(ring),
                Err(Error::RingHeld)
            ));
        }
    });
    assert_each_once(&seen);
    // Given back: shared producers go on where they left off.
    pump_from_threads(&rt, 40_000, 4, 100, 990);
    rt.shutdown().unwrap();

    let mut kept_total = 0;
    for round in 0..20u64 {
        let rt = Runtime::builder()
            .capacity(64)
            .workers(8)
            .rings(2)
            .build()
            .unwrap();
        let kept: Vec<(u64, pkq::Ticket)> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..2u64)
                .map(|p| {
                    let ex = rt.exclusive_producer_on(p as usize).unwrap();
                    s.spawn(move || {
                        let mut kept = Vec::new();
                        for i in 0.. {
                            let id = round << 40 | p << 32 | i;
                            match ex.submit(ECHO.args(&id)) {
                                Ok(t) => kept.push((id, t)),
                                Err(Error::Closed) => break,
                                Err(e) => panic!("round {round}: {e}"),
                            }
                        }
                        kept
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_micros(100 * round));
            rt.shutdown().unwrap();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        kept_total += kept.len();
        for (id, t) in kept {
            assert_eq!(t.wait().unwrap().value, id, "round {round}");
        }
    }
    println!(
        "    {n} tasks through exclusive producers; {kept_total} kept by submits racing 20 shutdowns"
    );
}

/// This module's GPU tests, in the order they run (`main.rs` runs every
/// module's list; a test function left out of it is dead code, which the
/// runner's `#![deny(dead_code)]` refuses).
pub(crate) const TESTS: &[Test] = tests![
    echo_million_through_1024_slots,
    echo_from_four_producers,
    workers_1_8_32_64,
    exclusive_producers_random_vs_cpu,
    sequence_wrap_at_2_pow_63,
    batches_submit_and_reap,
    eight_producers_ten_million_each,
    holding_tickets_never_blocks_submit,
    producers_holding_more_than_the_ring,
    pollers_race_for_every_task,
    rings_spread_threads_and_lose_nothing,
    packed_batches_random_vs_cpu,
    a_worker_runs_its_tasks_one_after_another,
];
