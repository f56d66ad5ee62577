//! Lanes of blocks and groups (`Width`): wide tasks on random inputs against
//! a CPU reference beside narrow ones, every task counted; the ops each
//! width serves; shutdown and cancel with wide tasks in flight.

use super::*;
use pkq::Width;
use pkq::cudarc::driver::{CudaSlice, DevicePtr};

pub(crate) const TESTS: &[Test] = tests![
    wide_tasks_random_vs_cpu_beside_narrow_ones,
    wide_lanes_answer_after_idle_pauses,
    lanes_serve_the_ops_of_their_width,
    wide_builtins_random_vs_cpu,
    wide_lanes_stop_with_tasks_in_flight,
    wide_calls_cut_short_return_once_the_kernel_stopped,
    wide_task_past_the_stall_bound,
    a_group_poller_leaves_only_after_its_blocks,
    a_group_lane_whose_blocks_cannot_all_be_resident_does_not_start,
    host_buffers_random_vs_cpu,
    host_buffer_calls_wait_for_no_stream,
    device_buffers_on_the_host_buffers_stream_are_waited_for,
];

/// Lanes of every wide shape: a block of one warp, a block of 4, a group of
/// 3 blocks of 2 warps, a group of one block of 8 warps per SM.
pub(crate) const WIDE: [Width; 4] = [
    Width::Block { warps: 1 },
    Width::Block { warps: 4 },
    Width::Group {
        blocks: 3,
        warps: 2,
    },
    Width::Group {
        blocks: 0,
        warps: 8,
    },
];

/// GROUP_DOT's reference: the exact products summed in f64 (the device's
/// order differs: compared within a bound of the sum of magnitudes).
fn dot_ref(x: &[f32], y: &[f32]) -> (f64, f64) {
    x.iter().zip(y).fold((0.0, 0.0), |(s, m), (&a, &b)| {
        let p = f64::from(a) * f64::from(b);
        (s + p, m + p.abs())
    })
}

/// The device address of `s` (the stream is synchronized before any task
/// reads it).
fn addr(s: &CudaSlice<f32>, stream: &Arc<pkq::cudarc::driver::CudaStream>) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

/// GROUP_DOT of the `n` floats at device addresses `x` and `y` (0: a sum)
/// on `to`.
fn group_dot(to: &impl Submit, x: u64, y: u64, n: usize) -> pkq::Result<pkq::Ticket> {
    let args = DotArgs {
        x,
        y,
        n: n as u32,
        reserved: 0,
    };
    // SAFETY: x and y are device addresses of n floats each, alive until
    // every task of the test completed (their slices outlive the runtime).
    to.submit(unsafe { GROUP_DOT.args(&args).unchecked() })
}

/// A runtime of three lanes: warps (lane 0), blocks of 8 warps (lane 1, two
/// workers), groups of 4 blocks of 8 warps (lane 2, two workers), small
/// rings (many laps). Random vectors of random lengths; each lane's
/// producer keeps a window of tasks in flight, the wide lanes GROUP_DOT
/// against the CPU, lane 0 ECHO; every task's result is checked and
/// counted once. Under a sanitizer (one kernel at a time) the group's lane
/// alone, fewer tasks.
pub(crate) fn wide_tasks_random_vs_cpu_beside_narrow_ones() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(41);
    let sizes: Vec<usize> = [0usize, 1, 31, 32, 33, 255, 256, 257, 2048, 1 << 20]
        .into_iter()
        .chain((0..22).map(|_| rng.below(200_000) as usize))
        .collect();
    let data: Vec<_> = sizes
        .iter()
        .map(|&n| {
            let x: Vec<f32> = (0..n).map(|_| rng.unit() - 0.5).collect();
            let y: Vec<f32> = (0..n).map(|_| rng.unit() - 0.5).collect();
            let (xd, yd) = (
                stream.clone_htod(&x).unwrap(),
                stream.clone_htod(&y).unwrap(),
            );
            let want = dot_ref(&x, &y);
            (n, want, xd, yd)
        })
        .collect();
    stream.synchronize().unwrap();
    let addrs: Vec<(usize, (f64, f64), u64, u64)> = data
        .iter()
        .map(|(n, want, xd, yd)| (*n, *want, addr(xd, &stream), addr(yd, &stream)))
        .collect();
    // Lanes 1 (blocks) and 2 (a group) beside lane 0 (warps); under a
    // sanitizer, which runs one kernel at a time, the group's lane alone.
    let group = Runtime::builder()
        .capacity(16)
        .workers(2)
        .width(Width::Group {
            blocks: 4,
            warps: 8,
        });
    let (rt, wide, tasks) = if under_sanitizer() {
        (group.build().unwrap(), 0..1, 100)
    } else {
        let rt = Runtime::builder()
            .capacity(64)
            .add_lane(
                Runtime::builder()
                    .capacity(16)
                    .workers(2)
                    .width(Width::Block { warps: 8 }),
            )
            .add_lane(group)
            .build()
            .unwrap();
        (rt, 1..3, 1500)
    };
    std::thread::scope(|s| {
        for lane in wide.clone() {
            let (rt, addrs) = (&rt, &addrs);
            s.spawn(move || {
                let lane = rt.lane(lane).unwrap();
                let mut rng = Rng::new(lane_seed(lane));
                let mut q = VecDeque::new();
                let mut done = 0usize;
                let mut check = |(k, t): (usize, pkq::Ticket)| {
                    let (n, (want, mag), _, _) = addrs[k];
                    let got = f64::from_bits(t.wait().unwrap().value);
                    assert!(
                        (got - want).abs() <= 1e-9 * mag.max(1e-30),
                        "GROUP_DOT n {n}: {got} vs {want}"
                    );
                    done += 1;
                };
                for _ in 0..tasks {
                    if q.len() == 24 {
                        check(q.pop_front().unwrap());
                    }
                    let k = rng.below(addrs.len() as u64) as usize;
                    let (n, _, x, y) = addrs[k];
                    q.push_back((k, group_dot(lane, x, y, n).unwrap()));
                }
                q.into_iter().for_each(&mut check);
                assert_eq!(done, tasks, "every wide task answered once");
            });
        }
        // Narrow tasks on lane 0 meanwhile.
        if !under_sanitizer() {
            let seen: Vec<AtomicU64> = (0..20_000).map(|_| AtomicU64::new(0)).collect();
            pump_echo(&rt, 0..20_000, 32, 7, &seen);
            assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1));
        }
    });
    // Empty wide tasks, many laps of the wide lanes.
    for lane in wide {
        let l = rt.lane(lane).unwrap();
        let mut b = l.submit(GROUP_EMPTY.batch(&[(); 16])).unwrap();
        assert_eq!(b.wait().unwrap().len(), 16);
        for _ in 0..tasks / 3 {
            l.submit(GROUP_EMPTY.args(&())).unwrap().wait().unwrap();
            l.submit(NOP.args(&())).unwrap().wait().unwrap();
        }
    }
    rt.shutdown().unwrap();
    drop(data);
}

/// A wide lane after idle pauses: once idle for the policy's spin, its
/// poller sleeps between polls (Backoff) and its other blocks' first warps
/// nap between looks at the task line (Backoff, Quiet). Under every idle
/// policy, GROUP_DOT and NOP tasks after pauses of random length (0 to
/// 300 us, past the policies' 20 us) are each answered once and right, and
/// a shutdown while idle ends the lane.
pub(crate) fn wide_lanes_answer_after_idle_pauses() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(43);
    let n = 4099;
    let x: Vec<f32> = (0..n).map(|_| rng.unit() - 0.5).collect();
    let y: Vec<f32> = (0..n).map(|_| rng.unit() - 0.5).collect();
    let (want, mag) = dot_ref(&x, &y);
    let (xd, yd) = (
        stream.clone_htod(&x).unwrap(),
        stream.clone_htod(&y).unwrap(),
    );
    stream.synchronize().unwrap();
    let (xa, ya) = (addr(&xd, &stream), addr(&yd, &stream));
    let after = Duration::from_micros(20);
    let policies = [
        IdlePolicy::Spin,
        IdlePolicy::Quiet { after },
        IdlePolicy::Backoff {
            spin: after,
            max_sleep: Duration::from_micros(5),
        },
        // Naps from the first idle look (the blocks' waits too).
        IdlePolicy::Backoff {
            spin: Duration::ZERO,
            max_sleep: Duration::from_micros(5),
        },
    ];
    let rounds = if under_sanitizer() { 40 } else { 400 };
    for policy in policies {
        let rt = Runtime::builder()
            .capacity(8)
            .width(Width::Group {
                blocks: 2,
                warps: 4,
            })
            .idle(policy)
            .build()
            .unwrap();
        let lane = rt.lane(0).unwrap();
        for i in 0..rounds {
            std::thread::sleep(Duration::from_micros(rng.below(300)));
            let got = f64::from_bits(group_dot(lane, xa, ya, n).unwrap().wait().unwrap().value);
            assert!(
                (got - want).abs() <= 1e-9 * mag.max(1e-30),
                "{policy:?} round {i}: {got} vs {want}"
            );
            // And one right behind it, to a lane that is not idle.
            lane.submit(NOP.args(&())).unwrap().wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
        rt.shutdown().unwrap();
    }
    drop((xd, yd));
}

fn lane_seed(lane: &pkq::Lane) -> u64 {
    lane as *const pkq::Lane as u64
}

/// A lane of warps refuses group ops, a wide lane warp ops (NOP aside),
/// packs and IO areas; the refusals are typed and nothing runs.
pub(crate) fn lanes_serve_the_ops_of_their_width() {
    if under_sanitizer() {
        return skip("two resident kernels at once, which a sanitizer runs one after the other");
    }
    let rt = Runtime::builder()
        .add_lane(Runtime::builder().width(Width::Group {
            blocks: 2,
            warps: 2,
        }))
        .build()
        .unwrap();
    let wide = rt.lane(1).unwrap();
    let mismatch =
        |r: pkq::Result<pkq::Ticket>| assert!(matches!(r, Err(Error::OpMismatch { .. })), "{r:?}");
    mismatch(rt.submit(GROUP_EMPTY.args(&())));
    mismatch(wide.submit(ECHO.args(&1)));
    mismatch(wide.submit(SPIN.args(&1)));
    assert!(matches!(
        wide.submit(ECHO.packed(&[1u64, 2])),
        Err(Error::InvalidArgument(_))
    ));
    // NOP is served at every width, the group op by the wide lane.
    wide.submit(NOP.args(&())).unwrap().wait().unwrap();
    wide.submit(GROUP_EMPTY.args(&())).unwrap().wait().unwrap();
    rt.submit(ECHO.args(&5)).unwrap().wait().unwrap();
    // Declared ops are checked at build.
    let built = Runtime::builder()
        .width(Width::Block { warps: 4 })
        .op(&ECHO)
        .build();
    assert!(matches!(built, Err(Error::OpMismatch { .. })), "{built:?}");
    // Settings no wide lane can have.
    for b in [
        Runtime::builder()
            .width(Width::Block { warps: 4 })
            .io(64, 64),
        Runtime::builder()
            .width(Width::Block { warps: 4 })
            .pollers(2),
        Runtime::builder().width(Width::Block { warps: 9 }),
        Runtime::builder().width(Width::Group {
            blocks: 1025,
            warps: 1,
        }),
    ] {
        assert!(matches!(b.build(), Err(Error::InvalidConfig(_))));
    }
    // A lane of more blocks than the device keeps resident is refused
    // before its memory is allocated (its trace log alone would be
    // gigabytes of pinned memory here).
    let t0 = std::time::Instant::now();
    let built = Runtime::builder()
        .workers(1024)
        .capacity(1024)
        .width(Width::Group {
            blocks: 1024,
            warps: 8,
        })
        .build();
    assert!(
        matches!(built, Err(Error::InvalidConfig(ref m)) if m.contains("resident at once")),
        "{built:?}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(1),
        "refused after {:?}",
        t0.elapsed()
    );
}

/// Wide tasks in flight (long GROUP_DOTs, queued behind one another) when
/// the runtime shuts down (every task completes, Ok) or is cancelled
/// (every ticket answers: Ok with the right sum, the cancel's error, or a
/// task cut short, `TaskStatus::Stopped`; never a wrong sum), with nothing
/// hung.
pub(crate) fn wide_lanes_stop_with_tasks_in_flight() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let n = 1 << 22;
    let x = stream.clone_htod(&vec![1.0f32; n]).unwrap();
    stream.synchronize().unwrap();
    let xa = addr(&x, &stream);
    for cancel in [false, true] {
        let rt = Runtime::builder()
            .width(Width::Group {
                blocks: 4,
                warps: 8,
            })
            .capacity(64)
            .build()
            .unwrap();
        let tickets: Vec<_> = (0..48).map(|_| group_dot(&rt, xa, 0, n).unwrap()).collect();
        let t0 = Instant::now();
        if cancel {
            rt.cancel().unwrap();
        } else {
            rt.shutdown().unwrap();
        }
        for t in tickets {
            match t.wait() {
                Ok(c) => assert_eq!(f64::from_bits(c.value), n as f64),
                Err(Error::Cancelled) if cancel => {}
                // Cut short by the cancel's stop: no result, said so.
                Err(Error::Task(e)) if cancel && e.status == TaskStatus::Stopped => {}
                Err(e) => panic!("cancel {cancel}: {e:?}"),
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
    drop(x);
}

/// A group lane whose blocks cannot all become resident (another
/// runtime's group holds every SM but one) does not start: its build ends
/// in `KernelTimeout`, rather than returning a lane whose block 0 serves
/// and hands tasks to a block that is not there (waits then say `Stalled`
/// and safe calls never return). Once the other runtime is gone, groups
/// start and serve as before.
pub(crate) fn a_group_lane_whose_blocks_cannot_all_be_resident_does_not_start() {
    if under_sanitizer() {
        return skip("two resident kernels at once, which a sanitizer runs one after the other");
    }
    let sms = pkq::device_info(0).unwrap().multiprocessors as u32;
    let group = |blocks| {
        Runtime::builder()
            .width(Width::Group { blocks, warps: 8 })
            .capacity(64)
    };
    // The test's premise: one block of 8 warps per SM at most (the
    // kernel's registers), so a group of sms - 1 blocks leaves one SM.
    match group(sms + 1).build() {
        Err(Error::InvalidConfig(msg)) if msg.contains("resident at once") => {}
        other => panic!(
            "premise: {} blocks of 8 warps are not refused: {other:?}",
            sms + 1
        ),
    }
    let holder = group(sms - 1).build().unwrap();
    holder
        .submit(GROUP_EMPTY.args(&()))
        .unwrap()
        .wait()
        .unwrap();
    let t0 = Instant::now();
    let built = group(2)
        .start_timeout(Duration::from_secs(2))
        .stop_timeout(Duration::from_millis(500))
        .build();
    let took = t0.elapsed();
    match built {
        Err(Error::KernelTimeout(_)) => {}
        other => {
            // Let the missing block in before anything waits on it.
            holder.shutdown().unwrap();
            if let Ok(rt) = &other {
                let _ = rt.shutdown();
            }
            panic!("a group missing a block: expected KernelTimeout, got {other:?}");
        }
    }
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The holder still serves; once it is gone, a group of two starts.
    holder
        .submit(GROUP_EMPTY.args(&()))
        .unwrap()
        .wait()
        .unwrap();
    holder.shutdown().unwrap();
    let rt = group(2).build().unwrap();
    for _ in 0..100 {
        rt.submit(GROUP_EMPTY.args(&())).unwrap().wait().unwrap();
    }
    rt.shutdown().unwrap();
}

/// A call on borrowed buffers (`Lane::call_on_buffers`) on a lane of
/// groups whose task a cancel ends returns only once the kernel is known to
/// have stopped, whether the wait sees the cancel (`Error::Cancelled`) or
/// the task cut short (`TaskStatus::Stopped`: the poller stopped waiting
/// for its group, whose other blocks may run the task on the caller's
/// buffers until the kernel exits). The task is a GROUP_DOT long enough
/// (1 GiB read by two warps) that the cancel lands inside it; the liveness
/// probe, which would latch the cancel for the wait, runs every 20 ms, so
/// that the wait sees the completion the poller writes when it gives up
/// (within PKQ_GROUP_STOP_SPINS spins); rounds run until a wait has seen
/// the task cut short (at most 20).
pub(crate) fn wide_calls_cut_short_return_once_the_kernel_stopped() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let n = GROUP_MAX_N;
    let x = stream.alloc_zeros::<f32>(n).unwrap();
    stream.synchronize().unwrap();
    let mut cut = 0;
    for _ in 0..20 {
        let rt = Runtime::builder()
            .width(Width::Group {
                blocks: 2,
                warps: 1,
            })
            .probe_interval(Duration::from_millis(20))
            .build()
            .unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                let _ = rt.cancel();
            });
            let (xp, _read) = x.device_ptr(&stream);
            let args = DotArgs {
                x: xp,
                y: 0,
                n: n as u32,
                reserved: 0,
            };
            // SAFETY: x is a live buffer of n floats in the runtime's
            // context, borrowed for the call; its stream is the one given.
            let r = unsafe { rt.call_on_buffers(&GROUP_DOT, &args, &[&stream]) };
            match &r {
                Ok(c) => assert_eq!(f64::from_bits(c.value), 0.0),
                Err(Error::Cancelled) => {}
                Err(Error::Task(e)) if e.status == TaskStatus::Stopped => cut += 1,
                Err(e) => panic!("{e:?}"),
            }
            if r.is_err() {
                assert_eq!(
                    pkq::running_kernels(0).unwrap(),
                    0,
                    "the call returned ({r:?}) while the group could still run its task"
                );
            }
        });
        if cut > 0 {
            break;
        }
    }
    assert!(
        cut > 0,
        "no wait saw a task cut short in 20 rounds: nothing was tested"
    );
    drop(x);
}

/// The safe calls of the built-ins on wide lanes (their `GROUP_` ops): on a
/// block of one warp and of four, a group of 3 blocks and a group of one
/// block per SM, random
/// vectors of random lengths and offsets (16-byte aligned and not: both
/// paths of each op) against the CPU: AXPY and FIR bit for bit (the same
/// fused multiply-adds in the same order), MEMCPY and MEMSET byte for byte,
/// DOT, SUM and GEMV within their rounding bound; a GEMV of 8192 x 8192 on
/// the widest; lengths past the wide limits refused on the host. Under a
/// sanitizer, a runtime per case, started after its buffers.
pub(crate) fn wide_builtins_random_vs_cpu() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(0x51de);
    let vec = |rng: &mut Rng, n: usize| (0..n).map(|_| rng.unit()).collect::<Vec<f32>>();
    for (wi, width) in WIDE.into_iter().enumerate() {
        // One runtime for every case; under a sanitizer one per case, built
        // after the case's buffers (memcheck judges a kernel's accesses by
        // the allocations made before its launch).
        let shared = (!under_sanitizer()).then(|| Runtime::builder().width(width).build().unwrap());
        let build = || Runtime::builder().width(width).build().unwrap();
        let mut lens: Vec<usize> = vec![0, 1, 3, 4, 5, 127, 4096, 4099, 1 << 20];
        lens.extend((0..6).map(|_| rng.below(300_000) as usize));
        for &n in &lens {
            // 0: 16-byte aligned; 1: 4 bytes past.
            let off = rng.below(2) as usize;
            let (x, y) = (vec(&mut rng, n + off), vec(&mut rng, n + off));
            let a = rng.unit();
            let xd = stream.clone_htod(&x).unwrap();
            let mut yd = stream.clone_htod(&y).unwrap();
            // Bytes: x's bytes copied over y's at byte offsets, then some set.
            let (so, d_o) = (rng.below(17) as usize, rng.below(17) as usize);
            let bytes = 4 * n;
            let src: Vec<u8> = (0..bytes + 16).map(|_| rng.next() as u8).collect();
            let srcd = stream.clone_htod(&src).unwrap();
            let mut dstd = stream.clone_htod(&vec![0u8; bytes + 16]).unwrap();
            // FIR over x, taps from y (more taps than a warp has lanes on the
            // first length past 64).
            let taps = if n == 127 {
                64
            } else {
                1 + rng.below(64) as usize
            };
            let outs = (n + 1).saturating_sub(taps);
            let h: Vec<f32> = (0..taps)
                .map(|k| y.get(k).copied().unwrap_or(0.0))
                .collect();
            let hd = stream.clone_htod(&h).unwrap();
            let mut fd = stream.clone_htod(&vec![0f32; outs.max(1)]).unwrap();
            stream.synchronize().unwrap();
            let fresh = shared.is_none().then(build);
            let rt = shared.as_ref().or(fresh.as_ref()).unwrap();
            assert_eq!(rt.width(), width);
            let dot = rt.dot(&xd.slice(off..), &yd.slice(off..)).unwrap();
            let sum = rt.sum(&xd.slice(off..)).unwrap();
            let (want, mag) = dot_ref(&x[off..], &y[off..]);
            assert!(
                (dot - want).abs() <= 1e-9 * mag.max(1.0),
                "{width:?} dot {n}+{off}: {dot} vs {want}"
            );
            let (want, mag) = dot_ref(&x[off..], &vec![1.0; n]);
            assert!(
                (sum - want).abs() <= 1e-9 * mag.max(1.0),
                "{width:?} sum {n}+{off}: {sum} vs {want}"
            );
            rt.axpy(a, &xd.slice(off..), &mut yd.slice_mut(off..))
                .unwrap();
            let got = stream.clone_dtoh(&yd).unwrap();
            for i in off..n + off {
                assert_eq!(
                    got[i].to_bits(),
                    a.mul_add(x[i], y[i]).to_bits(),
                    "{width:?} axpy {n}+{off}, {i}"
                );
            }
            assert_eq!(
                got[..off],
                y[..off],
                "{width:?} axpy wrote before its range"
            );
            let len = bytes.saturating_sub(so.max(d_o));
            rt.memcpy(
                &mut dstd.slice_mut(d_o..d_o + len),
                &srcd.slice(so..so + len),
            )
            .unwrap();
            let mut want = vec![0u8; bytes + 16];
            want[d_o..d_o + len].copy_from_slice(&src[so..so + len]);
            assert!(
                stream.clone_dtoh(&dstd).unwrap() == want,
                "{width:?} memcpy {len} bytes, {so} -> {d_o}"
            );
            let byte = rng.next() as u8;
            rt.memset(&mut dstd.slice_mut(so..so + len / 2), byte)
                .unwrap();
            want[so..so + len / 2].fill(byte);
            assert!(
                stream.clone_dtoh(&dstd).unwrap() == want,
                "{width:?} memset {} at {so}",
                len / 2
            );
            if n >= taps {
                rt.fir(&xd.slice(off..), &hd, &mut fd).unwrap();
                let got = stream.clone_dtoh(&fd).unwrap();
                for i in 0..outs {
                    let w = (0..taps).fold(0.0f32, |s, k| h[k].mul_add(x[off + i + k], s));
                    assert_eq!(
                        got[i].to_bits(),
                        w.to_bits(),
                        "{width:?} fir {outs} outputs, {taps} taps, {i}"
                    );
                }
            }
        }
        // GEMV: random shapes (columns a multiple of 4 or not, A at an
        // offset or not), and 8192 x 8192 on the widest lane.
        let mut shapes: Vec<(usize, usize)> = vec![(1, 1), (64, 64), (3, 129), (1000, 4)];
        shapes.extend((0..5).map(|_| (1 + rng.below(700) as usize, 1 + rng.below(700) as usize)));
        if wi == 3 {
            shapes.push((8192, 8192));
        }
        for (r, c) in shapes {
            let off = rng.below(2) as usize;
            let a = vec(&mut rng, r * c + off);
            let x = vec(&mut rng, c);
            let ad = stream.clone_htod(&a).unwrap();
            let xd = stream.clone_htod(&x).unwrap();
            let mut yd = stream.clone_htod(&vec![0f32; r]).unwrap();
            stream.synchronize().unwrap();
            let fresh = shared.is_none().then(build);
            let rt = shared.as_ref().or(fresh.as_ref()).unwrap();
            rt.gemv(&ad.slice(off..), r, c, &xd, &mut yd).unwrap();
            let got = stream.clone_dtoh(&yd).unwrap();
            for i in 0..r {
                let (w, mag) = dot_ref(&a[off + i * c..off + (i + 1) * c], &x);
                let bound = 2.0 * c as f64 * f64::from(f32::EPSILON) * mag + 1e-30;
                assert!(
                    (f64::from(got[i]) - w).abs() <= bound,
                    "{width:?} gemv {r}x{c}+{off}, row {i}: {} vs {w}",
                    got[i]
                );
            }
        }
        // Past the wide limit, lengths otherwise consistent: refused on the
        // host.
        let long = stream
            .clone_htod(&vec![0f32; GROUP_GEMV_MAX_DIM + 1])
            .unwrap();
        let mut out = stream.clone_htod(&vec![0f32; 1]).unwrap();
        let rt = shared.unwrap_or_else(build);
        let r = rt.gemv(&long, 1, GROUP_GEMV_MAX_DIM + 1, &long, &mut out);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    }
}

/// A wide task that outlasts the stall bound (a GROUP_DOT of 1 GiB by two
/// warps; the bound 10 ms: its poller, waiting for its group, does not
/// beat): a wait returns `Error::Stalled`, leaving the task pending, and a
/// later wait sees it complete with the right sum; a cancel during another
/// such task ends it (the sum, Cancelled or Stopped) with nothing hung.
pub(crate) fn wide_task_past_the_stall_bound() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let n = GROUP_MAX_N;
    let x = stream.alloc_zeros::<f32>(n).unwrap();
    stream.synchronize().unwrap();
    let xa = addr(&x, &stream);
    let rt = Runtime::builder()
        .width(Width::Group {
            blocks: 2,
            warps: 1,
        })
        .stall_after(Duration::from_millis(10))
        .build()
        .unwrap();
    let mut t = group_dot(&rt, xa, 0, n).unwrap();
    match t.wait_timeout(Duration::from_secs(10)) {
        Err(Error::Stalled { .. }) => {}
        other => panic!("a task of 1 GiB by two warps within 10 ms: {other:?}"),
    }
    loop {
        match t.wait_timeout(Duration::from_secs(10)) {
            Ok(c) => {
                assert_eq!(f64::from_bits(c.value), 0.0);
                break;
            }
            Err(Error::Stalled { .. }) => continue,
            Err(e) => panic!("{e:?}"),
        }
    }
    let t = group_dot(&rt, xa, 0, n).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let t0 = Instant::now();
    rt.cancel().unwrap();
    match t.wait() {
        Ok(c) => assert_eq!(f64::from_bits(c.value), 0.0),
        Err(Error::Cancelled) => {}
        Err(Error::Task(e)) if e.status == TaskStatus::Stopped => {}
        Err(e) => panic!("{e:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(10));
    drop(rt);
    drop(x);
}

/// GROUP_SPIN on a group of two blocks: block 1 waits its argument, the
/// value says so, and one past `SPIN_MAX_NS` is `BadArgs`. Then a cancel
/// that lands while block 1 still waits out a GROUP_SPIN of 300 ms: the
/// group's poller stops waiting for it (the task is `Stopped`), yet its
/// state word (`Lane::debug_state`) stays as it was until block 1 left.
/// Where the driver reports a fault on every context (another device's),
/// the host takes a kernel all of whose pollers stored their final state
/// for one that exited, and lets borrowing calls return: a poller that
/// stored it before its blocks left would let them run on in memory
/// handed back. A round whose cancel came before the task started (the
/// task `Cancelled`) tests nothing and is run again (5 rounds at most).
pub(crate) fn a_group_poller_leaves_only_after_its_blocks() {
    let group = || {
        Runtime::builder()
            .width(Width::Group {
                blocks: 2,
                warps: 1,
            })
            .stop_timeout(Duration::from_secs(20))
            .build()
            .unwrap()
    };
    let rt = group();
    let ns = 2_000_000u64;
    let t0 = Instant::now();
    let c = rt.submit(GROUP_SPIN.args(&ns)).unwrap().wait().unwrap();
    assert_eq!(c.value, ns);
    assert!(
        t0.elapsed() >= Duration::from_nanos(ns),
        "{:?}",
        t0.elapsed()
    );
    match rt
        .submit(GROUP_SPIN.args(&(SPIN_MAX_NS + 1)))
        .unwrap()
        .wait()
    {
        Err(Error::Task(e)) if e.status == TaskStatus::BadArgs => {}
        other => panic!("GROUP_SPIN past SPIN_MAX_NS: {other:?}"),
    }
    drop(rt);
    for _ in 0..5 {
        let rt = group();
        // The poller's state, without its position.
        let state = || -> String {
            let all = rt.debug_state();
            let line = all
                .lines()
                .find(|l| l.contains("worker 0 poller 0"))
                .unwrap_or_else(|| panic!("no poller in {all:?}"))
                .to_owned();
            line.split("state ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
                .to_owned()
        };
        let running = state();
        let spin = Duration::from_millis(300);
        let t0 = Instant::now();
        let t = rt
            .submit(GROUP_SPIN.args(&(spin.as_nanos() as u64)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let left = std::thread::scope(|s| {
            let cancel = s.spawn(|| rt.cancel());
            // The first sign that the poller left: its state word changed,
            // or the cancel (which waits for the kernel's exit) returned.
            let left = loop {
                if state() != running || cancel.is_finished() {
                    break t0.elapsed();
                }
                std::thread::sleep(Duration::from_micros(100));
            };
            cancel.join().unwrap().unwrap();
            left
        });
        match t.wait() {
            Err(Error::Cancelled) => continue,
            Err(Error::Task(e)) if e.status == TaskStatus::Stopped => {}
            other => panic!("a GROUP_SPIN of {spin:?} cancelled after 30 ms: {other:?}"),
        }
        assert!(
            left + Duration::from_millis(20) >= spin,
            "the poller left {left:?} after the submit, while block 1 waited {spin:?}"
        );
        return;
    }
    panic!("in 5 rounds the cancel always came before the task started: nothing was tested");
}

/// Host buffers (`HostBuffer`) at every width: filled in place, handed to
/// the safe calls as device buffers are (MEMCPY host to host, device to
/// host and host to device, AXPY and DOT on host memory, the options
/// example's pricer on a host book), each result read from the slice
/// right after the call and checked against the CPU; 200 laps of one
/// buffer pair with a new fill each (what the device wrote is in the slice
/// once the call returns); lengths checked; an empty buffer refused. The
/// buffers are made while the runtime runs (before it, under a sanitizer).
pub(crate) fn host_buffers_random_vs_cpu() {
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let mut rng = Rng::new(0x4b);
    assert!(matches!(
        pkq::HostBuffer::<u8>::new(0, 0),
        Err(Error::InvalidArgument(_))
    ));
    let book = options::random_book(5_000, 9);
    let book_d = stream.clone_htod(&book).unwrap();
    let mut dev = stream.clone_htod(&vec![0u8; 1 << 20]).unwrap();
    let host = |n| pkq::HostBuffer::<u8>::new(0, n).unwrap();
    for width in std::iter::once(Width::Warp).chain(WIDE) {
        let most = if width == Width::Warp {
            pkq::builtin::MEMCPY_MAX_BYTES
        } else {
            1 << 20
        };
        // Under a sanitizer every buffer a task touches is made before the
        // kernel starts (memcheck judges a kernel's accesses by the
        // allocations made before its launch); otherwise while it runs.
        let early = under_sanitizer();
        let started = (!early).then(|| Runtime::builder().width(width).build().unwrap());
        let sizes = [1usize, 15, 4096, most, 1 + rng.below(most as u64) as usize];
        let mut pairs: Vec<_> = sizes.iter().map(|&n| (host(n), host(n))).collect();
        let mut a = pkq::HostBuffer::<u64>::new(0, 512).unwrap();
        let mut b = pkq::HostBuffer::<u64>::new(0, 512).unwrap();
        let n = 1 + rng.below(60_000) as usize;
        let mut x = pkq::HostBuffer::<f32>::new(0, n).unwrap();
        let mut y = pkq::HostBuffer::<f32>::new(0, n).unwrap();
        let rt = started.unwrap_or_else(|| Runtime::builder().width(width).build().unwrap());
        for (a, b) in &mut pairs {
            let n = a.len();
            assert!(b.iter().all(|&v| v == 0), "zeroed");
            a.iter_mut().for_each(|v| *v = rng.next() as u8);
            rt.memcpy(b, a).unwrap();
            assert!(a[..] == b[..], "{width:?} host to host, {n} bytes");
            let mut d = dev.slice_mut(..n);
            rt.memcpy(&mut d, a).unwrap();
            b.fill(0);
            rt.memcpy(b, &d).unwrap();
            assert!(a[..] == b[..], "{width:?} through the device, {n} bytes");
        }
        // Laps of one pair: each fill, copied, read back at once.
        for lap in 0..200u64 {
            a.iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = lap << 32 | i as u64);
            rt.memcpy(&mut b, &a).unwrap();
            assert!(a[..] == b[..], "{width:?} lap {lap}");
        }
        assert!(matches!(
            rt.memcpy(&mut b, &rt.host_buffer::<u64>(511).unwrap()),
            Err(Error::InvalidArgument(_))
        ));
        // AXPY and DOT on host memory.
        x.iter_mut().for_each(|v| *v = rng.unit());
        y.iter_mut().for_each(|v| *v = rng.unit());
        let (x0, y0) = (x.to_vec(), y.to_vec());
        let a = rng.unit();
        if n <= pkq::builtin::AXPY_MAX_N || width != Width::Warp {
            rt.axpy(a, &x, &mut y).unwrap();
            for i in 0..n {
                assert_eq!(y[i], a.mul_add(x0[i], y0[i]), "{width:?} axpy {i} of {n}");
            }
        }
        if n <= pkq::builtin::DOT_MAX_N || width != Width::Warp {
            let (want, mag) = dot_ref(&x, &y);
            let got = rt.dot(&x, &y).unwrap();
            assert!(
                (got - want).abs() <= 1e-9 * mag.max(1.0),
                "{width:?} dot {n}"
            );
        }
        drop(rt);
        if options::IMAGE.is_empty() {
            continue;
        }
        // A module's own call on host buffers: the book priced in place.
        let n = if width == Width::Warp {
            1_000
        } else {
            book.len()
        };
        let started = (!early).then(|| options::runtime(width).unwrap());
        let mut hb = pkq::HostBuffer::<options::OptionIn>::new(0, n).unwrap();
        hb.copy_from_slice(&book[..n]);
        let mut out = pkq::HostBuffer::<options::Greeks>::new(0, n).unwrap();
        let rt = started.unwrap_or_else(|| options::runtime(width).unwrap());
        options::price(&rt, 0.02, &hb, &mut out).unwrap();
        let err = options::max_rel_error(&book[..n], 0.02, &out);
        assert!(err <= 1e-5, "{width:?} options on host buffers: {err}");
        // And a device book into host room.
        out.fill(options::Greeks::default());
        options::price(&rt, 0.02, &book_d.slice(..n), &mut out).unwrap();
        let err = options::max_rel_error(&book[..n], 0.02, &out);
        assert!(err <= 1e-5, "{width:?} options into a host buffer: {err}");
    }
}

/// A built-in call on host buffers waits for no stream, the buffers' own
/// included: it returns while cudarc copies queued on that stream (into a
/// slice of a third host buffer: pinned memory, so they run on after their
/// call returns) still run, and its output is whole when it returns. Two
/// 64 MiB copies a round against a 1 MiB memcpy; a call that synchronized
/// the stream would find it idle after every round, so one round of four
/// that finds it busy is the test (a thread held up for the copies' few
/// milliseconds can make a round find it idle).
pub(crate) fn host_buffer_calls_wait_for_no_stream() {
    use pkq::cudarc::driver::sys;
    let (n, big) = (1 << 20, 64 << 20);
    let mut a = pkq::HostBuffer::<u8>::new(0, n).unwrap();
    let mut b = pkq::HostBuffer::<u8>::new(0, n).unwrap();
    let mut c = pkq::HostBuffer::<u8>::new(0, big).unwrap();
    let hs = pkq::cudarc::driver::DeviceSlice::stream(&a).clone();
    let dev = hs.clone_htod(&vec![9u8; big]).unwrap();
    hs.synchronize().unwrap();
    let rt = Runtime::builder()
        .width(Width::Group {
            blocks: 0,
            warps: 8,
        })
        .build()
        .unwrap();
    let mut busy = 0;
    for round in 1..=4u8 {
        a.fill(round);
        hs.memcpy_dtoh(&dev, &mut c[..]).unwrap();
        hs.memcpy_dtoh(&dev, &mut c[..]).unwrap();
        rt.memcpy(&mut b, &a).unwrap();
        // SAFETY: a live stream of this process (its buffer is alive).
        if unsafe { sys::cuStreamQuery(hs.cu_stream()) } == sys::CUresult::CUDA_ERROR_NOT_READY {
            busy += 1;
        }
        let stale = b.iter().filter(|&&x| x != round).count();
        assert_eq!(stale, 0, "round {round}: {stale} bytes not copied");
        hs.synchronize().unwrap();
        assert!(c.iter().all(|&x| x == 9), "round {round}: the copies");
        c.fill(0);
    }
    // The stream busy at the query is timing, which a sanitizer does not
    // keep (it may run a stream's copies one at a time, each done by the
    // time its call returns): there only the copies' results are checked.
    assert!(
        busy > 0 || under_sanitizer(),
        "every call waited for the host buffers' stream"
    );
}

/// A device buffer allocated on the host buffers' stream is a device
/// buffer: a built-in call waits for the work queued on its stream (here
/// its zeroing, queued behind two 64 MiB copies), so that work neither
/// runs after the task nor wipes its output. Then work on another stream:
/// a copy into it queued there behind a 256 MiB copy is ordered before
/// the task as on any cudarc stream (its events). Buffers are made before
/// the runtime starts (see axpy_random_vs_cpu).
pub(crate) fn device_buffers_on_the_host_buffers_stream_are_waited_for() {
    // A warp's MEMCPY at its most.
    let (n, big) = (pkq::builtin::MEMCPY_MAX_BYTES, 64 << 20);
    let a = {
        let mut a = pkq::HostBuffer::<u8>::new(0, n).unwrap();
        a.fill(7);
        a
    };
    let mut back = pkq::HostBuffer::<u8>::new(0, n).unwrap();
    let mut c = pkq::HostBuffer::<u8>::new(0, big).unwrap();
    let hs = pkq::cudarc::driver::DeviceSlice::stream(&a).clone();
    let dev = hs.clone_htod(&vec![9u8; big]).unwrap();
    let mut out = hs.alloc_zeros::<u8>(n).unwrap();
    // Another stream, made before any resident kernel runs (a tracking
    // handle's first stream synchronizes the context).
    let other = pkq::context(0).unwrap().new_stream().unwrap();
    let mut long = other.alloc_zeros::<u8>(256 << 20).unwrap();
    let long_src = other.alloc_zeros::<u8>(256 << 20).unwrap();
    let fills: Vec<_> = (1..=3u8)
        .map(|v| other.clone_htod(&vec![v; n]).unwrap())
        .collect();
    hs.synchronize().unwrap();
    other.synchronize().unwrap();
    // A lane of warps: the zeroing may be a kernel of the driver's, which
    // needs room on the SMs.
    let rt = Runtime::builder().build().unwrap();
    for round in 0..3 {
        hs.memcpy_dtoh(&dev, &mut c[..]).unwrap();
        hs.memcpy_dtoh(&dev, &mut c[..]).unwrap();
        hs.memset_zeros(&mut out).unwrap();
        rt.memcpy(&mut out, &a).unwrap();
        rt.memcpy(&mut back, &out).unwrap();
        let wrong = back.iter().filter(|&&x| x != 7).count();
        assert_eq!(wrong, 0, "round {round}: {wrong} bytes of the output wiped");
    }
    hs.synchronize().unwrap();
    for (v, fill) in (1..=3u8).zip(&fills) {
        other.memcpy_dtod(&long_src, &mut long).unwrap();
        other.memcpy_dtod(fill, &mut out).unwrap();
        rt.memcpy(&mut back, &out).unwrap();
        let stale = back.iter().filter(|&&x| x != v).count();
        assert_eq!(
            stale, 0,
            "fill {v}: {stale} bytes read before the other stream's copy"
        );
    }
    other.synchronize().unwrap();
}
