//! The status codes every C call returns, one per [`pkq::Error`] variant
//! and the boundary's own.

use pkq::Error;

/// What a call of pkq's C API did: `PKQ_OK`, `PKQ_PENDING` (a poll found
/// the task not yet complete), one of the boundary's own errors
/// (`PKQ_ERR_NULL`, `PKQ_ERR_NOT_LIVE`, `PKQ_ERR_PANIC`), or the pkq error
/// of the same name (`PKQ_ERR_FULL` is `pkq::Error::Full`, ...).
/// `pkq_last_error` gives the message of the calling thread's last error.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum pkq_status {
    /// Done.
    PKQ_OK = 0,
    /// The task has not completed yet (`pkq_poll`); the ticket still holds it.
    PKQ_PENDING = 1,
    /// A pointer argument that may not be null was null.
    PKQ_ERR_NULL = 2,
    /// The ticket holds no task: never filled by a submit, or its task was
    /// already taken (waited for, polled to the end, or released).
    PKQ_ERR_NOT_LIVE = 3,
    /// pkq panicked inside the call; the panic was caught at the boundary.
    /// The handle stays usable, but what the call did is unknown.
    PKQ_ERR_PANIC = 4,
    /// An error of a later pkq than this API names.
    PKQ_ERR_OTHER = 5,
    PKQ_ERR_NO_DRIVER = 10,
    PKQ_ERR_NO_DEVICE = 11,
    PKQ_ERR_DEVICE_OUT_OF_RANGE = 12,
    PKQ_ERR_UNSUPPORTED_DEVICE = 13,
    PKQ_ERR_PARTITION_UNSUPPORTED = 14,
    PKQ_ERR_NOT_SERVING = 15,
    PKQ_ERR_NO_SERVING_DEVICE = 16,
    PKQ_ERR_KERNEL_NOT_BUILT = 17,
    PKQ_ERR_INVALID_MODULE = 18,
    PKQ_ERR_OP_MISMATCH = 19,
    PKQ_ERR_KERNEL_MISSING = 20,
    PKQ_ERR_INVALID_CONFIG = 21,
    PKQ_ERR_PAYLOAD_TOO_LARGE = 22,
    PKQ_ERR_INVALID_ARGUMENT = 23,
    PKQ_ERR_UNCHECKED_OP = 24,
    PKQ_ERR_FULL = 25,
    PKQ_ERR_CLOSED = 26,
    PKQ_ERR_RING_HELD = 27,
    PKQ_ERR_TIMEOUT = 28,
    /// The task ran and its handler reported a status other than success
    /// (`pkq_completion.task_status` holds it).
    PKQ_ERR_TASK = 29,
    PKQ_ERR_DEVICE_FAULT = 30,
    PKQ_ERR_STALLED = 31,
    PKQ_ERR_CANCELLED = 32,
    PKQ_ERR_KERNEL_STOPPED = 33,
    PKQ_ERR_KERNEL_TIMEOUT = 34,
    PKQ_ERR_CUDA = 35,
}

use pkq_status::*;

/// Every status, in code order (names, tests).
pub(crate) const ALL: [pkq_status; 32] = [
    PKQ_OK,
    PKQ_PENDING,
    PKQ_ERR_NULL,
    PKQ_ERR_NOT_LIVE,
    PKQ_ERR_PANIC,
    PKQ_ERR_OTHER,
    PKQ_ERR_NO_DRIVER,
    PKQ_ERR_NO_DEVICE,
    PKQ_ERR_DEVICE_OUT_OF_RANGE,
    PKQ_ERR_UNSUPPORTED_DEVICE,
    PKQ_ERR_PARTITION_UNSUPPORTED,
    PKQ_ERR_NOT_SERVING,
    PKQ_ERR_NO_SERVING_DEVICE,
    PKQ_ERR_KERNEL_NOT_BUILT,
    PKQ_ERR_INVALID_MODULE,
    PKQ_ERR_OP_MISMATCH,
    PKQ_ERR_KERNEL_MISSING,
    PKQ_ERR_INVALID_CONFIG,
    PKQ_ERR_PAYLOAD_TOO_LARGE,
    PKQ_ERR_INVALID_ARGUMENT,
    PKQ_ERR_UNCHECKED_OP,
    PKQ_ERR_FULL,
    PKQ_ERR_CLOSED,
    PKQ_ERR_RING_HELD,
    PKQ_ERR_TIMEOUT,
    PKQ_ERR_TASK,
    PKQ_ERR_DEVICE_FAULT,
    PKQ_ERR_STALLED,
    PKQ_ERR_CANCELLED,
    PKQ_ERR_KERNEL_STOPPED,
    PKQ_ERR_KERNEL_TIMEOUT,
    PKQ_ERR_CUDA,
];

impl pkq_status {
    /// The code of `e`.
    pub(crate) fn of(e: &Error) -> Self {
        match e {
            Error::NoDriver(_) => PKQ_ERR_NO_DRIVER,
            Error::NoDevice(_) => PKQ_ERR_NO_DEVICE,
            Error::DeviceOutOfRange { .. } => PKQ_ERR_DEVICE_OUT_OF_RANGE,
            Error::UnsupportedDevice { .. } => PKQ_ERR_UNSUPPORTED_DEVICE,
            Error::PartitionUnsupported(_) => PKQ_ERR_PARTITION_UNSUPPORTED,
            Error::NotServing(_) => PKQ_ERR_NOT_SERVING,
            Error::NoServingDevice => PKQ_ERR_NO_SERVING_DEVICE,
            Error::KernelNotBuilt(_) => PKQ_ERR_KERNEL_NOT_BUILT,
            Error::InvalidModule(_) => PKQ_ERR_INVALID_MODULE,
            Error::OpMismatch { .. } => PKQ_ERR_OP_MISMATCH,
            Error::KernelMissing(_) => PKQ_ERR_KERNEL_MISSING,
            Error::InvalidConfig(_) => PKQ_ERR_INVALID_CONFIG,
            Error::PayloadTooLarge { .. } => PKQ_ERR_PAYLOAD_TOO_LARGE,
            Error::InvalidArgument(_) => PKQ_ERR_INVALID_ARGUMENT,
            Error::UncheckedOp(_) => PKQ_ERR_UNCHECKED_OP,
            Error::Full => PKQ_ERR_FULL,
            Error::Closed => PKQ_ERR_CLOSED,
            Error::RingHeld => PKQ_ERR_RING_HELD,
            Error::Timeout => PKQ_ERR_TIMEOUT,
            Error::Task(_) => PKQ_ERR_TASK,
            Error::DeviceFault(_) => PKQ_ERR_DEVICE_FAULT,
            Error::Stalled { .. } => PKQ_ERR_STALLED,
            Error::Cancelled => PKQ_ERR_CANCELLED,
            Error::KernelStopped(_) => PKQ_ERR_KERNEL_STOPPED,
            Error::KernelTimeout(_) => PKQ_ERR_KERNEL_TIMEOUT,
            Error::Cuda(_) => PKQ_ERR_CUDA,
            _ => PKQ_ERR_OTHER,
        }
    }

    /// Its name, as the header spells it, NUL-terminated.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PKQ_OK => "PKQ_OK\0",
            PKQ_PENDING => "PKQ_PENDING\0",
            PKQ_ERR_NULL => "PKQ_ERR_NULL\0",
            PKQ_ERR_NOT_LIVE => "PKQ_ERR_NOT_LIVE\0",
            PKQ_ERR_PANIC => "PKQ_ERR_PANIC\0",
            PKQ_ERR_OTHER => "PKQ_ERR_OTHER\0",
            PKQ_ERR_NO_DRIVER => "PKQ_ERR_NO_DRIVER\0",
            PKQ_ERR_NO_DEVICE => "PKQ_ERR_NO_DEVICE\0",
            PKQ_ERR_DEVICE_OUT_OF_RANGE => "PKQ_ERR_DEVICE_OUT_OF_RANGE\0",
            PKQ_ERR_UNSUPPORTED_DEVICE => "PKQ_ERR_UNSUPPORTED_DEVICE\0",
            PKQ_ERR_PARTITION_UNSUPPORTED => "PKQ_ERR_PARTITION_UNSUPPORTED\0",
            PKQ_ERR_NOT_SERVING => "PKQ_ERR_NOT_SERVING\0",
            PKQ_ERR_NO_SERVING_DEVICE => "PKQ_ERR_NO_SERVING_DEVICE\0",
            PKQ_ERR_KERNEL_NOT_BUILT => "PKQ_ERR_KERNEL_NOT_BUILT\0",
            PKQ_ERR_INVALID_MODULE => "PKQ_ERR_INVALID_MODULE\0",
            PKQ_ERR_OP_MISMATCH => "PKQ_ERR_OP_MISMATCH\0",
            PKQ_ERR_KERNEL_MISSING => "PKQ_ERR_KERNEL_MISSING\0",
            PKQ_ERR_INVALID_CONFIG => "PKQ_ERR_INVALID_CONFIG\0",
            PKQ_ERR_PAYLOAD_TOO_LARGE => "PKQ_ERR_PAYLOAD_TOO_LARGE\0",
            PKQ_ERR_INVALID_ARGUMENT => "PKQ_ERR_INVALID_ARGUMENT\0",
            PKQ_ERR_UNCHECKED_OP => "PKQ_ERR_UNCHECKED_OP\0",
            PKQ_ERR_FULL => "PKQ_ERR_FULL\0",
            PKQ_ERR_CLOSED => "PKQ_ERR_CLOSED\0",
            PKQ_ERR_RING_HELD => "PKQ_ERR_RING_HELD\0",
            PKQ_ERR_TIMEOUT => "PKQ_ERR_TIMEOUT\0",
            PKQ_ERR_TASK => "PKQ_ERR_TASK\0",
            PKQ_ERR_DEVICE_FAULT => "PKQ_ERR_DEVICE_FAULT\0",
            PKQ_ERR_STALLED => "PKQ_ERR_STALLED\0",
            PKQ_ERR_CANCELLED => "PKQ_ERR_CANCELLED\0",
            PKQ_ERR_KERNEL_STOPPED => "PKQ_ERR_KERNEL_STOPPED\0",
            PKQ_ERR_KERNEL_TIMEOUT => "PKQ_ERR_KERNEL_TIMEOUT\0",
            PKQ_ERR_CUDA => "PKQ_ERR_CUDA\0",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_is_listed_once_in_code_order_with_its_name() {
        for w in ALL.windows(2) {
            assert!((w[0] as i32) < (w[1] as i32), "{:?} {:?}", w[0], w[1]);
        }
        for s in ALL {
            let name = s.name();
            assert!(name.ends_with('\0'));
            assert_eq!(&name[..name.len() - 1], format!("{s:?}"));
        }
    }

    #[test]
    fn errors_map_to_their_namesakes() {
        assert_eq!(pkq_status::of(&Error::Full), PKQ_ERR_FULL);
        assert_eq!(pkq_status::of(&Error::Closed), PKQ_ERR_CLOSED);
        assert_eq!(pkq_status::of(&Error::Timeout), PKQ_ERR_TIMEOUT);
        assert_eq!(
            pkq_status::of(&Error::NoDriver("x".into())),
            PKQ_ERR_NO_DRIVER
        );
        assert_eq!(
            pkq_status::of(&Error::InvalidConfig("x".into())),
            PKQ_ERR_INVALID_CONFIG
        );
    }
}
