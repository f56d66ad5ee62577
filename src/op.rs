//! Op codes: which device handler runs a task.

use std::fmt;

use crate::layout::{
    OP_AXPY, OP_COPY_IO, OP_DOT, OP_ECHO, OP_FIR, OP_GEMV, OP_GROUP_AXPY, OP_GROUP_DOT,
    OP_GROUP_EMPTY, OP_GROUP_FIR, OP_GROUP_GEMV, OP_GROUP_MEMCPY, OP_GROUP_MEMSET, OP_GROUP_SPIN,
    OP_MEMCPY, OP_MEMSET, OP_NOP, OP_SPIN, OP_TRAP, OP_USER,
};

/// An op code: which device handler runs a task. pkq's built-in ops have
/// codes below [`Op::FIRST_USER`] (declared with their arguments in
/// [`builtin`](crate::builtin)); a module's own ops take codes from it up.
/// A task is described by an op declared with its argument type
/// ([`TypedOp`](crate::TypedOp)), or by a code and raw argument bytes
/// ([`Task::raw`](crate::Task::raw)).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Op(pub u16);

impl Op {
    /// The first code of a module's own ops (codes below are pkq's).
    pub const FIRST_USER: Op = Op(OP_USER);

    /// The name of a built-in op's code.
    pub(crate) fn builtin_name(self) -> Option<&'static str> {
        Some(match self.0 {
            OP_NOP => "NOP",
            OP_ECHO => "ECHO",
            OP_AXPY => "AXPY",
            OP_SPIN => "SPIN",
            OP_TRAP => "TRAP",
            OP_MEMCPY => "MEMCPY",
            OP_MEMSET => "MEMSET",
            OP_DOT => "DOT",
            OP_GEMV => "GEMV",
            OP_FIR => "FIR",
            OP_COPY_IO => "COPY_IO",
            OP_GROUP_EMPTY => "GROUP_EMPTY",
            OP_GROUP_DOT => "GROUP_DOT",
            OP_GROUP_AXPY => "GROUP_AXPY",
            OP_GROUP_MEMCPY => "GROUP_MEMCPY",
            OP_GROUP_MEMSET => "GROUP_MEMSET",
            OP_GROUP_GEMV => "GROUP_GEMV",
            OP_GROUP_FIR => "GROUP_FIR",
            OP_GROUP_SPIN => "GROUP_SPIN",
            _ => return None,
        })
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.builtin_name() {
            Some(n) => write!(f, "Op({}: {n})", self.0),
            None => write!(f, "Op({})", self.0),
        }
    }
}

/// A built-in op's name, else `op <code>`.
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.builtin_name() {
            Some(n) => f.write_str(n),
            None => write!(f, "op {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_codes_are_named_and_others_numbered() {
        assert_eq!(Op(OP_AXPY).to_string(), "AXPY");
        assert_eq!(format!("{:?}", Op(OP_ECHO)), format!("Op({OP_ECHO}: ECHO)"));
        assert_eq!(Op(300).to_string(), "op 300");
        assert_eq!(format!("{:?}", Op(77)), "Op(77)");
    }
}
