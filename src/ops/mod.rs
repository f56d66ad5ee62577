//! Ops: op codes ([`Op`]), ops declared with their argument types
//! ([`TypedOp`]) and the op table a module exports, ops on device state
//! ([`StateOp`]), and pkq's built-in ops ([`builtin`]).

pub mod builtin;
pub(crate) mod op;
pub(crate) mod stateful;
pub(crate) mod typed;

pub use op::{AXPY_MAX_N, AxpyArgs, Op, SPIN_MAX_NS, echo_fold};
pub use stateful::StateOp;
pub use typed::TypedOp;
