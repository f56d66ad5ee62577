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

// Orders this thread's earlier loads before its later loads and stores, at
// system scope: with a relaxed load that saw a word the host published
// (after its data: platform assumptions, docs/PROTOCOL.md), the acquire
// pattern; the data's later loads then see the data. Data a flag published
// is read behind this, not behind __threadfence_system (fence.sc.sys),
// which also waits until this thread's earlier stores to host memory are
// performed (MEMBAR.SC.SYS): ptxas of CUDA 13.0 compiles fence.acquire.sys
// for sm_90 to an L1 invalidate alone (CCTL.IVALL). fence.acquire needs
// sm_90 and PTX ISA 8.6 (nvcc 12.8 on); elsewhere it is fence.acq_rel.sys.
// Lanes that did not load the flag take the order from those that did
// through a warp barrier after this fence (PROTOCOL.md, (c3)).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && \
    (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
#define PKQ_FENCE_ACQUIRE 1
#endif
#ifdef PKQ_FENCE_ACQUIRE
#define PKQ_FENCE(sem, scope) asm volatile("fence." sem "." scope ";" ::: "memory")
#else
#define PKQ_FENCE(sem, scope) asm volatile("fence.acq_rel." scope ";" ::: "memory")
#endif
__device__ __forceinline__ void fence_acquire_sys() { PKQ_FENCE("acquire", "sys"); }

// The GPU-scope fences of a hand-off between blocks through device memory
// (TASK in pkq_layout.h): release before words that are their own flags,
// acquire after relaxed loads saw them. fence.release and fence.acquire
// where PKQ_FENCE_ACQUIRE says they exist (above), else fence.acq_rel.
__device__ __forceinline__ void fence_release_gpu() { PKQ_FENCE("release", "gpu"); }
__device__ __forceinline__ void fence_acquire_gpu() { PKQ_FENCE("acquire", "gpu"); }

// Two relaxed, system-scope 8-byte stores as one 16-byte vector store (`p`
// 16-byte aligned): each word single-copy atomic, as store_sys's.
__device__ __forceinline__ void store2_sys(uint64_t* p, uint64_t a, uint64_t b) {
    asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

// The bulk copy engine (sm_90 on; PLAIN in pkq_layout.h). Its reads and
// writes are the async proxy's: a fence.proxy.async orders them with the
// generic proxy's (the plain loads, stores and fences above).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PKQ_BULK_COPY 1

// The shared-memory address of `p` (a pointer into shared memory).
__device__ __forceinline__ uint32_t smem(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Readies the mbarrier at `bar` (shared memory) for one arrival a phase,
// for the async proxy too. Once per kernel, before any copy uses it.
__device__ __forceinline__ void bulk_bar_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Starts a copy of `bytes` (a multiple of 16; both addresses 16-byte
// aligned) from global memory at `src` (mapped host memory included) into
// shared memory at `dst`, completing the phase of the mbarrier at `bar`
// (one arrival a phase) when they are there; the phase's state, for
// bulk_wait (one thread).
__device__ __forceinline__ uint64_t bulk_read_start(uint8_t* dst, const void* src, uint32_t bytes,
                                                    unsigned long long* bar) {
    uint64_t state;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                 : "=l"(state)
                 : "r"(smem(bar)), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem(dst)),
        "l"(src), "r"(bytes), "r"(smem(bar))
        : "memory");
    return state;
}

// Waits until the copy bulk_read_start began, whose phase's state is
// `state`, is there. The wait's exit: the engine completes every copy it
// accepted, or faults the kernel (a bad address), which the host reports.
__device__ __forceinline__ void bulk_wait(unsigned long long* bar, uint64_t state) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n\t.reg .pred q;\n\t"
            "mbarrier.try_wait.shared::cta.b64 q, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, q;\n\t}"
            : "=r"(done)
            : "r"(smem(bar)), "l"(state)
            : "memory");
    } while (!done);
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from
// global memory at `src` (mapped host memory included) into shared memory
// at `dst`, and waits until they are there (one thread).
__device__ __forceinline__ void bulk_read(uint8_t* dst, const void* src, uint32_t bytes,
                                          unsigned long long* bar) {
    bulk_wait(bar, bulk_read_start(dst, src, bytes, bar));
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from
// shared memory at `src` to global memory at `dst` (mapped host memory
// included), and waits until its writes are done and ordered before this
// thread's later generic accesses (one thread; a fence of the caller's
// scope then orders them for others). The copy reads `src` through the
// async proxy: the writers of `src` fence (fence.proxy.async.shared::cta)
// before a barrier with this thread.
__device__ __forceinline__ void bulk_write(void* dst, const uint8_t* src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem(src)),
                 "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async;" ::: "memory");
}

// This thread's writes to shared memory, for a bulk copy that reads them
// (bulk_write).
__device__ __forceinline__ void bulk_source_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// The async proxy's later reads after this thread's generic ones and the
// fences before (bulk_read of data a flag published).
__device__ __forceinline__ void bulk_after_fence() { asm volatile("fence.proxy.async;" ::: "memory"); }
#endif

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

// Device memory shared by the blocks of a group (WIDTH in pkq_layout.h;
// pkq_group.cuh): GPU-scope relaxed store and load (with fence_release_gpu
// and fence_acquire_gpu above, the hand-off's patterns), and a release add
// (no value back): the thread's earlier writes, and those it saw through a
// block barrier, before the add (cumulative).
__device__ __forceinline__ void store_relaxed_gpu(uint64_t* p, uint64_t v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t load_relaxed_gpu(const uint64_t* p) {
    uint64_t v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void add_release_gpu(uint64_t* p, uint64_t v) {
    asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

}  // namespace pkq
