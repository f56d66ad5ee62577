//! The host half of `fk.cu`: the op declared once, its argument struct, a
//! safe call, and a reference to check the device against. Used by the
//! demo (`src/main.rs`), pkq's GPU tests and pkq-bench's `custom_handler`
//! bench.
//!
//! This crate is laid out as a crate of your own that serves its handlers
//! with pkq would be: `fk.cu` beside `build.rs`, which compiles it with
//! `pkq-build` against pkq's headers (`DEP_PKQ_INCLUDE`), and the fatbin
//! embedded here ([`IMAGE`]).

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use pkq::{DeviceBuffer, DeviceBufferMut, Lane, Runtime, StateOp, TypedOp, Width};

/// fk.cu compiled by this crate's build.rs with `pkq-build`, as a
/// downstream crate's build.rs would (empty when the crate was built
/// without nvcc).
pub static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fk.fatbin"));
/// The resident kernel of the module (`PKQ_KERNEL(fk_worker_kernel, ...)`).
pub const KERNEL: &str = "fk_worker_kernel";

/// `struct fk_args` of fk.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct FkArgs {
    /// Device address of `n x 6` joint angles (rad).
    pub q: u64,
    /// Device address of `n x 12` floats: each configuration's 3x4 transform.
    pub pose: u64,
    /// Configurations, at most [`MAX_N`].
    pub n: u32,
    pub reserved: u32,
}

/// Forward kinematics of a batch (fk.cu's `FK_OP`); its handler dereferences
/// the addresses in its arguments.
pub const FK: TypedOp<FkArgs> = TypedOp::with_pointers(256, "FK");
/// The largest batch of one task.
pub const MAX_N: usize = 4096;
/// The same batch as a group op (fk.cu's `FK_WIDE_OP`): every thread of
/// the lane's block or group takes configurations, so a lane of blocks or
/// groups serves it ([`wide_runtime`]). A configuration with a non-finite
/// angle gets a non-finite transform (no participant sees the others'
/// angles, so none refuses the batch).
pub const FK_WIDE: TypedOp<FkArgs> = TypedOp::with_pointers(258, "FK_WIDE");
/// The largest batch of one [`FK_WIDE`] task.
pub const WIDE_MAX_N: usize = 1 << 20;
/// The handler's status for a batch holding a non-finite angle.
pub const STATUS_NOT_FINITE: u8 = 16;

/// `struct arm_state` of fk.cu: the arm kept on the device between tasks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct ArmState {
    /// Joint angles (rad).
    pub q: [f32; 6],
    /// The end effector's 3x4 transform at `q`, row-major.
    pub pose: [f32; 12],
}

/// `struct arm_step_args` of fk.cu: joint velocities held for `dt`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct ArmStep {
    /// Joint velocities (rad/s).
    pub qd: [f32; 6],
    /// Seconds.
    pub dt: f32,
    pub reserved: u32,
}

/// One control step on the arm kept on the device (fk.cu's `ARM_STEP_OP`):
/// `q += qd * dt`, then the new transform; returns its x coordinate (the
/// bits of an `f32`).
pub const ARM_STEP: StateOp<ArmState, ArmStep> = StateOp::new(257, "ARM_STEP");

/// A runtime serving fk.cu's kernel, its ops checked at load.
pub fn runtime() -> pkq::Result<Runtime> {
    Runtime::builder()
        .module(IMAGE, KERNEL)
        .op(&FK)
        .state_op(&ARM_STEP)
        .workers(4)
        .build()
}

/// A runtime whose lane of `width` (a block or a group:
/// [`Width::Block`], [`Width::Group`]) serves [`FK_WIDE`], checked at load.
pub fn wide_runtime(width: Width) -> pkq::Result<Runtime> {
    Runtime::builder()
        .module(IMAGE, KERNEL)
        .width(width)
        .op(&FK_WIDE)
        .build()
}

/// The host's twin of `ARM_STEP_OP`, in `f32` for the angles (as the
/// device) and `f64` for the transform: the state after the step, or
/// `None` where the device refuses it (a non-finite angle).
pub fn arm_step_reference(s: &ArmState, step: &ArmStep) -> Option<ArmState> {
    let q: [f32; 6] = std::array::from_fn(|j| s.q[j] + step.qd[j] * step.dt);
    if !q.iter().all(|v| v.is_finite()) {
        return None;
    }
    let t = reference(&q);
    Some(ArmState {
        q,
        pose: t.map(|v| v as f32),
    })
}

/// The end-effector transforms (`n x 12`) of `q`'s `n` configurations
/// (`n x 6`), computed by one warp of the resident kernel ([`FK`], up to
/// [`MAX_N`]) on a lane of warps, by every thread of the lane's block or
/// group ([`FK_WIDE`], up to [`WIDE_MAX_N`]) on a wider lane.
pub fn forward_kinematics(
    lane: &Lane,
    q: &impl DeviceBuffer<f32>,
    pose: &mut impl DeviceBufferMut<f32>,
) -> pkq::Result<u64> {
    let (op, most) = match lane.width() {
        Width::Warp => (&FK, MAX_N),
        _ => (&FK_WIDE, WIDE_MAX_N),
    };
    let n = q.len() / 6;
    if q.len() != 6 * n || pose.len() != 12 * n || n > most {
        return Err(pkq::Error::InvalidArgument(format!(
            "forward_kinematics needs 6 angles and 12 outputs per configuration, at most {most} \
             on this lane (got {} and {})",
            q.len(),
            pose.len()
        )));
    }
    let (qs, ps) = (Arc::clone(q.stream()), Arc::clone(pose.stream()));
    let (qp, _read) = q.device_ptr(&qs);
    let (pp, _write) = pose.device_ptr_mut(&ps);
    let args = FkArgs {
        q: qp,
        pose: pp,
        n: n as u32,
        reserved: 0,
    };
    // SAFETY: q and pose are live buffers of the checked lengths, borrowed
    // (pose exclusively) for the call; their streams are passed along.
    let c = unsafe { lane.call_on_buffers(op, &args, &[&qs, &ps])? };
    Ok(c.value)
}

/// UR5 Denavit-Hartenberg parameters (as fk.cu's).
const D: [f64; 6] = [0.089159, 0.0, 0.0, 0.10915, 0.09465, 0.0823];
const A: [f64; 6] = [0.0, -0.425, -0.39225, 0.0, 0.0, 0.0];
const ALPHA: [f64; 6] = [
    std::f64::consts::FRAC_PI_2,
    0.0,
    0.0,
    std::f64::consts::FRAC_PI_2,
    -std::f64::consts::FRAC_PI_2,
    0.0,
];

/// `n` configurations of random joint angles in [-pi, pi) (6 a
/// configuration), from `seed` (xorshift): the inputs of the demo and of
/// pkq-bench's timings.
pub fn random_angles(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..6 * n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * std::f32::consts::PI
        })
        .collect()
}

/// The reference, in `f64`: the 3x4 transform of one configuration.
pub fn reference(q: &[f32]) -> [f64; 12] {
    let mut t = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0];
    for j in 0..6 {
        let (st, ct) = (q[j] as f64).sin_cos();
        let (sa, ca) = ALPHA[j].sin_cos();
        let m = [
            ct,
            -st * ca,
            st * sa,
            A[j] * ct,
            st,
            ct * ca,
            -ct * sa,
            A[j] * st,
            0.0,
            sa,
            ca,
            D[j],
        ];
        let mut r = [0.0; 12];
        for i in 0..3 {
            for k in 0..4 {
                let mut v = t[4 * i] * m[k] + t[4 * i + 1] * m[4 + k] + t[4 * i + 2] * m[8 + k];
                if k == 3 {
                    v += t[4 * i + 3];
                }
                r[4 * i + k] = v;
            }
        }
        t = r;
    }
    t
}

/// The largest difference between the device's transforms and the reference.
pub fn max_error(q: &[f32], pose: &[f32]) -> f64 {
    q.chunks_exact(6)
        .zip(pose.chunks_exact(12))
        .flat_map(|(q, p)| {
            let want = reference(q);
            (0..12).map(move |i| (p[i] as f64 - want[i]).abs())
        })
        .fold(0.0, f64::max)
}
