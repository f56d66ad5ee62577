//! The resident kernel's launch parameters (`layout::KernelParams`,
//! `struct pkq_params`) as cudarc passes them.

use crate::layout::KernelParams;

// SAFETY: plain old data with the C layout of `pkq_params` (checked in
// `layout`), passed by value as a kernel parameter.
unsafe impl cudarc::driver::DeviceRepr for KernelParams {}
