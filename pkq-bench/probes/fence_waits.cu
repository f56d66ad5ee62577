// fence_waits.cu: what a warp's fence, barrier or store waits for while
// reads of mapped host memory are in flight on its SM: bulk copies
// (cp.async.bulk, the async proxy) or plain loads (ld.relaxed.sys), issued
// by the timing warp itself or by another warp of its block. Not pkq: a
// probe of the physics under the wide lane's poll (docs/design/wide-tasks.md,
// Alternatives).
//
// One block of `warps` warps. Each round the issuing warps start their
// reads (bulk copies of 64 bytes by lane 0, each on an mbarrier of its own;
// or one 8-byte load a lane of lanes 0..7, whose values are used only after
// the timed operation), the block meets at a barrier, and warp 0 times one
// operation with clock64; then the reads are waited for. Each row is the
// mean of 56 rounds (8 warm-up rounds dropped), in SM cycles, with the same
// operation timed with no read in flight beside it.
//
// Not part of the crate (CUDA runtime API, built on the GPU host):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o fence_waits fence_waits.cu
//   ./fence_waits COMMIT "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader)" > fence_waits.json
// It writes the results file's JSON (rows: `<operation>, <reads in flight>`,
// `cycles`) to stdout.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <ctime>

#include "../../cuda/pkq_mem.cuh"

// pkq's bulk copies exist in the device pass for sm_90 on (PKQ_BULK_COPY).
#if defined(__CUDA_ARCH__) && !defined(PKQ_BULK_COPY)
#error "fence_waits needs sm_90 or later: its reads in flight include bulk copies"
#endif
#ifdef PKQ_BULK_COPY
using pkq::bulk_bar_init;
using pkq::bulk_read_start;
using pkq::bulk_wait;
#endif

enum Op { NOTHING, BARRIER, FENCE_CTA, FENCE_GPU, STORE_DEV_FENCE_GPU, STORE_HOST, STORE_HOST_FENCE_SYS, LOAD_DEV, OPS };
const char* const OP_NAMES[OPS] = {"nothing",
                                   "barrier.sync",
                                   "fence.acq_rel.cta",
                                   "fence.acq_rel.gpu",
                                   "st.relaxed.gpu to device memory + fence.acq_rel.gpu",
                                   "st.relaxed.sys to host memory",
                                   "st.relaxed.sys to host memory + fence.sc.sys",
                                   "ld.relaxed.gpu of device memory"};
enum Reads { NONE, BULK, LOADS };

// `reads` of host memory in flight from warps [first, last] (bulk: 3
// copies by lane 0; loads: lanes 0..7 one each) while warp 0 times `op`.
__global__ void probe(const uint64_t* host, uint64_t* host_w, uint64_t* dev, int op, int reads, int first, int last,
                      long long* out) {
    __shared__ __align__(128) uint64_t buf[8][3][8];
    __shared__ unsigned long long bars[8][3];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool issuer = reads != NONE && warp >= first && warp <= last;
#ifdef PKQ_BULK_COPY
    if (lane == 0)
        for (int d = 0; d < 3; ++d) bulk_bar_init(&bars[warp][d]);
#endif
    __syncthreads();
    long long total = 0;
    for (int round = 0; round < 64; ++round) {
        uint64_t v = 0;
        uint64_t state[3] = {};
#ifdef PKQ_BULK_COPY
        if (issuer && reads == BULK && lane == 0)
            for (int d = 0; d < 3; ++d)
                state[d] = bulk_read_start(reinterpret_cast<uint8_t*>(&buf[warp][d][0]), host + 64 * warp + 8 * d, 64,
                                           &bars[warp][d]);
#endif
        if (issuer && reads == LOADS && lane < 8)
            asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(host + 64 * warp + lane) : "memory");
        __syncthreads();
        const long long t0 = clock64();
        if (warp == 0) {
            if (op == BARRIER) asm volatile("barrier.sync 1, 32;" ::: "memory");
            if (op == FENCE_CTA) asm volatile("fence.acq_rel.cta;" ::: "memory");
            if (op == FENCE_GPU) asm volatile("fence.acq_rel.gpu;" ::: "memory");
            if (op == STORE_DEV_FENCE_GPU) {
                if (lane == 0)
                    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(dev + 64 + round), "l"(1ull) : "memory");
                asm volatile("fence.acq_rel.gpu;" ::: "memory");
            }
            if (op == STORE_HOST || op == STORE_HOST_FENCE_SYS) {
                if (lane == 0)
                    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(host_w), "l"(1ull * round) : "memory");
                if (op == STORE_HOST_FENCE_SYS) asm volatile("fence.sc.sys;" ::: "memory");
            }
            if (op == LOAD_DEV) {
                uint64_t x;
                asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(x) : "l"(dev + round) : "memory");
                v += x;
            }
            __syncwarp();
        }
        const long long t1 = clock64();
        if (round >= 8 && threadIdx.x == 0) total += t1 - t0;
#ifdef PKQ_BULK_COPY
        if (issuer && reads == BULK && lane == 0)
            for (int d = 0; d < 3; ++d) bulk_wait(&bars[warp][d], state[d]);
#endif
        if (v == 0x5eed) out[1] = v;  // the loads' values used after the timing
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = total / 56;
}

int main(int argc, char** argv) {
    const char* commit = argc > 1 ? argv[1] : "unknown";
    const char* driver = argc > 2 ? argv[2] : "unknown";
    uint64_t *host, *host_w, *dev_host, *dev_host_w, *dev;
    long long* out;
    cudaHostAlloc(&host, 8 * 64 * 8, cudaHostAllocMapped);
    cudaHostAlloc(&host_w, 4096, cudaHostAllocMapped);
    cudaHostGetDevicePointer(&dev_host, host, 0);
    cudaHostGetDevicePointer(&dev_host_w, host_w, 0);
    cudaMalloc(&dev, 1 << 20);
    cudaMemset(dev, 0, 1 << 20);
    cudaMallocManaged(&out, 1024);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    char date[32];
    const time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    printf("{\"device\": \"%s\", \"driver\": \"%s\", \"date\": \"%s\", \"commit\": \"%s\", \"rows\": [\n", prop.name,
           driver, date, commit);
    struct Case {
        int reads, first, last, warps;
        const char* name;
    };
    const Case cases[] = {
        {NONE, 0, 0, 2, "nothing in flight"},
        {BULK, 0, 0, 2, "3 bulk copies of host memory in flight from the same warp"},
        {BULK, 1, 1, 2, "3 bulk copies of host memory in flight from another warp"},
        {LOADS, 1, 1, 2, "loads of host memory in flight from another warp"},
        {LOADS, 1, 7, 8, "loads of host memory in flight from 7 other warps"},
    };
    bool first_row = true;
    for (int op = 0; op < OPS; ++op)
        for (const Case& c : cases) {
            long long cycles = -1;
            for (int run = 0; run < 2; ++run) {  // the first run warms up
                probe<<<1, 32 * c.warps>>>(dev_host, dev_host_w, dev, op, c.reads, c.first, c.last, out);
                if (cudaDeviceSynchronize() != cudaSuccess) return 1;
                cycles = out[0];
            }
            printf("%s  {\"name\": \"%s, %s\", \"cycles\": %lld}", first_row ? "" : ",\n", OP_NAMES[op], c.name, cycles);
            first_row = false;
        }
    printf("\n]}\n");
    return 0;
}
