//! Starting a runtime ([`Builder::build`]): its partition, every lane's
//! module, then each lane: its memory laid out and allocated, its kernel
//! launched where every block stays resident beside the lanes before it,
//! and its workers awaited. (In the CPU tests, the same over the software
//! device: `Builder::build_soft`.)

use std::sync::Arc;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};

use crate::cuda::driver;
use crate::cuda::image::Image;
use crate::cuda::kernel::Kernel;
use crate::cuda::mapped::MappedBuffer;
use crate::cuda::partition::{self, SmPartition};
use crate::error::{Error, Result};
use crate::layout::{GROUP_BYTES, MAX_WARPS_PER_BLOCK};
use crate::runtime::arena::StateArena;
use crate::runtime::builder::Builder;
use crate::runtime::engine::Engine;
use crate::runtime::idle::IdlePolicy;
use crate::runtime::lane::{Lane, Runtime};
use crate::runtime::shared::Shared;
use crate::sync::now;
use crate::trace::blocks::BlockLog;
use crate::trace::recorder::Recorder;
use std::time::Duration;

/// Lane `i`'s index in its runtime's trace records (a byte: `validate`
/// holds a runtime to [`MAX_LANES`](crate::MAX_LANES) lanes).
fn lane_index(i: usize) -> Result<u8> {
    u8::try_from(i).map_err(|_| Error::InvalidConfig(format!("lane {i}: too many lanes")))
}

impl Builder {
    /// Starts the resident kernel and returns the runtime once every worker
    /// is serving.
    ///
    /// Errors: [`Error::InvalidConfig`] (a setting out of range, more
    /// workers and pollers than the device can keep resident at once, or
    /// state memory on a device without stream-ordered allocation: then
    /// [`Builder::state_memory`]`(0)`),
    /// [`Error::KernelNotBuilt`], [`Error::NoDriver`], [`Error::NoDevice`],
    /// [`Error::DeviceOutOfRange`], [`Error::UnsupportedDevice`],
    /// [`Error::PartitionUnsupported`], [`Error::KernelTimeout`],
    /// [`Error::InvalidModule`] and [`Error::KernelMissing`] (a module of
    /// your own: [`Builder::module`]), [`Error::OpMismatch`] (an op declared
    /// with [`Builder::op`]), [`Error::KernelStopped`] (a kernel that exited
    /// or stopped serving before every worker reported in: a module of your
    /// own that returns, or a poller that found a word it cannot read),
    /// [`Error::DeviceFault`] (a kernel that faulted while starting), or the
    /// CUDA error of a failed driver call. A lane that fails to start fails
    /// the build; the lanes started before it are stopped.
    pub fn build(self) -> Result<Runtime> {
        let _range = crate::trace::nvtx::range(c"pkq build");
        self.check_before_driver()?;
        // Every context and stream made below is made current on this
        // thread (cudarc): the thread's own is current again on return.
        let (_keep, ctx) = driver::open(self.device)?;
        let partition = match self.sm_partition {
            Some(sms) => Some(SmPartition::new(partition::split(&ctx, self.device, sms)?)),
            None => None,
        };
        // Every lane's module before any kernel runs (the driver would wait
        // for a running one to load another).
        for lane in &self.lanes {
            crate::cuda::modules::kernel(&ctx, &lane.image, &lane.kernel, true)?;
        }
        let mut taken = 0.0;
        let alone = self.lanes.is_empty();
        let recorder = self.recorder()?;
        let mut lanes = Vec::with_capacity(1 + self.lanes.len());
        lanes.push(self.start(&ctx, partition.as_ref(), &mut taken, alone, (&recorder, 0))?);
        for (i, lane) in self.lanes.iter().enumerate() {
            let mut lane = lane.clone().device(self.device);
            if lane.completion_cpu.is_none() {
                lane.completion_cpu = self.completion_cpu;
            }
            let trace = (&recorder, lane_index(i + 1)?);
            match lane.start(&ctx, partition.as_ref(), &mut taken, alone, trace) {
                Ok(lane) => lanes.push(lane),
                Err(e) => {
                    // A lane that fails to start stops those started before
                    // it, as a shutdown does (then drops them).
                    let _ = Shared::stop_all(lanes.iter().map(|l| &*l.shared), true);
                    return Err(e);
                }
            }
        }
        Ok(Runtime::new(lanes, partition, recorder))
    }

    /// Starts this builder's kernel on `ctx` (in `partition`'s SMs if
    /// given): one lane.
    ///
    /// `taken`: the multiprocessors the runtime's earlier lanes fill, in
    /// SMs' worth of their blocks; this lane's are added. The lanes' blocks
    /// must all be resident at once, together. `alone`: the runtime has
    /// this one lane.
    fn start(
        &self,
        ctx: &Arc<CudaContext>,
        partition: Option<&SmPartition>,
        taken: &mut f64,
        alone: bool,
        trace: (&Arc<Recorder>, u8),
    ) -> Result<Lane> {
        let plan = self.plan()?;
        let ctx = ctx.clone();
        let h2d = MappedBuffer::new(&ctx, plan.h2d_len)?;
        let d2h = MappedBuffer::new(&ctx, plan.d2h_len)?;
        let (spin, sleep) = match self.idle {
            IdlePolicy::Spin => (0, 0),
            IdlePolicy::Quiet { after } => (after.as_nanos(), 0),
            IdlePolicy::Backoff { spin, max_sleep } => (spin.as_nanos(), max_sleep.as_nanos()),
        };
        // Both fit (checked by `validate`).
        let words = [h2d.words(0, plan.h2d_len), d2h.words(0, plan.d2h_len)];
        let (h2d_addr, d2h_addr) = (h2d.device_addr(0), d2h.device_addr(0));
        let mut kernel = Kernel::from_image(
            &ctx,
            &self.image,
            &self.kernel,
            true,
            vec![h2d, d2h],
            partition.map(SmPartition::runtime_part),
        )?;
        let scratch = match plan.io_device_bytes() {
            0 => 0,
            bytes => kernel.device_memory(bytes)?,
        };
        let mut params = plan.params(h2d_addr, d2h_addr, spin as u32, sleep as u32, scratch);
        let blocks = self.width.blocks(kernel.sms()) as usize;
        let mut ops = std::mem::take(&mut kernel.ops).serving(self.width);
        if let Image::Caller(_) = self.image {
            ops = ops.refusing_unlisted();
        }
        for sig in &self.ops {
            ops.check(sig)?;
        }
        // A worker's pollers share a block (and its claim counter); both
        // counts are powers of two, so blocks are full.
        // A wide lane: `blocks` blocks of its width's warps per worker.
        let pollers = plan.all_pollers();
        let (warps, grid) = if blocks != 0 {
            let warps = self.width.warps() as usize;
            (warps, plan.workers * blocks)
        } else {
            let warps = pollers.min(MAX_WARPS_PER_BLOCK);
            (warps, pollers / warps)
        };
        let mut cfg = LaunchConfig {
            grid_dim: (grid as u32, 1, 1),
            block_dim: (warps as u32 * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        // Every block must be resident at once, or the workers that are not
        // wait for ones that never end: refuse what cannot be.
        let mut resident = kernel.max_resident_blocks(cfg.block_dim.0, 0)?;
        // IO rooms in shared memory where every block keeps its workers' and
        // stays resident (the kernel looks at what the launch gave it);
        // otherwise they stay in device memory (`io_scratch`). Not beside
        // other lanes: blocks of different shared memory do not add up as
        // fractions of the SMs (the device may spread one lane's blocks over
        // every SM, leaving none the room for another lane's block), and
        // every lane's blocks must be resident.
        let rooms = (warps / plan.pollers).max(1) * plan.io_scratch_bytes();
        if alone && rooms != 0 && kernel.allow_dynamic_shared(rooms) {
            let with_rooms = kernel
                .max_resident_blocks(cfg.block_dim.0, rooms)
                .unwrap_or(0);
            if with_rooms >= cfg.grid_dim.0 as usize {
                cfg.shared_mem_bytes = rooms as u32;
                resident = with_rooms;
            }
        }
        // What fraction of the SMs this lane's blocks fill, beside the
        // lanes before it.
        let sms = kernel.sms() as f64;
        let fill = cfg.grid_dim.0 as f64 * sms / resident.max(1) as f64;
        if *taken > 0.0 && *taken + fill > sms {
            return Err(Error::InvalidConfig(format!(
                "the runtime's lanes need {} SMs' worth of resident blocks together, where {} has \
                 {sms}: use fewer workers or pollers in a lane, or a larger partition",
                (*taken + fill).ceil(),
                match partition {
                    Some(_) => "its partition",
                    None => "the device",
                },
            )));
        }
        *taken += fill;
        if (cfg.grid_dim.0 as usize) > resident {
            return Err(Error::InvalidConfig(format!(
                "{} workers of {} pollers need {} blocks of {} warps resident at once; device {} \
                 holds at most {resident} such blocks of this kernel ({} warps{}): use fewer \
                 workers or pollers",
                plan.workers,
                plan.pollers,
                cfg.grid_dim.0,
                warps,
                self.device,
                resident * warps,
                match partition {
                    Some(p) => format!(" on its partition of {} SMs", p.sms()),
                    None => String::new(),
                },
            )));
        }
        // A wide lane's memory, once its blocks are known to fit.
        let mut block_log = None;
        if blocks != 0 {
            // A wide lane's group words, zeroed (WIDTH in pkq_layout.h).
            params.groups = kernel.zeroed_device_memory(plan.workers * GROUP_BYTES)?;
            params.group_blocks = blocks as u32;
            params.group_warps = self.width.warps();
            // Its log of blocks of traced tasks (TRACE LOG), mapped.
            let words = BlockLog::words_for(plan.workers, blocks);
            let memory = kernel.mapped_memory(words)?;
            params.trace_log = memory.device_addr(0);
            block_log = Some(BlockLog::new(
                Arc::new(memory.words(0, words)),
                plan.workers,
                blocks,
            ));
        }
        // Before the launch: nothing is allocated on the device while the
        // kernel runs.
        let state = StateArena::new(&ctx, self.state_bytes)?;
        if let Some(arena) = &state {
            // Freed only once the kernel, which tasks on states may still
            // run in past a stop's timeout, is known to have exited.
            kernel.keep(arena.clone());
        }
        let shared = Shared::new(
            self.settings(),
            &plan,
            words,
            ops,
            Engine::Cuda(kernel),
            state,
            trace,
        );
        let kernel = shared
            .device
            .engine
            .cuda()
            .expect("built on the CUDA engine");
        // SAFETY: the kernel takes one `pkq_params` by value (checked at
        // load for a caller's module, in layout.rs for pkq's own); its
        // addresses point into the kernel's own mapped memory, which it
        // holds for as long as it may run (see `Kernel`).
        unsafe {
            kernel.launch(cfg, |b| {
                b.arg(&params);
            })?
        };
        let lane = Lane {
            shared,
            blocks: block_log,
        };
        // A timeout too long to add to now has no deadline.
        await_workers(&lane.shared, now().checked_add(self.start_timeout))?;
        Ok(lane)
    }
}

#[cfg(test)]
impl Builder {
    /// As [`Builder::build`], served by the software device
    /// (`proto::soft`) over heap memory: a thread per poller if `threads`,
    /// else only when a test steps it (loom). Its op table lists the
    /// built-in ops.
    ///
    /// One poller per worker unless the builder names some (a thread per
    /// poller, or a stepped poller under loom, is what its tests afford);
    /// lanes each on a software device of their own.
    pub(crate) fn build_soft(mut self, threads: bool) -> Result<Runtime> {
        self.validate()?;
        let recorder = self.recorder()?;
        let mut lanes = vec![self.start_soft(threads, (&recorder, 0))?];
        for (i, lane) in std::mem::take(&mut self.lanes).into_iter().enumerate() {
            lanes.push(lane.start_soft(threads, (&recorder, lane_index(i + 1)?))?);
        }
        Ok(Runtime::new(lanes, None, recorder))
    }

    /// One lane of [`Builder::build_soft`].
    fn start_soft(&self, threads: bool, trace: (&Arc<Recorder>, u8)) -> Result<Lane> {
        let mut b = self.clone();
        use crate::proto::words::Words;
        b.validate()?;
        if b.width.is_wide() {
            return Err(Error::InvalidConfig(
                "the software device serves lanes of warps only".into(),
            ));
        }
        b.pollers.get_or_insert(1);
        let plan = b.plan()?;
        let words = [Words::heap(plan.h2d_len), Words::heap(plan.d2h_len)];
        let device = crate::proto::soft::SoftDevice::new(plan, words[0].clone(), words[1].clone());
        let ops = crate::ops::table::OpTable::of(&crate::builtin::table_rows());
        // The queues write every slot's first tags: the device starts after.
        let shared = Shared::new(
            b.settings(),
            &plan,
            words,
            ops,
            Engine::Soft(device.clone()),
            None,
            trace,
        );
        #[cfg(not(loom))]
        if threads {
            device.start_threads();
        }
        #[cfg(loom)]
        assert!(!threads, "loom models step the software device themselves");
        let lane = Lane {
            shared,
            blocks: None,
        };
        await_workers(&lane.shared, now().checked_add(b.start_timeout))?;
        Ok(lane)
    }
}

/// Waits until every poller of `shared`'s kernel reported in, or `deadline`
/// (none: no limit; then the kernel is stopped).
fn await_workers(shared: &Shared, deadline: Option<std::time::Instant>) -> Result<()> {
    loop {
        if shared.device.all_running() {
            return Ok(());
        }
        shared.probe(now())?;
        if deadline.is_some_and(|d| now() >= d) {
            let _ = shared.stop(false);
            return Err(Error::KernelTimeout(
                "start in time (not all workers reported in)",
            ));
        }
        crate::sync::sleep(Duration::from_micros(50));
    }
}
