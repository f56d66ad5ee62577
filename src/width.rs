//! How wide a lane's tasks run ([`Width`]): on one warp, on a block, or on
//! a group of blocks across SMs, and which ops a lane of each width serves
//! (the device's side: `cuda/pkq_group.cuh`; the protocol: WIDTH in
//! `cuda/pkq_layout.h`; `docs/design/wide-tasks.md`).

use crate::error::{Error, Result};
use crate::layout::{MAX_GROUP_BLOCKS, MAX_WARPS_PER_BLOCK, OP_BLOCK, OP_GROUP};

/// How wide each task of a lane runs ([`Builder::width`](crate::Builder::width)).
///
/// A lane of [`Width::Warp`] (the default) runs each task on one warp of
/// 32 threads: the floor of latency for small tasks. A wider lane gives
/// each of its workers a block, or a group of blocks on as many SMs, of
/// which one warp polls the ring; each task it takes is handed to the rest
/// of its group through device memory (no launch, no host write per
/// participant), every thread of the group runs the handler, and the task
/// completes once all of them finished. Such a lane serves only ops its
/// kernel's op table declares for its width (`PKQ_OP_INFO_BLOCK`,
/// `PKQ_OP_INFO_GROUP` in `pkq_handler.cuh`; a group op also serves on a
/// lane of blocks, a group of one), and NOP; it has no IO areas and takes
/// no packs. A stop (a cancel, a fault, a stall) while a wide task runs
/// may leave its group's blocks unfinished: the task then fails with
/// [`TaskStatus::Stopped`](crate::TaskStatus::Stopped) (never a result
/// computed by part of the group), as does every task its worker takes
/// after it.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// use pkq::builtin::{DotArgs, GROUP_DOT};
/// use pkq::{Runtime, Submit, Width};
/// // A latency lane of warps, and a lane of one worker whose tasks run on
/// // 8 blocks of 8 warps (2048 threads) on 8 SMs.
/// let rt = Runtime::builder()
///     .add_lane(Runtime::builder().width(Width::Group { blocks: 8, warps: 8 }))
///     .build()?;
/// # let (x, y, n) = (0u64, 0u64, 0u32);
/// let args = DotArgs { x, y, n, reserved: 0 };
/// // SAFETY: x and y are device addresses of n floats each, alive until the
/// // task completes.
/// let t = rt.lane(1).expect("lane 1").submit(unsafe { GROUP_DOT.args(&args).unchecked() })?;
/// let dot = f64::from_bits(t.wait()?.value);
/// # let _ = dot;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Width {
    /// One warp per task (32 threads).
    #[default]
    Warp,
    /// One block of `warps` warps (1 to 8) per task, on one SM: its
    /// threads share the block's barrier (`ctx.sync_block()`) and shared
    /// memory.
    Block {
        /// Warps of the block.
        warps: u32,
    },
    /// A group of `blocks` blocks (1 to 1024; 0: one per SM of the lane's
    /// device or partition) of `warps` warps (1 to 8) each, one block per
    /// SM where the device can, all running each task, with a barrier over
    /// the group (`ctx.sync_group()`, through device memory). Its blocks
    /// stay resident: a lane whose blocks fill every SM leaves no room for
    /// other kernels while it runs, including those the driver runs for
    /// some copies and memsets (`alloc_zeros`, `memset_zeros`), which then
    /// wait for it to stop; allocate and fill buffers before it starts,
    /// or fill them with copies or pkq's own MEMSET. A worker reports in
    /// only once every block of its group is resident: where other kernels
    /// hold the SMs its blocks need, `build` waits for them up to
    /// [`Builder::start_timeout`](crate::Builder::start_timeout), then
    /// returns [`Error::KernelTimeout`](crate::Error::KernelTimeout).
    Group {
        /// Blocks of the group (0: one per SM).
        blocks: u32,
        /// Warps of each block.
        warps: u32,
    },
}

impl Width {
    /// Warps per block (1 for a lane of warps, whose blocks are its
    /// pollers').
    pub(crate) fn warps(self) -> u32 {
        match self {
            Width::Warp => 1,
            Width::Block { warps } | Width::Group { warps, .. } => warps,
        }
    }

    /// Whether tasks run on more than a warp.
    pub(crate) fn is_wide(self) -> bool {
        self != Width::Warp
    }

    /// Refuses what no lane can be: warps out of 1 to 8, blocks over 1024.
    pub(crate) fn validate(self) -> Result<()> {
        let warps = self.warps() as usize;
        if !(1..=MAX_WARPS_PER_BLOCK).contains(&warps) {
            return Err(Error::InvalidConfig(format!(
                "a block of a wide lane has 1 to {MAX_WARPS_PER_BLOCK} warps (got {warps})"
            )));
        }
        if let Width::Group { blocks, .. } = self
            && blocks as usize > MAX_GROUP_BLOCKS
        {
            return Err(Error::InvalidConfig(format!(
                "a group has at most {MAX_GROUP_BLOCKS} blocks (got {blocks})"
            )));
        }
        Ok(())
    }

    /// Blocks per worker, `sms` standing for 0 ("one per SM"); 0 for a
    /// lane of warps.
    pub(crate) fn blocks(self, sms: usize) -> u32 {
        match self {
            Width::Warp => 0,
            Width::Block { .. } => 1,
            Width::Group { blocks: 0, .. } => sms.min(MAX_GROUP_BLOCKS) as u32,
            Width::Group { blocks, .. } => blocks,
        }
    }

    /// Why a lane of this width does not serve an op whose op table row
    /// has `flags` (`None`: it does). NOP is served at every width.
    #[inline(always)]
    pub(crate) fn refuses(self, flags: u32) -> Option<&'static str> {
        let block = flags & OP_BLOCK != 0;
        let group = flags & OP_GROUP != 0;
        match self {
            Width::Warp if block || group => {
                Some("the op table runs it on a block or group; this lane runs tasks on a warp")
            }
            Width::Warp => None,
            Width::Block { .. } if block || group => None,
            Width::Group { .. } if group => None,
            Width::Group { .. } if block => {
                Some("the op table runs it on a block; this lane runs tasks on a group of blocks")
            }
            _ => Some("the op table runs it on a warp; this lane runs tasks on a block or group"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_serve_the_ops_of_their_width() {
        let (warp, block, group) = (0, OP_BLOCK, OP_GROUP);
        let b = Width::Block { warps: 4 };
        let g = Width::Group {
            blocks: 3,
            warps: 8,
        };
        assert!(Width::Warp.refuses(warp).is_none());
        assert!(Width::Warp.refuses(block).is_some() && Width::Warp.refuses(group).is_some());
        assert!(b.refuses(block).is_none() && b.refuses(group).is_none());
        assert!(b.refuses(warp).is_some());
        assert!(g.refuses(group).is_none());
        assert!(g.refuses(block).is_some() && g.refuses(warp).is_some());
    }

    #[test]
    fn limits_and_blocks() {
        assert!(Width::Block { warps: 0 }.validate().is_err());
        assert!(Width::Block { warps: 9 }.validate().is_err());
        assert!(
            Width::Group {
                blocks: 1025,
                warps: 8
            }
            .validate()
            .is_err()
        );
        assert!(
            Width::Group {
                blocks: 0,
                warps: 8
            }
            .validate()
            .is_ok()
        );
        assert_eq!(
            Width::Group {
                blocks: 0,
                warps: 8
            }
            .blocks(132),
            132
        );
        assert_eq!(Width::Block { warps: 8 }.blocks(132), 1);
        assert_eq!(Width::Warp.blocks(132), 0);
    }
}
