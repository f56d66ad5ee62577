// pkq_mem.cuh: the memory operations the device side of the protocol uses
// (mirrors the atomics in src/queue.rs). Every access to mapped host memory
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

// Relaxed, system-scope 8-byte store: single-copy atomic, posted (costs the
// SM nothing to wait for). Used for tagged completion words and state words;
// a release or fence.sys would cost ~0.7 us per completion and is not needed
// because every word is self-validating (see pkq_layout.h).
__device__ __forceinline__ void store_sys(uint64_t* p, uint64_t v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Nanoseconds of the GPU's global timer (%globaltimer).
__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

}  // namespace pkq
