// pkq_handler.cuh: what a handler gets and gives back (mirrors src/runtime/ticket.rs's
// Completion and src/ops/typed.rs's op table check).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "pkq_layout.h"

namespace pkq {

struct GroupSync;

// Barrier 0 of every thread of the block, in its non-aligned form (the
// threads may reach it from different instructions).
__device__ __forceinline__ void block_barrier_all() { asm volatile("barrier.sync 0;" ::: "memory"); }

// One task, as its handler sees it. A warp op's handler is called by all 32
// lanes of the warp that took the task, each with its own `lane`; a block or
// group op's (PKQ_OP_INFO_BLOCK, PKQ_OP_INFO_GROUP) by every thread of the
// block or group that serves it (WIDTH in pkq_layout.h), each with its
// `lane`, `warp` and `block`. Every participant must return the same
// Outcome (rank 0's is the one published).
struct Context {
    uint32_t lane;  // 0..31
    uint32_t op;    // the op code
    uint32_t len;   // argument bytes the host sent (at most PKQ_ARGS_BYTES: the worker refuses more)
    uint64_t words[PKQ_ARGS_BYTES / 8];
    // An IO task's input (`in_len` bytes) and room for its output (up to
    // `out_cap` bytes; the handler returns how many it wrote: ok_output),
    // in shared or device memory of the worker's own, 16-byte aligned (IO in
    // pkq_layout.h); null and 0 for other tasks.
    const uint8_t* input;
    uint32_t in_len;
    uint8_t* output;
    uint32_t out_cap;
    // Where this thread runs the task: warp `warp` of the block's `warps`,
    // in block `block` of the group's `blocks` (a warp op: 0, 1, 0, 1).
    uint32_t warp = 0;
    uint32_t warps = 1;
    uint32_t block = 0;
    uint32_t blocks = 1;
    // A block or group op's group (null for a warp op): see sync_group and
    // scratch.
    GroupSync* group = nullptr;
    // The task's start (%globaltimer, its completion's) when it is traced
    // (header bit PKQ_HEADER_TRACE_BIT), else 0: a lane of blocks or groups
    // then logs each block's run of it (TRACE LOG in pkq_layout.h).
    uint64_t trace = 0;
    // The warp that took the task from the ring only (elsewhere 0, as
    // `trace`): 1 for a task on host memory (header bit
    // PKQ_HEADER_HOST_BIT: its worker fences at system scope before the
    // completion, and a group's poller releases what it acquired of the
    // host's data before it hands the task to the other blocks), else 0.
    uint32_t host = 0;

    // This thread's rank among the task's threads, and how many they are.
    __device__ __forceinline__ uint32_t rank() const { return (block * warps + warp) * 32 + lane; }
    __device__ __forceinline__ uint32_t size() const { return blocks * warps * 32; }
    // A block or group op only: every thread of the block waits for the
    // others (every thread of the block must call it). Not __syncthreads(),
    // whose aligned barrier wants every thread at the same instruction:
    // block 0's warp 0 runs the handler from another call site than its
    // other warps.
    __device__ __forceinline__ void sync_block() const {
        __syncwarp();
        block_barrier_all();
    }
    // A block or group op only: every thread of the group waits for the
    // others, whose writes to device memory before it are then seen by all
    // (every thread of every block must call it the same number of times in
    // a task). Defined in pkq_group.cuh.
    __device__ void sync_group() const;
    // A block or group op only: PKQ_GROUP_SCRATCH_BYTES of device memory of
    // the group's own (16-byte aligned), kept across its tasks.
    __device__ uint8_t* scratch() const;

    // The arguments as the struct `A` the host sent (a copy: registers, no
    // aliasing). `A` must match the host's `bytemuck::Pod` struct, which the
    // op table (PKQ_OP_TABLE) lets the host check when it loads the module.
    template <class A>
    __device__ __forceinline__ A args() const {
        static_assert(sizeof(A) <= PKQ_ARGS_BYTES, "arguments must fit a slot (48 bytes)");
        static_assert(alignof(A) <= 8, "arguments are 8-byte aligned at most");
        A a;
        memcpy(&a, words, sizeof(A));
        return a;
    }
};

// What a handler hands back: the task's status and inline result, and whether
// it wrote device memory that later work must see (then the worker fences at
// GPU scope before it publishes the completion).
struct Outcome {
    uint32_t status;
    uint64_t value;
    bool wrote_device_memory;
    uint32_t out_len;  // an IO task's output bytes in ctx.output
};

__device__ __forceinline__ Outcome outcome(uint32_t status, uint64_t value, bool wrote_device_memory) {
    Outcome o;
    o.status = status;
    o.value = value;
    o.wrote_device_memory = wrote_device_memory;
    o.out_len = 0;
    return o;
}

// Success of an IO task that wrote `out_len` bytes (at most ctx.out_cap) at
// ctx.output, with an inline result.
__device__ __forceinline__ Outcome ok_output(uint32_t out_len, uint64_t value = 0) {
    Outcome o = outcome(PKQ_STATUS_OK, value, false);
    o.out_len = out_len;
    return o;
}

// ok_output for a task that also wrote device memory (a state op's IO task):
// its writes are seen as ok_after_writes says.
__device__ __forceinline__ Outcome ok_output_after_writes(uint32_t out_len, uint64_t value = 0) {
    Outcome o = ok_output(out_len, value);
    o.wrote_device_memory = true;
    return o;
}

// The arguments of an op on device state (`PKQ_OP_INFO_STATE`; `StateOp` on
// the host): the state's device address and byte length, written by pkq, then
// the host's arguments `A`. The handler touches no memory but the state's
// `bytes` bytes (read it through L2, `__ldcg`, as the built-in ops do: L1 is
// not coherent with copies the host makes between tasks) and returns
// `ok_after_writes` when it wrote it. The op table does not know the state's
// type: the handler checks that `bytes` holds what it reads and writes, and
// refuses the task otherwise (PKQ_STATUS_BAD_ARGS).
template <class A>
struct StateArgs {
    uint64_t state;
    uint64_t bytes;
    A args;
};
static_assert(offsetof(StateArgs<uint64_t>, state) == PKQ_STATE_OFF_ADDR, "StateArgs.state");
static_assert(offsetof(StateArgs<uint64_t>, bytes) == PKQ_STATE_OFF_BYTES, "StateArgs.bytes");
static_assert(offsetof(StateArgs<uint64_t>, args) == PKQ_STATE_OFF_ARGS, "StateArgs.args");

// Success with an inline result (`Completion::value` on the host).
__device__ __forceinline__ Outcome ok(uint64_t value = 0) { return outcome(PKQ_STATUS_OK, value, false); }

// Success after writing device memory: the host (and work it issues after it
// sees the completion) sees every lane's writes.
__device__ __forceinline__ Outcome ok_after_writes(uint64_t value = 0) {
    return outcome(PKQ_STATUS_OK, value, true);
}

// Failure: PKQ_STATUS_BAD_ARGS, or a code of your own from PKQ_STATUS_USER
// to 255 (`TaskStatus::Other(code)` on the host). Refuse arguments out of
// range with it rather than touch memory out of bounds.
__device__ __forceinline__ Outcome fail(uint32_t status) { return outcome(status, 0, false); }

// The answer for an op the table does not know.
__device__ __forceinline__ Outcome unknown_op() { return outcome(PKQ_STATUS_UNKNOWN_OP, 0, false); }

// A float or double result as the inline value's bits.
__device__ __forceinline__ uint64_t bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint64_t bits(double v) {
    return static_cast<uint64_t>(__double_as_longlong(v));
}

}  // namespace pkq

// Entries of an op table: an op whose handler reads only its arguments, one
// that dereferences device addresses among them (the host's safe calls
// refuse it: `TypedOp::with_pointers`), and one without arguments.
#define PKQ_OP_INFO(code, Args) \
    pkq_op_info { (code), sizeof(Args), alignof(Args), 0 }
#define PKQ_OP_INFO_POINTERS(code, Args) \
    pkq_op_info { (code), sizeof(Args), alignof(Args), PKQ_OP_DEREFS }
#define PKQ_OP_INFO_NO_ARGS(code) \
    pkq_op_info { (code), 0, 1, 0 }
// An op whose handler takes up to sizeof(Args) bytes, shorter arguments
// zero-filled (as pkq's ECHO): the host may declare it with any argument
// type of at most that size and alignment.
#define PKQ_OP_INFO_UP_TO(code, Args) \
    pkq_op_info { (code), sizeof(Args), alignof(Args), PKQ_OP_UP_TO }
// An op on device state (`pkq::StateArgs<Args>`; `StateOp` on the host, which
// a safe call submits with state memory pkq owns).
#define PKQ_OP_INFO_STATE(code, Args)                                          \
    pkq_op_info {                                                              \
        (code), sizeof(pkq::StateArgs<Args>), alignof(pkq::StateArgs<Args>), \
            PKQ_OP_DEREFS | PKQ_OP_STATE                                       \
    }
// A block op (every thread of a block runs it, on a lane of blocks) and a
// group op (every thread of a group of blocks, on a lane of groups or of
// blocks), each with arguments that hold device addresses; a group op that
// takes none.
#define PKQ_OP_INFO_BLOCK(code, Args) \
    pkq_op_info { (code), sizeof(Args), alignof(Args), PKQ_OP_DEREFS | PKQ_OP_BLOCK }
#define PKQ_OP_INFO_GROUP(code, Args) \
    pkq_op_info { (code), sizeof(Args), alignof(Args), PKQ_OP_DEREFS | PKQ_OP_GROUP }
#define PKQ_OP_INFO_GROUP_NO_ARGS(code) \
    pkq_op_info { (code), 0, 1, PKQ_OP_GROUP }
// The same for a state op with no arguments of its own (16 bytes; the host's
// `StateOp<S, ()>`).
#define PKQ_OP_INFO_STATE_NO_ARGS(code) \
    pkq_op_info { (code), 16, 8, PKQ_OP_DEREFS | PKQ_OP_STATE }

// Exports the op table of `kernel` (one entry per op its handlers serve) for
// the host to check each op's argument struct against its own when it loads
// the module. Use once per kernel, at namespace scope.
#define PKQ_OP_TABLE(kernel, ...)                                            \
    extern "C" __device__ const pkq_op_info kernel##_ops[] = {__VA_ARGS__}; \
    extern "C" __device__ const uint32_t kernel##_op_count =               \
        sizeof(kernel##_ops) / sizeof(pkq_op_info);
