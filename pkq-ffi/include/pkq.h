/* pkq's C API. Generated from pkq-ffi/src by cbindgen (pkq-ffi/cbindgen.toml): do not edit;
 * `PKQ_BLESS=1 cargo test -p pkq-ffi --test header` rewrites it. */

#ifndef PKQ_H
#define PKQ_H

#include <stddef.h>
#include <stdint.h>

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

// A runtime: pkq's resident kernel on one device and its rings. Opaque;
// made by `pkq_runtime_new`, freed by `pkq_runtime_destroy`.
typedef struct pkq_runtime pkq_runtime;

// How to build a runtime (`pkq::Builder`): fill it with
// `pkq_options_init(&o, sizeof o)`, then set what differs. A field left 0
// takes pkq's default. `size` is the struct's size as the caller was
// compiled with: later versions add fields at the end only, read by the
// library only where the caller's `size` covers them (the others take
// their defaults), so a program built against an older header keeps
// working with a newer library.
typedef struct pkq_options {
  // `sizeof(pkq_options)` as the caller was compiled with.
  uint32_t size;
  // The CUDA device's index.
  uint32_t device;
  // Worker warps (`Builder::workers`).
  uint32_t workers;
  // Poller warps per worker: 1, 2, 4 or 8 (`Builder::pollers`).
  uint32_t pollers;
  // Submission rings, a power of two (`Builder::rings`).
  uint32_t rings;
  // Slots of each ring, a power of two (`Builder::capacity`).
  uint32_t capacity;
  // A `PKQ_WAIT_*` value.
  uint32_t wait;
  // Milliseconds after which a worker silent while it has a task is
  // stalled (`Builder::stall_after`).
  uint32_t stall_after_ms;
} pkq_options;

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

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

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

// Fills the `size` bytes at `options` with pkq's defaults: every field 0,
// `size` set to the bytes written (`size`, or this version's size of the
// struct if smaller). Pass `sizeof` of the caller's struct. Thread-safe.
//
// # Safety
// `options` points to `size` writable bytes (or is null).
enum pkq_status pkq_options_init(struct pkq_options *options, size_t size);

// Builds a runtime from `options` (null: pkq's defaults) and starts its
// kernel; `*out` is its handle on `PKQ_OK`, null otherwise. Thread-safe.
//
// # Safety
// `options` is null or points to a `pkq_options` whose readable bytes are
// at least the `size` it states; `out` points to a writable pointer (or is
// null).
enum pkq_status pkq_runtime_new(const struct pkq_options *options, struct pkq_runtime **out);

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
// submitted tasks ran and the kernel exited (at most the stop timeout, 10
// s by default, then the kernel is left to exit; what ended it is not
// reported: call `pkq_runtime_shutdown` first to learn it). Tickets of its
// tasks stay valid: their results are kept until they are taken or the
// tickets released. Null does nothing. No other call of this handle may
// overlap or follow it.
//
// # Safety
// `rt` is null or a live handle from `pkq_runtime_new`, used by nothing
// else from now on.
void pkq_runtime_destroy(struct pkq_runtime *rt);

// Submits one task of op `op` with the `len` argument bytes at `args`
// (copied into its slot: at most 48; `args` may be null when `len` is 0),
// waiting while the ring has no room, and fills `*ticket` (emptied first:
// a live task it held would be leaked, and a failed submit leaves it
// empty). The op must be in the kernel's op
// table with that argument length, and not dereference device addresses
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

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* PKQ_H */
