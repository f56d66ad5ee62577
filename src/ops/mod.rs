//! Ops: ops declared with their argument types
//! ([`TypedOp`]) and the tasks they describe ([`Task`], [`Tasks`]), the op
//! table a module exports (`table`), and ops on device state
//! ([`StateOp`]). pkq's own ops are declared in `crate::builtin`.

pub(crate) mod state_op;
pub(crate) mod table;
pub(crate) mod task;
pub(crate) mod typed;

pub use state_op::StateOp;
pub use task::{Task, Tasks};
pub use typed::TypedOp;
