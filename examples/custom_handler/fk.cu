// fk.cu: the custom-handler example's device code (the crate in
// examples/custom_handler: its build.rs compiles this file, src/lib.rs is the
// host side).
// Forward kinematics of a 6-joint arm (UR5 Denavit-Hartenberg parameters) for
// a batch of joint configurations, served by a resident kernel built with
// pkq's public header, and the same computation as an ordinary kernel to time
// against.
#include <pkq.cuh>

// Op codes of this module (256 and up: below is pkq's).
#define FK_OP 256
#define ARM_STEP_OP 257
#define FK_WIDE_OP 258

// Arguments of FK_OP; the host's `FkArgs` (bytemuck::Pod) is the same struct.
struct fk_args {
    uint64_t q;    // const float*, n x 6 joint angles (rad)
    uint64_t pose; // float*, n x 12: the end effector's 3x4 transform, row-major
    uint32_t n;    // configurations, at most FK_MAX_N
    uint32_t reserved;
};
#define FK_MAX_N 4096
// FK_WIDE_OP takes the same arguments, up to this many configurations.
#define FK_WIDE_MAX_N (1u << 20)

// The arm kept on the device between tasks (ARM_STEP_OP's state): its joint
// angles and the transform of its end effector there.
struct arm_state {
    float q[6];
    float pose[12];
};
// Arguments of ARM_STEP_OP (after the state's address and length): joint
// velocities (rad/s) held for `dt` seconds.
struct arm_step_args {
    float qd[6];
    float dt;
    uint32_t reserved;
};
// Status of a batch holding a non-finite angle (nothing written).
#define FK_STATUS_NOT_FINITE (PKQ_STATUS_USER + 0)

namespace fk {

__constant__ float D[6] = {0.089159f, 0.0f, 0.0f, 0.10915f, 0.09465f, 0.0823f};
__constant__ float A[6] = {0.0f, -0.425f, -0.39225f, 0.0f, 0.0f, 0.0f};
__constant__ float ALPHA[6] = {1.57079632679f, 0.0f, 0.0f, 1.57079632679f, -1.57079632679f, 0.0f};

// T <- T * DH(theta, joint j), T a 3x4 affine transform, row-major.
__device__ __forceinline__ void chain(float (&t)[12], float theta, int j) {
    float st, ct, sa, ca;
    sincosf(theta, &st, &ct);
    sincosf(ALPHA[j], &sa, &ca);
    const float m[12] = {ct, -st * ca, st * sa,  A[j] * ct,
                         st, ct * ca,  -ct * sa, A[j] * st,
                         0.0f, sa,     ca,       D[j]};
    float r[12];
#pragma unroll
    for (int i = 0; i < 3; ++i) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float v = t[4 * i + 0] * m[k] + t[4 * i + 1] * m[4 + k] + t[4 * i + 2] * m[8 + k];
            if (k == 3) v += t[4 * i + 3];
            r[4 * i + k] = v;
        }
    }
#pragma unroll
    for (int i = 0; i < 12; ++i) t[i] = r[i];
}

__device__ __forceinline__ void solve(const float* q, float* pose) {
    float t[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
#pragma unroll
    for (int j = 0; j < 6; ++j) chain(t, __ldcg(q + j), j);
#pragma unroll
    for (int i = 0; i < 12; ++i) __stcg(pose + i, t[i]);
}

// The handler: the warp's lanes take configurations lane, lane + 32, ...
__device__ __forceinline__ pkq::Outcome fk_batch(const pkq::Context& ctx) {
    const fk_args a = ctx.args<fk_args>();
    if (a.n > FK_MAX_N || (a.n > 0 && (a.q == 0 || a.pose == 0))) return pkq::fail(PKQ_STATUS_BAD_ARGS);
    const float* q = reinterpret_cast<const float*>(a.q);
    float* pose = reinterpret_cast<float*>(a.pose);
    bool finite = true;
    for (uint32_t i = ctx.lane; i < 6 * a.n; i += 32) finite &= isfinite(__ldcg(q + i));
    if (!__all_sync(0xffffffffu, finite)) return pkq::fail(FK_STATUS_NOT_FINITE);
    for (uint32_t i = ctx.lane; i < a.n; i += 32) solve(q + 6 * i, pose + 12 * i);
    return pkq::ok_after_writes(a.n);
}

// The same batch as a group op (served by a lane of blocks or groups:
// `Builder::width`): every thread of the group takes configurations rank,
// rank + size, ... No participant sees another's angles without a group
// barrier, so none refuses the batch: a configuration with a non-finite
// angle gets a non-finite transform.
__device__ __forceinline__ pkq::Outcome fk_wide(const pkq::Context& ctx) {
    const fk_args a = ctx.args<fk_args>();
    if (a.n > FK_WIDE_MAX_N || (a.n > 0 && (a.q == 0 || a.pose == 0))) return pkq::fail(PKQ_STATUS_BAD_ARGS);
    const float* q = reinterpret_cast<const float*>(a.q);
    float* pose = reinterpret_cast<float*>(a.pose);
    for (uint32_t i = ctx.rank(); i < a.n; i += ctx.size()) solve(q + 6 * i, pose + 12 * i);
    return pkq::ok_after_writes(a.n);
}

// One control step on the arm kept on the device: q += qd * dt, then the new
// end-effector transform; returns its x coordinate (bits). Lane 0 computes,
// the warp returns together. Non-finite velocities or a step that leaves the
// angles non-finite: FK_STATUS_NOT_FINITE, the state untouched.
__device__ __forceinline__ pkq::Outcome arm_step(const pkq::Context& ctx) {
    const auto a = ctx.args<pkq::StateArgs<arm_step_args>>();
    if (a.state == 0 || a.bytes < sizeof(arm_state)) return pkq::fail(PKQ_STATUS_BAD_ARGS);
    arm_state* s = reinterpret_cast<arm_state*>(a.state);
    uint32_t status = PKQ_STATUS_OK;
    float x = 0.0f;
    if (ctx.lane == 0) {
        float q[6];
        bool finite = true;
#pragma unroll
        for (int j = 0; j < 6; ++j) {
            q[j] = __ldcg(s->q + j) + a.args.qd[j] * a.args.dt;
            finite &= isfinite(q[j]);
        }
        if (finite) {
#pragma unroll
            for (int j = 0; j < 6; ++j) __stcg(s->q + j, q[j]);
            solve(s->q, s->pose);
            x = __ldcg(s->pose + 3);
        } else {
            status = FK_STATUS_NOT_FINITE;
        }
    }
    status = __shfl_sync(0xffffffffu, status, 0);
    x = __shfl_sync(0xffffffffu, x, 0);
    if (status != PKQ_STATUS_OK) return pkq::fail(status);
    return pkq::ok_after_writes(pkq::bits(x));
}

struct Handlers {
    __device__ __forceinline__ pkq::Outcome operator()(const pkq::Context& ctx) const {
        switch (ctx.op) {
            case FK_OP: return fk_batch(ctx);
            case ARM_STEP_OP: return arm_step(ctx);
            case FK_WIDE_OP: return fk_wide(ctx);
            default: return pkq::unknown_op();
        }
    }
};

}  // namespace fk

PKQ_KERNEL(fk_worker_kernel, fk::Handlers)
PKQ_OP_TABLE(fk_worker_kernel, PKQ_OP_INFO_POINTERS(FK_OP, fk_args),
             PKQ_OP_INFO_STATE(ARM_STEP_OP, arm_step_args), PKQ_OP_INFO_GROUP(FK_WIDE_OP, fk_args))

// The same batch as an ordinary kernel: one thread per configuration.
extern "C" __global__ void fk_kernel(const float* q, float* pose, uint32_t n) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) fk::solve(q + 6 * i, pose + 12 * i);
}
