//! What a lane and its tickets and batches share, by owner: the rings
//! (`rings`), the device side and its liveness (`device`), the lifecycle
//! (`lifecycle`), the completion thread's registry (`wait::reactor`), the
//! op table and the state memory; and the looks at the kernel that need
//! more than one of them (probes, stalls, health).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cuda::kernel::KernelState;
use crate::error::{Error, Result};
use crate::ops::table::OpTable;
use crate::proto::plan::Plan;
use crate::proto::ring::seq_add;
use crate::proto::words::Words;
use crate::runtime::device::Device;
use crate::runtime::engine::Engine;
use crate::runtime::lifecycle::Lifecycle;
use crate::runtime::liveness::{FAULT_CONFIRM, Liveness, Watch};
use crate::runtime::memory::Witness;
use crate::runtime::rings::Rings;
use crate::runtime::wait::WaitStrategy;
use crate::runtime::wait::reactor::Registry;
use crate::sync::{Ordering, now};
use crate::trace::recorder::Recorder;

/// The settings a lane's shared state keeps (from its `Builder`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) device: usize,
    pub(crate) probe_every: Duration,
    pub(crate) stall_after: Duration,
    pub(crate) stop_timeout: Duration,
    pub(crate) wait: WaitStrategy,
    pub(crate) completion_cpu: Option<usize>,
    pub(crate) width: crate::width::Width,
}

/// How long the kernel's stream may stay unqueryable before waiters give up.
const UNKNOWN_FOR: Duration = Duration::from_millis(200);

/// What a lane and its tickets and batches share.
pub(crate) struct Shared {
    pub(crate) rings: Rings,
    pub(crate) device: Device,
    pub(crate) life: Lifecycle,
    /// The completion thread's registry of waiters (`runtime::wait`).
    pub(crate) reactor: Registry,
    /// The kernel's op table (which ops it serves, with what arguments).
    pub(crate) ops: OpTable,
    /// The device memory states come from (`Lane::state`), if any.
    pub(crate) state: Option<Arc<crate::runtime::arena::StateArena>>,
    pub(crate) settings: Settings,
    /// Says, once this is dropped, whether the memory was given back (the
    /// last field: dropped after the engine and the views of the memory).
    witness: Witness,
}

impl Shared {
    /// The state of a lane laid out by `plan` over `h2d` and `d2h`, served
    /// by `engine`, with `b`'s settings.
    pub(crate) fn new(
        b: Settings,
        plan: &Plan,
        [h2d, d2h]: [Words; 2],
        ops: OpTable,
        engine: Engine,
        state: Option<Arc<crate::runtime::arena::StateArena>>,
        trace: (&Arc<Recorder>, u8),
    ) -> Arc<Self> {
        let witness = Witness::new(&engine);
        Arc::new(Shared {
            rings: Rings::new(plan, &h2d, &d2h, trace, b.width.is_wide()),
            device: Device::new(
                plan.control(&h2d, &d2h),
                plan.workers,
                engine,
                Liveness::new(b.probe_every, b.stall_after, plan.all_pollers()),
            ),
            life: Lifecycle::default(),
            reactor: Registry::default(),
            ops,
            state,
            settings: b,
            witness,
        })
    }

    /// The witness of this memory's end.
    pub(crate) fn witness(&self) -> &Witness {
        &self.witness
    }

    /// Whether shutdown began (every ring closes at once).
    pub(crate) fn is_closed(&self) -> bool {
        self.rings.is_closed()
    }

    /// The latched fault, if any.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        self.device.check()
    }

    /// [`Shared::check`] as a submit reports it: after shutdown the latched
    /// reason is "shut down", so say [`Error::Closed`]; a device fault stays
    /// what every later call says, also once the stop it led to closed the
    /// rings.
    #[inline]
    pub(crate) fn check_open(&self) -> Result<()> {
        self.check().map_err(|e| match e {
            Error::DeviceFault(_) => e,
            _ if self.is_closed() => Error::Closed,
            _ => e,
        })
    }

    /// Why a closed ring refused: the latched device fault where there is
    /// one (as [`Shared::check_open`] says it), else [`Error::Closed`].
    #[cold]
    pub(crate) fn closed(&self) -> Error {
        self.check()
            .err()
            .filter(|e| matches!(e, Error::DeviceFault(_)))
            .unwrap_or(Error::Closed)
    }

    /// A caller's look at the runtime while its task is pending, which
    /// never blocks: a probe if one is due, then the latched fault.
    pub(crate) fn look(&self, now: Instant) -> Result<()> {
        self.probe_if_due(now).and_then(|()| self.check())
    }

    /// Probes liveness if a probe is due and no other thread is probing.
    pub(crate) fn probe_if_due(&self, now: Instant) -> Result<()> {
        let liveness = &self.device.liveness;
        let t = liveness.ns(now);
        if t < liveness.next_ns.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.probe_unless_busy(now).unwrap_or(Ok(()))
    }

    /// Probes now, and schedules the next probe one interval later, unless
    /// another thread is probing (then `None`).
    fn probe_unless_busy(&self, now: Instant) -> Option<Result<()>> {
        let liveness = &self.device.liveness;
        if liveness.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        let outcome = self.probe(now);
        let every = u64::try_from(liveness.every.as_nanos()).unwrap_or(u64::MAX);
        liveness
            .next_ns
            .store(liveness.ns(now).saturating_add(every), Ordering::Relaxed);
        liveness.busy.store(false, Ordering::Release);
        Some(outcome)
    }

    /// Asks whether the kernel still serves ([`Device::verdict`], and a
    /// look at the worker state words); latches what ended it.
    pub(crate) fn probe(&self, now: Instant) -> Result<()> {
        self.check()?;
        let device = &self.device;
        let liveness = &device.liveness;
        let state = device.verdict();
        if !matches!(state, KernelState::Unknown(..)) {
            liveness.unknown_since_ns.store(0, Ordering::Relaxed);
        }
        match state {
            KernelState::Running => {
                // Stamped after the stream query, which may have waited.
                device.read_heartbeats(liveness.ns(crate::sync::now()));
                if let Some(p) = device.bad_tag() {
                    return Err(device.fail(Error::KernelStopped(format!(
                        "poller warp {p} found a slot with a corrupt tag and stopped"
                    ))));
                }
                Ok(())
            }
            KernelState::Finished => Err(device.fail(self.life.exited())),
            KernelState::Faulted(e) => {
                Err(device.fail(Error::DeviceFault(crate::cuda::driver::error_name(e))))
            }
            KernelState::Unknown(call, e) => {
                let t = liveness.ns(now);
                let since = match liveness.unknown_since_ns.load(Ordering::Relaxed) {
                    0 => {
                        liveness.unknown_since_ns.store(t, Ordering::Relaxed);
                        t
                    }
                    since => since,
                };
                if Duration::from_nanos(t.saturating_sub(since)) < UNKNOWN_FOR {
                    return Ok(());
                }
                Err(device.fail(Error::KernelStopped(format!(
                    "its stream could not be queried for {UNKNOWN_FOR:?} ({call}: {})",
                    crate::cuda::driver::error_name(e)
                ))))
            }
        }
    }

    /// [`Error::Stalled`] if a watched worker has been silent past the bound
    /// (as a recent probe saw it).
    pub(crate) fn check_stall(&self, watch: Watch) -> Result<()> {
        let device = &self.device;
        let now_ns = device.liveness.ns(now());
        match watch {
            Watch::Nothing => Ok(()),
            Watch::Worker(w) => device.check_worker_stall(w, now_ns),
            Watch::Reserving { ring, n } => {
                // The workers of the `n` sequence numbers from the tail (past
                // the ring's workers, they come round again).
                let tail = self.rings.queues[ring].tail_hint();
                (0..n.min(self.rings.workers_per_ring()) as u64).try_for_each(|i| {
                    device.check_worker_stall(self.rings.worker_of(ring, seq_add(tail, i)), now_ns)
                })
            }
            Watch::AnyWorker => {
                (0..device.workers()).try_for_each(|w| device.check_worker_stall(w, now_ns))
            }
        }
    }

    /// Probes now (unless another thread is probing) and reports the first
    /// problem: a latched fault or stop, or a stalled worker.
    pub(crate) fn health(&self) -> Result<()> {
        // A probe of its own (another thread's under way: the next), and a
        // fault the driver reports, not yet judged, looked at again until it
        // is (within FAULT_CONFIRM of the first look: twice that bounds the
        // wait), so that a dead kernel is not reported healthy.
        let until = now() + 2 * FAULT_CONFIRM;
        loop {
            let probed = self.probe_unless_busy(now());
            let looked = probed.is_some();
            if let Some(outcome) = probed {
                outcome?;
            }
            let settled =
                looked && (self.check().is_err() || !self.device.liveness.fault_undecided());
            if settled || now() >= until {
                break;
            }
            crate::sync::sleep(
                Duration::from_millis(1).min(until.saturating_duration_since(now())),
            );
        }
        self.check()?;
        self.check_stall(Watch::AnyWorker)
    }
}
