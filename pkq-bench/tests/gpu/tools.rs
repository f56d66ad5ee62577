//! The measurement tools: the raw floor, device costs, access rates, bulk
//! copies, and the order of module loads beside a runtime.

use super::*;
use pkq::Submit;
use pkq::builtin::*;

pub(crate) fn floor_ping_pong() {
    for (pollers, words, lines, copies, depth, bulk) in [
        (1, 1, 1, false, 1, false),
        (2, 1, 1, false, 1, false),
        (4, 1, 1, false, 1, false),
        (1, 8, 64, false, 1, false),
        (2, 4, 3, false, 1, false),
        (2, 8, 1, true, 1, false),
        (4, 8, 5, true, 1, false),
        (8, 8, 1024, true, 1, false),
        (1, 8, 1024, false, 2, false),
        (1, 8, 3, false, 4, false),
        (8, 8, 1024, true, 2, false),
        (1, 8, 1024, false, 1, true),
        (1, 1, 3, false, 4, true),
        (1, 8, 1024, false, 8, true),
        (2, 8, 1024, true, 4, true),
        (8, 4, 7, true, 2, true),
    ] {
        let shape = Shape {
            pollers,
            words,
            lines,
            copies,
            depth,
            bulk,
        };
        if bulk && !pkq_bench::floor::bulk_polls_on(0).unwrap() {
            println!("{shape:?}: not run, the device is older than sm_90");
            continue;
        }
        let mut floor = Floor::start(0, shape).unwrap();
        let t0 = Instant::now();
        let first = floor.echo_device_ns();
        let mut last = first;
        // Past 2^16 rounds: the echo word carries the round's low 16 bits.
        let rounds = 70_000;
        for _ in 0..rounds {
            floor.round_trip().unwrap();
            // Each echo's device clock: later than the round before's,
            // which the host saw before it sent this one.
            assert!(floor.echo_device_ns() > last, "{shape:?}");
            last = floor.echo_device_ns();
        }
        let host_ns = t0.elapsed().as_nanos() as f64;
        let device_ns = (last - first) as f64;
        println!(
            "    floor, {shape:?}: {:.2} us per round trip (mean), device clock over the rounds {:.3}x the host's",
            host_ns / 1e3 / f64::from(rounds),
            device_ns / host_ns
        );
        assert!((0.9..1.02).contains(&(device_ns / host_ns)), "{shape:?}");
        floor.stop().unwrap();
    }
}

pub(crate) fn device_costs_and_clock_map() {
    let c = pkq_bench::floor::device_costs(0, 2_000).unwrap();
    println!("    {c:?}");
    assert!(c.dependent_read_ns > 200.0 && c.dependent_read_ns < 20_000.0);
    for wide in c.dependent_wide_read_ns {
        assert!(wide > 200.0 && wide < 20_000.0, "{c:?}");
    }
    assert!(c.globaltimer_step_ns > 0 && c.globaltimer_step_ns < 10_000);
    let rt = Runtime::builder().build().unwrap();
    let origin = Instant::now();
    let ns = |t: Instant| (t - origin).as_nanos() as u64;
    let ex: Vec<_> = (0..20_000)
        .map(|_| {
            let t0 = Instant::now();
            let c = rt.submit(NOP.args(&())).unwrap().wait().unwrap();
            pkq::timing::Exchange {
                host_send_ns: ns(t0),
                host_recv_ns: ns(Instant::now()),
                device_start_ns: c.device_start_ns,
                device_end_ns: c.device_end_ns,
            }
        })
        .collect();
    let map = pkq::timing::ClockMap::fit(&ex, 256).unwrap();
    println!(
        "    clock map: bound {:.0} ns (median {:.0}), {:.1}% misfit",
        map.error_bound_ns,
        map.median_bound_ns,
        map.misfit_fraction * 100.0
    );
    // Mapped onto the host's clock, every device stamp falls within its own
    // round trip, give or take the stated bound.
    for e in &ex {
        let start = map.to_host_ns(e.device_start_ns);
        assert!(start > e.host_send_ns as f64 - map.error_bound_ns - 1_000.0);
        assert!(start < e.host_recv_ns as f64 + map.error_bound_ns + 1_000.0);
    }
    rt.shutdown().unwrap();
}

/// One warp's reads of host memory take a PCIe round trip each (0.3 to
/// 10 µs, a wide bound), more warps answer more reads per second, and
/// writes are measured too.
pub(crate) fn host_access_rate_is_measured() {
    use pkq_bench::floor::{Access, host_access_rate};
    let one = host_access_rate(0, &Access::reads(1, 64, 500)).unwrap();
    let per_read_us = 1e6 / one;
    println!("    1 warp: {one:.0} reads/s ({per_read_us:.2} µs each)");
    assert!((0.3..10.0).contains(&per_read_us), "{per_read_us}");
    let eight = host_access_rate(0, &Access::reads(8, 64, 500)).unwrap();
    println!("    8 warps: {eight:.0} reads/s");
    assert!(eight > 2.0 * one, "{eight} vs {one}");
    let writes = Access {
        write_bytes: 32,
        write_stride: 32,
        ..Access::reads(8, 0, 500)
    };
    let w = host_access_rate(0, &writes).unwrap();
    println!("    8 warps: {w:.0} 32-byte writes/s");
    assert!(w > one, "{w} vs {one}");
}

/// One block's loads and stores of a run of mapped memory take a
/// plausible time (a PCIe round trip or more, well under a second), the
/// fastest pass no slower than the mean, more bytes no faster.
pub(crate) fn bulk_copies_are_timed() {
    use pkq_bench::bulk::{Bulk, BulkKind, bulk_copy};
    for write in [false, true] {
        for kind in BulkKind::ALL {
            if write && kind == BulkKind::RelaxedSysHalf {
                continue;
            }
            let small = Bulk {
                warps: 4,
                bytes: 1024,
                write,
                kind,
                inflight: 4,
                iters: 20,
            };
            let large = Bulk {
                bytes: 65536,
                ..small
            };
            let (s, l) = (bulk_copy(0, &small).unwrap(), bulk_copy(0, &large).unwrap());
            println!(
                "    {} {}: 1 KiB {:.2} µs, 64 KiB {:.2} µs (mean)",
                kind.name(),
                if write { "stores" } else { "loads" },
                s.mean_ns / 1e3,
                l.mean_ns / 1e3
            );
            for t in [s, l] {
                assert!(t.least_ns > 100.0 && t.least_ns <= t.mean_ns, "{t:?}");
                assert!(t.mean_ns < 1e9, "{t:?}");
            }
            assert!(l.least_ns > s.least_ns, "{kind:?}: {l:?} vs {s:?}");
        }
    }
}

/// pkq-bench's module loaded first (the runner does, as every bench program
/// does): a floor then starts, answers and stops beside running runtimes,
/// and runtimes keep answering beside it; pkq still refuses a module it
/// has not loaded while its kernels run.
pub(crate) fn a_floor_beside_a_running_runtime() {
    if under_sanitizer() {
        // compute-sanitizer runs one kernel at a time: the floor would wait
        // for the resident kernel forever.
        return skip("two resident kernels at once, which a sanitizer runs one after the other");
    }
    pkq_bench::floor::load(0).unwrap();
    let a = Runtime::builder().workers(2).capacity(256).build().unwrap();
    let echo_on = |rt: &Runtime, salt: u64| {
        for i in 0..20_000u64 {
            let v = (i << 1) | salt;
            assert_eq!(rt.submit(ECHO.args(&v)).unwrap().wait().unwrap().value, v);
        }
    };
    echo_on(&a, 0);
    let mut floor = Floor::start(0, Shape::pollers(2)).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| echo_on(&a, 1));
        for _ in 0..20_000 {
            floor.round_trip().unwrap();
        }
    });
    // A second runtime (pkq's module is loaded) beside both.
    let b = Runtime::builder().workers(1).capacity(64).build().unwrap();
    echo_on(&b, 0);
    floor.round_trip().unwrap();
    floor.stop().unwrap();
    // The measurements that end on their own, beside the runtimes.
    let c = pkq_bench::floor::device_costs(0, 200).unwrap();
    assert!(c.dependent_read_ns > 200.0, "{c:?}");
    match Runtime::builder()
        .module(pkq::kernel_image().unwrap(), "no_kernel_loaded_yet")
        .build()
    {
        Err(Error::InvalidConfig(why)) => {
            assert!(why.contains("while a pkq kernel"), "{why}");
            println!("    refused: {why}");
        }
        other => panic!("a new module while runtimes run: {other:?}"),
    }
    b.shutdown().unwrap();
    echo_on(&a, 1);
    a.shutdown().unwrap();
}

/// Without a visible GPU a floor is a typed error, not a panic or a hang
/// (in a child process with `CUDA_VISIBLE_DEVICES` empty).
pub(crate) fn no_visible_gpu_is_an_error() {
    if under_sanitizer() {
        return skip("a sanitized child sees every GPU, CUDA_VISIBLE_DEVICES or not");
    }
    run_child("no_visible_gpu", &[("CUDA_VISIBLE_DEVICES", "")]);
}

pub(crate) fn child_no_visible_gpu() {
    let err = Floor::start(0, Shape::pollers(1)).err().expect("no GPU");
    println!("floor with no visible GPU: {err}");
    assert!(
        matches!(
            err,
            pkq_bench::Error::Device(Error::NoDevice(_) | Error::DeviceOutOfRange { .. })
        ),
        "{err:?}"
    );
    assert!(pkq_bench::floor::device_costs(0, 1).is_err());
}
