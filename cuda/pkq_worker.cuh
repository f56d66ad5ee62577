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

// Serves tasks until the host's stop word is set (or a slot holds a tag that
// is neither the expected lap nor the one before: corruption). `Handlers`
// is called by all 32 lanes with the decoded task and returns the Outcome.
template <class Handlers>
__device__ __forceinline__ void serve(const pkq_params& p, uint32_t worker, const Handlers& handlers) {
    const uint32_t lane = threadIdx.x & 31;
    const uint64_t* sq = reinterpret_cast<const uint64_t*>(p.sq);
    uint64_t* cq = reinterpret_cast<uint64_t*>(p.cq);
    const uint64_t* stop_word = reinterpret_cast<const uint64_t*>(p.ctrl) + PKQ_CTRL_STOP;
    uint64_t* state = reinterpret_cast<uint64_t*>(p.states) + worker;
    const uint64_t mask = (1ull << p.capacity_log2) - 1;

    if (lane == 0) store_sys(state, PKQ_WORKER_RUNNING);
    uint64_t seq = (p.start_seq + worker) & SEQ_MASK;
    uint64_t final_state = PKQ_WORKER_STOPPED;
    uint32_t idle = 0;
    for (;;) {
        const uint64_t slot = seq & mask;
        const uint32_t tag = static_cast<uint32_t>(seq >> p.capacity_log2) & 0xff;
        const bool poll_stop = ++idle == PKQ_STOP_POLL_INTERVAL;
        if (poll_stop) idle = 0;
        // One load instruction: lanes 0..7 read the slot's eight tagged words
        // (one coalesced 64-byte read) and, when due, lane 8 reads the stop
        // word alongside, so the stop check adds no round trip.
        const uint64_t* addr = lane < PKQ_SLOT_WORDS ? sq + slot * PKQ_SLOT_WORDS + lane : stop_word;
        uint64_t w = 0;
        if (lane < PKQ_SLOT_WORDS || (lane == PKQ_SLOT_WORDS && poll_stop)) w = load_sys(addr);
        const uint32_t t = tag_of(w);
        if (__all_sync(FULL_MASK, lane >= PKQ_SLOT_WORDS || t == tag)) {
            // Every word carries this lap's tag: the slot is whole.
            uint64_t c[PKQ_SLOT_WORDS];
#pragma unroll
            for (int k = 0; k < PKQ_SLOT_WORDS; ++k) c[k] = __shfl_sync(FULL_MASK, w, k);
            const uint64_t t_start = globaltimer();
            const Task task = decode_slot(c);
            const Outcome out = handlers(task, lane);
            const uint64_t t_end = globaltimer();
            if (out.wrote_device_memory) {
                // Order every lane's device-memory writes before the
                // completion (cumulative through the warp barrier); GPU scope
                // suffices for work the host issues after it sees the
                // completion.
                __syncwarp();
                __threadfence();
            }
            if (lane < PKQ_CQE_WORDS) {
                store_sys(cq + slot * PKQ_CQE_WORDS + lane,
                          completion_word(lane, tag, out.status, out.value, t_start, t_end));
            }
            seq = (seq + p.workers) & SEQ_MASK;
            idle = 0;
            continue;
        }
        const uint32_t before = (tag + 0xff) & 0xff;
        if (__any_sync(FULL_MASK, lane < PKQ_SLOT_WORDS && t != tag && t != before)) {
            final_state = PKQ_WORKER_BAD_TAG;
            break;
        }
        if (__shfl_sync(FULL_MASK, w, PKQ_SLOT_WORDS) == PKQ_STOP_VALUE) break;
    }
    if (lane == 0) store_sys(state, final_state);
}

}  // namespace pkq
