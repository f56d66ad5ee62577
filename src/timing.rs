//! One-way latencies: mapping the GPU's `%globaltimer` onto a host clock.
//!
//! Every completion carries the device's timestamps (when the worker had the
//! whole slot, and when the handler returned; [`Completion`](crate::Completion)).
//! To place them on the host's timeline, [`ClockMap::fit`] estimates the
//! offset between the clocks from many round trips, as NTP does: in each
//! stretch of time it keeps the round trip that left the least unexplained
//! time (the tightest), takes the device's stamps to sit in the middle of the
//! host's send and receive times, and fits a line through those offsets (the
//! clocks' rates differ by a few parts per million).
//!
//! The middle is an assumption: without a shared clock, how a round trip
//! splits into its two halves cannot be measured. What can be bounded is the
//! error: in every round trip the device's stamps lie between the host's
//! send and receive times, so the true offset lies in an interval per round
//! trip; [`ClockMap::error_bound_ns`] is how far the fitted offset can be
//! from the truth while staying inside all of them.

/// One round trip: host clock (ns, any fixed origin) just before the task was
/// submitted and just after its completion was seen; device clock when the
/// worker had the slot and when the handler returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// Host time just before submit.
    pub host_send_ns: u64,
    /// Host time just after the completion was seen.
    pub host_recv_ns: u64,
    /// Device time when the worker had the whole slot.
    pub device_start_ns: u64,
    /// Device time when the handler returned.
    pub device_end_ns: u64,
}

impl Exchange {
    /// Host time of the round trip not spent in the handler.
    fn slack(&self) -> i64 {
        (self.host_recv_ns as i64 - self.host_send_ns as i64)
            - (self.device_end_ns as i64 - self.device_start_ns as i64)
    }

    fn host_mid(&self) -> f64 {
        (self.host_send_ns as f64 + self.host_recv_ns as f64) / 2.0
    }

    /// The offset (device - host) if the stamps sat mid-way.
    fn mid_offset(&self) -> f64 {
        (self.device_start_ns as f64 + self.device_end_ns as f64) / 2.0 - self.host_mid()
    }
}

/// device time = host time + offset, the offset a line in host time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockMap {
    /// Device minus host clock (ns) at host time `at_host_ns`.
    pub offset_ns: f64,
    /// How fast the offset moves: parts per million of host time.
    pub drift_ppm: f64,
    /// The host time the offset refers to.
    pub at_host_ns: f64,
    /// The fitted offset is within this many ns of any offset consistent
    /// with every round trip (all device stamps between their host send and
    /// receive); so each one-way figure is within it too.
    pub error_bound_ns: f64,
    /// Whether every round trip was consistent with the fitted line (if not,
    /// `error_bound_ns` falls back to half the tightest round trip's slack).
    pub consistent: bool,
    /// The least slack of any round trip (ns).
    pub min_slack_ns: i64,
}

impl ClockMap {
    /// Fits the map from round trips, keeping the tightest of each of
    /// `windows` stretches of time. `None` with fewer than two round trips.
    pub fn fit(exchanges: &[Exchange], windows: usize) -> Option<Self> {
        if exchanges.len() < 2 {
            return None;
        }
        let mut ex = exchanges.to_vec();
        ex.sort_by_key(|e| e.host_send_ns);
        let per = ex.len().div_ceil(windows.clamp(1, ex.len()));
        let tight: Vec<&Exchange> = ex
            .chunks(per)
            .filter_map(|w| w.iter().min_by_key(|e| e.slack()))
            .collect();
        let n = tight.len() as f64;
        let t_mean = tight.iter().map(|e| e.host_mid()).sum::<f64>() / n;
        let o_mean = tight.iter().map(|e| e.mid_offset()).sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for e in &tight {
            let (dx, dy) = (e.host_mid() - t_mean, e.mid_offset() - o_mean);
            sxy += dx * dy;
            sxx += dx * dx;
        }
        let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        let line = |t: f64| o_mean + slope * (t - t_mean);
        // The truth at t is in [device_end - recv, device_start - send] for
        // each round trip; relative to the line that gives [lo, hi].
        let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
        for e in &ex {
            let fitted = line(e.host_mid());
            lo = lo.max(e.device_end_ns as f64 - e.host_recv_ns as f64 - fitted);
            hi = hi.min(e.device_start_ns as f64 - e.host_send_ns as f64 - fitted);
        }
        let min_slack = ex.iter().map(Exchange::slack).min().unwrap();
        let consistent = lo <= 0.0 && 0.0 <= hi;
        Some(Self {
            offset_ns: o_mean,
            drift_ppm: slope * 1e6,
            at_host_ns: t_mean,
            error_bound_ns: if consistent {
                lo.abs().max(hi.abs())
            } else {
                min_slack as f64 / 2.0
            },
            consistent,
            min_slack_ns: min_slack,
        })
    }

    /// The offset (device - host, ns) at host time `host_ns`.
    pub fn offset_at(&self, host_ns: f64) -> f64 {
        self.offset_ns + self.drift_ppm * 1e-6 * (host_ns - self.at_host_ns)
    }

    /// The host time (ns, the exchanges' origin) at which the device clock
    /// read `device_ns`.
    pub fn to_host_ns(&self, device_ns: u64) -> f64 {
        let b = self.drift_ppm * 1e-6;
        (device_ns as f64 - self.offset_ns + b * self.at_host_ns) / (1.0 + b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// Round trips under a known offset and drift, with random delays
    /// either way (and a fixed minimum), as a sanity check of the fit.
    fn synthetic(offset: f64, drift_ppm: f64, n: usize) -> Vec<Exchange> {
        let mut rng = Rng::new(9);
        (0..n)
            .map(|i| {
                let send = 1_000_000 + i as u64 * 3_000;
                let up = 600 + rng.next() % 900;
                let exec = 20 + rng.next() % 40;
                let down = 500 + rng.next() % 300;
                let dev = |h: u64| (h as f64 + offset + drift_ppm * 1e-6 * h as f64) as u64;
                Exchange {
                    host_send_ns: send,
                    host_recv_ns: send + up + exec + down,
                    device_start_ns: dev(send + up),
                    device_end_ns: dev(send + up + exec),
                }
            })
            .collect()
    }

    #[test]
    fn recovers_offset_and_drift_within_its_bound() {
        let ex = synthetic(5e9, 12.0, 20_000);
        let m = ClockMap::fit(&ex, 32).unwrap();
        assert!((m.drift_ppm - 12.0).abs() < 1.0, "{m:?}");
        assert!(m.consistent, "{m:?}");
        // Where the truth is, per round trip: the device start of each.
        for e in ex.iter().step_by(997) {
            let err = m.to_host_ns(e.device_start_ns) - (e.host_send_ns as f64);
            // The true pickup is `up` (600..1500); the map places it within
            // the bound of that.
            assert!(
                err > 600.0 - m.error_bound_ns - 2.0 && err < 1500.0 + m.error_bound_ns + 2.0,
                "{err} {m:?}"
            );
        }
        assert!(m.error_bound_ns < 700.0, "{m:?}");
    }

    #[test]
    fn too_few_round_trips() {
        assert!(ClockMap::fit(&[], 8).is_none());
        assert!(ClockMap::fit(&synthetic(0.0, 0.0, 1), 8).is_none());
    }
}
