//! The raw floor: a bare one-word ping-pong with a resident kernel through
//! mapped memory (mirrors `cuda/pkq_floor.cuh`). It is what any design over
//! mapped memory pays (one PCIe read that sees the host's write, one posted
//! write back), so pkq's round trip is measured against it, with as many
//! pollers as pkq's workers have.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::driver;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, KernelState};
use crate::layout::{FLOOR_STOP, MAX_POLLERS};
use crate::mapped::MappedBuffer;
use crate::queue::Words;

/// A resident ping-pong kernel. See the module docs.
pub struct Floor {
    /// Host-written, device-polled word (its own allocation).
    ping: Words,
    /// Device-written, host-polled words, one per poller (another allocation).
    pong: Words,
    next: u64,
    stopped: bool,
    kernel: Kernel,
}

impl Floor {
    /// Launches the ping-pong kernel on device `index` with `pollers` warps
    /// (1, 2 or 4) polling the ping word, started a fraction of a read round
    /// trip apart as pkq's pollers are, and waits for its first echo.
    pub fn start(index: usize, pollers: u32) -> Result<Self> {
        if !matches!(pollers, 1 | 2 | 4) || pollers as usize > MAX_POLLERS {
            return Err(Error::InvalidConfig(format!(
                "pollers {pollers} must be 1, 2 or 4"
            )));
        }
        crate::kernel::image()?;
        let ctx = driver::open(index)?;
        // SAFETY: pkq's own Arc, backing no CudaSlice (see Builder::build).
        unsafe { ctx.disable_event_tracking() };
        let ping = MappedBuffer::new(&ctx, 1)?;
        let pong = MappedBuffer::new(&ctx, pollers as usize)?;
        let (ping_at, pong_at) = (ping.device_addr(0), pong.device_addr(0));
        let (ping_words, pong_words) = (ping.words(0, 1), pong.words(0, pollers as usize));
        let kernel = Kernel::new(&ctx, "pkq_floor_kernel", vec![ping, pong])?;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32 * pollers, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: pkq_floor_kernel(const uint64_t*, uint64_t*, uint32_t) gets
        // two device addresses into the kernel's own mapped memory (one ping
        // word, a pong word per poller), which outlives it, and the count.
        unsafe {
            kernel.launch(cfg, |b| {
                b.arg(&ping_at).arg(&pong_at).arg(&pollers);
            })?
        };
        let mut floor = Self {
            ping: ping_words,
            pong: pong_words,
            next: 1,
            stopped: false,
            kernel,
        };
        floor.round_trip_within(Duration::from_secs(10))?;
        Ok(floor)
    }

    /// One round trip: writes a new value and spins until a poller echoes
    /// it. Gives up after a second with the kernel's state as the error.
    #[inline]
    pub fn round_trip(&mut self) -> Result<()> {
        self.round_trip_within(Duration::from_secs(1))
    }

    fn round_trip_within(&mut self, limit: Duration) -> Result<()> {
        let v = self.next;
        self.next += 1;
        self.ping.at(0).store(v, Ordering::Relaxed);
        let mut polls = 0u32;
        let mut since: Option<Instant> = None;
        while (0..self.pong.len()).all(|j| self.pong.at(j).load(Ordering::Relaxed) != v) {
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            if polls % 4096 == 0 {
                let t0 = *since.get_or_insert_with(Instant::now);
                if t0.elapsed() > limit {
                    return Err(match self.kernel.state() {
                        KernelState::Running | KernelState::Unknown(..) => Error::Timeout,
                        KernelState::Finished => {
                            Error::KernelStopped("the floor kernel exited".into())
                        }
                        KernelState::Faulted(e) => Error::DeviceFault(driver::error_name(e)),
                    });
                }
            }
        }
        Ok(())
    }

    /// Tells the kernel to exit and waits for it.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.stopped, true) {
            return Ok(());
        }
        self.ping.at(0).store(FLOOR_STOP, Ordering::Relaxed);
        self.kernel
            .wait_finished(Instant::now() + Duration::from_secs(10))
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// What the device side of mapped-memory traffic costs, by the GPU's own
/// clock (`%globaltimer`): mean nanoseconds per operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceCosts {
    /// A relaxed system-scope load of mapped host memory whose address
    /// depends on the previous load: one PCIe read round trip.
    pub dependent_read_ns: f64,
    /// Issuing a relaxed system-scope store to mapped host memory (posted:
    /// the SM does not wait for it).
    pub relaxed_store_ns: f64,
    /// A relaxed store followed by `fence.sc.sys`: what publishing data
    /// before a separate flag costs the device.
    pub store_fence_sys_ns: f64,
    /// A release store at system scope (`st.release.sys`).
    pub release_store_sys_ns: f64,
    /// A relaxed store followed by a GPU-scope fence (`__threadfence()`).
    pub store_fence_gpu_ns: f64,
    /// The smallest step `%globaltimer` took between two reads: the
    /// resolution of the device timestamps in completions.
    pub globaltimer_step_ns: u64,
    /// The SM clock while the probe ran (MHz): cycles over global time.
    pub sm_clock_mhz: u64,
}

/// Measures [`DeviceCosts`] on device `index` with one thread of a fresh
/// kernel, `iters` repetitions of each operation.
pub fn device_costs(index: usize, iters: u32) -> Result<DeviceCosts> {
    crate::kernel::image()?;
    let ctx = driver::open(index)?;
    // SAFETY: pkq's own Arc, backing no CudaSlice (see Builder::build).
    unsafe { ctx.disable_event_tracking() };
    let ro = MappedBuffer::new(&ctx, 1)?;
    let d2h = MappedBuffer::new(&ctx, 16)?;
    let (ro_at, wo_at, out_at) = (ro.device_addr(0), d2h.device_addr(0), d2h.device_addr(8));
    let out = d2h.words(8, 8);
    let kernel = Kernel::new(&ctx, "pkq_costs_kernel", vec![ro, d2h])?;
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: pkq_costs_kernel(const uint64_t*, uint64_t*, uint64_t*, uint32_t)
    // gets addresses into the kernel's own mapped memory and a count.
    unsafe {
        kernel.launch(one, |b| {
            b.arg(&ro_at).arg(&wo_at).arg(&out_at).arg(&iters);
        })?
    };
    kernel.wait_finished(Instant::now() + Duration::from_secs(60))?;
    let mean = |i: usize| out.at(i).load(Ordering::Acquire) as f64 / f64::from(iters.max(1));
    Ok(DeviceCosts {
        dependent_read_ns: mean(0),
        relaxed_store_ns: mean(1),
        store_fence_sys_ns: mean(2),
        release_store_sys_ns: mean(3),
        store_fence_gpu_ns: mean(4),
        globaltimer_step_ns: out.at(6).load(Ordering::Acquire),
        sm_clock_mhz: out.at(7).load(Ordering::Acquire),
    })
}
