//! The measurement tools: the raw floor, device costs, access rates.

use super::*;

pub(crate) fn floor_ping_pong() {
    for (pollers, words, lines, copies) in [
        (1, 1, 1, false),
        (2, 1, 1, false),
        (4, 1, 1, false),
        (1, 8, 64, false),
        (2, 4, 3, false),
        (2, 8, 1, true),
        (4, 8, 5, true),
        (8, 8, 1024, true),
    ] {
        let shape = Shape {
            pollers,
            words,
            lines,
            copies,
        };
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
    for bad in [(3, 1, 1), (16, 1, 1), (1, 2, 1), (1, 1, 0), (1, 1, 1025)] {
        let (pollers, words, lines) = bad;
        let shape = Shape {
            pollers,
            words,
            lines,
            copies: false,
        };
        assert!(matches!(
            Floor::start(0, shape),
            Err(pkq::Error::InvalidConfig(_))
        ));
    }
}

pub(crate) fn device_costs_and_clock_map() {
    let c = pkq::floor::device_costs(0, 2_000).unwrap();
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
            let c = rt.submit(Op::NOP, &()).unwrap().wait().unwrap();
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
    use pkq::floor::{Access, host_access_rate};
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
