// group_round.cu: what one round of a group's hand-off costs on the device
// alone, with no host in the loop: block 0's warp 0 stores a line of tagged
// words in device memory, warp 0 of every other block (one block per SM)
// reads the line until every word carries the round's generation, each
// block meets at two block barriers (the task's and the end's, an empty
// handler between), thread 0 of each block but the first adds one to an
// arrival counter, and block 0's warp 0 reads the counter until every block
// arrived. The time from the store's issue to the arrivals seen is what a
// wide task adds, at the least, to a narrow task's round trip
// (docs/design/wide-tasks.md): the shape of pkq's hand-off
// (cuda/pkq_group.cuh, `hand_task`, `wait_at_least`, `group_member`),
// through pkq's own memory operations (cuda/pkq_mem.cuh), without the
// host's ring on either side. Not pkq: a probe of the floor under it.
//
// Variants: pkq's fences (the release fence issued before the round's
// clock starts, as pkq issues it after the completion before); that fence
// on the timed path, right before the store; arrivals as relaxed adds (not
// sound: what the release add costs); no fences at all (not sound: what
// every fence of the round costs); no fences and no block barriers, one
// warp a block (not sound: the two trips through L2 alone). Each row times ROUNDS rounds after
// WARMUP, a gap of GAP_CYCLES between rounds (the other blocks polling
// meanwhile, as they poll between tasks), in SM cycles converted to
// nanoseconds by the SM clock against %globaltimer over the same rounds.
//
// Not part of the crate (CUDA runtime API, built on the GPU host):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o group_round group_round.cu
//   ./group_round COMMIT "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader)" > group_round.json
// It writes the results file's JSON (rows: `round, <n> blocks, <variant>`,
// `p50_ns` .. `max_ns`, `p50_cycles`) to stdout; a wait that gave up makes
// it exit non-zero with nothing written.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "../../cuda/pkq_layout.h"
#include "../../cuda/pkq_mem.cuh"

using pkq::add_release_gpu;
using pkq::fence_acquire_gpu;
using pkq::fence_release_gpu;
using pkq::load_relaxed_gpu;
using pkq::store_relaxed_gpu;

constexpr int WARPS = 8;
constexpr int ROUNDS = 4000;
constexpr int WARMUP = 200;
constexpr long long GAP_CYCLES = 3000;
// Spins before a wait gives up (its exit): far beyond any round.
constexpr uint64_t MAX_SPINS = 1ull << 26;

enum Variant { PKQ, FENCE_ON_PATH, RELAXED_ADD, NO_FENCES, NO_BARRIERS, VARIANTS };
const char* const VARIANT_NAMES[VARIANTS] = {
    "pkq's fences (the release fence before the clock starts)",
    "pkq's fences, the release fence right before the store",
    "arrivals as relaxed adds (not sound)",
    "no fences (not sound)",
    "no fences, no block barriers, one warp a block (not sound)",
};

__device__ __forceinline__ void barrier(uint32_t id, int variant) {
    if (variant == NO_BARRIERS) return;
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(blockDim.x) : "memory");
}

__device__ __forceinline__ void add_relaxed_gpu(uint64_t* p, uint64_t v) {
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// words: the line (PKQ_GROUP_TASK_WORDS tagged words) at 0, the arrival
// counter at word 16 (a line of its own), zeroed before the launch.
// out: each round's cycles, then the cycles and nanoseconds of all rounds.
__global__ void __launch_bounds__(WARPS * 32) round_trip(uint64_t* words, int variant, long long* out, int* gave_up) {
    extern __shared__ uint8_t one_block_per_sm[];
    (void)one_block_per_sm;
    uint64_t* line = words;
    uint64_t* arrivals = words + 16;
    const uint32_t blocks = gridDim.x;
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t warp = threadIdx.x >> 5;
    const bool fences = variant != NO_FENCES && variant != NO_BARRIERS;
    // The block's other warps sit out a round with no block barriers.
    if (variant == NO_BARRIERS && warp != 0) return;
    long long clk0 = 0;
    unsigned long long ns0 = 0;
    for (int r = 0; r < WARMUP + ROUNDS; ++r) {
        const uint64_t gen = r + 1;
        if (blockIdx.x == 0) {
            long long t0 = 0;
            if (warp == 0) {
                const long long until = clock64() + GAP_CYCLES;
                while (clock64() < until) {
                }
                if (r == WARMUP) {
                    clk0 = clock64();
                    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns0));
                }
                if (fences && variant != FENCE_ON_PATH) fence_release_gpu();
                __syncwarp();
                t0 = clock64();
                if (variant == FENCE_ON_PATH) fence_release_gpu();
                if (blocks > 1 && lane < PKQ_GROUP_TASK_WORDS) store_relaxed_gpu(line + lane, (gen << 32) | lane);
            }
            barrier(1, variant);
            barrier(2, variant);
            if (warp == 0) {
                if (blocks > 1 && lane == 0) {
                    const uint64_t target = gen * (blocks - 1);
                    for (uint64_t spins = 0; load_relaxed_gpu(arrivals) < target; ++spins)
                        if (spins == MAX_SPINS) {
                            *gave_up = 1;
                            break;
                        }
                    if (fences) fence_acquire_gpu();
                }
                __syncwarp();
                const long long t1 = clock64();
                if (lane == 0 && r >= WARMUP) out[r - WARMUP] = t1 - t0;
            }
        } else {
            if (warp == 0) {
                for (uint64_t spins = 0;; ++spins) {
                    const uint64_t w = lane < PKQ_GROUP_TASK_WORDS ? load_relaxed_gpu(line + lane) : 0;
                    if (__all_sync(0xffffffffu, lane >= PKQ_GROUP_TASK_WORDS || (w >> 32) == gen)) break;
                    if (spins == MAX_SPINS) {
                        if (lane == 0) *gave_up = 1;
                        break;
                    }
                }
                if (fences) fence_acquire_gpu();
            }
            barrier(1, variant);
            barrier(2, variant);
            if (threadIdx.x == 0) {
                if (variant == PKQ || variant == FENCE_ON_PATH)
                    add_release_gpu(arrivals, 1);
                else
                    add_relaxed_gpu(arrivals, 1);
            }
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long ns1;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns1));
        out[ROUNDS] = clock64() - clk0;
        out[ROUNDS + 1] = static_cast<long long>(ns1 - ns0);
    }
}

static double at(const std::vector<double>& sorted, double q) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()))];
}

int main(int argc, char** argv) {
    const char* commit = argc > 1 ? argv[1] : "unknown";
    const char* driver = argc > 2 ? argv[2] : "unknown";
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 1;
    // A block's shared memory past half an SM's: one block per SM.
    const int smem = static_cast<int>(prop.sharedMemPerBlockOptin);
    if (cudaFuncSetAttribute(round_trip, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return 1;
    uint64_t* words;
    long long* out;
    int* gave_up;
    cudaMalloc(&words, 4096);
    cudaMallocManaged(&out, sizeof(long long) * (ROUNDS + 2));
    cudaMallocManaged(&gave_up, sizeof(int));
    char date[32];
    const time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    std::vector<char> rows;
    const int counts[] = {1, 2, 8, prop.multiProcessorCount};
    for (const int blocks : counts)
        for (int variant = 0; variant < VARIANTS; ++variant) {
            if (blocks == 1 && variant != PKQ) continue;  // no hand-off: no variants
            cudaMemset(words, 0, 4096);
            *gave_up = 0;
            round_trip<<<blocks, WARPS * 32, smem>>>(words, variant, out, gave_up);
            if (cudaDeviceSynchronize() != cudaSuccess || *gave_up != 0) {
                fprintf(stderr, "group_round: %d blocks, variant %d: %s\n", blocks, variant,
                        *gave_up != 0 ? "a wait gave up" : "the kernel failed");
                return 1;
            }
            const double ns_per_cycle = static_cast<double>(out[ROUNDS + 1]) / static_cast<double>(out[ROUNDS]);
            std::vector<double> ns(ROUNDS), cycles(ROUNDS);
            for (int i = 0; i < ROUNDS; ++i) {
                cycles[i] = static_cast<double>(out[i]);
                ns[i] = cycles[i] * ns_per_cycle;
            }
            std::sort(ns.begin(), ns.end());
            std::sort(cycles.begin(), cycles.end());
            char row[512];
            snprintf(row, sizeof row,
                     "%s  {\"name\": \"round, %d blocks, %s\", \"p50_ns\": %.1f, \"p90_ns\": %.1f, "
                     "\"p99_ns\": %.1f, \"p99_9_ns\": %.1f, \"max_ns\": %.1f, \"p50_cycles\": %.0f, "
                     "\"samples\": %d}",
                     rows.empty() ? "" : ",\n", blocks, blocks == 1 ? "no hand-off" : VARIANT_NAMES[variant],
                     at(ns, 0.5), at(ns, 0.9), at(ns, 0.99), at(ns, 0.999), ns.back(), at(cycles, 0.5), ROUNDS);
            rows.insert(rows.end(), row, row + strlen(row));
        }
    rows.push_back('\0');
    printf("{\"device\": \"%s\", \"driver\": \"%s\", \"date\": \"%s\", \"commit\": \"%s\", \"rows\": [\n%s\n]}\n",
           prop.name, driver, date, commit, rows.data());
    return 0;
}
