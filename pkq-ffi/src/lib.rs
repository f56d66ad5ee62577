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
//! The submit and wait path allocates nothing and takes no lock of its own
//! on success: a ticket lives in the caller's [`pkq_ticket`], the task's
//! result is written into the caller's [`pkq_completion`]. (An error builds
//! its message.)
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

mod boundary;
mod runtime;
mod status;
mod ticket;

pub use boundary::{pkq_last_error, pkq_status_name};
pub use runtime::{
    PKQ_WAIT_DEFAULT, PKQ_WAIT_MONITOR, PKQ_WAIT_PARK, PKQ_WAIT_SPIN, PKQ_WAIT_SPIN_THEN_YIELD,
    pkq_options, pkq_options_init, pkq_runtime, pkq_runtime_cancel, pkq_runtime_destroy,
    pkq_runtime_new, pkq_runtime_shutdown,
};
pub use status::pkq_status;
pub use ticket::{
    PKQ_OP_ECHO, PKQ_OP_NOP, PKQ_OP_SPIN, PKQ_TICKET_WORDS, pkq_completion, pkq_poll, pkq_submit,
    pkq_ticket, pkq_ticket_release, pkq_try_submit, pkq_wait, pkq_wait_timeout,
};
