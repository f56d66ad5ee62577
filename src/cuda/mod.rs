//! The only code that calls the CUDA driver: opening a device ([`driver`]),
//! the device code ([`image`]), loading modules and the rule of what may be
//! loaded or freed while a pkq kernel runs ([`modules`]), mapped pinned
//! memory ([`mapped`]), SM partitions of a device ([`partition`]), and
//! launching and watching resident kernels ([`kernel`]). Each depends only
//! on those before it in this list.

pub(crate) mod driver;
pub(crate) mod image;
pub(crate) mod kernel;
pub(crate) mod mapped;
pub(crate) mod memory;
pub(crate) mod modules;
pub(crate) mod params;
pub(crate) mod partition;
