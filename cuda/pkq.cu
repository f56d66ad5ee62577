// pkq.cu: the one translation unit build.rs compiles into the embedded
// fatbin. The pieces live in the headers beside it.
#include "pkq_floor.cuh"
#include "pkq_ops.cuh"
#include "pkq_worker.cuh"

// The resident kernel: `pollers` warps per worker, PKQ_MAX_WARPS_PER_BLOCK
// warps at most per block, a worker's pollers always in one block (both
// powers of two), sharing the worker's claim counter in shared memory.
extern "C" __global__ void __launch_bounds__(PKQ_MAX_WARPS_PER_BLOCK * 32, 1)
    pkq_worker_kernel(const pkq_params p) {
    __shared__ unsigned long long claims[PKQ_MAX_WARPS_PER_BLOCK];
    const uint32_t warp_in_block = threadIdx.x >> 5;
    const uint32_t warp = blockIdx.x * (blockDim.x >> 5) + warp_in_block;
    if (threadIdx.x < PKQ_MAX_WARPS_PER_BLOCK) claims[threadIdx.x] = 0;
    __syncthreads();
    const uint32_t worker = warp / p.pollers;
    if (worker >= p.workers) return;
    pkq::serve(p, worker, warp % p.pollers, &claims[warp_in_block / p.pollers], pkq::BuiltinOps{});
}

// Baselines for the latency comparison.
extern "C" __global__ void pkq_empty_kernel() {}

// `pollers` warps (one block), each polling `words` words of a ring of
// `lines` ping lines with one load in flight and echoing into its own pong
// word (see pkq_floor.cuh).
extern "C" __global__ void pkq_floor_kernel(const uint64_t* ping, uint64_t* pong, uint32_t pollers,
                                            uint32_t words, uint32_t lines) {
    pkq::floor_echo(ping, pong, threadIdx.x / 32, pollers, words, lines);
}

extern "C" __global__ void pkq_costs_kernel(const uint64_t* ro, uint64_t* wo, uint64_t* out,
                                            uint32_t iters) {
    if (threadIdx.x == 0 && blockIdx.x == 0) pkq::measure_costs(ro, wo, out, iters);
    __syncthreads();
    if (threadIdx.x < 32 && blockIdx.x == 0) pkq::measure_wide_reads(ro, out + 8, iters);
}
