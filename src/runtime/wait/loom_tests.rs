//! The completion thread's protocol under loom: registering, firing,
//! leaving, sleeping and closing, in every interleaving (the rounds of
//! `reactor::serve`, on a thread of the model's own; readiness is a flag
//! the model's device sets). A wake-up the protocol loses leaves a parked
//! thread parked, which loom reports as a deadlock.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

use crate::error::Error;
use crate::runtime::liveness::Watch;
use crate::runtime::wait::reactor::{
    Collected, Interest, Refused, Registry, Wake, fire_all, round,
};
use crate::sync::{Mutex, park_timeout};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(f);
}

/// The completion thread's rounds until the registry closes: sleeps with
/// nothing live, fires what `ready` says.
fn serve(r: &Registry, ready: &AtomicBool) {
    let mut live = Vec::new();
    let panics = crate::sync::AtomicU64::new(0);
    loop {
        let sleep = live.is_empty();
        if r.collect(&mut live, sleep) == Collected::Closed {
            fire_all(&mut live, &Error::Closed, &panics);
            return;
        }
        round(&mut live, |_| ready.load(Ordering::Acquire), &panics);
        thread::yield_now();
    }
}

/// A registry marked running, its completion thread's rounds on a model
/// thread, and the readiness flag they look at (set to `ready`).
fn serving(ready: bool) -> (Arc<Registry>, Arc<AtomicBool>, thread::JoinHandle<()>) {
    let r = Arc::new(Registry::default());
    r.start_without_thread();
    let flag = Arc::new(AtomicBool::new(ready));
    let reactor = {
        let (r, flag) = (r.clone(), flag.clone());
        thread::spawn(move || serve(&r, &flag))
    };
    (r, flag, reactor)
}

#[test]
fn loom_a_parked_waiter_is_woken_whenever_its_task_completes() {
    model(|| {
        let (r, ready, reactor) = serving(false);
        let device = {
            let ready = ready.clone();
            thread::spawn(move || ready.store(true, Ordering::Release))
        };
        // The waiter: arm, look again, park until it sees its task.
        let me = Interest::new(0, 0, Watch::Nothing, Wake::Thread(thread::current()));
        assert!(r.register(me.clone()).is_ok());
        while !ready.load(Ordering::Acquire) {
            park_timeout(std::time::Duration::MAX);
        }
        me.leave();
        device.join().unwrap();
        drop(r.close());
        reactor.join().unwrap();
    });
}

#[test]
fn loom_a_waiter_that_left_is_never_called_and_a_fired_one_once() {
    model(|| {
        let (r, _ready, reactor) = serving(true);
        let calls = Arc::new(AtomicUsize::new(0));
        let callback = {
            let calls = calls.clone();
            Wake::Callback(Mutex::new(Some(Box::new(move |_why: Option<Error>| {
                calls.fetch_add(1, Ordering::Relaxed);
            }))))
        };
        let me = Interest::new(0, 0, Watch::Nothing, callback);
        assert!(r.register(me.clone()).is_ok());
        // The waiter leaves while the completion thread may fire it.
        let had_fired = me.leave();
        drop(r.close());
        reactor.join().unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), usize::from(had_fired));
    });
}

#[test]
fn loom_a_registration_racing_the_close_is_fired_or_refused() {
    model(|| {
        let (r, _ready, reactor) = serving(false);
        let closer = {
            let r = r.clone();
            thread::spawn(move || drop(r.close()))
        };
        let me = Interest::new(0, 0, Watch::Nothing, Wake::Thread(thread::current()));
        match r.register(me.clone()) {
            // Registered: the close fires it (the task never completes).
            Ok(()) => {
                while !me.fired() {
                    park_timeout(std::time::Duration::MAX);
                }
            }
            Err((Refused::Closed, _)) => {}
            Err((Refused::NotStarted, _)) => unreachable!("started"),
        }
        closer.join().unwrap();
        reactor.join().unwrap();
    });
}
