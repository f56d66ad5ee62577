/* pkq's C API. Generated from pkq-ffi/src by cbindgen (pkq-ffi/cbindgen.toml): do not edit;
 * `PKQ_BLESS=1 cargo test -p pkq-ffi --test header` rewrites it. */

#ifndef PKQ_H
#define PKQ_H

#include <stddef.h>
#include <stdint.h>

// Words of a batch's storage (`pkq_batch`).
#define PKQ_BATCH_WORDS 24

// The runtime's wait strategy (`pkq::Builder::wait_strategy`).
#define PKQ_WAIT_DEFAULT 0

// Spin until the task completes.
#define PKQ_WAIT_SPIN 1

// Spin, then yield the thread between polls.
#define PKQ_WAIT_SPIN_THEN_YIELD 2

// Sleep until pkq's completion thread wakes the waiter.
#define PKQ_WAIT_PARK 3

// Wait on the completion word with the CPU's monitor instructions where
// there are any (else spin, then yield).
#define PKQ_WAIT_MONITOR 4

// Each task on one warp (`pkq::Width::Warp`, the default).
#define PKQ_WIDTH_WARP 0

// Each task on a block of `width_warps` warps (`pkq::Width::Block`).
#define PKQ_WIDTH_BLOCK 1

// Each task on a group of `width_blocks` blocks (0: one per SM) of
// `width_warps` warps (`pkq::Width::Group`).
#define PKQ_WIDTH_GROUP 2

// `state_memory` for a runtime with none (0 takes pkq's default, 1 MiB).
#define PKQ_STATE_MEMORY_NONE UINT64_MAX

// Route each task to the serving device with the fewest tasks in flight.
#define PKQ_ROUTE_LEAST_LOADED 0

// Of two serving devices picked at random, the less loaded.
#define PKQ_ROUTE_POWER_OF_TWO 1

// The serving devices in turn.
#define PKQ_ROUTE_ROUND_ROBIN 2

// `pkq_producer_new` flag: hold the ring alone (`pkq::ExclusiveProducer`):
// plain stores reserve its slots, where shared producers use a
// compare-and-swap; every other submit to the ring is refused
// (`PKQ_ERR_RING_HELD`) until the producer is destroyed.
#define PKQ_PRODUCER_EXCLUSIVE 1

// Any ring of the lane (`pkq_producer_new`): the next in turn, or for an
// exclusive producer the first no other holds.
#define PKQ_ANY_RING UINT32_MAX

// Submit flag: refuse with `PKQ_ERR_FULL` at once when the ring has no
// room (else the call waits for room).
#define PKQ_SUBMIT_TRY 1

// Submit flag for runs of tasks: up to 32 tasks to a slot (a pack: one
// slot's round trip for all of them) instead of one a slot.
#define PKQ_SUBMIT_PACKED 2

// pkq's no-op: no arguments, value 0.
#define PKQ_OP_NOP 0

// Answers its argument (up to 8 bytes, little-endian) as the value. (It
// takes up to 48 bytes; past 8 it answers a fold of them.)
#define PKQ_OP_ECHO 1

// Spins on the device for its 8-byte argument's nanoseconds and answers
// how many it spun; more than 10 s is refused (`PKQ_ERR_TASK`,
// `task_status` 2). A spin past the runtime's stall bound (1 s unless
// `stall_after_ms` says otherwise) ends a wait with `PKQ_ERR_STALLED`.
#define PKQ_OP_SPIN 3

// An IO task's op (a runtime with IO areas, `io_input`/`io_output`): its
// arguments `{uint32_t out_len; uint32_t key;}`; output byte `i` is input
// byte `i` (0 past the input) XOR `key`'s low byte, `out_len` of them; the
// value is the sum of the input bytes.
#define PKQ_OP_COPY_IO 10

// A wide lane's empty task (`PKQ_WIDTH_BLOCK` or `PKQ_WIDTH_GROUP`): no
// arguments, value 0; every participant runs it (the cost of handing a
// task to the lane's whole width).
#define PKQ_OP_GROUP_EMPTY 11

// Words of a ticket's storage (`pkq_ticket`).
#define PKQ_TICKET_WORDS 24

// What a call of pkq's C API did: `PKQ_OK`, `PKQ_PENDING` (a poll found
// the task not yet complete), one of the boundary's own errors
// (`PKQ_ERR_NULL`, `PKQ_ERR_NOT_LIVE`, `PKQ_ERR_PANIC`), or the pkq error
// of the same name (`PKQ_ERR_FULL` is `pkq::Error::Full`, ...).
// `pkq_last_error` gives the message of the calling thread's last error.
typedef enum pkq_status {
  // Done.
  PKQ_OK = 0,
  // The task has not completed yet (`pkq_poll`); the ticket still holds it.
  PKQ_PENDING = 1,
  // A pointer argument that may not be null was null.
  PKQ_ERR_NULL = 2,
  // The ticket holds no task: never filled by a submit, or its task was
  // already taken (waited for, polled to the end, or released).
  PKQ_ERR_NOT_LIVE = 3,
  // pkq panicked inside the call; the panic was caught at the boundary.
  // The handle stays usable, but what the call did is unknown.
  PKQ_ERR_PANIC = 4,
  // An error of a later pkq than this API names.
  PKQ_ERR_OTHER = 5,
  PKQ_ERR_NO_DRIVER = 10,
  PKQ_ERR_NO_DEVICE = 11,
  PKQ_ERR_DEVICE_OUT_OF_RANGE = 12,
  PKQ_ERR_UNSUPPORTED_DEVICE = 13,
  PKQ_ERR_PARTITION_UNSUPPORTED = 14,
  PKQ_ERR_NOT_SERVING = 15,
  PKQ_ERR_NO_SERVING_DEVICE = 16,
  PKQ_ERR_KERNEL_NOT_BUILT = 17,
  PKQ_ERR_INVALID_MODULE = 18,
  PKQ_ERR_OP_MISMATCH = 19,
  PKQ_ERR_KERNEL_MISSING = 20,
  PKQ_ERR_INVALID_CONFIG = 21,
  PKQ_ERR_PAYLOAD_TOO_LARGE = 22,
  PKQ_ERR_INVALID_ARGUMENT = 23,
  PKQ_ERR_UNCHECKED_OP = 24,
  PKQ_ERR_FULL = 25,
  PKQ_ERR_CLOSED = 26,
  PKQ_ERR_RING_HELD = 27,
  PKQ_ERR_TIMEOUT = 28,
  // The task ran and its handler reported a status other than success
  // (`pkq_completion.task_status` holds it).
  PKQ_ERR_TASK = 29,
  PKQ_ERR_DEVICE_FAULT = 30,
  PKQ_ERR_STALLED = 31,
  PKQ_ERR_CANCELLED = 32,
  PKQ_ERR_KERNEL_STOPPED = 33,
  PKQ_ERR_KERNEL_TIMEOUT = 34,
  PKQ_ERR_CUDA = 35,
} pkq_status;

// A pool of runtimes, one per device. Opaque; made by `pkq_pool_new`,
// freed by `pkq_pool_destroy`. Thread-safe as a runtime is.
typedef struct pkq_pool pkq_pool;

// A producer: submits to one ring of one lane of a runtime. Opaque; made
// by `pkq_producer_new`, freed by `pkq_producer_destroy`. A shared one may
// be used from any number of threads at once; an exclusive one by one
// thread at a time (any thread).
typedef struct pkq_producer pkq_producer;

// A runtime: pkq's resident kernel on one device and its rings. Opaque;
// made by `pkq_runtime_new`, freed by `pkq_runtime_destroy`.
typedef struct pkq_runtime pkq_runtime;

// Bytes of state in the runtime's device memory (`pkq::DeviceState`).
// Opaque; made by `pkq_state_new`, freed by `pkq_state_destroy`. Used by
// one thread at a time.
typedef struct pkq_state pkq_state;

// A submitted run of tasks, owned by the caller as a `pkq_ticket` is:
// zero it before its first use (`pkq_batch b = {0};`); a submit fills it;
// `pkq_batch_wait` once every task is done, or `pkq_batch_release`,
// empties it. Moved by copying, the old copy passed to no call again.
// Its fields are pkq's.
typedef struct pkq_batch {
  uint64_t private_state;
  uint64_t private_storage[PKQ_BATCH_WORDS];
} pkq_batch;

// A finished task's result.
typedef struct pkq_completion {
  // The handler's 8-byte result (0 for a failed task).
  uint64_t value;
  // The GPU's clock (ns) when the task started and when its handler
  // returned (0 for a failed task).
  uint64_t device_start_ns;
  uint64_t device_end_ns;
  // With `PKQ_ERR_TASK`: the status the handler reported (1 unknown op,
  // 2 bad arguments, 3 stopped before every participant finished, 16
  // and up a module's own; `UINT32_MAX` for one this version of pkq
  // cannot name); 0 otherwise.
  uint32_t task_status;
  uint32_t reserved;
} pkq_completion;

// A submitted task's ticket, owned by the caller (on its stack, in its
// structs). Zero it before its first use (`pkq_ticket t = {0};`): a
// zeroed ticket is empty. A submit fills it (and empties it first, so a
// failed submit leaves it empty); the call that takes its result
// (`pkq_wait`, `pkq_wait_timeout` and `pkq_poll` once the task ended) or
// `pkq_ticket_release` empties it. An empty ticket is refused
// (`PKQ_ERR_NOT_LIVE`). A live ticket may be moved by copying it, after
// which the old copy is passed to no call again (zero it to make it an
// empty ticket); one that is never taken nor released keeps its slot's
// result, and its runtime's memory if destroyed, alive. Its fields are
// pkq's: a caller neither reads nor writes them.
typedef struct pkq_ticket {
  // `LIVE` while the ticket holds a task.
  uint64_t private_state;
  // pkq's `Ticket`, in place.
  uint64_t private_storage[PKQ_TICKET_WORDS];
} pkq_ticket;

// A completion callback: `user` as registered, the task's status (as
// `pkq_wait` would return it; `pkq_last_error` gives its message on the
// calling thread), its result, and the bytes an IO task's handler wrote
// (null and 0 for none). `completion` and `output` are valid during the
// call only. It must return; an exception thrown out of it (C++) aborts
// the process.
typedef void (*pkq_callback)(void *user,
                             enum pkq_status status,
                             const struct pkq_completion *completion,
                             const uint8_t *output,
                             size_t output_len);

// How to build a runtime (`pkq::Builder`): fill it with
// `pkq_options_init(&o, sizeof o)`, then set what differs. A field left 0
// (or null) takes pkq's default. `size` is the struct's size as the
// caller was compiled with: later versions add fields at the end only,
// read by the library only where the caller's `size` covers them (the
// others take their defaults), so a program built against an older header
// keeps working with a newer library. The pointers are read during the
// call they are passed to, never kept.
typedef struct pkq_options {
  // `sizeof(pkq_options)` as the caller was compiled with.
  uint32_t size;
  // The CUDA device's index (a lane's, after the first, is not read: a
  // lane runs on its runtime's device).
  uint32_t device;
  // Worker warps (`Builder::workers`): a power of two, at most 1024 and
  // `capacity` times `rings` (0: 1).
  uint32_t workers;
  // Poller warps per worker: 1, 2, 4 or 8 (`Builder::pollers`; 0: 8 for
  // a single worker, 1 for more).
  uint32_t pollers;
  // Submission rings, a power of two, at most `workers`
  // (`Builder::rings`; 0: 1).
  uint32_t rings;
  // Slots of each ring, a power of two up to 2^20 (`Builder::capacity`;
  // 0: 1024).
  uint32_t capacity;
  // A `PKQ_WAIT_*` value.
  uint32_t wait;
  // Milliseconds after which a worker silent while it has a task is
  // stalled (`Builder::stall_after`; at least 10; 0: 1000).
  uint32_t stall_after_ms;
  // Input and output areas of every slot, in bytes, for IO tasks
  // (`Builder::io`; at most 65536 each; 0 and 0: none).
  uint32_t io_input;
  uint32_t io_output;
  // A `PKQ_WIDTH_*` value: how wide each task runs (`Builder::width`).
  uint32_t width;
  // Warps of each block of a `PKQ_WIDTH_BLOCK` or `PKQ_WIDTH_GROUP`
  // lane (1 to 8; 0: 8).
  uint32_t width_warps;
  // Blocks of a `PKQ_WIDTH_GROUP` lane (0: one per SM).
  uint32_t width_blocks;
  // Run the kernel on this many SMs only (`Builder::sm_partition`; 0:
  // all of them).
  uint32_t sm_partition;
  // Device memory for states in bytes (`Builder::state_memory`; 0: the
  // default, `PKQ_STATE_MEMORY_NONE`: none).
  uint64_t state_memory;
  // A device module of your own (fatbin, cubin or PTX) in memory,
  // `module_len` bytes, served instead of pkq's kernel
  // (`Builder::module`), with `module_kernel` naming its kernel. Copied
  // by the call.
  const void *module_image;
  size_t module_len;
  // Or the path of a module file (when `module_image` is null), read by
  // the call. NUL-terminated.
  const char *module_path;
  // The kernel of the module (NUL-terminated); required with a module.
  const char *module_kernel;
} pkq_options;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// How many tasks the batch holds, into `*len` (0 for an empty batch,
// which returns `PKQ_ERR_NOT_LIVE`). Never blocks.
//
// # Safety
// `batch` points to a `pkq_batch`; `len` to a writable `size_t`.
enum pkq_status pkq_batch_len(struct pkq_batch *batch, size_t *len);

// Takes the completions that have arrived, without waiting, and puts how
// many of the batch's tasks are done into `*done`: `PKQ_OK` when all are
// (then `pkq_batch_wait` returns at once), `PKQ_PENDING` otherwise; or
// the error that ended the runtime before they completed. The batch keeps
// its tasks.
//
// # Safety
// `batch` points to a `pkq_batch`; `done` to a writable `size_t`.
enum pkq_status pkq_batch_poll(struct pkq_batch *batch, size_t *done);

// Waits at most `timeout_ns` (`UINT64_MAX`: no limit) for every task of
// the batch and writes task `i`'s result to `results[i]` and its status
// to `statuses[i]` (`PKQ_OK`, or `PKQ_ERR_TASK` with
// `results[i].task_status`), `count` being the batch's length (else
// `PKQ_ERR_INVALID_ARGUMENT`, nothing taken). Returns `PKQ_OK` when every
// task succeeded, `PKQ_ERR_TASK` when one failed, the batch emptied
// either way. `PKQ_ERR_TIMEOUT` and `PKQ_ERR_STALLED` keep the batch (wait
// again, or release it), the arrays filled for the tasks done so far and
// `PKQ_PENDING` for the rest. Another error (a fault, a stop, a cancel)
// empties it: the tasks done before it have their results, the rest that
// error as their status. Never hangs, as `pkq_wait`.
//
// # Safety
// `batch` points to a `pkq_batch`; `results` and `statuses` to `count`
// writable elements each (either may be null when `count` is 0).
enum pkq_status pkq_batch_wait(struct pkq_batch *batch,
                               uint64_t timeout_ns,
                               struct pkq_completion *results,
                               enum pkq_status *statuses,
                               size_t count);

// Empties the batch without taking its results (its tasks run on). An
// empty batch is left as it is (`PKQ_OK`).
//
// # Safety
// `batch` points to a `pkq_batch` (or is null).
enum pkq_status pkq_batch_release(struct pkq_batch *batch);

// Copies the message of the calling thread's last failed call (empty if
// none failed) into `buf`, NUL-terminated and cut to `len - 1` bytes, and
// returns its whole length in bytes, without the NUL (call again with a
// larger buffer when that is `len` or more). `buf` may be null when `len`
// is 0. A successful call leaves the message as it was. Thread-safe (each
// thread has its own).
//
// # Safety
// `buf` points to `len` writable bytes (or `len` is 0).
size_t pkq_last_error(char *buf, size_t len);

// The name of status code `status` as the header spells it
// (`"PKQ_ERR_FULL"`), a static NUL-terminated string; `"PKQ_ERR_OTHER"`
// for a code this API does not name. Thread-safe.
const char *pkq_status_name(int32_t status);

// Calls `callback(user, ...)` once with the ticket's result, when its task
// is done, and empties the ticket. It runs on the runtime's completion
// thread (one per lane; every callback of the lane on it, one after
// another: hand long work elsewhere), also for a task that completed
// before this call (the caller's `user` must outlive that call); at once
// on the calling thread, before this returns, only where no completion
// thread can take it: a ticket whose result was already taken, one whose
// runtime was destroyed, or an OS that refused the thread. A stall or a
// fault calls it with that error. Every callback registered before
// `pkq_runtime_destroy` has run when that returns. A callback must not
// wait for a task of its own runtime, nor destroy it. Null `callback`:
// `PKQ_ERR_NULL`, the ticket kept. Thread-safe per ticket.
//
// # Safety
// `ticket` points to a `pkq_ticket`; `callback` is safe to call with
// `user` from another thread, at any time until it was called.
enum pkq_status pkq_ticket_on_complete(struct pkq_ticket *ticket,
                                       pkq_callback callback,
                                       void *user);

// Fills the `size` bytes at `options` with pkq's defaults: every field 0
// or null, `size` set to the bytes written (`size`, or this version's size
// of the struct if smaller). Pass `sizeof` of the caller's struct; a size
// under 32 bytes, or one that ends inside a field (no version's), is
// `PKQ_ERR_INVALID_ARGUMENT`, nothing written. Thread-safe.
//
// # Safety
// `options` points to `size` writable bytes (or is null).
enum pkq_status pkq_options_init(struct pkq_options *options, size_t size);

// A pool of a runtime on each of the `count` devices at `devices` (null
// and 0: every device), each built as `options` says (null: defaults;
// its `device` is not read), tasks routed as `routing` says (a
// `PKQ_ROUTE_*` value); `*out` its handle, null on failure. The runtimes
// already started are stopped when one fails. Thread-safe.
//
// # Safety
// `devices` points to `count` readable `uint32_t` (or `count` is 0);
// `options` as `pkq_runtime_new`'s; `out` to a writable pointer.
enum pkq_status pkq_pool_new(const uint32_t *devices,
                             size_t count,
                             const struct pkq_options *options,
                             uint32_t routing,
                             struct pkq_pool **out);

// `pkq_submit_io` through the pool (`input` null and `input_len` 0 for a
// task without input; `flags` 0 or `PKQ_SUBMIT_TRY`), routed by its
// routing. A device that stopped serving is skipped; with none left,
// `PKQ_ERR_NO_SERVING_DEVICE`.
//
// # Safety
// `pool` is a live handle; otherwise as `pkq_submit_io`.
enum pkq_status pkq_pool_submit(const struct pkq_pool *pool,
                                uint16_t op,
                                const void *args,
                                size_t len,
                                const void *input,
                                size_t input_len,
                                uint32_t flags,
                                struct pkq_ticket *ticket);

// `pkq_pool_submit` to the device of `key` (`pkq::Pool::keyed`): the same
// device for the same key while it serves (rendezvous hashing over the
// serving devices), so a key's tasks keep their order per ring. Once that
// device stopped serving, the key's tasks go to another serving device
// (a device taken out moves only its own keys); with none left:
// `PKQ_ERR_NO_SERVING_DEVICE`.
//
// # Safety
// As `pkq_pool_submit`.
enum pkq_status pkq_pool_submit_keyed(const struct pkq_pool *pool,
                                      uint64_t key,
                                      uint16_t op,
                                      const void *args,
                                      size_t len,
                                      const void *input,
                                      size_t input_len,
                                      uint32_t flags,
                                      struct pkq_ticket *ticket);

// `pkq_submit_batch` through the pool: the whole run to one device.
//
// # Safety
// `pool` is a live handle; otherwise as `pkq_submit_batch`.
enum pkq_status pkq_pool_submit_batch(const struct pkq_pool *pool,
                                      uint16_t op,
                                      const void *args,
                                      size_t size,
                                      size_t count,
                                      uint32_t flags,
                                      struct pkq_batch *batch);

// `PKQ_OK` while a device of the pool serves (those that faulted or
// stopped are taken out), else `PKQ_ERR_NO_SERVING_DEVICE`; the devices
// serving into `devices` (`cap` of them at most), how many into `*count`.
//
// # Safety
// `pool` is a live handle; `devices` points to `cap` writable `uint32_t`
// (or `cap` is 0); `count` to a writable `size_t` (or is null).
enum pkq_status pkq_pool_health(const struct pkq_pool *pool,
                                uint32_t *devices,
                                size_t cap,
                                size_t *count);

// Shuts every runtime of the pool down, as `pkq_runtime_shutdown`; the
// pool's submits are refused from then on (`PKQ_ERR_NO_SERVING_DEVICE`:
// no device serves).
//
// # Safety
// `pool` is null or a live handle.
enum pkq_status pkq_pool_shutdown(const struct pkq_pool *pool);

// Frees the pool, as `pkq_runtime_destroy` frees a runtime, every runtime
// of it. Null does nothing. No other call of this handle may overlap or
// follow it.
//
// # Safety
// `pool` is null or a live handle, used by nothing else from now on.
void pkq_pool_destroy(struct pkq_pool *pool);

// A producer on ring `ring` (or `PKQ_ANY_RING`) of lane `lane` of the
// runtime (`flags`: 0, or `PKQ_PRODUCER_EXCLUSIVE`); `*out` its handle,
// null on failure. Refuses a lane or ring out of range
// (`PKQ_ERR_INVALID_ARGUMENT`), a ring an exclusive producer holds
// (`PKQ_ERR_RING_HELD`, for an exclusive one), and after shutdown or
// cancel began (`PKQ_ERR_CLOSED`, for an exclusive one). Destroy it before
// the runtime. Thread-safe.
//
// # Safety
// `rt` is a live handle; `out` points to a writable pointer.
enum pkq_status pkq_producer_new(const struct pkq_runtime *rt,
                                 uint32_t lane,
                                 uint32_t ring,
                                 uint32_t flags,
                                 struct pkq_producer **out);

// The producer's ring, into `*ring`.
//
// # Safety
// `p` is a live handle; `ring` points to a writable `uint32_t`.
enum pkq_status pkq_producer_ring(const struct pkq_producer *p, uint32_t *ring);

// `pkq_submit_io` through the producer (`input` null and `input_len` 0
// for a task without input, as there; `flags` 0 or `PKQ_SUBMIT_TRY`): to its ring.
//
// # Safety
// `p` is a live handle, used by no other thread at once if exclusive;
// otherwise as `pkq_submit_io`.
enum pkq_status pkq_producer_submit(const struct pkq_producer *p,
                                    uint16_t op,
                                    const void *args,
                                    size_t len,
                                    const void *input,
                                    size_t input_len,
                                    uint32_t flags,
                                    struct pkq_ticket *ticket);

// `pkq_submit_batch` through the producer: to its ring.
//
// # Safety
// As `pkq_producer_submit`; otherwise as `pkq_submit_batch`.
enum pkq_status pkq_producer_submit_batch(const struct pkq_producer *p,
                                          uint16_t op,
                                          const void *args,
                                          size_t size,
                                          size_t count,
                                          uint32_t flags,
                                          struct pkq_batch *batch);

// Frees the producer (an exclusive one gives its ring back). Null does
// nothing. No other call of this handle may overlap or follow it.
//
// # Safety
// `p` is null or a live handle, used by nothing else from now on.
void pkq_producer_destroy(struct pkq_producer *p);

// Builds a runtime from `options` (null: pkq's defaults) and starts its
// kernel; `*out` is its handle on `PKQ_OK`, null otherwise. Settings
// that cannot work are `PKQ_ERR_INVALID_CONFIG` (an `options.size` under
// 32 or ending inside a field included): most before the driver is
// touched, those that depend on the device (workers that cannot all be
// resident, state memory on a device without stream-ordered allocation)
// after. A `module_path` or `module_kernel` that is not UTF-8 is
// `PKQ_ERR_INVALID_ARGUMENT`, a module that cannot be read or loaded
// `PKQ_ERR_INVALID_MODULE`; the rest are the build's
// (`PKQ_ERR_NO_DRIVER`, `PKQ_ERR_KERNEL_TIMEOUT`, ...). Thread-safe.
//
// # Safety
// `options` is null or points to a `pkq_options` whose readable bytes are
// at least the `size` it states, its pointers valid as documented; `out`
// points to a writable pointer (or is null).
enum pkq_status pkq_runtime_new(const struct pkq_options *options, struct pkq_runtime **out);

// Builds a runtime of `count` lanes (at least 1), lane `i` as
// `lanes[i]` says (null: pkq's defaults), and starts its kernels: lane 0
// is the runtime's own (its device, partition and the rest), each further
// lane gets its own workers, rings, wait strategy, width, IO areas and
// module on the same device (`pkq::Builder::add_lane`; a lane naming a
// partition is refused). Tasks go to lane 0 through `pkq_submit` and the
// rest, to any lane through a producer (`pkq_producer_new`). A wide lane
// (`PKQ_WIDTH_BLOCK`, `PKQ_WIDTH_GROUP`) beside the latency lane is the
// usual use. `*out` as `pkq_runtime_new`. Thread-safe.
//
// # Safety
// `lanes` points to `count` readable pointers, each null or as
// `pkq_runtime_new`'s `options`; `out` as there.
enum pkq_status pkq_runtime_new_lanes(const struct pkq_options *const *lanes,
                                      size_t count,
                                      struct pkq_runtime **out);

// `PKQ_OK` while the runtime serves; otherwise what ended it (a device
// fault, a stop, a stalled worker: `PKQ_ERR_STALLED`). Where the driver
// reports a device fault that the runtime has not yet judged, it looks
// again until it has, for about 20 ms at most per lane; otherwise it
// returns at once. Thread-safe.
//
// # Safety
// `rt` is null or a live handle from `pkq_runtime_new`.
enum pkq_status pkq_runtime_health(const struct pkq_runtime *rt);

// Shuts the runtime down: new submits are refused (`PKQ_ERR_CLOSED`), every
// submitted task runs, then the kernel exits. The handle stays valid for
// waits and `pkq_runtime_destroy`. Thread-safe.
//
// # Safety
// `rt` is null or a live handle from `pkq_runtime_new`.
enum pkq_status pkq_runtime_shutdown(const struct pkq_runtime *rt);

// Stops the runtime without running what is queued: tasks not yet
// started end with `PKQ_ERR_CANCELLED`. The handle stays valid for waits
// and `pkq_runtime_destroy`. Thread-safe.
//
// # Safety
// `rt` is null or a live handle from `pkq_runtime_new`.
enum pkq_status pkq_runtime_cancel(const struct pkq_runtime *rt);

// Frees the runtime, shutting it down first if it runs: it blocks until its
// submitted tasks ran and the kernel exited (for each lane, at most the
// stop timeout for its tasks and again for its kernel, 10 s each by
// default, then the kernel is left to exit; what ended it is not
// reported: call `pkq_runtime_shutdown` first to learn it), and every
// completion callback of its tasks ran: none runs after this returns.
// Tickets, batches and states of its tasks stay valid: their results are
// kept until they are taken or released. Destroy its producers first: a
// producer still alive keeps the runtime's memory (not its kernel, which
// this stops) until it is destroyed, and callbacks of its lanes may then
// run until then. Null does nothing. No other call of this handle may
// overlap or follow it.
//
// # Safety
// `rt` is null or a live handle from `pkq_runtime_new`, used by nothing
// else from now on.
void pkq_runtime_destroy(struct pkq_runtime *rt);

// A state of `len` bytes (at least 1) holding a copy of `init`, in the
// runtime's state memory (its first lane's: `state_memory`; the copy is
// waited for here);
// `*out` its handle, null on failure. Refuses an empty state
// (`PKQ_ERR_INVALID_ARGUMENT`) and a runtime without room for it
// (`PKQ_ERR_INVALID_CONFIG`). Thread-safe.
//
// # Safety
// `rt` is a live handle; `init` points to `len` readable bytes; `out` to a
// writable pointer.
enum pkq_status pkq_state_new(const struct pkq_runtime *rt,
                              const void *init,
                              size_t len,
                              struct pkq_state **out);

// Copies the state's bytes into `buf` (`len` must be its length; else
// `PKQ_ERR_INVALID_ARGUMENT`), waiting for the copy.
//
// # Safety
// `state` is a live handle; `buf` points to `len` writable bytes.
enum pkq_status pkq_state_read(const struct pkq_state *state, void *buf, size_t len);

// Writes `data` (`len` bytes: the state's length) over the state,
// waiting for the copy.
//
// # Safety
// `state` is a live handle; `data` points to `len` readable bytes.
enum pkq_status pkq_state_write(struct pkq_state *state, const void *data, size_t len);

// Runs one task of state op `op` (declared on the device with
// `PKQ_OP_INFO_STATE`, its arguments the `len` bytes at `args`, at most
// 32) on `state`, on the runtime's lane 0, and waits for it; the result in
// `*out` as `pkq_wait`. Checked first, nothing submitted: `len` over 32 is
// `PKQ_ERR_PAYLOAD_TOO_LARGE`, a state of another runtime
// `PKQ_ERR_INVALID_ARGUMENT`, and arguments the op table does not list
// `PKQ_ERR_OP_MISMATCH` (the table holds the size of the device's
// argument struct after the state's address and length, a multiple of 8:
// `len` is checked rounded up to it, the bytes past `len` sent as 0). A wait that ends otherwise
// than with the task's result (a fault, a stop) returns once the kernel
// is known to have stopped: the state is never used by a task after this
// returns. So the wait is not ended by a stall (a handler that never
// returns holds this call), and where the kernel does not exit in time
// after such an end (the stop's wait for it, then one more stop timeout)
// the process aborts rather than let the device use the state after it
// was given back.
//
// # Safety
// `rt` and `state` are live handles, the state made on that runtime;
// `args` points to `len` readable bytes; `out` to a writable
// `pkq_completion`.
enum pkq_status pkq_call_on_state(const struct pkq_runtime *rt,
                                  struct pkq_state *state,
                                  uint16_t op,
                                  const void *args,
                                  size_t len,
                                  struct pkq_completion *out);

// `pkq_call_on_state` as an IO task (a runtime with IO areas): the
// `input_len` bytes at `input` in its slot's input area, and the bytes
// its handler wrote copied into `buf` (`cap` bytes), their count in
// `*out_len`. An output longer than `cap` returns
// `PKQ_ERR_PAYLOAD_TOO_LARGE`, `*out` filled, `*out_len` its length and
// `cap` bytes of it in `buf` (give a buffer as large as the runtime's
// `io_output`). Besides `pkq_call_on_state`'s refusals: a runtime without
// IO areas is `PKQ_ERR_INVALID_CONFIG`, an input longer than its input
// area `PKQ_ERR_PAYLOAD_TOO_LARGE`, nothing submitted.
//
// # Safety
// As `pkq_call_on_state`; `input` points to `input_len` readable bytes;
// `buf` to `cap` writable bytes; `out_len` to a writable `size_t`.
enum pkq_status pkq_call_on_state_io(const struct pkq_runtime *rt,
                                     struct pkq_state *state,
                                     uint16_t op,
                                     const void *args,
                                     size_t len,
                                     const void *input,
                                     size_t input_len,
                                     struct pkq_completion *out,
                                     uint8_t *buf,
                                     size_t cap,
                                     size_t *out_len);

// Frees the state: its range goes back to the runtime's state memory at
// once (which is freed to the device once the runtime, its kernel and
// its last state are all gone). Null does nothing. No other call of this handle may overlap or follow it.
//
// # Safety
// `state` is null or a live handle, used by nothing else from now on.
void pkq_state_destroy(struct pkq_state *state);

// Submits one task of op `op` with the `len` argument bytes at `args`
// (copied into its slot: at most 48; `args` may be null when `len` is 0)
// to the runtime's lane 0, waiting while the ring has no room, and fills
// `*ticket` (emptied first: a live task it held would be leaked, and a
// failed submit leaves it empty). The op must be in the kernel's op table
// with that argument length, and not dereference device addresses
// (`PKQ_ERR_OP_MISMATCH`, `PKQ_ERR_UNCHECKED_OP`). Thread-safe (per
// runtime; each thread its own ticket).
//
// # Safety
// `rt` is a live handle; `args` points to `len` readable bytes (or `len`
// is 0); `ticket` points to a writable `pkq_ticket`.
enum pkq_status pkq_submit(const struct pkq_runtime *rt,
                           uint16_t op,
                           const void *args,
                           size_t len,
                           struct pkq_ticket *ticket);

// `pkq_submit`, but `PKQ_ERR_FULL` at once when the ring has no room.
//
// # Safety
// As `pkq_submit`.
enum pkq_status pkq_try_submit(const struct pkq_runtime *rt,
                               uint16_t op,
                               const void *args,
                               size_t len,
                               struct pkq_ticket *ticket);

// Submits an IO task (a runtime with IO areas: `io_input`, `io_output`):
// as `pkq_submit` (`flags`: 0 or `PKQ_SUBMIT_TRY`), with the `input_len`
// bytes at `input` copied into its slot's input area, where its handler
// reads them; `pkq_wait_output` returns what it wrote. A non-null `input`
// of 0 bytes is an IO task with empty input; a null one of 0 bytes, a
// task without input (as `pkq_submit`). More input than the areas hold is
// refused (`PKQ_ERR_PAYLOAD_TOO_LARGE`), an IO task on a runtime without
// them too (`PKQ_ERR_INVALID_CONFIG`). Thread-safe.
//
// # Safety
// As `pkq_submit`; `input` points to `input_len` readable bytes (or
// `input_len` is 0).
enum pkq_status pkq_submit_io(const struct pkq_runtime *rt,
                              uint16_t op,
                              const void *args,
                              size_t len,
                              const void *input,
                              size_t input_len,
                              uint32_t flags,
                              struct pkq_ticket *ticket);

// Submits `count` tasks of op `op` to the runtime's lane 0 with one
// reservation, task `i`'s arguments the `size` bytes (at most 48) at
// `args + i * size`, and fills `*batch` (emptied first): a slot each, or
// with `PKQ_SUBMIT_PACKED` up to 32 to a slot; with `PKQ_SUBMIT_TRY`,
// `PKQ_ERR_FULL` at once when the ring lacks room for them all, else
// waits for it. Checked against the op table as `pkq_submit`; a run
// larger than the ring is refused (`PKQ_ERR_INVALID_ARGUMENT`).
// Thread-safe.
//
// # Safety
// `rt` is a live handle; `args` points to `count * size` readable bytes
// (or that is 0); `batch` to a writable `pkq_batch`.
enum pkq_status pkq_submit_batch(const struct pkq_runtime *rt,
                                 uint16_t op,
                                 const void *args,
                                 size_t size,
                                 size_t count,
                                 uint32_t flags,
                                 struct pkq_batch *batch);

// Waits for the ticket's task, as the runtime's wait strategy says, and
// takes its result: `PKQ_OK` with `*out` filled, or the error that ended
// it (`PKQ_ERR_TASK` with `out->task_status`, a device fault, a stop), the
// ticket emptied; or `PKQ_ERR_STALLED` when the task's worker went silent
// past the runtime's stall bound, the ticket still holding the task (wait
// again, or release it). Never hangs: a dead kernel ends the wait with an
// error, a stuck worker with `PKQ_ERR_STALLED`.
//
// # Safety
// `ticket` and `out` point to a `pkq_ticket` and a writable
// `pkq_completion`.
enum pkq_status pkq_wait(struct pkq_ticket *ticket, struct pkq_completion *out);

// `pkq_wait` for at most `timeout_ns` nanoseconds (`UINT64_MAX`: no
// limit): `PKQ_ERR_TIMEOUT` if the task had not completed by then, the
// ticket still holding it (wait again, poll, or release it); otherwise as
// `pkq_wait`.
//
// # Safety
// As `pkq_wait`.
enum pkq_status pkq_wait_timeout(struct pkq_ticket *ticket,
                                 uint64_t timeout_ns,
                                 struct pkq_completion *out);

// Looks once, without waiting: `PKQ_PENDING` while the task has not
// completed (the ticket still holds it); otherwise its result or the error
// that ended it, as `pkq_wait`, the ticket emptied. A poll learns of a dead
// kernel but not of a stalled worker: polls of a task whose worker is stuck
// say `PKQ_PENDING` for as long as it is (`pkq_wait_timeout` reports the
// stall).
//
// # Safety
// As `pkq_wait`.
enum pkq_status pkq_poll(struct pkq_ticket *ticket, struct pkq_completion *out);

// Empties the ticket without taking its result (the task runs on; its
// slot is reused once it completed). An empty ticket is left as it is
// (`PKQ_OK`).
//
// # Safety
// `ticket` points to a `pkq_ticket` (or is null).
enum pkq_status pkq_ticket_release(struct pkq_ticket *ticket);

// `pkq_wait_timeout` for an IO task (`pkq_submit_io`), with the bytes its
// handler wrote copied into `buf` (`cap` bytes) and their count in
// `*out_len` (0 for a task that wrote none, or no IO task). An output
// longer than `cap` is not cut: `PKQ_ERR_PAYLOAD_TOO_LARGE`, `*out_len`
// its length, and the ticket keeps the result (call again with a buffer
// that large). Otherwise as `pkq_wait_timeout`.
//
// # Safety
// As `pkq_wait`; `buf` points to `cap` writable bytes (or `cap` is 0);
// `out_len` to a writable `size_t`.
enum pkq_status pkq_wait_output(struct pkq_ticket *ticket,
                                uint64_t timeout_ns,
                                struct pkq_completion *out,
                                uint8_t *buf,
                                size_t cap,
                                size_t *out_len);

// Sets how waits on this ticket wait (a `PKQ_WAIT_*` value other than
// `PKQ_WAIT_DEFAULT`, which is refused: a ticket starts with its
// runtime's): a long task may park while the runtime spins. The ticket
// keeps its task.
//
// # Safety
// `ticket` points to a `pkq_ticket` (or is null).
enum pkq_status pkq_ticket_set_wait(struct pkq_ticket *ticket, uint32_t wait);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* PKQ_H */
