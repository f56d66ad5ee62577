//! A picture of a stretch of a trace (SVG, no dependencies): a row per
//! host thread and per device worker; a task's dispatch (submit to device
//! start) on the row of the thread that submitted it, its handler on its
//! worker's, its completion's way back (device end to seen) on the row of
//! the thread that saw it; marks the caller names as vertical lines.

use std::fmt::Write;

use super::{Trace, op_name};

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 170.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const ROW: f64 = 34.0;
const BAR: f64 = 16.0;
const DISPATCH: &str = "#e8912d";
const HANDLER: &str = "#3b6fd4";
const SEEN: &str = "#3aa656";
const UNMAPPED: &str = "#999999";
const MARK: &str = "#d62728";

pub(super) fn render(
    t: &Trace,
    from_ns: f64,
    to_ns: f64,
    marks: &[(f64, String)],
    title: &str,
) -> String {
    // A window that is not a finite stretch of time shows nothing (its
    // length finite too: (-1e308, 1e308) overflows).
    let (from_ns, to_ns) = if (to_ns - from_ns).is_finite() && to_ns > from_ns {
        (from_ns, to_ns)
    } else {
        (0.0, 1.0)
    };
    let span = (to_ns - from_ns).max(1.0);
    let x = |ns: f64| LEFT + (ns - from_ns).clamp(0.0, span) / span * (WIDTH - LEFT - RIGHT);
    let inside = |a: f64, b: f64| b >= from_ns && a <= to_ns;
    let shown: Vec<_> = t
        .records
        .iter()
        .filter(|r| inside(r.submit_ns, r.seen_ns))
        .collect();
    let super::Tracks {
        threads, workers, ..
    } = super::Tracks::of(shown.iter().copied(), &[]);
    let rows = threads.len() + workers.len();
    let height = TOP + ROW * rows as f64 + 70.0;
    let row_y = |i: usize| TOP + ROW * i as f64;
    let thread_row = |th: u32| threads.iter().position(|&t| t == th).unwrap_or(0);
    let worker_row =
        |k: (usize, usize)| threads.len() + workers.iter().position(|&w| w == k).unwrap_or(0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{LEFT}\" y=\"20\" font-size=\"15\">{}</text>",
        esc(title)
    );
    let bound = t
        .clock_map()
        .map_or("device times unmapped".to_string(), |m| {
            format!(
                "device times mapped onto the host clock within {:.0} ns at its anchors \
                 ({:.1}% of records outside)",
                m.error_bound_ns,
                100.0 * m.misfit_fraction
            )
        });
    let _ = writeln!(
        s,
        "<text x=\"{LEFT}\" y=\"38\" fill=\"#555\">{}</text>",
        esc(&bound)
    );
    let labels = threads.iter().map(|th| format!("host thread {th}")).chain(
        workers
            .iter()
            .map(|(lane, w)| format!("GPU lane {lane} worker {w}")),
    );
    for (i, label) in labels.enumerate() {
        let y = row_y(i);
        let _ = writeln!(s, "<text x=\"8\" y=\"{:.1}\">{label}</text>", y + BAR * 0.8);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>",
            WIDTH - RIGHT,
            y + BAR / 2.0,
            y + BAR / 2.0
        );
    }
    let bar = |s: &mut String, row: usize, a: f64, b: f64, color: &str, tip: &str| {
        let (xa, xb) = (x(a), x(b));
        let _ = writeln!(
            s,
            "<rect x=\"{xa:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{BAR}\" fill=\"{color}\"><title>{}</title></rect>",
            row_y(row),
            (xb - xa).max(0.6),
            esc(tip)
        );
    };
    for r in &shown {
        let name = op_name(r.op);
        let hrow = thread_row(r.submit_thread);
        match t.segments(r) {
            Some(seg) => {
                let start = r.submit_ns + seg.dispatch_ns;
                let end = start + seg.handler_ns;
                bar(
                    &mut s,
                    hrow,
                    r.submit_ns,
                    start,
                    DISPATCH,
                    &format!("{name} #{}: dispatch {:.0} ns", r.seq, seg.dispatch_ns),
                );
                bar(
                    &mut s,
                    worker_row((r.lane, r.worker)),
                    start,
                    end,
                    HANDLER,
                    &format!(
                        "{name} #{}: handler {:.0} ns (poller {})",
                        r.seq, seg.handler_ns, r.poller
                    ),
                );
                bar(
                    &mut s,
                    thread_row(r.seen_thread),
                    end,
                    r.seen_ns,
                    SEEN,
                    &format!(
                        "{name} #{}: completion seen {:.0} ns after the handler",
                        r.seq, seg.seen_ns
                    ),
                );
            }
            None => bar(
                &mut s,
                hrow,
                r.submit_ns,
                r.seen_ns,
                UNMAPPED,
                &format!("{name} #{}", r.seq),
            ),
        }
    }
    let bottom = row_y(rows);
    for (at, label) in marks
        .iter()
        .filter(|(at, _)| (from_ns..=to_ns).contains(at))
    {
        let xm = x(*at);
        let _ = writeln!(
            s,
            "<line x1=\"{xm:.2}\" x2=\"{xm:.2}\" y1=\"{:.1}\" y2=\"{bottom:.1}\" stroke=\"{MARK}\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>",
            TOP - 6.0
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.2}\" y=\"{:.1}\" fill=\"{MARK}\">{}</text>",
            xm + 3.0,
            bottom + 12.0,
            esc(label)
        );
    }
    // The time axis: microseconds from the window's start.
    let axis = bottom + 28.0;
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{axis:.1}\" y2=\"{axis:.1}\" stroke=\"black\"/>",
        WIDTH - RIGHT
    );
    let step = nice_step(span / 1000.0 / 8.0);
    let mut us = 0.0;
    // At most a few dozen ticks (the step is an eighth of the span or more).
    while us <= span / 1000.0 + 1e-9 && us / step < 64.0 {
        let xt = x(from_ns + us * 1000.0);
        let _ = writeln!(
            s,
            "<line x1=\"{xt:.1}\" x2=\"{xt:.1}\" y1=\"{axis:.1}\" y2=\"{:.1}\" stroke=\"black\"/><text x=\"{xt:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            axis + 5.0,
            axis + 18.0,
            trim(us, step)
        );
        us += step;
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">µs</text>",
        WIDTH - RIGHT,
        axis + 32.0
    );
    let legend = [
        (DISPATCH, "dispatch (submit to device start)"),
        (HANDLER, "handler"),
        (SEEN, "completion seen (device end to host)"),
    ];
    for (i, (color, what)) in legend.iter().enumerate() {
        let lx = LEFT + i as f64 * 300.0;
        let _ = writeln!(
            s,
            "<rect x=\"{lx:.0}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{:.0}\" y=\"{:.1}\">{what}</text>",
            axis + 26.0,
            lx + 16.0,
            axis + 36.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-3).log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&v| v >= raw)
        .unwrap_or(10.0 * p)
}

/// `v` with as many decimals as ticks `step` apart need to differ (none
/// for a whole step), trailing zeros dropped.
fn trim(v: f64, step: f64) -> String {
    let places = if step >= 1.0 {
        0
    } else {
        ((-step.log10()).ceil() as usize).min(9)
    };
    let s = format!("{v:.places$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `s` as XML character data: markup escaped, and the control characters
/// XML 1.0 does not allow (even as references) shown as U+FFFD.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if u32::from(c) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}
