//! Pools: several GPUs as one (`pkq::Pool`), a runtime on each, tasks
//! routed by load or by key.

use std::ffi::c_void;

use pkq::{Pool, Routing};

use crate::batch::pkq_batch;
use crate::boundary::{Fail, call, free, get, get_mut};
use crate::options::{builder, pkq_options, read_options};
use crate::status::pkq_status;
use crate::submit::{io, many, one};
use crate::ticket::pkq_ticket;

/// Route each task to the serving device with the fewest tasks in flight.
pub const PKQ_ROUTE_LEAST_LOADED: u32 = 0;
/// Of two serving devices picked at random, the less loaded.
pub const PKQ_ROUTE_POWER_OF_TWO: u32 = 1;
/// The serving devices in turn.
pub const PKQ_ROUTE_ROUND_ROBIN: u32 = 2;

/// A pool of runtimes, one per device. Opaque; made by `pkq_pool_new`,
/// freed by `pkq_pool_destroy`. Thread-safe as a runtime is.
pub struct pkq_pool {
    pool: Pool,
}

/// A pool of a runtime on each of the `count` devices at `devices` (null
/// and 0: every device), each built as `options` says (null: defaults;
/// its `device` is not read), tasks routed as `routing` says (a
/// `PKQ_ROUTE_*` value); `*out` its handle, null on failure. The runtimes
/// already started are stopped when one fails. Thread-safe.
///
/// # Safety
/// `devices` points to `count` readable `uint32_t` (or `count` is 0);
/// `options` as `pkq_runtime_new`'s; `out` to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_pool_new(
    devices: *const u32,
    count: usize,
    options: *const pkq_options,
    routing: u32,
    out: *mut *mut pkq_pool,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        *out = std::ptr::null_mut();
        // SAFETY: as above.
        let o = unsafe { read_options(options) }?;
        // SAFETY: as above.
        let mut b = Pool::builder().runtime_builder(unsafe { builder(&o) }?);
        if count > 0 {
            if devices.is_null() {
                return Err(Fail::Null("devices"));
            }
            // SAFETY: `count` readable elements (the contract).
            let d = unsafe { std::slice::from_raw_parts(devices, count) };
            let d: Vec<usize> = d.iter().map(|&i| i as usize).collect();
            b = b.devices(&d);
        }
        b = b.routing(match routing {
            PKQ_ROUTE_LEAST_LOADED => Routing::LeastLoaded,
            PKQ_ROUTE_POWER_OF_TWO => Routing::PowerOfTwo,
            PKQ_ROUTE_ROUND_ROBIN => Routing::RoundRobin,
            r => {
                return Err(Fail::Status(
                    pkq_status::PKQ_ERR_INVALID_CONFIG,
                    format!("routing {r}: not a PKQ_ROUTE_* value"),
                ));
            }
        });
        let pool = b.build()?;
        *out = Box::into_raw(Box::new(pkq_pool { pool }));
        Ok(pkq_status::PKQ_OK)
    })
}

/// `pkq_submit_io` through the pool (`input` null and `input_len` 0 for a
/// task without input; `flags` 0 or `PKQ_SUBMIT_TRY`), routed by its
/// routing. A device that stopped serving is skipped; with none left,
/// `PKQ_ERR_NO_SERVING_DEVICE`.
///
/// # Safety
/// `pool` is a live handle; otherwise as `pkq_submit_io`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_pool_submit(
    pool: *const pkq_pool,
    op: u16,
    args: *const c_void,
    len: usize,
    input: *const c_void,
    input_len: usize,
    flags: u32,
    ticket: *mut pkq_ticket,
) -> pkq_status {
    call(|| {
        let input = io(input, input_len);
        // SAFETY: the caller's contract.
        let to = unsafe { get(pool, "pool") }.map(|p| &p.pool);
        // SAFETY: as above.
        unsafe { one(to, op, (args, len), input, flags, ticket) }
    })
}

/// `pkq_pool_submit` to the device of `key` (`pkq::Pool::keyed`): the same
/// device for the same key while it serves (rendezvous hashing over the
/// serving devices), so a key's tasks keep their order per ring. Once that
/// device stopped serving, the key's tasks go to another serving device
/// (a device taken out moves only its own keys); with none left:
/// `PKQ_ERR_NO_SERVING_DEVICE`.
///
/// # Safety
/// As `pkq_pool_submit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_pool_submit_keyed(
    pool: *const pkq_pool,
    key: u64,
    op: u16,
    args: *const c_void,
    len: usize,
    input: *const c_void,
    input_len: usize,
    flags: u32,
    ticket: *mut pkq_ticket,
) -> pkq_status {
    call(|| {
        let input = io(input, input_len);
        // SAFETY: the caller's contract.
        let keyed = unsafe { get(pool, "pool") }.map(|p| p.pool.keyed(key));
        let to = keyed.as_ref().map_err(|_| Fail::Null("pool"));
        // SAFETY: as above.
        unsafe { one(to, op, (args, len), input, flags, ticket) }
    })
}

/// `pkq_submit_batch` through the pool: the whole run to one device.
///
/// # Safety
/// `pool` is a live handle; otherwise as `pkq_submit_batch`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_pool_submit_batch(
    pool: *const pkq_pool,
    op: u16,
    args: *const c_void,
    size: usize,
    count: usize,
    flags: u32,
    batch: *mut pkq_batch,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let to = unsafe { get(pool, "pool") }.map(|p| &p.pool);
        // SAFETY: as above.
        unsafe { many(to, op, args, size, count, flags, batch) }
    })
}

/// `PKQ_OK` while a device of the pool serves (those that faulted or
/// stopped are taken out), else `PKQ_ERR_NO_SERVING_DEVICE`; the devices
/// serving into `devices` (`cap` of them at most), how many into `*count`.
///
/// # Safety
/// `pool` is a live handle; `devices` points to `cap` writable `uint32_t`
/// (or `cap` is 0); `count` to a writable `size_t` (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_pool_health(
    pool: *const pkq_pool,
    devices: *mut u32,
    cap: usize,
    count: *mut usize,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let pool = &unsafe { get(pool, "pool") }?.pool;
        let health = pool.health();
        let serving = pool.serving();
        if !count.is_null() {
            // SAFETY: as above.
            unsafe { *count = serving.len() };
        }
        if cap > 0 && !devices.is_null() {
            for (i, d) in serving.iter().take(cap).enumerate() {
                // SAFETY: `cap` writable elements (the contract), `i < cap`.
                unsafe { *devices.add(i) = *d as u32 };
            }
        }
        health?;
        Ok(pkq_status::PKQ_OK)
    })
}

/// Shuts every runtime of the pool down, as `pkq_runtime_shutdown`; the
/// pool's submits are refused from then on (`PKQ_ERR_NO_SERVING_DEVICE`:
/// no device serves).
///
/// # Safety
/// `pool` is null or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_pool_shutdown(pool: *const pkq_pool) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        unsafe { get(pool, "pool") }?.pool.shutdown()?;
        Ok(pkq_status::PKQ_OK)
    })
}

/// Frees the pool, as `pkq_runtime_destroy` frees a runtime, every runtime
/// of it. Null does nothing. No other call of this handle may overlap or
/// follow it.
///
/// # Safety
/// `pool` is null or a live handle, used by nothing else from now on.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_pool_destroy(pool: *mut pkq_pool) {
    // SAFETY: the caller's contract: from `pkq_pool_new`.
    unsafe { free(pool) }
}
