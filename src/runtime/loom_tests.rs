//! The runtime's lifecycle under loom: the real `Runtime`, `Ticket` and
//! `Batch` over the software device, stepped by the model, in every
//! interleaving of a handle's last use with the runtime's drop (orphan
//! shares: exactly one frees the memory, nobody touches it after).

use std::sync::{Arc, Weak};

use loom::thread;

use crate::builtin::*;
use crate::proto::soft::{SoftDevice, Step};
use crate::runtime::engine::Engine;
use crate::runtime::shared::Shared;
use crate::runtime::{Runtime, Submit};

/// A one-worker runtime on the stepped software device, and the device.
fn stepped() -> (Runtime, Arc<SoftDevice>) {
    stepped_with(Runtime::builder().capacity(2).workers(1))
}

/// The runtime `builder` makes on the stepped software device, and the
/// device.
fn stepped_with(builder: crate::Builder) -> (Runtime, Arc<SoftDevice>) {
    let rt = builder.build_soft(false).unwrap();
    let Engine::Soft(dev) = &rt.shared.device.engine else {
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
        let t = rt.submit(ECHO.args(&5u64)).unwrap();
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
        let mut b = rt.submit(ECHO.batch(&[1u64, 2])).unwrap();
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
        let t = rt.submit(NOP.args(&())).unwrap();
        run(&dev, 1);
        let memory = Arc::downgrade(&rt.shared);
        let ticket = thread::spawn(move || drop(t));
        drop(rt);
        ticket.join().unwrap();
        assert!(freed(&memory), "the last of the two frees it");
    });
}

/// A one-worker runtime with IO areas of 16 bytes each way on the stepped
/// software device, and the device.
fn stepped_io() -> (Runtime, Arc<SoftDevice>) {
    stepped_with(Runtime::builder().capacity(2).workers(1).io(16, 16))
}

/// An IO task's result polled while the device runs it: `out_len` bytes
/// of `input` XORed with `key`.
fn copy_io_while_run(
    rt: &Runtime,
    dev: &Arc<SoftDevice>,
    input: &[u8],
    out_len: u32,
    key: u8,
) -> Vec<u8> {
    let args = crate::builtin::CopyIoArgs {
        out_len,
        key: u32::from(key),
    };
    let mut t = rt.submit(COPY_IO.io(&args, input)).unwrap();
    let device = {
        let dev = dev.clone();
        thread::spawn(move || run(&dev, 1))
    };
    let c = loop {
        if let Some(c) = t.try_result().unwrap() {
            break c;
        }
        thread::yield_now();
    };
    device.join().unwrap();
    assert_eq!(c.value, input.iter().map(|&b| u64::from(b)).sum::<u64>());
    t.output().expect("an IO task's output").to_vec()
}

#[test]
fn loom_an_io_tasks_output_is_whole_when_its_completion_is_seen() {
    model(|| {
        let (rt, dev) = stepped_io();
        let input = *b"pkq loom";
        let out = copy_io_while_run(&rt, &dev, &input, 10, 0x21);
        let want: Vec<u8> = (0..10)
            .map(|i| input.get(i).copied().unwrap_or(0) ^ 0x21)
            .collect();
        assert_eq!(out, want);
    });
}

#[test]
fn loom_an_output_of_an_earlier_lap_is_never_taken_for_this_laps() {
    model(|| {
        let (rt, dev) = stepped_io();
        // Laps 0 of both slots, then lap 1 of slot 0 with a shorter output
        // under another key: its area still holds lap 0's words.
        for _ in 0..2 {
            let out = copy_io_while_run(&rt, &dev, &[7; 16], 16, 0x10);
            assert_eq!(out, [7 ^ 0x10; 16]);
        }
        let out = copy_io_while_run(&rt, &dev, &[3; 9], 9, 0x40);
        assert_eq!(out, [3 ^ 0x40; 9]);
    });
}
