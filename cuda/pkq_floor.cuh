// pkq_floor.cuh: the raw floor, a bare one-word ping-pong through mapped
// memory (mirrors src/floor.rs). It measures what any design pays: one PCIe
// read that sees the host's write, plus one posted write back.
#pragma once
#include <cstdint>

#include "pkq_layout.h"
#include "pkq_mem.cuh"

namespace pkq {

// ping: written only by the host (increasing values, then PKQ_FLOOR_STOP),
// polled by poller j of k (a warp's first thread each), one load in flight
// each, started 1/k of a read round trip apart (as pkq's pollers are).
// pong[j]: written only by poller j, polled by the host, which takes the
// largest. Separate allocations, so ping and pong never share a line.
// Aligned 8-byte words: no torn read. The stop value is the loop's exit.
__device__ __forceinline__ void floor_echo(const uint64_t* ping, uint64_t* pong, uint32_t j, uint32_t k) {
    if (j > 0) spin_cycles(read_round_trip_cycles(ping) * j / k);
    uint64_t last = 0;
    for (;;) {
        const uint64_t v = load_sys(ping);
        if (v > last) {
            store_sys(pong + j, v);
            last = v;
            if (v == PKQ_FLOOR_STOP) return;
        }
    }
}

}  // namespace pkq

namespace pkq {

// What the device side of mapped-memory traffic costs, by the GPU's own
// clock, for `iters` repetitions of each (totals in ns, to out[0..5]), and
// the smallest step of %globaltimer (out[6]), and the SM clock in MHz
// (out[7]).
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
    // 6: the smallest nonzero step between two globaltimer reads.
    uint64_t step = ~0ull, last = globaltimer();
    for (uint32_t i = 0; i < iters; ++i) {
        const uint64_t now = globaltimer();
        if (now != last) {
            step = now - last < step ? now - last : step;
            last = now;
        }
    }
        out[6] = step;
    // 7: SM clock cycles over ~100 us of global time (the SM's clock rate).
    const uint64_t g0 = globaltimer();
    const int64_t c0 = clock64();
    while (globaltimer() - g0 < 100000) {
    }
    out[7] = static_cast<uint64_t>(clock64() - c0) * 1000 / (globaltimer() - g0);
}

}  // namespace pkq
