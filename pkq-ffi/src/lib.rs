//! pkq's C API (`include/pkq.h`): a runtime behind an opaque handle, tasks
//! submitted by op code with raw argument bytes, and their tickets as
//! plain structs the caller owns.
//!
//! Every function returns a [`pkq_status`]: `PKQ_OK`, or a code that mirrors
//! a [`pkq::Error`] variant, or one of the boundary's own codes (a null
//! argument, a ticket that holds no task, a panic caught at the boundary).
//! The calling thread's last error message is kept for
//! [`pkq_last_error`]. Nothing unwinds across the boundary.
//!
//! A single task's submit and wait (`pkq_submit`, `pkq_try_submit`,
//! `pkq_wait`, `pkq_wait_timeout`, `pkq_poll`, and a producer's or pool's
//! same calls) allocate nothing and take no lock of their own on success:
//! a ticket lives in the caller's [`pkq_ticket`], the task's result is
//! written into the caller's [`pkq_completion`]. (An error builds its
//! message.) Others do: a batch keeps its tasks' results in memory of its
//! own until they are taken, an IO task's output is taken from the device
//! into pkq's memory before it is copied into the caller's buffer, and a
//! parked wait (`PKQ_WAIT_PARK`) or a completion callback registers with
//! the completion thread (an allocation and a lock).
//!
//! Thread safety: a runtime handle may be used from any number of threads
//! at once, except [`pkq_runtime_destroy`], which no other call of that
//! handle may overlap or follow. A ticket is used by one thread at a time;
//! it may be moved (copied by value, the old copy passed to no call again),
//! never used through two copies.
//!
//! ```c
//! pkq_runtime *rt = NULL;
//! if (pkq_runtime_new(NULL, &rt) != PKQ_OK) { /* pkq_last_error(...) */ }
//! uint64_t word = 42;
//! pkq_ticket t = {0};
//! pkq_completion c;
//! if (pkq_submit(rt, PKQ_OP_ECHO, &word, sizeof word, &t) == PKQ_OK &&
//!     pkq_wait(&t, &c) == PKQ_OK) { /* c.value == 42 */ }
//! pkq_runtime_shutdown(rt);
//! pkq_runtime_destroy(rt);
//! ```

// The C names are the API's.
#![allow(non_camel_case_types)]

mod batch;
mod boundary;
mod callback;
mod held;
mod options;
mod pool;
mod producer;
mod runtime;
mod state;
mod status;
mod submit;
mod ticket;

pub use batch::{
    PKQ_BATCH_WORDS, pkq_batch, pkq_batch_len, pkq_batch_poll, pkq_batch_release, pkq_batch_wait,
};
pub use boundary::{pkq_last_error, pkq_status_name};
pub use callback::{pkq_callback, pkq_ticket_on_complete};
pub use options::{
    PKQ_STATE_MEMORY_NONE, PKQ_WAIT_DEFAULT, PKQ_WAIT_MONITOR, PKQ_WAIT_PARK, PKQ_WAIT_SPIN,
    PKQ_WAIT_SPIN_THEN_YIELD, PKQ_WIDTH_BLOCK, PKQ_WIDTH_GROUP, PKQ_WIDTH_WARP, pkq_options,
    pkq_options_init,
};
pub use pool::{
    PKQ_ROUTE_LEAST_LOADED, PKQ_ROUTE_POWER_OF_TWO, PKQ_ROUTE_ROUND_ROBIN, pkq_pool,
    pkq_pool_destroy, pkq_pool_health, pkq_pool_new, pkq_pool_shutdown, pkq_pool_submit,
    pkq_pool_submit_batch, pkq_pool_submit_keyed,
};
pub use producer::{
    PKQ_ANY_RING, PKQ_PRODUCER_EXCLUSIVE, pkq_producer, pkq_producer_destroy, pkq_producer_new,
    pkq_producer_ring, pkq_producer_submit, pkq_producer_submit_batch,
};
pub use runtime::{
    pkq_runtime, pkq_runtime_cancel, pkq_runtime_destroy, pkq_runtime_health, pkq_runtime_new,
    pkq_runtime_new_lanes, pkq_runtime_shutdown,
};
pub use state::{
    pkq_call_on_state, pkq_call_on_state_io, pkq_state, pkq_state_destroy, pkq_state_new,
    pkq_state_read, pkq_state_write,
};
pub use status::pkq_status;
pub use submit::{
    PKQ_SUBMIT_PACKED, PKQ_SUBMIT_TRY, pkq_submit, pkq_submit_batch, pkq_submit_io, pkq_try_submit,
};
pub use ticket::{
    PKQ_OP_COPY_IO, PKQ_OP_ECHO, PKQ_OP_GROUP_EMPTY, PKQ_OP_NOP, PKQ_OP_SPIN, PKQ_TICKET_WORDS,
    pkq_completion, pkq_poll, pkq_ticket, pkq_ticket_release, pkq_ticket_set_wait, pkq_wait,
    pkq_wait_output, pkq_wait_timeout,
};
