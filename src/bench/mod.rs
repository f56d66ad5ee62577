//! Measurement tools for pkq's own benches, examples and tests (crate
//! feature `bench`; not API): the raw floor, the device's costs and the
//! access rate of mapped memory ([`floor`]), the time to move a run
//! of it ([`bulk`]), and the host half of a ring
//! with no device behind it ([`host_ring`]).
//!
//! Their kernels (`cuda/pkq_bench.cu`) are a fatbin of their own, [`image`],
//! built only with the feature: a dependent never compiles them.

pub mod bulk;
pub mod floor;
pub mod host_ring;

pub use crate::cuda::image::bench_image as image;
