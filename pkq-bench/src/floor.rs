//! The raw floor: a bare one-word ping-pong with a resident kernel through
//! mapped memory (mirrors `cuda/floor.cuh`). It is what any design over
//! mapped memory pays (one PCIe read that sees the host's write, one posted
//! write back), so pkq's round trip is measured against it, with as many
//! pollers as pkq's workers have. Beside it, what the device pays per
//! operation on mapped memory ([`device_costs`]) and how many accesses of
//! it the GPU answers per second ([`host_access_rate`]); and the module of
//! pkq-bench's kernels ([`load`], [`image`]), which the bench programs
//! launch from too.
//!
//! # Load first: the order a program keeps
//!
//! The CUDA driver waits for every running kernel of a context before it
//! loads a module there (or runs a kernel whose code it loads lazily), and
//! a pkq runtime's resident kernel never ends. So a program calls
//! [`load`] for each device it measures on *before any pkq runtime starts
//! there*: it loads pkq-bench's module into the device's primary context
//! (the one pkq's runtimes serve in) and every kernel's code, once for the
//! process; every later floor, measurement and launch of these kernels
//! then reuses them and may run beside a runtime. A first [`load`] while
//! a pkq kernel runs on the device ([`pkq::running_kernels`]) is refused
//! with [`Error::InvalidArgument`](crate::Error::InvalidArgument), as pkq
//! refuses its own loads then: it would wait for that kernel forever.
//!
//! The other way round: pkq refuses to load its own module while one of
//! its kernels runs, but it does not know pkq-bench's, so the first pkq
//! runtime on a device (the first with each module) built while a
//! pkq-bench kernel runs there has its module load wait for that kernel.
//! The measurements of [`device_costs`], [`host_access_rate`] and
//! `bulk::bulk_copy` end on their own, so that load only waits; a
//! [`Floor`] ends only when stopped, so stop it before such a build (the
//! latency bench stops each floor before it builds the round's runtimes).
//!
//! Pinned memory is never freed either (the driver may wait the same way
//! to free it): a measurement's memory goes back to a pool for the next one
//! once its kernel has exited.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pkq::cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};

use crate::device::{self, Device, Launched, Mapped, State};
use crate::layout::{ACCESS_ROUNDS, FLOOR_ROUND_BITS, FLOOR_STOP};
use crate::{Error, Result, error_name};

include!(concat!(env!("OUT_DIR"), "/built_gen.rs"));

#[repr(C, align(16))]
struct Aligned<T: ?Sized>(T);

/// `cuda/bench.cu` compiled by build.rs (16-byte aligned; empty without
/// nvcc).
static IMAGE: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/bench.fatbin")));

/// The fatbin of pkq-bench's kernels (`cuda/bench.cu`: the floor, the
/// device's costs, the access rate, the bulk copies, and the bench
/// programs' baselines, such as `pkq_empty_kernel`, `pkq_gemv_kernel`,
/// `pkq_copy_io_kernel`), for a program that loads it into a context of its
/// own; [`Error::NotBuilt`] when pkq-bench was built without nvcc.
pub fn image() -> Result<&'static [u8]> {
    match NOT_BUILT {
        Some(why) => Err(Error::NotBuilt(why)),
        None => Ok(&IMAGE.0),
    }
}

/// Loads pkq-bench's module and every kernel's code into device `device`'s
/// primary context, unless loaded already (once per process), and returns
/// it, for launching its kernels on streams of one's own (through any
/// handle on the primary context, such as `pkq::context`). Call it first,
/// before any pkq runtime starts on the device: see the module docs.
pub fn load(device: usize) -> Result<Arc<CudaModule>> {
    Ok(open(device)?.module.clone())
}

/// Kernel `name` of pkq-bench's module on device `device` (loaded by
/// [`load`] first if it was not).
pub fn function(device: usize, name: &str) -> Result<CudaFunction> {
    open(device)?.function(name)
}

/// Device `device` with pkq-bench's module loaded ([`load`]).
pub(crate) fn open(device: usize) -> Result<Arc<Device>> {
    device::device(device, image()?)
}

/// Whether device `index` polls by bulk copies ([`Shape::bulk`]: sm_90 on).
pub fn bulk_polls_on(index: usize) -> Result<bool> {
    bulk_polls(&*open(index)?)
}

fn bulk_polls(dev: &Device) -> Result<bool> {
    Ok(dev.ctx.compute_capability()?.0 >= 9)
}

/// What a [`Floor`] kernel polls, and with how many warps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Poller warps (1, 2, 4 or 8), started a fraction of a read round trip
    /// apart as pkq's pollers are; each echoes into its own pong word.
    pub pollers: u32,
    /// 8-byte words per ping (1, 4 or 8: 8 to 64 bytes, one coalesced load
    /// by that many lanes; pkq's slot is 8), all written by the host and
    /// all required to match.
    pub words: u32,
    /// 64-byte ping lines (and pong lines) that the rounds go through in
    /// turn (1 to 1024; 1: always the same line; pkq's slots move on).
    pub lines: u32,
    /// Whether each poller reads its own copy of the ping lines (128-byte
    /// lines, the host storing every round into every copy) rather than
    /// all reading the same ones.
    pub copies: bool,
    /// Loads each poller keeps in flight (1, 2 or 4; with `bulk`, 1, 2, 4
    /// or 8), issued a fraction of a read round trip apart.
    pub depth: u32,
    /// Whether each poll is a bulk copy of the line into shared memory
    /// (sm_90 on), issued by the poller's lane 0 and waited for on an
    /// mbarrier, rather than a load of the poller's lanes.
    pub bulk: bool,
}

impl Shape {
    /// `pollers` warps polling one word of one line.
    pub fn pollers(pollers: u32) -> Self {
        Self {
            pollers,
            words: 1,
            lines: 1,
            copies: false,
            depth: 1,
            bulk: false,
        }
    }

    /// Words between one poller's copy of the ping lines and the next's (0:
    /// one copy for all).
    fn copy_stride(&self) -> usize {
        if self.copies {
            16 * self.lines as usize
        } else {
            0
        }
    }

    fn copies(&self) -> usize {
        if self.copies {
            self.pollers as usize
        } else {
            1
        }
    }

    fn check(&self) -> Result<()> {
        let ok = matches!(self.pollers, 1 | 2 | 4 | 8)
            && self.pollers <= crate::layout::FLOOR_MAX_POLLERS
            && matches!(self.words, 1 | 4 | 8)
            && (1..=1024).contains(&self.lines)
            && (matches!(self.depth, 1 | 2 | 4) || (self.bulk && self.depth == 8));
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "floor {self:?}: pollers must be 1, 2, 4 or 8, words 1, 4 or 8, lines 1 to 1024, depth 1, 2 or 4 (or 8 with bulk)"
            )))
        }
    }
}

/// A resident ping-pong kernel. See the module docs.
pub struct Floor {
    shape: Shape,
    /// Rounds sent so far.
    rounds: u64,
    /// The device clock (ns) of the latest echo, unwrapped from its 48 bits.
    echo_device_ns: u64,
    stopped: bool,
    /// The kernel, with its memory: [`PING`], host-written and
    /// device-polled lines (their own allocation), and [`PONG`],
    /// device-written and host-polled lines, a word per poller in each
    /// (another allocation).
    kernel: Launched,
}

/// The floor's memory: its ping lines, then its pong lines.
const PING: usize = 0;
const PONG: usize = 1;

impl Floor {
    /// Launches the ping-pong kernel on device `index` in the given shape
    /// (loading pkq-bench's module first if [`load`] has not) and waits for
    /// its first echo.
    pub fn start(index: usize, shape: Shape) -> Result<Self> {
        shape.check()?;
        let dev = open(index)?;
        if shape.bulk && !bulk_polls(&dev)? {
            return Err(Error::InvalidArgument(format!(
                "floor {shape:?}: bulk copies need sm_90 or later"
            )));
        }
        let words = 8 * shape.lines as usize;
        let ping_len = words.max(shape.copy_stride() * shape.copies());
        let ping = Mapped::new(&dev, ping_len)?;
        let pong = Mapped::new(&dev, words)?;
        let (ping_at, pong_at) = (ping.device_addr(0), pong.device_addr(0));
        let copy_stride = shape.copy_stride() as u32;
        let bulk = u32::from(shape.bulk);
        let kernel = Launched::new(&dev, "pkq_floor_kernel", vec![ping, pong])?;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32 * shape.pollers, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: pkq_floor_kernel(const uint64_t*, uint64_t*, uint32_t x 6)
        // gets two device addresses into the floor's mapped memory (`lines`
        // ping lines in each of `copies` copies `copy_stride` words apart,
        // `lines` pong lines), which is never freed, and the shape, which
        // fits them.
        unsafe {
            kernel.launch(cfg, |b| {
                b.arg(&ping_at)
                    .arg(&pong_at)
                    .arg(&shape.pollers)
                    .arg(&shape.words)
                    .arg(&shape.lines)
                    .arg(&copy_stride)
                    .arg(&shape.depth)
                    .arg(&bulk);
            })?
        };
        let mut floor = Self {
            shape,
            rounds: 0,
            echo_device_ns: 0,
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
        self.send();
        self.await_echo_within(limit)
    }

    /// The first half of [`Floor::round_trip`]: writes the next value into
    /// every ping word (relaxed stores, nothing else), to time them alone.
    #[inline]
    pub fn send(&mut self) {
        self.rounds += 1;
        self.write_round(self.rounds, self.rounds);
    }

    /// Writes `value` into every word of round `r`'s line, in every copy.
    fn write_round(&self, r: u64, value: u64) {
        let base = self.line(r);
        for c in 0..self.shape.copies() {
            let at = base + c * self.shape.copy_stride();
            for k in 0..self.shape.words as usize {
                self.kernel
                    .mem(PING)
                    .at(at + k)
                    .store(value, Ordering::Relaxed);
            }
        }
    }

    /// The first word of round `r`'s line.
    fn line(&self, r: u64) -> usize {
        8 * ((r - 1) % u64::from(self.shape.lines)) as usize
    }

    /// The second half of [`Floor::round_trip`]: spins until a poller echoes
    /// the value [`Floor::send`] wrote.
    #[inline]
    pub fn await_echo(&mut self) -> Result<()> {
        self.await_echo_within(Duration::from_secs(1))
    }

    fn await_echo_within(&mut self, limit: Duration) -> Result<()> {
        let round_mask = (1u64 << FLOOR_ROUND_BITS) - 1;
        let v = self.rounds & round_mask;
        let base = self.line(self.rounds);
        let mut polls = 0u32;
        let mut since: Option<Instant> = None;
        loop {
            // An echo word: the round in its low bits, the device clock
            // above (cuda/floor.cuh). Of several pollers' echoes of the
            // round seen in one sweep, the earliest clock is the poll that
            // saw the round first.
            let first_seen = (0..self.shape.pollers as usize)
                .map(|j| self.kernel.mem(PONG).at(base + j).load(Ordering::Relaxed))
                .filter(|w| w & round_mask == v)
                .map(|w| unwrap_clock(self.echo_device_ns, w >> FLOOR_ROUND_BITS))
                .min();
            if let Some(t) = first_seen {
                self.echo_device_ns = t;
                return Ok(());
            }
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(4096) {
                let t0 = *since.get_or_insert_with(Instant::now);
                if t0.elapsed() > limit {
                    return Err(match self.kernel.state() {
                        State::Running => Error::Timeout("echo"),
                        State::Exited => Error::Exited("the floor kernel exited".into()),
                        State::Faulted(e) => Error::Fault(error_name(e)),
                    });
                }
            }
        }
    }

    /// The device's `%globaltimer` (ns) when a poller saw the latest round
    /// that [`Floor::await_echo`] or [`Floor::round_trip`] returned for,
    /// for one-way splits (`pkq::timing`). The echo carries its low 48
    /// bits; this counts on from the first echo's, so it is the device
    /// clock up to a multiple of 2^48 ns (78 hours) that stays fixed while
    /// echoes come less than 39 hours apart.
    pub fn echo_device_ns(&self) -> u64 {
        self.echo_device_ns
    }

    /// Tells the kernel to exit and waits for it.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.stopped, true) {
            return Ok(());
        }
        self.write_round(self.rounds + 1, FLOOR_STOP);
        self.kernel.wait_exit(Duration::from_secs(10))
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// `low`, a clock's low 48 bits, as the full reading nearest to `last` (the
/// previous full reading; readings less than 2^47 ns apart).
fn unwrap_clock(last: u64, low: u64) -> u64 {
    const SPAN: u64 = 1 << 48;
    let full = (last & !(SPAN - 1)) | (low & (SPAN - 1));
    if full + SPAN / 2 < last {
        full + SPAN
    } else if full > last + SPAN / 2 && full >= SPAN {
        full - SPAN
    } else {
        full
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
    /// Dependent reads of 32, 64 and 128 bytes (4, 8 and 16 lanes of one
    /// warp, one coalesced load each): what a wider poll costs over
    /// [`DeviceCosts::dependent_read_ns`].
    pub dependent_wide_read_ns: [f64; 3],
}

/// Measures [`DeviceCosts`] on device `index` with one thread of a fresh
/// kernel, `iters` repetitions of each operation.
pub fn device_costs(index: usize, iters: u32) -> Result<DeviceCosts> {
    let dev = open(index)?;
    let ro = Mapped::new(&dev, 16)?;
    let d2h = Mapped::new(&dev, 24)?;
    let (ro_at, wo_at, out_at) = (ro.device_addr(0), d2h.device_addr(0), d2h.device_addr(8));
    let kernel = Launched::new(&dev, "pkq_costs_kernel", vec![ro, d2h])?;
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: pkq_costs_kernel(const uint64_t*, uint64_t*, uint64_t*, uint32_t)
    // gets addresses into the kernel's own mapped memory (16 words it
    // reads, a word it writes, then 16 result words) and a count.
    unsafe {
        kernel.launch(one, |b| {
            b.arg(&ro_at).arg(&wo_at).arg(&out_at).arg(&iters);
        })?
    };
    kernel.wait_exit(Duration::from_secs(60))?;
    // The results: the words after the one the kernel stores to.
    let out = |i: usize| kernel.mem(1).at(8 + i).load(Ordering::Acquire);
    let mean = |i: usize| out(i) as f64 / f64::from(iters.max(1));
    Ok(DeviceCosts {
        dependent_read_ns: mean(0),
        relaxed_store_ns: mean(1),
        store_fence_sys_ns: mean(2),
        release_store_sys_ns: mean(3),
        store_fence_gpu_ns: mean(4),
        globaltimer_step_ns: out(6),
        sm_clock_mhz: out(7),
        dependent_wide_read_ns: [mean(8), mean(9), mean(10)],
    })
}

/// A pattern of GPU accesses to mapped host memory, measured by
/// [`host_access_rate`]: `warps` warps, each `iters` times writing
/// `write_bytes` (one coalesced posted write) and then reading `read_bytes`
/// (one coalesced read whose address depends on the last read), so one
/// access of each kind in flight per warp, as pkq's workers have. As pkq's
/// workers take turns through the ring's slots, the warps take turns
/// through a ring of 64 rounds of one entry each: reads `read_bytes` apart,
/// writes `write_stride` apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Warps (a power of two, at most 1024).
    pub warps: u32,
    /// Bytes each read takes (0, or a multiple of 8 up to 256).
    pub read_bytes: u32,
    /// Bytes each write stores (0, or a multiple of 8 up to 256).
    pub write_bytes: u32,
    /// How far apart consecutive entries are written (at least
    /// `write_bytes`, a multiple of 8 up to 256): under 64, two or more
    /// warps' writes share one 64-byte line, as pkq's 32-byte completions
    /// do.
    pub write_stride: u32,
    /// Accesses per warp.
    pub iters: u32,
    /// Whether every warp reads the same bytes (one line, as pkq's workers
    /// once all read one stop word), rather than each its own.
    pub same_line: bool,
    /// Whether a host thread keeps storing to every line the warps read
    /// while they run, as pkq's producers store to its slots (the values
    /// stay the same).
    pub host_writing: bool,
}

impl Access {
    /// `warps` warps reading `bytes` each, writing nothing.
    pub fn reads(warps: u32, bytes: u32, iters: u32) -> Self {
        Self {
            warps,
            read_bytes: bytes,
            write_bytes: 0,
            write_stride: 0,
            iters,
            same_line: false,
            host_writing: false,
        }
    }

    fn check(&self) -> Result<()> {
        let bytes_ok = |b: u32| b.is_multiple_of(8) && b <= 256;
        let ok = self.warps.is_power_of_two()
            && self.warps <= 1024
            && bytes_ok(self.read_bytes)
            && bytes_ok(self.write_bytes)
            && bytes_ok(self.write_stride)
            && self.write_stride >= self.write_bytes
            && self.read_bytes + self.write_bytes > 0;
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "host_access_rate {self:?}: warps must be a power of two up to 1024, byte \
                 counts multiples of 8 up to 256 (not both 0), the stride at least the write"
            )))
        }
    }
}

/// How many accesses of the pattern `access` device `index` answers per
/// second, by the GPU's clock (the writes counted as landed once a system
/// fence after the last one returns): the ceilings of pkq's tasks per
/// second, which cost one 64-byte read and one 32-byte write each.
pub fn host_access_rate(index: usize, access: &Access) -> Result<f64> {
    access.check()?;
    let dev = open(index)?;
    let warps = access.warps as usize;
    let entries = ACCESS_ROUNDS as usize * warps;
    let (read_words, write_words) = (access.read_bytes / 8, access.write_bytes / 8);
    let stride_words = access.write_stride / 8;
    let read_stride_words = if access.same_line { 0 } else { read_words };
    let read_len = entries * read_words as usize;
    let ro = Mapped::new(&dev, read_len)?;
    let d2h = Mapped::new(&dev, warps + (entries * stride_words as usize).max(1))?;
    let (ro_at, out_at, wo_at) = (
        ro.device_addr(0),
        d2h.device_addr(0),
        d2h.device_addr(warps),
    );
    let kernel = Launched::new(&dev, "pkq_access_rate_kernel", vec![ro, d2h])?;
    // The lines the warps read, and a result word per warp.
    let (read_lines, out) = (kernel.mem(0), kernel.mem(1));
    let per_block = access.warps.min(8);
    let cfg = LaunchConfig {
        grid_dim: (access.warps / per_block, 1, 1),
        block_dim: (32 * per_block, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: pkq_access_rate_kernel(const uint64_t*, uint64_t*, uint64_t*,
    // uint32_t x 5) gets addresses into the kernel's own mapped memory:
    // `entries` reads of `read_words` words each `read_words` apart (or 0),
    // `entries` writes `stride_words` apart (the last one ends in the
    // buffer, as the stride is at least the write), and `warps` result
    // words; the word counts are at most 32.
    unsafe {
        kernel.launch(cfg, |b| {
            b.arg(&ro_at)
                .arg(&wo_at)
                .arg(&out_at)
                .arg(&read_words)
                .arg(&read_stride_words)
                .arg(&write_words)
                .arg(&stride_words)
                .arg(&access.iters);
        })?
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        if access.host_writing {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    for i in (0..read_len).step_by(8) {
                        read_lines.at(i).store(0, Ordering::Relaxed);
                    }
                }
            });
        }
        let finished = kernel.wait_exit(Duration::from_secs(60));
        done.store(true, Ordering::Relaxed);
        finished
    })?;
    let slowest = (0..warps)
        .map(|w| out.at(w).load(Ordering::Acquire))
        .max()
        .unwrap_or(1)
        .max(1);
    Ok(f64::from(access.warps) * f64::from(access.iters) / (slowest as f64 * 1e-9))
}

#[cfg(test)]
mod tests {
    use super::unwrap_clock;

    #[test]
    fn echo_clocks_count_on_across_the_wrap_of_their_48_bits() {
        const SPAN: u64 = 1 << 48;
        assert_eq!(unwrap_clock(0, 123), 123);
        assert_eq!(unwrap_clock(SPAN - 10, 5), SPAN + 5);
        assert_eq!(unwrap_clock(3 * SPAN + 100, 90), 3 * SPAN + 90);
        assert_eq!(unwrap_clock(3 * SPAN + 100, 1_000), 3 * SPAN + 1_000);
        // A reading from a poller a little behind the last, across the wrap.
        assert_eq!(unwrap_clock(SPAN + 5, SPAN - 10), SPAN - 10);
        // The first reading stays as it is, whatever its bits.
        assert_eq!(unwrap_clock(0, SPAN / 2 + 1), SPAN / 2 + 1);
        assert_eq!(unwrap_clock(0, SPAN - 1), SPAN - 1);
    }
}
