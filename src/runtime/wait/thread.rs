//! The completion thread's loop: rounds over the live interests, probes
//! of the lane's health while there are some, sleep once there are none
//! (its registry and the protocol: `reactor`).

#[cfg(not(loom))]
use std::sync::Arc;

#[cfg(not(loom))]
use crate::error::Error;
#[cfg(not(loom))]
use crate::runtime::shared::Shared;
#[cfg(not(loom))]
use crate::runtime::wait::reactor::{Collected, Interest, fire_all, round};
#[cfg(not(loom))]
use crate::sync::now;

/// Rounds of looking at the interests without finding work before the
/// completion thread yields the CPU between rounds.
#[cfg(not(loom))]
const SPIN_ROUNDS: u32 = 4096;
/// How long the completion thread keeps looking after its last interest
/// ended, before it sleeps: a loop that waits again at once finds it awake.
#[cfg(not(loom))]
const LINGER: std::time::Duration = std::time::Duration::from_micros(500);
/// Rounds between two looks at the clock (probes, stalls, lingering).
#[cfg(not(loom))]
const ROUNDS_PER_CHECK: u32 = 64;

/// Where the count of quiet rounds goes on past `u32::MAX`: the first
/// multiple of `ROUNDS_PER_CHECK` past `SPIN_ROUNDS`.
#[cfg(not(loom))]
const QUIET_AGAIN: u32 = (SPIN_ROUNDS / ROUNDS_PER_CHECK + 1) * ROUNDS_PER_CHECK;

/// The completion thread's count of rounds in a row that ended no
/// interest: it says when to look at the clock and when to yield.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(super) struct IdleRounds(u32);

#[cfg(not(loom))]
impl IdleRounds {
    /// A count that starts at `rounds` (tests).
    #[cfg(test)]
    pub(super) fn at(rounds: u32) -> Self {
        Self(rounds)
    }

    /// Counts a round that ended `ended` interests; returns whether this
    /// round looks at the clock.
    pub(super) fn round(&mut self, ended: usize) -> bool {
        // Past `u32::MAX` the count goes on from `QUIET_AGAIN`: still
        // yielding, its looks still `ROUNDS_PER_CHECK` rounds apart
        // (`u32::MAX` is one round short of a multiple of it).
        self.0 = if ended > 0 {
            0
        } else {
            self.0.checked_add(1).unwrap_or(QUIET_AGAIN)
        };
        self.0.is_multiple_of(ROUNDS_PER_CHECK)
    }

    /// Whether the thread yields the CPU after this round.
    pub(super) fn yields(&self) -> bool {
        self.0 > SPIN_ROUNDS
    }
}

/// The completion thread of `shared`'s runtime: rounds over the live
/// interests without pause while there are some (yielding the CPU after
/// `SPIN_ROUNDS` rounds without work), a probe of the runtime's health
/// when one is due, and sleep once nothing was live for `LINGER`.
#[cfg(not(loom))]
pub(crate) fn serve(shared: Arc<Shared>) {
    let registry = &shared.reactor;
    let mut live: Vec<Arc<Interest>> = Vec::new();
    let mut idle = IdleRounds::default();
    let mut busy_at = now();
    // Stalls are looked for once per probe interval (each look reads the
    // heartbeats the last probe recorded, per interest); never again after
    // an interval past the clock's range.
    let mut stalls_due = Some(busy_at);
    let mut sleep = false;
    loop {
        if registry.collect(&mut live, sleep) == Collected::Closed {
            let why = shared.check().err().unwrap_or(Error::Closed);
            fire_all(&mut live, &why, &registry.panics);
            return;
        }
        sleep = false;
        let ended = round(
            &mut live,
            |i| shared.rings.queues[i.ring].ready(i.seq),
            &registry.panics,
        );
        if idle.round(ended) {
            let now = now();
            if !live.is_empty() || ended > 0 {
                busy_at = now;
            }
            // The runtime's health: a fault ends every wait; a stall, the
            // waits on the silent worker.
            let _ = shared.probe_if_due(now);
            if let Err(e) = shared.check() {
                fire_all(&mut live, &e, &registry.panics);
            } else if stalls_due.is_some_and(|due| now >= due) {
                stalls_due = now.checked_add(shared.device.liveness.every);
                live.retain(|i| match shared.check_stall(i.watch) {
                    Ok(()) => true,
                    Err(e) => {
                        i.fire(Some(e), &registry.panics);
                        false
                    }
                });
            }
            if live.is_empty() && now.saturating_duration_since(busy_at) >= LINGER {
                sleep = true;
                idle = IdleRounds::default();
                continue;
            }
        }
        if idle.yields() {
            crate::sync::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}
