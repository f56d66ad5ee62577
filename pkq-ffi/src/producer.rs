//! Producers: a handle on one ring of one lane, shared with others or held
//! alone (`pkq::Producer`, `pkq::ExclusiveProducer`).

use std::ffi::c_void;
use std::sync::Arc;

use pkq::{ExclusiveProducer, Producer, Runtime};

use crate::batch::pkq_batch;
use crate::boundary::{Fail, call, free, get, get_mut};
use crate::runtime::pkq_runtime;
use crate::status::pkq_status;
use crate::submit::{io, many, one};
use crate::ticket::pkq_ticket;

/// `pkq_producer_new` flag: hold the ring alone (`pkq::ExclusiveProducer`):
/// plain stores reserve its slots, where shared producers use a
/// compare-and-swap; every other submit to the ring is refused
/// (`PKQ_ERR_RING_HELD`) until the producer is destroyed.
pub const PKQ_PRODUCER_EXCLUSIVE: u32 = 1;

/// Any ring of the lane (`pkq_producer_new`): the next in turn, or for an
/// exclusive producer the first no other holds.
pub const PKQ_ANY_RING: u32 = u32::MAX;

/// The producer behind a handle, borrowing its lane.
enum Access {
    Shared(Producer<'static>),
    Exclusive(ExclusiveProducer<'static>),
}

/// A producer: submits to one ring of one lane of a runtime. Opaque; made
/// by `pkq_producer_new`, freed by `pkq_producer_destroy`. A shared one may
/// be used from any number of threads at once; an exclusive one by one
/// thread at a time (any thread).
pub struct pkq_producer {
    // Dropped before `_rt` (fields drop in order): the producer borrows
    // the runtime that `_rt` keeps alive.
    access: Access,
    _rt: Arc<Runtime>,
}

/// A producer on ring `ring` (or `PKQ_ANY_RING`) of lane `lane` of the
/// runtime (`flags`: 0, or `PKQ_PRODUCER_EXCLUSIVE`); `*out` its handle,
/// null on failure. Refuses a lane or ring out of range
/// (`PKQ_ERR_INVALID_ARGUMENT`), a ring an exclusive producer holds
/// (`PKQ_ERR_RING_HELD`, for an exclusive one), and after shutdown or
/// cancel began (`PKQ_ERR_CLOSED`, for an exclusive one). Destroy it before
/// the runtime. Thread-safe.
///
/// # Safety
/// `rt` is a live handle; `out` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_producer_new(
    rt: *const pkq_runtime,
    lane: u32,
    ring: u32,
    flags: u32,
    out: *mut *mut pkq_producer,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        *out = std::ptr::null_mut();
        // SAFETY: as above.
        let rt = unsafe { get(rt, "rt") }?.rt.clone();
        if flags & !PKQ_PRODUCER_EXCLUSIVE != 0 {
            return Err(Fail::Status(
                pkq_status::PKQ_ERR_INVALID_ARGUMENT,
                format!("flags {flags:#x}: 0 or PKQ_PRODUCER_EXCLUSIVE"),
            ));
        }
        let l = rt.lane(lane as usize).ok_or_else(|| {
            Fail::Pkq(pkq::Error::InvalidArgument(format!(
                "lane {lane} of a runtime of {} lanes",
                rt.lanes()
            )))
        })?;
        // SAFETY: the lane lives in the runtime, in the `Arc`'s allocation,
        // which the handle keeps (`_rt`) for as long as the producer, and
        // the producer is dropped first.
        let l: &'static pkq::Lane = unsafe { &*std::ptr::from_ref(l) };
        let access = match (flags & PKQ_PRODUCER_EXCLUSIVE != 0, ring) {
            (false, PKQ_ANY_RING) => Access::Shared(l.producer()),
            (false, r) => Access::Shared(l.producer_on(r as usize)?),
            (true, PKQ_ANY_RING) => Access::Exclusive(l.exclusive_producer()?),
            (true, r) => Access::Exclusive(l.exclusive_producer_on(r as usize)?),
        };
        *out = Box::into_raw(Box::new(pkq_producer { access, _rt: rt }));
        Ok(pkq_status::PKQ_OK)
    })
}

/// The producer's ring, into `*ring`.
///
/// # Safety
/// `p` is a live handle; `ring` points to a writable `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_producer_ring(p: *const pkq_producer, ring: *mut u32) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let ring = unsafe { get_mut(ring, "ring") }?;
        // SAFETY: as above.
        *ring = match &unsafe { get(p, "producer") }?.access {
            Access::Shared(p) => p.ring(),
            Access::Exclusive(p) => p.ring(),
        } as u32;
        Ok(pkq_status::PKQ_OK)
    })
}

/// `pkq_submit_io` through the producer (`input` null and `input_len` 0
/// for a task without input, as there; `flags` 0 or `PKQ_SUBMIT_TRY`): to its ring.
///
/// # Safety
/// `p` is a live handle, used by no other thread at once if exclusive;
/// otherwise as `pkq_submit_io`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_producer_submit(
    p: *const pkq_producer,
    op: u16,
    args: *const c_void,
    len: usize,
    input: *const c_void,
    input_len: usize,
    flags: u32,
    ticket: *mut pkq_ticket,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let p = unsafe { get(p, "producer") };
        let input = io(input, input_len);
        let a = (args, len);
        // SAFETY: as above.
        match p.map(|p| &p.access) {
            Err(e) => unsafe { one::<Producer>(Err(e), op, a, input, flags, ticket) },
            Ok(Access::Shared(s)) => unsafe { one(Ok(s), op, a, input, flags, ticket) },
            Ok(Access::Exclusive(x)) => unsafe { one(Ok(x), op, a, input, flags, ticket) },
        }
    })
}

/// `pkq_submit_batch` through the producer: to its ring.
///
/// # Safety
/// As `pkq_producer_submit`; otherwise as `pkq_submit_batch`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_producer_submit_batch(
    p: *const pkq_producer,
    op: u16,
    args: *const c_void,
    size: usize,
    count: usize,
    flags: u32,
    batch: *mut pkq_batch,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let p = unsafe { get(p, "producer") };
        // SAFETY: as above.
        match p.map(|p| &p.access) {
            Err(e) => unsafe { many::<Producer>(Err(e), op, args, size, count, flags, batch) },
            Ok(Access::Shared(s)) => unsafe { many(Ok(s), op, args, size, count, flags, batch) },
            Ok(Access::Exclusive(x)) => unsafe { many(Ok(x), op, args, size, count, flags, batch) },
        }
    })
}

/// Frees the producer (an exclusive one gives its ring back). Null does
/// nothing. No other call of this handle may overlap or follow it.
///
/// # Safety
/// `p` is null or a live handle, used by nothing else from now on.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_producer_destroy(p: *mut pkq_producer) {
    // SAFETY: the caller's contract: from `pkq_producer_new`.
    unsafe { free(p) }
}
