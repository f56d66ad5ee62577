//! The overlap pattern of the CUDA guides: the CPU prepares batch N+1
//! while the GPU processes batch N, then takes batch N's results. pkq (each
//! record an IO task: its bytes in, its bytes out, every ticket waited on)
//! against two CUDA streams taking turns (each batch a cudaMemcpyAsync in,
//! one kernel launch over the whole batch, a cudaMemcpyAsync out, a stream
//! sync). Both run the same records through the same transform (every byte
//! XORed with a key: pkq's `COPY_IO` and the bench kernel
//! `pkq_copy_io_kernel`), and the CPU checks every output byte.
//!
//! Each mechanism runs twice: serially (prepare, process, consume, one
//! batch after the other: the sum of the stage times) and pipelined. The
//! overlap is (serial time - pipelined time) / serial time.
//!
//! `cargo run --release -p pkq-bench --bin pipeline -- --json pkq-bench/results/pipeline.json`

use pkq::Submit;
use pkq::builtin::*;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use pkq::builtin::CopyIoArgs;
use pkq::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use pkq::{Runtime, Ticket};
use pkq_bench::rng::Rng;
use pkq_bench::support::{report, start, write_json};
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "CPU/GPU overlap: pkq IO tasks vs two streams of memcpyAsync + launch")]
struct Args {
    /// Records (tasks) per batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Bytes of each record, each way.
    #[arg(long, default_value_t = 256)]
    bytes: usize,
    /// Batches per run.
    #[arg(long, default_value_t = 4_000)]
    batches: usize,
    /// pkq's worker warps (the throughput shape).
    #[arg(long, default_value_t = 16)]
    workers: usize,
    #[arg(long)]
    core: Option<usize>,
    #[arg(long)]
    json: Option<PathBuf>,
}

const KEY: u8 = 0x5a;

/// The CPU's first stage: a batch's records, freshly generated.
fn prepare(rng: &mut Rng, batch: &mut [u8]) {
    for chunk in batch.chunks_mut(8) {
        let v = rng.next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// The CPU's last stage: every output byte checked against its input.
fn consume(input: &[u8], output: &[u8]) -> Result<(), String> {
    if input.len() != output.len() {
        return Err(format!("{} bytes out for {} in", output.len(), input.len()));
    }
    match input.iter().zip(output).position(|(i, o)| *o != i ^ KEY) {
        Some(at) => Err(format!("byte {at} is wrong")),
        None => Ok(()),
    }
}

/// Seconds of a run of `batches` batches.
struct Timed {
    serial_s: f64,
    pipelined_s: f64,
}

impl Timed {
    fn row(&self, name: &str, a: &Args) -> Map<String, Value> {
        let tasks = (a.batches * a.batch) as f64;
        let overlap = (self.serial_s - self.pipelined_s) / self.serial_s * 100.0;
        let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
        let mut m = Map::new();
        m.insert("name".into(), json!(name));
        m.insert(
            "tasks_per_s".into(),
            json!((tasks / self.pipelined_s).round()),
        );
        m.insert("overlap_pct".into(), json!(r3(overlap)));
        m.insert(
            "serial_tasks_per_s".into(),
            json!((tasks / self.serial_s).round()),
        );
        m.insert(
            "batch_us".into(),
            json!(r3(self.pipelined_s / a.batches as f64 * 1e6)),
        );
        m.insert(
            "serial_batch_us".into(),
            json!(r3(self.serial_s / a.batches as f64 * 1e6)),
        );
        m.insert("batch_tasks".into(), json!(a.batch));
        m.insert("task_bytes".into(), json!(a.bytes));
        m.insert("batches".into(), json!(a.batches));
        println!(
            "{:<28}{:>14.0}{:>14.0}{:>10.1}",
            name,
            tasks / self.pipelined_s,
            tasks / self.serial_s,
            overlap
        );
        m
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    // pkq-bench's module first, before any pkq runtime starts (see
    // pkq_bench::floor).
    pkq_bench::floor::load(0)?;
    if a.batch == 0 || a.bytes == 0 || a.batches == 0 {
        return Err("--batch, --bytes and --batches must be at least 1".into());
    }
    let (_clock, info) = start(a.core, 0)?;
    let batch_bytes = a.batch * a.bytes;
    println!(
        "{} batches of {} records of {} B each way",
        a.batches, a.batch, a.bytes
    );
    println!(
        "{:<28}{:>14}{:>14}{:>10}",
        "", "tasks/s", "serial", "overlap %"
    );

    // Two streams first: nothing that may wait for the context runs once
    // the resident kernel does.
    let ctx = pkq::context(0)?;
    let module = pkq_bench::floor::load(0)?;
    let kernel = module.load_function("pkq_copy_io_kernel")?;
    let streams = [ctx.new_stream()?, ctx.new_stream()?];
    let mut host_in = Vec::new();
    let mut host_out = Vec::new();
    for _ in 0..2 {
        // SAFETY: page-locked buffers, uninitialized: an input is written
        // (`prepare`) before its first copy in, an output read only after
        // a copy out wrote it; each by this thread alone, while no copy
        // that uses it is in flight (its stream synchronized).
        unsafe {
            host_in.push(ctx.alloc_pinned::<u8>(batch_bytes)?);
            host_out.push(ctx.alloc_pinned::<u8>(batch_bytes)?);
        }
    }
    let mut dev: Vec<(CudaSlice<u8>, CudaSlice<u8>)> = Vec::new();
    for s in &streams {
        dev.push((
            s.alloc_zeros::<u8>(batch_bytes)?,
            s.alloc_zeros::<u8>(batch_bytes)?,
        ));
    }
    let len = batch_bytes as u32;
    let key = u32::from(KEY);
    let cfg = LaunchConfig::for_num_elems(len);
    // Batch `n` on stream n % 2: its copy in, the kernel, its copy out.
    let enqueue = |s: usize,
                   host_in: &[pkq::cudarc::driver::PinnedHostSlice<u8>],
                   host_out: &mut [pkq::cudarc::driver::PinnedHostSlice<u8>],
                   dev: &mut [(CudaSlice<u8>, CudaSlice<u8>)]|
     -> Result<(), Box<dyn std::error::Error>> {
        let stream: &std::sync::Arc<CudaStream> = &streams[s];
        let (din, dout) = &mut dev[s];
        stream.memcpy_htod(&host_in[s], din)?;
        {
            let (ip, _r) = din.device_ptr(stream);
            let (op, _w) = dout.device_ptr(stream);
            // SAFETY: pkq_copy_io_kernel(const u8*, u32, u8*, u32, u32) with
            // `len` bytes readable at ip and writable at op.
            unsafe {
                stream
                    .launch_builder(&kernel)
                    .arg(&ip)
                    .arg(&len)
                    .arg(&op)
                    .arg(&len)
                    .arg(&key)
                    .launch(cfg)?;
            }
        }
        stream.memcpy_dtoh(dout, &mut host_out[s])?;
        Ok(())
    };
    let mut streams_run = |pipelined: bool| -> Result<f64, Box<dyn std::error::Error>> {
        let mut rng = Rng(7);
        prepare(&mut rng, host_in[0].as_mut_slice()?);
        let t0 = Instant::now();
        for n in 0..a.batches {
            let s = n % 2;
            if !pipelined && n > 0 {
                prepare(&mut rng, host_in[s].as_mut_slice()?);
            }
            enqueue(s, &host_in, &mut host_out, &mut dev)?;
            if pipelined && n + 1 < a.batches {
                // The other stream's buffers: its last batch was consumed.
                prepare(&mut rng, host_in[1 - s].as_mut_slice()?);
            }
            streams[s].synchronize()?;
            consume(host_in[s].as_slice()?, host_out[s].as_slice()?)?;
        }
        Ok(t0.elapsed().as_secs_f64())
    };
    streams_run(true)?;
    let two_streams = Timed {
        serial_s: streams_run(false)?,
        pipelined_s: streams_run(true)?,
    };
    for s in &streams {
        s.synchronize()?;
    }

    // pkq: the throughput shape with IO areas of one record each way.
    let rt = Runtime::builder()
        .workers(a.workers)
        .io(a.bytes, a.bytes)
        .build()?;
    let args = CopyIoArgs {
        out_len: a.bytes as u32,
        key,
    };
    let submit_batch = |input: &[u8], tickets: &mut Vec<Ticket>| -> pkq::Result<()> {
        for record in input.chunks(a.bytes) {
            tickets.push(rt.submit(COPY_IO.io(&args, record))?);
        }
        Ok(())
    };
    let pkq_run = |pipelined: bool| -> Result<f64, Box<dyn std::error::Error>> {
        let mut rng = Rng(7);
        let mut inputs = [vec![0u8; batch_bytes], vec![0u8; batch_bytes]];
        let mut output = vec![0u8; batch_bytes];
        let mut tickets = Vec::with_capacity(a.batch);
        prepare(&mut rng, &mut inputs[0]);
        let t0 = Instant::now();
        for n in 0..a.batches {
            let s = n % 2;
            if !pipelined && n > 0 {
                prepare(&mut rng, &mut inputs[s]);
            }
            submit_batch(&inputs[s], &mut tickets)?;
            if pipelined && n + 1 < a.batches {
                prepare(&mut rng, &mut inputs[1 - s]);
            }
            for (t, out) in tickets.drain(..).zip(output.chunks_mut(a.bytes)) {
                let (_, bytes) = t.wait_output()?;
                if bytes.len() != out.len() {
                    return Err(format!("{} bytes out for {}", bytes.len(), out.len()).into());
                }
                out.copy_from_slice(&bytes);
            }
            consume(&inputs[s], &output)?;
        }
        Ok(t0.elapsed().as_secs_f64())
    };
    pkq_run(true)?;
    let pkq_timed = Timed {
        serial_s: pkq_run(false)?,
        pipelined_s: pkq_run(true)?,
    };
    rt.shutdown()?;

    let rows = vec![
        pkq_timed.row("pipeline, pkq", &a),
        two_streams.row("pipeline, 2 streams", &a),
    ];
    if let Some(path) = &a.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}
