// pkq_ops.cuh: the built-in ops, each run by one whole warp, and their GROUP_
// twins, run by every thread of a block or group (mirrors src/op.rs and
// src/builtin/).
#pragma once
#include <cstdint>

#include "pkq_handler.cuh"
#include "pkq_layout.h"
#include "pkq_group.cuh"
#include "pkq_mem.cuh"

namespace pkq {

__device__ __forceinline__ uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// ECHO: the six argument words folded into one; with only the first word set
// it returns that word unchanged, and every argument bit reaches the result.
__device__ __forceinline__ uint64_t echo_fold(const uint64_t (&a)[PKQ_ARGS_BYTES / 8]) {
    return a[0] ^ rotl(a[1], 8) ^ rotl(a[2], 16) ^ rotl(a[3], 24) ^ rotl(a[4], 32) ^ rotl(a[5], 40);
}

// a * x + y, element by element, one fused multiply-add each.
__device__ __forceinline__ float4 fma4(float a, float4 x, float4 y) {
    return make_float4(fmaf(a, x.x, y.x), fmaf(a, x.y, y.y), fmaf(a, x.z, y.z), fmaf(a, x.w, y.w));
}

// y[i] = a * x[i] + y[i] for this thread's i < n: `first`, then every
// `step`-th, 16 bytes at a time and four in flight where x and y are
// 16-byte aligned. AXPY's work on a warp (its lane, 32), GROUP_AXPY's on a
// group (its rank, size). Loads and stores use the .cg path (L2, not L1):
// L1 is not coherent and lives as long as the resident kernel, so a plain
// load could return data that a copy or another kernel replaced since an
// earlier task.
__device__ __forceinline__ void axpy_strided(float a, const float* __restrict__ x, float* __restrict__ y,
                                             uint64_t n, uint64_t first, uint64_t step) {
    uint64_t done = 0;
    if (((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0) {
        const uint64_t n4 = n / 4;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        uint64_t j = first;
        for (; j + 3 * step < n4; j += 4 * step) {
            float4 xv[4], yv[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                xv[k] = __ldcg(x4 + j + k * step);
                yv[k] = __ldcg(y4 + j + k * step);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) __stcg(y4 + j + k * step, fma4(a, xv[k], yv[k]));
        }
        for (; j < n4; j += step) __stcg(y4 + j, fma4(a, __ldcg(x4 + j), __ldcg(y4 + j)));
        done = n4 * 4;
    }
    for (uint64_t i = done + first; i < n; i += step) __stcg(y + i, fmaf(a, __ldcg(x + i), __ldcg(y + i)));
}

// AXPY: y[i] = a * x[i] + y[i], i < n <= PKQ_AXPY_MAX_N, on one warp.
__device__ __forceinline__ Outcome op_axpy(const uint64_t (&args)[PKQ_ARGS_BYTES / 8], uint32_t lane) {
    const float* __restrict__ x = reinterpret_cast<const float*>(args[PKQ_AXPY_OFF_X / 8]);
    float* __restrict__ y = reinterpret_cast<float*>(args[PKQ_AXPY_OFF_Y / 8]);
    const uint64_t na = args[PKQ_AXPY_OFF_N / 8];
    const uint32_t n = static_cast<uint32_t>(na);
    const float a = __uint_as_float(static_cast<uint32_t>(na >> 32));
    if (n > PKQ_AXPY_MAX_N || (n > 0 && (x == nullptr || y == nullptr)) ||
        ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 3) != 0) {
        return outcome(PKQ_STATUS_BAD_ARGS, 0, false);
    }
    axpy_strided(a, x, y, n, lane, 32);
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

// COPY_IO's whole runs of its input's 16-byte pieces, COPY_IO_RUN a lane
// with their loads in flight together: from piece 0 while a run lies
// within the input's `pieces` and wholly within the output of `out_len`
// bytes or wholly past it (a uniform test a run, no branch a piece), each
// piece XORed with `k` into the output where it holds it. Returns the sum
// of the bytes read and the first piece not done. Out of line: inlined, it
// cost every small IO task device time (io_breakdown;
// docs/design/io-worker-path.md#small-code-loads-before-use).
constexpr uint32_t COPY_IO_RUN = 8;
__device__ __noinline__ uint2 copy_io_runs(const uint4* __restrict__ in16, uint4* __restrict__ out16,
                                           uint32_t pieces, uint32_t out_len, uint32_t k, uint32_t lane) {
    uint32_t sum = 0, base = 0;
    for (; base + 32 * COPY_IO_RUN <= pieces; base += 32 * COPY_IO_RUN) {
        const bool all = 16 * (base + 32 * COPY_IO_RUN) <= out_len;
        if (!all && 16 * base < out_len) break;
        uint4 v[COPY_IO_RUN];
#pragma unroll
        for (uint32_t j = 0; j < COPY_IO_RUN; ++j) v[j] = in16[base + 32 * j + lane];
#pragma unroll
        for (uint32_t j = 0; j < COPY_IO_RUN; ++j) {
            if (all) out16[base + 32 * j + lane] = make_uint4(v[j].x ^ k, v[j].y ^ k, v[j].z ^ k, v[j].w ^ k);
            sum += __vsadu4(v[j].x, 0) + __vsadu4(v[j].y, 0) + __vsadu4(v[j].z, 0) + __vsadu4(v[j].w, 0);
        }
    }
    return make_uint2(sum, base);
}

// COPY_IO: out[i] = (i < in_len ? in[i] : 0) ^ key for i < out_len (at most
// the output's room); the value is the sum of the input bytes. It touches
// only its task's input and output (an IO task's; a plain task has none).
__device__ __forceinline__ Outcome op_copy_io(const Context& ctx) {
    const pkq_copy_io_args a = ctx.args<pkq_copy_io_args>();
    if (a.out_len > ctx.out_cap) return fail(PKQ_STATUS_BAD_ARGS);
    // Eight bytes at a time: the worker's rooms are 16-byte aligned and whole
    // groups of 112 bytes (bytes past the input's length are masked off).
    const uint64_t key = 0x0101010101010101ull * static_cast<uint8_t>(a.key);
    const uint64_t* __restrict__ in = reinterpret_cast<const uint64_t*>(ctx.input);
    uint64_t* __restrict__ out = reinterpret_cast<uint64_t*>(ctx.output);
    // At most 64 KiB of bytes of at most 255: the sum fits 32 bits.
    uint32_t sum = 0;
    constexpr uint32_t BATCH = 4;
    // The input's whole 16-byte pieces (those the runs left): no mask, 16
    // bytes a lane, a batch's loads in flight together; stored whole where
    // the output holds the piece, else each 8-byte half that starts within
    // it.
    const uint32_t pieces = ctx.in_len / 16;
    const uint4* __restrict__ in16 = reinterpret_cast<const uint4*>(ctx.input);
    uint4* __restrict__ out16 = reinterpret_cast<uint4*>(ctx.output);
    const uint32_t k = static_cast<uint32_t>(key);
    uint32_t base = 0;
    if (pieces >= 32 * COPY_IO_RUN) {
        const uint2 done = copy_io_runs(in16, out16, pieces, a.out_len, k, ctx.lane);
        sum = done.x;
        base = done.y;
    }
    for (; base < pieces; base += 32 * BATCH) {
        uint4 v[BATCH];
#pragma unroll
        for (uint32_t j = 0; j < BATCH; ++j) v[j] = in16[min(base + 32 * j + ctx.lane, pieces - 1)];
#pragma unroll
        for (uint32_t j = 0; j < BATCH; ++j) {
            const uint32_t piece = base + 32 * j + ctx.lane;
            if (piece < pieces) {
                if (16 * piece + 16 <= a.out_len) {
                    out16[piece] = make_uint4(v[j].x ^ k, v[j].y ^ k, v[j].z ^ k, v[j].w ^ k);
                } else {
                    // The piece the output ends in, or one past it.
                    const uint64_t lo = (static_cast<uint64_t>(v[j].y) << 32) | v[j].x;
                    const uint64_t hi = (static_cast<uint64_t>(v[j].w) << 32) | v[j].z;
                    if (16 * piece < a.out_len) out[2 * piece] = lo ^ key;
                    if (16 * piece + 8 < a.out_len) out[2 * piece + 1] = hi ^ key;
                }
                sum += __vsadu4(v[j].x, 0) + __vsadu4(v[j].y, 0) + __vsadu4(v[j].z, 0) + __vsadu4(v[j].w, 0);
            }
        }
    }
    // The rest (the input's last bytes, the output past the input), word
    // by word from the first after those pieces.
    const uint32_t from = 2 * pieces;
    const uint32_t in_words = (ctx.in_len + 7) / 8;
    const uint32_t words = (max(a.out_len, ctx.in_len) + 7) / 8;
    for (uint32_t base = from; base < words; base += 32 * BATCH) {
        // A batch's loads first, all in flight together (uniform guards; a
        // lane past the input loads its last word, masked off below), then
        // their uses.
        uint64_t v[BATCH];
#pragma unroll
        for (uint32_t j = 0; j < BATCH; ++j) {
            v[j] = 0;
        }
#pragma unroll
        for (uint32_t j = 0; j < BATCH; ++j) {
            if (base + 32 * j >= in_words) break;
            v[j] = in[min(base + 32 * j + ctx.lane, in_words - 1)];
        }
#pragma unroll
        for (uint32_t j = 0; j < BATCH; ++j) {
            if (base + 32 * j >= words) break;
            const uint32_t at = 8 * (base + 32 * j + ctx.lane);
            // The word's bytes within the input, 0 to 8: a mask of 8 keep
            // bytes (two shifts of 4 keep bytes each: a shift by 64 would
            // be undefined).
            const uint32_t keep = min(ctx.in_len - min(at, ctx.in_len), 8u);
            const uint64_t x = v[j] & ~((~0ull << (4 * keep)) << (4 * keep));
            if (at < a.out_len) out[at / 8] = x ^ key;
            sum += __vsadu4(static_cast<uint32_t>(x), 0) + __vsadu4(static_cast<uint32_t>(x >> 32), 0);
        }
    }
    return ok_output(a.out_len, __reduce_add_sync(0xffffffffu, sum));
}

// Reads device memory through L2 (see AXPY).
__device__ __forceinline__ float ld(const float* p) { return __ldcg(p); }

// Sum over the warp (every lane gets it).
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Copies `bytes` from `src` to `dst` (which do not overlap): this thread's
// 16-byte pieces, `first` then every `step`-th, sixteen loads in flight,
// then the pieces left four at a time, each four in flight together (the
// last four guarded: a thread may have fewer left), where both ends are
// 16-byte aligned; bytes the same way otherwise. The bytes in flight are
// the bandwidth (host memory is a PCIe round trip away), and each batch of
// loads costs a round trip. MEMCPY's work on a warp (its lane, 32),
// GROUP_MEMCPY's on a group (its rank, size).
__device__ __forceinline__ void copy_strided(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src,
                                             uint64_t bytes, uint64_t first, uint64_t step) {
    uint64_t done = 0;
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
        const uint64_t n16 = bytes / 16;
        int4* d16 = reinterpret_cast<int4*>(dst);
        const int4* s16 = reinterpret_cast<const int4*>(src);
        uint64_t j = first;
        for (; j + 15 * step < n16; j += 16 * step) {
            int4 v[16];
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = __ldcg(s16 + j + k * step);
#pragma unroll
            for (int k = 0; k < 16; ++k) __stcg(d16 + j + k * step, v[k]);
        }
        for (; j < n16; j += 4 * step) {
            int4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (j + k * step < n16) v[k] = __ldcg(s16 + j + k * step);
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (j + k * step < n16) __stcg(d16 + j + k * step, v[k]);
        }
        done = n16 * 16;
    }
    for (uint64_t i = done + first; i < bytes; i += step) dst[i] = __ldcg(src + i);
}

// MEMCPY: `bytes` from `src` to `dst` on one warp (copy_strided).
__device__ __forceinline__ Outcome op_memcpy(const Context& ctx) {
    const pkq_memcpy_args a = ctx.args<pkq_memcpy_args>();
    if (a.bytes > PKQ_MEMCPY_MAX_BYTES || (a.bytes > 0 && (a.dst == 0 || a.src == 0))) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    copy_strided(reinterpret_cast<uint8_t*>(a.dst), reinterpret_cast<const uint8_t*>(a.src), a.bytes, ctx.lane, 32);
    return ok_after_writes();
}

// MEMSET: the byte `value` over `bytes`.
__device__ __forceinline__ Outcome op_memset(const Context& ctx) {
    const pkq_memset_args a = ctx.args<pkq_memset_args>();
    if (a.bytes > PKQ_MEMCPY_MAX_BYTES || (a.bytes > 0 && a.dst == 0)) return fail(PKQ_STATUS_BAD_ARGS);
    uint8_t* dst = reinterpret_cast<uint8_t*>(a.dst);
    const uint32_t b = a.value & 0xff;
    uint64_t done = 0;
    if ((a.dst & 15) == 0) {
        const uint32_t w = b * 0x01010101u;
        const int4 v = make_int4(w, w, w, w);
        const uint64_t n16 = a.bytes / 16;
        for (uint64_t i = ctx.lane; i < n16; i += 32) __stcg(reinterpret_cast<int4*>(dst) + i, v);
        done = n16 * 16;
    }
    for (uint64_t i = done + ctx.lane; i < a.bytes; i += 32) dst[i] = static_cast<uint8_t>(b);
    return ok_after_writes();
}

// DOT: each lane sums its strided share in double, then the warp adds them.
__device__ __forceinline__ Outcome op_dot(const Context& ctx) {
    const pkq_dot_args a = ctx.args<pkq_dot_args>();
    if (a.n > PKQ_DOT_MAX_N || (a.n > 0 && a.x == 0) || ((a.x | a.y) & 3) != 0) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    const float* x = reinterpret_cast<const float*>(a.x);
    const float* y = reinterpret_cast<const float*>(a.y);
    double s = 0.0;
    if (y == nullptr) {
        for (uint32_t i = ctx.lane; i < a.n; i += 32) s += ld(x + i);
    } else {
        for (uint32_t i = ctx.lane; i < a.n; i += 32) s += static_cast<double>(ld(x + i)) * ld(y + i);
    }
    return ok(bits(warp_sum(s)));
}

// GEMV: blocks of GEMV_ROWS rows; for each, every lane first issues its
// loads of all the block's rows (its columns lane, lane + 32, ...; coalesced
// across the warp), so one memory latency serves the block; then each row is
// a chain of fused multiply-adds per lane and a warp sum, which lane 0
// writes. (A row at a time paid one memory latency per row.)
constexpr int GEMV_ROWS = 8;
__device__ __forceinline__ Outcome op_gemv(const Context& ctx) {
    const pkq_gemv_args g = ctx.args<pkq_gemv_args>();
    if (g.rows > PKQ_GEMV_MAX_DIM || g.cols > PKQ_GEMV_MAX_DIM ||
        (g.rows > 0 && (g.y == 0 || (g.cols > 0 && (g.a == 0 || g.x == 0)))) ||
        ((g.a | g.x | g.y) & 3) != 0) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    if (g.rows == 0) return ok();
    const float* __restrict__ A = reinterpret_cast<const float*>(g.a);
    const float* __restrict__ x = reinterpret_cast<const float*>(g.x);
    float* __restrict__ y = reinterpret_cast<float*>(g.y);
    constexpr int K = PKQ_GEMV_MAX_DIM / 32;
    // This lane's columns of x, kept in registers across rows.
    float xs[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const uint32_t c = ctx.lane + 32 * k;
        xs[k] = c < g.cols ? ld(x + c) : 0.0f;
    }
    for (uint32_t r0 = 0; r0 < g.rows; r0 += GEMV_ROWS) {
        float a[GEMV_ROWS][K];
#pragma unroll
        for (int i = 0; i < GEMV_ROWS; ++i) {
            const float* row = A + static_cast<uint64_t>(r0 + i) * g.cols;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const uint32_t c = ctx.lane + 32 * k;
                a[i][k] = (r0 + i < g.rows && c < g.cols) ? ld(row + c) : 0.0f;
            }
        }
#pragma unroll
        for (int i = 0; i < GEMV_ROWS; ++i) {
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                if (ctx.lane + 32 * k < g.cols) s = fmaf(a[i][k], xs[k], s);
            }
            s = warp_sum(s);
            if (ctx.lane == 0 && r0 + i < g.rows) __stcg(y + r0 + i, s);
        }
    }
    return ok_after_writes();
}

// FIR: lane i computes outputs i, i + 32, ..., each as an in-order chain of
// fused multiply-adds over the taps (the host's reference does the same).
__device__ __forceinline__ Outcome op_fir(const Context& ctx) {
    const pkq_fir_args f = ctx.args<pkq_fir_args>();
    if (f.n > PKQ_FIR_MAX_N || f.taps == 0 || f.taps > PKQ_FIR_MAX_TAPS ||
        (f.n > 0 && (f.x == 0 || f.h == 0 || f.y == 0)) || ((f.x | f.h | f.y) & 3) != 0) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    if (f.n == 0) return ok();
    const float* x = reinterpret_cast<const float*>(f.x);
    const float* h = reinterpret_cast<const float*>(f.h);
    float* y = reinterpret_cast<float*>(f.y);
    // The taps, two per lane, broadcast by shuffles.
    const float h0 = ctx.lane < f.taps ? ld(h + ctx.lane) : 0.0f;
    const float h1 = ctx.lane + 32 < f.taps ? ld(h + ctx.lane + 32) : 0.0f;
    for (uint32_t i0 = 0; i0 < f.n; i0 += 32) {
        const uint32_t i = i0 + ctx.lane;
        float s = 0.0f;
        for (uint32_t k = 0; k < f.taps; ++k) {
            const float hk = __shfl_sync(0xffffffffu, k < 32 ? h0 : h1, k & 31);
            if (i < f.n) s = fmaf(hk, ld(x + i + k), s);
        }
        if (i < f.n) __stcg(y + i, s);
    }
    return ok_after_writes();
}

// x[i] * y[i] summed in double (y[i] = 1 for a sum).
__device__ __forceinline__ double dot4(float4 a, float4 b) {
    return static_cast<double>(a.x) * b.x + static_cast<double>(a.y) * b.y + static_cast<double>(a.z) * b.z +
           static_cast<double>(a.w) * b.w;
}

// GROUP_DOT: DOT over every thread of a block or group: each thread sums
// its strided share in double, 16-byte loads four at a time where both
// vectors are 16-byte aligned (the bytes in flight make the bandwidth),
// each warp adds its lanes', each block its warps' (shared memory), and
// rank 0's warp the blocks' (the group's scratch, after the group
// barrier). Every participant checks the arguments alike.
__device__ __forceinline__ Outcome op_group_dot(const Context& ctx) {
    const pkq_dot_args a = ctx.args<pkq_dot_args>();
    // Sent unchecked to a lane of warps: no group to sum over.
    if (ctx.group == nullptr) return fail(PKQ_STATUS_BAD_ARGS);
    if (a.n > PKQ_GROUP_MAX_N || (a.n > 0 && a.x == 0) || ((a.x | a.y) & 3) != 0) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    const float* x = reinterpret_cast<const float*>(a.x);
    const float* y = reinterpret_cast<const float*>(a.y);
    const uint64_t step = ctx.size();
    const uint64_t me = ctx.rank();
    const bool wide = ((a.x | a.y) & 15) == 0;
    const uint64_t n4 = wide ? a.n / 4 : 0;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    const float4 ones = make_float4(1.f, 1.f, 1.f, 1.f);
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    uint64_t j = me;
    for (; j + 3 * step < n4; j += 4 * step) {
        const float4 a0 = __ldcg(x4 + j), a1 = __ldcg(x4 + j + step);
        const float4 a2 = __ldcg(x4 + j + 2 * step), a3 = __ldcg(x4 + j + 3 * step);
        const float4 b0 = y ? __ldcg(y4 + j) : ones, b1 = y ? __ldcg(y4 + j + step) : ones;
        const float4 b2 = y ? __ldcg(y4 + j + 2 * step) : ones, b3 = y ? __ldcg(y4 + j + 3 * step) : ones;
        s0 += dot4(a0, b0);
        s1 += dot4(a1, b1);
        s2 += dot4(a2, b2);
        s3 += dot4(a3, b3);
    }
    for (; j < n4; j += step) s0 += dot4(__ldcg(x4 + j), y ? __ldcg(y4 + j) : ones);
    for (uint64_t i = n4 * 4 + me; i < a.n; i += step)
        s1 += static_cast<double>(ld(x + i)) * (y ? ld(y + i) : 1.f);
    double s = warp_sum((s0 + s1) + (s2 + s3));
    __shared__ double warps[PKQ_MAX_WARPS_PER_BLOCK];
    if (ctx.lane == 0) warps[ctx.warp] = s;
    ctx.sync_block();
    double* blocks = reinterpret_cast<double*>(ctx.scratch());
    if (ctx.warp == 0 && ctx.lane == 0) {
        double b = 0.0;
        for (uint32_t w = 0; w < ctx.warps; ++w) b += warps[w];
        __stcg(blocks + ctx.block, b);
    }
    ctx.sync_group();
    if (ctx.block != 0 || ctx.warp != 0) return ok();
    double total = 0.0;
    for (uint32_t b = ctx.lane; b < ctx.blocks; b += 32) total += __ldcg(blocks + b);
    return ok(bits(warp_sum(total)));
}

// The group ops below: every participant checks the arguments alike, and
// a task sent unchecked to a lane of warps (no group) is refused; each op
// says how it splits the work.

// GROUP_AXPY: AXPY's arguments, n up to PKQ_GROUP_MAX_N (axpy_strided over
// the group's threads).
__device__ __forceinline__ Outcome op_group_axpy(const Context& ctx) {
    const pkq_axpy_args a = ctx.args<pkq_axpy_args>();
    if (ctx.group == nullptr || a.n > PKQ_GROUP_MAX_N || (a.n > 0 && (a.x == 0 || a.y == 0)) ||
        ((a.x | a.y) & 3) != 0) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    axpy_strided(a.a, reinterpret_cast<const float*>(a.x), reinterpret_cast<float*>(a.y), a.n, ctx.rank(),
                 ctx.size());
    return ok_after_writes();
}

// GROUP_MEMCPY: MEMCPY's arguments, bytes up to PKQ_GROUP_MEMCPY_MAX_BYTES,
// on every thread of the group (copy_strided: its rank, size).
__device__ __forceinline__ Outcome op_group_memcpy(const Context& ctx) {
    const pkq_memcpy_args a = ctx.args<pkq_memcpy_args>();
    if (ctx.group == nullptr || a.bytes > PKQ_GROUP_MEMCPY_MAX_BYTES || (a.bytes > 0 && (a.dst == 0 || a.src == 0))) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    copy_strided(reinterpret_cast<uint8_t*>(a.dst), reinterpret_cast<const uint8_t*>(a.src), a.bytes, ctx.rank(),
                 ctx.size());
    return ok_after_writes();
}

// GROUP_MEMSET: MEMSET's arguments, bytes up to PKQ_GROUP_MEMCPY_MAX_BYTES:
// each thread stores the 16-byte pieces of its rank, then every size()-th.
__device__ __forceinline__ Outcome op_group_memset(const Context& ctx) {
    const pkq_memset_args a = ctx.args<pkq_memset_args>();
    if (ctx.group == nullptr || a.bytes > PKQ_GROUP_MEMCPY_MAX_BYTES || (a.bytes > 0 && a.dst == 0)) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    uint8_t* dst = reinterpret_cast<uint8_t*>(a.dst);
    const uint32_t b = a.value & 0xff;
    const uint64_t step = ctx.size(), me = ctx.rank();
    uint64_t done = 0;
    if ((a.dst & 15) == 0) {
        const uint32_t w = b * 0x01010101u;
        const int4 v = make_int4(w, w, w, w);
        const uint64_t n16 = a.bytes / 16;
        int4* d16 = reinterpret_cast<int4*>(dst);
        for (uint64_t j = me; j < n16; j += step) __stcg(d16 + j, v);
        done = n16 * 16;
    }
    for (uint64_t i = done + me; i < a.bytes; i += step) dst[i] = static_cast<uint8_t>(b);
    return ok_after_writes();
}

// y = A x over the rows of warp `warp` of `warps` (its index, then every
// `warps`-th): each lane takes a strided share of the row's columns (16
// bytes at a time, four in flight, where A, x and cols allow), then a warp
// sum that lane 0 writes. GROUP_GEMV's work, and pkq-bench's launched
// GEMV's.
// How many short rows (128 floats at most) a warp of gemv_rows takes at once.
constexpr uint32_t GEMV_SHORT_ROWS = 8;

__device__ __forceinline__ void gemv_rows(const float* __restrict__ A, const float* __restrict__ x,
                                          float* __restrict__ y, uint32_t rows, uint32_t cols, uint32_t warp,
                                          uint32_t warps, uint32_t lane) {
    const bool wide = ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(x)) & 15) == 0 && (cols & 3) == 0;
    const uint32_t c4 = cols / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    if (wide && c4 <= 32) {
        // Short rows (a 16-byte piece a lane at most): GEMV_SHORT_ROWS rows
        // of the warp's at once, their loads in flight together; each row's
        // sum as the loop below adds it.
        constexpr uint32_t R = GEMV_SHORT_ROWS;
        for (uint32_t r = warp; r < rows; r += R * warps) {
            float s[R];
            float4 av[R];
            const float4 xv = lane < c4 ? __ldcg(x4 + lane) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (uint32_t k = 0; k < R; ++k) {
                const uint64_t rk = r + static_cast<uint64_t>(k) * warps;
                av[k] = lane < c4 && rk < rows ? __ldcg(reinterpret_cast<const float4*>(A + rk * cols) + lane)
                                               : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (uint32_t k = 0; k < R; ++k) {
                const float s0 = lane < c4 ? fmaf(av[k].x, xv.x, fmaf(av[k].y, xv.y, fmaf(av[k].z, xv.z, fmaf(av[k].w, xv.w, 0.f)))) : 0.f;
                s[k] = warp_sum((s0 + 0.f) + (0.f + 0.f));
            }
#pragma unroll
            for (uint32_t k = 0; k < R; ++k) {
                const uint64_t rk = r + static_cast<uint64_t>(k) * warps;
                if (lane == 0 && rk < rows) __stcg(y + rk, s[k]);
            }
        }
        return;
    }
    for (uint32_t r = warp; r < rows; r += warps) {
        const float* row = A + static_cast<uint64_t>(r) * cols;
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
        if (wide) {
            const float4* row4 = reinterpret_cast<const float4*>(row);
            uint32_t j = lane;
            for (; j + 96 < c4; j += 128) {
                float4 av[4], xv[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    av[k] = __ldcg(row4 + j + 32 * k);
                    xv[k] = __ldcg(x4 + j + 32 * k);
                }
                s0 = fmaf(av[0].x, xv[0].x, fmaf(av[0].y, xv[0].y, fmaf(av[0].z, xv[0].z, fmaf(av[0].w, xv[0].w, s0))));
                s1 = fmaf(av[1].x, xv[1].x, fmaf(av[1].y, xv[1].y, fmaf(av[1].z, xv[1].z, fmaf(av[1].w, xv[1].w, s1))));
                s2 = fmaf(av[2].x, xv[2].x, fmaf(av[2].y, xv[2].y, fmaf(av[2].z, xv[2].z, fmaf(av[2].w, xv[2].w, s2))));
                s3 = fmaf(av[3].x, xv[3].x, fmaf(av[3].y, xv[3].y, fmaf(av[3].z, xv[3].z, fmaf(av[3].w, xv[3].w, s3))));
            }
            for (; j < c4; j += 32) {
                const float4 av = __ldcg(row4 + j), xv = __ldcg(x4 + j);
                s0 = fmaf(av.x, xv.x, fmaf(av.y, xv.y, fmaf(av.z, xv.z, fmaf(av.w, xv.w, s0))));
            }
        } else {
            for (uint32_t c = lane; c < cols; c += 32) s0 = fmaf(ld(row + c), ld(x + c), s0);
        }
        const float s = warp_sum((s0 + s1) + (s2 + s3));
        if (lane == 0) __stcg(y + r, s);
    }
}

// GROUP_GEMV: GEMV's arguments, rows and cols up to PKQ_GROUP_GEMV_MAX_DIM,
// each warp of the group on whole rows (gemv_rows).
__device__ __forceinline__ Outcome op_group_gemv(const Context& ctx) {
    const pkq_gemv_args g = ctx.args<pkq_gemv_args>();
    if (ctx.group == nullptr || g.rows > PKQ_GROUP_GEMV_MAX_DIM || g.cols > PKQ_GROUP_GEMV_MAX_DIM ||
        (g.rows > 0 && (g.y == 0 || (g.cols > 0 && (g.a == 0 || g.x == 0)))) || ((g.a | g.x | g.y) & 3) != 0) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    gemv_rows(reinterpret_cast<const float*>(g.a), reinterpret_cast<const float*>(g.x),
              reinterpret_cast<float*>(g.y), g.rows, g.cols, ctx.block * ctx.warps + ctx.warp,
              ctx.blocks * ctx.warps, ctx.lane);
    return ok_after_writes();
}

// GROUP_FIR: FIR's arguments, n up to PKQ_GROUP_MAX_N: the outputs in
// tiles of a block's threads, each tile taken by a block (its index, then
// every blocks-th), which loads the tile's samples into shared memory
// (coalesced loads, the block's threads striding the window), then each
// thread computes its output
// as an in-order chain of fused multiply-adds over the taps (as FIR and the
// host's reference).
__device__ __forceinline__ Outcome op_group_fir(const Context& ctx) {
    const pkq_fir_args f = ctx.args<pkq_fir_args>();
    if (ctx.group == nullptr || f.n > PKQ_GROUP_MAX_N || f.taps == 0 || f.taps > PKQ_FIR_MAX_TAPS ||
        (f.n > 0 && (f.x == 0 || f.h == 0 || f.y == 0)) || ((f.x | f.h | f.y) & 3) != 0) {
        return fail(PKQ_STATUS_BAD_ARGS);
    }
    // No outputs: nothing read (h may be 0); the same on every participant.
    if (f.n == 0) return ok();
    const float* x = reinterpret_cast<const float*>(f.x);
    const float* h = reinterpret_cast<const float*>(f.h);
    float* y = reinterpret_cast<float*>(f.y);
    __shared__ float taps[PKQ_FIR_MAX_TAPS];
    __shared__ float window[PKQ_MAX_WARPS_PER_BLOCK * 32 + PKQ_FIR_MAX_TAPS];
    const uint32_t threads = ctx.warps * 32;
    const uint32_t t = ctx.warp * 32 + ctx.lane;
    for (uint32_t j = t; j < f.taps; j += threads) taps[j] = ld(h + j);
    const uint64_t samples = static_cast<uint64_t>(f.n) + f.taps - 1;
    const uint64_t tiles = (static_cast<uint64_t>(f.n) + threads - 1) / threads;
    // Uniform across the block: every thread crosses the same barriers.
    for (uint64_t tile = ctx.block; tile < tiles; tile += ctx.blocks) {
        const uint64_t base = tile * threads;
        for (uint32_t j = t; j < threads + f.taps - 1; j += threads) {
            if (base + j < samples) window[j] = ld(x + base + j);
        }
        ctx.sync_block();
        if (base + t < f.n) {
            float s = 0.0f;
            for (uint32_t k = 0; k < f.taps; ++k) s = fmaf(taps[k], window[t + k], s);
            __stcg(y + base + t, s);
        }
        // The window is read before the next tile's loads.
        ctx.sync_block();
    }
    return ok_after_writes();
}

// GROUP_SPIN: block r waits r times `ns` (SPIN's wait, each warp on its
// own); every block returns (blocks - 1) times `ns`, or BAD_ARGS where
// that is past PKQ_SPIN_MAX_NS (the same outcome on every participant).
__device__ __forceinline__ Outcome op_group_spin(const Context& ctx) {
    const uint64_t ns = ctx.words[0];
    if (ctx.blocks > 1 && ns > PKQ_SPIN_MAX_NS / (ctx.blocks - 1)) return outcome(PKQ_STATUS_BAD_ARGS, 0, false);
    const uint64_t mine[PKQ_ARGS_BYTES / 8] = {ns * ctx.block};
    (void)op_spin(mine);
    return ok(ns * (ctx.blocks - 1));
}

// The built-in handler table.
struct BuiltinOps {
    __device__ __forceinline__ Outcome operator()(const Context& ctx) const {
        switch (ctx.op) {
            // serve() answers NOP without calling a handler; this case is
            // for handlers that call BuiltinOps with a Context of their own.
            case PKQ_OP_NOP: return ok();
            case PKQ_OP_ECHO: return ok(echo_fold(ctx.words));
            case PKQ_OP_AXPY: return op_axpy(ctx.words, ctx.lane);
            case PKQ_OP_SPIN: return op_spin(ctx.words);
            case PKQ_OP_TRAP: __trap(); return ok();
            case PKQ_OP_MEMCPY: return op_memcpy(ctx);
            case PKQ_OP_MEMSET: return op_memset(ctx);
            case PKQ_OP_DOT: return op_dot(ctx);
            case PKQ_OP_GEMV: return op_gemv(ctx);
            case PKQ_OP_FIR: return op_fir(ctx);
            case PKQ_OP_COPY_IO: return op_copy_io(ctx);
            case PKQ_OP_GROUP_EMPTY: return ok();
            case PKQ_OP_GROUP_DOT: return op_group_dot(ctx);
            case PKQ_OP_GROUP_AXPY: return op_group_axpy(ctx);
            case PKQ_OP_GROUP_MEMCPY: return op_group_memcpy(ctx);
            case PKQ_OP_GROUP_MEMSET: return op_group_memset(ctx);
            case PKQ_OP_GROUP_GEMV: return op_group_gemv(ctx);
            case PKQ_OP_GROUP_FIR: return op_group_fir(ctx);
            case PKQ_OP_GROUP_SPIN: return op_group_spin(ctx);
            default: return unknown_op();
        }
    }
};

}  // namespace pkq

// What each built-in op takes (checked against src/ops/builtin.rs at load).
#define PKQ_BUILTIN_OP_TABLE(kernel)                                              \
    PKQ_OP_TABLE(kernel, PKQ_OP_INFO_NO_ARGS(PKQ_OP_NOP),                         \
                 pkq_op_info{PKQ_OP_ECHO, PKQ_ARGS_BYTES, 8, PKQ_OP_UP_TO},       \
                 PKQ_OP_INFO_POINTERS(PKQ_OP_AXPY, pkq_axpy_args),                \
                 PKQ_OP_INFO(PKQ_OP_SPIN, uint64_t),                              \
                 pkq_op_info{PKQ_OP_TRAP, 0, 1, PKQ_OP_DEREFS},                   \
                 PKQ_OP_INFO_POINTERS(PKQ_OP_MEMCPY, pkq_memcpy_args),            \
                 PKQ_OP_INFO_POINTERS(PKQ_OP_MEMSET, pkq_memset_args),            \
                 PKQ_OP_INFO_POINTERS(PKQ_OP_DOT, pkq_dot_args),                  \
                 PKQ_OP_INFO_POINTERS(PKQ_OP_GEMV, pkq_gemv_args),                \
                 PKQ_OP_INFO_POINTERS(PKQ_OP_FIR, pkq_fir_args),                  \
                 PKQ_OP_INFO(PKQ_OP_COPY_IO, pkq_copy_io_args),                   \
                 PKQ_OP_INFO_GROUP_NO_ARGS(PKQ_OP_GROUP_EMPTY),                    \
                 PKQ_OP_INFO_GROUP(PKQ_OP_GROUP_DOT, pkq_dot_args),                \
                 PKQ_OP_INFO_GROUP(PKQ_OP_GROUP_AXPY, pkq_axpy_args),             \
                 PKQ_OP_INFO_GROUP(PKQ_OP_GROUP_MEMCPY, pkq_memcpy_args),          \
                 PKQ_OP_INFO_GROUP(PKQ_OP_GROUP_MEMSET, pkq_memset_args),          \
                 PKQ_OP_INFO_GROUP(PKQ_OP_GROUP_GEMV, pkq_gemv_args),              \
                 PKQ_OP_INFO_GROUP(PKQ_OP_GROUP_FIR, pkq_fir_args),              \
                 pkq_op_info{PKQ_OP_GROUP_SPIN, 8, 8, PKQ_OP_GROUP})
