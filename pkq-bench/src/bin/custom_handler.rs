//! The teaching example's handler timed: forward kinematics of a 6-joint
//! arm (`examples/custom_handler/fk.cu`, built by that crate's build.rs
//! with `pkq-build` exactly as a downstream crate's build.rs would),
//! checked against a Rust reference and timed against the same code
//! launched as an ordinary kernel, and its state op against the same op
//! called unchecked.
//!
//! `cargo run --release -p pkq-bench --bin custom_handler -- --json pkq-bench/results/custom_handler.json`

use pkq::Submit;
use std::path::PathBuf;

use clap::Parser;
use custom_handler as fk;
use pkq::cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
use pkq::cudarc::nvrtc::Ptx;
use pkq::{Error, Runtime, TaskError, TypedOp};
use pkq_bench::support::{Latency, one_stream_context, report, start, write_json};

#[derive(Parser)]
#[command(about = "a custom handler (6-joint forward kinematics) vs a kernel launch")]
struct Args {
    /// Timed calls per batch size and variant.
    #[arg(long, default_value_t = 5_000)]
    samples: usize,
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One row of the table: p50, p99, p99.9 and max, in µs.
fn print_row(l: &Latency) {
    println!(
        "{:<44}{:>8.2}{:>8.2}{:>8.2}{:>9.2}",
        l.name,
        l.p50_us(),
        l.quantile_us(0.99),
        l.quantile_us(0.999),
        l.hist.max() as f64 / 1e3
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if fk::IMAGE.is_empty() {
        println!("skipped: custom_handler was built without nvcc, so fk.cu was not compiled");
        return Ok(());
    }
    let (clock, info) = start(None, 0)?;
    // Buffers, launched kernels and their stream come first: nothing that
    // may wait for the context runs once the resident kernel does.
    let ctx = one_stream_context()?;
    let stream = ctx.new_stream()?;
    let launched = ctx
        .load_module(Ptx::from_binary(fk::IMAGE.to_vec()))?
        .load_function("fk_kernel")?;
    let sizes = [1usize, 32, 256, fk::MAX_N];
    let mut bufs = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let q = fk::random_angles(n, 7 + i as u64);
        let qd = stream.clone_htod(&q)?;
        let pd = stream.alloc_zeros::<f32>(12 * n)?;
        bufs.push((n, q, qd, pd));
    }
    let mut nan = fk::random_angles(4, 99);
    nan[5] = f32::NAN;
    let nan_d = stream.clone_htod(&nan)?;
    let mut nan_out = stream.alloc_zeros::<f32>(48)?;
    // A warm launch (loads the kernel's code before the runtime starts).
    let (n0, _, q0, p0) = &mut bufs[0];
    let n0u = *n0 as u32;
    // SAFETY: fk_kernel(const float*, float*, uint32_t) with n x 6 and n x 12 floats.
    unsafe {
        stream
            .launch_builder(&launched)
            .arg(&*q0)
            .arg(&mut *p0)
            .arg(&n0u)
            .launch(LaunchConfig::for_num_elems(n0u))?;
    }
    stream.synchronize()?;

    // A host struct that disagrees with fk.cu's is refused at load, by name.
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Stale {
        q: u64,
        pose: u64,
    }
    let stale: TypedOp<Stale> = TypedOp::with_pointers(256, "FK");
    match Runtime::builder()
        .module(fk::IMAGE, fk::KERNEL)
        .op(&stale)
        .build()
    {
        Err(e @ Error::OpMismatch { .. }) => println!("a stale argument struct is refused: {e}"),
        other => panic!("expected OpMismatch, got {other:?}"),
    }

    let rt = fk::runtime()?;
    let mut rows = Vec::new();
    for (n, q, qd, pd) in bufs.iter_mut() {
        let done = fk::forward_kinematics(&rt, qd, pd)?;
        assert_eq!(done, *n as u64);
        let err = fk::max_error(q, &stream.clone_dtoh(pd)?);
        println!("n = {n:4}: largest error vs the f64 reference {err:.2e}");
        assert!(err < 1e-4, "n = {n}: error {err}");
    }
    match fk::forward_kinematics(&rt, &nan_d, &mut nan_out) {
        Err(Error::Task(TaskError { status, .. })) => println!("a NaN angle is refused: {status}"),
        other => panic!("expected the handler's own status, got {other:?}"),
    }

    println!(
        "\n{:<44}{:>8}{:>8}{:>8}{:>9}",
        "call (µs)", "p50", "p99", "p99.9", "max"
    );
    for (n, _, qd, pd) in bufs.iter_mut() {
        let nu = *n as u32;
        let pkq_row = Latency::measure(
            &format!("pkq FK op, n = {n}"),
            &clock,
            500,
            args.samples,
            || fk::forward_kinematics(&rt, &*qd, &mut *pd).map(drop),
        );
        let launch_row = Latency::measure(
            &format!("fk_kernel launch + sync, n = {n}"),
            &clock,
            500,
            args.samples,
            || {
                // SAFETY: as the warm launch above.
                unsafe {
                    stream
                        .launch_builder(&launched)
                        .arg(&*qd)
                        .arg(&mut *pd)
                        .arg(&nu)
                        .launch(LaunchConfig::for_num_elems(nu))?;
                }
                stream.synchronize()
            },
        );
        for l in [&pkq_row, &launch_row] {
            print_row(l);
            rows.push(l.row("us"));
        }
    }

    // State kept on the device: ARM_STEP through the safe call against the
    // same op submitted unchecked with the state's address (what the safe
    // call costs over it), and against the FK op on buffers, whose safe call
    // synchronizes each buffer's stream per call.
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct ArmStepRaw {
        state: u64,
        bytes: u64,
        step: fk::ArmStep,
    }
    let raw: TypedOp<ArmStepRaw> = TypedOp::with_pointers(fk::ARM_STEP.op().0, "ARM_STEP (raw)");
    let init = fk::ArmState::default();
    let mut arm = rt.state(&[init])?;
    let raw_state = stream.clone_htod(bytemuck::cast_slice::<fk::ArmState, f32>(&[init]))?;
    let step = fk::ArmStep {
        qd: [1e-3; 6],
        dt: 1e-3,
        reserved: 0,
    };
    let (addr, _guard) = raw_state.device_ptr(&stream);
    let raw_args = ArmStepRaw {
        state: addr,
        bytes: std::mem::size_of::<fk::ArmState>() as u64,
        step,
    };
    let (n1, _, qd1, pd1) = &mut bufs[0];
    let state_rows = [
        Latency::measure(
            "ARM_STEP on device state, call_on_state (safe)",
            &clock,
            500,
            args.samples,
            || rt.call_on_state(&fk::ARM_STEP, &mut arm, &step).map(drop),
        ),
        Latency::measure(
            "ARM_STEP, call_unchecked with the state's address",
            &clock,
            500,
            args.samples,
            // SAFETY: raw_state holds one arm_state, in the runtime's
            // context, used by nothing else while the call waits for it.
            || unsafe { rt.submit(raw.args(&raw_args).unchecked())?.wait().map(drop) },
        ),
        Latency::measure(
            &format!("pkq FK op on buffers (call_on_buffers), n = {n1}"),
            &clock,
            500,
            args.samples,
            || fk::forward_kinematics(&rt, &*qd1, &mut *pd1).map(drop),
        ),
    ];
    for l in &state_rows {
        print_row(l);
        rows.push(l.row("us"));
    }
    let over = state_rows[0].p50_us() - state_rows[1].p50_us();
    println!("the safe state call costs {over:.2} µs (p50) over the unchecked call");
    let mut summary = serde_json::Map::new();
    summary.insert(
        "name".into(),
        serde_json::json!("call_on_state over call_unchecked"),
    );
    summary.insert(
        "p50_us".into(),
        serde_json::json!((over * 1000.0).round() / 1000.0),
    );
    rows.push(summary);
    rt.shutdown()?;
    if let Some(path) = args.json {
        write_json(&path, &report(&info, rows));
    }
    Ok(())
}
