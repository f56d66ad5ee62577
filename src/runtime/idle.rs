//! What a worker does while no task is waiting for it
//! (`docs/design/idle-policies.md`).

use std::time::Duration;

/// What a worker does while no task is waiting for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Poll without pause: the lowest latency. Each worker keeps `pollers`
    /// warps busy, each with a PCIe read in flight.
    Spin,
    /// Poll without pause while tasks come; once a worker has taken no task
    /// for `after`, its pollers but the first stop reading host memory (they
    /// wait in the SM) until the worker takes a task. The first poller keeps
    /// polling, so a task is never delayed by a sleep: the first task after
    /// such a pause is seen by one poller's reads instead of all of them (at
    /// most one read round trip later than under [`IdlePolicy::Spin`]), and
    /// the other pollers take up their polls once the worker has taken it.
    /// A poller that reads host memory without pause slowed the isolation
    /// bench's memory-bound kernel, on the rest of an SM partition too
    /// (`pkq-bench`'s `isolation`, its rows "idle policy"); this keeps one such
    /// poller per idle worker instead of `pollers`. For a lane of warps'
    /// workers of one poller, the same as [`IdlePolicy::Spin`]; on a lane of
    /// groups of more than one block ([`Width::Group`](crate::Width::Group)),
    /// whose workers have one poller, the first warp of each of a group's
    /// other blocks, which waits in device memory for the poller's next
    /// task, naps up to 1 µs between looks once idle for `after`. `after`: at
    /// least 1 ns, at most `u32::MAX` ns. The default, after
    /// [`IdlePolicy::DEFAULT_QUIET_AFTER`].
    Quiet {
        /// How long a worker goes without a task before its pollers but
        /// the first go quiet.
        after: Duration,
    },
    /// Poll without pause for `spin` (at most `u32::MAX` ns), then sleep
    /// (`__nanosleep`) between polls, doubling from 64 ns up to `max_sleep`
    /// (at most 1 ms). A task that arrives while its worker sleeps waits for
    /// that sleep to end, and a sleep asked of the SM may last up to twice
    /// as long (PTX's `nanosleep`). The isolation bench's rows "idle
    /// policy" show what an idle worker's polls cost a memory-bound kernel
    /// beside it, by `max_sleep`. On a lane of groups of more than one
    /// block, the first warp of each of a group's other blocks naps the
    /// same way between its looks at the poller's next task.
    Backoff {
        /// How long an idle worker spins before it sleeps.
        spin: Duration,
        /// The longest sleep between two polls.
        max_sleep: Duration,
    },
}

impl IdlePolicy {
    /// How long a worker goes without a task before it goes quiet, by
    /// default ([`IdlePolicy::Quiet`]): the period of a loop at 100 Hz, so
    /// the tasks of a faster loop never find it quiet (a late tick of a
    /// 100 Hz loop may: its task is then seen by the worker's first poller
    /// alone, which never goes quiet).
    pub const DEFAULT_QUIET_AFTER: Duration = Duration::from_millis(10);
}

impl Default for IdlePolicy {
    /// [`IdlePolicy::Quiet`] after [`IdlePolicy::DEFAULT_QUIET_AFTER`].
    fn default() -> Self {
        IdlePolicy::Quiet {
            after: Self::DEFAULT_QUIET_AFTER,
        }
    }
}
