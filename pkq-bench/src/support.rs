//! What the bench programs share: the clock, latency histograms, the JSON
//! report every bench writes (`{"device","driver","date","commit","rows":[...]}`,
//! units in field names), SVG plots, command-line parsers and pkq round
//! trips.

use pkq::Submit;
use pkq::builtin::*;
use std::path::Path;
use std::time::{Instant, SystemTime};

use hdrhistogram::Histogram;
use plotters::prelude::*;
use serde_json::{Map, Value, json};

/// The host clock of the benches: the TSC (lfence; rdtsc) on x86-64, which
/// costs a few ns to read, calibrated against `Instant`; `Instant` elsewhere.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: u64,
    ns_per_tick: f64,
}

impl Clock {
    pub fn calibrate() -> Self {
        let origin = Self::ticks_raw();
        let (t0, i0) = (Self::ticks_raw(), Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(200));
        let (t1, i1) = (Self::ticks_raw(), Instant::now());
        Self {
            origin,
            ns_per_tick: (i1 - i0).as_nanos() as f64 / (t1 - t0).max(1) as f64,
        }
    }

    #[inline(always)]
    fn ticks_raw() -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: lfence and rdtsc have no preconditions on x86-64.
        unsafe {
            std::arch::x86_64::_mm_lfence();
            std::arch::x86_64::_rdtsc()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
            ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
        }
    }

    /// A reading of the clock.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        Self::ticks_raw()
    }

    /// Nanoseconds since the clock's origin at reading `t`.
    pub fn ns(&self, t: u64) -> u64 {
        (t.wrapping_sub(self.origin) as f64 * self.ns_per_tick) as u64
    }

    /// Spins until `due_ns` (nanoseconds since the origin, as [`Clock::ns`]
    /// gives) and returns the reading at which it ended.
    pub fn spin_until(&self, due_ns: u64) -> u64 {
        let mut now = self.now();
        while self.ns(now) < due_ns {
            std::hint::spin_loop();
            now = self.now();
        }
        now
    }

    /// Nanoseconds from reading `a` to reading `b`.
    #[inline(always)]
    pub fn between(&self, a: u64, b: u64) -> u64 {
        (b.wrapping_sub(a) as f64 * self.ns_per_tick) as u64
    }

    /// The cost of one reading (the least of many back-to-back pairs).
    pub fn overhead_ns(&self) -> u64 {
        (0..10_000)
            .map(|_| {
                let a = self.now();
                self.between(a, self.now())
            })
            .min()
            .unwrap_or(0)
    }
}

/// Latency samples of one variant, in nanoseconds.
pub struct Latency {
    pub name: String,
    pub hist: Histogram<u64>,
}

impl Latency {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            // 1 ns to 10 s at 3 significant digits.
            hist: Histogram::new_with_bounds(1, 10_000_000_000, 3).unwrap(),
        }
    }

    pub fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
    }

    /// Pools `other`'s samples into these (rounds of one variant).
    pub fn absorb(&mut self, other: &Latency) {
        self.hist.add(&other.hist).expect("histograms of one shape");
    }

    /// `warmup` unrecorded runs of `op`, then `samples` timed ones.
    pub fn measure<E: std::fmt::Debug>(
        name: &str,
        clock: &Clock,
        warmup: usize,
        samples: usize,
        op: impl FnMut() -> Result<(), E>,
    ) -> Self {
        Self::measure_paced(name, clock, warmup, samples, &mut Pacer::new(0), op)
    }

    /// As [`Latency::measure`], with `pacer`'s pause before each timed run.
    pub fn measure_paced<E: std::fmt::Debug>(
        name: &str,
        clock: &Clock,
        warmup: usize,
        samples: usize,
        pacer: &mut Pacer,
        mut op: impl FnMut() -> Result<(), E>,
    ) -> Self {
        for _ in 0..warmup {
            op().unwrap_or_else(|e| panic!("{name}: {e:?}"));
        }
        let mut l = Self::new(name);
        for _ in 0..samples {
            pacer.pause(clock);
            let t0 = clock.now();
            op().unwrap_or_else(|e| panic!("{name}: {e:?}"));
            l.record_ns(clock.between(t0, clock.now()));
        }
        l
    }

    /// Percentiles of signed samples (which a histogram cannot hold), as a
    /// row with the same fields.
    pub fn row_of(name: &str, unit: &str, samples: &mut [f64]) -> Map<String, Value> {
        samples.sort_by(f64::total_cmp);
        let scale = if unit == "ns" { 1.0 } else { 1e-3 };
        let q = |q: f64| {
            let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
            json!((samples[i] * scale * 1000.0).round() / 1000.0)
        };
        let mut m = Map::new();
        m.insert("name".into(), json!(name));
        for (key, p) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99_9", 0.999)] {
            m.insert(format!("{key}_{unit}"), q(p));
        }
        m.insert(format!("max_{unit}"), q(1.0));
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        m.insert(
            format!("mean_{unit}"),
            json!((mean * scale * 1000.0).round() / 1000.0),
        );
        m.insert("samples".into(), json!(samples.len()));
        m
    }

    pub fn quantile_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1e3
    }

    pub fn p50_us(&self) -> f64 {
        self.quantile_us(0.5)
    }

    /// The standard row: p50/p90/p99/p99.9/max/mean in `unit` ("us" or "ns").
    pub fn row(&self, unit: &str) -> Map<String, Value> {
        let scale = if unit == "ns" { 1.0 } else { 1e-3 };
        let v = |ns: f64| (ns * scale * 1000.0).round() / 1000.0;
        let h = &self.hist;
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        for (key, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99_9", 0.999)] {
            m.insert(
                format!("{key}_{unit}"),
                json!(v(h.value_at_quantile(q) as f64)),
            );
        }
        m.insert(format!("max_{unit}"), json!(v(h.max() as f64)));
        m.insert(format!("mean_{unit}"), json!(v(h.mean())));
        m.insert("samples".into(), json!(h.len()));
        m
    }
}

/// Pins the calling thread to `core`, or to the last core when `None`.
pub fn pin(core: Option<usize>) -> Option<usize> {
    let ids = cores()?;
    let id = match core {
        Some(c) => *ids.iter().find(|i| i.id == c)?,
        None => *ids.last()?,
    };
    core_affinity::set_for_current(id).then_some(id.id)
}

/// The cores this process may run on, as they were before any thread was
/// pinned: a thread inherits its creator's affinity, and the core list a
/// pinned thread reads is its own one core.
fn cores() -> Option<Vec<core_affinity::CoreId>> {
    static CORES: std::sync::OnceLock<Option<Vec<core_affinity::CoreId>>> =
        std::sync::OnceLock::new();
    CORES.get_or_init(core_affinity::get_core_ids).clone()
}

/// Pins a helper thread (a producer, a reaper) to the `k`-th core other
/// than the last (where [`start`] pins the main thread), wrapping around.
/// Without this, every thread a bench spawns would share the main thread's
/// one core, taking turns on it by the scheduler's time slice.
pub fn pin_helper(k: usize) -> Option<usize> {
    let ids = cores()?;
    let others = ids.len().saturating_sub(1).max(1);
    let id = ids[k % others];
    core_affinity::set_for_current(id).then_some(id.id)
}

/// The start of a bench: the thread pinned (to `core`, else the last core),
/// the clock calibrated, `device` named with the driver and pkq's commit.
pub fn start(core: Option<usize>, device: usize) -> pkq::Result<(Clock, pkq::DeviceInfo)> {
    pin(core);
    let clock = Clock::calibrate();
    let info = pkq::device_info(device)?;
    println!(
        "{} ({}), pkq {}",
        info.name,
        info.driver,
        pkq::build_info::GIT_COMMIT
    );
    Ok((clock, info))
}

/// Device 0's primary context for a bench's own buffers and launches, all
/// on one stream, without cudarc's cross-stream events (which would add to
/// each launch).
pub fn one_stream_context() -> pkq::Result<std::sync::Arc<pkq::cudarc::driver::CudaContext>> {
    let ctx = pkq::context(0)?;
    // SAFETY: the caller uses every buffer on one stream, in order, so the
    // events that order uses across streams are not needed.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

/// A command-line count of at least 1 (for clap's `value_parser`).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("{s:?}: a count, at least 1")),
    }
}

/// A command-line number above 0 and finite (for clap's `value_parser`).
pub fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?}: a number above 0")),
    }
}

/// The report every bench writes.
pub fn report(device: &pkq::DeviceInfo, rows: Vec<Map<String, Value>>) -> Value {
    json!({
        "device": device.name,
        "driver": device.driver,
        "date": humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        "commit": pkq::build_info::GIT_COMMIT,
        "rows": rows,
    })
}

pub fn write_json(path: &Path, report: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(report).unwrap() + "\n")
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    println!("wrote {}", path.display());
}

/// Latency distributions on one chart: x is the percentile on a "nines"
/// scale (90, 99, 99.9, ...), y the latency on a log scale, so the tail is
/// as visible as the median.
pub fn plot_percentiles(path: &Path, title: &str, series: &[&Latency]) {
    const NINES: f64 = 5.0; // up to p99.999
    let lo = series
        .iter()
        .map(|l| l.hist.min())
        .min()
        .unwrap_or(1)
        .max(1) as f64
        / 1e3;
    let hi = series
        .iter()
        .map(|l| l.hist.max())
        .max()
        .unwrap_or(1)
        .max(2) as f64
        / 1e3;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..NINES, (lo * 0.8..hi * 1.25).log_scale().base(2.0))
        .unwrap();
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (µs, log scale)")
        .x_labels(6)
        .y_labels(16)
        .x_label_formatter(&|n| {
            let p = 100.0 * (1.0 - 10f64.powf(-n));
            format!("p{}", trim(p))
        })
        .y_label_formatter(&|v| trim(*v))
        .draw()
        .unwrap();
    let colors = [
        RED,
        BLUE,
        GREEN,
        MAGENTA,
        CYAN,
        BLACK,
        RGBColor(255, 140, 0),
    ];
    for (i, l) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        let points: Vec<(f64, f64)> = (0..=500)
            .map(|k| {
                let n = NINES * k as f64 / 500.0;
                let q = (1.0 - 10f64.powf(-n)).min(1.0);
                (n, l.hist.value_at_quantile(q) as f64 / 1e3)
            })
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .unwrap()
            .label(format!("{} (p50 {:.2} µs)", l.name, l.p50_us()))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .unwrap();
    root.present().unwrap();
    println!("wrote {}", path.display());
}

/// `v` with at most three decimals and no trailing zeros.
pub fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// pkq round trips (submit a NOP, wait), timed on `clock`.
pub struct PkqRun {
    pub round_trip: Latency,
    /// The `submit()` call alone.
    pub submit: Latency,
    /// Host and device times of every timed round trip (host ns from the
    /// clock's origin), and the host time submit returned.
    pub exchanges: Vec<(pkq::timing::Exchange, u64)>,
}

impl PkqRun {
    /// No samples yet, of the round trips named `name`.
    pub fn new(name: &str) -> Self {
        Self {
            round_trip: Latency::new(name),
            submit: Latency::new(&format!("{name}: submit() call (host)")),
            exchanges: Vec::new(),
        }
    }

    /// Pools another round's samples into these.
    pub fn absorb(&mut self, other: PkqRun) {
        self.round_trip.absorb(&other.round_trip);
        self.submit.absorb(&other.submit);
        self.exchanges.extend(other.exchanges);
    }
}

/// Spaces round trips by a random pause (uniform in `0..max_ns`), so that
/// each task arrives at a random phase of the device's polling, as in a real
/// loop, rather than at the phase that back-to-back ping-pong locks into; or
/// by a fixed pause, to see how that phase decides a round trip.
pub struct Pacer {
    max_ns: u64,
    fixed: bool,
    rng: u64,
}

impl Pacer {
    /// No pause (`max_ns` 0): back-to-back round trips.
    pub fn new(max_ns: u64) -> Self {
        Self {
            max_ns,
            fixed: false,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// The same pause of `ns` before every round trip.
    pub fn fixed(ns: u64) -> Self {
        Self {
            fixed: true,
            ..Self::new(ns)
        }
    }

    /// Spins for the next pause.
    pub fn pause(&mut self, clock: &Clock) {
        if self.max_ns == 0 {
            return;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let ns = if self.fixed {
            self.max_ns
        } else {
            self.rng % self.max_ns
        };
        let t0 = clock.now();
        while clock.between(t0, clock.now()) < ns {
            std::hint::spin_loop();
        }
    }
}

pub fn pkq_round_trips(
    rt: &pkq::Runtime,
    clock: &Clock,
    name: &str,
    warmup: usize,
    samples: usize,
    pacer: &mut Pacer,
) -> pkq::Result<PkqRun> {
    let mut run = PkqRun::new(name);
    run.exchanges.reserve(samples);
    for i in 0..warmup + samples {
        pacer.pause(clock);
        let t0 = clock.now();
        let ticket = rt.submit(NOP.args(&()))?;
        let t1 = clock.now();
        let c = ticket.wait()?;
        let t2 = clock.now();
        if i >= warmup {
            run.submit.record_ns(clock.between(t0, t1));
            run.round_trip.record_ns(clock.between(t0, t2));
            let ex = pkq::timing::Exchange {
                host_send_ns: clock.ns(t0),
                host_recv_ns: clock.ns(t2),
                device_start_ns: c.device_start_ns,
                device_end_ns: c.device_end_ns,
            };
            run.exchanges.push((ex, clock.ns(t1)));
        }
    }
    Ok(run)
}

/// p50 against size, one line (with its points) per series: `(name,
/// [(size, p50 µs)])`; both axes logarithmic when `log`, else linear from
/// 0 to `x_max`.
pub fn plot_by_size(
    path: &Path,
    caption: &str,
    x_desc: &str,
    x_max: f64,
    log: bool,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let hi = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(caption, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70);
    let colors = [RED, MAGENTA, BLUE, GREEN];
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc("p50 (µs)")
                .draw()?;
            for (i, (name, points)) in series.iter().enumerate() {
                let color = colors[i % colors.len()];
                chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                    .label(name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .draw()?;
        }};
    }
    if log {
        draw!(builder.build_cartesian_2d((1.0..x_max).log_scale(), (1.0..hi * 1.5).log_scale())?);
    } else {
        draw!(builder.build_cartesian_2d(0.0..x_max, 0.0..hi * 1.15)?);
    }
    root.present()?;
    println!("wrote {}", path.display());
    Ok(())
}
