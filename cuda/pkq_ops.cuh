// pkq_ops.cuh: the built-in ops, each run by one whole warp (mirrors src/ops.rs).
#pragma once
#include <cstdint>

#include "pkq_layout.h"
#include "pkq_mem.cuh"
#include "pkq_slot.cuh"

namespace pkq {

// What a handler hands back: the task's status and inline result, and whether
// it wrote device memory that later work must see (then the worker fences at
// GPU scope before it publishes the completion).
struct Outcome {
    uint32_t status;
    uint64_t value;
    bool wrote_device_memory;
};

__device__ __forceinline__ Outcome outcome(uint32_t status, uint64_t value, bool wrote_device_memory) {
    Outcome o;
    o.status = status;
    o.value = value;
    o.wrote_device_memory = wrote_device_memory;
    return o;
}

__device__ __forceinline__ uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// ECHO: the six argument words folded into one; with only the first word set
// it returns that word unchanged, and every argument bit reaches the result.
__device__ __forceinline__ uint64_t echo_fold(const uint64_t (&a)[PKQ_ARGS_BYTES / 8]) {
    return a[0] ^ rotl(a[1], 8) ^ rotl(a[2], 16) ^ rotl(a[3], 24) ^ rotl(a[4], 32) ^ rotl(a[5], 40);
}

// AXPY: y[i] = a * x[i] + y[i], i < n <= PKQ_AXPY_MAX_N, one fused multiply-add
// per element. Loads and stores use the .cg path (L2, not L1): L1 is not
// coherent and lives as long as the resident kernel, so a plain load could
// return data that a copy or another kernel replaced since an earlier task.
__device__ __forceinline__ Outcome op_axpy(const uint64_t (&args)[PKQ_ARGS_BYTES / 8], uint32_t lane) {
    const float* __restrict__ x = reinterpret_cast<const float*>(args[PKQ_AXPY_OFF_X / 8]);
    float* __restrict__ y = reinterpret_cast<float*>(args[PKQ_AXPY_OFF_Y / 8]);
    const uint64_t na = args[PKQ_AXPY_OFF_N / 8];
    const uint32_t n = static_cast<uint32_t>(na);
    const float a = __uint_as_float(static_cast<uint32_t>(na >> 32));
    if (n > PKQ_AXPY_MAX_N || (n > 0 && (x == nullptr || y == nullptr))) {
        return outcome(PKQ_STATUS_BAD_ARGS, 0, false);
    }
    uint32_t done = 0;
    if (((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0) {
        const uint32_t n4 = n / 4;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
#pragma unroll 4
        for (uint32_t i = lane; i < n4; i += 32) {
            const float4 xv = __ldcg(x4 + i);
            float4 yv = __ldcg(y4 + i);
            yv.x = fmaf(a, xv.x, yv.x);
            yv.y = fmaf(a, xv.y, yv.y);
            yv.z = fmaf(a, xv.z, yv.z);
            yv.w = fmaf(a, xv.w, yv.w);
            __stcg(y4 + i, yv);
        }
        done = n4 * 4;
    }
    for (uint32_t i = done + lane; i < n; i += 32) __stcg(y + i, fmaf(a, __ldcg(x + i), __ldcg(y + i)));
    return outcome(PKQ_STATUS_OK, 0, true);
}

// SPIN: busy-waits `ns` by the global timer (the warp's lane 0 reads it and
// broadcasts, so all lanes leave together); returns the nanoseconds waited.
__device__ __forceinline__ Outcome op_spin(const uint64_t (&args)[PKQ_ARGS_BYTES / 8]) {
    const uint64_t ns = args[0];
    if (ns > PKQ_SPIN_MAX_NS) return outcome(PKQ_STATUS_BAD_ARGS, 0, false);
    const uint64_t t0 = __shfl_sync(0xffffffffu, globaltimer(), 0);
    uint64_t t = t0;
    while (t - t0 < ns) t = __shfl_sync(0xffffffffu, globaltimer(), 0);
    return outcome(PKQ_STATUS_OK, t - t0, false);
}

// The built-in handler table.
struct BuiltinOps {
    __device__ __forceinline__ Outcome operator()(const Task& t, uint32_t lane) const {
        switch (t.op) {
            case PKQ_OP_NOP: return outcome(PKQ_STATUS_OK, 0, false);
            case PKQ_OP_ECHO: return outcome(PKQ_STATUS_OK, echo_fold(t.args), false);
            case PKQ_OP_AXPY: return op_axpy(t.args, lane);
            case PKQ_OP_SPIN: return op_spin(t.args);
            case PKQ_OP_TRAP: __trap(); return outcome(PKQ_STATUS_OK, 0, false);
            default: return outcome(PKQ_STATUS_UNKNOWN_OP, 0, false);
        }
    }
};

}  // namespace pkq
