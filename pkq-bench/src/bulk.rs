//! How long one block of warps takes to move a run of bytes between mapped
//! host memory and the SM (mirrors `cuda/bulk.cuh`): the costs under an
//! IO task's input and output, by load and store kind, warps, and loads in
//! flight per lane.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pkq::cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::device::{Launched, Mapped};
use crate::layout;
use crate::{Error, Result};

/// The load or store instruction a [`Bulk`] pass uses (`BulkKind` in
/// `cuda/bulk.cuh`; the codes are `BENCH_BULK_*` in `cuda/bench_layout.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkKind {
    /// `ld/st.relaxed.sys.global.u64`.
    RelaxedSys,
    /// `ld/st.volatile.global.u64`.
    Volatile,
    /// `ld.global.cv.u64` / `st.global.wt.u64` (weak, not kept in caches).
    WeakUncached,
    /// `ld/st.relaxed.sys.global.v2.u64` (16 bytes a lane).
    RelaxedSysV2,
    /// `ld/st.volatile.global.v2.u64`.
    VolatileV2,
    /// `ld.global.cv.v2.u64` / `st.global.wt.v2.u64`.
    WeakUncachedV2,
    /// `ld.relaxed.sys.global.u64` by half the warp a load: one 128-byte
    /// line an instruction (loads only: a pass that should store loads).
    RelaxedSysHalf,
}

// One kind for each of the kernel's.
const _: () = assert!(BulkKind::ALL.len() == layout::BULK_KINDS as usize);

impl BulkKind {
    /// Every kind, in the kernel's order.
    pub const ALL: [BulkKind; 7] = [
        BulkKind::RelaxedSys,
        BulkKind::Volatile,
        BulkKind::WeakUncached,
        BulkKind::RelaxedSysV2,
        BulkKind::VolatileV2,
        BulkKind::WeakUncachedV2,
        BulkKind::RelaxedSysHalf,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            BulkKind::RelaxedSys => "relaxed.sys",
            BulkKind::Volatile => "volatile",
            BulkKind::WeakUncached => "weak uncached",
            BulkKind::RelaxedSysV2 => "relaxed.sys v2",
            BulkKind::VolatileV2 => "volatile v2",
            BulkKind::WeakUncachedV2 => "weak uncached v2",
            BulkKind::RelaxedSysHalf => "relaxed.sys half-warp",
        }
    }

    /// The kernel's code of the kind.
    fn code(self) -> u32 {
        match self {
            BulkKind::RelaxedSys => layout::BULK_RELAXED_SYS,
            BulkKind::Volatile => layout::BULK_VOLATILE,
            BulkKind::WeakUncached => layout::BULK_WEAK_UNCACHED,
            BulkKind::RelaxedSysV2 => layout::BULK_RELAXED_SYS_V2,
            BulkKind::VolatileV2 => layout::BULK_VOLATILE_V2,
            BulkKind::WeakUncachedV2 => layout::BULK_WEAK_UNCACHED_V2,
            BulkKind::RelaxedSysHalf => layout::BULK_RELAXED_SYS_HALF,
        }
    }
}

/// One block of `warps` warps moving `bytes` of mapped host memory to the
/// SM (loads) or from it (posted stores, then a system fence each), with
/// `inflight` loads or stores of `kind` issued a lane before any value is
/// used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bulk {
    /// Warps of the block (1 to 32).
    pub warps: u32,
    /// Bytes a pass moves (a multiple of 16, at most 1 MiB).
    pub bytes: u32,
    /// Stores (from the SM to host memory) rather than loads.
    pub write: bool,
    /// The instruction.
    pub kind: BulkKind,
    /// Loads or stores a lane issues before it waits (1, 2, 4, 8 or 16).
    pub inflight: u32,
    /// Passes timed.
    pub iters: u32,
}

/// What [`bulk_copy`] measured: the mean and least ns of a pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BulkTime {
    /// Mean ns of a pass.
    pub mean_ns: f64,
    /// The fastest pass, ns.
    pub least_ns: f64,
}

/// Places a run of passes goes through in turn.
const RUNS: usize = layout::BULK_RUNS as usize;

/// Times `bulk` on device `index` (the GPU's clock, one fresh kernel).
pub fn bulk_copy(index: usize, bulk: &Bulk) -> Result<BulkTime> {
    let ok = (1..=32).contains(&bulk.warps)
        && bulk.bytes.is_multiple_of(16)
        && bulk.bytes > 0
        && bulk.bytes <= 1 << 20
        && [1, 2, 4, 8, 16].contains(&bulk.inflight)
        && bulk.iters > 0;
    if !ok {
        return Err(Error::InvalidArgument(format!(
            "bulk_copy {bulk:?}: 1 to 32 warps, a multiple of 16 bytes up to 1 MiB, 1, 2, 4, 8 \
             or 16 in flight, at least one pass"
        )));
    }
    let dev = crate::floor::open(index)?;
    let words = bulk.bytes / 8;
    let area = Mapped::new(&dev, RUNS * words as usize)?;
    let out_buf = Mapped::new(&dev, 4)?;
    let (area_at, out_at) = (area.device_addr(0), out_buf.device_addr(0));
    let kernel = Launched::new(&dev, "pkq_bulk_kernel", vec![area, out_buf])?;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32 * bulk.warps, 1, 1),
        shared_mem_bytes: 0,
    };
    let (runs, kind, write) = (RUNS as u32, bulk.kind.code(), u32::from(bulk.write));
    // SAFETY: pkq_bulk_kernel(uint64_t*, uint64_t*, uint32_t x 6) gets
    // addresses into the kernel's own mapped memory: `runs` runs of `words`
    // words, and 3 result words; the kind and the count in flight are ones
    // it knows.
    unsafe {
        kernel.launch(cfg, |b| {
            b.arg(&area_at)
                .arg(&out_at)
                .arg(&words)
                .arg(&runs)
                .arg(&kind)
                .arg(&bulk.inflight)
                .arg(&write)
                .arg(&bulk.iters);
        })?
    };
    kernel.wait_exit(Duration::from_secs(60))?;
    let out = |i: usize| kernel.mem(1).at(i).load(Ordering::Acquire);
    Ok(BulkTime {
        mean_ns: out(0) as f64 / f64::from(bulk.iters),
        least_ns: out(1) as f64,
    })
}
