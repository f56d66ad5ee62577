"""Type stubs of pkq's extension module (``pkq._pkq``); import ``pkq``."""

import asyncio
import os
from collections.abc import Generator
from typing import Any, Final, Generic, Literal, TypeVar

from typing_extensions import Buffer

__version__: Final[str]

NOP: Final[int]
"""pkq's no-op: no argument bytes, value 0. The round-trip probe."""
ECHO: Final[int]
"""Answers its argument (up to 8 bytes, little-endian; up to 48 bytes, folded) as the value."""
SPIN: Final[int]
"""Spins on the device for its 8-byte argument's nanoseconds (at most SPIN_MAX_NS) and answers how many it spun."""
COPY_IO: Final[int]
"""An IO task: output byte i is input byte i (0 past it) XOR key; value the sum of the input bytes. Arguments: struct.pack("<II", out_len, key)."""
ARGS_BYTES: Final[int]
"""The most argument bytes a task carries inline in its slot."""
SPIN_MAX_NS: Final[int]
"""The longest SPIN task; a longer one fails with TaskError, status 2 (bad arguments)."""
FIRST_USER_OP: Final[int]
"""The first op code of a module's own ops (codes below are pkq's)."""

_Args = bytes | Buffer | int | None
"""Argument bytes: bytes (read in place), any buffer (copied), or an int (8 little-endian bytes)."""

_WaitName = Literal["spin", "spin_then_yield", "park", "monitor"]

def kernel_built() -> bool:
    """Whether this build carries pkq's kernel (nvcc was found when it was compiled)."""

def device_count() -> int:
    """How many CUDA devices the driver reports (NoDriver without a driver, NoDevice where it sees no GPU)."""

def task_args(args: _Args = None) -> bytes:
    """The argument bytes a task of `args` carries, as submit converts them (PayloadTooLarge past ARGS_BYTES)."""

def _shutdown_all() -> None:
    """Shuts down every runtime still alive (registered with atexit)."""

def _resolve(fut: asyncio.Future[Any], ok: bool, value: object) -> None:
    """Sets an asyncio future's result (ok) or exception unless it is done."""

class Completion:
    """A finished task's value and the GPU's clock (ns) at its start and end. Immutable."""

    @property
    def value(self) -> int:
        """The handler's 8-byte result, as an unsigned int."""
    @property
    def device_start_ns(self) -> int:
        """The GPU's clock (ns) when the task started."""
    @property
    def device_end_ns(self) -> int:
        """The GPU's clock (ns) when its handler returned."""
    @property
    def device_time_ns(self) -> int:
        """How long the handler ran on the device, in ns."""
    def __init__(self, value: int, device_start_ns: int = 0, device_end_ns: int = 0) -> None:
        """A completion of these fields (tasks make their own)."""
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

_T = TypeVar("_T")

class _Awaiting(Generic[_T]):
    """An await of a ticket in progress (what `await ticket` and
    `ticket.wait_output_async()` run)."""

    def __await__(self) -> Generator[Any, None, _T]: ...
    def __iter__(self) -> _Awaiting[_T]: ...
    def __next__(self) -> Any: ...

class Ticket:
    """The handle of one submitted task: wait, poll, or await it. Consumed by the call that takes its result."""

    @property
    def consumed(self) -> bool:
        """Whether the ticket was consumed (its result taken, or released)."""
    @property
    def op(self) -> int | None:
        """The task's op code (None once consumed)."""
    @property
    def seq(self) -> int | None:
        """The task's sequence number in its ring (None once consumed)."""
    def wait(self, timeout: float | None = None) -> Completion:
        """Waits (GIL released) and returns the Completion; Timeout/Stalled keep the ticket."""
    def wait_output(self, timeout: float | None = None) -> tuple[Completion, bytes]:
        """wait for an IO task: the Completion and the bytes its handler wrote."""
    def poll(self) -> Completion | None:
        """None while the task runs; else its Completion (or its error raised), the ticket consumed."""
    def release(self) -> None:
        """Lets go of the task without its result; the ticket is consumed."""
    def wait_output_async(self) -> _Awaiting[tuple[Completion, bytes]]:
        """Awaits an IO task in a running asyncio loop: its (Completion, bytes)."""
    def __await__(self) -> Generator[Any, None, Completion]:
        """Awaits the task in a running asyncio loop (polled for up to 20 us, then resolved from pkq's completion thread)."""

class Batch:
    """The handle of a run of tasks of one op, in submission order."""

    @property
    def consumed(self) -> bool:
        """Whether the batch was consumed."""
    def wait(
        self, timeout: float | None = None, *, as_list: bool = False
    ) -> Any:
        """Waits (GIL released) for every task: their values, a NumPy uint64 array where NumPy imports (unless as_list). Raises the first failed task's TaskError (.index)."""
    def poll(self) -> int:
        """How many of its tasks are done so far; never blocks."""
    def release(self) -> None:
        """Lets go of the tasks without their results; the batch is consumed."""
    def __len__(self) -> int:
        """The number of tasks."""

class State:
    """Bytes of device memory kept between tasks of ops on state (`Runtime.state`)."""

    def read(self) -> bytes:
        """The state's bytes, copied from the device."""
    def write(self, data: bytes | Buffer) -> None:
        """Copies `data` (exactly `len(state)` bytes) into the state."""
    def __len__(self) -> int: ...

class Runtime:
    """pkq's resident kernel on one CUDA device, and its submission rings. A context manager (exit: shutdown)."""

    def __init__(
        self,
        device: int = 0,
        *,
        workers: int | None = None,
        pollers: int | None = None,
        rings: int | None = None,
        capacity: int | None = None,
        wait: _WaitName | None = None,
        stall_after: float | None = None,
        state_memory: int | None = None,
        io: tuple[int, int] | None = None,
        module: bytes | Buffer | str | os.PathLike[str] | None = None,
        kernel: str | None = None,
    ) -> None:
        """Builds the kernel on `device` and starts it (GIL released)."""
    @property
    def device(self) -> int:
        """The CUDA device index."""
    @property
    def workers(self) -> int:
        """Its kernel's worker warps."""
    @property
    def rings(self) -> int:
        """Its submission rings."""
    @property
    def capacity(self) -> int:
        """Slots per ring."""
    @property
    def wait_strategy(self) -> _WaitName:
        """How its waits wait, as they work on this machine."""
    def submit(self, op: int, args: _Args = None) -> Ticket:
        """Submits one task (waiting for room) and returns its Ticket."""
    def try_submit(self, op: int, args: _Args = None) -> Ticket:
        """submit, but raises Full when the ring has no room."""
    def submit_io(self, op: int, args: _Args, input: bytes | Buffer) -> Ticket:
        """Submits one IO task with `input` in its slot's input area (needs io=(...))."""
    def call(self, op: int, args: _Args = None) -> int:
        """Submits one task and waits for it (GIL released): its value."""
    def state(self, data: bytes | Buffer) -> State:
        """A State holding a copy of `data` in the runtime's state memory."""
    def call_on_state(self, op: int, state: State, args: _Args = None) -> int:
        """Runs one task of state op `op` on `state` and waits for it (GIL released): its value."""
    def call_on_state_io(
        self, op: int, state: State, args: _Args, input: bytes | Buffer
    ) -> tuple[int, bytes]:
        """`call_on_state` as an IO task: its value and its output."""
    def submit_batch(
        self,
        op: int,
        args: bytes | Buffer | int,
        *,
        arg_size: int = 8,
        packed: bool = False,
    ) -> Batch:
        """Submits one task per `arg_size` bytes of `args` (for arg_size=0, args is the count)."""
    def shutdown(self) -> None:
        """Drains what was submitted and stops the kernel (GIL released)."""
    def cancel(self) -> None:
        """Stops now without running what is queued (its tickets raise Cancelled)."""
    def health(self) -> None:
        """None while the kernel serves; else raises what ended it, or Stalled."""
    def __enter__(self) -> Runtime: ...
    def __exit__(self, *exc: object) -> bool: ...

class Error(Exception):
    """Base class of every pkq error."""

class NoDriver(Error):
    """The CUDA driver library could not be loaded."""

class NoDevice(Error):
    """The driver reports no usable GPU."""

class DeviceOutOfRange(Error, ValueError):
    """The device index is not below the number of devices."""

    index: int
    count: int

class UnsupportedDevice(Error):
    """The device cannot run pkq."""

    index: int
    name: str
    why: str

class PartitionUnsupported(Error):
    """SM partitions are not available."""

class NotServing(Error):
    """A device of a pool no longer serves."""

    device: int

class NoServingDevice(Error):
    """No device of a pool serves any more."""

class KernelNotBuilt(Error):
    """This build carries no kernel (compiled without nvcc)."""

class InvalidModule(Error):
    """The module given could not serve."""

class OpMismatch(Error, ValueError):
    """A task's op and argument bytes and the kernel's op table disagree."""

    op_name: str
    code: int
    why: str

class KernelMissing(Error):
    """The module has no kernel of the name given."""

    kernel: str

class InvalidConfig(Error, ValueError):
    """A setting is out of range, or the runtime lacks what a call needs."""

class PayloadTooLarge(Error, ValueError):
    """Argument or input bytes do not fit where they go."""

    len: int
    max: int

class InvalidArgument(Error, ValueError):
    """An argument is out of range."""

class UncheckedOp(Error, ValueError):
    """The op dereferences device pointers or faults the device."""

    op: int

class Full(Error):
    """try_submit found no room in the ring."""

class Closed(Error):
    """The runtime is shut down: no new tasks."""

class RingHeld(Error):
    """An exclusive producer holds the ring."""

class Timeout(Error, TimeoutError):
    """A wait ran past its timeout; the ticket keeps its task."""

class TaskError(Error):
    """The task's handler reported a failure."""

    status: int
    status_name: str
    op: int
    index: int | None

class DeviceFault(Error):
    """The kernel faulted."""

class Stalled(Error):
    """The task's worker has not polled for longer than the stall bound."""

    worker: int
    silent: float

class Cancelled(Error):
    """Runtime.cancel() stopped the kernel before the task ran."""

class KernelStopped(Error):
    """The resident kernel is no longer serving tasks."""

class KernelTimeout(Error):
    """The resident kernel did not start, or did not exit, in time."""

class CudaError(Error):
    """A CUDA driver call failed."""

class TicketConsumed(Error):
    """The ticket or batch was consumed already."""
