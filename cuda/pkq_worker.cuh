// pkq_worker.cuh: the resident worker loop (the device half of src/queue.rs).
// One warp is one worker; worker w of W serves sequence numbers
// start + w, start + w + W, ... in order, each in slot seq & (capacity - 1).
#pragma once
#include <cstdint>

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

// What one poll result says about the slot of lap `tag` (warp-uniform).
__device__ __forceinline__ Wait judge(uint64_t w, uint32_t lane, uint32_t tag) {
    const uint32_t t = tag_of(w);
    // Every word carries this lap's tag: the slot is whole.
    if (__all_sync(FULL_MASK, lane >= PKQ_SLOT_WORDS || t == tag)) return Wait::Task;
    const uint32_t before = (tag + 0xff) & 0xff;
    if (__any_sync(FULL_MASK, lane < PKQ_SLOT_WORDS && t != tag && t != before)) return Wait::BadTag;
    if (__shfl_sync(FULL_MASK, w, PKQ_SLOT_WORDS) == PKQ_STOP_VALUE) return Wait::Stop;
    return Wait::Pending;
}

// Serves tasks until the host's stop word is set (or a slot holds a tag that
// is neither the expected lap nor the one before: corruption). `Handlers`
// is called by all 32 lanes with the decoded task and returns the Outcome.
//
// While it waits for a slot, the worker keeps K loads of it in flight,
// issued 1/K of a read round trip apart (measured at start), and always
// checks the oldest: a write is seen on average RTT/2K after it lands
// instead of RTT/2, without a second warp or any atomic.
template <int K, class Handlers>
__device__ __forceinline__ void serve(const pkq_params& p, uint32_t worker, const Handlers& handlers) {
    const uint32_t lane = threadIdx.x & 31;
    const uint64_t* sq = reinterpret_cast<const uint64_t*>(p.sq);
    uint64_t* cq = reinterpret_cast<uint64_t*>(p.cq);
    const uint64_t* stop_word = reinterpret_cast<const uint64_t*>(p.ctrl) + PKQ_CTRL_STOP;
    uint64_t* state = reinterpret_cast<uint64_t*>(p.states) + worker;
    const uint64_t mask = (1ull << p.capacity_log2) - 1;
    // A read round trip in SM cycles: measured now, then kept current from
    // the period of each polling round (the SM clock changes with boost).
    int64_t rtt_cycles = K > 1 ? read_round_trip_cycles(stop_word) : 0;

    if (lane == 0) store_sys(state, PKQ_WORKER_RUNNING);
    uint64_t seq = (p.start_seq + worker) & SEQ_MASK;
    uint64_t final_state = PKQ_WORKER_STOPPED;
    uint32_t polls = 0;
    for (;;) {
        const uint64_t slot = seq & mask;
        const uint32_t tag = static_cast<uint32_t>(seq >> p.capacity_log2) & 0xff;
        const uint64_t* addr = lane < PKQ_SLOT_WORDS ? sq + slot * PKQ_SLOT_WORDS + lane : stop_word;

        uint64_t w[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (k > 0) spin_cycles(rtt_cycles / K);
            w[k] = poll_load(addr, lane, ++polls % PKQ_STOP_POLL_INTERVAL == 0);
        }
        Wait outcome = Wait::Pending;
        uint64_t got = 0;
        uint64_t idle_since = 0;
        uint32_t sleep_ns = 0;
        int64_t round_start = K > 1 ? clock64() : 0;
        while (outcome == Wait::Pending) {
            if (K > 1 && sleep_ns == 0) {
                // Each round waits for K loads issued a round apart: one
                // round is one read round trip.
                const int64_t now = clock64();
                rtt_cycles = (3 * rtt_cycles + (now - round_start)) / 4;
                round_start = now;
            }
#pragma unroll
            for (int k = 0; k < K; ++k) {
                if (outcome != Wait::Pending) continue;
                outcome = judge(w[k], lane, tag);
                if (outcome == Wait::Task) {
                    got = w[k];
                    continue;
                }
                if (outcome != Wait::Pending) continue;
                // Idle policy: after idle_spin_ns of waiting, sleep between
                // polls, doubling up to idle_sleep_max_ns.
                if (sleep_ns != 0) {
                    __nanosleep(sleep_ns);
                    sleep_ns = min(2 * sleep_ns, p.idle_sleep_max_ns);
                } else if (p.idle_sleep_max_ns != 0 && (polls & 7) == 0) {
                    const uint64_t now = globaltimer();
                    if (idle_since == 0) {
                        idle_since = now;
                    } else if (now - idle_since >= p.idle_spin_ns) {
                        sleep_ns = min(64u, p.idle_sleep_max_ns);
                    }
                }
                w[k] = poll_load(addr, lane, ++polls % PKQ_STOP_POLL_INTERVAL == 0);
            }
        }
        if (outcome == Wait::BadTag) {
            final_state = PKQ_WORKER_BAD_TAG;
            break;
        }
        if (outcome == Wait::Stop) break;

        const uint64_t t_start = globaltimer();
        // The op sits in the low bits of chunk 0: a NOP needs nothing else.
        const uint64_t c0 = __shfl_sync(FULL_MASK, got, 0);
        Task task;
        if ((c0 & 0xffff) == PKQ_OP_NOP) {
            task.op = PKQ_OP_NOP;
            task.len = 0;
        } else {
            uint64_t c[PKQ_SLOT_WORDS];
#pragma unroll
            for (int k = 0; k < PKQ_SLOT_WORDS; ++k) c[k] = __shfl_sync(FULL_MASK, got, k);
            task = decode_slot(c);
        }
        const Outcome out = handlers(task, lane);
        const uint64_t t_end = globaltimer();
        if (out.wrote_device_memory) {
            // Order every lane's device-memory writes before the completion
            // (cumulative through the warp barrier); GPU scope suffices for
            // work the host issues after it sees the completion.
            __syncwarp();
            __threadfence();
        }
        if (lane < PKQ_CQE_WORDS) {
            store_sys(cq + slot * PKQ_CQE_WORDS + lane,
                      completion_word(lane, tag, out.status, out.value, t_start, t_end));
        }
        seq = (seq + p.workers) & SEQ_MASK;
    }
    if (lane == 0) store_sys(state, final_state);
}

}  // namespace pkq
