//! The only code that calls the CUDA driver: opening a device ([`driver`]),
//! mapped pinned memory ([`mapped`]), loading modules ([`modules`]) and
//! launching and watching resident kernels ([`kernel`]).

pub(crate) mod driver;
pub(crate) mod kernel;
pub(crate) mod mapped;
pub(crate) mod modules;
