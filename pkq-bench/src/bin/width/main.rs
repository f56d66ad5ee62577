//! Wide tasks against the launches a user would otherwise write, in one
//! process run: for each workload and size, pkq on one warp where it
//! applies, pkq wide (a lane of blocks or groups: `pkq::Width`), an
//! ordinary kernel launch + stream sync of the same work over a grid sized
//! for it, and a CUDA graph of that launch + sync.
//!
//! Workloads: the empty task at every width (1 warp, a block of 8 warps,
//! 8 blocks, one block per SM: `empty <n> warps, ...`; `empty 1 warps, pkq
//! warp` is the NOP round trip of the run; a wide lane's NOP, answered by
//! its poller alone, shows what the hand-off adds); the dot product of `n`
//! floats in device memory (`dot <n>, ...`: pkq's DOT on a warp up to its
//! limit; GROUP_DOT on a lane of one block and on a lane of one block per
//! SM, the row `pkq wide` the faster of the two, its `sms` saying which;
//! the launch zeroes the result, runs the kernel and copies the result
//! back); and `y = A x` for an `n x n` matrix in device memory (`gemv <n>,
//! ...`: GEMV on a warp up to its limit, GROUP_GEMV as GROUP_DOT, and
//! GROUP_GEMV's own row loop launched as a grid of a warp per row; every
//! wide result must equal the launched one bit for bit); forward
//! kinematics of `n` poses and Black-Scholes prices and greeks of `n`
//! options, the example crates' handlers (`fk <n>, ...`, `options <n>,
//! ...`: see `examples.rs`); and payloads of `n` bytes each way through
//! host memory (`payload <n> B, ...`: see `payload.rs`, with a zero-copy
//! launch row). Rows carry p50/p99 and the SMs each used; then the head
//! start each size keeps (and for payloads, the best pkq p50 over the
//! zero-copy launch's); last, where an empty task's time goes on lanes of 8
//! blocks and of one block per SM, from traces (see `handoff.rs`). Writes
//! JSON and an SVG of p50 against size for each workload (the dot
//! product's at the given path, the others' beside it, `_<workload>` added
//! to its name).
//!
//! `cargo run --release -p pkq-bench --bin width -- --json pkq-bench/results/width.json --svg pkq-bench/results/width.svg`

mod examples;
mod handoff;
mod payload;

use std::path::PathBuf;

use clap::Parser;
use pkq::builtin::{
    DOT, DotArgs, GEMV, GROUP_DOT, GROUP_EMPTY, GROUP_GEMV, GROUP_MEMSET, GemvArgs, MEMSET,
    MemsetArgs, NOP,
};
use pkq::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
    result, sys,
};
use pkq::{Runtime, Submit, Width};
use pkq_bench::support::{
    Clock, Latency, one_stream_context, plot_by_size, report, start, write_json,
};
use serde_json::{Map, Value, json};
use std::sync::Arc;

#[derive(Parser)]
#[command(about = "pkq wide tasks vs kernel launches and CUDA graphs, by width and size")]
struct Args {
    #[arg(long, default_value_t = 3_000)]
    samples: usize,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// Warps per block of every wide lane and launch here.
const WARPS: u32 = 8;

fn row(l: &Latency, sms: usize) -> Map<String, Value> {
    let mut r = l.row("us");
    r.insert("sms".into(), json!(sms));
    r
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // pkq-bench's module first, before any pkq runtime starts (see
    // pkq_bench::floor).
    pkq_bench::floor::load(0)?;
    let (clock, info) = start(None, 0)?;
    let (w, n) = (args.samples / 10, args.samples);
    let ctx = one_stream_context()?;
    let stream = ctx.new_stream()?;
    let sms = pkq::device_info(0)?.multiprocessors as usize;
    let empty = pkq_bench::floor::function(0, "pkq_empty_kernel")?;
    let dot_kernel = pkq_bench::floor::function(0, "pkq_dot_kernel")?;
    let mut rows = Vec::new();
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut point = |name: &str, x: f64, p50: f64| match series.iter_mut().find(|s| s.0 == name) {
        Some(s) => s.1.push((x, p50)),
        None => series.push((name.to_string(), vec![(x, p50)])),
    };

    // Launches and graphs first: nothing that may wait for the context runs
    // once a resident kernel does.
    let widths: Vec<(u32, u32)> = vec![(1, 1), (1, WARPS), (8, WARPS), (sms as u32, WARPS)];
    let mut launched = Vec::new();
    for &(blocks, warps) in &widths {
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (warps * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let name = format!("empty {} warps", blocks * warps);
        let launch = Latency::measure(&format!("{name}, launch"), &clock, w, n, || {
            // SAFETY: pkq_empty_kernel takes no parameters.
            unsafe { stream.launch_builder(&empty).launch(cfg) }?;
            stream.synchronize()
        });
        let graph = graph_of(&stream, || {
            // SAFETY: as above; captured, not run.
            unsafe { stream.launch_builder(&empty).launch(cfg) }.map(drop)
        })?;
        let graphed = Latency::measure(&format!("{name}, graph"), &clock, w, n, || {
            graph.launch()?;
            stream.synchronize()
        });
        launched.push((blocks * warps, launch, graphed, (blocks as usize).min(sms)));
    }
    let sizes: Vec<usize> = vec![
        1,
        1 << 10,
        1 << 13,
        1 << 16,
        1 << 18,
        1 << 20,
        1 << 22,
        1 << 24,
    ];
    let x: Vec<f32> = (0..*sizes.last().unwrap())
        .map(|i| (i % 13) as f32 * 0.125)
        .collect();
    let xd = stream.clone_htod(&x)?;
    let yd = stream.clone_htod(&x)?;
    let mut out = stream.alloc_zeros::<f64>(1)?;
    let out_at = {
        let (o, _sync) = out.device_ptr_mut(&stream);
        o
    };
    let want =
        |size: usize| -> f64 { x[..size].iter().map(|&v| f64::from(v) * f64::from(v)).sum() };
    let mut dots = Vec::new();
    for &size in &sizes {
        let grid = (size.div_ceil(WARPS as usize * 32 * 4) as u32).clamp(1, 4 * sms as u32);
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut host = [0f64; 1];
        let name = format!("dot {size}");
        let once = || dot_launch(&stream, &dot_kernel, &xd, &yd, size as u32, out_at, cfg);
        let read = |host: &mut [f64; 1]| -> Result<(), pkq::cudarc::driver::DriverError> {
            // SAFETY: out_at holds one f64 of this context; `host` outlives
            // the copy, which the synchronize waits for.
            unsafe { result::memcpy_dtoh_async(host, out_at, stream.cu_stream()) }?;
            stream.synchronize()
        };
        let launch = Latency::measure(&format!("{name}, launch"), &clock, w, n, || {
            once()?;
            read(&mut host)
        });
        assert_eq!(host[0], want(size), "the launched dot of {size}");
        let graph = graph_of(&stream, once)?;
        let graphed = Latency::measure(&format!("{name}, graph"), &clock, w, n, || {
            graph.launch()?;
            read(&mut host)
        });
        dots.push((size, launch, graphed, (grid as usize).min(sms)));
    }
    // GEMV: y = A x, A the first n x n floats of one matrix.
    let gemv_sizes: Vec<usize> = vec![64, 128, 256, 512, 1024, 2048, 4096, 8192];
    let g_max = *gemv_sizes.last().unwrap();
    let ad = stream.clone_htod(
        &(0..g_max * g_max)
            .map(|i| ((i * 7 + 3) % 17) as f32 * 0.0625 - 0.5)
            .collect::<Vec<f32>>(),
    )?;
    let gx = stream.clone_htod(&x[..g_max])?;
    let gy = stream.alloc_zeros::<f32>(g_max)?;
    let (a_at, gx_at, gy_at) = (addr(&ad, &stream), addr(&gx, &stream), addr(&gy, &stream));
    let gemv_kernel = pkq_bench::floor::function(0, "pkq_wide_gemv_kernel")?;
    let mut gemvs = Vec::new();
    for &size in &gemv_sizes {
        let grid = size.div_ceil(WARPS as usize) as u32;
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let g = GemvArgs {
            a: a_at,
            x: gx_at,
            y: gy_at,
            rows: size as u32,
            cols: size as u32,
        };
        let once = || gemv_launch(&stream, &gemv_kernel, &g, cfg);
        let name = format!("gemv {size}");
        let launch = Latency::measure(&format!("{name}, launch"), &clock, w, n, || {
            once()?;
            stream.synchronize()
        });
        let graph = graph_of(&stream, once)?;
        let graphed = Latency::measure(&format!("{name}, graph"), &clock, w, n, || {
            graph.launch()?;
            stream.synchronize()
        });
        let y = stream.clone_dtoh(&gy)?[..size].to_vec();
        gemvs.push((size, launch, graphed, (grid as usize).min(sms), y));
    }
    // The example crates' handlers, launched.
    let workloads = [
        examples::Workload::fk(&stream)?,
        examples::Workload::options(&stream)?,
    ];
    let mut work_launched = Vec::new();
    for wl in &workloads {
        work_launched.push(wl.time_launches(&clock, (w, n), sms, &|f| graph_of(&stream, f))?);
    }
    // Payloads through host memory, launched.
    let mut payload = payload::Payload::new(&stream)?;
    let (pay_launched, zero_copy) =
        payload.time_launches(&clock, (w, n), sms, &|f| graph_of(&stream, f))?;
    stream.synchronize()?;
    let (x_at, y_at) = (addr(&xd, &stream), addr(&yd, &stream));

    // pkq: one runtime at a time, each alone on the device.
    let nop_rt = Runtime::builder().build()?;
    let nop = Latency::measure("empty 1 warps, pkq warp", &clock, w, n, || {
        nop_rt.submit(NOP.args(&()))?.wait().map(drop)
    });
    let warp_sizes = sizes
        .iter()
        .copied()
        .filter(|&s| s <= pkq::builtin::DOT_MAX_N);
    let warp_dots = time_dots(
        &nop_rt,
        &DOT,
        "pkq warp",
        warp_sizes,
        (x_at, y_at),
        &want,
        &clock,
        (w, n),
    )?;
    // y is filled with NaNs (all bits set) by pkq's own MEMSET before each
    // size's check: no copy or memset of the driver's while a resident
    // kernel runs (one over every SM leaves none room: see `Width::Group`).
    let time_gemvs = |rt: &Runtime,
                      (op, fill): (&pkq::TypedOp<GemvArgs>, &pkq::TypedOp<MemsetArgs>),
                      mechanism: &str,
                      most: usize| {
        let mut rows = Vec::new();
        for (size, _, _, _, want) in gemvs.iter().filter(|g| g.0 <= most) {
            let g = GemvArgs {
                a: a_at,
                x: gx_at,
                y: gy_at,
                rows: *size as u32,
                cols: *size as u32,
            };
            // SAFETY: A, x and y hold the bench's n x n, n and n floats
            // and outlive every task.
            let call = || {
                rt.submit(unsafe { op.args(&g).unchecked() })?
                    .wait()
                    .map(drop)
            };
            let nan = MemsetArgs {
                dst: gy_at,
                bytes: 4 * g_max as u64,
                value: 0xff,
                reserved: 0,
            };
            // SAFETY: gy_at holds g_max floats of this context.
            rt.submit(unsafe { fill.args(&nan).unchecked() })?.wait()?;
            call()?;
            let got = stream.clone_dtoh(&gy)?;
            for (r, (a, b)) in got.iter().zip(want).enumerate() {
                // The wide op runs the launched kernel's loop: the same bits.
                // The warp op adds in another order.
                let close = if op.op() == GROUP_GEMV.op() {
                    a.to_bits() == b.to_bits()
                } else {
                    (a - b).abs() <= 1e-3 * b.abs().max(1.0)
                };
                assert!(
                    close,
                    "{mechanism} gemv {size}, row {r}: {a} vs launched {b}"
                );
            }
            let l = Latency::measure(&format!("gemv {size}, {mechanism}"), &clock, w, n, || {
                call()
            });
            rows.push((*size, l));
        }
        Ok::<_, Box<dyn std::error::Error>>(rows)
    };
    let warp_gemvs = time_gemvs(
        &nop_rt,
        (&GEMV, &MEMSET),
        "pkq warp",
        pkq::builtin::GEMV_MAX_DIM,
    )?;
    let warp_pay = payload.time_pkq(&nop_rt, "pkq warp", &clock, (w, n))?;
    drop(nop_rt);
    let mut wide = Vec::new();
    let mut poller_alone = None;
    for &(blocks, warps) in &widths {
        let rt = Runtime::builder()
            .width(lane_width(blocks, warps))
            .build()?;
        let l = Latency::measure(
            &format!("empty {} warps, pkq wide", blocks * warps),
            &clock,
            w,
            n,
            || rt.submit(GROUP_EMPTY.args(&()))?.wait().map(drop),
        );
        wide.push((blocks * warps, l, blocks as usize));
        if (blocks, warps) == (1, WARPS) {
            // The same lane's NOP, which its poller answers alone: what the
            // hand-off to the block adds is the difference.
            poller_alone = Some(Latency::measure(
                &format!("empty {warps} warps, pkq wide lane's NOP (its poller alone)"),
                &clock,
                w,
                n,
                || rt.submit(NOP.args(&()))?.wait().map(drop),
            ));
        }
    }
    // pkq wide: the wide ops on a lane of one block (one SM) and on a lane
    // of one block per SM; each size's row is the faster of the two (its
    // `sms` says which), as a user picks the lane for the size.
    let mut wide_dots = Vec::new();
    let mut wide_gemvs = Vec::new();
    let mut wide_pay = Vec::new();
    for (width, used) in wide_lanes(sms) {
        let rt = Runtime::builder().width(width).build()?;
        let dots = time_dots(
            &rt,
            &GROUP_DOT,
            "pkq wide",
            sizes.iter().copied(),
            (x_at, y_at),
            &want,
            &clock,
            (w, n),
        )?;
        let gemvs = time_gemvs(&rt, (&GROUP_GEMV, &GROUP_MEMSET), "pkq wide", usize::MAX)?;
        let pays = payload.time_pkq(&rt, "pkq wide", &clock, (w, n))?;
        drop(rt);
        faster(&mut wide_dots, dots, used);
        faster(&mut wide_gemvs, gemvs, used);
        faster(&mut wide_pay, pays, used);
    }
    let mut sweeps = vec![
        Sweep {
            work: "dot",
            caption: "dot product of n floats",
            launched: dots,
            warp: warp_dots,
            wide: wide_dots,
            extra: Vec::new(),
        },
        Sweep {
            work: "gemv",
            caption: "y = A x, A of n x n floats",
            launched: gemvs
                .into_iter()
                .map(|(z, l, g, s, _)| (z, l, g, s))
                .collect(),
            warp: warp_gemvs,
            wide: wide_gemvs,
            extra: Vec::new(),
        },
        Sweep {
            work: "payload",
            caption: "n bytes from host memory to host memory",
            launched: pay_launched,
            warp: warp_pay,
            wide: wide_pay,
            extra: zero_copy,
        },
    ];
    for (wl, launched) in workloads.iter().zip(work_launched) {
        let rt = wl.runtime(Width::Warp)?;
        let warp = wl.time_pkq(&rt, "pkq warp", &clock, (w, n))?;
        drop(rt);
        let mut wide = Vec::new();
        for (width, used) in wide_lanes(sms) {
            let rt = wl.runtime(width)?;
            faster(
                &mut wide,
                wl.time_pkq(&rt, "pkq wide", &clock, (w, n))?,
                used,
            );
        }
        sweeps.push(Sweep {
            work: wl.work,
            caption: wl.caption,
            launched,
            warp,
            wide,
            extra: Vec::new(),
        });
    }

    // Rows, in order, and the head start they keep.
    println!("{:<36} {:>9} {:>9} {:>5}", "", "p50 µs", "p99 µs", "SMs");
    let mut push = |l: &Latency, sms: usize, size: Option<f64>| {
        println!(
            "{:<36} {:>9.2} {:>9.2} {:>5}",
            l.name,
            l.p50_us(),
            l.quantile_us(0.99),
            sms
        );
        if let Some(x) = size {
            // A series per workload and mechanism ("dot: launch").
            let (size, mech) = l.name.split_once(", ").unwrap();
            let work = size.split(' ').next().unwrap();
            point(&format!("{work}: {mech}"), x, l.p50_us());
        }
        rows.push(row(l, sms));
    };
    push(&nop, 1, None);
    for (warps, launch, graph, s) in &launched {
        if let Some((_, l, blocks)) = wide.iter().find(|(wp, ..)| wp == warps) {
            push(l, *blocks, None);
        }
        if *warps == WARPS
            && let Some(l) = &poller_alone
        {
            push(l, 1, None);
        }
        push(launch, *s, None);
        push(graph, *s, None);
    }
    for sweep in &sweeps {
        for (size, launch, graph, s) in &sweep.launched {
            let x = Some(*size as f64);
            if let Some((_, l)) = sweep.warp.iter().find(|(z, _)| z == size) {
                push(l, 1, x);
            }
            if let Some((_, l, used)) = sweep.wide.iter().find(|(z, ..)| z == size) {
                push(l, *used, x);
            }
            push(launch, *s, x);
            push(graph, *s, x);
            if let Some((_, l, used)) = sweep.extra.iter().find(|(z, ..)| z == size) {
                push(l, *used, x);
            }
        }
    }
    // The head start: launch + sync of the empty kernel less the NOP round
    // trip; at each size, how much of it the best pkq row keeps.
    let head = launched[0].1.p50_us() - nop.p50_us();
    let mut keeps = Map::new();
    keeps.insert(
        "name".into(),
        json!("head start kept (launch p50 - best pkq p50) / (empty launch p50 - NOP p50)"),
    );
    for sweep in &sweeps {
        for (size, launch, ..) in &sweep.launched {
            let best = sweep
                .wide
                .iter()
                .map(|(z, l, _)| (z, l))
                .chain(sweep.warp.iter().map(|(z, l)| (z, l)))
                .filter(|(z, _)| *z == size)
                .map(|(_, l)| l.p50_us())
                .fold(f64::INFINITY, f64::min);
            keeps.insert(
                format!("{}_{size}_ratio", sweep.work),
                json!(((launch.p50_us() - best) / head * 1e3).round() / 1e3),
            );
            // Against the zero-copy launch on the same host memory: best
            // pkq p50 / its p50.
            if let Some((_, zc, _)) = sweep.extra.iter().find(|(z, ..)| z == size) {
                keeps.insert(
                    format!("{}_{size}_vs_zero_copy", sweep.work),
                    json!((best / zc.p50_us() * 1e3).round() / 1e3),
                );
            }
        }
    }
    println!("{}", Value::Object(keeps.clone()));
    rows.push(keeps);
    // Where an empty wide task's time goes (traced), across SMs.
    for blocks in [8, sms as u32] {
        rows.extend(handoff::rows(blocks, WARPS, 10)?);
    }
    let report = report(&info, rows);
    if let Some(path) = &args.json {
        write_json(path, &report);
    }
    let of = |work: &str| -> Vec<(String, Vec<(f64, f64)>)> {
        let head = format!("{work}: ");
        series
            .iter()
            .filter_map(|(name, points)| {
                Some((name.strip_prefix(&head)?.to_string(), points.clone()))
            })
            .collect()
    };
    if let Some(path) = &args.svg {
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        for (i, sweep) in sweeps.iter().enumerate() {
            let at = if i == 0 {
                path.clone()
            } else {
                path.with_file_name(format!("{stem}_{}.svg", sweep.work))
            };
            let x_max = 2.0 * sweep.launched.last().map_or(1, |l| l.0) as f64;
            plot_by_size(
                &at,
                &format!("{}: p50 by size", sweep.caption),
                "n",
                x_max,
                true,
                &of(sweep.work),
            )?;
        }
    }
    Ok(())
}

/// The lanes of pkq wide rows, with the SMs each uses: one block (one
/// SM), and one block per SM of the device's `sms`.
/// A lane of `blocks` blocks of `warps` warps: a lane of blocks for one.
fn lane_width(blocks: u32, warps: u32) -> Width {
    if blocks == 1 {
        Width::Block { warps }
    } else {
        Width::Group { blocks, warps }
    }
}

fn wide_lanes(sms: usize) -> [(Width, usize); 2] {
    [
        (Width::Block { warps: WARPS }, 1),
        (
            Width::Group {
                blocks: 0,
                warps: WARPS,
            },
            sms,
        ),
    ]
}

/// One workload's rows by size: launch + sync, graph + sync and the SMs
/// they used; pkq on a warp (up to the warp op's limit); pkq wide, the
/// faster lane's row and its SMs.
struct Sweep {
    work: &'static str,
    caption: &'static str,
    launched: Vec<examples::Launched>,
    warp: Vec<(usize, Latency)>,
    wide: Vec<(usize, Latency, usize)>,
    /// Another mechanism's rows (the payload's zero-copy launch) and SMs.
    extra: Vec<(usize, Latency, usize)>,
}

/// Keeps in `best`, size by size, the faster (by p50) of its row and the
/// row of `rows`, measured on `sms` SMs.
fn faster(best: &mut Vec<(usize, Latency, usize)>, rows: Vec<(usize, Latency)>, sms: usize) {
    for (size, l) in rows {
        match best.iter_mut().find(|(z, ..)| *z == size) {
            Some(b) if b.1.p50_us() <= l.p50_us() => {}
            Some(b) => *b = (size, l, sms),
            None => best.push((size, l, sms)),
        }
    }
}

/// A task of `op` with `args`, waited for: its value as f64 bits.
fn call(rt: &Runtime, op: &pkq::TypedOp<DotArgs>, args: &DotArgs) -> pkq::Result<f64> {
    // SAFETY: the bench's x and y hold n floats each and outlive every task.
    let t = rt.submit(unsafe { op.args(args).unchecked() })?;
    Ok(f64::from_bits(t.wait()?.value))
}

/// `op` of `x` and `y` on `rt` for each size, checked against `want` (to
/// 1e-9 relative: the device adds in its own order), then timed as
/// `dot <n>, <mechanism>` (`w` warm-up runs, `n` samples).
#[allow(clippy::too_many_arguments)]
fn time_dots(
    rt: &Runtime,
    op: &pkq::TypedOp<DotArgs>,
    mechanism: &str,
    sizes: impl Iterator<Item = usize>,
    (x, y): (u64, u64),
    want: &dyn Fn(usize) -> f64,
    clock: &Clock,
    (w, n): (usize, usize),
) -> pkq::Result<Vec<(usize, Latency)>> {
    let mut rows = Vec::new();
    for size in sizes {
        let a = DotArgs {
            x,
            y,
            n: size as u32,
            reserved: 0,
        };
        let (got, exact) = (call(rt, op, &a)?, want(size));
        assert!(
            (got - exact).abs() <= 1e-9 * exact.abs().max(1.0),
            "{mechanism} dot {size}: {got} vs {exact}"
        );
        let l = Latency::measure(&format!("dot {size}, {mechanism}"), clock, w, n, || {
            call(rt, op, &a).map(drop)
        });
        rows.push((size, l));
    }
    Ok(rows)
}

/// The device address of `s` (its stream synchronized before any task).
fn addr(s: &CudaSlice<f32>, stream: &Arc<CudaStream>) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

/// What a user's dot product launches: `out` zeroed, the kernel over `cfg`.
fn dot_launch(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    x: &CudaSlice<f32>,
    y: &CudaSlice<f32>,
    n: u32,
    out: u64,
    cfg: LaunchConfig,
) -> Result<(), pkq::cudarc::driver::DriverError> {
    // SAFETY: `out` holds one f64 of this context.
    unsafe { result::memset_d8_async(out, 0, 8, stream.cu_stream()) }?;
    // SAFETY: pkq_dot_kernel(const float*, const float*, u32, double*):
    // x and y hold n floats each, out one double.
    unsafe {
        stream
            .launch_builder(f)
            .arg(x)
            .arg(y)
            .arg(&n)
            .arg(&out)
            .launch(cfg)
    }
    .map(drop)
}

/// What a user's GEMV launches: GROUP_GEMV's row loop over `cfg`.
fn gemv_launch(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    g: &GemvArgs,
    cfg: LaunchConfig,
) -> Result<(), pkq::cudarc::driver::DriverError> {
    // SAFETY: pkq_wide_gemv_kernel(const float*, const float*, float*, u32,
    // u32): A, x and y hold rows x cols, cols and rows floats.
    unsafe {
        stream
            .launch_builder(f)
            .arg(&g.a)
            .arg(&g.x)
            .arg(&g.y)
            .arg(&g.rows)
            .arg(&g.cols)
            .launch(cfg)
    }
    .map(drop)
}

/// A graph of what `capture` issues on `stream`, uploaded.
fn graph_of(
    stream: &Arc<CudaStream>,
    capture: impl FnOnce() -> Result<(), pkq::cudarc::driver::DriverError>,
) -> Result<pkq::cudarc::driver::CudaGraph, Box<dyn std::error::Error>> {
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    capture()?;
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))?
        .ok_or("stream capture produced no graph")?;
    graph.upload()?;
    Ok(graph)
}
