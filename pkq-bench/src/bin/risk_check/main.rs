//! A pre-trade risk check at a steady message rate, pkq against its
//! launch-based twin in one run: the book (mid prices and bands, position
//! and notional limits, every account's positions) stays on the device
//! (`risk_check/book.cu`), each order's check is one task that
//! accepts or rejects it and updates the book. pkq: `Lane::call_on_state`
//! on the latency setting; the twin: the same check as a kernel launch (the
//! order by value, the decision into mapped memory) + stream sync. Every
//! decision is checked against the host's twin of the book.
//!
//! Orders arrive at a steady rate (`--rate`); latency is from the time an
//! order was due to its decision, so an order that arrived while the check
//! before it still ran counts its wait (`late_orders` counts those). Then
//! the same orders back to back: the most a thread checks per second (the
//! host's check of the decisions comes after the timing).
//!
//! `cargo run --release -p pkq-bench --bin risk_check -- --json pkq-bench/results/risk_check.json`
//!
//! `--trace FILE` records every pkq task of the run (`pkq::trace`) and
//! writes them to FILE (Perfetto's format, or Chrome's JSON for a name
//! ending in `.json`).

mod book;

use std::path::PathBuf;

use book::{Book, Order, Rng};
use clap::Parser;
use pkq::cudarc::driver::{DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg, sys};
use pkq::cudarc::nvrtc::Ptx;
use pkq_bench::support::{
    Clock, Latency, at_least_one, one_stream_context, positive, report, start, write_json,
};
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "a pre-trade risk check on a book kept on the device: pkq vs launch + sync")]
struct Args {
    /// Orders per second.
    #[arg(long, default_value_t = 50_000.0, value_parser = positive)]
    rate: f64,
    /// Orders per mechanism, at the steady rate and back to back.
    #[arg(long, default_value_t = 500_000, value_parser = at_least_one)]
    orders: usize,
    #[arg(long)]
    core: Option<usize>,
    #[arg(long)]
    json: Option<PathBuf>,
    /// Trace pkq's tasks into this file.
    #[arg(long)]
    trace: Option<PathBuf>,
}

// SAFETY: `Order` is `repr(C)` plain data of the layout of book.cu's
// `risk_order`, passed to the kernel by value.
unsafe impl DeviceRepr for Order {}

/// One mechanism's run: latencies at the steady rate, and the back-to-back
/// rate.
struct Run {
    latency: Latency,
    late: usize,
    accepted: usize,
    max_per_s: f64,
}

impl Run {
    fn row(&self, orders: usize, rate: f64) -> Map<String, Value> {
        let mut m = self.latency.row("us");
        m.remove("samples");
        m.insert("orders".into(), json!(orders));
        m.insert("rate_per_s".into(), json!(rate));
        m.insert("accepted".into(), json!(self.accepted));
        m.insert("late_orders".into(), json!(self.late));
        m.insert("max_orders_per_s".into(), json!(self.max_per_s.round()));
        println!(
            "{:<24}{:>8.2}{:>8.2}{:>8.2}{:>9.2}{:>12.0}{:>8}",
            self.latency.name,
            self.latency.p50_us(),
            self.latency.quantile_us(0.99),
            self.latency.quantile_us(0.999),
            self.latency.hist.max() as f64 / 1e3,
            self.max_per_s,
            self.late
        );
        m
    }
}

/// The orders of a run, all from one seed.
fn flow(n: usize) -> Vec<Order> {
    let book = Book::new(3);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..n).map(|_| book.order(&mut rng)).collect()
}

/// Runs `orders` through `check` at `rate` per second, then back to back,
/// each decision checked against the host's book.
fn run(
    name: &str,
    clock: &Clock,
    rate: f64,
    orders: &[Order],
    mut check: impl FnMut(&Order) -> Result<u64, Box<dyn std::error::Error>>,
    mut reset: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<Run, Box<dyn std::error::Error>> {
    let period_ns = 1e9 / rate;
    let verify = |reference: &mut Book, o: &Order, got: u64| -> Result<(), String> {
        let want = reference.check(o);
        if got != want {
            return Err(format!(
                "{name}: {o:?}: decision {got:#x}, the host's {want:#x}"
            ));
        }
        Ok(())
    };
    // Warm-up, unrecorded but checked, on a book reset after it.
    let mut reference = Book::new(3);
    for o in &orders[..orders.len().min(2_000)] {
        verify(&mut reference, o, check(o)?)?;
    }
    reset()?;
    let mut reference = Book::new(3);
    let mut latency = Latency::new(name);
    let (mut late, mut accepted) = (0, 0);
    let origin = clock.ns(clock.now()) + 1_000_000;
    let mut free_at = 0u64;
    for (k, o) in orders.iter().enumerate() {
        let due = origin + (k as f64 * period_ns) as u64;
        clock.spin_until(due);
        // Late: the order was due while the check before was still running.
        if free_at > due {
            late += 1;
        }
        let got = check(o)?;
        let end = clock.ns(clock.now());
        free_at = end;
        // From the order's due time: a late order's wait counts.
        latency.record_ns(end.saturating_sub(due));
        verify(&mut reference, o, got)?;
        accepted += usize::from(got & 0xff == book::ACCEPT);
    }
    // Back to back, timed without the host's own check, which follows.
    reset()?;
    let mut decisions = Vec::with_capacity(orders.len());
    let t0 = clock.now();
    for o in orders {
        decisions.push(check(o)?);
    }
    let max_per_s = orders.len() as f64 / (clock.between(t0, clock.now()) as f64 / 1e9);
    let mut reference = Book::new(3);
    for (o, &got) in orders.iter().zip(&decisions) {
        verify(&mut reference, o, got)?;
    }
    Ok(Run {
        latency,
        late,
        accepted,
        max_per_s,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if book::IMAGE.is_empty() {
        println!("skipped: pkq-bench was built without nvcc, so book.cu was not compiled");
        return Ok(());
    }
    let (clock, info) = start(args.core, 0)?;
    let orders = flow(args.orders);
    println!("{} orders at {} per second", args.orders, args.rate);
    println!(
        "{:<24}{:>8}{:>8}{:>8}{:>9}{:>12}{:>8}",
        "order to decision (µs)", "p50", "p99", "p99.9", "max", "max/s", "late"
    );

    // The launch twin first: nothing that may wait for the context runs
    // once the resident kernel does.
    let ctx = one_stream_context()?;
    let stream = ctx.new_stream()?;
    let kernel = ctx
        .load_module(Ptx::from_binary(book::IMAGE.to_vec()))?
        .load_function(book::LAUNCHED)?;
    let mut dev_book = stream.clone_htod(bytemuck::bytes_of(&Book::new(3)))?;
    // SAFETY: one page-locked, mapped word (CU_MEMHOSTALLOC_DEVICEMAP;
    // with unified addressing its host address is its device address, as
    // the kernel is given it), written by the kernel and read here only
    // after the stream's sync; never read before the first kernel wrote
    // it.
    let result = unsafe { ctx.alloc_pinned_with_flags::<u64>(1, sys::CU_MEMHOSTALLOC_DEVICEMAP)? };
    let result_p = result.as_ptr()? as u64;
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let book_p = dev_book.device_ptr(&stream).0;
    let launch = run(
        "risk check, launch",
        &clock,
        args.rate,
        &orders,
        |o| {
            // SAFETY: risk_kernel(risk_book*, risk_order, uint64_t*): the
            // book's device copy and one mapped word, both live, used by
            // nothing else until the sync.
            unsafe {
                stream
                    .launch_builder(&kernel)
                    .arg(&book_p)
                    .arg(o)
                    .arg(&result_p)
                    .launch(one)?;
            }
            stream.synchronize()?;
            // SAFETY: the kernel finished (synchronized above).
            Ok(unsafe { std::ptr::read_volatile(result_p as *const u64) })
        },
        || {
            stream.memcpy_htod(bytemuck::bytes_of(&Book::new(3)), &mut dev_book)?;
            Ok(stream.synchronize()?)
        },
    )?;
    stream.synchronize()?;

    // Every task of the run: the steady orders, the back-to-back ones, and
    // the checks' warm-up.
    let rt = book::runtime(args.trace.as_ref().map(|_| 2 * args.orders + 100_000))?;
    let state = std::cell::RefCell::new(rt.state(&[Book::new(3)])?);
    let pkq_run = run(
        "risk check, pkq",
        &clock,
        args.rate,
        &orders,
        |o| {
            Ok(rt
                .call_on_state(&book::CHECK, &mut state.borrow_mut(), o)?
                .value)
        },
        || Ok(state.borrow_mut().write(&[Book::new(3)])?),
    )?;
    if let Some(path) = &args.trace {
        let trace = rt.trace();
        trace.write(path)?;
        println!(
            "wrote {}: {} tasks, {} dropped",
            path.display(),
            trace.records().len(),
            trace.dropped()
        );
    }
    rt.shutdown()?;

    let rows = vec![
        pkq_run.row(args.orders, args.rate),
        launch.row(args.orders, args.rate),
    ];
    if let Some(path) = &args.json {
        write_json(path, &report(&info, rows));
    }
    Ok(())
}
