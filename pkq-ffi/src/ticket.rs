//! Tasks by op code and raw argument bytes, and their tickets: plain
//! structs the caller owns, holding pkq's `Ticket` in place.

use std::mem::{align_of, size_of};
use std::time::Duration;

use pkq::{Error, TaskStatus, Ticket};

use crate::boundary::{Fail, call, get_mut};
use crate::held::Held;
use crate::options::{PKQ_WAIT_DEFAULT, wait_strategy};
use crate::status::pkq_status;

// pkq's built-in ops a C caller needs no device addresses for (literals, for
// the header; checked against pkq's below).
/// pkq's no-op: no arguments, value 0.
pub const PKQ_OP_NOP: u16 = 0;
/// Answers its argument (up to 8 bytes, little-endian) as the value. (It
/// takes up to 48 bytes; past 8 it answers a fold of them.)
pub const PKQ_OP_ECHO: u16 = 1;
/// Spins on the device for its 8-byte argument's nanoseconds and answers
/// how many it spun; more than 10 s is refused (`PKQ_ERR_TASK`,
/// `task_status` 2). A spin past the runtime's stall bound (1 s unless
/// `stall_after_ms` says otherwise) ends a wait with `PKQ_ERR_STALLED`.
pub const PKQ_OP_SPIN: u16 = 3;
/// An IO task's op (a runtime with IO areas, `io_input`/`io_output`): its
/// arguments `{uint32_t out_len; uint32_t key;}`; output byte `i` is input
/// byte `i` (0 past the input) XOR `key`'s low byte, `out_len` of them; the
/// value is the sum of the input bytes.
pub const PKQ_OP_COPY_IO: u16 = 10;
/// A wide lane's empty task (`PKQ_WIDTH_BLOCK` or `PKQ_WIDTH_GROUP`): no
/// arguments, value 0; every participant runs it (the cost of handing a
/// task to the lane's whole width).
pub const PKQ_OP_GROUP_EMPTY: u16 = 11;
const _: () = assert!(
    PKQ_OP_NOP == pkq::builtin::NOP.op().0
        && PKQ_OP_ECHO == pkq::builtin::ECHO.op().0
        && PKQ_OP_SPIN == pkq::builtin::SPIN.op().0
        && PKQ_OP_COPY_IO == pkq::builtin::COPY_IO.op().0
        && PKQ_OP_GROUP_EMPTY == pkq::builtin::GROUP_EMPTY.op().0
);

/// A finished task's result.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct pkq_completion {
    /// The handler's 8-byte result (0 for a failed task).
    pub value: u64,
    /// The GPU's clock (ns) when the task started and when its handler
    /// returned (0 for a failed task).
    pub device_start_ns: u64,
    pub device_end_ns: u64,
    /// With `PKQ_ERR_TASK`: the status the handler reported (1 unknown op,
    /// 2 bad arguments, 3 stopped before every participant finished, 16
    /// and up a module's own; `UINT32_MAX` for one this version of pkq
    /// cannot name); 0 otherwise.
    pub task_status: u32,
    pub reserved: u32,
}

/// Words of a ticket's storage (`pkq_ticket`).
pub const PKQ_TICKET_WORDS: usize = 24;

/// A submitted task's ticket, owned by the caller (on its stack, in its
/// structs). Zero it before its first use (`pkq_ticket t = {0};`): a
/// zeroed ticket is empty. A submit fills it (and empties it first, so a
/// failed submit leaves it empty); the call that takes its result
/// (`pkq_wait`, `pkq_wait_timeout` and `pkq_poll` once the task ended) or
/// `pkq_ticket_release` empties it. An empty ticket is refused
/// (`PKQ_ERR_NOT_LIVE`). A live ticket may be moved by copying it, after
/// which the old copy is passed to no call again (zero it to make it an
/// empty ticket); one that is never taken nor released keeps its slot's
/// result, and its runtime's memory if destroyed, alive. Its fields are
/// pkq's: a caller neither reads nor writes them.
#[repr(C)]
pub struct pkq_ticket {
    /// `LIVE` while the ticket holds a task.
    private_state: u64,
    /// pkq's `Ticket`, in place.
    private_storage: [u64; PKQ_TICKET_WORDS],
}

const _: () = assert!(size_of::<Ticket>() <= PKQ_TICKET_WORDS * 8 && align_of::<Ticket>() <= 8);

// SAFETY: the state word and storage are the ticket's own; the storage is
// large and aligned enough for a `Ticket` (asserted above).
unsafe impl Held for pkq_ticket {
    type Item = Ticket;

    fn parts(&mut self) -> (&mut u64, *mut Ticket) {
        (
            &mut self.private_state,
            self.private_storage.as_mut_ptr().cast(),
        )
    }
}

/// Writes `result` into `out`: the status, with `out` filled for a
/// completion and for a failed task.
pub(crate) fn report(
    result: pkq::Result<pkq::Completion>,
    out: &mut pkq_completion,
) -> Result<pkq_status, Fail> {
    *out = pkq_completion::default();
    match result {
        Ok(c) => {
            out.value = c.value;
            out.device_start_ns = c.device_start_ns;
            out.device_end_ns = c.device_end_ns;
            Ok(pkq_status::PKQ_OK)
        }
        Err(Error::Task(t)) => {
            out.task_status = match t.status {
                TaskStatus::UnknownOp => 1,
                TaskStatus::BadArgs => 2,
                TaskStatus::Stopped => 3,
                TaskStatus::Other(code) => code.into(),
                _ => u32::MAX,
            };
            Err(Error::Task(t).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Waits for the ticket's task, as the runtime's wait strategy says, and
/// takes its result: `PKQ_OK` with `*out` filled, or the error that ended
/// it (`PKQ_ERR_TASK` with `out->task_status`, a device fault, a stop), the
/// ticket emptied; or `PKQ_ERR_STALLED` when the task's worker went silent
/// past the runtime's stall bound, the ticket still holding the task (wait
/// again, or release it). Never hangs: a dead kernel ends the wait with an
/// error, a stuck worker with `PKQ_ERR_STALLED`.
///
/// # Safety
/// `ticket` and `out` point to a `pkq_ticket` and a writable
/// `pkq_completion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_wait(ticket: *mut pkq_ticket, out: *mut pkq_completion) -> pkq_status {
    // SAFETY: the caller's contract.
    unsafe { pkq_wait_timeout(ticket, u64::MAX, out) }
}

/// `pkq_wait` for at most `timeout_ns` nanoseconds (`UINT64_MAX`: no
/// limit): `PKQ_ERR_TIMEOUT` if the task had not completed by then, the
/// ticket still holding it (wait again, poll, or release it); otherwise as
/// `pkq_wait`.
///
/// # Safety
/// As `pkq_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_wait_timeout(
    ticket: *mut pkq_ticket,
    timeout_ns: u64,
    out: *mut pkq_completion,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        // SAFETY: as above.
        let ticket = unsafe { get_mut(ticket, "ticket") }?;
        let t = ticket.live()?;
        let result = t.wait_timeout(timeout(timeout_ns));
        match result {
            // The task may still complete: the ticket keeps it.
            Err(e @ (Error::Timeout | Error::Stalled { .. })) => {
                *out = pkq_completion::default();
                Err(e.into())
            }
            result => {
                drop(ticket.take()?);
                report(result, out)
            }
        }
    })
}

/// Looks once, without waiting: `PKQ_PENDING` while the task has not
/// completed (the ticket still holds it); otherwise its result or the error
/// that ended it, as `pkq_wait`, the ticket emptied. A poll learns of a dead
/// kernel but not of a stalled worker: polls of a task whose worker is stuck
/// say `PKQ_PENDING` for as long as it is (`pkq_wait_timeout` reports the
/// stall).
///
/// # Safety
/// As `pkq_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_poll(ticket: *mut pkq_ticket, out: *mut pkq_completion) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        // SAFETY: as above.
        let ticket = unsafe { get_mut(ticket, "ticket") }?;
        let result = match ticket.live()?.try_result() {
            Ok(None) => {
                *out = pkq_completion::default();
                return Ok(pkq_status::PKQ_PENDING);
            }
            Ok(Some(c)) => Ok(c),
            Err(e) => Err(e),
        };
        drop(ticket.take()?);
        report(result, out)
    })
}

/// Empties the ticket without taking its result (the task runs on; its
/// slot is reused once it completed). An empty ticket is left as it is
/// (`PKQ_OK`).
///
/// # Safety
/// `ticket` points to a `pkq_ticket` (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_ticket_release(ticket: *mut pkq_ticket) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let ticket = unsafe { get_mut(ticket, "ticket") }?;
        ticket.release();
        Ok(pkq_status::PKQ_OK)
    })
}

/// `pkq_wait_timeout` for an IO task (`pkq_submit_io`), with the bytes its
/// handler wrote copied into `buf` (`cap` bytes) and their count in
/// `*out_len` (0 for a task that wrote none, or no IO task). An output
/// longer than `cap` is not cut: `PKQ_ERR_PAYLOAD_TOO_LARGE`, `*out_len`
/// its length, and the ticket keeps the result (call again with a buffer
/// that large). Otherwise as `pkq_wait_timeout`.
///
/// # Safety
/// As `pkq_wait`; `buf` points to `cap` writable bytes (or `cap` is 0);
/// `out_len` to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_wait_output(
    ticket: *mut pkq_ticket,
    timeout_ns: u64,
    out: *mut pkq_completion,
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        // SAFETY: as above.
        let out_len = unsafe { get_mut(out_len, "out_len") }?;
        *out_len = 0;
        if cap > 0 && buf.is_null() {
            return Err(Fail::Null("buf"));
        }
        // SAFETY: as above.
        let ticket = unsafe { get_mut(ticket, "ticket") }?;
        let t = ticket.live()?;
        let result = t.wait_timeout(timeout(timeout_ns));
        if let Err(e @ (Error::Timeout | Error::Stalled { .. })) = result {
            *out = pkq_completion::default();
            return Err(e.into());
        }
        // A result is kept by the ticket: a second call sees it again.
        let output = t.output().unwrap_or(&[]);
        *out_len = output.len();
        if output.len() > cap {
            *out = pkq_completion::default();
            return Err(Fail::Status(
                pkq_status::PKQ_ERR_PAYLOAD_TOO_LARGE,
                format!(
                    "the task wrote {} output bytes, the buffer holds {cap}: the ticket keeps them",
                    output.len()
                ),
            ));
        }
        if !output.is_empty() {
            // SAFETY: `buf` holds `cap >= output.len()` writable bytes (the
            // contract), apart from pkq's output.
            unsafe { std::ptr::copy_nonoverlapping(output.as_ptr(), buf, output.len()) };
        }
        drop(ticket.take()?);
        report(result, out)
    })
}

/// Sets how waits on this ticket wait (a `PKQ_WAIT_*` value other than
/// `PKQ_WAIT_DEFAULT`, which is refused: a ticket starts with its
/// runtime's): a long task may park while the runtime spins. The ticket
/// keeps its task.
///
/// # Safety
/// `ticket` points to a `pkq_ticket` (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_ticket_set_wait(ticket: *mut pkq_ticket, wait: u32) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let ticket = unsafe { get_mut(ticket, "ticket") }?;
        if wait == PKQ_WAIT_DEFAULT {
            return Err(Fail::Status(
                pkq_status::PKQ_ERR_INVALID_ARGUMENT,
                "PKQ_WAIT_DEFAULT: a ticket takes its runtime's strategy when submitted; name one"
                    .into(),
            ));
        }
        let strategy = wait_strategy(wait).map_err(|_| {
            Fail::Status(
                pkq_status::PKQ_ERR_INVALID_ARGUMENT,
                format!("wait strategy {wait}: not a PKQ_WAIT_* value"),
            )
        })?;
        let t = ticket.take()?;
        ticket.fill(t.with_wait(strategy));
        Ok(pkq_status::PKQ_OK)
    })
}

/// The wait's limit: `UINT64_MAX` none.
pub(crate) fn timeout(ns: u64) -> Duration {
    if ns == u64::MAX {
        Duration::MAX
    } else {
        Duration::from_nanos(ns)
    }
}
