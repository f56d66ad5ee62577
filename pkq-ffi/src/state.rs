//! Device state: bytes kept in device memory between tasks, and the ops
//! that step them (`pkq::DeviceState`, `pkq::StateOp`).

use std::ffi::c_void;

use pkq::{DeviceState, Op};

use crate::boundary::{Fail, call, free, get, get_mut};
use crate::runtime::pkq_runtime;
use crate::status::pkq_status;
use crate::submit::bytes;
use crate::ticket::{pkq_completion, report};

/// Bytes of state in the runtime's device memory (`pkq::DeviceState`).
/// Opaque; made by `pkq_state_new`, freed by `pkq_state_destroy`. Used by
/// one thread at a time.
pub struct pkq_state {
    state: DeviceState<u8>,
}

/// The most argument bytes of an op on state (after the state's address
/// and length, which pkq writes).
const MAX_STATE_ARGS: usize = 32;

/// A state of `len` bytes (at least 1) holding a copy of `init`, in the
/// runtime's state memory (its first lane's: `state_memory`; the copy is
/// waited for here);
/// `*out` its handle, null on failure. Refuses an empty state
/// (`PKQ_ERR_INVALID_ARGUMENT`) and a runtime without room for it
/// (`PKQ_ERR_INVALID_CONFIG`). Thread-safe.
///
/// # Safety
/// `rt` is a live handle; `init` points to `len` readable bytes; `out` to a
/// writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_state_new(
    rt: *const pkq_runtime,
    init: *const c_void,
    len: usize,
    out: *mut *mut pkq_state,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        *out = std::ptr::null_mut();
        // SAFETY: as above.
        let rt = unsafe { get(rt, "rt") }?;
        // SAFETY: as above.
        let init = unsafe { bytes(init, len, "init") }?;
        let state = rt.rt.state(init)?;
        *out = Box::into_raw(Box::new(pkq_state { state }));
        Ok(pkq_status::PKQ_OK)
    })
}

/// Copies the state's bytes into `buf` (`len` must be its length; else
/// `PKQ_ERR_INVALID_ARGUMENT`), waiting for the copy.
///
/// # Safety
/// `state` is a live handle; `buf` points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_state_read(
    state: *const pkq_state,
    buf: *mut c_void,
    len: usize,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let state = &unsafe { get(state, "state") }?.state;
        same_len(state, len)?;
        if buf.is_null() {
            return Err(Fail::Null("buf"));
        }
        let bytes = state.read()?;
        // SAFETY: `buf` holds `len` writable bytes (the contract), as many
        // as `bytes` (checked).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), len) };
        Ok(pkq_status::PKQ_OK)
    })
}

/// Writes `data` (`len` bytes: the state's length) over the state,
/// waiting for the copy.
///
/// # Safety
/// `state` is a live handle; `data` points to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_state_write(
    state: *mut pkq_state,
    data: *const c_void,
    len: usize,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let state = &mut unsafe { get_mut(state, "state") }?.state;
        same_len(state, len)?;
        // SAFETY: as above.
        let data = unsafe { bytes(data, len, "data") }?;
        state.write(data)?;
        Ok(pkq_status::PKQ_OK)
    })
}

fn same_len(state: &DeviceState<u8>, len: usize) -> Result<(), Fail> {
    if len != state.len() {
        return Err(Fail::Status(
            pkq_status::PKQ_ERR_INVALID_ARGUMENT,
            format!("len is {len}: the state holds {} bytes", state.len()),
        ));
    }
    Ok(())
}

/// Runs one task of state op `op` (declared on the device with
/// `PKQ_OP_INFO_STATE`, its arguments the `len` bytes at `args`, at most
/// 32) on `state`, on the runtime's lane 0, and waits for it; the result in
/// `*out` as `pkq_wait`. Checked first, nothing submitted: `len` over 32 is
/// `PKQ_ERR_PAYLOAD_TOO_LARGE`, a state of another runtime
/// `PKQ_ERR_INVALID_ARGUMENT`, and arguments the op table does not list
/// `PKQ_ERR_OP_MISMATCH` (the table holds the size of the device's
/// argument struct after the state's address and length, a multiple of 8:
/// `len` is checked rounded up to it, the bytes past `len` sent as 0). A wait that ends otherwise
/// than with the task's result (a fault, a stop) returns once the kernel
/// is known to have stopped: the state is never used by a task after this
/// returns. So the wait is not ended by a stall (a handler that never
/// returns holds this call), and where the kernel does not exit in time
/// after such an end (the stop's wait for it, then one more stop timeout)
/// the process aborts rather than let the device use the state after it
/// was given back.
///
/// # Safety
/// `rt` and `state` are live handles, the state made on that runtime;
/// `args` points to `len` readable bytes; `out` to a writable
/// `pkq_completion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_call_on_state(
    rt: *const pkq_runtime,
    state: *mut pkq_state,
    op: u16,
    args: *const c_void,
    len: usize,
    out: *mut pkq_completion,
) -> pkq_status {
    // SAFETY: the caller's contract; no input.
    unsafe { on_state(rt, state, op, (args, len), None, out) }
}

/// `pkq_call_on_state` as an IO task (a runtime with IO areas): the
/// `input_len` bytes at `input` in its slot's input area, and the bytes
/// its handler wrote copied into `buf` (`cap` bytes), their count in
/// `*out_len`. An output longer than `cap` returns
/// `PKQ_ERR_PAYLOAD_TOO_LARGE`, `*out` filled, `*out_len` its length and
/// `cap` bytes of it in `buf` (give a buffer as large as the runtime's
/// `io_output`). Besides `pkq_call_on_state`'s refusals: a runtime without
/// IO areas is `PKQ_ERR_INVALID_CONFIG`, an input longer than its input
/// area `PKQ_ERR_PAYLOAD_TOO_LARGE`, nothing submitted.
///
/// # Safety
/// As `pkq_call_on_state`; `input` points to `input_len` readable bytes;
/// `buf` to `cap` writable bytes; `out_len` to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_call_on_state_io(
    rt: *const pkq_runtime,
    state: *mut pkq_state,
    op: u16,
    args: *const c_void,
    len: usize,
    input: *const c_void,
    input_len: usize,
    out: *mut pkq_completion,
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> pkq_status {
    let io = Io {
        input,
        input_len,
        buf,
        cap,
        out_len,
    };
    // SAFETY: the caller's contract.
    unsafe { on_state(rt, state, op, (args, len), Some(io), out) }
}

/// The IO half of `pkq_call_on_state_io`'s arguments.
struct Io {
    input: *const c_void,
    input_len: usize,
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
}

/// `pkq_call_on_state` and its IO twin.
///
/// # Safety
/// Their contracts.
unsafe fn on_state(
    rt: *const pkq_runtime,
    state: *mut pkq_state,
    op: u16,
    (args, len): (*const c_void, usize),
    io: Option<Io>,
    out: *mut pkq_completion,
) -> pkq_status {
    call(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { get_mut(out, "out") }?;
        *out = pkq_completion::default();
        // SAFETY: as above.
        let rt = &unsafe { get(rt, "rt") }?.rt;
        // SAFETY: as above.
        let state = &mut unsafe { get_mut(state, "state") }?.state;
        if len > MAX_STATE_ARGS {
            return Err(pkq::Error::PayloadTooLarge {
                len,
                max: MAX_STATE_ARGS,
            }
            .into());
        }
        // SAFETY: as above.
        let args = unsafe { bytes(args, len, "args") }?;
        let io = match io {
            None => None,
            Some(io) => {
                // SAFETY: as above.
                let out_len = unsafe { get_mut(io.out_len, "out_len") }?;
                *out_len = 0;
                if io.cap > 0 && io.buf.is_null() {
                    return Err(Fail::Null("buf"));
                }
                // SAFETY: as above.
                let input = unsafe { bytes(io.input, io.input_len, "input") }?;
                Some((input, io.buf, io.cap, out_len))
            }
        };
        let (result, output) = match io.as_ref() {
            None => (rt.call_on_state_raw(Op(op), state, args), Vec::new()),
            Some(&(input, ..)) => match rt.call_on_state_raw_io(Op(op), state, args, input) {
                Ok((c, output)) => (Ok(c), output),
                Err(e) => (Err(e), Vec::new()),
            },
        };
        let status = report(result, out)?;
        if let Some((_, buf, cap, out_len)) = io {
            *out_len = output.len();
            let n = output.len().min(cap);
            if n > 0 {
                // SAFETY: `buf` holds `cap >= n` writable bytes (the
                // contract), apart from pkq's output.
                unsafe { std::ptr::copy_nonoverlapping(output.as_ptr(), buf, n) };
            }
            if output.len() > cap {
                return Err(Fail::Status(
                    pkq_status::PKQ_ERR_PAYLOAD_TOO_LARGE,
                    format!(
                        "the task wrote {} output bytes, the buffer holds {cap}",
                        output.len()
                    ),
                ));
            }
        }
        Ok(status)
    })
}

/// Frees the state: its range goes back to the runtime's state memory at
/// once (which is freed to the device once the runtime, its kernel and
/// its last state are all gone). Null does nothing. No other call of this handle may overlap or follow it.
///
/// # Safety
/// `state` is null or a live handle, used by nothing else from now on.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pkq_state_destroy(state: *mut pkq_state) {
    // SAFETY: the caller's contract: from `pkq_state_new`.
    unsafe { free(state) }
}
