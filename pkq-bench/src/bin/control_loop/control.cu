// control.cu: the control-loop bench's device code (pkq-bench's control_loop).
// One tick of an 8-motor controller whose state stays on the device: a sensor
// frame in (64 channels sampled 4 times, 1 KiB), the channels averaged, an
// observer y = W x (64 x 64), a PID step per motor on the first 8 channels,
// and 64 outputs back (256 B): the 8 motor commands, then the observer's other
// 56 outputs. Served by a resident kernel built with pkq's public header (an
// IO task on device state), and the same step as an ordinary kernel to time
// against.
#include <pkq.cuh>

// Op code of this module (256 and up: below is pkq's).
#define CTL_STEP_OP 256

#define CTL_CHANNELS 64
#define CTL_SAMPLES 4
#define CTL_MOTORS 8
#define CTL_FRAME_BYTES (CTL_CHANNELS * CTL_SAMPLES * 4)
#define CTL_OUT_BYTES (CTL_CHANNELS * 4)
// Status of a frame holding a non-finite sample (the state untouched,
// nothing written).
#define CTL_STATUS_NOT_FINITE (PKQ_STATUS_USER + 0)

// The controller kept on the device between ticks; the host's `CtlState`
// (bytemuck::Pod) is the same struct.
struct ctl_state {
    float kp[CTL_MOTORS];
    float ki[CTL_MOTORS];
    float kd[CTL_MOTORS];
    float setpoint[CTL_MOTORS];
    float integral[CTL_MOTORS];
    float prev_error[CTL_MOTORS];
    float dt;         // seconds per tick
    uint32_t ticks;   // ticks stepped
    uint32_t reserved[14];
    // The observer W (64 x 64) in lane blocks: w[((g * 16 + b) * 32 + l) * 4 + t]
    // = W[32 g + l][4 b + t], so that a warp's lanes (rows 32 g + l) read 512
    // consecutive bytes with one 16-byte load each: columns 4 b to 4 b + 3.
    float w[CTL_CHANNELS * CTL_CHANNELS];
};
static_assert(sizeof(ctl_state) == 256 + 4 * CTL_CHANNELS * CTL_CHANNELS, "ctl_state");

// A state op with no arguments of its own: the state's address and length.
struct ctl_state_ref {
    uint64_t state;
    uint64_t bytes;
};

namespace ctl {

constexpr unsigned FULL = 0xffffffffu;

// One tick by one warp (`lane` 0..31): `frame` (CTL_CHANNELS x CTL_SAMPLES,
// sample-major) in, `out` (CTL_CHANNELS floats) out. Returns false, touching
// nothing, for a frame holding a non-finite sample.
__device__ __forceinline__ bool step(ctl_state* s, const float* frame, float* out, uint32_t lane) {
    float a[CTL_SAMPLES], b[CTL_SAMPLES];
#pragma unroll
    for (int k = 0; k < CTL_SAMPLES; ++k) {
        a[k] = frame[k * CTL_CHANNELS + lane];
        b[k] = frame[k * CTL_CHANNELS + 32 + lane];
    }
    bool finite = true;
#pragma unroll
    for (int k = 0; k < CTL_SAMPLES; ++k) finite &= isfinite(a[k]) && isfinite(b[k]);
    if (!__all_sync(FULL, finite)) return false;
    // The channels' means: lane holds channels lane and lane + 32.
    const float x0 = 0.25f * (((a[0] + a[1]) + a[2]) + a[3]);
    const float x1 = 0.25f * (((b[0] + b[1]) + b[2]) + b[3]);
    // The observer: lane computes rows lane and lane + 32, column by column.
    const float4* w = reinterpret_cast<const float4*>(s->w);
    float y0 = 0.0f, y1 = 0.0f;
#pragma unroll
    for (int b = 0; b < CTL_CHANNELS / 4; ++b) {
        const float4 p = __ldcg(w + b * 32 + lane);
        const float4 q = __ldcg(w + (CTL_CHANNELS / 4 + b) * 32 + lane);
        const float pw[4] = {p.x, p.y, p.z, p.w};
        const float qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int j = 4 * b + t;
            const float xj = __shfl_sync(FULL, j < 32 ? x0 : x1, j & 31);
            y0 = fmaf(pw[t], xj, y0);
            y1 = fmaf(qw[t], xj, y1);
        }
    }
    // The PID step of motor `lane` on channel `lane` (its position).
    if (lane < CTL_MOTORS) {
        const float dt = __ldcg(&s->dt);
        const float e = __ldcg(s->setpoint + lane) - x0;
        const float integral = fmaf(e, dt, __ldcg(s->integral + lane));
        const float deriv = (e - __ldcg(s->prev_error + lane)) / dt;
        __stcg(s->integral + lane, integral);
        __stcg(s->prev_error + lane, e);
        y0 += fmaf(__ldcg(s->kp + lane), e,
                   fmaf(__ldcg(s->ki + lane), integral, __ldcg(s->kd + lane) * deriv));
    }
    if (lane == 0) __stcg(&s->ticks, __ldcg(&s->ticks) + 1);
    out[lane] = y0;
    out[32 + lane] = y1;
    return true;
}

// The handler: an IO task on the controller's state, the frame in ctx.input,
// the outputs to ctx.output; returns the ticks stepped so far.
__device__ __forceinline__ pkq::Outcome ctl_step(const pkq::Context& ctx) {
    const ctl_state_ref a = ctx.args<ctl_state_ref>();
    if (a.state == 0 || a.bytes < sizeof(ctl_state) || ctx.in_len != CTL_FRAME_BYTES ||
        ctx.out_cap < CTL_OUT_BYTES)
        return pkq::fail(PKQ_STATUS_BAD_ARGS);
    ctl_state* s = reinterpret_cast<ctl_state*>(a.state);
    if (!step(s, reinterpret_cast<const float*>(ctx.input), reinterpret_cast<float*>(ctx.output),
              ctx.lane))
        return pkq::fail(CTL_STATUS_NOT_FINITE);
    __syncwarp();
    return pkq::ok_output_after_writes(CTL_OUT_BYTES, __ldcg(&s->ticks));
}

struct Handlers {
    __device__ __forceinline__ pkq::Outcome operator()(const pkq::Context& ctx) const {
        switch (ctx.op) {
            case CTL_STEP_OP: return ctl_step(ctx);
            default: return pkq::unknown_op();
        }
    }
};

}  // namespace ctl

PKQ_KERNEL(ctl_worker_kernel, ctl::Handlers)
PKQ_OP_TABLE(ctl_worker_kernel, PKQ_OP_INFO_STATE_NO_ARGS(CTL_STEP_OP))

// The same tick as an ordinary kernel, launched with one warp (32 threads),
// on device copies of the frame and the outputs.
extern "C" __global__ void ctl_kernel(ctl_state* s, const float* frame, float* out) {
    ctl::step(s, frame, out, threadIdx.x);
}
