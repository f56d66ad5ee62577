//! Chrome's trace-event JSON (the "JSON Array Format" with a
//! `traceEvents` object): process 1 holds a thread per host thread, process
//! 2 a thread per device worker and per block of a worker of a lane of
//! blocks or groups; each task is a submit and a seen event on its host
//! threads and a slice on its worker, joined by a flow, and each block's
//! run of a wide task a slice on the block's thread.

use std::fmt::Write;

use super::{Trace, op_name};

/// Process ids of the two sides.
const HOST_PID: u32 = 1;
const GPU_PID: u32 = 2;

pub(super) fn encode(t: &Trace) -> String {
    let us = |ns: f64| ns / 1000.0;
    let mut ev: Vec<String> = Vec::with_capacity(t.records.len() * 5 + 16);
    let gpu_name = match t.clock_map() {
        Some(m) => format!(
            "GPU (device times mapped onto the host clock, within {:.0} ns at its anchors; \
             {:.1}% of records outside)",
            m.error_bound_ns,
            100.0 * m.misfit_fraction
        ),
        None => "GPU (device clock, unmapped: too few records)".into(),
    };
    ev.push(meta(HOST_PID, None, "process_name", "host"));
    ev.push(meta(GPU_PID, None, "process_name", &gpu_name));
    let tracks = super::Tracks::of(t.records.iter(), &t.blocks);
    for &th in &tracks.threads {
        ev.push(meta(
            HOST_PID,
            Some(u64::from(th)),
            "thread_name",
            &format!("host thread {th}"),
        ));
    }
    // In the GPU process, the workers' tracks numbered from 0, then the
    // blocks'.
    let worker_tid = |lane, w| tracks.worker(lane, w) as u64;
    let block_tid = |lane, w, b| (tracks.workers.len() + tracks.block(lane, w, b)) as u64;
    for &(lane, w) in &tracks.workers {
        ev.push(meta(
            GPU_PID,
            Some(worker_tid(lane, w)),
            "thread_name",
            &format!("lane {lane} worker {w}"),
        ));
    }
    for &(lane, w, b) in &tracks.blocks {
        ev.push(meta(
            GPU_PID,
            Some(block_tid(lane, w, b)),
            "thread_name",
            &format!("lane {lane} worker {w} block {b}"),
        ));
    }
    for (b, placed) in t.blocks.iter().zip(super::perfetto::block_slices(t)) {
        let Some((start, end)) = placed else { continue };
        let (start, end) = (start as f64, end as f64);
        ev.push(format!(
            "{{\"name\":\"block {}\",\"cat\":\"device\",\"ph\":\"X\",\"pid\":{GPU_PID},\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"seq\":{},\"ring\":{},\"block\":{},\"device_start_ns\":{},\"device_end_ns\":{}}}}}",
            b.block,
            block_tid(b.lane, b.worker, b.block),
            us(start),
            us((end - start).max(1.0)),
            b.seq,
            b.ring,
            b.block,
            b.device_start_ns,
            b.device_end_ns
        ));
    }
    let placed = super::perfetto::device_slices(t);
    for (id, r) in t.records.iter().enumerate() {
        let name = json_str(&op_name(r.op));
        let args = format!(
            "{{\"seq\":{},\"lane\":{},\"ring\":{},\"worker\":{},\"poller\":{},\"status\":{},\"tasks\":{}}}",
            r.seq, r.lane, r.ring, r.worker, r.poller, r.status, r.tasks
        );
        ev.push(format!(
            "{{\"name\":\"submit {name}\",\"cat\":\"host\",\"ph\":\"X\",\"pid\":{HOST_PID},\"tid\":{},\"ts\":{:.3},\"dur\":0.001,\"args\":{args}}}",
            r.submit_thread,
            us(r.submit_ns)
        ));
        ev.push(flow(
            "s",
            id,
            HOST_PID,
            u64::from(r.submit_thread),
            us(r.submit_ns),
        ));
        if let (Some((start, end)), Some(seg)) = (placed[id], t.segments(r)) {
            let (start, end) = (start as f64, end as f64);
            let tid = worker_tid(r.lane, r.worker);
            ev.push(format!(
                "{{\"name\":\"{name}\",\"cat\":\"device\",\"ph\":\"X\",\"pid\":{GPU_PID},\"tid\":{tid},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"seq\":{},\"dispatch_ns\":{:.0},\"handler_ns\":{:.0},\"seen_ns\":{:.0},\"device_start_ns\":{},\"device_end_ns\":{}}}}}",
                us(start),
                us((end - start).max(1.0)),
                r.seq,
                seg.dispatch_ns,
                seg.handler_ns,
                seg.seen_ns,
                r.device_start_ns,
                r.device_end_ns
            ));
            ev.push(flow("t", id, GPU_PID, tid, us(start)));
        }
        ev.push(format!(
            "{{\"name\":\"seen {name}\",\"cat\":\"host\",\"ph\":\"X\",\"pid\":{HOST_PID},\"tid\":{},\"ts\":{:.3},\"dur\":0.001,\"args\":{args}}}",
            r.seen_thread,
            us(r.seen_ns)
        ));
        ev.push(flow(
            "f",
            id,
            HOST_PID,
            u64::from(r.seen_thread),
            us(r.seen_ns),
        ));
    }
    let mut out = String::with_capacity(ev.iter().map(|e| e.len() + 2).sum::<usize>() + 256);
    out.push_str("{\"traceEvents\":[\n");
    out.push_str(&ev.join(",\n"));
    let _ = write!(
        out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"producer\":\"pkq\",\"records\":{},\"dropped\":{},\"unfinished\":{},\"capacity\":{},\"clock\":\"host ns from the trace's origin; device times mapped\",\"host_clock\":\"{}\",\"clock_error_bound_ns\":{},\"clock_misfit_fraction\":{}}}}}\n",
        t.records.len(),
        t.dropped,
        t.unfinished,
        t.capacity,
        t.host_clock,
        t.clock_map()
            .map_or("null".into(), |m| format!("{:.1}", m.error_bound_ns)),
        t.clock_map()
            .map_or("null".into(), |m| format!("{:.4}", m.misfit_fraction))
    );
    out
}

fn meta(pid: u32, tid: Option<u64>, what: &str, name: &str) -> String {
    format!(
        "{{\"name\":\"{what}\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}",
        tid.unwrap_or(0),
        json_str(name)
    )
}

/// A flow event: `s` start, `t` step, `f` finish (bound to the enclosing
/// slice).
fn flow(ph: &str, id: usize, pid: u32, tid: u64, ts: f64) -> String {
    format!(
        "{{\"name\":\"task\",\"cat\":\"flow\",\"ph\":\"{ph}\",\"id\":{id},\"pid\":{pid},\"tid\":{tid},\"ts\":{ts:.3},\"bp\":\"e\"}}"
    )
}

/// `s` escaped for a JSON string's inside.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
