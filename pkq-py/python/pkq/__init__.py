"""pkq: a resident CUDA kernel that answers small tasks at the floor of a
PCIe round trip, fed through a ring in mapped host memory.

A :class:`Runtime` starts pkq's persistent kernel on one GPU; each task is an
op code and up to :data:`ARGS_BYTES` argument bytes (``bytes``, any buffer,
or an ``int`` as 8 little-endian bytes). ``rt.call(op, args)`` is one round
trip; ``rt.submit`` returns a :class:`Ticket` to wait on, poll or ``await``;
``rt.submit_batch`` sends many tasks of one op at once and returns a
:class:`Batch`. Every error is a subclass of :class:`Error`.

>>> import pkq
>>> with pkq.Runtime() as rt:                      # doctest: +SKIP
...     assert rt.call(pkq.ECHO, 42) == 42
...     values = rt.submit_batch(pkq.ECHO, numpy.arange(4096, dtype="u8")).wait()

While a runtime lives, its kernel never ends, so CUDA calls that wait for
every kernel of the device never return: ``torch.cuda.synchronize()``,
``cupy.cuda.Device().synchronize()``, ``torch.cuda.empty_cache()``, CuPy's
``free_all_blocks()``, and a first launch that loads a module. Synchronize
your own streams, and warm up (load) your kernels before building the
runtime. Waits release the GIL, and hold off Ctrl-C (``KeyboardInterrupt``)
until they end: give long waits a timeout.

NumPy is optional: with it, :meth:`Batch.wait` returns a ``uint64`` array.
"""

import atexit as _atexit

from . import _pkq
from ._pkq import (
    ARGS_BYTES,
    COPY_IO,
    ECHO,
    FIRST_USER_OP,
    NOP,
    SPIN,
    SPIN_MAX_NS,
    Batch,
    Cancelled,
    Closed,
    Completion,
    CudaError,
    DeviceFault,
    DeviceOutOfRange,
    Error,
    Full,
    InvalidArgument,
    InvalidConfig,
    InvalidModule,
    KernelMissing,
    KernelNotBuilt,
    KernelStopped,
    KernelTimeout,
    NoDevice,
    NoDriver,
    NoServingDevice,
    NotServing,
    OpMismatch,
    PartitionUnsupported,
    PayloadTooLarge,
    RingHeld,
    Runtime,
    Stalled,
    State,
    TaskError,
    Ticket,
    TicketConsumed,
    Timeout,
    UncheckedOp,
    UnsupportedDevice,
    __version__,
    device_count,
    kernel_built,
    task_args,
)

__all__ = [
    "ARGS_BYTES",
    "COPY_IO",
    "ECHO",
    "FIRST_USER_OP",
    "NOP",
    "SPIN",
    "SPIN_MAX_NS",
    "Batch",
    "Cancelled",
    "Closed",
    "Completion",
    "CudaError",
    "DeviceFault",
    "DeviceOutOfRange",
    "Error",
    "Full",
    "InvalidArgument",
    "InvalidConfig",
    "InvalidModule",
    "KernelMissing",
    "KernelNotBuilt",
    "KernelStopped",
    "KernelTimeout",
    "NoDevice",
    "NoDriver",
    "NoServingDevice",
    "NotServing",
    "OpMismatch",
    "PartitionUnsupported",
    "PayloadTooLarge",
    "RingHeld",
    "Runtime",
    "Stalled",
    "State",
    "TaskError",
    "Ticket",
    "TicketConsumed",
    "Timeout",
    "UncheckedOp",
    "UnsupportedDevice",
    "__version__",
    "device_count",
    "kernel_built",
    "task_args",
]

# Runtimes still alive at exit are shut down while pkq's completion thread
# can still take the GIL (it resolves awaited tickets with it); a runtime
# dropped later, during interpreter finalization, then has nothing left to
# deliver.
_atexit.register(_pkq._shutdown_all)
