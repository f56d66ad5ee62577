//! Where each section of the shared memory lives (the allocation diagram
//! of `cuda/pkq_layout.h`): word offsets into the host-written and the
//! device-written allocation, from which both the kernel's parameters and
//! the host's views are made, so the two cannot disagree.

use crate::layout::{
    CQE_WORDS, CTRL_BYTES, IO_PLAIN_OUT_WORD, IO_SEEN_WORDS, IO_WORD_BYTES, KernelParams,
    PACK_TASKS, SECTION_ALIGN, SLOT_WORDS,
};
use crate::proto::io::{output_words, plain_words, room};
use crate::proto::queue::Queue;
use crate::proto::ring::{Geometry, SEQ_MASK};
use crate::proto::words::Words;

/// The shape of a runtime's shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) geo: Geometry,
    /// Submission rings.
    pub(crate) rings: usize,
    /// Workers, over all rings.
    pub(crate) workers: usize,
    /// Poller warps per worker; also the copies of the slots.
    pub(crate) pollers: usize,
    /// Every ring's first sequence number.
    pub(crate) start_seq: u64,
    /// Host-written: the control lines.
    ctrl_at: usize,
    /// Host-written: the pack arguments.
    args_at: usize,
    /// Host-written words in all.
    pub(crate) h2d_len: usize,
    /// Device-written: the poller state words, then their heartbeats.
    states_at: usize,
    /// Device-written: the pack results.
    results_at: usize,
    /// Device-written words in all.
    pub(crate) d2h_len: usize,
    /// The most input and output bytes of a task (IO; 0 and 0: none).
    pub(crate) io: (usize, usize),
    /// Host-written: the input areas.
    io_in_at: usize,
    /// Device-written: the output areas.
    io_out_at: usize,
}

/// Words of an IO area holding `bytes` bytes of its stream.
pub(crate) fn io_words(bytes: usize) -> usize {
    bytes.div_ceil(IO_WORD_BYTES)
}

impl Plan {
    /// The sections of `rings` rings of `geo`, served by `workers` workers of
    /// `pollers` pollers each (settings already checked by the builder).
    pub(crate) fn new(
        geo: Geometry,
        rings: usize,
        workers: usize,
        pollers: usize,
        start_seq: u64,
        io: (usize, usize),
    ) -> Self {
        let cap = geo.capacity();
        let align = SECTION_ALIGN / 8;
        let ctrl_at = (pollers * rings * cap * SLOT_WORDS).next_multiple_of(align);
        let args_at = (ctrl_at + workers * pollers * CTRL_BYTES / 8).next_multiple_of(align);
        let states_at = (rings * cap * CQE_WORDS).next_multiple_of(align);
        let results_at = (states_at + 2 * workers * pollers).next_multiple_of(align);
        let pack = rings * cap * PACK_TASKS;
        let io_in_at = (args_at + pack).next_multiple_of(align);
        let io_out_at = (results_at + pack).next_multiple_of(align);
        let slots = rings * cap;
        let (in_words, out_words) = Self::io_area_words(io);
        Self {
            geo,
            rings,
            workers,
            pollers,
            start_seq: start_seq & SEQ_MASK,
            ctrl_at,
            args_at,
            h2d_len: io_in_at + slots * in_words,
            states_at,
            results_at,
            d2h_len: io_out_at + slots * out_words,
            io,
            io_in_at,
            io_out_at,
        }
    }

    /// Words of a slot's input and output area for `io` (most input and
    /// output bytes): room for the tagged stream and for the plain one
    /// (PLAIN in `cuda/pkq_layout.h`; the output's stream starts with its
    /// length, its plain bytes at word `IO_PLAIN_OUT_WORD`); an even count
    /// of words each, so that every slot's areas start on 16 bytes (the
    /// device reads and copies them 16 bytes at a time).
    fn io_area_words((input, output): (usize, usize)) -> (usize, usize) {
        if input == 0 && output == 0 {
            return (0, 0);
        }
        let plain_out = match plain_words(output) {
            0 => 0,
            n => IO_PLAIN_OUT_WORD + n,
        };
        (
            io_words(input).max(plain_words(input)).next_multiple_of(2),
            output_words(output).max(plain_out).next_multiple_of(2),
        )
    }

    /// Bytes of the rooms (shared or device memory) each worker decodes its
    /// task's input into and its handler writes the output in (a worker runs
    /// one task at a time, whichever of its pollers took it).
    pub(crate) fn io_scratch_bytes(&self) -> usize {
        let (input, output) = self.io;
        room(input) + room(output)
    }

    /// Device memory of the IO transport (0 without IO): each worker's
    /// rooms ([`Plan::io_scratch_bytes`]), then what the workers know of
    /// each slot's output area (IO_SEEN in `cuda/pkq_layout.h`).
    pub(crate) fn io_device_bytes(&self) -> usize {
        if self.io == (0, 0) {
            return 0;
        }
        self.io_scratch_bytes() * self.workers
            + self.rings * self.geo.capacity() * IO_SEEN_WORDS * 8
    }

    /// Poller warps in all.
    pub(crate) fn all_pollers(&self) -> usize {
        self.workers * self.pollers
    }

    /// Words of one copy of every ring's slots.
    pub(crate) fn copy_words(&self) -> usize {
        self.rings * self.geo.capacity() * SLOT_WORDS
    }

    /// The word of poller `p`'s stop word (`p = worker * pollers + j`), in
    /// the host-written allocation.
    #[cfg(test)]
    pub(crate) fn stop_word(&self, p: usize) -> usize {
        self.ctrl_at + p * CTRL_BYTES / 8 + crate::layout::CTRL_STOP
    }

    /// The word of poller `p`'s state (`p = worker * pollers + j`), in the
    /// device-written allocation; its heartbeat is `all_pollers()` after.
    #[cfg(test)]
    pub(crate) fn state_word(&self, p: usize) -> usize {
        self.states_at + p
    }

    /// The first pack word of global slot `slot` (`ring * capacity +
    /// index`), in either allocation's pack section.
    pub(crate) fn pack_at(&self, slot: usize, device_written: bool) -> usize {
        let base = if device_written {
            self.results_at
        } else {
            self.args_at
        };
        base + slot * PACK_TASKS
    }

    /// The first word of global slot `slot`'s input area (host-written
    /// allocation) and of its output area (device-written).
    #[cfg(test)]
    pub(crate) fn io_at(&self, slot: usize) -> (usize, usize) {
        let (in_words, out_words) = Self::io_area_words(self.io);
        (
            self.io_in_at + slot * in_words,
            self.io_out_at + slot * out_words,
        )
    }

    /// Ring `w % rings`, and the first of worker `w`'s sequence numbers
    /// (after the start) and the stride between them (RINGS in
    /// pkq_layout.h).
    #[cfg(test)]
    pub(crate) fn worker_ring(&self, w: usize) -> (usize, u64, u64) {
        let per_ring = self.workers / self.rings;
        (w % self.rings, (w / self.rings) as u64, per_ring as u64)
    }

    /// Every ring's queue over the two allocations, with the copies of its
    /// slots when there are several pollers.
    pub(crate) fn queues(&self, h2d: &Words, d2h: &Words) -> Box<[Queue]> {
        let cap = self.geo.capacity();
        let section = |w: &Words, at: usize, len: usize| {
            w.sub(at, len).expect("a section inside its allocation")
        };
        (0..self.rings)
            .map(|r| {
                let slots = |copy: usize| {
                    section(
                        h2d,
                        copy * self.copy_words() + r * cap * SLOT_WORDS,
                        cap * SLOT_WORDS,
                    )
                };
                let mem = [
                    slots(0),
                    section(d2h, r * cap * CQE_WORDS, cap * CQE_WORDS),
                    section(h2d, self.pack_at(r * cap, false), cap * PACK_TASKS),
                    section(d2h, self.pack_at(r * cap, true), cap * PACK_TASKS),
                ];
                let copies = (1..self.pollers).map(slots).collect();
                let (in_words, out_words) = Self::io_area_words(self.io);
                let io = [
                    section(h2d, self.io_in_at + r * cap * in_words, cap * in_words),
                    section(d2h, self.io_out_at + r * cap * out_words, cap * out_words),
                ];
                Queue::new(self.geo, mem, self.start_seq)
                    .with_copies(copies)
                    .with_io(io, self.io)
            })
            .collect()
    }

    /// The control lines, poller states and heartbeats.
    pub(crate) fn control(&self, h2d: &Words, d2h: &Words) -> [Words; 3] {
        let n = self.all_pollers();
        let ctrl = h2d.sub(self.ctrl_at, n * CTRL_BYTES / 8);
        let states = d2h.sub(self.states_at, n);
        let beats = d2h.sub(self.states_at + n, n);
        [ctrl, states, beats].map(|w| w.expect("a section inside its allocation"))
    }

    /// The kernel's parameters for the allocations at device addresses
    /// `h2d` and `d2h`, with an idle spin and longest sleep in ns (0, 0:
    /// always spin).
    pub(crate) fn params(
        &self,
        h2d: u64,
        d2h: u64,
        idle_spin_ns: u32,
        idle_sleep_max_ns: u32,
        io_scratch: u64,
    ) -> KernelParams {
        let at = |base: u64, word: usize| base + 8 * word as u64;
        let (in_words, out_words) = Self::io_area_words(self.io);
        KernelParams {
            sq: h2d,
            cq: d2h,
            ctrl: at(h2d, self.ctrl_at),
            states: at(d2h, self.states_at),
            start_seq: self.start_seq,
            capacity_log2: self.geo.log2(),
            workers: self.workers as u32,
            pollers: self.pollers as u32,
            idle_spin_ns,
            idle_sleep_max_ns,
            rings: self.rings as u32,
            pack_args: at(h2d, self.args_at),
            pack_results: at(d2h, self.results_at),
            io_in: at(h2d, self.io_in_at),
            io_out: at(d2h, self.io_out_at),
            io_scratch,
            // All at most IO_MAX_BYTES (checked by the builder).
            io_in_words: in_words as u32,
            io_out_words: out_words as u32,
            io_in_bytes: self.io.0 as u32,
            io_out_bytes: self.io.1 as u32,
            // A lane of warps; a wider one sets its groups (`runtime::start`).
            groups: 0,
            group_blocks: 0,
            group_warps: 0,
            trace_log: 0,
        }
    }
}
