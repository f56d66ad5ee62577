//! The raw floor: a bare one-word ping-pong with a resident one-thread kernel
//! through mapped memory (mirrors `cuda/pkq_floor.cuh`). It is what any
//! design over mapped memory pays (one PCIe read that sees the host's write,
//! one posted write back), so pkq's round trip is measured against it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::driver;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, KernelState};
use crate::layout::FLOOR_STOP;
use crate::mapped::{MappedBuffer, Pages, SubmissionMemory};
use crate::queue::Words;

/// How the floor kernel's pollers are arranged (see `cuda/pkq_floor.cuh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pollers {
    /// One thread with this many loads of the ping word in flight.
    InFlight(u32),
    /// This many warps of one block, one load in flight each.
    Warps(u32),
    /// This many blocks, one load in flight each.
    Blocks(u32),
    /// One thread, one load in flight on each of this many copies of ping
    /// (one per 128-byte line; the host writes them all).
    Lines(u32),
}

impl Pollers {
    fn count(self) -> u32 {
        match self {
            Pollers::InFlight(k) | Pollers::Warps(k) | Pollers::Blocks(k) | Pollers::Lines(k) => k,
        }
    }

    fn mode(self) -> u32 {
        match self {
            Pollers::InFlight(_) => 0,
            Pollers::Warps(_) => 1,
            Pollers::Blocks(_) => 2,
            Pollers::Lines(_) => 3,
        }
    }
}

/// Words between copies of ping (`Pollers::Lines`): 128 bytes.
const LINE_WORDS: usize = 16;

/// A resident ping-pong kernel. See the module docs.
pub struct Floor {
    /// Host-written, device-polled word (its own allocation).
    ping: Words,
    /// Device-written, host-polled word (another allocation).
    pong: Words,
    next: u64,
    memory: SubmissionMemory,
    pollers: Pollers,
    stopped: bool,
    kernel: Kernel,
}

impl Floor {
    /// Launches the ping-pong kernel on device `index` and waits for its
    /// first echo. `pollers` says how the device polls (counts 1, 2 or 4;
    /// pollers start a fraction of a round trip apart); ping lives in
    /// `memory`.
    pub fn start(index: usize, pollers: Pollers, memory: SubmissionMemory) -> Result<Self> {
        Self::start_on(index, pollers, memory, Pages::Driver)
    }

    /// [`Floor::start`] with the pages of ping and pong chosen (for measurements).
    #[doc(hidden)]
    pub fn start_on(
        index: usize,
        pollers: Pollers,
        memory: SubmissionMemory,
        pages: Pages,
    ) -> Result<Self> {
        let k = pollers.count();
        if !matches!(k, 1 | 2 | 4) {
            return Err(Error::InvalidConfig(format!(
                "pollers {pollers:?}: the count must be 1, 2 or 4"
            )));
        }
        crate::kernel::image()?;
        let ctx = driver::open(index)?;
        // SAFETY: pkq's own Arc, backing no CudaSlice (see Builder::build).
        unsafe { ctx.disable_event_tracking() };
        let ping_pages = match memory {
            SubmissionMemory::WriteCombined => Pages::DriverWriteCombined,
            _ => pages,
        };
        let ping = MappedBuffer::new(&ctx, 4 * LINE_WORDS, ping_pages)?;
        let pong = MappedBuffer::new(&ctx, 4, pages)?;
        let (ping_at, pong_at) = (ping.device_addr(0), pong.device_addr(0));
        let (ping_words, pong_words) = (ping.words(0, 4 * LINE_WORDS), pong.words(0, 4));
        let kernel = Kernel::new(&ctx, "pkq_floor_kernel", vec![ping, pong])?;
        let (grid, block) = match pollers {
            Pollers::Warps(k) => (1, 32 * k),
            Pollers::Blocks(k) => (k, 32),
            Pollers::InFlight(_) | Pollers::Lines(_) => (1, 32),
        };
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        let mode = pollers.mode();
        // SAFETY: pkq_floor_kernel(const uint64_t*, uint64_t*, uint32_t,
        // uint32_t) gets two device addresses into the kernel's own mapped
        // memory (4 lines of ping, 4 pong words), which outlives it, the
        // poller count and the mode.
        unsafe {
            kernel.launch(cfg, |b| {
                b.arg(&ping_at).arg(&pong_at).arg(&k).arg(&mode);
            })?
        };
        let mut floor = Self {
            ping: ping_words,
            pong: pong_words,
            next: 1,
            memory,
            pollers,
            stopped: false,
            kernel,
        };
        floor.round_trip_within(Duration::from_secs(10))?;
        Ok(floor)
    }

    /// One round trip: writes a new value and spins until the device echoes
    /// it. Gives up after a second with the kernel's state as the error.
    #[inline]
    pub fn round_trip(&mut self) -> Result<()> {
        self.round_trip_within(Duration::from_secs(1))
    }

    fn round_trip_within(&mut self, limit: Duration) -> Result<()> {
        let v = self.next;
        self.next += 1;
        self.write_ping(v);
        let echoes = match self.pollers {
            Pollers::Warps(k) | Pollers::Blocks(k) => k as usize,
            Pollers::InFlight(_) | Pollers::Lines(_) => 1,
        };
        let mut polls = 0u32;
        let mut since: Option<Instant> = None;
        while (0..echoes).all(|j| self.pong.at(j).load(Ordering::Relaxed) != v) {
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
        self.write_ping(FLOOR_STOP);
        self.kernel
            .wait_finished(Instant::now() + Duration::from_secs(10))
    }

    fn write_ping(&self, v: u64) {
        let copies = match self.pollers {
            Pollers::Lines(k) => k as usize,
            _ => 1,
        };
        for c in 0..copies {
            self.ping.store_all(c * LINE_WORDS, [v], self.memory);
        }
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
}

/// Measures [`DeviceCosts`] on device `index` with one thread of a fresh
/// kernel, `iters` repetitions of each operation.
pub fn device_costs(index: usize, iters: u32) -> Result<DeviceCosts> {
    crate::kernel::image()?;
    let ctx = driver::open(index)?;
    // SAFETY: pkq's own Arc, backing no CudaSlice (see Builder::build).
    unsafe { ctx.disable_event_tracking() };
    let ro = MappedBuffer::new(&ctx, 1, Pages::Driver)?;
    let d2h = MappedBuffer::new(&ctx, 16, Pages::Driver)?;
    let (ro_at, wo_at, out_at) = (ro.device_addr(0), d2h.device_addr(0), d2h.device_addr(8));
    let out = d2h.words(8, 7);
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
    })
}

/// What the host pays to touch a kind of pinned page (ns, by `Instant` over
/// batches): the question is whether the host caches them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostCosts {
    /// A load whose address depends on the previous load, over 256 lines
    /// visited in a random order, after one warm-up pass: a cache hit if the
    /// pages are cached, a memory access if not.
    pub dependent_load_ns: f64,
    /// Storing one whole 64-byte line (eight 8-byte stores), per line.
    pub line_store_ns: f64,
    /// The same followed by an `sfence`, per line.
    pub line_store_sfence_ns: f64,
}

/// [`HostCosts`] of each kind of page (heap memory for comparison), on
/// device `index`'s context.
#[doc(hidden)]
pub fn host_costs(index: usize) -> Result<Vec<(&'static str, HostCosts)>> {
    const LINES: usize = 256;
    const WORDS: usize = LINES * 16; // one word chased per 128-byte stride
    let ctx = driver::open(index)?;
    let mut out = Vec::new();
    for (name, pages) in [
        ("heap (Rust allocator, not mapped)", None),
        ("cuMemHostAlloc", Some(Pages::Driver)),
        (
            "cuMemHostAlloc WRITECOMBINED",
            Some(Pages::DriverWriteCombined),
        ),
        (
            "Rust allocator + cuMemHostRegister",
            Some(Pages::Registered),
        ),
    ] {
        let heap: Vec<crate::sync::AtomicU64> =
            (0..WORDS).map(|_| crate::sync::AtomicU64::new(0)).collect();
        let buffer = pages
            .map(|p| MappedBuffer::new(&ctx, WORDS, p))
            .transpose()?;
        // SAFETY: `heap` outlives `words`, only accessed through it (atomics).
        let words = buffer.as_ref().map_or_else(
            || unsafe {
                Words::new(
                    std::ptr::NonNull::new(heap.as_ptr() as *mut u64).unwrap(),
                    WORDS,
                )
            },
            |b| b.words(0, WORDS),
        );
        // A random cycle over the lines, each word holding the next index.
        let mut order: Vec<usize> = (0..LINES).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in (1..LINES).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for i in 0..LINES {
            words
                .at(order[i] * 16)
                .store(order[(i + 1) % LINES] as u64, Ordering::Relaxed);
        }
        let chase = || {
            let mut at = order[0];
            for _ in 0..LINES {
                at = words.at(at * 16).load(Ordering::Relaxed) as usize;
            }
            std::hint::black_box(at);
        };
        chase();
        let t0 = Instant::now();
        chase();
        let dependent_load_ns = t0.elapsed().as_nanos() as f64 / LINES as f64;
        let stores = |fence: bool| {
            let t0 = Instant::now();
            for line in 0..LINES {
                words.store_all(
                    line * 16,
                    [line as u64; 8],
                    if fence {
                        SubmissionMemory::WriteCombined
                    } else {
                        SubmissionMemory::Cached
                    },
                );
            }
            t0.elapsed().as_nanos() as f64 / LINES as f64
        };
        let line_store_ns = stores(false);
        let line_store_sfence_ns = stores(true);
        // The chase wrote the lines' first words: rewrite before the next pass.
        drop(buffer);
        out.push((
            name,
            HostCosts {
                dependent_load_ns,
                line_store_ns,
                line_store_sfence_ns,
            },
        ));
    }
    Ok(out)
}
