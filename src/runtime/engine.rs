//! What serves a runtime's rings: the resident CUDA kernel, or (in the
//! tests) the software device, which plays the kernel's part over heap
//! memory so that loom and Miri run the real runtime, tickets and batches.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::DriverError;

use crate::cuda::kernel::{Kernel, KernelState, wait_ended};
use crate::error::Result;

/// The device side of a runtime.
pub(crate) enum Engine {
    Cuda(Kernel),
    #[cfg(test)]
    Soft(std::sync::Arc<crate::proto::soft::SoftDevice>),
}

impl Engine {
    /// Whether it still serves (never blocks): what the CUDA kernel's
    /// stream says ([`Kernel::state`]), or the software device.
    pub(crate) fn state(&self) -> KernelState {
        match self {
            Self::Cuda(k) => k.state(),
            #[cfg(test)]
            Self::Soft(d) if d.finished() => KernelState::Finished,
            #[cfg(test)]
            Self::Soft(_) => KernelState::Running,
        }
    }

    /// Ends the CUDA kernel, found dead by `fault` ([`Kernel::end`]);
    /// returns how it ended. The software device says so itself.
    pub(crate) fn end(&self, fault: DriverError) -> KernelState {
        match self {
            Self::Cuda(k) => k.end(fault),
            #[cfg(test)]
            Self::Soft(_) => self.state(),
        }
    }

    /// The CUDA kernel was seen to exit ([`Kernel::exited`]); returns how it
    /// ended. The software device says so itself.
    pub(crate) fn exited(&self) -> KernelState {
        match self {
            Self::Cuda(k) => k.exited(),
            #[cfg(test)]
            Self::Soft(_) => self.state(),
        }
    }

    /// Waits until it has ended (normally or by a fault), or `deadline`
    /// (none: no limit): the CUDA kernel as `verdict` judges it, polled
    /// ([`wait_ended`]); the software device until it stopped.
    pub(crate) fn wait_finished(
        &self,
        deadline: Option<Instant>,
        verdict: impl Fn() -> KernelState,
    ) -> Result<()> {
        match self {
            Self::Cuda(_) => wait_ended(deadline, verdict),
            #[cfg(test)]
            Self::Soft(d) => {
                d.wait_stopped();
                Ok(())
            }
        }
    }

    /// Whether it may still run (launched and not yet seen to end).
    pub(crate) fn is_live(&self) -> bool {
        match self {
            Self::Cuda(k) => k.is_live(),
            #[cfg(test)]
            Self::Soft(d) => !d.finished(),
        }
    }

    /// Whether nothing of it runs: the CUDA kernel never launched or seen
    /// to exit ([`Kernel::is_gone`]), the software device stopped.
    pub(crate) fn is_gone(&self) -> bool {
        match self {
            Self::Cuda(k) => k.is_gone(),
            #[cfg(test)]
            Self::Soft(d) => d.finished(),
        }
    }

    /// What says, once the engine is dropped, whether the memory the device
    /// used was released: the CUDA kernel's flag; none for the software
    /// device, whose heap memory is always freed.
    pub(crate) fn released(&self) -> Option<Arc<crate::sync::AtomicBool>> {
        match self {
            Self::Cuda(k) => Some(k.released()),
            #[cfg(test)]
            Self::Soft(_) => None,
        }
    }

    /// The CUDA kernel, if this is one.
    pub(crate) fn cuda(&self) -> Option<&Kernel> {
        match self {
            Self::Cuda(k) => Some(k),
            #[cfg(test)]
            Self::Soft(_) => None,
        }
    }
}
