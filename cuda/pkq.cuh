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
// fail(PKQ_STATUS_BAD_ARGS) rather than followed out of bounds; read device
// memory that the host or other kernels write through the L2 (__ldcg), since
// L1 is not coherent and lives as long as the resident kernel; a handler
// that runs long keeps its worker (and the tasks queued behind it on that
// worker) waiting. Op 0 is NOP, answered by the worker loop itself; the
// built-in ops (cuda/pkq_ops.cuh, codes below 256) can serve as a fallback:
// `default: return pkq::BuiltinOps{}(ctx);`.
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
