// pkq_floor.cuh: the raw floor, a bare one-word ping-pong through mapped
// memory (mirrors src/floor.rs). It measures what any design pays: one PCIe
// read that sees the host's write, plus one posted write back.
#pragma once
#include <cstdint>

#include "pkq_layout.h"
#include "pkq_mem.cuh"

namespace pkq {

// ping: written only by the host (increasing values, then PKQ_FLOOR_STOP),
// polled by this one thread. pong: written only by this thread, polled by
// the host. Separate allocations, so never one cache line. Aligned 8-byte
// words: no torn read. The stop value is the loop's exit.
__device__ __forceinline__ void floor_echo(const uint64_t* ping, uint64_t* pong) {
    uint64_t last = 0;
    for (;;) {
        const uint64_t v = load_sys(ping);
        if (v != last) {
            store_sys(pong, v);
            last = v;
            if (v == PKQ_FLOOR_STOP) return;
        }
    }
}

}  // namespace pkq

namespace pkq {

// What the device side of mapped-memory traffic costs, by the GPU's own
// clock, for `iters` repetitions of each (totals in ns, to out[0..5]).
// ro: a host word the host never writes. wo: a host word only this thread
// writes. out: results, read by the host after the kernel ended.
__device__ __forceinline__ void measure_costs(const uint64_t* ro, uint64_t* wo, uint64_t* out,
                                              uint32_t iters) {
    // 0: dependent relaxed loads (each address depends on the last value).
    const uint64_t* p = ro;
    uint64_t v = 0;
    uint64_t t0 = globaltimer();
    for (uint32_t i = 0; i < iters; ++i) {
        v = load_sys(p);
        p = ro + (v >> 63);
    }
    out[0] = globaltimer() - t0;
    // 1: relaxed stores: posted, so this is their issue cost.
    t0 = globaltimer();
    for (uint32_t i = 0; i < iters; ++i) store_sys(wo, i);
    out[1] = globaltimer() - t0;
    // 2: a relaxed store, then fence.sc.sys (what data-then-flag would pay).
    t0 = globaltimer();
    for (uint32_t i = 0; i < iters; ++i) {
        store_sys(wo, i);
        asm volatile("fence.sc.sys;" ::: "memory");
    }
    out[2] = globaltimer() - t0;
    // 3: release stores at system scope.
    t0 = globaltimer();
    for (uint32_t i = 0; i < iters; ++i) {
        asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(wo), "l"(static_cast<uint64_t>(i)) : "memory");
    }
    out[3] = globaltimer() - t0;
    // 4: a relaxed store, then a GPU-scope fence (__threadfence).
    t0 = globaltimer();
    for (uint32_t i = 0; i < iters; ++i) {
        store_sys(wo, i);
        __threadfence();
    }
    out[4] = globaltimer() - t0;
    out[5] = v;  // keeps the load chain alive
}

}  // namespace pkq
