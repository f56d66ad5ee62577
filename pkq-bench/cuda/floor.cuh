// floor.cuh: the raw floor, a bare one-word ping-pong through mapped
// memory (mirrors src/floor.rs). It measures what any design pays: one PCIe
// read that sees the host's write, plus one posted write back.
#pragma once
#include <cstdint>

#include "bench_layout.h"
#include "pkq_mem.cuh"

namespace pkq {

// ping: `lines` 64-byte lines written only by the host: round r (from 1)
// writes the value r into words 0..words-1 of line (r - 1) % lines, or
// BENCH_FLOOR_STOP into every word of the line the next round would use.
// Poller j of k (a warp, its lanes 0..words-1 reading one word each in one
// coalesced load) polls the line of the round it waits for, `Depth` loads
// in flight (below), started 1/k of a read round trip apart (as pkq's
// pollers are). A
// poll counts only when every word it read holds the same value, as pkq's
// slot poll needs all eight words of a slot. With lines > 1 the polled line
// moves on each round, as pkq's slots do.
// pong: written only by the pollers (lane 0 of poller j writes word j of
// line (r - 1) % lines), polled by the host, which takes the earliest
// clock of those it sees for the round (below). Separate
// allocations, so ping and pong never share a line. Each echo is one
// aligned 8-byte word, as NCCL's LL protocol carries flag and data: bits
// 0..16 (BENCH_FLOOR_ROUND_BITS) the round, bits 16..64 %globaltimer when
// the poll saw it (mod 2^48), for the one-way split; one store, so no torn
// read and no fence. (A word whose low bits match a round 2^16 rounds old
// would need a poller that many rounds behind, where the ping lines it
// polls hold a round at most `lines` <= 1024 old: each poller rewrites its
// word of every line once a lap, so the zeroed words, which match the
// rounds that are multiples of 2^16, are gone long before round 2^16.)
// The stop value is the loop's exit, in the line the host's next round
// would use (a poller that fell behind reads a later round in its line,
// and so catches up to it).
// Copies: each poller may be given its own copy of the ping lines (the
// host then writes every copy), to tell whether reads of one line by
// several warps are served one after another.
// Depth: each poller may keep `Depth` loads in flight, issued 1/Depth of a
// read round trip apart: it judges the oldest as it returns and issues its
// replacement at once, so the loads stay that far apart without a spin.
// A load issued before a round was seen reads that round again (or an
// older one) and counts for nothing.
template <uint32_t Depth>
__device__ __forceinline__ void floor_echo(const uint64_t* ping, uint64_t* pong, uint32_t j, uint32_t k,
                                           uint32_t words, uint32_t lines) {
    const uint32_t lane = threadIdx.x & 31;
    const int64_t rtt = __shfl_sync(0xffffffffu, lane == 0 ? read_round_trip_cycles(ping) : 0, 0);
    if (j > 0) {
        spin_cycles(rtt * j / (k * Depth));
        __syncwarp();
    }
    uint64_t r = 1;
    auto poll = [&]() {
        const uint64_t line = (r - 1) % lines;
        return lane < words ? load_sys(ping + line * 8 + lane) : 0;
    };
    uint64_t pending[Depth];
#pragma unroll
    for (uint32_t d = 0; d < Depth; ++d) {
        if (d > 0) spin_cycles(rtt / Depth);
        pending[d] = poll();
    }
    for (;;) {
#pragma unroll
        for (uint32_t d = 0; d < Depth; ++d) {
            const uint64_t w = pending[d];
            const uint64_t v = __shfl_sync(0xffffffffu, w, 0);
            const bool whole = __all_sync(0xffffffffu, lane >= words || w == v);
            if (whole && v == BENCH_FLOOR_STOP) return;
            // A later round than awaited: this poller fell `lines` rounds
            // behind and the line was reused; catch up.
            if (whole && v >= r) {
                if (lane == 0) {
                    const uint64_t round = v & ((1ull << BENCH_FLOOR_ROUND_BITS) - 1);
                    store_sys(pong + ((v - 1) % lines) * 8 + j,
                              (globaltimer() << BENCH_FLOOR_ROUND_BITS) | round);
                }
                r = v + 1;
            }
            pending[d] = poll();
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

// Dependent reads of 32, 64 and 128 bytes of mapped host memory (4, 8 and 16
// lanes of one warp, one coalesced load each), totals in ns to out[0..3).
// Called by a whole warp; ro holds at least 16 words the host never writes.
__device__ __forceinline__ void measure_wide_reads(const uint64_t* ro, uint64_t* out, uint32_t iters) {
    const uint32_t lane = threadIdx.x & 31;
    uint64_t keep = 0;
    for (uint32_t n = 4, i_out = 0; n <= 16; n *= 2, ++i_out) {
        const uint64_t* p = ro;
        const uint64_t t0 = globaltimer();
        for (uint32_t i = 0; i < iters; ++i) {
            const uint64_t w = lane < n ? load_sys(p + lane) : 0;
            // Every lane's word must arrive before the next address is known.
            const uint64_t any = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(w >> 32));
            p = ro + (any >> 31);
        }
        const uint64_t dt = globaltimer() - t0;
        if (lane == 0) out[i_out] = dt;
        keep += reinterpret_cast<uintptr_t>(p);
    }
    if (lane == 0 && keep == 1) out[3] = keep;  // keeps the chains alive
}

// How many accesses of host memory the GPU has answered per second, in
// pkq's pattern: `iters` times, every warp of the grid writes
// `write_words` 8-byte words (one coalesced posted write) and then reads
// `read_words` words (one coalesced load whose address depends on the last
// read); either count may be 0. Like pkq's workers, the warps take turns
// through a ring of BENCH_ACCESS_ROUNDS rounds of one entry per warp each:
// access i of warp w is at entry (i % rounds) * warps + w, entries
// `write_stride_words` (writes) and `read_stride_words` (reads) apart, so
// every access goes to a place no access touched for a round. After the
// loop a system fence waits for the writes to land; lane 0 then writes the
// warp's elapsed ns to out[warp].
__device__ __forceinline__ void access_rate(const uint64_t* ro, uint64_t* wo, uint64_t* out,
                                            uint32_t read_words, uint32_t read_stride_words,
                                            uint32_t write_words, uint32_t write_stride_words,
                                            uint32_t iters) {
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t warps = gridDim.x * (blockDim.x >> 5);
    const uint32_t warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    uint64_t dep = 0;  // 0, but only known once the last read arrived
    const uint64_t t0 = __shfl_sync(0xffffffffu, globaltimer(), 0);
    for (uint32_t i = 0; i < iters; ++i) {
        const uint64_t entry = static_cast<uint64_t>(i % BENCH_ACCESS_ROUNDS) * warps + warp;
        if (lane < write_words) store_sys(wo + entry * write_stride_words + lane, i);
        if (read_words != 0) {
            const uint64_t* p = ro + entry * read_stride_words + dep;
            const uint64_t w = lane < read_words ? load_sys(p + lane) : 0;
            dep = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(w >> 32)) >> 31;
        }
    }
    __threadfence_system();
    const uint64_t dt = globaltimer() - t0;
    if (lane == 0) out[warp] = dt + dep;
}

#ifdef PKQ_BULK_COPY
// floor_echo with each poll a bulk copy of the whole line into shared
// memory (the async proxy), issued by lane 0 and waited for on its own
// mbarrier: the warp keeps `Depth` polls in flight, issued 1/Depth of a
// read round trip apart, with no load of its own outstanding (lane 0
// waits on the oldest copy's mbarrier, the others at the warp barrier).
// At most BENCH_FLOOR_MAX_POLLERS pollers, `Depth` at most 8.
template <uint32_t Depth>
__device__ __forceinline__ void floor_echo_bulk(const uint64_t* ping, uint64_t* pong, uint32_t j, uint32_t k,
                                                uint32_t words, uint32_t lines) {
    __shared__ __align__(128) uint64_t buf[BENCH_FLOOR_MAX_POLLERS][8][8];
    __shared__ unsigned long long bars[BENCH_FLOOR_MAX_POLLERS][8];
    const uint32_t lane = threadIdx.x & 31;
    const int64_t rtt = __shfl_sync(0xffffffffu, lane == 0 ? read_round_trip_cycles(ping) : 0, 0);
    if (lane == 0) {
#pragma unroll
        for (uint32_t d = 0; d < Depth; ++d) bulk_bar_init(&bars[j][d]);
    }
    __syncwarp();
    if (j > 0) {
        spin_cycles(rtt * j / (k * Depth));
        __syncwarp();
    }
    uint64_t r = 1;
    uint64_t state[Depth];
    // Lane 0: a copy of the line of round r into buffer d.
    auto issue = [&](uint32_t d) {
        state[d] = bulk_read_start(reinterpret_cast<uint8_t*>(&buf[j][d][0]), ping + ((r - 1) % lines) * 8, 64,
                                   &bars[j][d]);
    };
    if (lane == 0) {
#pragma unroll
        for (uint32_t d = 0; d < Depth; ++d) {
            if (d > 0) spin_cycles(rtt / Depth);
            issue(d);
        }
    }
    for (;;) {
#pragma unroll
        for (uint32_t d = 0; d < Depth; ++d) {
            if (lane == 0) bulk_wait(&bars[j][d], state[d]);
            // Lane 0 saw the copy land: its bytes for every lane.
            __syncwarp();
            const uint64_t w = lane < words ? *reinterpret_cast<volatile uint64_t*>(&buf[j][d][lane]) : 0;
            const uint64_t v = __shfl_sync(0xffffffffu, w, 0);
            const bool whole = __all_sync(0xffffffffu, lane >= words || w == v);
            if (whole && v == BENCH_FLOOR_STOP) {
                // The other copies land before the block leaves (none
                // writes shared memory after its exit).
                if (lane == 0) {
#pragma unroll
                    for (uint32_t o = 1; o < Depth; ++o) bulk_wait(&bars[j][(d + o) % Depth], state[(d + o) % Depth]);
                }
                __syncwarp();
                return;
            }
            if (whole && v >= r) {
                if (lane == 0) {
                    const uint64_t round = v & ((1ull << BENCH_FLOOR_ROUND_BITS) - 1);
                    store_sys(pong + ((v - 1) % lines) * 8 + j,
                              (globaltimer() << BENCH_FLOOR_ROUND_BITS) | round);
                }
                r = v + 1;
            }
            // Every lane read the buffer before the next copy overwrites it.
            __syncwarp();
            if (lane == 0) issue(d);
        }
    }
}
#endif

}  // namespace pkq
