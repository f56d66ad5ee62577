//! Every wait strategy, futures and callbacks, against the software
//! device: the real runtime, its completion thread, tickets and batches.

use crate::test_support::values;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::builtin::*;
use crate::error::Error;
use crate::runtime::{Builder, Runtime, Submit, WaitStrategy};

const ALL: [WaitStrategy; 4] = [
    WaitStrategy::Spin,
    WaitStrategy::SpinThenYield,
    WaitStrategy::Park,
    WaitStrategy::Monitor,
];

fn soft(b: Builder) -> Runtime {
    b.build_soft(true).expect("the software device starts")
}

struct Unpark(std::thread::Thread, AtomicUsize);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.unpark();
    }
}

/// Polls every future on each wake-up until all are ready; a future that
/// is not woken within `LOST` is a lost wake-up (the test fails rather
/// than hangs).
fn block_on_all<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    const LOST: Duration = Duration::from_secs(20);
    let unpark = Arc::new(Unpark(std::thread::current(), AtomicUsize::new(0)));
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    loop {
        // Counted before the polls: a wake-up during them (the completion
        // thread firing an interest this pass armed, or a poll waking its
        // own waker) is one to poll again for, not one to park through.
        let wakes = unpark.1.load(Ordering::Relaxed);
        for (f, o) in futures.iter_mut().zip(out.iter_mut()) {
            if o.is_none()
                && let Poll::Ready(v) = Pin::new(f).poll(&mut cx)
            {
                *o = Some(v);
            }
        }
        if out.iter().all(Option::is_some) {
            return out.into_iter().map(Option::unwrap).collect();
        }
        let t = Instant::now();
        while unpark.1.load(Ordering::Relaxed) == wakes {
            std::thread::park_timeout(LOST);
            assert!(t.elapsed() < LOST, "a pending future was never woken");
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of waits: the lifecycle test below runs under Miri"
)]
fn every_strategy_brings_back_every_task_once() {
    for how in ALL {
        let rt = Arc::new(soft(
            Runtime::builder()
                .capacity(64)
                .workers(2)
                .wait_strategy(how),
        ));
        std::thread::scope(|s| {
            for k in 0..4u64 {
                let rt = &rt;
                s.spawn(move || {
                    for i in 0..300u64 {
                        let v = k << 32 | i;
                        // Some long enough to park on.
                        let c = if i % 50 == 0 {
                            rt.submit(SPIN.args(&200_000u64))
                                .unwrap()
                                .wait()
                                .unwrap()
                                .value
                        } else {
                            rt.submit(ECHO.args(&v)).unwrap().wait().unwrap().value
                        };
                        let want = if i % 50 == 0 { 200_000 } else { v };
                        assert_eq!(c, want, "{how:?}");
                    }
                    // A batch, waited on the strategy too.
                    let args: Vec<u64> = (0..40).collect();
                    let mut b = rt.submit(ECHO.batch(&args)).unwrap().with_wait(how);
                    assert_eq!(values(b.wait().unwrap()), (0..40).collect::<Vec<u64>>());
                });
            }
        });
        assert_eq!(rt.wait_strategy(), how.effective());
    }
}

/// Ready on its second poll; its first wakes its waker before it returns
/// `Pending` (as a future whose runtime's completion thread refuses it
/// does: `future::arm`'s fallback).
struct WakesInPoll(bool);

impl Future for WakesInPoll {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A ticket whose poll, once pending, is followed by a pause: the polling
/// thread preempted between its poll and its park, long enough for the
/// completion thread to wake the waker in between.
struct PausedAfterPoll(crate::runtime::ticket::Ticket);

impl Future for PausedAfterPoll {
    type Output = <crate::runtime::ticket::Ticket as Future>::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let p = Pin::new(&mut self.0).poll(cx);
        if p.is_pending() {
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }
}

#[test]
fn a_wake_from_within_poll_is_not_lost() {
    // Allowed by `Future`'s contract: the helper must not park through it.
    block_on_all(vec![WakesInPoll(false)]);
}

#[test]
#[cfg_attr(miri, ignore = "a 20 ms task on the software device")]
fn a_wake_between_the_poll_and_the_park_is_not_lost() {
    // The completion thread wakes the waker after the poll armed it and
    // before the helper parks (a preemption there, under load).
    let rt = soft(Runtime::builder().capacity(8).workers(1));
    let t = rt.submit(SPIN.args(&20_000_000u64)).unwrap();
    assert_eq!(
        block_on_all(vec![PausedAfterPoll(t)])
            .remove(0)
            .unwrap()
            .value,
        20_000_000
    );
}

#[test]
fn monitor_falls_back_where_the_cpu_has_none() {
    let rt = soft(
        Runtime::builder()
            .capacity(8)
            .workers(1)
            .wait_strategy(WaitStrategy::Monitor),
    );
    match crate::monitor_support() {
        Ok(_) => assert_eq!(rt.wait_strategy(), WaitStrategy::Monitor),
        Err(why) => {
            assert!(!why.is_empty());
            assert_eq!(rt.wait_strategy(), WaitStrategy::SpinThenYield);
        }
    }
    assert_eq!(
        rt.submit(ECHO.args(&3u64)).unwrap().wait().unwrap().value,
        3
    );
    rt.shutdown().unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "waits out a stall bound of real time")]
fn every_strategy_ends_on_cancel_and_on_a_stall() {
    for how in ALL {
        // A cancel while the waiter waits (parked, for `Park`); no stall
        // bound a loaded machine could reach before it.
        let rt = Arc::new(soft(
            Runtime::builder()
                .capacity(8)
                .workers(1)
                .stall_after(Duration::from_secs(3600))
                .wait_strategy(how),
        ));
        let long = rt.submit(SPIN.args(&300_000_000u64)).unwrap();
        let behind = rt.submit(ECHO.args(&1u64)).unwrap();
        let waiter = std::thread::spawn(move || behind.wait());
        std::thread::sleep(Duration::from_millis(20));
        rt.cancel().unwrap();
        assert!(
            matches!(waiter.join().unwrap(), Err(Error::Cancelled)),
            "{how:?}"
        );
        assert!(matches!(long.wait(), Ok(_) | Err(Error::Cancelled)));
        // A stall: the worker runs a task past the bound.
        let bound = Duration::from_millis(20);
        let rt = soft(
            Runtime::builder()
                .capacity(8)
                .workers(1)
                .stall_after(bound)
                .wait_strategy(how),
        );
        let mut long = rt.submit(SPIN.args(&300_000_000u64)).unwrap();
        match long.wait_timeout(Duration::from_secs(5)) {
            Err(Error::Stalled { worker: 0, .. }) => {}
            other => panic!("{how:?}: expected Stalled, got {other:?}"),
        }
        // The ticket is still good, and a deadline is kept.
        let t = Instant::now();
        let r = long.wait_timeout(Duration::from_millis(5));
        assert!(
            matches!(r, Err(Error::Timeout | Error::Stalled { .. })),
            "{how:?}: {r:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(2));
        rt.cancel().unwrap();
    }
}

#[test]
fn futures_and_callbacks_outlive_their_runtime_and_drop_safely() {
    // The lifecycle, small enough for Miri: a future dropped mid-wait, a
    // future and a callback pending while the runtime is dropped, a
    // panicking callback.
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let mut dropped = rt.submit(SPIN.args(&2_000_000u64)).unwrap();
    let waker = Waker::from(Arc::new(Unpark(
        std::thread::current(),
        AtomicUsize::new(0),
    )));
    assert!(
        Pin::new(&mut dropped)
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
    );
    drop(dropped);
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    rt.submit(ECHO.args(&7u64))
        .unwrap()
        .on_complete(move |r| tx.send(r.map(|c| c.value)).unwrap());
    rt.submit(ECHO.args(&8u64))
        .unwrap()
        .on_complete(|_| panic!("a callback that panics"));
    let pending = rt.submit(ECHO.args(&9u64)).unwrap();
    let batch = rt.submit(ECHO.batch(&[10u64, 11])).unwrap();
    assert_eq!(rx.recv().unwrap().unwrap(), 7);
    // The panic is caught on the completion thread, which goes on.
    let t = Instant::now();
    while rt.callback_panics() == 0 {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::yield_now();
    }
    rt.submit(ECHO.args(&12u64))
        .unwrap()
        .on_complete(move |r| tx2.send(r.map(|c| c.value)).unwrap());
    assert_eq!(rx.recv().unwrap().unwrap(), 12);
    drop(rt);
    assert_eq!(block_on_all(vec![pending]).remove(0).unwrap().value, 9);
    assert_eq!(
        values(block_on_all(vec![batch]).remove(0).unwrap()),
        [10, 11]
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a thousand futures: the lifecycle test above runs under Miri"
)]
fn a_thousand_futures_each_get_their_own_result() {
    let rt = soft(Runtime::builder().capacity(256).workers(4));
    let tickets: Vec<_> = (0..1000u64)
        .map(|i| rt.submit(ECHO.args(&(i * 3))).unwrap())
        .collect();
    assert_eq!(
        values(block_on_all(tickets)),
        (0..1000u64).map(|i| i * 3).collect::<Vec<_>>()
    );
    // Awaiting a reference keeps the ticket; a long task parks the future.
    let mut t = rt.submit(SPIN.args(&3_000_000u64)).unwrap();
    assert_eq!(
        block_on_all(vec![&mut t]).remove(0).unwrap().value,
        3_000_000
    );
    assert_eq!(t.try_result().unwrap().unwrap().value, 3_000_000);
    rt.shutdown().unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "callbacks for a thousand tasks")]
fn every_callback_runs_once_with_its_result_or_error() {
    let rt = Arc::new(soft(Runtime::builder().capacity(64).workers(2)));
    let (tx, rx) = mpsc::channel();
    for i in 0..1000u64 {
        let tx = tx.clone();
        rt.submit(ECHO.args(&i))
            .unwrap()
            .on_complete(move |r| tx.send((i, r.map(|c| c.value))).unwrap());
    }
    let mut seen = vec![false; 1000];
    for _ in 0..1000 {
        let (i, r) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("every callback runs");
        assert_eq!(r.unwrap(), i);
        assert!(
            !std::mem::replace(&mut seen[i as usize], true),
            "task {i} twice"
        );
    }
    // A cancel: pending callbacks get the error, once each.
    let long: Vec<_> = (0..4)
        .map(|_| rt.submit(SPIN.args(&300_000_000u64)).unwrap())
        .collect();
    for t in long {
        let tx = tx.clone();
        t.on_complete(move |r| tx.send((0, r.map(|c| c.value))).unwrap());
    }
    std::thread::sleep(Duration::from_millis(5));
    rt.cancel().unwrap();
    for _ in 0..4 {
        let (_, r) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("cancelled callbacks run");
        assert!(matches!(r, Ok(_) | Err(Error::Cancelled)), "{r:?}");
    }
    // Closed: a callback runs at once on the calling thread.
    let rt = soft(Runtime::builder().capacity(8).workers(1));
    let t = rt.submit(ECHO.args(&5u64)).unwrap();
    drop(rt);
    let here = std::thread::current().id();
    let (tx, rx) = mpsc::channel();
    t.on_complete(move |r| {
        tx.send((std::thread::current().id(), r.map(|c| c.value)))
            .unwrap()
    });
    let (on, r) = rx.try_recv().expect("ran at once");
    assert_eq!((on, r.unwrap()), (here, 5));
}

#[test]
#[cfg_attr(miri, ignore = "a runtime dropped on its own completion thread")]
fn a_callback_may_drop_the_last_handle_of_its_runtime() {
    let rt = Arc::new(soft(Runtime::builder().capacity(8).workers(1)));
    let memory = Arc::downgrade(&rt.shared);
    let (tx, rx) = mpsc::channel();
    let t = rt.submit(ECHO.args(&4u64)).unwrap();
    let keep = rt.clone();
    drop(rt);
    t.on_complete(move |r| {
        // The last `Runtime` goes here, on the completion thread.
        drop(keep);
        tx.send(r.map(|c| c.value)).unwrap();
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(20)).unwrap().unwrap(),
        4
    );
    let t = Instant::now();
    while memory.strong_count() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the memory is freed once the thread ends"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
#[cfg_attr(miri, ignore = "parks on real time")]
fn parked_waiters_wake_when_their_runtime_is_dropped() {
    let rt = soft(
        Runtime::builder()
            .capacity(16)
            .workers(1)
            .wait_strategy(WaitStrategy::Park),
    );
    let waiters: Vec<_> = (0..8u64)
        .map(|i| {
            let t = rt.submit(SPIN.args(&(1_000_000 + i))).unwrap();
            std::thread::spawn(move || t.wait().map(|c| c.value))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2));
    drop(rt);
    for (i, w) in waiters.into_iter().enumerate() {
        assert_eq!(w.join().unwrap().unwrap(), 1_000_000 + i as u64);
    }
}

/// `on_complete` on a ticket that has taken its result reads nothing of its
/// runtime, whose memory may be gone (Miri checks for a use after free).
#[test]
fn a_callback_on_a_taken_ticket_touches_no_freed_runtime() {
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let mut t = rt.submit(ECHO.args(&6u64)).unwrap();
    assert_eq!(t.wait_timeout(Duration::from_secs(20)).unwrap().value, 6);
    let memory = Arc::downgrade(&rt.shared);
    drop(rt);
    assert_eq!(memory.strong_count(), 0, "nothing holds the memory");
    let (tx, rx) = mpsc::channel();
    t.on_complete(move |r| tx.send(r.map(|c| c.value)).unwrap());
    assert_eq!(rx.try_recv().expect("ran at once").unwrap(), 6);
}

/// A 2 ms SPIN on `rt`, polled once with `waker`: pending, its interest
/// (holding a clone of `waker`) handed to the completion thread.
fn spin_polled_with(rt: &Runtime, waker: &Waker) -> crate::Ticket {
    let mut t = rt.submit(SPIN.args(&2_000_000u64)).unwrap();
    assert!(
        Pin::new(&mut t)
            .poll(&mut Context::from_waker(waker))
            .is_pending()
    );
    t
}

/// The completion thread still serves: a callback registered now runs
/// with its task's result.
fn assert_the_next_callback_runs(rt: &Runtime) {
    let (tx, rx) = mpsc::channel();
    rt.submit(ECHO.args(&8u64))
        .unwrap()
        .on_complete(move |r| tx.send(r.map(|c| c.value)).unwrap());
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(20)).unwrap().unwrap(),
        8,
        "the next callback ran"
    );
}

/// A waker that panics (an executor's) does not end the completion thread:
/// later futures and callbacks are still woken.
#[test]
#[cfg_attr(miri, ignore = "a panic on the completion thread")]
fn a_panicking_waker_leaves_the_completion_thread_serving() {
    struct Panics;
    impl Wake for Panics {
        fn wake(self: Arc<Self>) {
            panic!("an executor's waker that panics");
        }
    }
    let rt = soft(Runtime::builder().capacity(8).workers(1));
    let t = spin_polled_with(&rt, &Waker::from(Arc::new(Panics)));
    let start = Instant::now();
    while rt.callback_panics() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the waker was called"
        );
        std::thread::yield_now();
    }
    assert_the_next_callback_runs(&rt);
    assert_eq!(t.wait().unwrap().value, 2_000_000);
}

/// `on_complete` on a ticket that holds its result already runs the callback
/// under `catch_unwind`, as every path does: its panic does not reach the
/// caller.
#[test]
#[cfg_attr(miri, ignore = "a panic caught on the calling thread")]
fn a_panicking_callback_on_a_ticket_with_its_result_is_caught() {
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let mut t = rt.submit(ECHO.args(&3u64)).unwrap();
    assert_eq!(t.wait_timeout(Duration::from_secs(20)).unwrap().value, 3);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        t.on_complete(|_| panic!("a callback that panics"));
    }));
    assert!(caught.is_ok(), "the callback's panic reached the caller");
    // The runtime serves on.
    assert_eq!(
        rt.submit(ECHO.args(&4u64)).unwrap().wait().unwrap().value,
        4
    );
}

/// The completion thread's count of quiet rounds goes on past `u32::MAX`
/// with its looks at the clock the same number of rounds apart: it keeps
/// probing, looking for stalls and faults, and going to sleep.
#[test]
fn the_completion_thread_looks_at_the_clock_past_any_count_of_quiet_rounds() {
    use super::thread::IdleRounds;
    let mut quiet = IdleRounds::at(u32::MAX - 1000);
    let mut since_check = 0u32;
    let mut checks = 0u32;
    for _ in 0..100_000 {
        since_check += 1;
        if quiet.round(0) {
            checks += 1;
            since_check = 0;
        }
        assert!(since_check < 64, "{since_check} rounds without a check");
        assert!(quiet.yields(), "a quiet thread yields between rounds");
    }
    assert!(checks >= 100_000 / 64, "{checks} checks");
    // A round with work looks at once, and spins again.
    assert!(quiet.round(1));
    assert!(!quiet.yields());
}

/// The longest probe interval a builder takes neither panics nor ends the
/// completion thread: every callback still runs once.
#[test]
#[cfg_attr(miri, ignore = "a task of real time")]
fn callbacks_run_once_under_the_longest_probe_interval() {
    let rt = soft(
        Runtime::builder()
            .capacity(8)
            .workers(1)
            .stall_after(Duration::from_secs(10))
            .probe_interval(Duration::from_secs(1)),
    );
    let (tx, rx) = mpsc::channel();
    let tickets = [
        // Pending over many rounds of the completion thread.
        rt.submit(SPIN.args(&20_000_000u64)).unwrap(),
        rt.submit(ECHO.args(&5u64)).unwrap(),
    ];
    for (i, t) in tickets.into_iter().enumerate() {
        let tx = tx.clone();
        t.on_complete(move |r| tx.send((i, r.map(|c| c.value))).unwrap());
    }
    drop(tx);
    let mut got: Vec<_> = (0..2)
        .map(|_| {
            let (i, r) = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("every callback runs");
            (i, r.unwrap())
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, [(0, 20_000_000), (1, 5)]);
    drop(rt);
    assert!(rx.recv().is_err(), "a callback ran twice");
}

/// What [`Builder::completion_cpu`]'s docs say: the CPUs the completion
/// thread may run on are the main thread's, whatever the mask of the
/// thread that builds the runtime or starts the completion thread.
#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "affinity system calls")]
fn the_completion_threads_cpus_are_the_main_threads_not_the_callers() {
    use super::pin;
    fn own_cpus() -> Vec<usize> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the call writes
        // at most its size into it; CPU_ISSET reads the set, each CPU
        // below its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }
    let main_cpus = || -> Vec<usize> {
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| pin::allowed(c))
            .collect()
    };
    // A thread of the test's own: its mask is nobody else's.
    std::thread::spawn(move || {
        let cpus = main_cpus();
        assert!(!cpus.is_empty());
        assert!(!pin::allowed(libc::CPU_SETSIZE as usize));
        assert!(!pin::allowed(usize::MAX));
        assert!(pin::pin_current(cpus[0]));
        assert_eq!(own_cpus(), [cpus[0]]);
        // Narrower than the main thread: what is allowed stays the main
        // thread's, and unpinning widens to it.
        assert_eq!(main_cpus(), cpus);
        assert!(pin::unpin_current());
        assert_eq!(own_cpus(), cpus);
    })
    .join()
    .unwrap();
}

/// A panic payload whose own `Drop` panics (unless already unwinding).
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("the payload's drop panics");
        }
    }
}

/// A callback or waker that panics with a payload whose drop panics too
/// does not end the completion thread: later callbacks still run, later
/// futures are still woken, and the panic is counted (the payload is
/// dropped inside the catch).
#[test]
#[cfg_attr(miri, ignore = "real-time waits on the software device")]
fn a_payload_that_panics_on_drop_does_not_end_the_completion_thread() {
    let rt = soft(Runtime::builder().capacity(8).workers(1));
    let (tx, rx) = mpsc::channel();
    rt.submit(ECHO.args(&1u64)).unwrap().on_complete(move |_| {
        tx.send(0u64).unwrap();
        std::panic::panic_any(PanicsOnDrop)
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(20)).unwrap(), 0);
    assert_the_next_callback_runs(&rt);
    let unpark = Arc::new(Unpark(std::thread::current(), AtomicUsize::new(0)));
    let _t = spin_polled_with(&rt, &Waker::from(unpark.clone()));
    let start = Instant::now();
    while unpark.1.load(Ordering::Relaxed) == 0 && start.elapsed() < Duration::from_secs(20) {
        std::thread::park_timeout(Duration::from_millis(10));
    }
    assert!(unpark.1.load(Ordering::Relaxed) > 0, "the future was woken");
    assert_eq!(rt.callback_panics(), 1);
}

/// The same payload from a callback run on the caller (its ticket already
/// held its result) does not unwind into the caller.
#[test]
#[cfg_attr(miri, ignore = "real-time waits on the software device")]
fn a_payload_that_panics_on_drop_does_not_reach_the_caller() {
    let rt = soft(Runtime::builder().capacity(4).workers(1));
    let mut t = rt.submit(ECHO.args(&3u64)).unwrap();
    t.wait_timeout(Duration::from_secs(20)).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        t.on_complete(|_| std::panic::panic_any(PanicsOnDrop));
    }));
    assert!(caught.is_ok(), "the panic reached the caller");
}

/// A waker whose own `Drop` panics (an executor's), left behind by a
/// future dropped while pending: wherever the last reference to it goes,
/// the completion thread included, the panic is caught, and later
/// callbacks still run.
#[test]
#[cfg_attr(miri, ignore = "real-time waits on the software device")]
fn a_waker_that_panics_on_drop_does_not_end_the_completion_thread() {
    struct PanicsWhenDropped;
    impl Wake for PanicsWhenDropped {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for PanicsWhenDropped {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("an executor's waker whose drop panics");
            }
        }
    }
    let rt = soft(Runtime::builder().capacity(8).workers(1));
    let waker = Waker::from(Arc::new(PanicsWhenDropped));
    let t = spin_polled_with(&rt, &waker);
    // The interest's clone is the last: it goes wherever the interest does.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        drop(waker);
        drop(t);
    }));
    assert!(caught.is_ok(), "the waker's drop unwound into the caller");
    assert_the_next_callback_runs(&rt);
}

/// A callback pending when its runtime is dropped, whose drain gives up
/// before the kernel exits, gets what a wait on such a task returns: the
/// error that ended the runtime once the exit was seen.
#[test]
#[cfg_attr(miri, ignore = "real-time waits on the software device")]
fn a_callback_pending_at_a_drop_gets_what_a_wait_gets() {
    let rt = soft(
        Runtime::builder()
            .capacity(8)
            .workers(1)
            .stop_timeout(Duration::from_millis(10))
            .stall_after(Duration::from_secs(10)),
    );
    let _long = rt.submit(SPIN.args(&100_000_000u64)).unwrap();
    let (tx, rx) = mpsc::channel();
    rt.submit(ECHO.args(&2u64))
        .unwrap()
        .on_complete(move |r| tx.send(r.map(|c| c.value)).unwrap());
    let waited = rt.submit(ECHO.args(&3u64)).unwrap();
    // The drain gives up at 10 ms; the kernel exits once the SPIN ends,
    // and the drop's stop sees it exit: neither ECHO ran.
    drop(rt);
    let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let w = waited.wait().map(|c| c.value);
    assert!(matches!(w, Err(Error::KernelStopped(_))), "{w:?}");
    assert!(
        matches!(r, Err(Error::KernelStopped(_))),
        "the callback got {r:?}, a wait on the same kind of task {w:?}"
    );
}

/// A worker that stalled once and recovered is not reported stalled from
/// the old probe's record while another thread's probe is under way (its
/// fresh record is not in yet): a healthy task completes.
#[test]
#[cfg_attr(miri, ignore = "real-time waits on the software device")]
fn an_old_stall_record_does_not_fail_a_healthy_task() {
    let rt = soft(
        Runtime::builder()
            .capacity(8)
            .workers(1)
            .stall_after(Duration::from_millis(20)),
    );
    let mut long = rt.submit(SPIN.args(&80_000_000u64)).unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(60) {
        let _ = rt.health(); // records the long task's silence
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = long.wait_timeout(Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(40)); // recovered; nobody probes
    // Another thread is in the middle of a probe.
    rt.shared.device.liveness.busy.store(true, Ordering::SeqCst);
    let (tx, rx) = mpsc::channel();
    rt.submit(SPIN.args(&5_000_000u64))
        .unwrap()
        .on_complete(move |r| tx.send(r.map(|c| c.value)).unwrap());
    let r = rx.recv_timeout(Duration::from_secs(5));
    rt.shared
        .device
        .liveness
        .busy
        .store(false, Ordering::SeqCst);
    assert!(matches!(r, Ok(Ok(_))), "a healthy 5 ms task reported {r:?}");
}

/// An IO task's callback gets its output ([`Ticket::on_output`]), on the
/// completion thread and, for a ticket that has its result already, on the
/// caller's thread; `on_complete` on an IO task gets the completion alone.
#[test]
fn an_io_tasks_callback_gets_its_output() {
    use crate::builtin::{COPY_IO, CopyIoArgs};
    let rt = soft(Runtime::builder().capacity(16).workers(2).io(256, 256));
    let input: Vec<u8> = (0..200u8).collect();
    let args = CopyIoArgs {
        out_len: 150,
        key: 0x5a,
    };
    let expected: Vec<u8> = input[..150].iter().map(|b| b ^ 0x5a).collect();
    let (tx, rx) = mpsc::channel();
    for _ in 0..32 {
        let tx = tx.clone();
        rt.submit(COPY_IO.io(&args, &input))
            .unwrap()
            .on_output(move |r| tx.send(r.map(|(_, out)| out)).unwrap());
    }
    for _ in 0..32 {
        assert_eq!(rx.recv().unwrap().unwrap(), expected);
    }
    // Taken already: runs here.
    let mut t = rt.submit(COPY_IO.io(&args, &input)).unwrap();
    t.wait_timeout(Duration::from_secs(10)).unwrap();
    t.on_output(move |r| tx.send(r.map(|(_, out)| out)).unwrap());
    assert_eq!(rx.recv().unwrap().unwrap(), expected);
}
