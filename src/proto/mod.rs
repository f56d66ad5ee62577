//! The host half of the protocol, with no driver: sequence arithmetic
//! ([`ring`]), the tagged-word codec of slots and completions ([`slot`]),
//! submitting, completing and reclaiming slots ([`queue`]), reserving and
//! closing ([`tail`], with the [`barrier`] an exclusive producer pairs with), views of shared
//! words ([`words`]); the shared layout's constants are `crate::layout`,
//! and its atomics go through `crate::sync` (std's, or loom's under
//! `--cfg loom`). All of
//! it runs under loom and Miri; the software device of the tests ([`soft`])
//! plays the kernel's part. `docs/PROTOCOL.md` describes the whole.

pub(crate) mod barrier;
pub(crate) mod io;
pub(crate) mod plan;
pub(crate) mod queue;
pub(crate) mod ring;
pub(crate) mod slot;
#[cfg(test)]
pub(crate) mod soft;
pub(crate) mod tail;
pub(crate) mod words;
