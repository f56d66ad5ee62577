//! Tasks by op code and raw argument bytes, and their tickets: plain
//! structs the caller owns, holding pkq's `Ticket` in place.

use std::ffi::c_void;
use std::mem::{align_of, size_of};
use std::time::Duration;

use pkq::{Error, Op, Submit, Task, TaskStatus, Ticket};

use crate::boundary::{Fail, call, get, get_mut};
use crate::runtime::pkq_runtime;
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
const _: () = assert!(
    PKQ_OP_NOP == pkq::builtin::NOP.op().0
        && PKQ_OP_ECHO == pkq::builtin::ECHO.op().0
        && PKQ_OP_SPIN == pkq::builtin::SPIN.op().0
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

/// `state` of a ticket that holds a task ("pkqtickt").
const LIVE: u64 = 0x706b_7174_6963_6b74;

const _: () = assert!(size_of::<Ticket>() <= PKQ_TICKET_WORDS * 8 && align_of::<Ticket>() <= 8);

impl pkq_ticket {
    /// Puts `t` into this ticket's storage.
    fn fill(&mut self, t: Ticket) {
        // SAFETY: the storage is large and aligned enough for a `Ticket`
        // (the assertion above), and holds none (the caller's ticket is
        // written over: a live one would leak, never be used twice).
        unsafe { self.private_storage.as_mut_ptr().cast::<Ticket>().write(t) };
        self.private_state = LIVE;
    }

    /// The ticket held, in place.
    fn live(&mut self) -> Result<&mut Ticket, Fail> {
        if self.private_state != LIVE {
            return Err(Fail::NotLive);
        }
        // SAFETY: `LIVE`: `fill` wrote a `Ticket` there and nothing took it.
        Ok(unsafe { &mut *self.private_storage.as_mut_ptr().cast::<Ticket>() })
    }

    /// Takes the ticket held out; the ticket is empty after.
    fn take(&mut self) -> Result<Ticket, Fail> {
        self.live()?;
        self.private_state = 0;
        // SAFETY: it was live (checked above), and is marked empty: read
        // once.
        Ok(unsafe { self.private_storage.as_ptr().cast::<Ticket>().read() })
    }
}

/// The most argument bytes a task carries in its slot.
const MAX_ARG_BYTES: usize = 48;

/// Writes `result` into `out`: the status, with `out` filled for a
/// completion and for a failed task.
fn report(
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

/// Submits one task of `op` with `len` argument bytes at `args` (at most 48;
/// checked against the kernel's op table as `pkq::Task::raw` is) and fills
/// `ticket`. `submit` waits while the ring is full; `try_submit` says
/// `PKQ_ERR_FULL`.
fn submit(
    rt: *const pkq_runtime,
    op: u16,
    args: *const c_void,
    len: usize,
    ticket: *mut pkq_ticket,
    wait_for_room: bool,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract (pkq_submit's).
        let ticket = unsafe { get_mut(ticket, "ticket") }?;
        // Empty from here on: a failed submit leaves no stale task in it.
        ticket.private_state = 0;
        // SAFETY: as above.
        let rt = unsafe { get(rt, "rt") }?;
        if len > MAX_ARG_BYTES {
            return Err(Error::PayloadTooLarge {
                len,
                max: MAX_ARG_BYTES,
            }
            .into());
        }
        let args: &[u8] = if len == 0 {
            &[]
        } else if args.is_null() {
            return Err(Fail::Null("args"));
        } else {
            // SAFETY: `args` points to `len` readable bytes (the contract),
            // at most 48.
            unsafe { std::slice::from_raw_parts(args.cast::<u8>(), len) }
        };
        let task = Task::raw(Op(op), args);
        let rt = rt.runtime();
        let t = if wait_for_room {
            rt.submit(task)
        } else {
            rt.try_submit(task)
        }?;
        ticket.fill(t);
        Ok(pkq_status::PKQ_OK)
    })
}

/// Submits one task of op `op` with the `len` argument bytes at `args`
/// (copied into its slot: at most 48; `args` may be null when `len` is 0),
/// waiting while the ring has no room, and fills `*ticket` (emptied first:
/// a live task it held would be leaked, and a failed submit leaves it
/// empty). The op must be in the kernel's op
/// table with that argument length, and not dereference device addresses
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
    submit(rt, op, args, len, ticket, true)
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
    submit(rt, op, args, len, ticket, false)
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
        let result = if timeout_ns == u64::MAX {
            t.wait_timeout(Duration::MAX)
        } else {
            t.wait_timeout(Duration::from_nanos(timeout_ns))
        };
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
        if ticket.private_state == LIVE {
            drop(ticket.take()?);
        }
        Ok(pkq_status::PKQ_OK)
    })
}
