// options.cu: the options example's device code (the crate in
// examples/options: its build.rs compiles this file, src/lib.rs is the host
// side).
// Black-Scholes prices and greeks of a book of European options in device
// memory, served by a resident kernel built with pkq's public header: on one
// warp (PRICE_OP) or on every thread of a lane of blocks or groups
// (PRICE_WIDE_OP, the same loop); and the same pricing as an ordinary kernel
// to time against.
#include <pkq.cuh>

// Op codes of this module (256 and up: below is pkq's).
#define PRICE_OP 256
#define PRICE_WIDE_OP 257

// One option of the book (the host's `OptionIn`): spot and strike price,
// years to expiry, volatility (a year's standard deviation of the log price).
struct option_in {
    float spot;
    float strike;
    float years;
    float vol;
};
// Its prices and greeks (the host's `Greeks`): call and put price, their
// deltas, the gamma and vega they share, and their thetas (per year).
struct greeks {
    float call;
    float put;
    float call_delta;
    float put_delta;
    float gamma;
    float vega;
    float call_theta;
    float put_theta;
};
static_assert(sizeof(option_in) == 16 && sizeof(greeks) == 32, "one and two 16-byte pieces");

// Arguments of PRICE_OP and PRICE_WIDE_OP (the host's `PriceArgs`).
struct price_args {
    uint64_t book;  // const option_in*, n options, 16-byte aligned
    uint64_t out;   // greeks*, n records, 16-byte aligned
    uint32_t n;     // options, at most PRICE_MAX_N (PRICE_WIDE_MAX_N wide)
    float rate;     // the risk-free rate, continuously compounded, per year
};
#define PRICE_MAX_N 65536u
#define PRICE_WIDE_MAX_N (1u << 24)

namespace options {

// N(x) and N(-x), the standard normal's distribution function.
__device__ __forceinline__ void sides(const double x, double& up, double& down) {
    const double tail = 0.5 * erfc(fabs(x) * M_SQRT1_2);
    up = x < 0.0 ? tail : 1.0 - tail;
    down = x < 0.0 ? 1.0 - tail : tail;
}

// Prices and greeks of one option in double precision (the tails of the
// normal distribution need it), stored as floats. An option whose spot,
// strike, years or volatility is not finite and positive gets NaNs.
__device__ __forceinline__ greeks price(const option_in o, const double r) {
    const double s = o.spot, k = o.strike, t = o.years, v = o.vol;
    const bool valid = s > 0.0 && k > 0.0 && t > 0.0 && v > 0.0 && isfinite(s + k + t + v) && isfinite(r);
    greeks g;
    const double root = sqrt(t), vt = v * root;
    const double d1 = (log(s / k) + (r + 0.5 * v * v) * t) / vt, d2 = d1 - vt;
    const double disc = k * exp(-r * t);
    // N(x) and N(-x) from the tail erfc(|x| / sqrt 2) / 2, the other side
    // as 1 - tail: no cancellation in either tail.
    double n1, m1, n2, m2;
    sides(d1, n1, m1);
    sides(d2, n2, m2);
    const double pdf = exp(-0.5 * d1 * d1) * 0.3989422804014327;
    const double decay = -s * pdf * v / (2.0 * root);
    g.call = static_cast<float>(s * n1 - disc * n2);
    g.put = static_cast<float>(disc * m2 - s * m1);
    g.call_delta = static_cast<float>(n1);
    g.put_delta = static_cast<float>(-m1);
    g.gamma = static_cast<float>(pdf / (s * vt));
    g.vega = static_cast<float>(s * pdf * root);
    g.call_theta = static_cast<float>(decay - r * disc * n2);
    g.put_theta = static_cast<float>(decay + r * disc * m2);
    // Selected rather than branched around: the unrolled loop below keeps
    // its options' work interleaved.
    if (!valid) {
        const float nan = __int_as_float(0x7fc00000);
        g = {nan, nan, nan, nan, nan, nan, nan, nan};
    }
    return g;
}

// One option of the book: a 16-byte load and two 16-byte stores, through the
// L2 (the host and other kernels write the book between tasks).
__device__ __forceinline__ void price_one(const price_args a, uint32_t i) {
    const float4 in = __ldcg(reinterpret_cast<const float4*>(a.book) + i);
    const greeks g = price(option_in{in.x, in.y, in.z, in.w}, a.rate);
    float4* out = reinterpret_cast<float4*>(a.out) + 2 * i;
    __stcg(out, make_float4(g.call, g.put, g.call_delta, g.put_delta));
    __stcg(out + 1, make_float4(g.gamma, g.vega, g.call_theta, g.put_theta));
}

// Options first, first + stride, ... of the book. A thread with PER or more
// options prices PER of them at once (independent chains of double-precision
// work that hide each other's latency: a resident group has fewer threads
// than a grid sized for the book), then the rest one by one.
template <uint32_t PER>
__device__ __forceinline__ void price_strided(const price_args a, uint32_t first, uint32_t stride) {
    uint32_t i = first;
    // No overflow: n is at most PRICE_WIDE_MAX_N, a stride at most a grid's.
    for (; PER > 1 && i + (PER - 1) * stride < a.n; i += PER * stride) {
        float4 in[PER];
#pragma unroll
        for (uint32_t k = 0; k < PER; ++k) in[k] = __ldcg(reinterpret_cast<const float4*>(a.book) + i + k * stride);
        greeks g[PER];
#pragma unroll
        for (uint32_t k = 0; k < PER; ++k) g[k] = price(option_in{in[k].x, in[k].y, in[k].z, in[k].w}, a.rate);
#pragma unroll
        for (uint32_t k = 0; k < PER; ++k) {
            float4* out = reinterpret_cast<float4*>(a.out) + 2 * (i + k * stride);
            __stcg(out, make_float4(g[k].call, g[k].put, g[k].call_delta, g[k].put_delta));
            __stcg(out + 1, make_float4(g[k].gamma, g[k].vega, g[k].call_theta, g[k].put_theta));
        }
    }
    for (; i < a.n; i += stride) price_one(a, i);
}

// Both ops: the arguments checked, then every thread of the task (a warp's
// 32 lanes, or a block's or group's threads) takes its options.
__device__ __forceinline__ pkq::Outcome price_book(const pkq::Context& ctx, uint32_t most) {
    const price_args a = ctx.args<price_args>();
    if (a.n > most || (a.n > 0 && (a.book == 0 || a.out == 0 || (a.book | a.out) % 16 != 0)))
        return pkq::fail(PKQ_STATUS_BAD_ARGS);
    price_strided<4>(a, ctx.rank(), ctx.size());
    return pkq::ok_after_writes(a.n);
}

struct Handlers {
    __device__ __forceinline__ pkq::Outcome operator()(const pkq::Context& ctx) const {
        switch (ctx.op) {
            case PRICE_OP: return price_book(ctx, PRICE_MAX_N);
            case PRICE_WIDE_OP: return price_book(ctx, PRICE_WIDE_MAX_N);
            default: return pkq::unknown_op();
        }
    }
};

}  // namespace options

PKQ_KERNEL(options_worker_kernel, options::Handlers)
PKQ_OP_TABLE(options_worker_kernel, PKQ_OP_INFO_POINTERS(PRICE_OP, price_args),
             PKQ_OP_INFO_GROUP(PRICE_WIDE_OP, price_args))

// The same book as an ordinary kernel, as one writes it for a grid sized for
// the book: a thread per option.
extern "C" __global__ void price_kernel(uint64_t book, uint64_t out, uint32_t n, float rate) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) options::price_one(price_args{book, out, n, rate}, i);
}
