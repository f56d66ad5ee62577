// pkq.cuh: pkq's public device header. Write handlers for your own ops and
// get a resident kernel that serves them through pkq's ring: the same
// protocol and the same worker loop as pkq's built-in kernel (cuda/pkq.cu
// is built with this header too).
//
//     #include <pkq.cuh>
//
//     struct my_args { float gain; uint32_t n; uint64_t data; };  // = the host's Pod struct
//     #define MY_OP 256                                         // your ops: 256 and up
//
//     struct MyOps {
//         __device__ pkq::Outcome operator()(const pkq::Context& ctx) const {
//             switch (ctx.op) {
//                 case MY_OP: {
//                     const my_args a = ctx.args<my_args>();
//                     if (a.n > 1024) return pkq::fail(PKQ_STATUS_BAD_ARGS);
//                     ...  // all 32 lanes of one warp run this; ctx.lane is yours
//                     return pkq::ok_after_writes();
//                 }
//                 default: return pkq::unknown_op();
//             }
//         }
//     };
//     PKQ_KERNEL(my_worker_kernel, MyOps)
//     PKQ_OP_TABLE(my_worker_kernel, PKQ_OP_INFO_POINTERS(MY_OP, my_args))
//
// The host loads the fatbin with `Runtime::builder().module(image,
// "my_worker_kernel")`, declares the op once as
// `TypedOp::<MyArgs>::with_pointers(256, "MY_OP")`, and pkq checks its
// argument size, alignment and pointer flag against the table at load.
//
// Rules for handlers: all 32 lanes return the same Outcome; a handler that
// wrote device memory returns ok_after_writes (the worker then fences before
// it completes the task); arguments out of range are refused with
// fail(PKQ_STATUS_BAD_ARGS) rather than followed out of bounds; a status of
// your own is PKQ_STATUS_USER..255 (one over 255 fails the task as
// PKQ_STATUS_BAD_ARGS); an IO task's output stays within ctx.out_cap (an
// out_len over it fails the task as PKQ_STATUS_BAD_ARGS and sends no output;
// bytes written past it overwrite another worker's room); read device
// memory that the host or other kernels write through the L2 (__ldcg), since
// L1 is not coherent and lives as long as the resident kernel; a handler
// that runs long keeps its worker (and the tasks queued behind it on that
// worker) waiting. A warp op's handler runs on one warp of a block that other
// workers share: no __syncthreads() or block- or grid-wide cooperative
// groups (the kernel hangs, and the host sees Stalled), no __shared__
// variables of your own (the block's other warps run the same handlers at
// the same time), and no extern __shared__ (it is pkq's IO rooms). A block
// or group op (PKQ_OP_INFO_BLOCK, PKQ_OP_INFO_GROUP; served by a lane of
// that width, `Builder::width`) runs on every thread of its block or group
// (ctx.rank() of ctx.size()), which may use ctx.sync_block(), ctx.sync_group()
// (every thread calls each the same number of times), ctx.scratch() and
// __shared__ variables of its own (a wide lane's block runs one task at a
// time), but not __syncthreads() (an aligned barrier: block 0's first warp
// calls the handler from another instruction than its other warps; use
// ctx.sync_block()), no cooperative groups' syncs and no named barriers 1
// and 2 (the hand-off's). Op 0 is NOP, answered by the
// worker loop itself, but a module's table must list it
// (PKQ_OP_INFO_NO_ARGS(PKQ_OP_NOP)) for the host to send it: the host
// refuses every op its table does not list. The built-in ops can serve as
// a fallback (`#include <pkq_ops.cuh>`, then `default: return
// pkq::BuiltinOps{}(ctx);`), each listed in the table as pkq_ops.cuh's
// PKQ_BUILTIN_OP_TABLE lists it. pkq checks the ops declared with
// Builder::op against the table at load, the others at each call.
#pragma once

#include "pkq_handler.cuh"
#include "pkq_layout.h"
#include "pkq_worker.cuh"

// Defines the resident kernel `name` (extern "C", one `pkq_params` by
// value), serving ops with `Handlers` (default-constructed).
#define PKQ_KERNEL(name, Handlers)                                                        \
    extern "C" __global__ void __launch_bounds__(PKQ_MAX_WARPS_PER_BLOCK * 32, 1) name( \
        const pkq_params p) {                                                             \
        pkq::run_workers(p, Handlers{});                                                  \
    }
