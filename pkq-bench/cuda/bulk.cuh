// bulk.cuh: how long one block of warps takes to move a run of bytes
// between mapped host memory and the SM (mirrors src/bulk.rs): the
// costs under an IO task's input and output, by load and store kind, by
// warps and by loads in flight per lane.
#pragma once
#include <cstdint>

#include "bench_layout.h"

namespace pkq {

// Load and store kinds (BulkKind in src/bulk.rs; their codes are in
// bench_layout.h): 8 bytes a lane, or
// 16 (a `.v2` vector), with the memory model's relaxed system scope, PTX's
// volatile, or the weak "fetch again" (.cv, loads) / write-through (.wt,
// stores) cache operators.
enum BulkKind : uint32_t {
    BULK_RELAXED_SYS = BENCH_BULK_RELAXED_SYS,
    BULK_VOLATILE = BENCH_BULK_VOLATILE,
    BULK_WEAK_UNCACHED = BENCH_BULK_WEAK_UNCACHED,
    BULK_RELAXED_SYS_V2 = BENCH_BULK_RELAXED_SYS_V2,
    BULK_VOLATILE_V2 = BENCH_BULK_VOLATILE_V2,
    BULK_WEAK_UNCACHED_V2 = BENCH_BULK_WEAK_UNCACHED_V2,
    // relaxed.sys, 8 bytes a lane, half the warp a load: each instruction
    // one 128-byte line rather than two.
    BULK_RELAXED_SYS_HALF = BENCH_BULK_RELAXED_SYS_HALF,
    BULK_KINDS = BENCH_BULK_KINDS,
};

template <uint32_t KIND>
__device__ __forceinline__ void bulk_load(const uint64_t* p, uint64_t& a, uint64_t& b) {
    if constexpr (KIND == BULK_RELAXED_SYS) {
        asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(a) : "l"(p) : "memory");
    } else if constexpr (KIND == BULK_VOLATILE) {
        asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(a) : "l"(p) : "memory");
    } else if constexpr (KIND == BULK_WEAK_UNCACHED) {
        asm volatile("ld.global.cv.u64 %0, [%1];" : "=l"(a) : "l"(p) : "memory");
    } else if constexpr (KIND == BULK_RELAXED_SYS_V2) {
        asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    } else if constexpr (KIND == BULK_VOLATILE_V2) {
        asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    } else {
        asm volatile("ld.global.cv.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    }
}

template <uint32_t KIND>
__device__ __forceinline__ void bulk_store(uint64_t* p, uint64_t a, uint64_t b) {
    if constexpr (KIND == BULK_RELAXED_SYS) {
        asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(a) : "memory");
    } else if constexpr (KIND == BULK_VOLATILE) {
        asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(a) : "memory");
    } else if constexpr (KIND == BULK_WEAK_UNCACHED) {
        asm volatile("st.global.wt.u64 [%0], %1;" ::"l"(p), "l"(a) : "memory");
    } else if constexpr (KIND == BULK_RELAXED_SYS_V2) {
        asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
    } else if constexpr (KIND == BULK_VOLATILE_V2) {
        asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
    } else {
        asm volatile("st.global.wt.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
    }
}

// One pass of the block over `words` words at `area` (a multiple of 2 words
// per lane for the v2 kinds): loads (`write` false) in batches of INFLIGHT
// a lane, each batch's values used only after all were issued, or posted
// stores. Returns what the loads read, folded (kept alive).
template <uint32_t KIND, uint32_t INFLIGHT>
__device__ __forceinline__ uint64_t bulk_pass(uint64_t* area, uint32_t words, bool write, uint64_t value) {
    constexpr uint32_t PER = KIND >= BULK_RELAXED_SYS_V2 ? 2 : 1;
    const uint32_t threads = blockDim.x;
    const uint32_t units = words / PER;
    uint64_t fold = 0;
    for (uint32_t base = threadIdx.x; base < units; base += INFLIGHT * threads) {
        if (write) {
#pragma unroll
            for (uint32_t j = 0; j < INFLIGHT; ++j) {
                const uint32_t u = base + j * threads;
                if (u < units) bulk_store<KIND>(area + u * PER, value, value);
            }
        } else {
            uint64_t a[INFLIGHT], b[INFLIGHT];
#pragma unroll
            for (uint32_t j = 0; j < INFLIGHT; ++j) {
                const uint32_t u = base + j * threads;
                a[j] = b[j] = 0;
                if (u < units) bulk_load<KIND>(area + u * PER, a[j], b[j]);
            }
            // All 64 bits of every value: folded to less, ptxas narrows the
            // loads themselves (to 32-bit ones, half the bytes).
#pragma unroll
            for (uint32_t j = 0; j < INFLIGHT; ++j) fold ^= a[j] ^ (b[j] << 1 | b[j] >> 63);
        }
    }
    return fold;
}

// BULK_RELAXED_SYS_HALF: lanes 0..15 of each warp load, instruction j of a
// batch reading line j of the warp's run of INFLIGHT lines.
template <uint32_t INFLIGHT>
__device__ __forceinline__ uint64_t bulk_pass_half(uint64_t* area, uint32_t words) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    uint64_t fold = 0;
    for (uint32_t base = 16 * INFLIGHT * warp; base < words; base += 16 * INFLIGHT * warps) {
        uint64_t a[INFLIGHT];
#pragma unroll
        for (uint32_t j = 0; j < INFLIGHT; ++j) {
            const uint32_t k = base + 16 * j + lane;
            a[j] = 0;
            if (lane < 16 && k < words)
                asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(a[j]) : "l"(area + k) : "memory");
        }
#pragma unroll
        for (uint32_t j = 0; j < INFLIGHT; ++j) fold ^= a[j];
    }
    return fold;
}

template <uint32_t KIND>
__device__ __forceinline__ uint64_t bulk_pass_k(uint32_t inflight, uint64_t* area, uint32_t words, bool write,
                                                uint64_t value) {
    if constexpr (KIND == BULK_RELAXED_SYS_HALF) {
        switch (inflight) {
            case 1: return bulk_pass_half<1>(area, words);
            case 2: return bulk_pass_half<2>(area, words);
            case 4: return bulk_pass_half<4>(area, words);
            case 8: return bulk_pass_half<8>(area, words);
            default: return bulk_pass_half<16>(area, words);
        }
    } else {
        switch (inflight) {
            case 1: return bulk_pass<KIND, 1>(area, words, write, value);
            case 2: return bulk_pass<KIND, 2>(area, words, write, value);
            case 4: return bulk_pass<KIND, 4>(area, words, write, value);
            case 8: return bulk_pass<KIND, 8>(area, words, write, value);
            default: return bulk_pass<KIND, 16>(area, words, write, value);
        }
    }
}

// `iters` passes of one block over `words` words of host memory, each at the
// next of `runs` places `words` apart (so a pass never meets lines an
// earlier pass left in a cache unless the places wrap), loads or stores of
// `kind`, `inflight` a lane; stores end with a system fence (each thread's)
// so that a pass counts until its writes landed. Thread 0 writes the sum
// and the least of the passes' ns to out[0] and out[1], out[2] the fold.
__device__ __forceinline__ void bulk_copy(uint64_t* area, uint64_t* out, uint32_t words, uint32_t runs,
                                          uint32_t kind, uint32_t inflight, uint32_t write,
                                          uint32_t iters) {
    uint64_t sum = 0, least = ~0ull, fold = 0;
    for (uint32_t i = 0; i < iters; ++i) {
        uint64_t* at = area + static_cast<uint64_t>(i % runs) * words;
        __syncthreads();
        uint64_t t0 = 0;
        if (threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        __syncthreads();
        switch (kind) {
            case BULK_RELAXED_SYS: fold ^= bulk_pass_k<BULK_RELAXED_SYS>(inflight, at, words, write, i); break;
            case BULK_VOLATILE: fold ^= bulk_pass_k<BULK_VOLATILE>(inflight, at, words, write, i); break;
            case BULK_WEAK_UNCACHED: fold ^= bulk_pass_k<BULK_WEAK_UNCACHED>(inflight, at, words, write, i); break;
            case BULK_RELAXED_SYS_V2: fold ^= bulk_pass_k<BULK_RELAXED_SYS_V2>(inflight, at, words, write, i); break;
            case BULK_VOLATILE_V2: fold ^= bulk_pass_k<BULK_VOLATILE_V2>(inflight, at, words, write, i); break;
            case BULK_WEAK_UNCACHED_V2: fold ^= bulk_pass_k<BULK_WEAK_UNCACHED_V2>(inflight, at, words, write, i); break;
            default: fold ^= bulk_pass_k<BULK_RELAXED_SYS_HALF>(inflight, at, words, write, i); break;
        }
        if (write) __threadfence_system();
        // Every thread's loads returned (their values folded) or stores landed.
        __syncthreads();
        if (threadIdx.x == 0) {
            uint64_t t1;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
            sum += t1 - t0;
            least = t1 - t0 < least ? t1 - t0 : least;
        }
    }
    if (threadIdx.x == 0) {
        out[0] = sum;
        out[1] = least;
    }
    const uint32_t lo = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(fold));
    const uint32_t hi = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(fold >> 32));
    if (threadIdx.x == 0) out[2] = (static_cast<uint64_t>(hi) << 32) | lo;
}

}  // namespace pkq
