// pkq_mem.cuh: the memory operations the device side of the protocol uses
// (mirrors the atomics in src/proto/queue.rs). Every access to mapped host memory
// goes through these, so the scope and ordering of each is stated once.
#pragma once
#include <cstdint>

namespace pkq {

// Relaxed, system-scope 8-byte load: single-copy atomic, never served from a
// stale L1 line, no ordering implied. Used to poll tagged words in host memory.
__device__ __forceinline__ uint64_t load_sys(const uint64_t* p) {
    uint64_t v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Two relaxed, system-scope 8-byte loads as one 16-byte vector load (`p`
// 16-byte aligned; each word single-copy atomic, as load_sys's) where
// `pred` holds, else 0 and 0: one predicated instruction, not a branch (a
// lane-dependent branch around an asm load makes ptxas wrap it in a
// convergence region). One warp keeps only a few loads of host
// memory in flight, whatever their width, so wider loads move more:
// bulk_rate read 64 KiB in 75 us this way against 150 us 8 bytes a lane.
__device__ __forceinline__ void load2_sys_if(bool pred, const uint64_t* p, uint64_t& a, uint64_t& b) {
    a = 0;
    b = 0;
    asm volatile(
        "{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %3, 0;\n\t"
        "@q ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];\n\t}"
        : "+l"(a), "+l"(b)
        : "l"(p), "r"(static_cast<uint32_t>(pred))
        : "memory");
}

// Relaxed, system-scope 8-byte store: single-copy atomic, posted (costs the
// SM nothing to wait for). Used for state, heartbeat, pack-result and output
// words (completions use store2_sys);
// a release or fence.sys would cost a system-scope round trip per completion
// (the latency bench's "store + fence.sc.sys" row) and is not needed because
// every word is self-validating (see pkq_layout.h).
__device__ __forceinline__ void store_sys(uint64_t* p, uint64_t v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// store_sys where `pred` holds: one predicated instruction (see
// load2_sys_if).
__device__ __forceinline__ void store_sys_if(bool pred, uint64_t* p, uint64_t v) {
    asm volatile(
        "{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\t"
        "@q st.relaxed.sys.global.u64 [%0], %1;\n\t}" ::"l"(p),
        "l"(v), "r"(static_cast<uint32_t>(pred))
        : "memory");
}

// Two relaxed, system-scope 8-byte stores as one 16-byte vector store (`p`
// 16-byte aligned): each word single-copy atomic, as store_sys's.
__device__ __forceinline__ void store2_sys(uint64_t* p, uint64_t a, uint64_t b) {
    asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

// The SM clock, read only once `v` has arrived: the read is predicated on
// `v`, so ptxas can neither hoist it above the load nor drop the load. (If
// `v` happens to equal the sentinel, the reading is 0.)
__device__ __forceinline__ int64_t clock_after(uint64_t v) {
    int64_t t;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.u64 p, %1, 0x5a5a5a5a5a5a5a5a;\n\t"
        "@p mov.u64 %0, %%clock64;\n\t"
        "@!p mov.u64 %0, 0;\n\t}"
        : "=l"(t)
        : "l"(v));
    return t;
}

// Busy-waits about `cycles` SM cycles.
__device__ __forceinline__ void spin_cycles(int64_t cycles) {
    const int64_t t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

// The fewest SM cycles one relaxed system-scope load of `p` took in eight
// tries: a read round trip to wherever `p` lives.
__device__ __forceinline__ int64_t read_round_trip_cycles(const uint64_t* p) {
    int64_t best = INT64_MAX;
    for (int i = 0; i < 8; ++i) {
        const int64_t t0 = clock64();
        const int64_t dt = clock_after(load_sys(p)) - t0;
        best = dt > 0 && dt < best ? dt : best;
    }
    return best == INT64_MAX ? 0 : best;
}

// Nanoseconds of the GPU's global timer (%globaltimer).
__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

}  // namespace pkq
