//! The boundary every C call crosses: panics caught, errors turned into
//! status codes, and the calling thread's last error message kept.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::status::{ALL, pkq_status};

/// Why a call failed: a pkq error, or one of the boundary's own.
pub(crate) enum Fail {
    /// The named pointer argument was null.
    Null(&'static str),
    /// The ticket holds no task.
    NotLive,
    /// A status with a message of the boundary's own (an argument out of
    /// range, an options struct too small).
    Status(pkq_status, String),
    Pkq(pkq::Error),
}

impl From<pkq::Error> for Fail {
    fn from(e: pkq::Error) -> Self {
        Self::Pkq(e)
    }
}

thread_local! {
    /// The message of this thread's last failed call.
    static LAST: RefCell<String> = const { RefCell::new(String::new()) };
}

fn keep(message: String) {
    // A thread being torn down has no slot left: the message is lost, the
    // status still says what happened.
    let _ = LAST.try_with(|last| *last.borrow_mut() = message);
}

/// Runs `f` as one C call: its status, `PKQ_OK` on success; a failure's
/// message kept for [`pkq_last_error`]; a panic caught (`PKQ_ERR_PANIC`).
pub(crate) fn call(f: impl FnOnce() -> Result<pkq_status, Fail>) -> pkq_status {
    // The handles the closures touch stay consistent across a panic: pkq's
    // own state is guarded by its locks and atomics, and a caught panic is
    // reported, not resumed.
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(status)) => status,
        Ok(Err(fail)) => remember(fail),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            // The payload's own drop may panic: forget it rather than unwind.
            std::mem::forget(payload);
            keep(format!("pkq panicked: {what}"));
            pkq_status::PKQ_ERR_PANIC
        }
    }
}

/// The status of `fail`, its message kept for [`pkq_last_error`] on this
/// thread.
pub(crate) fn remember(fail: Fail) -> pkq_status {
    let (status, message) = match fail {
        Fail::Null(what) => (pkq_status::PKQ_ERR_NULL, format!("{what} is null")),
        Fail::NotLive => (
            pkq_status::PKQ_ERR_NOT_LIVE,
            "the ticket or batch holds no task (never submitted, or already taken)".into(),
        ),
        Fail::Status(status, message) => (status, message),
        Fail::Pkq(e) => (pkq_status::of(&e), e.to_string()),
    };
    keep(message);
    status
}

/// Frees a handle made by `Box::into_raw` (null: nothing), a panic of its
/// drop caught and reported as nothing: the destroy calls return no status.
///
/// # Safety
/// `p` is null or came from `Box::into_raw` of a `Box<T>`, given back once,
/// used by nothing else from now on.
pub(crate) unsafe fn free<T>(p: *mut T) {
    if p.is_null() {
        return;
    }
    call(|| {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(p) });
        Ok(pkq_status::PKQ_OK)
    });
}

/// `p` as a reference, or [`Fail::Null`] naming it.
///
/// # Safety
/// A non-null `p` points to a valid `T` for the returned lifetime.
pub(crate) unsafe fn get<'a, T>(p: *const T, what: &'static str) -> Result<&'a T, Fail> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or(Fail::Null(what))
}

/// `p` as a mutable reference, or [`Fail::Null`] naming it.
///
/// # Safety
/// A non-null `p` points to a valid `T`, used by nothing else, for the
/// returned lifetime.
pub(crate) unsafe fn get_mut<'a, T>(p: *mut T, what: &'static str) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }.ok_or(Fail::Null(what))
}

/// Copies the message of the calling thread's last failed call (empty if
/// none failed) into `buf`, NUL-terminated and cut to `len - 1` bytes, and
/// returns its whole length in bytes, without the NUL (call again with a
/// larger buffer when that is `len` or more). `buf` may be null when `len`
/// is 0. A successful call leaves the message as it was. Thread-safe (each
/// thread has its own).
///
/// # Safety
/// `buf` points to `len` writable bytes (or `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_last_error(buf: *mut c_char, len: usize) -> usize {
    if len > 0 && !buf.is_null() {
        // SAFETY: `buf` holds `len > 0` bytes (the contract): an empty
        // message until the copy below writes one.
        unsafe { *buf = 0 };
    }
    let copy = |m: &String| {
        if len > 0 && !buf.is_null() {
            let n = m.len().min(len - 1);
            // SAFETY: `buf` holds `len` bytes (the contract), and `n < len`;
            // the message is a separate allocation.
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        m.len()
    };
    catch_unwind(AssertUnwindSafe(|| {
        LAST.try_with(|last| copy(&last.borrow())).unwrap_or(0)
    }))
    .unwrap_or(0)
}

/// The name of status code `status` as the header spells it
/// (`"PKQ_ERR_FULL"`), a static NUL-terminated string; `"PKQ_ERR_OTHER"`
/// for a code this API does not name. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn pkq_status_name(status: i32) -> *const c_char {
    ALL.iter()
        .find(|s| **s as i32 == status)
        .copied()
        .unwrap_or(pkq_status::PKQ_ERR_OTHER)
        .name()
        .as_ptr()
        .cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        let mut buf = [0 as c_char; 256];
        // SAFETY: 256 writable bytes.
        let n = unsafe { pkq_last_error(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated by the call.
        let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(s.to_bytes().len(), n.min(255));
        s.to_string_lossy().into_owned()
    }

    #[test]
    fn failures_and_panics_become_statuses_with_messages() {
        assert_eq!(call(|| Ok(pkq_status::PKQ_OK)), pkq_status::PKQ_OK);
        assert_eq!(
            call(|| Err(Fail::Pkq(pkq::Error::Full))),
            pkq_status::PKQ_ERR_FULL
        );
        assert_eq!(last(), "the submission ring is full");
        assert_eq!(call(|| Err(Fail::Null("rt"))), pkq_status::PKQ_ERR_NULL);
        assert_eq!(last(), "rt is null");
        assert_eq!(call(|| panic!("boom")), pkq_status::PKQ_ERR_PANIC);
        assert_eq!(last(), "pkq panicked: boom");
        // A success leaves the last message.
        call(|| Ok(pkq_status::PKQ_OK));
        assert_eq!(last(), "pkq panicked: boom");
    }

    #[test]
    fn the_message_is_cut_to_the_buffer_and_its_length_returned() {
        call(|| Err(Fail::Pkq(pkq::Error::Full)));
        let mut buf = [1 as c_char; 5];
        // SAFETY: 5 writable bytes.
        let n = unsafe { pkq_last_error(buf.as_mut_ptr(), 5) };
        assert_eq!(n, "the submission ring is full".len());
        assert_eq!(buf.map(|c| c as u8), *b"the \0");
        // SAFETY: len 0 writes nothing.
        assert_eq!(unsafe { pkq_last_error(std::ptr::null_mut(), 0) }, n);
    }

    #[test]
    fn status_names_and_unknown_codes() {
        // SAFETY: static NUL-terminated strings.
        let name = |c| unsafe { std::ffi::CStr::from_ptr(pkq_status_name(c)) };
        assert_eq!(name(0).to_str().unwrap(), "PKQ_OK");
        assert_eq!(
            name(pkq_status::PKQ_ERR_FULL as i32).to_str().unwrap(),
            "PKQ_ERR_FULL"
        );
        assert_eq!(name(-7).to_str().unwrap(), "PKQ_ERR_OTHER");
        assert_eq!(name(9999).to_str().unwrap(), "PKQ_ERR_OTHER");
    }
}
