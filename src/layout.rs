//! The shared host/device layout, Rust side (the lowest layer: the
//! protocol, the driver layer and the ops all build on it). Every number comes from
//! `cuda/pkq_layout.h` (build.rs generates the constants), and the protocol of
//! each shared word is described there, once. The structs below are checked
//! against those numbers at compile time, as their C twins are in the header.

#![allow(dead_code)]

include!(concat!(env!("OUT_DIR"), "/layout_gen.rs"));

use std::mem::{offset_of, size_of};

/// `struct pkq_params`: the resident kernel's launch parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KernelParams {
    pub sq: u64,
    pub cq: u64,
    pub ctrl: u64,
    pub states: u64,
    pub start_seq: u64,
    pub capacity_log2: u32,
    pub workers: u32,
    pub pollers: u32,
    pub idle_spin_ns: u32,
    pub idle_sleep_max_ns: u32,
    pub rings: u32,
    pub pack_args: u64,
    pub pack_results: u64,
    pub io_in: u64,
    pub io_out: u64,
    pub io_scratch: u64,
    pub io_in_words: u32,
    pub io_out_words: u32,
    pub io_in_bytes: u32,
    pub io_out_bytes: u32,
    pub groups: u64,
    pub group_blocks: u32,
    pub group_warps: u32,
    pub trace_log: u64,
}

const _: () = {
    assert!(size_of::<KernelParams>() == PARAMS_BYTES);
    assert!(offset_of!(KernelParams, sq) == PARAMS_OFF_SQ);
    assert!(offset_of!(KernelParams, cq) == PARAMS_OFF_CQ);
    assert!(offset_of!(KernelParams, ctrl) == PARAMS_OFF_CTRL);
    assert!(offset_of!(KernelParams, states) == PARAMS_OFF_STATES);
    assert!(offset_of!(KernelParams, start_seq) == PARAMS_OFF_START_SEQ);
    assert!(offset_of!(KernelParams, capacity_log2) == PARAMS_OFF_CAPACITY_LOG2);
    assert!(offset_of!(KernelParams, workers) == PARAMS_OFF_WORKERS);
    assert!(offset_of!(KernelParams, pollers) == PARAMS_OFF_POLLERS);
    assert!(offset_of!(KernelParams, idle_spin_ns) == PARAMS_OFF_IDLE_SPIN_NS);
    assert!(offset_of!(KernelParams, idle_sleep_max_ns) == PARAMS_OFF_IDLE_SLEEP_MAX_NS);
    assert!(offset_of!(KernelParams, rings) == PARAMS_OFF_RINGS);
    assert!(offset_of!(KernelParams, pack_args) == PARAMS_OFF_PACK_ARGS);
    assert!(offset_of!(KernelParams, pack_results) == PARAMS_OFF_PACK_RESULTS);
    assert!(offset_of!(KernelParams, io_in) == PARAMS_OFF_IO_IN);
    assert!(offset_of!(KernelParams, io_out) == PARAMS_OFF_IO_OUT);
    assert!(offset_of!(KernelParams, io_scratch) == PARAMS_OFF_IO_SCRATCH);
    assert!(offset_of!(KernelParams, io_in_words) == PARAMS_OFF_IO_IN_WORDS);
    assert!(offset_of!(KernelParams, io_out_words) == PARAMS_OFF_IO_OUT_WORDS);
    assert!(offset_of!(KernelParams, io_in_bytes) == PARAMS_OFF_IO_IN_BYTES);
    assert!(offset_of!(KernelParams, io_out_bytes) == PARAMS_OFF_IO_OUT_BYTES);
    assert!(offset_of!(KernelParams, groups) == PARAMS_OFF_GROUPS);
    assert!(offset_of!(KernelParams, group_blocks) == PARAMS_OFF_GROUP_BLOCKS);
    assert!(offset_of!(KernelParams, group_warps) == PARAMS_OFF_GROUP_WARPS);
    assert!(offset_of!(KernelParams, trace_log) == PARAMS_OFF_TRACE_LOG);
    assert!(HEADER_IN_SHIFT + HEADER_IN_BITS == HEADER_IO_BIT);
    assert!(IO_MAX_BYTES < 1 << HEADER_IN_BITS);
    assert!(SLOT_WORDS * 8 == SLOT_BYTES);
    assert!(CQE_WORDS * 8 == CQE_BYTES);
    assert!(8 + ARGS_BYTES == SLOT_WORDS * CHUNK_BITS as usize / 8);
    assert!(TAG_SHIFT == CHUNK_BITS);
};
