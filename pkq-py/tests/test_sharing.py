"""PyTorch and CuPy beside a live runtime: allocations, frees, a kernel and
an op synchronized on their own streams, and the frees that give memory back
to the driver (which wait for every kernel of the device, the resident one
included). Each library runs in a child process with a time limit
(sharing_child.py), which prints what happened; the test asserts the runtime
answered throughout and shows the timings."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

CHILD = pathlib.Path(__file__).with_name("sharing_child.py")


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_sharing_the_gpu(lib):
    if importlib.util.find_spec(lib) is None:
        pytest.skip(f"{lib} is not importable")
    try:
        p = subprocess.run(
            [sys.executable, str(CHILD), lib], capture_output=True, text=True, timeout=150
        )
        out, err, timed_out = p.stdout, p.stderr, False
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        timed_out = True
    print(f"--- {lib} beside a live runtime ---\n{out}")
    if err.strip():
        print(f"--- stderr ---\n{err}")
    lines = out.splitlines()
    assert "runtime answers (3)" in lines, "the runtime stopped answering beside " + lib
    steps = [line for line in lines if line.startswith("STEP ")]
    if timed_out:
        # The driver-level free never returned and kept the GIL with it: the
        # child could not go on to shut the runtime down.
        assert steps and steps[-1] != "STEP done"
        print(f"{lib}: the child was stopped at {steps[-1]!r} (a free that holds the GIL while it waits)")
        return
    assert p.returncode == 0, err
    assert "runtime answers (4)" in lines
    assert steps[-1] == "STEP done"
