// fault_across_devices.cu: does a trap on device 0 break device 1's context in
// the same process? A spinner kernel per device counts into mapped host
// memory until its stop flag is set; then a trap kernel on device 0; then
// every query on device 1, and whether its spinner still counts and sees
// its stop. Needs two GPUs. Not part of the crate (built on the GPU host):
//   nvcc -O2 -arch=sm_90 -o fault_across_devices fault_across_devices.cu -lcuda
//   CUDA_MODULE_LOADING=EAGER ./fault_across_devices
// (eager loading: a lazily loaded kernel's first launch waits for the
// running spinners, and the trap would never run). What it showed, and the
// decision it supports: docs/design/fault-verdict.md#verdict.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <ctime>
#include <cstdio>

__global__ void spinner(volatile uint64_t* stop, volatile uint64_t* count) {
    uint64_t n = 0;
    while (*stop == 0) {
        ++n;
        if ((n & 1023) == 0) *count = n;
        __nanosleep(100);
    }
    *count = n | (1ull << 63);
}
__global__ void trap_kernel() { asm volatile("trap;"); }
__global__ void small(int* p) { *p = 42; }

#define SHOW(x) printf("%7.3f s %-60s -> %s\n", now_s() - t_start, #x, cudaGetErrorName(x))

static double t_start;
static double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
// Polls a stream until it is done or `secs` passed.
static cudaError_t wait_stream(cudaStream_t s, double secs) {
    double t0 = now_s();
    cudaError_t e;
    while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
        if (now_s() - t0 > secs) return cudaErrorNotReady;
        usleep(1000);
    }
    return e;
}

int main() {
    setvbuf(stdout, nullptr, _IONBF, 0);
    t_start = now_s();
    int n = 0;
    cudaGetDeviceCount(&n);
    printf("devices: %d\n", n);
    if (n < 2) return 0;
    volatile uint64_t *stop[2], *count[2];
    cudaStream_t s[2];
    for (int d = 0; d < 2; ++d) {
        cudaSetDevice(d);
        cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking);
        uint64_t* p;
        cudaHostAlloc(&p, 256, cudaHostAllocMapped | cudaHostAllocPortable);
        p[0] = 0;
        p[16] = 0;
        stop[d] = p;
        count[d] = p + 16;
        spinner<<<1, 32, 0, s[d]>>>(stop[d], count[d]);
        SHOW(cudaGetLastError());
    }
    usleep(100000);
    printf("counts before: %llu %llu\n", (unsigned long long)*count[0], (unsigned long long)*count[1]);
    cudaSetDevice(0);
    cudaStream_t t;
    cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking);
    trap_kernel<<<1, 1, 0, t>>>();
    SHOW(wait_stream(t, 5));
    usleep(100000);
    SHOW(cudaStreamQuery(s[0]));
    cudaSetDevice(1);
    uint64_t c1 = *count[1];
    usleep(20000);
    uint64_t c2 = *count[1];
    printf("device 1 spinner still counting: %llu -> %llu (%s)\n", (unsigned long long)c1,
           (unsigned long long)c2, c2 > c1 ? "yes" : "no");
    SHOW(cudaStreamQuery(s[1]));
    SHOW(cudaGetLastError());
    {
        CUcontext cur = nullptr;
        cuCtxGetCurrent(&cur);
        CUresult r = cuStreamQuery(s[1]);
        const char* name = nullptr;
        cuGetErrorName(r, &name);
        printf("%-60s -> %s\n", "driver cuStreamQuery(device 1's stream), ctx 1 current", name);
        CUcontext c0;
        CUdevice dev0;
        cuDeviceGet(&dev0, 0);
        cuDevicePrimaryCtxRetain(&c0, dev0);
        cuCtxPushCurrent(c0);
        r = cuStreamQuery(s[1]);
        cuGetErrorName(r, &name);
        printf("%-60s -> %s\n", "driver cuStreamQuery(device 1's stream), ctx 0 current", name);
        CUcontext popped;
        cuCtxPopCurrent(&popped);
    }
    int* dp = nullptr;
    SHOW(cudaMalloc(&dp, 4));
    cudaStream_t u;
    SHOW(cudaStreamCreateWithFlags(&u, cudaStreamNonBlocking));
    small<<<1, 1, 0, u>>>(dp);
    SHOW(cudaGetLastError());
    SHOW(wait_stream(u, 5));
    *stop[1] = 1;
    SHOW(wait_stream(s[1], 5));
    printf("device 1 spinner's last word: %llx\n", (unsigned long long)*count[1]);
    return 0;
}
