// pkq_worker.cuh: the resident worker loop (the device half of src/proto/queue.rs).
// One warp is one worker; worker w of W serves ring r = w % R of the R
// rings, sequence numbers start + w / R, start + w / R + W / R, ... in
// order, each in slot r * capacity + (seq & (capacity - 1)) (pkq_layout.h).
#pragma once
#include <cstdint>

#include "pkq_handler.cuh"
#include "pkq_layout.h"
#include "pkq_mem.cuh"
#include "pkq_slot.cuh"

namespace pkq {

constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr uint64_t SEQ_MASK = (1ull << PKQ_SEQ_BITS) - 1;

// One poll, one load instruction: lanes 0..7 read the slot's eight tagged
// words (one coalesced 64-byte read) and, when `with_stop`, lane 8 reads the
// stop word alongside, so the stop check adds no round trip.
__device__ __forceinline__ uint64_t poll_load(const uint64_t* addr, uint32_t lane, bool with_stop) {
    uint64_t w = 0;
    if (lane < PKQ_SLOT_WORDS || (lane == PKQ_SLOT_WORDS && with_stop)) w = load_sys(addr);
    return w;
}

enum class Wait { Pending, Task, Stop, BadTag };

// Whether the poll read the stop word set (lane PKQ_SLOT_WORDS's word).
__device__ __forceinline__ bool stop_in(uint64_t w) {
    return __shfl_sync(FULL_MASK, w, PKQ_SLOT_WORDS) == PKQ_STOP_VALUE;
}

// What one poll result says about the slot of lap `tag` (warp-uniform). A
// whole slot is judged first: judging the stop word first cost ~0.4 us of
// round trip on the H100, for reasons not understood (benches/NOTES.md); a
// stop read with a whole slot is honoured by `serve` instead. `copy`: the
// slot is a copy other than the first, which may also hold the lap before
// the one before (COPIES in pkq_layout.h).
__device__ __forceinline__ Wait judge(uint64_t w, uint32_t lane, uint32_t tag, bool copy) {
    const uint32_t t = tag_of(w);
    // Every word carries this lap's tag: the slot is whole.
    if (__all_sync(FULL_MASK, lane >= PKQ_SLOT_WORDS || t == tag)) return Wait::Task;
    const uint32_t before = (tag + 0xff) & 0xff;
    const uint32_t lagging = copy ? (tag + 0xfe) & 0xff : before;
    if (__any_sync(FULL_MASK, lane < PKQ_SLOT_WORDS && t != tag && t != before && t != lagging))
        return Wait::BadTag;
    if (stop_in(w)) return Wait::Stop;
    return Wait::Pending;
}

// Runs the `count` tasks of a pack (PACKS in pkq_layout.h) in the slot at
// index `slot`, one after another, each by the whole warp (beating after
// each, as after a single task: back-to-back tasks are not a stall): lane
// j loads task j's argument word and stores its result word; then a system
// fence, so the results land before the completion. Returns the pack's
// outcome: OK with the mask of failed tasks as its value, or BAD_ARGS (and
// `pack` 0) for a header no host writes.
template <class Handlers, class Beat>
__device__ __forceinline__ Outcome run_pack(const pkq_params& p, uint64_t slot, uint32_t lane,
                                            uint32_t header, uint32_t count,
                                            const Handlers& handlers, const Beat& beat,
                                            uint32_t& pack) {
    const uint32_t op = static_cast<uint32_t>(header & 0xffff);
    const uint32_t len = static_cast<uint32_t>(header >> PKQ_HEADER_LEN_SHIFT) & 0xff;
    if (count > PKQ_PACK_TASKS || len > PKQ_PACK_ARG_BYTES) {
        pack = 0;
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    const uint64_t at = slot * PKQ_PACK_TASKS + lane;
    uint64_t arg = 0;
    if (len != 0) {
        // The argument words carry no tag: order their loads after the
        // slot's, which the host published after them.
        __threadfence_system();
        if (lane < count) arg = load_sys(reinterpret_cast<const uint64_t*>(p.pack_args) + at);
    }
    uint64_t mine = 0;
    uint32_t failed = 0;
    for (uint32_t j = 0; j < count; ++j) {
        Context ctx;
        ctx.lane = lane;
        ctx.op = op;
        ctx.len = len;
        ctx.words[0] = __shfl_sync(FULL_MASK, arg, j);
#pragma unroll
        for (int k = 1; k < PKQ_ARGS_BYTES / 8; ++k) ctx.words[k] = 0;
        ctx.input = nullptr;
        ctx.in_len = 0;
        ctx.output = nullptr;
        ctx.out_cap = 0;
        const Outcome o = op == PKQ_OP_NOP ? ok() : handlers(ctx);
        const uint32_t status = __shfl_sync(FULL_MASK, o.status, 0);
        const uint64_t value = __shfl_sync(FULL_MASK, o.value, 0);
        if (lane == j) mine = status == PKQ_STATUS_OK ? value : status;
        if (status != PKQ_STATUS_OK) failed |= 1u << j;
        beat();
    }
    if (lane < count) store_sys(reinterpret_cast<uint64_t*>(p.pack_results) + at, mine);
    // Every lane's result stores, and any device-memory writes of the
    // handlers, before the completion (cumulative through the barrier).
    __syncwarp();
    __threadfence_system();
    pack = count;
    return ok(failed);
}

// IO (pkq_layout.h). Loads of host memory each lane keeps in flight while it
// reads an input.
constexpr uint32_t IO_LOADS = 8;
// Loads of one input word before a word of another lap fails the task: the
// producer wrote the input before the slot, so it is there; a load may
// still return an older copy under the memory model (no fence orders it
// after the slot's), so it is read again.
constexpr uint32_t IO_RETRIES = 1024;

// Host memory is read and written in whole runs of the warp: load or store
// j of lane l touches word 32 j + l of a block of 256 words (32 groups of
// 8), so each instruction is one 256-byte request; shuffles hand each lane
// the 8 words of group l of the block (and back). A lane's own 8 words, one
// a request, would cost a request a word.

// Decodes a task's input, `len` bytes in tagged words of lap `tag` at
// `area`, into `dst` (this warp's scratch, a multiple of 56 bytes): each
// group of eight words becomes seven 8-byte words of `dst`. Whether every
// word carried the tag (warp-uniform).
__device__ __forceinline__ bool io_read(const uint64_t* area, uint32_t len, uint32_t tag,
                                        uint64_t* dst, uint32_t lane) {
    const uint32_t words = (len + PKQ_IO_WORD_BYTES - 1) / PKQ_IO_WORD_BYTES;
    bool whole = true;
    for (uint32_t base = 0; base < words; base += 256) {
        uint64_t w[8];
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) {
            const uint32_t k = base + 32 * j + lane;
            w[j] = k < words ? load_sys(area + k) : tagged(0, tag);
        }
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) {
            const uint32_t k = base + 32 * j + lane;
            for (uint32_t r = 0; tag_of(w[j]) != tag && r < IO_RETRIES && k < words; ++r)
                w[j] = load_sys(area + k);
            whole &= tag_of(w[j]) == tag;
        }
        // Group `lane` of the block: words 8 lane + m, held by lane
        // 8 (lane % 4) + m in register lane / 4.
        uint64_t c[8];
#pragma unroll
        for (uint32_t m = 0; m < 8; ++m) {
            uint64_t pick = 0;
#pragma unroll
            for (uint32_t j = 0; j < 8; ++j) {
                const uint64_t v = __shfl_sync(FULL_MASK, w[j], 8 * (lane % 4) + m);
                if (j == lane / 4) pick = v;
            }
            c[m] = pick;
        }
        const uint32_t g = base / 8 + lane;
        if (8 * g < words) {
            dst[7 * g + 0] = payload_word<0>(c);
            dst[7 * g + 1] = payload_word<1>(c);
            dst[7 * g + 2] = payload_word<2>(c);
            dst[7 * g + 3] = payload_word<3>(c);
            dst[7 * g + 4] = payload_word<4>(c);
            dst[7 * g + 5] = payload_word<5>(c);
            dst[7 * g + 6] = payload_word<6>(c);
        }
    }
    return __all_sync(FULL_MASK, whole);
}

// Writes a task's output of `len` bytes from `src` (this warp's scratch, a
// multiple of 56 bytes) as tagged words of lap `tag` at `area`: its length
// in word 0, then the stream from word 1, seven 8-byte words of `src` a
// group of eight; relaxed posted stores and no fence (the host checks every
// word's tag).
__device__ __forceinline__ void io_write(uint64_t* area, const uint64_t* src, uint32_t len,
                                         uint64_t lap, uint32_t lane) {
    const uint32_t tag = static_cast<uint32_t>(lap) & 0xff;
    const uint32_t words = (len + PKQ_IO_WORD_BYTES - 1) / PKQ_IO_WORD_BYTES;
    uint64_t* stream = area + 1;
    for (uint32_t base = 0; base < words; base += 256) {
        // Group `lane` of the block, as chunks.
        const uint32_t g = base / 8 + lane;
        uint64_t ch[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (8 * g < words) {
            uint64_t p[7];
#pragma unroll
            for (uint32_t j = 0; j < 7; ++j) p[j] = src[7 * g + j];
            ch[0] = chunk_of<0>(p);
            ch[1] = chunk_of<1>(p);
            ch[2] = chunk_of<2>(p);
            ch[3] = chunk_of<3>(p);
            ch[4] = chunk_of<4>(p);
            ch[5] = chunk_of<5>(p);
            ch[6] = chunk_of<6>(p);
            ch[7] = chunk_of<7>(p);
        }
        // Store j: word 32 j + lane of the block, chunk lane % 8 of group
        // 4 j + lane / 8.
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) {
            uint64_t pick = 0;
#pragma unroll
            for (uint32_t m = 0; m < 8; ++m) {
                const uint64_t v = __shfl_sync(FULL_MASK, ch[m], 4 * j + lane / 8);
                if (m == lane % 8) pick = v;
            }
            const uint32_t k = base + 32 * j + lane;
            if (k < words) store_sys(stream + k, tagged(pick, tag));
        }
    }
    // The stream before word 0, which names the lap: the host trusts the
    // stream once word 0 is this lap's (the area keeps older laps' words).
    __syncwarp();
    __threadfence_system();
    const uint64_t lap_bits = lap & ((1ull << PKQ_IO_LAP_BITS) - 1);
    if (lane == 0) store_sys(area, tagged(len | (lap_bits << PKQ_IO_LAP_SHIFT), tag));
}

// Runs an IO task (header bit PKQ_HEADER_IO_BIT): decodes its `in_len` input
// bytes into this warp's scratch, runs the handler with the input and room
// for its output, and writes the output (empty if the task failed) to the
// slot's output area. A bad input or an output over the room fails the task
// (PKQ_STATUS_BAD_ARGS).
template <class Handlers>
__device__ __forceinline__ Outcome run_io(const pkq_params& p, uint64_t slot, uint64_t seq,
                                          uint32_t warp, uint32_t lane, uint32_t in_len,
                                          Context& ctx, const Handlers& handlers) {
    const uint64_t lap = (seq & SEQ_MASK) >> p.capacity_log2;
    const uint32_t tag = static_cast<uint32_t>(lap) & 0xff;
    // The input's loads after the slot's (the producer wrote it first).
    if (in_len != 0) __threadfence_system();
    const auto room = [](uint32_t b) -> uint64_t {
        return (b + PKQ_IO_ROOM_ALIGN - 1) / PKQ_IO_ROOM_ALIGN * PKQ_IO_ROOM_ALIGN;
    };
    const uint64_t in_room = room(p.io_in_bytes);
    uint8_t* scratch = reinterpret_cast<uint8_t*>(p.io_scratch) + warp * (in_room + room(p.io_out_bytes));
    Outcome out;
    if (in_len > p.io_in_bytes ||
        !io_read(reinterpret_cast<const uint64_t*>(p.io_in) + slot * p.io_in_words, in_len, tag,
                 reinterpret_cast<uint64_t*>(scratch), lane)) {
        out = fail(PKQ_STATUS_BAD_ARGS);
    } else {
        // Every lane's decoded bytes, for every lane of the handler.
        __syncwarp();
        ctx.input = scratch;
        ctx.in_len = in_len;
        ctx.output = scratch + in_room;
        ctx.out_cap = p.io_out_bytes;
        out = handlers(ctx);
    }
    // Lane 0's outcome for all: lanes that disagree must not part ways in
    // the shuffles of io_write.
    uint32_t status = __shfl_sync(FULL_MASK, out.status, 0);
    const uint32_t out_len = __shfl_sync(FULL_MASK, out.out_len, 0);
    if (status == PKQ_STATUS_OK && out_len > p.io_out_bytes) {
        out = fail(PKQ_STATUS_BAD_ARGS);
        status = PKQ_STATUS_BAD_ARGS;
    }
    // Every lane's output bytes, for the lanes that write them out.
    __syncwarp();
    io_write(reinterpret_cast<uint64_t*>(p.io_out) + slot * p.io_out_words,
             reinterpret_cast<const uint64_t*>(scratch + in_room),
             status == PKQ_STATUS_OK ? out_len : 0, lap, lane);
    return out;
}

// Reads a claim counter that other warps of the block update, as one value
// for the whole warp: lanes reading it each for themselves could read it at
// different moments (independent thread scheduling), part ways, and leave a
// later __shfl_sync(FULL_MASK) waiting for lanes that never come.
__device__ __forceinline__ uint64_t read_claim(const unsigned long long* claim) {
    const uint64_t v = *reinterpret_cast<const volatile unsigned long long*>(claim);
    return __shfl_sync(FULL_MASK, v, 0);
}

// Serves tasks until the host's stop word is set (or a slot holds a tag that
// is neither the expected lap nor the one before: corruption). `Handlers`
// is called by all 32 lanes with the task's Context and returns the
// Outcome; NOP (op 0) is answered here, without it.
//
// A worker is `p.pollers` warps of one block ("pollers"), started a
// fraction of a read round trip apart, all polling the worker's next slot,
// each in a copy of the slots of its own (COPIES in pkq_layout.h), with one
// load in flight each: a task is seen on average after RTT/2P
// rather than RTT/2. (Several loads in flight from one warp gain nothing:
// they are served one after another.) The first poller to see a whole slot
// claims it with a compare-and-swap on the worker's counter in shared
// memory (`claim`: tasks of this worker taken so far) if the worker's task
// before it has completed (`done`: tasks of this worker completed so far),
// and runs it, so a worker runs its tasks one after another whatever its
// pollers (no poller waits for another: one that finds the slot whole
// before its turn polls again); the others see the counter move and go on
// to the next slot. A poller beats while it polls, not while it runs a task.
// `scratch`: 32 words of shared memory of this warp's own (see the claim
// below).
template <class Handlers>
__device__ __forceinline__ void serve(const pkq_params& p, uint32_t worker, uint32_t poller,
                                      unsigned long long* claim, unsigned long long* done,
                                      unsigned long long* scratch, const Handlers& handlers) {
    const uint32_t lane = threadIdx.x & 31;
    // This poller's copy of the slots (COPIES in pkq_layout.h).
    const uint64_t* own_sq = reinterpret_cast<const uint64_t*>(p.sq) +
                             (static_cast<uint64_t>(p.rings) << p.capacity_log2) * PKQ_SLOT_WORDS * poller;
    uint64_t* cq = reinterpret_cast<uint64_t*>(p.cq);
    const uint64_t* stop_word =
        reinterpret_cast<const uint64_t*>(p.ctrl) + worker * (PKQ_CTRL_BYTES / 8) + PKQ_CTRL_STOP;
    uint64_t* state = reinterpret_cast<uint64_t*>(p.states) + worker * p.pollers + poller;
    uint64_t* heartbeat = state + p.workers * p.pollers;
    const uint64_t mask = (1ull << p.capacity_log2) - 1;
    // This worker's ring, its first slot, and its place among the ring's workers.
    const uint64_t ring_base = static_cast<uint64_t>(worker % p.rings) << p.capacity_log2;
    const uint64_t ring_workers = p.workers / p.rings;
    const uint64_t first = worker / p.rings;
    const bool shared_claims = p.pollers > 1;
    if (poller > 0) {
        const int64_t rtt = __shfl_sync(FULL_MASK, read_round_trip_cycles(stop_word), 0);
        spin_cycles(rtt * poller / p.pollers);
        __syncwarp();
    }

    uint64_t last_beat_clk = __shfl_sync(FULL_MASK, clock64(), 0);
    if (lane == 0) {
        store_sys(heartbeat, globaltimer());
        store_sys(state, PKQ_WORKER_RUNNING);
    }
    // Heartbeat: a posted store every PKQ_HEARTBEAT_CYCLES, judged every 8
    // polls, every sleeping poll and after every task (a worker running
    // back-to-back long tasks polls once per task).
    // The beat carries the poller's position in its state word: it is for
    // diagnostics only, so it costs no store per task (dropping that store
    // changed no measured rate; benches/NOTES.md).
    uint64_t k = 0;  // this worker's tasks taken so far, as this warp knows it
    auto beat_if_due = [&]() {
        const uint64_t clk = __shfl_sync(FULL_MASK, clock64(), 0);
        if (clk - last_beat_clk >= PKQ_HEARTBEAT_CYCLES) {
            if (lane == 0) {
                store_sys(heartbeat, globaltimer());
                store_sys(state, PKQ_WORKER_RUNNING | (k << PKQ_STATE_BITS));
            }
            last_beat_clk = clk;
        }
    };
    uint64_t final_state = PKQ_WORKER_STOPPED;
    uint32_t polls = 0;
    // Idle policy state: kept across a slot seen whole before its turn (the
    // worker runs a long task: this poller idles), reset once a task of
    // this worker is taken.
    uint64_t idle_since = 0;
    uint32_t sleep_ns = 0;
    for (;;) {
        if (shared_claims) {
            // Another poller took a task: the worker is busy, this poller is
            // not idle (a slot seen before its turn leaves k as it was).
            const uint64_t taken_to = max(k, read_claim(claim));
            if (taken_to != k) {
                idle_since = 0;
                sleep_ns = 0;
            }
            k = taken_to;
        }
        const uint64_t seq = (p.start_seq + first + k * ring_workers) & SEQ_MASK;
        const uint64_t slot = ring_base + (seq & mask);
        const uint32_t tag = static_cast<uint32_t>(seq >> p.capacity_log2) & 0xff;
        const uint64_t* addr =
            lane < PKQ_SLOT_WORDS ? own_sq + slot * PKQ_SLOT_WORDS + lane : stop_word;

        Wait outcome = Wait::Pending;
        uint64_t w = 0;
        uint64_t seen_done = 0;
        bool taken = false;
        while (outcome == Wait::Pending) {
            // Every 8th poll, and every poll while sleeping between polls.
            if ((++polls & 7) == 0 || sleep_ns != 0) {
                beat_if_due();
                // Idle policy: after idle_spin_ns of waiting, sleep between
                // polls, doubling up to idle_sleep_max_ns.
                if (p.idle_sleep_max_ns != 0 && sleep_ns == 0) {
                    const uint64_t now = __shfl_sync(FULL_MASK, globaltimer(), 0);
                    if (idle_since == 0) {
                        idle_since = now;
                    } else if (now - idle_since >= p.idle_spin_ns) {
                        sleep_ns = min(64u, p.idle_sleep_max_ns);
                    }
                }
            }
            if (sleep_ns != 0) {
                __nanosleep(sleep_ns);
                sleep_ns = min(2 * sleep_ns, p.idle_sleep_max_ns);
            }
            w = poll_load(addr, lane, polls % PKQ_STOP_POLL_INTERVAL == 0);
            // The worker's tasks completed so far, read while the poll is in
            // flight (a shared-memory load, back long before it): the turn
            // check below then costs the way to the task nothing.
            if (shared_claims) seen_done = *reinterpret_cast<volatile unsigned long long*>(done);
            outcome = judge(w, lane, tag, poller > 0);  // waits for the load
            // Read after the load returned: if another poller took this task
            // meanwhile, the slot may since hold a later lap, so a bad tag
            // says nothing until the counter says this task is not taken.
            // A whole slot is settled by the claim's compare-and-swap, and a
            // poller that keeps polling a taken task's slot learns of it
            // every 8th poll (or when its poll sees the task), so neither
            // pays this read on the way to the task.
            if (shared_claims && (outcome == Wait::BadTag || (polls & 7) == 0) &&
                read_claim(claim) > k) {
                taken = true;
                break;
            }
        }
        if (taken) {
            idle_since = 0;
            sleep_ns = 0;
            continue;
        }
        if (outcome == Wait::BadTag) {
            final_state = PKQ_WORKER_BAD_TAG;
            break;
        }
        // Stop, or a whole slot read with the stop word set (judge returns
        // Stop only when it is set): the stop word outranks a task read with
        // it, so a cancel or a fault stops a worker that still has tasks
        // queued.
        if (stop_in(w)) break;

        // Lane 0 alone writes the completion, from its own clock readings
        // and handler outcome: nothing else on the way from the poll to the
        // completion needs a shuffle (each costs that path tens of cycles;
        // benches/NOTES.md).
        const uint64_t t_start = globaltimer();
        if (shared_claims) {
            // Every lane issues the compare-and-swap, lane 0 on the claim and
            // the others on scratch words of their own, whose outcome nobody
            // reads: the same atomic from lane 0 alone (a divergent branch,
            // which ptxas wraps in a yielding convergence region) cost ~450
            // more SM cycles between the poll and the completion. Lane 0
            // claims only when it is the task's turn: the worker's task
            // before it completed as of the poll (`done`, read while the
            // poll was in flight), so a worker runs its tasks one after
            // another; otherwise it swaps its own scratch word and polls
            // again, and the task goes to the first poll after its turn.
            const bool turn = seen_done == k;
            unsigned long long* target = lane == 0 && turn ? claim : scratch + lane;
            const unsigned long long old = atomicCAS(target, k, k + 1);
            // The claim is seen by the block before the completion can be (a
            // poller that then reads the next lap sees it taken); and the
            // task before's writes (`done` moved after them) before this
            // task's.
            __threadfence_block();
            // Lane 0's verdict, in the claim's one shuffle: claimed (1), or
            // not (0: another poller won, or not its turn yet).
            if (__shfl_sync(FULL_MASK, turn && old == k ? 1u : 0u, 0) == 0) continue;
            // Every lane after lane 0's look at `done` and its fence: the
            // task before's device-memory writes are seen by all 32 lanes.
            __syncwarp();
        }
        // The header's low 32 bits (op, length, pack count; chunk 0 is lane
        // 0's word), warp-uniform: what the warp does next depends on them.
        const uint32_t h0 = __shfl_sync(FULL_MASK, static_cast<uint32_t>(w), 0);
        uint32_t pack = (h0 >> PKQ_HEADER_PACK_SHIFT) & 0xff;
        // A NOP answers at once, an IO task's too (it has no output).
        const bool nop = pack == 0 && (h0 & 0xffff) == PKQ_OP_NOP;
        bool io = false;
        Outcome out;
        if (pack != 0) {
            out = run_pack(p, slot, lane, h0, pack, handlers, beat_if_due, pack);
        } else if (nop) {
            out = ok();
        } else {
            uint64_t c[PKQ_SLOT_WORDS];
#pragma unroll
            for (int j = 0; j < PKQ_SLOT_WORDS; ++j) c[j] = __shfl_sync(FULL_MASK, w, j);
            Context ctx = decode_slot(c, lane);
            // Header bits 32..56: an IO task's flag and input length.
            const uint32_t h1 = static_cast<uint32_t>(c[0] >> 32) & 0xffffff;
            io = (h1 >> (PKQ_HEADER_IO_BIT - 32)) & 1;
            if (io && p.io_in_words + p.io_out_words != 0) {
                out = run_io(p, slot, seq, worker * p.pollers + poller, lane,
                             h1 & ((1u << PKQ_HEADER_IN_BITS) - 1), ctx, handlers);
            } else if (io) {
                out = fail(PKQ_STATUS_BAD_ARGS);  // no IO areas: no host sends this
            } else {
                out = handlers(ctx);
            }
        }
        const uint64_t t_end = globaltimer();
        if (!nop && __any_sync(FULL_MASK, out.wrote_device_memory)) {
            // Order every lane's device-memory writes before the completion
            // (cumulative through the warp barrier); GPU scope suffices for
            // work the host issues after it sees the completion.
            __syncwarp();
            __threadfence();
        }
        if (lane == 0) {
            const uint32_t flags = io && p.io_out_words != 0 ? PKQ_CQE_OUTPUT : 0;
            store_completion(cq + slot * PKQ_CQE_WORDS, tag, out.status, pack, out.value, t_start,
                             t_end, flags);
        }
        if (shared_claims) {
            // The next task of this worker may be claimed: every lane's
            // writes first (cumulative through the warp barrier), for the
            // poller that runs it.
            __syncwarp();
            __threadfence_block();
            if (lane == 0) atomicExch(done, k + 1);
        }
        ++k;
        idle_since = 0;
        sleep_ns = 0;
        beat_if_due();
    }
    if (lane == 0) store_sys(state, final_state | (k << PKQ_STATE_BITS));
}

// The body of a resident kernel serving `Handlers` (see PKQ_KERNEL in
// pkq.cuh): `pollers` warps per worker, PKQ_MAX_WARPS_PER_BLOCK warps at most
// per block, a worker's pollers always in one block (both powers of two),
// sharing the worker's claim counter in shared memory.
template <class Handlers>
__device__ __forceinline__ void run_workers(const pkq_params& p, const Handlers& handlers) {
    __shared__ unsigned long long claims[PKQ_MAX_WARPS_PER_BLOCK];
    __shared__ unsigned long long dones[PKQ_MAX_WARPS_PER_BLOCK];
    __shared__ unsigned long long scratch[PKQ_MAX_WARPS_PER_BLOCK * 32];
    const uint32_t warp_in_block = threadIdx.x >> 5;
    const uint32_t warp = blockIdx.x * (blockDim.x >> 5) + warp_in_block;
    if (threadIdx.x < PKQ_MAX_WARPS_PER_BLOCK) {
        claims[threadIdx.x] = 0;
        dones[threadIdx.x] = 0;
    }
    __syncthreads();
    const uint32_t worker = warp / p.pollers;
    if (worker >= p.workers) return;
    serve(p, worker, warp % p.pollers, &claims[warp_in_block / p.pollers],
          &dones[warp_in_block / p.pollers], &scratch[warp_in_block * 32], handlers);
}

}  // namespace pkq
