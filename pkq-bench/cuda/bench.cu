// bench.cu: pkq-bench's measurement and baseline kernels, compiled by
// pkq-bench's build.rs (with pkq-build, against pkq's headers from
// DEP_PKQ_INCLUDE) into a fatbin of their own, loaded by src/floor.rs
// (`pkq_bench::floor::load`). The floor, the device's costs and the access
// rate are launched by src/floor.rs, the bulk copies by src/bulk.rs; the
// others by the bench programs (src/bin/) and the tests.
#include <cstdint>

#include "bulk.cuh"
#include "floor.cuh"
#include "pkq_ops.cuh"

// Baselines for the latency comparison.
extern "C" __global__ void pkq_empty_kernel() {}

// The width bench's baseline (src/bin/width.rs): GROUP_DOT's work as an
// ordinary kernel over its whole grid: each thread sums its strided share in
// double, each block adds its threads' and adds that to *out (zeroed
// before the launch).
extern "C" __global__ void pkq_dot_kernel(const float* x, const float* y, uint32_t n, double* out) {
    const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    double s = 0.0;
    for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
        s += static_cast<double>(__ldcg(x + i)) * __ldcg(y + i);
    s = pkq::warp_sum(s);
    __shared__ double warps[32];
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double b = 0.0;
        for (uint32_t w = 0; w < blockDim.x / 32; ++w) b += warps[w];
        atomicAdd(out, b);
    }
}

// The width bench's GEMV baseline: GROUP_GEMV's own work (pkq::gemv_rows),
// launched over a grid of whole warps, a warp per row.
extern "C" __global__ void pkq_wide_gemv_kernel(const float* a, const float* x, float* y, uint32_t rows,
                                                uint32_t cols) {
    pkq::gemv_rows(a, x, y, rows, cols, blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5),
                   gridDim.x * (blockDim.x >> 5), threadIdx.x & 31);
}

// The payload baselines (src/bin/payload.rs): COPY_IO's work as an ordinary
// kernel, on device buffers or on mapped host memory: out[i] = (i < in_len ?
// in[i] : 0) ^ key for i < out_len.
extern "C" __global__ void pkq_copy_io_kernel(const uint8_t* in, uint32_t in_len, uint8_t* out,
                                              uint32_t out_len, uint32_t key) {
    const uint32_t step = gridDim.x * blockDim.x;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < out_len; i += step)
        out[i] = (i < in_len ? in[i] : 0) ^ static_cast<uint8_t>(key);
}

// The width bench's payload rows (src/bin/width/payload.rs): `pieces`
// 16-byte pieces from `in` to `out`, a thread per piece, on device buffers
// or on mapped host memory.
extern "C" __global__ void pkq_copy16_kernel(const uint4* in, uint4* out, uint32_t pieces) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pieces) out[i] = __ldcg(in + i);
}

// `pollers` warps (one block), each polling `words` words of a ring of
// `lines` ping lines (its own copy of them `copy_stride` words after the
// last poller's, or all the same with 0) with `depth` loads in flight (1, 2
// or 4; with `bulk`, bulk copies, 1 to 8, from sm_90 on) and echoing into
// its own pong word (see floor.cuh).
extern "C" __global__ void pkq_floor_kernel(const uint64_t* ping, uint64_t* pong, uint32_t pollers,
                                            uint32_t words, uint32_t lines, uint32_t copy_stride,
                                            uint32_t depth, uint32_t bulk) {
    const uint32_t j = threadIdx.x / 32;
    const uint64_t* own = ping + static_cast<uint64_t>(j) * copy_stride;
#ifdef PKQ_BULK_COPY
    if (bulk != 0) {
        if (depth == 8) {
            pkq::floor_echo_bulk<8>(own, pong, j, pollers, words, lines);
        } else if (depth == 4) {
            pkq::floor_echo_bulk<4>(own, pong, j, pollers, words, lines);
        } else if (depth == 2) {
            pkq::floor_echo_bulk<2>(own, pong, j, pollers, words, lines);
        } else {
            pkq::floor_echo_bulk<1>(own, pong, j, pollers, words, lines);
        }
        return;
    }
#else
    // Built without the bulk copies (before sm_90): a bulk floor is not
    // this one's to run as a load floor.
    if (bulk != 0) __trap();
#endif
    if (depth == 4) {
        pkq::floor_echo<4>(own, pong, j, pollers, words, lines);
    } else if (depth == 2) {
        pkq::floor_echo<2>(own, pong, j, pollers, words, lines);
    } else {
        pkq::floor_echo<1>(own, pong, j, pollers, words, lines);
    }
}

extern "C" __global__ void pkq_costs_kernel(const uint64_t* ro, uint64_t* wo, uint64_t* out,
                                            uint32_t iters) {
    if (threadIdx.x == 0 && blockIdx.x == 0) pkq::measure_costs(ro, wo, out, iters);
    __syncthreads();
    if (threadIdx.x < 32 && blockIdx.x == 0) pkq::measure_wide_reads(ro, out + 8, iters);
}

// Reads and writes of host memory per second, for a grid of warps in
// blocks of 8 (see floor.cuh): the ceilings of tasks per second.
extern "C" __global__ void pkq_access_rate_kernel(const uint64_t* ro, uint64_t* wo, uint64_t* out,
                                                  uint32_t read_words, uint32_t read_stride_words,
                                                  uint32_t write_words, uint32_t write_stride_words,
                                                  uint32_t iters) {
    pkq::access_rate(ro, wo, out, read_words, read_stride_words, write_words, write_stride_words,
                     iters);
}

// One block moving runs of host memory (see bulk.cuh).
extern "C" __global__ void pkq_bulk_kernel(uint64_t* area, uint64_t* out, uint32_t words, uint32_t runs,
                                           uint32_t kind, uint32_t inflight, uint32_t write,
                                           uint32_t iters) {
    pkq::bulk_copy(area, out, words, runs, kind, inflight, write, iters);
}

// GEMV launched as an ordinary kernel (the crossover bench): one warp per
// row, the same arithmetic as the GEMV op.
extern "C" __global__ void pkq_gemv_kernel(const float* a, const float* x, float* y, uint32_t rows,
                                           uint32_t cols) {
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const float* row = a + static_cast<uint64_t>(r) * cols;
    float s = 0.0f;
    for (uint32_t c = lane; c < cols; c += 32) s = fmaf(__ldcg(row + c), __ldcg(x + c), s);
    s = pkq::warp_sum(s);
    if (lane == 0) y[r] = s;
}

// The isolation bench's memory-bound application kernel: y = A x at the
// HBM's bandwidth. A block per row (launched with 512 threads; any
// multiple of 32 up to 1024 works), 16-byte loads, every thread's loads
// issued before its multiply-adds, a block sum. `cols` a multiple of 4 (a
// rest of 1 to 3 columns is left out) and `a`, `x` 16-byte aligned (the
// bench's are).
// pkq_gemv_kernel above, a warp per row of 4-byte loads, is bound by its
// SMs' loads in flight rather than by HBM, so its time follows the SMs it
// gets (docs/design/measurement-method.md#application-kernels).
extern "C" __global__ void pkq_app_gemv_kernel(const float* a, const float* x, float* y,
                                               uint32_t rows, uint32_t cols) {
    __shared__ float part[32];
    const uint32_t r = blockIdx.x;
    if (r >= rows) return;
    const float4* row = reinterpret_cast<const float4*>(a + static_cast<uint64_t>(r) * cols);
    const float4* xv = reinterpret_cast<const float4*>(x);
    const uint32_t n4 = cols / 4;
    constexpr int K = 2;
    float4 av[K], xs[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const uint32_t i = threadIdx.x + k * blockDim.x;
        av[k] = i < n4 ? __ldcs(row + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        xs[k] = i < n4 ? __ldg(xv + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        s = fmaf(av[k].x, xs[k].x, s);
        s = fmaf(av[k].y, xs[k].y, s);
        s = fmaf(av[k].z, xs[k].z, s);
        s = fmaf(av[k].w, xs[k].w, s);
    }
    for (uint32_t i = threadIdx.x + K * blockDim.x; i < n4; i += blockDim.x) {
        const float4 v = __ldcs(row + i), w = __ldg(xv + i);
        s = fmaf(v.x, w.x, fmaf(v.y, w.y, fmaf(v.z, w.z, fmaf(v.w, w.w, s))));
    }
    s = pkq::warp_sum(s);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        s = pkq::warp_sum(s);
        if (threadIdx.x == 0) y[r] = s;
    }
}

// The waiting bench's task as an ordinary kernel (src/bin/waiting.rs): one
// thread spins `ns` nanoseconds by %globaltimer, as the SPIN op does, then
// stores the time it ended into `*end` (mapped host memory, read by the
// host after its wait returned).
extern "C" __global__ void pkq_spin_stamp_kernel(uint64_t ns, volatile uint64_t* end) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const uint64_t t0 = pkq::globaltimer();
    uint64_t now = t0;
    while (now - t0 < ns) now = pkq::globaltimer();
    *end = now;
}

// The SM each block of a launch ran on (the partition tests and the
// isolation bench): thread 0 of block b stores %smid into out[b], after
// spinning `ns` nanoseconds so that the blocks of a launch overlap.
extern "C" __global__ void pkq_smid_kernel(uint32_t* out, uint64_t ns) {
    if (threadIdx.x != 0) return;
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const uint64_t t0 = pkq::globaltimer();
    while (pkq::globaltimer() - t0 < ns) {
    }
    out[blockIdx.x] = sm;
}

// A compute-bound application kernel (the isolation bench): each thread
// runs four independent chains of `iters` FMAs in registers; a sum that
// never occurs is stored (so the compiler keeps the chains, and the kernel
// writes no memory).
extern "C" __global__ void pkq_fma_kernel(float* out, uint32_t iters) {
    float a = threadIdx.x * 1e-3f, b = a + 1.0f, c = a + 2.0f, d = a + 3.0f;
    const float m = 0.999f, k = 1e-4f;
    for (uint32_t i = 0; i < iters; ++i) {
        a = fmaf(a, m, k);
        b = fmaf(b, m, k);
        c = fmaf(c, m, k);
        d = fmaf(d, m, k);
    }
    const float sum = a + b + c + d;
    if (sum == -1.0f) out[blockIdx.x] = sum;
}
