/*
 * bench_layout.h: the one definition of the numbers that pkq-bench's
 * measurement kernels (bench.cu, floor.cuh, bulk.cuh) and its Rust side
 * (src/floor.rs, src/bulk.rs) share.
 *
 * Every number both sides use is a `#define BENCH_<NAME> <integer>` here;
 * pkq-bench's build.rs turns each into `pub const <NAME>` in Rust
 * (`pkq_bench::layout`, with pkq_build::layout_consts), with the type named
 * in the trailing comment (usize when none).
 */
#ifndef PKQ_BENCH_LAYOUT_H
#define PKQ_BENCH_LAYOUT_H

/* Raw-floor ping-pong (src/floor.rs): the value that ends the device loop,
   and the low bits of an echo word that carry its round (the rest carry the
   device's clock; floor.cuh). */
#define BENCH_FLOOR_STOP 0xffffffffffffffff /* u64 */
#define BENCH_FLOOR_ROUND_BITS 16 /* u32 */
/* The most pollers of a floor (a block's warps, and the bulk polls' shared
   buffers, floor.cuh). */
#define BENCH_FLOOR_MAX_POLLERS 8 /* u32 */
/* Rounds of the access-rate ring (src/floor.rs: host_access_rate). */
#define BENCH_ACCESS_ROUNDS 64 /* u32 */

/* Bulk copies (src/bulk.rs, bulk.cuh): places a run of passes goes through
   in turn, and the load and store kinds (BulkKind), in the kernel's order. */
#define BENCH_BULK_RUNS 64 /* u32 */
#define BENCH_BULK_RELAXED_SYS 0 /* u32 */
#define BENCH_BULK_VOLATILE 1 /* u32 */
#define BENCH_BULK_WEAK_UNCACHED 2 /* u32 */
#define BENCH_BULK_RELAXED_SYS_V2 3 /* u32 */
#define BENCH_BULK_VOLATILE_V2 4 /* u32 */
#define BENCH_BULK_WEAK_UNCACHED_V2 5 /* u32 */
#define BENCH_BULK_RELAXED_SYS_HALF 6 /* u32 */
#define BENCH_BULK_KINDS 7 /* u32 */

#endif /* PKQ_BENCH_LAYOUT_H */
