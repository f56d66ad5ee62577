// pkq.cu: the one translation unit build.rs compiles into the embedded
// fatbin: pkq's resident kernel, built with the public header like any
// user's (pkq.cuh), and its op table. (The measurement kernels are
// pkq-bench's, in pkq-bench/cuda/.)
#include "pkq.cuh"
#include "pkq_ops.cuh"

PKQ_KERNEL(pkq_worker_kernel, pkq::BuiltinOps)
PKQ_BUILTIN_OP_TABLE(pkq_worker_kernel)
