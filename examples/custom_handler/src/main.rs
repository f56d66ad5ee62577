//! Your own device code served by pkq: forward kinematics of a 6-joint arm
//! (`fk.cu`, compiled by this crate's build.rs with `pkq-build` exactly as
//! a downstream crate's build.rs would), checked against a Rust reference:
//! batches of configurations on buffers of your own, a refused argument
//! struct, the handler's own status, an arm kept on the device between
//! tasks, and a batch past one warp's limit served over every SM.
//!
//! `cargo run --release -p custom_handler`
//!
//! Its timings against the same code launched as an ordinary kernel are
//! pkq-bench's `custom_handler` bench (`pkq-bench/results/custom_handler.json`).

use custom_handler::{
    ARM_STEP, ArmState, ArmStep, FK, IMAGE, KERNEL, MAX_N, forward_kinematics, max_error,
    random_angles, runtime,
};
use pkq::{Error, Runtime, TaskError, TypedOp};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if IMAGE.is_empty() {
        println!("skipped: the crate was built without nvcc, so fk.cu was not compiled");
        return Ok(());
    }
    // The buffers and their stream come first: nothing that may wait for
    // the context runs once the resident kernel does.
    let ctx = pkq::context(0)?;
    let stream = ctx.new_stream()?;
    let mut bufs = Vec::new();
    for (i, n) in [1usize, 32, 256, MAX_N].into_iter().enumerate() {
        let q = random_angles(n, 7 + i as u64);
        let qd = stream.clone_htod(&q)?;
        let pd = stream.alloc_zeros::<f32>(12 * n)?;
        bufs.push((n, q, qd, pd));
    }
    // A batch past one warp's limit, for the wide op.
    let wide_q = random_angles(16_384, 5);
    let wide_qd = stream.clone_htod(&wide_q)?;
    let mut wide_pd = stream.alloc_zeros::<f32>(12 * wide_q.len() / 6)?;
    let mut nan = random_angles(4, 99);
    nan[5] = f32::NAN;
    let nan_d = stream.clone_htod(&nan)?;
    let mut nan_out = stream.alloc_zeros::<f32>(48)?;

    // A host struct that disagrees with fk.cu's is refused at load, by name.
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Stale {
        q: u64,
        pose: u64,
    }
    let stale: TypedOp<Stale> = TypedOp::with_pointers(FK.op().0, "FK");
    match Runtime::builder().module(IMAGE, KERNEL).op(&stale).build() {
        Err(e @ Error::OpMismatch { .. }) => println!("a stale argument struct is refused: {e}"),
        other => panic!("expected OpMismatch, got {other:?}"),
    }

    let rt = runtime()?;
    for (n, q, qd, pd) in bufs.iter_mut() {
        let done = forward_kinematics(&rt, qd, pd)?;
        assert_eq!(done, *n as u64);
        let err = max_error(q, &stream.clone_dtoh(pd)?);
        println!("n = {n:4}: largest error vs the f64 reference {err:.2e}");
        assert!(err < 1e-4, "n = {n}: error {err}");
    }
    match forward_kinematics(&rt, &nan_d, &mut nan_out) {
        Err(Error::Task(TaskError { status, .. })) => println!("a NaN angle is refused: {status}"),
        other => panic!("expected the handler's own status, got {other:?}"),
    }

    // State kept on the device: an arm stepped by ARM_STEP, each step
    // checked against the host's twin of it.
    let mut arm = ArmState::default();
    let mut state = rt.state(&[arm])?;
    let step = ArmStep {
        qd: [0.1, -0.2, 0.3, -0.4, 0.5, -0.6],
        dt: 1e-3,
        reserved: 0,
    };
    for i in 0..1_000 {
        let want = custom_handler::arm_step_reference(&arm, &step).expect("finite angles");
        let c = rt.call_on_state(&ARM_STEP, &mut state, &step)?;
        arm = state.read()?[0];
        let err = arm
            .pose
            .iter()
            .zip(&want.pose)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(err < 1e-4, "step {i}: error {err}");
        assert_eq!(c.value as u32, arm.pose[3].to_bits(), "the value is x");
    }
    println!(
        "1000 ARM_STEPs on the device, each as the host's reference: the end effector at x = {:.4} m",
        arm.pose[3]
    );
    rt.shutdown()?;

    // The same FK as a group op (FK_WIDE), on a lane of one block of 8
    // warps per SM: every thread of the group takes configurations.
    let wide = custom_handler::wide_runtime(pkq::Width::Group {
        blocks: 0,
        warps: 8,
    })?;
    let n = forward_kinematics(&wide, &wide_qd, &mut wide_pd)?;
    let err = max_error(&wide_q, &stream.clone_dtoh(&wide_pd)?);
    println!("n = {n} over every SM: largest error vs the f64 reference {err:.2e}");
    assert!(err < 1e-4, "wide n = {n}: error {err}");
    wide.shutdown()?;
    Ok(())
}
