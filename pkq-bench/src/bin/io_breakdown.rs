//! Where an IO task's time goes on the device: the round trip and the
//! device's time (from the whole slot to the handler's return, as
//! `Completion::device_time`) of NOP, a plain task (ECHO), and COPY_IO as an
//! IO task with input only, output only and both, at 8 B and the area's
//! size, and ECHO as an IO task with an input of the area's size (read, not
//! used); medians of 4000 after 1500 of warm-up. One worker of eight
//! pollers with areas of `--area` bytes each way (default 1024; from 4096
//! on, plain streams: PLAIN in `cuda/pkq_layout.h`), at each ring capacity
//! given (default 1024).
//!
//! `cargo run --release -p pkq-bench --bin io_breakdown -- [--area BYTES] [CAPACITY...]`

use pkq::Submit;
use pkq::builtin::CopyIoArgs;
use pkq::builtin::*;
use pkq::{Completion, Runtime};
use pkq_bench::support::start;

const SAMPLES: usize = 4_000;
const WARMUP: usize = 1_500;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (clock, _info) = start(None, 0)?;
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut area = 1024;
    if let Some(at) = args.iter().position(|a| a == "--area") {
        area = args
            .get(at + 1)
            .ok_or("--area needs a byte count")?
            .parse()?;
        args.drain(at..at + 2);
    }
    let input: Vec<u8> = (0..area).map(|i| (i * 7 + 3) as u8).collect();
    let capacities: Vec<usize> = args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?;
    let capacities = if capacities.is_empty() {
        vec![1024]
    } else {
        capacities
    };
    let median_us = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2] as f64 / 1e3
    };
    for capacity in capacities {
        let rt = Runtime::builder()
            .workers(1)
            .pollers(8)
            .capacity(capacity)
            .io(area, area)
            .build()?;
        let run = |name: &str, f: &mut dyn FnMut() -> pkq::Result<Completion>| -> pkq::Result<()> {
            for _ in 0..WARMUP {
                f()?;
            }
            let (mut round_trip, mut device) = (Vec::new(), Vec::new());
            for _ in 0..SAMPLES {
                let t0 = clock.now();
                let c = f()?;
                round_trip.push(clock.between(t0, clock.now()));
                device.push(c.device_time().as_nanos() as u64);
            }
            println!(
                "capacity {capacity:>5}  {name:<28} round trip {:>6.2} us  device {:>6.2} us",
                median_us(&mut round_trip),
                median_us(&mut device)
            );
            Ok(())
        };
        run("NOP", &mut || rt.submit(NOP.args(&()))?.wait())?;
        run("ECHO", &mut || rt.submit(ECHO_48.args(&[1u64; 6]))?.wait())?;
        run(&format!("ECHO in {area}"), &mut || {
            rt.submit(ECHO.io(&1u64, &input))?
                .wait_output()
                .map(|(c, _)| c)
        })?;
        for (i, o) in [
            (0, 0),
            (8, 0),
            (0, 8),
            (8, 8),
            (area, 0),
            (0, area),
            (area, area),
        ] {
            let args = CopyIoArgs {
                out_len: o as u32,
                key: 0x5a,
            };
            run(&format!("COPY_IO in {i} out {o}"), &mut || {
                rt.submit(COPY_IO.io(&args, &input[..i]))?
                    .wait_output()
                    .map(|(c, _)| c)
            })?;
        }
        rt.shutdown()?;
    }
    Ok(())
}
