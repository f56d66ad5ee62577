//! Round trip against payload size: a task whose input and output are `N`
//! bytes each way, for N from 8 B to 64 KiB, by pkq's IO tasks
//! (`Builder::io` sized to the task, `submit_io` of COPY_IO, on the latency
//! setting; with where the time goes: submit, device, wait) and by
//! what CUDA offers for the same work (COPY_IO's as an ordinary kernel):
//! cudaMemcpyAsync in + launch + cudaMemcpyAsync out + sync; the same
//! three as a CUDA graph + sync; a launched kernel reading and writing
//! mapped host memory + sync. In the same run: pkq's NOP round trip on the
//! latency setting, and PCIe copy bandwidth each way.
//!
//! `cargo run --release -p pkq-bench --bin payload -- --json pkq-bench/results/payload.json --svg pkq-bench/results/payload.svg`

use pkq::Submit;
use pkq::builtin::*;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use pkq::Runtime;
use pkq::builtin::CopyIoArgs;
use pkq::cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg, sys};
use pkq_bench::support::{Latency, report, start, write_json};
use plotters::prelude::*;
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(
    about = "round trip against payload size: pkq IO tasks vs memcpy + launch, graphs, zero-copy"
)]
struct Args {
    /// Timed round trips per row (after 500 of warm-up).
    #[arg(long, default_value_t = 5_000)]
    samples: usize,
    /// Core to pin the timing thread to.
    #[arg(long)]
    core: Option<usize>,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
}

const SIZES: [usize; 6] = [8, 256, 1024, 4096, 16384, 65536];
const WARMUP: usize = 500;

/// Bytes per second of `f` moving `bytes` (best of 20 runs).
fn bandwidth(
    bytes: usize,
    mut f: impl FnMut() -> Result<(), pkq::cudarc::driver::DriverError>,
) -> f64 {
    (0..20)
        .map(|_| {
            let t0 = Instant::now();
            f().unwrap();
            bytes as f64 / t0.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // pkq-bench's module first, before any pkq runtime starts (see
    // pkq_bench::floor).
    pkq_bench::floor::load(0)?;
    let (clock, info) = start(args.core, 0)?;
    let (w, n) = (WARMUP, args.samples);
    let most = *SIZES.last().unwrap();
    let key = 0x5a;
    let input: Vec<u8> = (0..most).map(|i| (i * 7 + 3) as u8).collect();
    let want = |len: usize| -> Vec<u8> { input[..len].iter().map(|b| b ^ key as u8).collect() };

    // CUDA's ways first (nothing that may wait for the context runs once
    // the resident kernel does).
    let ctx = pkq::context(0)?;
    let stream = ctx.new_stream()?;
    let module = pkq_bench::floor::load(0)?;
    let kernel = module.load_function("pkq_copy_io_kernel")?;
    // SAFETY: page-locked buffers written (and read) only here, while no
    // copy or kernel that uses them is in flight.
    let (mut host_in, mut host_out) = unsafe {
        (
            ctx.alloc_pinned_with_flags::<u8>(most, sys::CU_MEMHOSTALLOC_DEVICEMAP)?,
            ctx.alloc_pinned_with_flags::<u8>(most, sys::CU_MEMHOSTALLOC_DEVICEMAP)?,
        )
    };
    host_in.as_mut_slice()?.copy_from_slice(&input);
    let dev_in = stream.alloc_zeros::<u8>(most)?;
    let mut dev_out = stream.alloc_zeros::<u8>(most)?;
    stream.synchronize()?;
    // PCIe bandwidth each way: copies of 64 MiB between pinned and device
    // memory (best of 20).
    const BIG: usize = 64 << 20;
    // SAFETY: a page-locked buffer used only by the copies below.
    let mut big_host =
        unsafe { ctx.alloc_pinned_with_flags::<u8>(BIG, sys::CU_MEMHOSTALLOC_PORTABLE)? };
    let mut big_dev = stream.alloc_zeros::<u8>(BIG)?;
    stream.synchronize()?;
    let h2d = bandwidth(BIG, || {
        stream.memcpy_htod(&big_host, &mut big_dev)?;
        stream.synchronize()
    });
    let d2h = bandwidth(BIG, || {
        stream.memcpy_dtoh(&big_dev, &mut big_host)?;
        stream.synchronize()
    });
    drop((big_host, big_dev));
    // The mapped buffers' device addresses (unified addressing: the host's).
    let mapped_in = host_in.as_ptr()? as u64;
    let mapped_out = host_out.as_mut_ptr()? as u64;
    // SAFETY: the pinned input, `most` bytes, written above and only read
    // from now on (by copies and kernels, and this view).
    let pinned_in: &[u8] = unsafe { std::slice::from_raw_parts(mapped_in as *const u8, most) };
    let cfg = |len: usize| LaunchConfig::for_num_elems(len.max(1) as u32);
    let mut rows: Vec<Map<String, Value>> = Vec::new();
    let mut series: Vec<(String, Vec<(usize, f64)>)> = Vec::new();
    let mut lat_rows = Vec::new();
    let mut record = |mech: &str, size: usize, l: Latency, rows: &mut Vec<Map<String, Value>>| {
        println!(
            "{:<40}{:>8.2}{:>8.2}{:>8.2}",
            l.name,
            l.p50_us(),
            l.quantile_us(0.99),
            l.quantile_us(0.999)
        );
        rows.push(l.row("us"));
        match series.iter_mut().find(|(m, _)| m == mech) {
            Some((_, pts)) => pts.push((size, l.p50_us())),
            None => series.push((mech.to_string(), vec![(size, l.p50_us())])),
        }
        lat_rows.push((mech.to_string(), size, l.p50_us()));
    };
    println!(
        "{:<40}{:>8}{:>8}{:>8}",
        "round trip (µs)", "p50", "p99", "p99.9"
    );
    for &size in &SIZES {
        let len = size as u32;
        let launch =
            |stream: &std::sync::Arc<pkq::cudarc::driver::CudaStream>, src: u64, dst: u64| {
                // SAFETY: pkq_copy_io_kernel(const u8*, u32, u8*, u32, u32) with
                // `size` readable bytes at src and writable at dst.
                unsafe {
                    stream
                        .launch_builder(&kernel)
                        .arg(&src)
                        .arg(&len)
                        .arg(&dst)
                        .arg(&len)
                        .arg(&key)
                        .launch(cfg(size))
                }
            };
        let (din, _g1) = dev_in.device_ptr(&stream);
        let (dout, _g2) = dev_out.device_ptr_mut(&stream);
        let (din, dout) = (din, dout);
        let copy = |stream: &std::sync::Arc<pkq::cudarc::driver::CudaStream>| -> Result<(), pkq::cudarc::driver::DriverError> {
            // SAFETY: `size` bytes of the pinned and device buffers, used by
            // nothing else meanwhile.
            unsafe {
                pkq::cudarc::driver::result::memcpy_htod_async(din, &pinned_in[..size], stream.cu_stream())?;
            }
            launch(stream, din, dout)?;
            // SAFETY: as above.
            unsafe {
                pkq::cudarc::driver::result::memcpy_dtoh_async(
                    &mut std::slice::from_raw_parts_mut(mapped_out as *mut u8, size)[..],
                    dout,
                    stream.cu_stream(),
                )
            }
        };
        // Each mechanism's output checked after its own run, from zeros.
        host_out.as_mut_slice()?[..size].fill(0);
        let l = Latency::measure(
            &format!("memcpy+launch+sync payload {size} B"),
            &clock,
            w,
            n,
            || {
                copy(&stream)?;
                stream.synchronize()
            },
        );
        assert_eq!(&host_out.as_slice()?[..size], &want(size)[..]);
        record("memcpy+launch+sync", size, l, &mut rows);
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        copy(&stream)?;
        let graph = stream
            .end_capture(sys::CUgraphInstantiate_flags(0))?
            .ok_or("stream capture produced no graph")?;
        graph.upload()?;
        host_out.as_mut_slice()?[..size].fill(0);
        let l = Latency::measure(&format!("graph payload {size} B"), &clock, w, n, || {
            graph.launch()?;
            stream.synchronize()
        });
        assert_eq!(&host_out.as_slice()?[..size], &want(size)[..]);
        record("graph", size, l, &mut rows);
        drop(graph);
        host_out.as_mut_slice()?[..size].fill(0);
        let l = Latency::measure(
            &format!("zero-copy launch payload {size} B"),
            &clock,
            w,
            n,
            || {
                launch(&stream, mapped_in, mapped_out)?;
                stream.synchronize()
            },
        );
        assert_eq!(&host_out.as_slice()?[..size], &want(size)[..]);
        record("zero-copy launch", size, l, &mut rows);
    }

    // pkq: the latency setting, with IO areas the size of the task's data
    // each way (as an application sizes them; the worker's rooms sit in
    // shared memory where the device has enough of it for them).
    let latency_setting = || Runtime::builder().workers(1).pollers(8);
    let rt = latency_setting().build()?;
    let nop = Latency::measure("pkq NOP round trip", &clock, w, n, || {
        rt.submit(NOP.args(&()))?.wait().map(drop)
    });
    rt.shutdown()?;
    println!(
        "{:<40}{:>8.2}{:>8.2}",
        nop.name,
        nop.p50_us(),
        nop.quantile_us(0.99)
    );
    rows.push(nop.row("us"));
    for &size in &SIZES {
        let rt = latency_setting().io(size, size).build()?;
        let io = CopyIoArgs {
            out_len: size as u32,
            key,
        };
        let l = Latency::measure(
            &format!("pkq payload {size} B"),
            &clock,
            w,
            n,
            || -> pkq::Result<()> {
                let (_, out) = rt.submit(COPY_IO.io(&io, &input[..size]))?.wait_output()?;
                debug_assert_eq!(out.len(), size);
                Ok(())
            },
        );
        let (_, out) = rt.submit(COPY_IO.io(&io, &input[..size]))?.wait_output()?;
        assert_eq!(out, want(size));
        record("pkq", size, l, &mut rows);
        // Where the time goes: the host's submit (the input written), the
        // device's task (from the whole slot to the handler's return), and
        // the wait (the output read back), medians of their own run.
        let (mut submit, mut device, mut wait) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..2_000 {
            let t0 = clock.now();
            let ticket = rt.submit(COPY_IO.io(&io, &input[..size]))?;
            let t1 = clock.now();
            let (c, _) = ticket.wait_output()?;
            let t2 = clock.now();
            submit.push(clock.between(t0, t1));
            wait.push(clock.between(t1, t2));
            device.push(c.device_time().as_nanos() as u64);
        }
        let median_us = |v: &mut Vec<u64>| {
            v.sort_unstable();
            v[v.len() / 2] as f64 / 1e3
        };
        let (s, d, wt) = (
            median_us(&mut submit),
            median_us(&mut device),
            median_us(&mut wait),
        );
        println!("    submit {s:.2} us, device {d:.2} us, wait {wt:.2} us (medians)");
        if let Some(row) = rows.last_mut() {
            row.insert("submit_p50_us".into(), json!(s));
            row.insert("device_p50_us".into(), json!(d));
            row.insert("wait_p50_us".into(), json!(wt));
        }
        rt.shutdown()?;
    }

    // The yardsticks of the IO path (ratios to the NOP and to the bytes at
    // the link's rate), from this run.
    let p50 = |mech: &str, size: usize| {
        lat_rows
            .iter()
            .find(|(m, s, _)| m == mech && *s == size)
            .map_or(f64::NAN, |r| r.2)
    };
    let bytes_us = |size: usize| size as f64 / h2d * 1e6 + size as f64 / d2h * 1e6;
    let mut summary = Map::new();
    summary.insert("name".into(), json!("targets"));
    summary.insert(
        "pcie_h2d_gb_per_s".into(),
        json!((h2d / 1e7).round() / 100.0),
    );
    summary.insert(
        "pcie_d2h_gb_per_s".into(),
        json!((d2h / 1e7).round() / 100.0),
    );
    summary.insert(
        "pkq_1024_over_nop".into(),
        json!((p50("pkq", 1024) / nop.p50_us() * 1000.0).round() / 1000.0),
    );
    summary.insert(
        "pkq_1024_over_memcpy_launch".into(),
        json!((p50("pkq", 1024) / p50("memcpy+launch+sync", 1024) * 1000.0).round() / 1000.0),
    );
    summary.insert(
        "pkq_65536_over_bytes_at_pcie_plus_nop".into(),
        json!((p50("pkq", 65536) / (bytes_us(65536) + nop.p50_us()) * 1000.0).round() / 1000.0),
    );
    println!(
        "\nPCIe {:.1} GB/s in, {:.1} GB/s out; pkq 1 KiB each way: {:.2}x its NOP, {:.2}x memcpy+launch+sync; 64 KiB: {:.2}x the bytes at PCIe bandwidth plus the NOP ({:.2} µs)",
        h2d / 1e9,
        d2h / 1e9,
        p50("pkq", 1024) / nop.p50_us(),
        p50("pkq", 1024) / p50("memcpy+launch+sync", 1024),
        p50("pkq", 65536) / (bytes_us(65536) + nop.p50_us()),
        bytes_us(65536) + nop.p50_us(),
    );
    rows.push(summary);
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    if let Some(path) = &args.svg {
        plot(path, &series)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// p50 round trip against payload size, one line per mechanism (log-log).
fn plot(
    path: &PathBuf,
    series: &[(String, Vec<(usize, f64)>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "round trip p50 against payload (each way)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (8f64..65536f64).log_scale(),
            (0.5f64..top * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("payload bytes each way")
        .y_desc("p50 µs")
        .draw()?;
    let colors = [BLUE, RED, GREEN, MAGENTA];
    for ((name, pts), color) in series.iter().zip(colors) {
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|&(s, v)| (s as f64, v)),
                color.stroke_width(2),
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
