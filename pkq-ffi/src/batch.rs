//! Runs of tasks submitted together (`pkq_submit_batch`): their batch, a
//! plain struct the caller owns as it owns tickets.

use std::mem::{align_of, size_of};

use pkq::{Batch, Error};

use crate::boundary::{Fail, call, get_mut};
use crate::held::Held;
use crate::status::pkq_status;
use crate::ticket::{pkq_completion, report, timeout};

/// Words of a batch's storage (`pkq_batch`).
pub const PKQ_BATCH_WORDS: usize = 24;

/// A submitted run of tasks, owned by the caller as a `pkq_ticket` is:
/// zero it before its first use (`pkq_batch b = {0};`); a submit fills it;
/// `pkq_batch_wait` once every task is done, or `pkq_batch_release`,
/// empties it. Moved by copying, the old copy passed to no call again.
/// Its fields are pkq's.
#[repr(C)]
pub struct pkq_batch {
    private_state: u64,
    private_storage: [u64; PKQ_BATCH_WORDS],
}

const _: () = assert!(size_of::<Batch>() <= PKQ_BATCH_WORDS * 8 && align_of::<Batch>() <= 8);

// SAFETY: the state word and storage are the batch's own; the storage is
// large and aligned enough for a `Batch` (asserted above).
unsafe impl Held for pkq_batch {
    type Item = Batch;

    fn parts(&mut self) -> (&mut u64, *mut Batch) {
        (
            &mut self.private_state,
            self.private_storage.as_mut_ptr().cast(),
        )
    }
}

/// How many tasks the batch holds, into `*len` (0 for an empty batch,
/// which returns `PKQ_ERR_NOT_LIVE`). Never blocks.
///
/// # Safety
/// `batch` points to a `pkq_batch`; `len` to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_batch_len(batch: *mut pkq_batch, len: *mut usize) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let len = unsafe { get_mut(len, "len") }?;
        *len = 0;
        // SAFETY: as above.
        *len = unsafe { get_mut(batch, "batch") }?.live()?.len();
        Ok(pkq_status::PKQ_OK)
    })
}

/// Takes the completions that have arrived, without waiting, and puts how
/// many of the batch's tasks are done into `*done`: `PKQ_OK` when all are
/// (then `pkq_batch_wait` returns at once), `PKQ_PENDING` otherwise; or
/// the error that ended the runtime before they completed. The batch keeps
/// its tasks.
///
/// # Safety
/// `batch` points to a `pkq_batch`; `done` to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_batch_poll(batch: *mut pkq_batch, done: *mut usize) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let done = unsafe { get_mut(done, "done") }?;
        *done = 0;
        // SAFETY: as above.
        let b = unsafe { get_mut(batch, "batch") }?.live()?;
        *done = b.poll()?;
        Ok(if *done == b.len() {
            pkq_status::PKQ_OK
        } else {
            pkq_status::PKQ_PENDING
        })
    })
}

/// Waits at most `timeout_ns` (`UINT64_MAX`: no limit) for every task of
/// the batch and writes task `i`'s result to `results[i]` and its status
/// to `statuses[i]` (`PKQ_OK`, or `PKQ_ERR_TASK` with
/// `results[i].task_status`), `count` being the batch's length (else
/// `PKQ_ERR_INVALID_ARGUMENT`, nothing taken). Returns `PKQ_OK` when every
/// task succeeded, `PKQ_ERR_TASK` when one failed, the batch emptied
/// either way. `PKQ_ERR_TIMEOUT` and `PKQ_ERR_STALLED` keep the batch (wait
/// again, or release it), the arrays filled for the tasks done so far and
/// `PKQ_PENDING` for the rest. Another error (a fault, a stop, a cancel)
/// empties it: the tasks done before it have their results, the rest that
/// error as their status. Never hangs, as `pkq_wait`.
///
/// # Safety
/// `batch` points to a `pkq_batch`; `results` and `statuses` to `count`
/// writable elements each (either may be null when `count` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_batch_wait(
    batch: *mut pkq_batch,
    timeout_ns: u64,
    results: *mut pkq_completion,
    statuses: *mut pkq_status,
    count: usize,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let batch = unsafe { get_mut(batch, "batch") }?;
        if results.is_null() && count > 0 {
            return Err(Fail::Null("results"));
        }
        if statuses.is_null() && count > 0 {
            return Err(Fail::Null("statuses"));
        }
        let b = batch.live()?;
        if count != b.len() {
            return Err(Fail::Status(
                pkq_status::PKQ_ERR_INVALID_ARGUMENT,
                format!("count is {count}: the batch holds {} tasks", b.len()),
            ));
        }
        let results: &mut [pkq_completion] = if count == 0 {
            &mut []
        } else {
            // SAFETY: `count` writable elements (the contract), not null
            // (checked); a completion is plain integers, valid whatever the
            // caller left there.
            unsafe { std::slice::from_raw_parts_mut(results, count) }
        };
        let outcome = b.wait_timeout(timeout(timeout_ns));
        let mut failed = false;
        for (i, r) in b.results().iter().enumerate() {
            let status = match r {
                Some(r) => {
                    let s = report((*r).map_err(Error::Task), &mut results[i]);
                    failed |= s.is_err();
                    s.unwrap_or(pkq_status::PKQ_ERR_TASK)
                }
                None => {
                    results[i] = pkq_completion::default();
                    match &outcome {
                        Err(e) if !matches!(e, Error::Timeout | Error::Stalled { .. }) => {
                            pkq_status::of(e)
                        }
                        _ => pkq_status::PKQ_PENDING,
                    }
                }
            };
            // SAFETY: `i < count` writable elements (the contract), written
            // without reading what the caller left there (any bits, not
            // necessarily a `pkq_status`).
            unsafe { statuses.add(i).write(status) };
        }
        match outcome {
            Err(e @ (Error::Timeout | Error::Stalled { .. })) => Err(e.into()),
            Err(e) => {
                batch.release();
                Err(e.into())
            }
            Ok(_) => {
                batch.release();
                if failed {
                    Err(Fail::Status(
                        pkq_status::PKQ_ERR_TASK,
                        "a task of the batch failed on the device (see its status)".into(),
                    ))
                } else {
                    Ok(pkq_status::PKQ_OK)
                }
            }
        }
    })
}

/// Empties the batch without taking its results (its tasks run on). An
/// empty batch is left as it is (`PKQ_OK`).
///
/// # Safety
/// `batch` points to a `pkq_batch` (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_batch_release(batch: *mut pkq_batch) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        unsafe { get_mut(batch, "batch") }?.release();
        Ok(pkq_status::PKQ_OK)
    })
}
