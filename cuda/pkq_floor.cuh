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
// K loads of ping stay in flight, 1/K of a read round trip apart, the
// oldest checked first (as the workers poll slots), and are staggered anew
// after each echo (the host writes only after it saw the echo, so the loads
// still in flight then carry nothing new). Only a larger value counts.
template <int K>
__device__ __forceinline__ void floor_echo(const uint64_t* ping, uint64_t* pong) {
    // As in serve(): the round trip in SM cycles, kept current per round.
    int64_t rtt_cycles = K > 1 ? read_round_trip_cycles(ping) : 0;
    uint64_t w[K];
    uint64_t last = 0;
    for (;;) {
        // (Re)stagger the K loads, then poll until a new value arrives.
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (k > 0) spin_cycles(rtt_cycles / K);
            w[k] = load_sys(ping);
        }
        int64_t round_start = K > 1 ? clock64() : 0;
        bool fresh = false;
        while (!fresh) {
            if (K > 1) {
                const int64_t now = clock64();
                rtt_cycles = (3 * rtt_cycles + (now - round_start)) / 4;
                round_start = now;
            }
#pragma unroll
            for (int k = 0; k < K; ++k) {
                if (fresh) continue;
                const uint64_t v = w[k];
                if (v > last) {
                    store_sys(pong, v);
                    last = v;
                    if (v == PKQ_FLOOR_STOP) return;
                    fresh = true;
                    continue;
                }
                w[k] = load_sys(ping);
            }
        }
    }
}

// Separate pollers: poller j of K (its own warp or block) polls ping with
// one load in flight and echoes into its own word pong[j] (one writer per
// word); the host takes the largest. Pollers start 1/K of a round trip
// apart and keep that phase, since each reissues as soon as its load lands.
// With `lines`, poller j is one thread that polls K copies of ping, one per
// 128-byte line (the host writes them all), one load in flight per copy.
__device__ __forceinline__ void floor_echo_separate(const uint64_t* ping, uint64_t* pong, uint32_t j,
                                                    uint32_t k) {
    const int64_t rtt = read_round_trip_cycles(ping);
    spin_cycles(rtt * j / k);
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

template <int K>
__device__ __forceinline__ void floor_echo_lines(const uint64_t* ping, uint64_t* pong) {
    constexpr int LINE = 16;  // words: 128 bytes
    int64_t rtt_cycles = read_round_trip_cycles(ping);
    uint64_t w[K];
    uint64_t last = 0;
    for (;;) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (k > 0) spin_cycles(rtt_cycles / K);
            w[k] = load_sys(ping + k * LINE);
        }
        int64_t round_start = clock64();
        bool fresh = false;
        while (!fresh) {
            const int64_t now = clock64();
            rtt_cycles = (3 * rtt_cycles + (now - round_start)) / 4;
            round_start = now;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                if (fresh) continue;
                const uint64_t v = w[k];
                if (v > last) {
                    store_sys(pong, v);
                    last = v;
                    if (v == PKQ_FLOOR_STOP) return;
                    fresh = true;
                    continue;
                }
                w[k] = load_sys(ping + k * LINE);
            }
        }
    }
}

}  // namespace pkq

namespace pkq {

// What the device side of mapped-memory traffic costs, by the GPU's own
// clock, for `iters` repetitions of each (totals in ns, to out[0..5]), and
// the smallest step of %globaltimer (out[6]).
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
}

}  // namespace pkq
