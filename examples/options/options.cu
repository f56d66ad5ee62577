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

// 1 / x and 1 / sqrt(x) for the normal doubles that float inputs give (any
// positive finite float is a normal double, and so are the products below):
// the hardware's approximation refined by two Newton steps, within an ulp or
// two. The library's division and square root branch to slow paths, its
// log and erfc to special cases, and every branch ends the interleaving of
// the options a thread prices at once: these and the log and erfc below
// have none (the library's exp, used as it is, branches only in a short
// fix-up at its end).
__device__ __forceinline__ double rcp(const double x) {
    double r;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(x));
    r = fma(r, fma(-x, r, 1.0), r);
    return fma(r, fma(-x, r, 1.0), r);
}
__device__ __forceinline__ double rsqrt(const double x) {
    double y;
    asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(x));
    const double half = 0.5 * x;
    y *= fma(-half * y, y, 1.5);
    return y * fma(-half * y, y, 1.5);
}

// The natural log of a positive normal double x = m 2^e, m in
// [sqrt(1/2), sqrt(2)): e ln 2 + 2 atanh(f), f = (m - 1) / (m + 1), |f| at
// most 0.172, its series to f^23.
__device__ __forceinline__ double log_normal(const double x) {
    const int hi = __double2hiint(x);
    int e = (hi >> 20) - 1023;
    int m_hi = (hi & 0x000fffff) | 0x3ff00000;
    const int over = m_hi > 0x3ff6a09e;  // m at or above sqrt(2): halve it
    m_hi -= over << 20;
    e += over;
    const double m = __hiloint2double(m_hi, __double2loint(x));
    const double f = (m - 1.0) * rcp(m + 1.0), f2 = f * f;
    double p = 1.0 / 23;
#pragma unroll
    for (int i = 21; i >= 3; i -= 2) p = fma(p, f2, 1.0 / i);
    return fma(static_cast<double>(e), 0.6931471805599453, 2.0 * f * fma(p, f2, 1.0));
}

// erfc(x) e^(x^2) for x in [0, 28], as p(t) / (1 + 2x) with t = (x - 4) /
// (x + 4) in [-1, 1): p is the Chebyshev fit of degree 21 that
// erfcx_fit.py prints (its error about 1e-15).
__device__ __forceinline__ double erfcx(const double x) {
    constexpr double c[] = {
        -7.2254063057956135e-09, -7.699101189697329e-09, 9.417723720342785e-08,  5.0511969022145394e-08,
        -8.047794759057995e-07,  3.2578206723686485e-07, 5.693021036482572e-06,  -1.1248303689857036e-05,
        -2.4390486829861422e-05, 0.0001506355541525296,  -0.00019925963516393932, -0.0007577780037062747,
        0.005031970598279671,    -0.016197733057153725,  0.03716751546084509,    -0.06633036593637169,
        0.09373283500322417,     -0.1010390660283861,    0.06809705425457126,    0.015379652102422313,
        -0.139621116840562,      1.2329951186255532,
    };
    // 1 / (x + 4) and 1 / (1 + 2x) from one reciprocal.
    const double a = x + 4.0, b = fma(2.0, x, 1.0), q = rcp(a * b);
    const double t = (x - 4.0) * (q * b);
    double p = c[0];
#pragma unroll
    for (int i = 1; i < static_cast<int>(sizeof c / sizeof c[0]); ++i) p = fma(p, t, c[i]);
    return p * (q * a);
}

// N(d) and N(-d), the standard normal's distribution function, from the tail
// erfc(|d| / sqrt 2) / 2, the other side as 1 - tail (no cancellation in
// either tail); and the normal density at d. Past |d| = 28 sqrt 2 the tail
// and density are 0 in double precision, and x is held there.
__device__ __forceinline__ void sides(const double d, double& up, double& down, double& density) {
    const double x = fmin(fabs(d) * M_SQRT1_2, 28.0), gauss = exp(-x * x);
    const double tail = 0.5 * gauss * erfcx(x);
    up = d < 0.0 ? tail : 1.0 - tail;
    down = d < 0.0 ? 1.0 - tail : tail;
    density = gauss * 0.3989422804014327;  // e^(-d^2 / 2) / sqrt(2 pi)
}

// Prices and greeks of one option in double precision (the tails of the
// normal distribution need it), stored as floats. An option whose spot,
// strike, years or volatility is not finite and positive gets NaNs.
__device__ __forceinline__ greeks price(const option_in o, const double r) {
    const double s = o.spot, k = o.strike, t = o.years, v = o.vol;
    const bool valid = s > 0.0 && k > 0.0 && t > 0.0 && v > 0.0 && isfinite(s + k + t + v) && isfinite(r);
    greeks g;
    // Inputs not finite or not positive give NaNs or anything here, and NaNs
    // below in any case.
    const double inv_root = rsqrt(t), root = t * inv_root, vt = v * root, inv_vt = rcp(vt);
    const double d1 = (log_normal(s * rcp(k)) + (r + 0.5 * v * v) * t) * inv_vt, d2 = d1 - vt;
    const double disc = k * exp(-r * t);
    double n1, m1, n2, m2, pdf, unused;
    sides(d1, n1, m1, pdf);
    sides(d2, n2, m2, unused);
    const double decay = -0.5 * s * pdf * v * inv_root;
    g.call = static_cast<float>(s * n1 - disc * n2);
    g.put = static_cast<float>(disc * m2 - s * m1);
    g.call_delta = static_cast<float>(n1);
    g.put_delta = static_cast<float>(-m1);
    g.gamma = static_cast<float>(pdf * rcp(s) * inv_vt);
    g.vega = static_cast<float>(s * pdf * root);
    g.call_theta = static_cast<float>(decay - r * disc * n2);
    g.put_theta = static_cast<float>(decay + r * disc * m2);
    // Selected rather than branched around, for the same reason.
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
// than a grid sized for the book) while the next PER are loaded, then the
// rest one by one.
template <uint32_t PER>
__device__ __forceinline__ void price_strided(const price_args a, uint32_t first, uint32_t stride) {
    const float4* book = reinterpret_cast<const float4*>(a.book);
    // Whether options i, i + stride, ..., i + (PER - 1) x stride are all in
    // the book. No overflow: n is at most PRICE_WIDE_MAX_N, a stride at most
    // a grid's.
    const auto whole = [&](uint32_t i) { return i + (PER - 1) * stride < a.n; };
    uint32_t i = first;
    float4 next[PER];
    if (whole(i)) {
#pragma unroll
        for (uint32_t k = 0; k < PER; ++k) next[k] = __ldcg(book + i + k * stride);
    }
    for (; whole(i); i += PER * stride) {
        float4 in[PER];
#pragma unroll
        for (uint32_t k = 0; k < PER; ++k) in[k] = next[k];
        if (whole(i + PER * stride)) {
#pragma unroll
            for (uint32_t k = 0; k < PER; ++k) next[k] = __ldcg(book + i + (PER + k) * stride);
        }
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
    price_strided<2>(a, ctx.rank(), ctx.size());
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
