//! The pool on the GPUs there are (one on the GPU machine): every routing,
//! batches, packs, typed calls and keys through it, checked against the CPU
//! and counted; its refusals; a device fault taking the device out (in a
//! child process: the fault is sticky for the process).

use super::*;
use pkq::Submit;
use pkq::{Pool, Routing};

const ROUTINGS: [Routing; 3] = [
    Routing::LeastLoaded,
    Routing::PowerOfTwo,
    Routing::RoundRobin,
];

/// Random ECHO tasks, batches and packs through a pool of every device,
/// under every routing, from four threads; every result checked.
pub(crate) fn pool_random_vs_cpu() {
    let devices = pkq::device_count().unwrap();
    for routing in ROUTINGS {
        let pool = Pool::builder().routing(routing).build().unwrap();
        assert_eq!(pool.devices(), (0..devices).collect::<Vec<_>>());
        assert_eq!(pool.serving(), pool.devices());
        println!(
            "    {routing:?}: {} device(s), {} NUMA node(s), device 0 on node {:?}",
            devices,
            pool.numa_nodes(),
            pool.numa_node(0)
        );
        let counted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (pool, counted) = (&pool, &counted);
                s.spawn(move || {
                    let mut rng = Rng::new(0x9001 + t);
                    for _ in 0..500 {
                        let v = rng.next();
                        assert_eq!(pool.submit(ECHO.args(&v)).unwrap().wait().unwrap().value, v);
                        let k = rng.next();
                        let t = pool.keyed(k).submit(ECHO.args(&v)).unwrap();
                        assert_eq!(t.wait().unwrap().value, v);
                        counted.fetch_add(2, Ordering::Relaxed);
                    }
                    let args: Vec<u64> = (0..300).map(|_| rng.next()).collect();
                    let mut b = pool.submit(ECHO.batch(&args)).unwrap();
                    let results = b.wait().unwrap();
                    assert_eq!(results.len(), args.len(), "every task's result");
                    for (r, a) in results.iter().zip(&args) {
                        assert_eq!(r.as_ref().unwrap().value, *a);
                    }
                    let words: Vec<u64> = (0..1000).map(|_| rng.next()).collect();
                    let mut p = pool.submit(ECHO.packed(&words)).unwrap();
                    let results = p.wait().unwrap();
                    assert_eq!(results.len(), words.len(), "every task's result");
                    for (r, w) in results.iter().zip(&words) {
                        assert_eq!(r.as_ref().unwrap().value, *w);
                    }
                    counted.fetch_add(1300, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(counted.load(Ordering::Relaxed), 4 * 2300);
        for d in pool.devices() {
            assert_eq!(pool.load(d), Some(0), "{routing:?}: device {d}'s load");
        }
        // The same key, the same device.
        let d = pool.route_key(99).unwrap();
        assert!((0..20).all(|_| pool.route_key(99).unwrap() == d));
        pool.health().unwrap();
        pool.shutdown().unwrap();
    }
}

/// A pool refuses what it cannot serve, with typed errors.
pub(crate) fn pool_refusals() {
    let count = pkq::device_count().unwrap();
    for (devices, what) in [(vec![], "no device"), (vec![0, 0], "a device twice")] {
        match Pool::builder().devices(&devices).build() {
            Err(Error::InvalidConfig(_)) => {}
            other => panic!("{what}: {other:?}"),
        }
    }
    match Pool::builder().devices(&[0, count + 5]).build() {
        Err(Error::DeviceOutOfRange { index, .. }) => assert_eq!(index, count + 5),
        other => panic!("an absent device: {other:?}"),
    }
    match Pool::builder()
        .runtime_builder(Runtime::builder().capacity(3))
        .build()
    {
        Err(Error::InvalidConfig(_)) => {}
        other => panic!("a bad runtime setting: {other:?}"),
    }
    // The buffers before the pool's kernel (a sanitizer judges a kernel's
    // accesses by the allocations made before its launch).
    let ctx = pkq::context(0).unwrap();
    let stream = ctx.default_stream();
    let x = stream.clone_htod(&[1.0f32; 64]).unwrap();
    let mut y = stream.clone_htod(&[2.0f32; 64]).unwrap();
    let pool = Pool::builder().devices(&[0]).build().unwrap();
    assert!(matches!(
        pool.runtime(count + 1),
        Err(Error::InvalidArgument(_))
    ));
    // A task on a device's buffers goes to that device's runtime.
    let rt = pool.for_buffer(&x).unwrap();
    assert_eq!(rt.device(), 0);
    rt.axpy(0.5, &x, &mut y).unwrap();
    assert!(stream.clone_dtoh(&y).unwrap().iter().all(|&v| v == 2.5));
    // Views route as their slices do.
    assert_eq!(pool.for_buffer(&x.slice(8..16)).unwrap().device(), 0);
    assert_eq!(pool.for_buffer(&y.slice_mut(..)).unwrap().device(), 0);
    // Without IO areas, an IO task is refused as a runtime refuses it.
    assert!(matches!(
        pool.submit(COPY_IO.io(&CopyIoArgs::default(), b"x")),
        Err(Error::InvalidConfig(_))
    ));
    // Too large for a slot: the task's own error, the device still serves.
    assert!(matches!(
        pool.submit(Task::raw(ECHO_OP, &[0u8; 4096])),
        Err(Error::PayloadTooLarge { .. })
    ));
    assert_eq!(pool.serving(), [0]);
    pool.shutdown().unwrap();
    // IO tasks through a pool, counted in its device's load.
    let pool = Pool::builder()
        .devices(&[0])
        .runtime_builder(Runtime::builder().io(256, 256))
        .build()
        .unwrap();
    let input: Vec<u8> = (0..200u8).collect();
    let args = CopyIoArgs {
        out_len: 200,
        key: 0x11,
    };
    let t = pool.submit(COPY_IO.io(&args, &input)).unwrap();
    assert_eq!(pool.load(0), Some(1));
    let (_, out) = t.wait_output().unwrap();
    assert!(out.iter().zip(&input).all(|(o, i)| *o == i ^ 0x11));
    assert_eq!(pool.load(0), Some(0));
    pool.shutdown().unwrap();
}

/// In a child process: a TRAP on the pool's device faults its tickets with
/// `DeviceFault` and takes it out; with no device left, submits are
/// refused with `NoServingDevice`. Every ticket resolves.
pub(crate) fn pool_device_fault_takes_the_device_out() {
    faults::run_fault_child("pool_trap");
}

pub(crate) fn child_pool_trap() {
    let pool = Pool::builder().devices(&[0]).build().unwrap();
    let before: Vec<_> = (0..64u64)
        .map(|i| pool.submit(ECHO.args(&i)).unwrap())
        .collect();
    // SAFETY: TRAP dereferences nothing; it kills the kernel on purpose.
    let trap = unsafe { pool.runtime(0).unwrap().submit(TRAP.args(&()).unchecked()) }.unwrap();
    let after: Vec<_> = (0..64u64)
        .map(|i| pool.runtime(0).unwrap().submit(ECHO.args(&i)).unwrap())
        .collect();
    let t0 = Instant::now();
    assert!(matches!(trap.wait(), Err(Error::DeviceFault(_))));
    let mut resolved = 0;
    for (i, t) in before.into_iter().enumerate() {
        match t.wait() {
            Ok(c) => assert_eq!(c.value, i as u64),
            Err(Error::DeviceFault(_)) => {}
            Err(e) => panic!("{e:?}"),
        }
        resolved += 1;
    }
    for t in after {
        assert!(matches!(t.wait(), Err(Error::DeviceFault(_)) | Ok(_)));
        resolved += 1;
    }
    println!(
        "    fault seen after {:?}; {resolved} tickets resolved",
        t0.elapsed()
    );
    assert_eq!(resolved, 128);
    assert!(pool.serving().is_empty());
    assert!(matches!(
        pool.submit(NOP.args(&())),
        Err(Error::NoServingDevice)
    ));
    assert!(matches!(pool.runtime(0), Err(Error::NotServing(0))));
    assert!(matches!(pool.health(), Err(Error::NoServingDevice)));
}

/// In a child process, on two devices or more: a TRAP on device 0 fails
/// its tickets with `DeviceFault` and takes it out; the others keep
/// serving every routed and keyed task. Skipped (said plainly) on one GPU.
pub(crate) fn pool_fault_leaves_the_other_devices_serving() {
    let count = pkq::device_count().unwrap();
    if count < 2 {
        return skip(&format!("needs two GPUs; this machine has {count}"));
    }
    faults::run_fault_child("pool_trap_one_of_many");
}

pub(crate) fn child_pool_trap_one_of_many() {
    let pool = Pool::builder().build().unwrap();
    let others: Vec<usize> = pool.devices().into_iter().filter(|&d| d != 0).collect();
    // SAFETY: TRAP dereferences nothing; it kills device 0's kernel on purpose.
    let trap = unsafe { pool.runtime(0).unwrap().submit(TRAP.args(&()).unchecked()) }.unwrap();
    assert!(matches!(trap.wait(), Err(Error::DeviceFault(_))));
    pool.health().unwrap();
    assert_eq!(pool.serving(), others);
    let mut rng = Rng::new(0x2a);
    let tickets: Vec<_> = (0..1000)
        .map(|i| {
            let v = rng.next();
            let t = if i % 2 == 0 {
                pool.submit(ECHO.args(&v)).unwrap()
            } else {
                pool.keyed(v).submit(ECHO.args(&v)).unwrap()
            };
            (v, t)
        })
        .collect();
    for (v, t) in tickets {
        assert_eq!(t.wait().unwrap().value, v);
    }
    assert!(matches!(pool.runtime(0), Err(Error::NotServing(0))));
    // The driver reports the fault on every device (every driver call fails
    // from now on); the others' kernels beat on, and their shutdown sees
    // their pollers leave.
    let refused = Runtime::builder().device(others[0]).build();
    assert!(
        matches!(refused, Err(Error::Cuda(_))),
        "a runtime built after the fault: {:?}",
        refused.as_ref().map(|_| ())
    );
    for &d in &others {
        pool.runtime(d).unwrap().shutdown().unwrap();
    }
    println!(
        "    device 0 out; devices {others:?} served 1000 tasks and shut down; a new runtime: {}",
        refused.err().unwrap()
    );
}

/// In a child process, on two devices or more: after a TRAP on device 0
/// (which the driver reports on every device), a cancel of device 1's
/// runtime, one of whose pollers runs a task of 300 ms while the others
/// leave at once, still ends as a cancel: `Ok`, the running task's result,
/// the rest `Cancelled` or run. Skipped (said plainly) on one GPU.
pub(crate) fn a_cancel_beside_another_devices_fault_is_a_cancel() {
    let count = pkq::device_count().unwrap();
    if count < 2 {
        return skip(&format!("needs two GPUs; this machine has {count}"));
    }
    faults::run_fault_child("pool_cancel_beside_a_fault");
}

pub(crate) fn child_pool_cancel_beside_a_fault() {
    let pool = Pool::builder().devices(&[0, 1]).build().unwrap();
    // SAFETY: TRAP dereferences nothing; it kills device 0's kernel on purpose.
    let trap = unsafe { pool.runtime(0).unwrap().submit(TRAP.args(&()).unchecked()) }.unwrap();
    assert!(matches!(trap.wait(), Err(Error::DeviceFault(_))));
    let rt = pool.runtime(1).unwrap();
    let spin = rt.submit(SPIN.args(&300_000_000u64)).unwrap();
    let queued: Vec<_> = (0..8u64)
        .map(|i| rt.submit(ECHO.args(&i)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    let cancelled = rt.cancel();
    println!(
        "    cancel of device 1: {cancelled:?} after {:?}",
        t0.elapsed()
    );
    assert!(cancelled.is_ok(), "{cancelled:?}");
    assert!(spin.wait().is_ok(), "the task the cancel let finish");
    for (i, t) in queued.into_iter().enumerate() {
        match t.wait() {
            Ok(c) => assert_eq!(c.value, i as u64),
            Err(e) => assert!(matches!(e, Error::Cancelled), "{e:?}"),
        }
    }
}

/// This module's GPU tests, in the order they run (`main.rs` runs every
/// module's list; a test function left out of it is dead code, which the
/// runner's `#![deny(dead_code)]` refuses).
pub(crate) const TESTS: &[Test] = tests![
    pool_random_vs_cpu,
    pool_refusals,
    pool_device_fault_takes_the_device_out,
    pool_fault_leaves_the_other_devices_serving,
    a_cancel_beside_another_devices_fault_is_a_cancel,
];
