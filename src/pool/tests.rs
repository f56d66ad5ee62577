//! Routing, loads and failure isolation of a pool, over runtimes on the
//! software device.

use super::*;
use crate::builtin::*;
use crate::ops::Task;
use crate::runtime::Ticket;
use crate::test_support::values;

fn soft_pool(n: usize, routing: Routing) -> Pool {
    let runtimes = (0..n)
        .map(|d| {
            let rt = Runtime::builder()
                .capacity(64)
                .build_soft(true)
                .expect("the software device starts");
            (d, rt)
        })
        .collect();
    Pool::of(runtimes, routing)
}

fn loads(pool: &Pool) -> Vec<usize> {
    pool.devices()
        .iter()
        .map(|&d| pool.load(d).unwrap())
        .collect()
}

#[test]
#[cfg_attr(miri, ignore = "nine software devices: too slow under Miri")]
fn every_routing_spreads_tasks_and_counts_them_until_taken() {
    for routing in [
        Routing::RoundRobin,
        Routing::LeastLoaded,
        Routing::PowerOfTwo,
    ] {
        let pool = soft_pool(3, routing);
        let tickets: Vec<Ticket> = (0..30u64)
            .map(|i| pool.submit(ECHO.args(&i)).unwrap())
            .collect();
        let l = loads(&pool);
        assert_eq!(l.iter().sum::<usize>(), 30, "{routing:?}: {l:?}");
        match routing {
            Routing::RoundRobin | Routing::LeastLoaded => {
                assert_eq!(l, [10, 10, 10], "{routing:?}")
            }
            _ => assert!(l.iter().all(|&n| n > 0), "{routing:?}: {l:?}"),
        }
        for (i, t) in tickets.into_iter().enumerate() {
            assert_eq!(t.wait().unwrap().value, i as u64);
        }
        assert_eq!(loads(&pool), [0, 0, 0], "{routing:?}");
        // Batches and packs count every task, until all are taken.
        let mut b = pool.submit(ECHO.batch(&[1u64, 2, 3])).unwrap();
        let mut p = pool.submit(ECHO.packed(&[5u64; 40])).unwrap();
        assert_eq!(loads(&pool).iter().sum::<usize>(), 43);
        assert_eq!(b.wait().unwrap().len(), 3);
        assert!(
            p.wait()
                .unwrap()
                .iter()
                .all(|r| r.as_ref().unwrap().value == 5)
        );
        assert_eq!(loads(&pool), [0, 0, 0]);
        // A dropped ticket gives its count back too.
        drop(pool.submit(NOP.args(&())).unwrap());
        assert_eq!(loads(&pool), [0, 0, 0]);
    }
}

#[test]
fn least_loaded_keeps_the_loads_even_and_power_of_two_avoids_the_busiest() {
    let pool = soft_pool(2, Routing::LeastLoaded);
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(pool.submit(NOP.args(&())).unwrap());
        let l = loads(&pool);
        assert!(l[0].abs_diff(l[1]) <= 1, "{l:?}");
    }
    // Straight to a runtime: not counted.
    held.push(pool.runtime(0).unwrap().submit(NOP.args(&())).unwrap());
    assert_eq!(loads(&pool), [3, 3]);
    for t in held {
        t.wait().unwrap();
    }
    // Power of two: two different devices each time, so the busiest of
    // two is never picked while the other is idle.
    let pool = soft_pool(2, Routing::PowerOfTwo);
    let busy: Vec<Ticket> = (0..3)
        .map(|_| pool.runtime(1).unwrap().submit(NOP.args(&())).unwrap())
        .collect();
    let counted = pool.submit(NOP.args(&())).unwrap();
    let first = loads(&pool);
    for _ in 0..10 {
        let t = pool.submit(NOP.args(&())).unwrap();
        let l = loads(&pool);
        // The new task went to the device that had fewer counted.
        assert!(l[0].abs_diff(l[1]) <= 1, "{first:?} -> {l:?}");
        drop(t);
    }
    drop(counted);
    for t in busy {
        t.wait().unwrap();
    }
}

#[test]
fn round_robin_takes_the_serving_devices_in_turn_and_a_shutdown_takes_one_out() {
    let pool = soft_pool(3, Routing::RoundRobin);
    pool.runtime(0).unwrap().shutdown().unwrap();
    let held: Vec<Ticket> = (0..6)
        .map(|_| pool.submit(NOP.args(&())).unwrap())
        .collect();
    assert_eq!(loads(&pool), [0, 3, 3]);
    assert_eq!(pool.serving(), [1, 2]);
    for t in held {
        t.wait().unwrap();
    }
    pool.shutdown().unwrap();
    assert!(matches!(
        pool.submit(NOP.args(&())),
        Err(Error::NoServingDevice)
    ));
    assert!(pool.serving().is_empty());
}

#[test]
fn keys_and_batches_on_two_devices() {
    let pool = soft_pool(2, Routing::LeastLoaded);
    let before: Vec<usize> = (0..16).map(|k| pool.route_key(k).unwrap()).collect();
    assert!(before.contains(&0) && before.contains(&1), "{before:?}");
    let mut b = pool.submit(ECHO.batch(&[1u64, 2])).unwrap();
    let mut p = pool.submit(ECHO.packed(&[3u64; 5])).unwrap();
    assert_eq!(loads(&pool).iter().sum::<usize>(), 7);
    b.wait().unwrap();
    p.wait().unwrap();
    assert_eq!(loads(&pool), [0, 0]);
    let _ = pool.runtime(0).unwrap().cancel();
    for (k, &was) in before.iter().enumerate() {
        let now = pool.route_key(k as u64).unwrap();
        assert_eq!(now, 1, "key {k} (was {was})");
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "1000 keys over three software devices: too slow under Miri"
)]
fn a_key_stays_on_its_device_and_only_a_lost_devices_keys_move() {
    let pool = soft_pool(3, Routing::LeastLoaded);
    let before: Vec<usize> = (0..1000).map(|k| pool.route_key(k).unwrap()).collect();
    for d in 0..3 {
        let n = before.iter().filter(|&&x| x == d).count();
        assert!((200..=470).contains(&n), "device {d}: {n} of 1000 keys");
    }
    assert_eq!(
        before,
        (0..1000)
            .map(|k| pool.route_key(k).unwrap())
            .collect::<Vec<_>>()
    );
    let t = pool.keyed(7).submit(ECHO.args(&7u64)).unwrap();
    assert_eq!(t.wait().unwrap().value, 7);
    let _ = pool.runtime(1).unwrap().cancel();
    for (k, &was) in before.iter().enumerate() {
        let now = pool.route_key(k as u64).unwrap();
        if was == 1 {
            assert_ne!(now, 1);
        } else {
            assert_eq!(now, was, "key {k} moved off a serving device");
        }
    }
}

#[test]
fn a_stopped_device_is_taken_out_and_the_others_serve() {
    let pool = soft_pool(3, Routing::RoundRobin);
    let _ = pool.runtime(0).unwrap().cancel();
    for i in 0..20u64 {
        assert_eq!(pool.submit(ECHO.args(&i)).unwrap().wait().unwrap().value, i);
    }
    assert_eq!(pool.serving(), [1, 2]);
    assert!(matches!(pool.runtime(0), Err(Error::NotServing(0))));
    assert!(matches!(pool.runtime(9), Err(Error::InvalidArgument(_))));
    assert_eq!(pool.load(9), None);
    pool.health().unwrap();
    let _ = pool.runtime(1).unwrap().cancel();
    let _ = pool.runtime(2).unwrap().cancel();
    assert!(matches!(
        pool.submit(NOP.args(&())),
        Err(Error::NoServingDevice)
    ));
    assert!(matches!(
        pool.keyed(1).submit(NOP.args(&())),
        Err(Error::NoServingDevice)
    ));
    assert!(matches!(pool.health(), Err(Error::NoServingDevice)));
    assert!(pool.serving().is_empty());
}

#[test]
fn a_tasks_own_error_is_not_a_dead_device() {
    let pool = soft_pool(2, Routing::RoundRobin);
    let too_big = [0u8; 4096];
    assert!(matches!(
        pool.submit(Task::raw(ECHO.op(), &too_big)),
        Err(Error::PayloadTooLarge { .. })
    ));
    assert_eq!(pool.serving(), [0, 1]);
}

/// A pool routes no unchecked task that may dereference device addresses
/// (they are one device's), by any route; a runtime of the pool takes it.
#[test]
fn a_pool_routes_no_unchecked_pointer_task() {
    let pool = soft_pool(2, Routing::RoundRobin);
    let args = crate::builtin::AxpyArgs::default();
    // SAFETY: refused before anything is submitted.
    let unchecked = unsafe { AXPY.args(&args).unchecked() };
    assert!(matches!(
        pool.submit(unchecked),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        pool.keyed(3).try_submit(unchecked),
        Err(Error::InvalidArgument(_))
    ));
    // SAFETY: as above.
    let raw = unsafe { Task::raw(ECHO.op(), &[0u8; 8]).unchecked() };
    assert!(matches!(pool.submit(raw), Err(Error::InvalidArgument(_))));
    let one = [args];
    // SAFETY: as above.
    let run = unsafe { AXPY.batch(&one).unchecked() };
    assert!(matches!(pool.submit(run), Err(Error::InvalidArgument(_))));
    assert_eq!(pool.load(0), Some(0));
    // A declared op that dereferences nothing, marked unchecked, is routed.
    // SAFETY: ECHO dereferences nothing.
    let echo = unsafe { ECHO.args(&6u64).unchecked() };
    assert_eq!(pool.submit(echo).unwrap().wait().unwrap().value, 6);
}

#[test]
fn tickets_and_batches_outlive_their_pool() {
    let pool = soft_pool(2, Routing::RoundRobin);
    let t = pool.submit(ECHO.args(&3u64)).unwrap();
    let mut b = pool.submit(ECHO.batch(&[4u64, 5])).unwrap();
    drop(pool);
    // The runtimes drained their tasks when dropped; the handles read
    // their results and give their loads back to counts nobody reads.
    assert_eq!(t.wait().unwrap().value, 3);
    assert_eq!(values(b.wait().unwrap()), [4, 5]);
}

/// `PowerOfTwo` compares two serving devices: a device taken out is not
/// drawn (drawn, it left the other to be picked blind, 2 picks in 3 on
/// three devices with one out).
#[test]
fn power_of_two_compares_two_serving_devices_when_one_is_out() {
    let pool = soft_pool(3, Routing::PowerOfTwo);
    pool.runtime(2).unwrap().cancel().unwrap();
    let mut held = Vec::new();
    for _ in 0..60 {
        held.push(pool.submit(NOP.args(&())).unwrap());
        let l = loads(&pool);
        assert!(l[0].abs_diff(l[1]) <= 1, "{l:?}");
    }
    assert_eq!(pool.serving(), [0, 1]);
}

/// A ring of one device that an exclusive producer holds (taken through
/// `Pool::runtime`) refuses the pool's submits on it: routed tasks go to
/// another device; with every device's ring held, `RingHeld`; keyed tasks
/// stay on their device and say so.
#[test]
fn a_held_ring_sends_routed_tasks_to_the_other_devices() {
    for routing in [
        Routing::RoundRobin,
        Routing::LeastLoaded,
        Routing::PowerOfTwo,
    ] {
        let pool = soft_pool(2, routing);
        let held = pool.runtime(0).unwrap().exclusive_producer().unwrap();
        for i in 0..8u64 {
            let t = pool.submit(ECHO.args(&i)).unwrap();
            assert_eq!(t.wait().unwrap().value, i, "{routing:?}");
            let mut b = pool.submit(ECHO.batch(&[i, i + 1])).unwrap();
            assert_eq!(b.wait().unwrap().len(), 2);
            let mut p = pool.submit(ECHO.packed(&[i; 40])).unwrap();
            assert_eq!(p.wait().unwrap().len(), 40);
        }
        assert_eq!(pool.serving(), [0, 1], "{routing:?}");
        let key = (0u64..).find(|&k| pool.route_key(k).unwrap() == 0).unwrap();
        assert!(matches!(
            pool.keyed(key).submit(NOP.args(&())),
            Err(Error::RingHeld)
        ));
        let other = pool.runtime(1).unwrap().exclusive_producer().unwrap();
        assert!(matches!(pool.submit(NOP.args(&())), Err(Error::RingHeld)));
        drop((held, other));
        pool.submit(NOP.args(&())).unwrap().wait().unwrap();
        assert_eq!(loads(&pool), [0, 0], "{routing:?}");
    }
}

/// A held ring passes its device over and the routing chooses among the
/// rest: the tasks spread over the other devices as the policy says, not
/// to the next device in the pool's order.
#[test]
#[cfg_attr(miri, ignore = "three software devices: too slow under Miri")]
fn a_held_ring_leaves_the_routing_to_the_other_devices() {
    for routing in [
        Routing::RoundRobin,
        Routing::LeastLoaded,
        Routing::PowerOfTwo,
    ] {
        let pool = soft_pool(3, routing);
        let held = pool.runtime(0).unwrap().exclusive_producer().unwrap();
        let tickets: Vec<Ticket> = (0..30u64)
            .map(|i| pool.submit(ECHO.args(&i)).unwrap())
            .collect();
        let l = loads(&pool);
        assert_eq!((l[0], l[1] + l[2]), (0, 30), "{routing:?}: {l:?}");
        match routing {
            Routing::RoundRobin | Routing::LeastLoaded => {
                assert_eq!(l, [0, 15, 15], "{routing:?}")
            }
            _ => assert!(l[1].abs_diff(l[2]) <= 10, "{routing:?}: {l:?}"),
        }
        for (i, t) in tickets.into_iter().enumerate() {
            assert_eq!(t.wait().unwrap().value, i as u64);
        }
        drop(held);
    }
}

/// The device list is checked before the runtime's settings and the kernel
/// image: an empty or repeated list is what the error names, whatever else
/// is wrong, and on a machine with no kernel built.
#[test]
fn a_bad_device_list_is_named_before_the_runtime_settings() {
    let bad = || Runtime::builder().capacity(3);
    for (devices, says) in [
        (&[][..], "at least one device"),
        (&[1, 1][..], "named twice"),
    ] {
        match Pool::builder()
            .devices(devices)
            .runtime_builder(bad())
            .build()
        {
            Err(Error::InvalidConfig(msg)) => assert!(msg.contains(says), "{devices:?}: {msg}"),
            other => panic!("{devices:?}: {:?}", other.err()),
        }
    }
    let many: Vec<usize> = (0..=MAX_POOL_DEVICES).collect();
    match Pool::builder().devices(&many).build() {
        Err(Error::InvalidConfig(msg)) => assert!(msg.contains("at most"), "{msg}"),
        other => panic!("{:?}", other.err()),
    }
}
