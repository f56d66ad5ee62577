//! Isolation: SM partitions (sizes, the application's kernels on the rest
//! of the device), lanes under load, the default shape. Every task checked
//! against the CPU and counted.

use super::*;
use pkq::Submit;
use pkq::cudarc::driver::{LaunchConfig, PushKernelArg};
use pkq::cudarc::nvrtc::Ptx;

/// `n` random ECHO round trips on `rt`, each checked; how many.
fn echo_round_trips(rt: &pkq::Lane, rng: &mut Rng, n: usize) -> usize {
    for _ in 0..n {
        let v = rng.next();
        let c = rt.submit(ECHO.args(&v)).unwrap().wait().unwrap();
        assert_eq!(c.value, v);
    }
    n
}

/// Every size the device allows is granted rounded up, reported, and
/// serves; sizes that leave the application nothing are refused.
pub(crate) fn sm_partition_sizes() {
    let g = match pkq::sm_partition_support(0) {
        Ok(g) => g,
        Err(Error::PartitionUnsupported(why)) => return skip(&format!("no partitions: {why}")),
        Err(e) => panic!("{e:?}"),
    };
    println!(
        "    device: {} SMs, min {}, align {}",
        g.sms, g.min, g.align
    );
    let rounded = |n: usize| n.max(g.min).next_multiple_of(g.align);
    let mut rng = Rng::new(0x15_0147);
    // The smallest, odd requests, and the largest that leaves some SMs.
    let largest = (g.sms - 1) / g.align * g.align;
    for ask in [
        1,
        g.min,
        g.min + 1,
        2 * g.align - 1,
        3 * g.align + 1,
        largest,
    ] {
        let rt = Runtime::builder().sm_partition(ask).build().unwrap();
        let part = rt.sm_partition().unwrap().clone();
        assert_eq!(part.sms(), rounded(ask), "asked {ask}");
        assert_eq!(part.sms() + part.app_sms(), g.sms, "asked {ask}");
        assert_eq!(echo_round_trips(&rt, &mut rng, 2000), 2000);
        let mut b = rt.submit(ECHO.batch(&[7u64; 64])).unwrap();
        assert!(
            b.wait()
                .unwrap()
                .iter()
                .all(|r| r.as_ref().unwrap().value == 7)
        );
        rt.shutdown().unwrap();
        println!(
            "    asked {ask}: {} SMs, {} left",
            part.sms(),
            part.app_sms()
        );
    }
    // The whole device, or a size that rounds to it, or past it: refused.
    for ask in [largest + 1, g.sms, g.sms + 1, 10 * g.sms] {
        match Runtime::builder().sm_partition(ask).build() {
            Err(Error::InvalidConfig(why)) => assert!(why.contains("SM"), "{why}"),
            other => panic!("asked {ask}: {other:?}"),
        }
    }
    match Runtime::builder().sm_partition(0).build() {
        Err(Error::InvalidConfig(_)) => {}
        other => panic!("asked 0: {other:?}"),
    }
    // More warps than 8 SMs hold: refused, naming the partition.
    match Runtime::builder()
        .sm_partition(g.min)
        .workers(1024)
        .capacity(1024)
        .build()
    {
        Err(Error::InvalidConfig(why)) => assert!(why.contains("partition"), "{why}"),
        other => panic!("1024 workers on {} SMs: {other:?}", g.min),
    }
    match pkq::sm_partition_support(99) {
        Err(Error::DeviceOutOfRange { index: 99, .. }) => {}
        other => panic!("device 99: {other:?}"),
    }
}

/// A partition not made before is refused, not waited for, while a pkq
/// kernel runs on the device (the driver's green-context creation waits for
/// the device's running kernels, and a resident one never ends); one made
/// before serves beside it.
pub(crate) fn new_partitions_are_refused_beside_a_running_kernel() {
    let g = match pkq::sm_partition_support(0) {
        Ok(g) => g,
        Err(Error::PartitionUnsupported(why)) => return skip(&format!("no partitions: {why}")),
        Err(e) => panic!("{e:?}"),
    };
    // Made (or found) while nothing runs.
    Runtime::builder()
        .sm_partition(g.min)
        .build()
        .unwrap()
        .shutdown()
        .unwrap();
    let running = Runtime::builder().build().unwrap();
    // A size no other test asks for: not made yet in this process.
    let unmade = 5 * g.align;
    assert!(unmade > g.min && unmade < g.sms);
    let start = std::time::Instant::now();
    match Runtime::builder().sm_partition(unmade).build() {
        Err(Error::InvalidConfig(why)) => assert!(why.contains("partition"), "{why}"),
        other => panic!("a new partition beside a running kernel: {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(10), "refused at once");
    let mut rng = Rng::new(0x5e_71de);
    // (A sanitizer runs one kernel at a time: a second resident one would
    // wait for the first forever.)
    if !under_sanitizer() {
        let beside = Runtime::builder().sm_partition(g.min).build().unwrap();
        assert_eq!(echo_round_trips(&beside, &mut rng, 500), 500);
        assert_eq!(echo_round_trips(&running, &mut rng, 500), 500);
        beside.shutdown().unwrap();
    }
    running.shutdown().unwrap();
    // Once nothing runs, it is made.
    let rt = Runtime::builder().sm_partition(unmade).build().unwrap();
    assert_eq!(rt.sm_partition().unwrap().sms(), unmade);
    assert_eq!(echo_round_trips(&rt, &mut rng, 500), 500);
    rt.shutdown().unwrap();
}

/// The SMs a launch of `blocks` blocks of the SM-id kernel on `stream` ran
/// on.
fn sms_used(
    f: &pkq::cudarc::driver::CudaFunction,
    stream: &Arc<pkq::cudarc::driver::CudaStream>,
    blocks: u32,
) -> std::collections::BTreeSet<u32> {
    let mut out = stream.alloc_zeros::<u32>(blocks as usize).unwrap();
    let ns = 20_000u64;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (64, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: pkq_test_smid(u32*, u64) over `blocks` words.
    unsafe {
        stream
            .launch_builder(f)
            .arg(&mut out)
            .arg(&ns)
            .launch(cfg)
            .unwrap();
    }
    stream.clone_dtoh(&out).unwrap().into_iter().collect()
}

/// The application's kernels on the partition's streams run on exactly
/// the rest's SMs, while the runtime serves; on the primary context's
/// streams they use every SM. Every round trip checked meanwhile.
pub(crate) fn app_kernels_run_on_the_rest_of_the_device() {
    let g = match pkq::sm_partition_support(0) {
        Ok(g) => g,
        Err(Error::PartitionUnsupported(why)) => return skip(&format!("no partitions: {why}")),
        Err(e) => panic!("{e:?}"),
    };
    // Modules and the primary context's stream before any pkq kernel runs.
    let ctx = pkq::context(0).unwrap();
    // SAFETY: every buffer of this test is used on one stream at a time, in
    // order (each launch is read back before the next).
    unsafe { ctx.disable_event_tracking() };
    let primary = ctx.new_stream().unwrap();
    let module = ctx.load_module(Ptx::from_src(ptx::TEST_KERNELS)).unwrap();
    let smid = module.load_function("pkq_test_smid").unwrap();
    // A warm launch: the driver compiles and loads the kernel's code now,
    // not at its first launch beside the resident kernel (which that load
    // would wait for).
    assert_eq!(sms_used(&smid, &primary, 1).len(), 1);
    let rt = Runtime::builder().sm_partition(g.min).build().unwrap();
    let part = rt.sm_partition().unwrap();
    let app = part.app_stream().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let serving = std::sync::atomic::AtomicBool::new(false);
    let checked = std::thread::scope(|s| {
        let loop_ = s.spawn(|| {
            let mut rng = Rng::new(0xa99);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += echo_round_trips(&rt, &mut rng, 100);
                serving.store(true, Ordering::Relaxed);
            }
            n
        });
        // The runtime serves the loop's round trips before the app's
        // kernels start, and on while they run (the kernels may all end
        // before a thread started later got its first batch through).
        let t = Instant::now();
        while !serving.load(Ordering::Relaxed) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "no round trip in 10 s"
            );
            std::thread::yield_now();
        }
        let blocks = 16 * g.sms as u32;
        let on_app = sms_used(&smid, &app, blocks);
        let on_primary = sms_used(&smid, &primary, blocks);
        stop.store(true, Ordering::Relaxed);
        println!(
            "    {} SMs for pkq: the app's stream ran on {} SMs, the primary context's on {}",
            part.sms(),
            on_app.len(),
            on_primary.len()
        );
        assert_eq!(
            on_app.len(),
            part.app_sms(),
            "the rest's stream: {on_app:?}"
        );
        // A primary-context stream is not confined: it uses the runtime's
        // SMs too (all but any a resident block of the runtime fills).
        assert!(
            on_primary.difference(&on_app).count() > 0,
            "a primary-context stream: {on_primary:?}"
        );
        loop_.join().unwrap()
    });
    assert!(checked >= 100);
    // Streams of the rest stay usable after the runtime is gone (the
    // parts live for the process).
    let part = part.clone();
    rt.shutdown().unwrap();
    drop(rt);
    let later = part.app_stream().unwrap();
    assert_eq!(
        sms_used(&smid, &later, 4 * g.sms as u32).len(),
        part.app_sms()
    );
}

/// A latency lane and a bulk lane of one runtime: four threads flood the
/// bulk lane with random ECHO batches while the latency lane answers random
/// round trips; every result checked, every task counted.
pub(crate) fn lanes_under_load_random_vs_cpu() {
    let rt = Runtime::builder()
        .add_lane(Runtime::builder().workers(32).rings(4).capacity(4096))
        .build()
        .unwrap();
    assert_eq!(rt.lanes(), 2);
    assert!(rt.lane(2).is_none());
    let bulk = rt.lane(1).unwrap();
    assert_eq!(bulk.workers(), 32);
    assert_eq!(rt.workers(), 1);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (bulk_tasks, latency_tasks) = std::thread::scope(|s| {
        let flooders: Vec<_> = (0..4)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || {
                    let mut rng = Rng::new(0xb01c + t);
                    let mut n = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let args: Vec<u64> = (0..256).map(|_| rng.next()).collect();
                        let results = bulk.submit(ECHO.batch(&args)).unwrap().wait().unwrap();
                        assert_eq!(results.len(), args.len());
                        assert_eq!(results.len(), args.len(), "every task's result");
                        for (r, a) in results.iter().zip(&args) {
                            assert_eq!(r.as_ref().unwrap().value, *a);
                        }
                        n += results.len();
                    }
                    n
                })
            })
            .collect();
        let mut rng = Rng::new(0x1a7e);
        let latency = echo_round_trips(&rt, &mut rng, 20_000);
        stop.store(true, Ordering::Relaxed);
        let bulk: usize = flooders.into_iter().map(|f| f.join().unwrap()).sum();
        (bulk, latency)
    });
    println!("    {latency_tasks} round trips on the latency lane beside {bulk_tasks} bulk tasks");
    assert!(bulk_tasks >= 256);
    // Health covers every lane; shutdown stops them all.
    rt.health().unwrap();
    rt.shutdown().unwrap();
    assert!(matches!(bulk.submit(NOP.args(&())), Err(Error::Closed)));
    assert!(matches!(rt.submit(NOP.args(&())), Err(Error::Closed)));
    // Lanes whose blocks cannot all be resident together are refused (the
    // lanes started before the one refused are stopped again). Built once
    // `rt`'s kernels exited: under compute-sanitizer, the stop of a
    // partition's lane beside them never ended (its stream's query, then
    // its destruction, waited for `rt`'s kernels).
    if let Ok(g) = pkq::sm_partition_support(0) {
        match Runtime::builder()
            .sm_partition(g.min)
            .add_lane(Runtime::builder().workers(256).capacity(1024))
            .add_lane(Runtime::builder().workers(256).capacity(1024))
            .build()
        {
            Err(Error::InvalidConfig(why)) => assert!(why.contains("SM"), "{why}"),
            other => panic!("lanes past the partition: {other:?}"),
        }
    }
    // A lane naming another device or a partition of its own: refused.
    for lane in [
        Runtime::builder().sm_partition(8),
        Runtime::builder().add_lane(Runtime::builder()),
    ] {
        match Runtime::builder().add_lane(lane).build() {
            Err(Error::InvalidConfig(why)) => assert!(why.contains("lane 1"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    // Lanes inherit the partition.
    if pkq::sm_partition_support(0).is_ok() {
        let rt = Runtime::builder()
            .sm_partition(16)
            .add_lane(Runtime::builder().workers(8))
            .build()
            .unwrap();
        assert_eq!(rt.lanes(), 2);
        assert!(rt.sm_partition().is_some());
        let mut rng = Rng::new(0x1a2);
        echo_round_trips(&rt, &mut rng, 500);
        echo_round_trips(rt.lane(1).unwrap(), &mut rng, 500);
    }
}

/// The default runtime is the latency shape: one worker (of eight pollers).
pub(crate) fn default_shape_is_the_latency_shape() {
    let rt = Runtime::builder().build().unwrap();
    assert_eq!(rt.workers(), 1);
    assert_eq!(rt.lanes(), 1);
    assert!(rt.sm_partition().is_none());
    let mut rng = Rng::new(0xdef);
    assert_eq!(echo_round_trips(&rt, &mut rng, 10_000), 10_000);
    rt.shutdown().unwrap();
}

/// This module's GPU tests, in the order they run (`main.rs` runs every
/// module's list; a test function left out of it is dead code, which the
/// runner's `#![deny(dead_code)]` refuses).
pub(crate) const TESTS: &[Test] = tests![
    sm_partition_sizes,
    new_partitions_are_refused_beside_a_running_kernel,
    app_kernels_run_on_the_rest_of_the_device,
    lanes_under_load_random_vs_cpu,
    default_shape_is_the_latency_shape,
];
