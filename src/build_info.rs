//! How this copy of pkq was built (for bench reports and diagnostics).

pub use crate::ptxas::{Spill, spills};

include!(concat!(env!("OUT_DIR"), "/build_info_gen.rs"));
