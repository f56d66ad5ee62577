//! The host half of `control.cu`: the controller's state, its op declared
//! once, a plant to control, and a reference to check the device against.
//! Shared by the bench and pkq-bench's GPU tests.
#![allow(dead_code)]

use bytemuck::{Pod, Zeroable};
use pkq::{Runtime, StateOp};
pub use pkq_bench::rng::Rng;

/// control.cu compiled by pkq-bench's build.rs with `pkq-build`, as a
/// downstream crate's build.rs would (empty when built without nvcc).
pub static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/control_loop.fatbin"));
/// The resident kernel of the module (`PKQ_KERNEL(ctl_worker_kernel, ...)`).
pub const KERNEL: &str = "ctl_worker_kernel";
/// The same tick as an ordinary kernel (one warp).
pub const LAUNCHED: &str = "ctl_kernel";

pub const CHANNELS: usize = 64;
pub const SAMPLES: usize = 4;
pub const MOTORS: usize = 8;
/// A sensor frame: `SAMPLES` readings of `CHANNELS` channels, sample-major.
pub type Frame = [f32; CHANNELS * SAMPLES];
/// A tick's outputs: the motor commands, then the observer's other rows.
pub type Outputs = [f32; CHANNELS];
pub const FRAME_BYTES: usize = size_of::<Frame>();
pub const OUT_BYTES: usize = size_of::<Outputs>();
/// The handler's status for a frame holding a non-finite sample.
pub const STATUS_NOT_FINITE: u8 = 16;

/// `struct ctl_state` of control.cu: the controller kept on the device.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct CtlState {
    pub kp: [f32; MOTORS],
    pub ki: [f32; MOTORS],
    pub kd: [f32; MOTORS],
    pub setpoint: [f32; MOTORS],
    pub integral: [f32; MOTORS],
    pub prev_error: [f32; MOTORS],
    /// Seconds per tick.
    pub dt: f32,
    /// Ticks stepped.
    pub ticks: u32,
    pub reserved: [u32; 14],
    /// The observer `W` (64 x 64) in lane blocks (see control.cu):
    /// [`CtlState::observer`] reads it.
    pub w: [f32; CHANNELS * CHANNELS],
}

/// One tick on the controller kept on the device (control.cu's
/// `CTL_STEP_OP`), an IO task: the frame in, the outputs back; its value
/// is the ticks stepped so far.
pub const STEP: StateOp<CtlState, ()> = StateOp::new(256, "CTL_STEP");

/// The latency setting (one worker of eight pollers) serving control.cu's
/// kernel, with IO areas of one frame in and one tick's outputs back.
pub fn runtime(trace_records: Option<usize>) -> pkq::Result<Runtime> {
    let b = Runtime::builder()
        .module(IMAGE, KERNEL)
        .state_op(&STEP)
        .workers(1)
        .pollers(8)
        .io(FRAME_BYTES, OUT_BYTES);
    match trace_records {
        Some(n) => b.trace(n),
        None => b,
    }
    .build()
}

impl CtlState {
    /// A controller of `dt` seconds per tick, modest gains, setpoints
    /// spread over [-1, 1] and a small random observer.
    pub fn new(dt: f32, seed: u64) -> Self {
        let mut rng = Rng(seed | 1);
        let mut s = Self::zeroed();
        for m in 0..MOTORS {
            s.kp[m] = 2.0 + 0.1 * m as f32;
            s.ki[m] = 0.5;
            s.kd[m] = 0.001;
            s.setpoint[m] = -1.0 + 2.0 * m as f32 / (MOTORS - 1) as f32;
        }
        s.dt = dt;
        for w in s.w.iter_mut() {
            *w = 0.01 * rng.signed();
        }
        s
    }

    /// Where `W[r][j]` sits in [`CtlState::w`].
    pub fn observer_index(r: usize, j: usize) -> usize {
        (((r / 32) * (CHANNELS / 4) + j / 4) * 32 + r % 32) * 4 + j % 4
    }

    /// `W[r][j]`.
    pub fn observer(&self, r: usize, j: usize) -> f32 {
        self.w[Self::observer_index(r, j)]
    }

    /// The host's twin of `CTL_STEP_OP` (the same operations in the same
    /// order, in `f32`): the outputs, or `None` where the device refuses the
    /// frame (a non-finite sample), the state then untouched.
    pub fn step(&mut self, frame: &Frame) -> Option<Outputs> {
        if !frame.iter().all(|v| v.is_finite()) {
            return None;
        }
        let x: [f32; CHANNELS] = std::array::from_fn(|c| {
            let f = |k: usize| frame[k * CHANNELS + c];
            0.25 * (((f(0) + f(1)) + f(2)) + f(3))
        });
        let mut y = [0.0f32; CHANNELS];
        for (j, &xj) in x.iter().enumerate() {
            for (r, yr) in y.iter_mut().enumerate() {
                *yr = self.observer(r, j).mul_add(xj, *yr);
            }
        }
        for m in 0..MOTORS {
            let e = self.setpoint[m] - x[m];
            let integral = e.mul_add(self.dt, self.integral[m]);
            let deriv = (e - self.prev_error[m]) / self.dt;
            self.integral[m] = integral;
            self.prev_error[m] = e;
            y[m] += self.kp[m].mul_add(e, self.ki[m].mul_add(integral, self.kd[m] * deriv));
        }
        self.ticks = self.ticks.wrapping_add(1);
        Some(y)
    }
}

/// Eight motors whose positions the first eight channels read (with
/// noise); the other channels carry slow signals. A command is a velocity,
/// held for one tick.
#[derive(Clone, Debug)]
pub struct Plant {
    pub position: [f32; MOTORS],
    rng: Rng,
    t: u32,
}

impl Plant {
    pub fn new(seed: u64) -> Self {
        Self {
            position: [0.0; MOTORS],
            rng: Rng(seed | 1),
            t: 0,
        }
    }

    /// The next sensor frame.
    pub fn frame(&mut self, frame: &mut Frame) {
        self.t = self.t.wrapping_add(1);
        let slow = (self.t % 1000) as f32 / 1000.0 - 0.5;
        for k in 0..SAMPLES {
            for c in 0..CHANNELS {
                let noise = 0.01 * self.rng.signed();
                frame[k * CHANNELS + c] = if c < MOTORS {
                    self.position[c] + noise
                } else {
                    slow * (c as f32 / CHANNELS as f32) + noise
                };
            }
        }
    }

    /// Applies a tick's commands (velocities, clamped to +-10) for `dt`.
    pub fn apply(&mut self, out: &Outputs, dt: f32) {
        for (p, u) in self.position.iter_mut().zip(out) {
            *p += u.clamp(-10.0, 10.0) * dt;
        }
    }
}

/// The largest difference between two ticks' outputs, relative to 1 or
/// the reference's magnitude, whichever is larger; infinite where either
/// is not finite.
pub fn max_error(got: &Outputs, want: &Outputs) -> f32 {
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            let e = (g - w).abs() / w.abs().max(1.0);
            if e.is_finite() { e } else { f32::INFINITY }
        })
        .fold(0.0, f32::max)
}
