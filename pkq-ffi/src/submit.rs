//! Submitting: one task or a run of them, by op code and raw argument
//! bytes, through anything that submits (a runtime, a producer, a pool);
//! the runtime's own calls.

use std::ffi::c_void;

use pkq::{Error, Op, Submit, Task, Tasks};

use crate::batch::pkq_batch;
use crate::boundary::{Fail, call, get, get_mut};
use crate::held::Held;
use crate::runtime::pkq_runtime;
use crate::status::pkq_status;
use crate::ticket::pkq_ticket;

/// Submit flag: refuse with `PKQ_ERR_FULL` at once when the ring has no
/// room (else the call waits for room).
pub const PKQ_SUBMIT_TRY: u32 = 1;
/// Submit flag for runs of tasks: up to 32 tasks to a slot (a pack: one
/// slot's round trip for all of them) instead of one a slot.
pub const PKQ_SUBMIT_PACKED: u32 = 2;

/// The most argument bytes a task carries in its slot.
const MAX_ARG_BYTES: usize = pkq::ARGS_BYTES;

/// The `len` bytes at `p`, named `what`: empty for `len` 0 (`p` may then be
/// null), refused when null otherwise.
///
/// # Safety
/// `p` points to `len` readable bytes (or `len` is 0), unchanged for `'a`.
pub(crate) unsafe fn bytes<'a>(
    p: *const c_void,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8], Fail> {
    if len == 0 {
        Ok(&[])
    } else if p.is_null() {
        Err(Fail::Null(what))
    } else {
        // SAFETY: the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
    }
}

/// A submit's input: none for a null `input` of 0 bytes (a task without
/// input), else an IO task's (which may be empty).
pub(crate) fn io(input: *const c_void, len: usize) -> Option<(*const c_void, usize)> {
    (!input.is_null() || len > 0).then_some((input, len))
}

/// The flags a call takes, the others refused.
fn check_flags(flags: u32, allowed: u32) -> Result<(), Fail> {
    if flags & !allowed != 0 {
        return Err(Fail::Status(
            pkq_status::PKQ_ERR_INVALID_ARGUMENT,
            format!("flags {flags:#x}: this call takes {allowed:#x} at most"),
        ));
    }
    Ok(())
}

/// Submits one task of `op` through `to` into `ticket` (emptied first, so
/// a failed submit leaves it empty): `len` argument bytes at `args`, at
/// most 48; for an IO task, `input`'s bytes in its slot's input area.
///
/// # Safety
/// `ticket` is null or points to a writable `pkq_ticket`; `args` to `len`
/// readable bytes; `input`'s pointer to its length's.
pub(crate) unsafe fn one<S: Submit>(
    to: Result<&S, Fail>,
    op: u16,
    (args, len): (*const c_void, usize),
    input: Option<(*const c_void, usize)>,
    flags: u32,
    ticket: *mut pkq_ticket,
) -> Result<pkq_status, Fail> {
    // SAFETY: the caller's contract.
    let ticket = unsafe { get_mut(ticket, "ticket") }?;
    // Empty from here on: a failed submit leaves no stale task in it (what
    // it held is the caller's to have taken or released).
    ticket.forget();
    let to = to?;
    check_flags(flags, PKQ_SUBMIT_TRY)?;
    if len > MAX_ARG_BYTES {
        return Err(Error::PayloadTooLarge {
            len,
            max: MAX_ARG_BYTES,
        }
        .into());
    }
    // SAFETY: `len` (at most 48) readable bytes at `args` (the contract).
    let args = unsafe { bytes(args, len, "args") }?;
    let mut task = Task::raw(Op(op), args);
    if let Some((input, n)) = input {
        // SAFETY: `n` readable bytes at `input` (the contract).
        task = task.with_input(unsafe { bytes(input, n, "input") }?);
    }
    let t = if flags & PKQ_SUBMIT_TRY != 0 {
        to.try_submit(task)
    } else {
        to.submit(task)
    }?;
    ticket.fill(t);
    Ok(pkq_status::PKQ_OK)
}

/// Submits `count` tasks of `op` through `to`, task `i`'s arguments the
/// `size` bytes at `args + i * size`, into `batch` (emptied first).
///
/// # Safety
/// `batch` is null or points to a writable `pkq_batch`; `args` to
/// `count * size` readable bytes.
pub(crate) unsafe fn many<S: Submit>(
    to: Result<&S, Fail>,
    op: u16,
    args: *const c_void,
    size: usize,
    count: usize,
    flags: u32,
    batch: *mut pkq_batch,
) -> Result<pkq_status, Fail> {
    // SAFETY: the caller's contract.
    let batch = unsafe { get_mut(batch, "batch") }?;
    batch.forget();
    let to = to?;
    check_flags(flags, PKQ_SUBMIT_TRY | PKQ_SUBMIT_PACKED)?;
    if size > MAX_ARG_BYTES {
        return Err(Error::PayloadTooLarge {
            len: size,
            max: MAX_ARG_BYTES,
        }
        .into());
    }
    let total = size.checked_mul(count).ok_or_else(|| {
        Fail::Status(
            pkq_status::PKQ_ERR_INVALID_ARGUMENT,
            format!("{count} tasks of {size} bytes overflow"),
        )
    })?;
    // SAFETY: `count * size` readable bytes at `args` (the contract).
    let all = unsafe { bytes(args, total, "args") }?;
    let packed = flags & PKQ_SUBMIT_PACKED != 0;
    let wait = flags & PKQ_SUBMIT_TRY == 0;
    macro_rules! by_size {
        ($($n:literal)*) => {
            match size {
                $($n => run::<S, $n>(to, op, all, count, packed, wait),)*
                _ => unreachable!("size checked above"),
            }
        };
    }
    let b = by_size!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24
        25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48)?;
    batch.fill(b);
    Ok(pkq_status::PKQ_OK)
}

/// [`many`] for arguments of `N` bytes.
fn run<S: Submit, const N: usize>(
    to: &S,
    op: u16,
    all: &[u8],
    count: usize,
    packed: bool,
    wait: bool,
) -> pkq::Result<pkq::Batch> {
    let args: &[[u8; N]] = if N == 0 {
        // Zero-sized arguments take no bytes: `count` of them.
        // SAFETY: a slice of zero-sized elements reads no memory; a
        // dangling, aligned pointer is valid for it.
        unsafe { std::slice::from_raw_parts(std::ptr::NonNull::dangling().as_ptr(), count) }
    } else {
        let (chunks, rest) = all.as_chunks::<N>();
        debug_assert!(rest.is_empty() && chunks.len() == count);
        chunks
    };
    let tasks = if packed {
        Tasks::raw_packed(Op(op), args)
    } else {
        Tasks::raw_batch(Op(op), args)
    };
    if wait {
        to.submit(tasks)
    } else {
        to.try_submit(tasks)
    }
}

/// Submits one task of op `op` with the `len` argument bytes at `args`
/// (copied into its slot: at most 48; `args` may be null when `len` is 0)
/// to the runtime's lane 0, waiting while the ring has no room, and fills
/// `*ticket` (emptied first: a live task it held would be leaked, and a
/// failed submit leaves it empty). The op must be in the kernel's op table
/// with that argument length, and not dereference device addresses
/// (`PKQ_ERR_OP_MISMATCH`, `PKQ_ERR_UNCHECKED_OP`). Thread-safe (per
/// runtime; each thread its own ticket).
///
/// # Safety
/// `rt` is a live handle; `args` points to `len` readable bytes (or `len`
/// is 0); `ticket` points to a writable `pkq_ticket`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_submit(
    rt: *const pkq_runtime,
    op: u16,
    args: *const c_void,
    len: usize,
    ticket: *mut pkq_ticket,
) -> pkq_status {
    // SAFETY: the caller's contract.
    call(|| unsafe { one(runtime(rt), op, (args, len), None, 0, ticket) })
}

/// `pkq_submit`, but `PKQ_ERR_FULL` at once when the ring has no room.
///
/// # Safety
/// As `pkq_submit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_try_submit(
    rt: *const pkq_runtime,
    op: u16,
    args: *const c_void,
    len: usize,
    ticket: *mut pkq_ticket,
) -> pkq_status {
    // SAFETY: the caller's contract.
    call(|| unsafe { one(runtime(rt), op, (args, len), None, PKQ_SUBMIT_TRY, ticket) })
}

/// Submits an IO task (a runtime with IO areas: `io_input`, `io_output`):
/// as `pkq_submit` (`flags`: 0 or `PKQ_SUBMIT_TRY`), with the `input_len`
/// bytes at `input` copied into its slot's input area, where its handler
/// reads them; `pkq_wait_output` returns what it wrote. A non-null `input`
/// of 0 bytes is an IO task with empty input; a null one of 0 bytes, a
/// task without input (as `pkq_submit`). More input than the areas hold is
/// refused (`PKQ_ERR_PAYLOAD_TOO_LARGE`), an IO task on a runtime without
/// them too (`PKQ_ERR_INVALID_CONFIG`). Thread-safe.
///
/// # Safety
/// As `pkq_submit`; `input` points to `input_len` readable bytes (or
/// `input_len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_submit_io(
    rt: *const pkq_runtime,
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
        unsafe {
            one(
                runtime(rt),
                op,
                (args, len),
                io(input, input_len),
                flags,
                ticket,
            )
        }
    })
}

/// Submits `count` tasks of op `op` to the runtime's lane 0 with one
/// reservation, task `i`'s arguments the `size` bytes (at most 48) at
/// `args + i * size`, and fills `*batch` (emptied first): a slot each, or
/// with `PKQ_SUBMIT_PACKED` up to 32 to a slot; with `PKQ_SUBMIT_TRY`,
/// `PKQ_ERR_FULL` at once when the ring lacks room for them all, else
/// waits for it. Checked against the op table as `pkq_submit`; a run
/// larger than the ring is refused (`PKQ_ERR_INVALID_ARGUMENT`).
/// Thread-safe.
///
/// # Safety
/// `rt` is a live handle; `args` points to `count * size` readable bytes
/// (or that is 0); `batch` to a writable `pkq_batch`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_submit_batch(
    rt: *const pkq_runtime,
    op: u16,
    args: *const c_void,
    size: usize,
    count: usize,
    flags: u32,
    batch: *mut pkq_batch,
) -> pkq_status {
    // SAFETY: the caller's contract.
    call(|| unsafe { many(runtime(rt), op, args, size, count, flags, batch) })
}

/// The runtime behind `rt`, or `PKQ_ERR_NULL`.
///
/// # Safety
/// `rt` is null or a live handle.
unsafe fn runtime<'a>(rt: *const pkq_runtime) -> Result<&'a pkq::Runtime, Fail> {
    // SAFETY: the caller's contract.
    Ok(&*unsafe { get(rt, "rt") }?.rt)
}
