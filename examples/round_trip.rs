//! A tour of pkq's submit API: one task and its round trip, a batch, a
//! pack of small tasks, an IO task with data in and out, a callback, and a
//! shutdown that drains what is in flight.
//!
//!     cargo run --release --example round_trip

use std::sync::mpsc;
use std::time::Instant;

use pkq::builtin::{COPY_IO, CopyIoArgs, ECHO, NOP};
use pkq::{Runtime, Submit};

fn main() -> pkq::Result<()> {
    // The resident kernel on device 0, in the latency shape, with input and
    // output areas of up to 1 KiB per slot for IO tasks.
    let rt = Runtime::builder().io(1024, 1024).build()?;

    // One task: submit, then wait for the device's completion.
    let t0 = Instant::now();
    let done = rt.submit(ECHO.args(&42))?.wait()?;
    println!(
        "ECHO 42 -> {} in {:?} ({:?} on the device)",
        done.value,
        t0.elapsed(),
        done.device_time()
    );

    // A batch: one reservation for all, a slot each, reaped together.
    let words: Vec<u64> = (0..256).collect();
    let results = rt.submit(ECHO.batch(&words))?.wait()?;
    assert!(
        results
            .iter()
            .zip(&words)
            .all(|(r, w)| r.unwrap().value == *w)
    );

    // A pack: 32 small tasks to a slot, for many tasks of 8 bytes or less.
    let many: Vec<u64> = (0..4096).collect();
    let results = rt.submit(ECHO.packed(&many))?.wait()?;
    println!("{} packed tasks done", results.len());

    // An IO task: its input in the slot's input area, its output back with
    // the completion (COPY_IO XORs every byte with the key).
    let args = CopyIoArgs {
        out_len: 5,
        key: 0x20,
    };
    let (c, out) = rt.submit(COPY_IO.io(&args, b"HELLO"))?.wait_output()?;
    println!(
        "COPY_IO: {:?} (the input's byte sum {})",
        String::from_utf8_lossy(&out),
        c.value
    );

    // A callback, run on the runtime's completion thread.
    let (tx, rx) = mpsc::channel();
    rt.submit(ECHO.args(&7))?
        .on_complete(move |r| drop(tx.send(r.map(|c| c.value))));
    assert_eq!(rx.recv().expect("the callback runs once")?, 7);

    // try_submit never waits for room: Full is the answer when there is none.
    match rt.try_submit(NOP.args(&())) {
        Ok(t) => drop(t.wait()?),
        Err(pkq::Error::Full) => println!("the ring was full"),
        Err(e) => return Err(e),
    }

    // Drains what is in flight, then stops the kernel.
    rt.shutdown()
}
