//! Waiting: every wait strategy, futures and callbacks on the real kernel,
//! on random tasks checked against the CPU (every task counted), and under
//! cancel and drop (faults: `faults::fault_scenario`).

use super::*;
use pkq::Submit;
use pkq::WaitStrategy;
use pkq::builtin::echo_fold;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

pub(crate) const STRATEGIES: [WaitStrategy; 4] = [
    WaitStrategy::Spin,
    WaitStrategy::SpinThenYield,
    WaitStrategy::Park,
    WaitStrategy::Monitor,
];

struct Unpark(std::thread::Thread, AtomicU64);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.unpark();
    }
}

/// Polls every future on each wake-up until all are ready (a minimal
/// executor: pkq assumes none). A wake-up lost for 20 s fails the test.
pub(crate) fn block_on_all<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    let unpark = Arc::new(Unpark(std::thread::current(), AtomicU64::new(0)));
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    let mut pending: Vec<usize> = (0..futures.len()).collect();
    loop {
        let wakes = unpark.1.load(Ordering::Acquire);
        pending.retain(|&k| match Pin::new(&mut futures[k]).poll(&mut cx) {
            Poll::Ready(v) => {
                out[k] = Some(v);
                false
            }
            Poll::Pending => true,
        });
        if pending.is_empty() {
            return out.into_iter().map(Option::unwrap).collect();
        }
        let t = Instant::now();
        while unpark.1.load(Ordering::Acquire) == wakes {
            std::thread::park_timeout(Duration::from_secs(1));
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "a future was never woken"
            );
        }
    }
}

/// Four threads of random ECHO and SPIN tasks per strategy, each checked;
/// batches waited the same way.
pub(crate) fn every_wait_strategy_random_vs_cpu() {
    let rt = Runtime::builder().workers(8).build().unwrap();
    for how in STRATEGIES {
        let done = AtomicU64::new(0);
        std::thread::scope(|s| {
            for k in 0..4u64 {
                let (rt, done) = (&rt, &done);
                s.spawn(move || {
                    let mut rng = Rng::new(k + 11);
                    for id in 0..5_000u64 {
                        if rng.below(100) == 0 {
                            let ns = 1_000 + rng.below(300_000);
                            let c = rt
                                .submit(SPIN.args(&ns))
                                .unwrap()
                                .with_wait(how)
                                .wait()
                                .unwrap();
                            // SPIN returns the nanoseconds it measured.
                            assert!(c.value >= ns, "{how:?}: {} < {ns}", c.value);
                        } else {
                            let args = echo_args(&mut rng, k << 32 | id);
                            let c = rt
                                .submit(ECHO_48.args(&args))
                                .unwrap()
                                .with_wait(how)
                                .wait()
                                .unwrap();
                            assert_eq!(c.value, echo_fold(&args), "{how:?}");
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    let args: Vec<_> = (0..100).map(|i| echo_args(&mut rng, i)).collect();
                    let results = rt
                        .submit(ECHO_48.batch(&args))
                        .unwrap()
                        .with_wait(how)
                        .wait()
                        .unwrap();
                    assert_eq!(results.len(), args.len(), "every task's result");
                    for (a, r) in args.iter().zip(results) {
                        assert_eq!(r.unwrap().value, echo_fold(a));
                    }
                    done.fetch_add(100, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(done.load(Ordering::Relaxed), 4 * 5_100, "{how:?}");
        println!(
            "  {how:?} (waits as {:?}): every task once",
            how.effective()
        );
    }
    rt.shutdown().unwrap();
}

/// Ten thousand tickets awaited at once, a packed batch awaited, and ten
/// thousand callbacks, each result checked once.
pub(crate) fn futures_and_callbacks_random_vs_cpu() {
    let rt = Runtime::builder()
        .capacity(16_384)
        .workers(8)
        .build()
        .unwrap();
    let mut rng = Rng::new(5);
    let args: Vec<_> = (0..10_000u64).map(|i| echo_args(&mut rng, i)).collect();
    let tickets: Vec<_> = args
        .iter()
        .map(|a| rt.submit(ECHO_48.args(a)).unwrap())
        .collect();
    for (a, r) in args.iter().zip(block_on_all(tickets)) {
        assert_eq!(r.unwrap().value, echo_fold(a));
    }
    let packed: Vec<u64> = (0..1000).map(|_| rng.next()).collect();
    let batch = rt.submit(ECHO.packed(&packed)).unwrap();
    let results = block_on_all(vec![batch]).remove(0).unwrap();
    assert_eq!(results.len(), packed.len(), "every task's result");
    for (v, r) in packed.iter().zip(results) {
        assert_eq!(r.unwrap().value, echo_fold(&[*v, 0, 0, 0, 0, 0]));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, a) in args.iter().enumerate() {
        let tx = tx.clone();
        rt.submit(ECHO_48.args(a))
            .unwrap()
            .on_complete(move |r| tx.send((i, r.map(|c| c.value))).unwrap());
    }
    let mut seen = vec![false; args.len()];
    for _ in 0..args.len() {
        let (i, r) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("every callback runs");
        assert_eq!(r.unwrap(), echo_fold(&args[i]));
        assert!(!std::mem::replace(&mut seen[i], true), "callback {i} twice");
    }
    // A panicking callback is caught; the runtime serves on.
    rt.submit(NOP.args(&()))
        .unwrap()
        .on_complete(|_| panic!("on purpose"));
    let t = Instant::now();
    while rt.callback_panics() == 0 {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        rt.submit(ECHO.args(&3u64)).unwrap().wait().unwrap().value,
        3
    );
    rt.shutdown().unwrap();
}

/// Per strategy: waiters waiting (parked, for `Park`) when the runtime is
/// cancelled learn it; waiters waiting when it is dropped get their
/// results; a future dropped mid-wait loses nothing (its slot comes back:
/// a full ring's worth of tasks runs after it).
pub(crate) fn every_wait_strategy_under_cancel_and_drop() {
    for how in STRATEGIES {
        let rt = Arc::new(
            Runtime::builder()
                .workers(4)
                .wait_strategy(how)
                .build()
                .unwrap(),
        );
        // Long tasks, shorter than the stall bound (a cancel waits for the
        // tasks running to end).
        let long: Vec<_> = (0..4)
            .map(|_| rt.submit(SPIN.args(&300_000_000u64)).unwrap())
            .collect();
        // Many tasks behind them: a worker may finish the task it already
        // took after the cancel, not all of them.
        let mut behind: Vec<_> = (0..200u64)
            .map(|i| rt.submit(ECHO.args(&i)).unwrap().with_wait(how))
            .collect();
        let waiters: Vec<_> = long
            .into_iter()
            .chain(behind.split_off(192))
            .map(|t| std::thread::spawn(move || t.wait()))
            .collect();
        let (tx, rx) = std::sync::mpsc::channel();
        rt.submit(ECHO.args(&99u64))
            .unwrap()
            .on_complete(move |r| tx.send(r).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        rt.cancel().unwrap();
        // A task running when the cancel came completes, and so may one its
        // worker took already; the rest are cancelled. Every wait ends.
        let mut cancelled = 0;
        let results = waiters
            .into_iter()
            .map(|w| w.join().unwrap())
            .chain(behind.into_iter().map(|t| t.wait()));
        for r in results {
            match r {
                Ok(_) => {}
                Err(Error::Cancelled) => cancelled += 1,
                r => panic!("{how:?}: {r:?}"),
            }
        }
        assert!(cancelled >= 1, "{how:?}: none cancelled");
        let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            matches!(r, Ok(_) | Err(Error::Cancelled)),
            "{how:?}: callback {r:?}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{how:?}: {:?}",
            t0.elapsed()
        );
        drop(rt);

        let rt = Runtime::builder()
            .capacity(64)
            .workers(4)
            .wait_strategy(how)
            .build()
            .unwrap();
        let mut dropped = rt.submit(SPIN.args(&50_000_000u64)).unwrap();
        let waker = Waker::from(Arc::new(Unpark(std::thread::current(), AtomicU64::new(0))));
        assert!(
            Pin::new(&mut dropped)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        drop(dropped);
        for i in 0..256u64 {
            assert_eq!(rt.submit(ECHO.args(&i)).unwrap().wait().unwrap().value, i);
        }
        let waiting: Vec<_> = (0..8u64)
            .map(|i| {
                let t = rt.submit(SPIN.args(&(1_000_000 + i))).unwrap();
                std::thread::spawn(move || t.wait().map(|c| c.value))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1));
        drop(rt);
        // SPIN returns the nanoseconds it measured.
        for (i, w) in waiting.into_iter().enumerate() {
            let spun = w.join().unwrap().unwrap();
            assert!(spun >= 1_000_000 + i as u64, "{how:?}: {spun}");
        }
    }
}

/// This module's GPU tests, in the order they run (`main.rs` runs every
/// module's list; a test function left out of it is dead code, which the
/// runner's `#![deny(dead_code)]` refuses).
pub(crate) const TESTS: &[Test] = tests![
    every_wait_strategy_random_vs_cpu,
    futures_and_callbacks_random_vs_cpu,
    every_wait_strategy_under_cancel_and_drop,
];
