//! The runtime's lifecycle under loom: the real `Runtime`, `Ticket` and
//! `Batch` over the software device, stepped by the model, in every
//! interleaving of a handle's last use with the runtime's drop (orphan
//! shares: exactly one frees the memory, nobody touches it after).

use std::sync::{Arc, Weak};

use loom::thread;

use crate::ops::op::Op;
use crate::proto::soft::{SoftDevice, Step};
use crate::runtime::engine::Engine;
use crate::runtime::{Runtime, Shared};

/// A one-worker runtime on the stepped software device, and the device.
fn stepped() -> (Runtime, Arc<SoftDevice>) {
    let rt = Runtime::builder()
        .capacity(2)
        .workers(1)
        .build_soft(false)
        .unwrap();
    let Engine::Soft(dev) = &rt.shared.engine else {
        unreachable!("built on the software device")
    };
    let dev = dev.clone();
    (rt, dev)
}

/// Runs the worker until it completed `n` tasks.
fn run(dev: &SoftDevice, n: usize) {
    let mut ran = 0;
    while ran < n {
        if dev.step(0, 0) == Step::Ran {
            ran += 1;
        }
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(f);
}

fn freed(w: &Weak<Shared>) -> bool {
    w.strong_count() == 0
}

#[test]
fn loom_a_ticket_waits_while_its_runtime_is_dropped() {
    model(|| {
        let (rt, dev) = stepped();
        let t = rt.submit(Op::ECHO, &[5u64]).unwrap();
        run(&dev, 1);
        let memory = Arc::downgrade(&rt.shared);
        let ticket = thread::spawn(move || t.wait().map(|c| c.value));
        drop(rt);
        assert_eq!(ticket.join().unwrap().unwrap(), 5);
        assert!(freed(&memory), "the last of the two frees it");
    });
}

#[test]
fn loom_a_batch_is_reaped_and_dropped_while_its_runtime_is_dropped() {
    model(|| {
        let (rt, dev) = stepped();
        let mut b = rt.submit_batch(Op::ECHO, &[[1u64], [2]]).unwrap();
        run(&dev, 2);
        let memory = Arc::downgrade(&rt.shared);
        let batch = thread::spawn(move || {
            let done = b.poll().unwrap_or(0);
            drop(b);
            done
        });
        drop(rt);
        let done = batch.join().unwrap();
        assert!(done == 0 || done == 2, "{done}");
        assert!(freed(&memory), "the last of the two frees it");
    });
}

#[test]
fn loom_an_unread_ticket_is_dropped_while_its_runtime_is_dropped() {
    model(|| {
        let (rt, dev) = stepped();
        let t = rt.submit(Op::NOP, &()).unwrap();
        run(&dev, 1);
        let memory = Arc::downgrade(&rt.shared);
        let ticket = thread::spawn(move || drop(t));
        drop(rt);
        ticket.join().unwrap();
        assert!(freed(&memory), "the last of the two frees it");
    });
}
