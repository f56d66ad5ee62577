// pkq.cu: the one translation unit build.rs compiles into the embedded
// fatbin. The pieces live in the headers beside it.
#include "pkq_floor.cuh"
#include "pkq_ops.cuh"
#include "pkq_worker.cuh"

// The resident kernel: one warp per worker, PKQ_MAX_WARPS_PER_BLOCK warps at
// most per block.
extern "C" __global__ void __launch_bounds__(PKQ_MAX_WARPS_PER_BLOCK * 32, 1)
    pkq_worker_kernel(const pkq_params p) {
    const uint32_t worker = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (worker >= p.workers) return;
    switch (p.pollers) {
        case 4: pkq::serve<4>(p, worker, pkq::BuiltinOps{}); break;
        case 2: pkq::serve<2>(p, worker, pkq::BuiltinOps{}); break;
        default: pkq::serve<1>(p, worker, pkq::BuiltinOps{}); break;
    }
}

// Baselines for the latency comparison.
extern "C" __global__ void pkq_empty_kernel() {}

// mode 0: one thread, `pollers` loads in flight on one word; 1: `pollers`
// warps of one block, one load each; 2: `pollers` blocks, one load each;
// 3: one thread, one load on each of `pollers` copies of ping.
extern "C" __global__ void pkq_floor_kernel(const uint64_t* ping, uint64_t* pong, uint32_t pollers,
                                            uint32_t mode) {
    if (threadIdx.x % 32 != 0) return;
    const uint32_t warp = threadIdx.x / 32;
    switch (mode) {
        case 1: pkq::floor_echo_separate(ping, pong, warp, pollers); return;
        case 2: if (warp == 0) pkq::floor_echo_separate(ping, pong, blockIdx.x, pollers); return;
        default: break;
    }
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    if (mode == 3) {
        switch (pollers) {
            case 4: pkq::floor_echo_lines<4>(ping, pong); break;
            case 2: pkq::floor_echo_lines<2>(ping, pong); break;
            default: pkq::floor_echo_lines<1>(ping, pong); break;
        }
        return;
    }
    switch (pollers) {
        case 4: pkq::floor_echo<4>(ping, pong); break;
        case 2: pkq::floor_echo<2>(ping, pong); break;
        default: pkq::floor_echo<1>(ping, pong); break;
    }
}

extern "C" __global__ void pkq_costs_kernel(const uint64_t* ro, uint64_t* wo, uint64_t* out,
                                            uint32_t iters) {
    if (threadIdx.x == 0 && blockIdx.x == 0) pkq::measure_costs(ro, wo, out, iters);
}
