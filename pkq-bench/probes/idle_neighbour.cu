// idle_neighbour.cu: what one resident warp that waits costs a memory-bound
// kernel (y = A x, A 4096 x 4096 floats, a block of 512 threads per row,
// as the isolation bench's) running beside it on the whole GPU (the
// waiter's SM takes GEMV blocks too), by the way the warp waits. Not pkq: a
// probe of the physics under the isolation bench's "pkq idle" rows.
//
// The waiter is one block of one warp; it runs until a flag in device memory
// (set from another stream) says stop, and counts its loop trips. Modes:
//   0  mapped   ld.relaxed.sys of host memory, 8 lanes (a pkq poll)
//   1  mapped   ld.volatile of host memory, 8 lanes
//   2  mapped   ld.relaxed.sys of host memory, lane 0 alone
//   3  device   ld.relaxed.sys of device memory, 8 lanes
//   4  alu      no loads: a clock loop
//   5  mapped   as 0, then __nanosleep(arg) each trip
//   6  nap      __nanosleep(arg) each trip, no loads
// The kernel's time is between events around a launch queued behind
// another (the host's submission out of it), the median of `runs`; each
// mode is timed in turn with no waiter, three rounds. The trips a second
// are the last round's.
//
// Not part of the crate (CUDA runtime API, built on the GPU host):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o idle_neighbour idle_neighbour.cu
//   ./idle_neighbour 2000
// What it shows, and the idle policy it decided:
// docs/design/idle-policies.md#default.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                        \
    do {                                                                                \
        cudaError_t e = (x);                                                            \
        if (e != cudaSuccess) {                                                         \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,              \
                         cudaGetErrorString(e));                                        \
            std::exit(1);                                                               \
        }                                                                               \
    } while (0)

constexpr uint32_t DIM = 4096;

__device__ __forceinline__ float warp_sum(float s) {
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// A block of 512 threads per row, 16-byte loads: HBM bandwidth.
__global__ void gemv(const float* a, const float* x, float* y) {
    __shared__ float part[16];
    const float4* row = reinterpret_cast<const float4*>(a + static_cast<uint64_t>(blockIdx.x) * DIM);
    const float4* xv = reinterpret_cast<const float4*>(x);
    float s = 0.0f;
    for (uint32_t i = threadIdx.x; i < DIM / 4; i += blockDim.x) {
        const float4 v = __ldcs(row + i), w = __ldg(xv + i);
        s = fmaf(v.x, w.x, fmaf(v.y, w.y, fmaf(v.z, w.z, fmaf(v.w, w.w, s))));
    }
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < 16 ? part[threadIdx.x] : 0.0f;
        s = warp_sum(s);
        if (threadIdx.x == 0) y[blockIdx.x] = s;
    }
}

__device__ __forceinline__ uint64_t ld_relaxed_sys(const uint64_t* p) {
    uint64_t v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t ld_volatile(const uint64_t* p) {
    uint64_t v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__global__ void waiter(int mode, uint32_t arg, const uint64_t* host, const uint64_t* dev,
                       const volatile int* stop, unsigned long long* trips) {
    const uint32_t lane = threadIdx.x;
    uint64_t fold = 0, n = 0;
    for (;;) {
        if ((n & 63) == 0 && __shfl_sync(0xffffffffu, *stop, 0) != 0) break;
        ++n;
        switch (mode) {
            case 0:
                if (lane < 8) fold += ld_relaxed_sys(host + lane);
                break;
            case 1:
                if (lane < 8) fold += ld_volatile(host + lane);
                break;
            case 2:
                if (lane == 0) fold += ld_relaxed_sys(host);
                break;
            case 3:
                if (lane < 8) fold += ld_relaxed_sys(dev + lane);
                break;
            case 4: {
                const long long t = clock64();
                while (clock64() - t < 2000) {
                }
                break;
            }
            case 5:
                if (lane < 8) fold += ld_relaxed_sys(host + lane);
                fold = __shfl_sync(0xffffffffu, fold, 0);
                __nanosleep(arg);
                break;
            default:
                __nanosleep(arg);
                break;
        }
        fold = __shfl_sync(0xffffffffu, fold, 0);
    }
    if (lane == 0) {
        *trips = n;
        if (fold == 42) trips[1] = fold;
    }
}

struct Gpu {
    float *a, *x, *y;
    cudaStream_t app;
    cudaEvent_t e0, e1;
    int runs;

    // Median device time of one gemv, µs.
    float time() {
        std::vector<float> t;
        for (int i = 0; i < runs; ++i) {
            gemv<<<DIM, 512, 0, app>>>(a, x, y);
            CHECK(cudaGetLastError());
            CHECK(cudaEventRecord(e0, app));
            gemv<<<DIM, 512, 0, app>>>(a, x, y);
            CHECK(cudaGetLastError());
            CHECK(cudaEventRecord(e1, app));
            CHECK(cudaStreamSynchronize(app));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms * 1e3f);
        }
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
    }
};

int main(int argc, char** argv) {
    Gpu g{};
    g.runs = argc > 1 ? std::atoi(argv[1]) : 2000;
    if (g.runs < 1) {
        std::fprintf(stderr, "usage: idle_neighbour [RUNS >= 1]\n");
        return 2;
    }
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    CHECK(cudaMalloc(&g.a, sizeof(float) * DIM * DIM));
    CHECK(cudaMalloc(&g.x, sizeof(float) * DIM));
    CHECK(cudaMalloc(&g.y, sizeof(float) * DIM));
    CHECK(cudaMemset(g.a, 0, sizeof(float) * DIM * DIM));
    CHECK(cudaMemset(g.x, 0, sizeof(float) * DIM));
    CHECK(cudaStreamCreateWithFlags(&g.app, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&g.e0));
    CHECK(cudaEventCreate(&g.e1));
    uint64_t* host;
    CHECK(cudaHostAlloc(&host, 4096, cudaHostAllocMapped));
    std::fill(host, host + 512, 0);
    uint64_t* host_d;
    CHECK(cudaHostGetDevicePointer(&host_d, host, 0));
    uint64_t* dev;
    CHECK(cudaMalloc(&dev, 4096));
    CHECK(cudaMemset(dev, 0, 4096));
    int* stop;
    CHECK(cudaMalloc(&stop, sizeof(int)));
    unsigned long long* trips;
    CHECK(cudaMalloc(&trips, 2 * sizeof(unsigned long long)));
    cudaStream_t side, ctl;
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&ctl, cudaStreamNonBlocking));
    const int one = 1, zero = 0;
    // Every kernel loaded before any waiter runs.
    CHECK(cudaMemcpy(stop, &one, sizeof(int), cudaMemcpyHostToDevice));
    waiter<<<1, 32, 0, side>>>(0, 0, host_d, dev, stop, trips);
    CHECK(cudaStreamSynchronize(side));
    g.time();

    struct Case {
        const char* name;
        int mode;
        uint32_t arg;
    };
    const Case cases[] = {
        {"mapped relaxed.sys, 8 lanes (a pkq poll)", 0, 0},
        {"mapped volatile, 8 lanes", 1, 0},
        {"mapped relaxed.sys, 1 lane", 2, 0},
        {"device relaxed.sys, 8 lanes", 3, 0},
        {"alu clock loop", 4, 0},
        {"mapped relaxed.sys + nanosleep 200", 5, 200},
        {"mapped relaxed.sys + nanosleep 1000", 5, 1000},
        {"mapped relaxed.sys + nanosleep 5000", 5, 5000},
        {"mapped relaxed.sys + nanosleep 20000", 5, 20000},
        {"nanosleep 1000, no loads", 6, 1000},
    };
    for (const Case& c : cases) {
        float ratios[3];
        float alone_t = 0, beside_t = 0;
        unsigned long long n = 0;
        double secs = 0;
        for (int r = 0; r < 3; ++r) {
            const float alone = g.time();
            CHECK(cudaMemcpy(stop, &zero, sizeof(int), cudaMemcpyHostToDevice));
            waiter<<<1, 32, 0, side>>>(c.mode, c.arg, host_d, dev, stop, trips);
            CHECK(cudaGetLastError());
            const auto t0 = std::chrono::steady_clock::now();
            const float beside = g.time();
            CHECK(cudaMemcpyAsync(stop, &one, sizeof(int), cudaMemcpyHostToDevice, ctl));
            CHECK(cudaStreamSynchronize(ctl));
            CHECK(cudaStreamSynchronize(side));
            secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            CHECK(cudaMemcpy(&n, trips, sizeof(n), cudaMemcpyDeviceToHost));
            ratios[r] = beside / alone;
            alone_t += alone / 3;
            beside_t += beside / 3;
        }
        std::printf("%-42s alone %.2f us, beside %.2f us = %.3fx (rounds %.3f %.3f %.3f), %.2f M trips/s\n",
                    c.name, alone_t, beside_t, beside_t / alone_t, ratios[0], ratios[1], ratios[2],
                    n / secs / 1e6);
    }
    return 0;
}
