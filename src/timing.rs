//! One-way latencies: mapping the GPU's `%globaltimer` onto a host clock.
//!
//! Every completion carries the device's timestamps (when the worker had the
//! whole slot, and when the handler returned; [`Completion`](crate::Completion)).
//! To place them on the host's timeline, [`ClockMap::fit`] estimates the
//! offset between the clocks from many round trips, as NTP does: in each
//! stretch of time it keeps the round trip that left the least unexplained
//! time (the tightest), takes the device's stamps to sit in the middle of the
//! host's send and receive times, and joins those offsets by straight lines
//! (the clocks' rates differ by parts per million, and the driver may adjust
//! `%globaltimer`).
//!
//! The middle is an assumption: without a shared clock, how a round trip
//! splits into its two halves cannot be measured. What can be bounded is the
//! error: in every round trip the device's stamps lie between the host's
//! send and receive times, so the true offset lies in an interval per round
//! trip; at each anchor the offset is within half that round trip's slack
//! of the truth ([`ClockMap::error_bound_ns`]).

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
    /// Host time of the round trip not spent in the handler (wide enough
    /// for any stamps: nothing overflows).
    fn slack(&self) -> i128 {
        let span = |from: u64, to: u64| i128::from(to) - i128::from(from);
        span(self.host_send_ns, self.host_recv_ns) - span(self.device_start_ns, self.device_end_ns)
    }

    fn host_mid(&self) -> f64 {
        (self.host_send_ns as f64 + self.host_recv_ns as f64) / 2.0
    }

    /// The offset (device - `origin` - host) if the stamps sat mid-way.
    fn mid_offset(&self, origin: u64) -> f64 {
        (since(self.device_start_ns, origin) + since(self.device_end_ns, origin)) / 2.0
            - self.host_mid()
    }
}

/// `device_ns - origin` as an `f64`, the difference taken in integers:
/// `%globaltimer` counts nanoseconds since the epoch (about 1.7e18), where
/// an `f64` has a step of 256 ns; a difference of hours keeps its
/// nanoseconds.
fn since(device_ns: u64, origin: u64) -> f64 {
    (i128::from(device_ns) - i128::from(origin)) as f64
}

/// device time = host time + offset(host time): the offset through anchor
/// points, one per stretch of round trips, linear between them (the two
/// clocks' rates differ by parts per million and need not stay put).
#[derive(Clone, Debug, PartialEq)]
pub struct ClockMap {
    /// The device time the anchors' offsets count from (the first round
    /// trip's start): every device time is taken relative to it, in
    /// integers, before it becomes an `f64`.
    device_origin: u64,
    /// (host time, offset - `device_origin`) of each stretch's tightest
    /// round trip, by host time.
    anchors: Vec<(f64, f64)>,
    /// Half the slack of each anchor's round trip: the offset there is
    /// certainly within this of the truth (the stamps lie between send and
    /// receive); the largest over all anchors.
    pub error_bound_ns: f64,
    /// The median of the same: the typical anchor's bound.
    pub median_bound_ns: f64,
    /// The share of round trips whose interval the map misses (0 when the
    /// clocks are as steady as the map assumes between anchors).
    pub misfit_fraction: f64,
}

impl ClockMap {
    /// Fits the map from round trips, one anchor per `per_anchor` of them
    /// (in host-time order). A round trip that cannot be one is left out:
    /// received before it was sent, a device end before its start, or a
    /// device span longer than the host's (stamps from another clock).
    /// `None` with fewer than two round trips left.
    pub fn fit(exchanges: &[Exchange], per_anchor: usize) -> Option<Self> {
        let mut ex: Vec<Exchange> = exchanges
            .iter()
            .filter(|e| {
                e.host_recv_ns >= e.host_send_ns
                    && e.device_end_ns >= e.device_start_ns
                    && e.slack() >= 0
            })
            .copied()
            .collect();
        if ex.len() < 2 {
            return None;
        }
        ex.sort_by_key(|e| e.host_send_ns);
        let origin = ex[0].device_start_ns;
        let tight: Vec<&Exchange> = ex
            .chunks(per_anchor.clamp(1, ex.len()))
            .filter_map(|w| w.iter().min_by_key(|e| e.slack()))
            .collect();
        let anchors: Vec<(f64, f64)> = tight
            .iter()
            .map(|e| (e.host_mid(), e.mid_offset(origin)))
            .collect();
        let mut halves: Vec<f64> = tight.iter().map(|e| e.slack() as f64 / 2.0).collect();
        halves.sort_by(f64::total_cmp);
        let mut map = Self {
            device_origin: origin,
            anchors,
            error_bound_ns: *halves.last().unwrap(),
            median_bound_ns: halves[halves.len() / 2],
            misfit_fraction: 0.0,
        };
        let misfits = ex
            .iter()
            .filter(|e| {
                let o = map.relative_offset_at(e.host_mid());
                let lo = since(e.device_end_ns, origin) - e.host_recv_ns as f64;
                let hi = since(e.device_start_ns, origin) - e.host_send_ns as f64;
                o < lo || o > hi
            })
            .count();
        map.misfit_fraction = misfits as f64 / ex.len() as f64;
        Some(map)
    }

    /// The offset (device - host, ns) at host time `host_ns` (an `f64` of
    /// the device clock's magnitude: to a few hundred nanoseconds for
    /// `%globaltimer`; [`ClockMap::to_host_ns`] keeps the nanoseconds).
    pub fn offset_at(&self, host_ns: f64) -> f64 {
        self.device_origin as f64 + self.relative_offset_at(host_ns)
    }

    /// [`ClockMap::offset_at`] less the device origin.
    fn relative_offset_at(&self, host_ns: f64) -> f64 {
        let a = &self.anchors;
        let i = a.partition_point(|&(t, _)| t <= host_ns);
        match (i.checked_sub(1).map(|j| a[j]), a.get(i)) {
            (Some((t0, o0)), Some(&(t1, o1))) if t1 > t0 => {
                o0 + (o1 - o0) * (host_ns - t0) / (t1 - t0)
            }
            (Some((_, o)), _) | (None, Some(&(_, o))) => o,
            (None, None) => 0.0,
        }
    }

    /// The host time (ns, the exchanges' origin) at which the device clock
    /// read `device_ns`.
    pub fn to_host_ns(&self, device_ns: u64) -> f64 {
        // Two rounds of "host = device - offset(host)" settle it: the
        // offset moves by nanoseconds per millisecond.
        let d = since(device_ns, self.device_origin);
        let first = d - self.relative_offset_at(d - self.anchors[0].1);
        d - self.relative_offset_at(first)
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
    fn recovers_the_offset_under_drift_within_its_bound() {
        let ex = synthetic(5e9, 12.0, 20_000);
        let m = ClockMap::fit(&ex, 256).unwrap();
        assert!(m.misfit_fraction < 0.01, "{m:?}");
        for e in ex.iter().step_by(997) {
            // The true pickup is `up` (600..1500 ns after send).
            let pickup = m.to_host_ns(e.device_start_ns) - e.host_send_ns as f64;
            assert!(
                pickup > 600.0 - m.error_bound_ns - 5.0 && pickup < 1500.0 + m.error_bound_ns + 5.0,
                "{pickup} {m:?}"
            );
        }
        assert!(m.error_bound_ns < 800.0, "{m:?}");
    }

    #[test]
    fn too_few_round_trips() {
        assert!(ClockMap::fit(&[], 8).is_none());
        assert!(ClockMap::fit(&synthetic(0.0, 0.0, 1), 8).is_none());
    }
    /// Device stamps at `%globaltimer`'s real magnitude (nanoseconds since
    /// the epoch, about 1.7e18, where an `f64` steps by 256): a mapped span
    /// keeps its nanoseconds.
    #[test]
    fn device_times_since_the_epoch_keep_their_nanoseconds() {
        let base = 1_700_000_000_000_000_000u64;
        let ex: Vec<Exchange> = (0..100u64)
            .map(|i| {
                let send = 1_000_000 + i * 3_000;
                Exchange {
                    host_send_ns: send,
                    host_recv_ns: send + 102,
                    device_start_ns: base + send + 1,
                    device_end_ns: base + send + 101,
                }
            })
            .collect();
        let m = ClockMap::fit(&ex, 10).unwrap();
        assert_eq!(m.error_bound_ns, 1.0);
        assert_eq!(m.misfit_fraction, 0.0);
        for e in &ex {
            let start = m.to_host_ns(e.device_start_ns);
            let end = m.to_host_ns(e.device_end_ns);
            assert!((end - start - 100.0).abs() < 1e-6, "{start} {end}");
            assert!(
                (start - (e.host_send_ns as f64 + 1.0)).abs() <= m.error_bound_ns,
                "{start} {e:?}"
            );
        }
    }
}
