"""What runs without a GPU: the module, its constants, argument
conversion and validation, the exception classes, and the stubs."""

import ast
import inspect
import math
import pathlib
import struct
import subprocess
import sys
import textwrap

import pytest

import pkq
from conftest import gpu_missing

STUB = pathlib.Path(pkq.__file__).with_name("_pkq.pyi")

ERRORS = [
    "NoDriver", "NoDevice", "DeviceOutOfRange", "UnsupportedDevice",
    "PartitionUnsupported", "NotServing", "NoServingDevice", "KernelNotBuilt",
    "InvalidModule", "OpMismatch", "KernelMissing", "InvalidConfig",
    "PayloadTooLarge", "InvalidArgument", "UncheckedOp", "Full", "Closed",
    "RingHeld", "Timeout", "TaskError", "DeviceFault", "Stalled", "Cancelled",
    "KernelStopped", "KernelTimeout", "CudaError", "TicketConsumed",
]


def test_imports_and_version():
    assert isinstance(pkq.__version__, str) and pkq.__version__
    assert pkq._pkq.__name__ == "pkq._pkq"
    assert isinstance(pkq.kernel_built(), bool)


def test_op_constants():
    ops = [pkq.NOP, pkq.ECHO, pkq.SPIN, pkq.COPY_IO]
    assert all(isinstance(o, int) for o in ops)
    assert len(set(ops)) == len(ops)
    assert all(0 <= o < pkq.FIRST_USER_OP for o in ops)
    assert pkq.ARGS_BYTES > 8 and pkq.ARGS_BYTES % 8 == 0
    assert pkq.SPIN_MAX_NS > 0


def test_task_args_conversion():
    assert pkq.task_args() == b""
    assert pkq.task_args(None) == b""
    assert pkq.task_args(b"abc") == b"abc"
    assert pkq.task_args(0x0102) == struct.pack("<Q", 0x0102)
    assert pkq.task_args(2**64 - 1) == b"\xff" * 8
    assert pkq.task_args(-1) == b"\xff" * 8
    assert pkq.task_args(-(2**63)) == struct.pack("<q", -(2**63))
    assert pkq.task_args(bytearray(b"xy")) == b"xy"
    assert pkq.task_args(memoryview(b"0123456789")[2:5]) == b"234"
    words = struct.pack("<3Q", 1, 2, 3)
    assert pkq.task_args(memoryview(words).cast("Q")) == words


def test_task_args_numpy():
    np = pytest.importorskip("numpy")
    a = np.arange(6, dtype=np.uint64)
    assert pkq.task_args(a) == a.tobytes()
    # A strided view: its elements in order, as bytes(...) gives them.
    assert pkq.task_args(a[::2]) == a[::2].tobytes()
    # NumPy scalars and 0-d arrays: their dtype's bytes (never bytes(n),
    # which would be n zero bytes).
    assert pkq.task_args(np.uint64(3)) == struct.pack("<Q", 3)
    assert pkq.task_args(np.int64(-2)) == struct.pack("<q", -2)
    assert pkq.task_args(np.uint32(7)) == struct.pack("<I", 7)
    assert pkq.task_args(np.array(5, dtype="u8")) == struct.pack("<Q", 5)
    assert pkq.task_args(np.float64(1.5)) == struct.pack("<d", 1.5)


def test_too_many_arg_bytes_is_pkqs_error():
    with pytest.raises(pkq.PayloadTooLarge) as e:
        pkq.task_args(b"\0" * (pkq.ARGS_BYTES + 1))
    assert e.value.len == pkq.ARGS_BYTES + 1
    assert e.value.max == pkq.ARGS_BYTES
    assert isinstance(e.value, pkq.Error) and isinstance(e.value, ValueError)
    assert pkq.task_args(b"\0" * pkq.ARGS_BYTES) == b"\0" * pkq.ARGS_BYTES


@pytest.mark.parametrize("bad", ["text", 2**64, -(2**63) - 1, 1.5, object()])
def test_task_args_refuses_what_is_no_bytes(bad):
    with pytest.raises(pkq.InvalidArgument):
        pkq.task_args(bad)


def test_bad_wait_string():
    with pytest.raises(pkq.InvalidConfig, match="spin_then_yield"):
        pkq.Runtime(wait="sometimes")


def test_module_without_kernel_and_kernel_without_module():
    with pytest.raises(pkq.InvalidConfig, match="kernel"):
        pkq.Runtime(module=b"\0" * 16)
    with pytest.raises(pkq.InvalidConfig, match="module"):
        pkq.Runtime(kernel="k")


def test_bad_settings():
    with pytest.raises(pkq.InvalidConfig):
        pkq.Runtime(stall_after=-1.0)
    with pytest.raises(pkq.InvalidConfig):
        pkq.Runtime(stall_after=0.0)
    # Under the 10 ms floor: the message names the setting given.
    with pytest.raises(pkq.InvalidConfig, match="stall_after"):
        pkq.Runtime(stall_after=0.0005)
    with pytest.raises(pkq.InvalidConfig):
        pkq.Runtime(stall_after=float("nan"))
    with pytest.raises(pkq.InvalidConfig, match="state_memory"):
        pkq.Runtime(state_memory=2**64 - 1)
    with pytest.raises((TypeError, ValueError)):
        pkq.Runtime(io=(1,))
    with pytest.raises(OverflowError):
        pkq.Runtime(device=-1)
    with pytest.raises(FileNotFoundError):
        pkq.Runtime(module="/nonexistent/pkq-test.fatbin", kernel="k")


def test_runtime_without_gpu_raises_the_right_error():
    if gpu_missing() is None:
        pytest.skip("a GPU is reachable here: the runtime builds")
    with pytest.raises(pkq.Error) as e:
        pkq.Runtime()
    # No stall bound, and no state memory: settings, not errors.
    for settings in ({"stall_after": math.inf}, {"stall_after": 1e300}, {"state_memory": 0}):
        with pytest.raises(pkq.Error) as other:
            pkq.Runtime(**settings)
        assert type(other.value) is type(e.value), (settings, other.value)
    if pkq.kernel_built():
        assert isinstance(e.value, (pkq.NoDriver, pkq.NoDevice)), e.value
    else:
        assert isinstance(e.value, pkq.KernelNotBuilt), e.value
    assert str(e.value)


def test_device_count_without_gpu():
    if gpu_missing() is None:
        assert pkq.device_count() >= 1
        return
    try:
        n = pkq.device_count()
    except (pkq.NoDriver, pkq.NoDevice):
        return
    assert n >= 0


def test_exception_hierarchy():
    assert issubclass(pkq.Error, Exception)
    for name in ERRORS:
        cls = getattr(pkq, name)
        assert issubclass(cls, pkq.Error), name
        assert cls.__module__ == "pkq", name
        assert cls.__doc__, name
        e = cls("message")
        assert str(e) == "message"
    assert issubclass(pkq.Timeout, TimeoutError)
    for name in ["InvalidConfig", "InvalidArgument", "PayloadTooLarge", "OpMismatch"]:
        assert issubclass(getattr(pkq, name), ValueError), name
    assert not issubclass(pkq.Closed, ValueError)
    # One class per name: no two share one.
    assert len({getattr(pkq, n) for n in ERRORS}) == len(ERRORS)


def test_completion():
    c = pkq.Completion(7, 10, 25)
    assert (c.value, c.device_start_ns, c.device_end_ns) == (7, 10, 25)
    assert c.device_time_ns == 15
    assert c == pkq.Completion(7, 10, 25) and c != pkq.Completion(8, 10, 25)
    assert hash(c) == hash(pkq.Completion(7, 10, 25))
    assert "value=7" in repr(c)
    with pytest.raises(AttributeError):
        c.value = 3


def test_classes_cannot_be_made_without_a_runtime():
    with pytest.raises(TypeError):
        pkq.Ticket()
    with pytest.raises(TypeError):
        pkq.Batch()


def _stub_tree():
    return ast.parse(STUB.read_text())


def _public(name):
    return not name.startswith("_") or name in {"__version__"}


def test_stub_names_exist_at_run_time():
    tree = _stub_tree()
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    for name in names:
        if name.startswith("_") and name not in {"__version__", "_shutdown_all", "_resolve"}:
            continue  # the stub's own type aliases
        assert hasattr(pkq._pkq, name), f"{name} is in the stub, not in the module"
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(pkq._pkq, node.name)
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name not in {"__eq__", "__hash__"}:
                assert hasattr(cls, item.name), f"{node.name}.{item.name} is in the stub only"


def test_module_names_are_in_the_stub():
    tree = _stub_tree()
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stubbed.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed.add(node.target.id)
    runtime_names = {n for n in dir(pkq._pkq) if not n.startswith("__") or n == "__version__"}
    missing = runtime_names - stubbed
    assert not missing, f"in the module, not in the stub: {sorted(missing)}"
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name in ["Runtime", "Ticket", "Batch", "Completion"]:
        members = {
            i.name for i in classes[name].body if isinstance(i, ast.FunctionDef)
        }
        cls = getattr(pkq, name)
        public = {m for m in vars(cls) if not m.startswith("_")}
        assert public <= members, f"{name}: not in the stub: {sorted(public - members)}"


def test_every_public_name_is_exported_and_documented():
    assert set(pkq.__all__) <= set(dir(pkq))
    for name in pkq.__all__:
        obj = getattr(pkq, name)
        if inspect.isclass(obj) or callable(obj):
            assert obj.__doc__, f"{name} has no docstring"
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for m, v in vars(obj).items():
                if m.startswith("_") and m not in {"__await__", "__enter__", "__exit__", "__len__"}:
                    continue
                assert getattr(v, "__doc__", None), f"{name}.{m} has no docstring"
    assert (pathlib.Path(pkq.__file__).parent / "py.typed").exists()


def test_a_daemon_thread_in_a_call_as_the_interpreter_exits_does_not_crash_it():
    # The call releases the GIL; it returns while the interpreter finalizes
    # and must not take the process down as it asks for the GIL again.
    # Sixteen threads in calls, many exits: a thread whose call returned
    # just before the exit began waits for the GIL as finalization begins.
    script = textwrap.dedent("""
        import threading, time, pkq
        def poll():
            while True:
                try:
                    pkq.device_count()
                except pkq.Error:
                    pass
        for _ in range(16):
            threading.Thread(target=poll, daemon=True).start()
        time.sleep(0.02)
    """)
    for _ in range(40):
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
        assert run.returncode == 0, run.stderr.decode(errors="replace")


@pytest.mark.parametrize("wait", ["t.join()", "lock.acquire()"])
def test_an_atexit_function_run_after_pkqs_may_wait_for_a_thread_in_a_call(wait):
    # pkq imported in the thread: pkq's atexit function is registered
    # after this one, so it runs first. The worker's call in flight, or
    # its next one, must return and let the join (or the lock) through.
    script = textwrap.dedent(f"""
        import atexit, threading, time
        stop = threading.Event()
        lock = threading.Lock()
        def work():
            import pkq
            while not stop.is_set():
                with lock:
                    try:
                        pkq.device_count()
                    except pkq.Error:
                        pass
        t = threading.Thread(target=work, daemon=True)
        atexit.register(lambda: (stop.set(), {wait}))
        t.start()
        time.sleep(0.1)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode(errors="replace")


def test_the_exit_function_called_on_another_thread_leaves_later_calls_and_the_exit_free():
    script = textwrap.dedent("""
        import threading, pkq
        t = threading.Thread(target=pkq._pkq._shutdown_all)
        t.start(); t.join()
        u = threading.Thread(target=pkq.device_count)
        u.start(); u.join(30)
        assert not u.is_alive(), "a later call of another thread hangs"
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode(errors="replace")
