"""Shared fixtures: whether a GPU is reachable, and runtimes that are shut
down after each test.

GPU tests are marked ``gpu``. Without a GPU they are skipped with the reason
(no driver, no device, a wheel built without nvcc); with ``PKQ_REQUIRE_GPU=1``
in the environment a missing GPU fails them instead.
"""

import faulthandler
import os

import pytest

import pkq

_REASON: list[str | None] = []


def pytest_configure(config):
    """Registers the ``gpu`` mark (also where pyproject.toml is not read)."""
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU")


def gpu_missing() -> str | None:
    """Why no GPU test can run here (None: one can), found once."""
    if not _REASON:
        reason = None
        if not pkq.kernel_built():
            reason = "this wheel carries no kernel (built without nvcc)"
        else:
            try:
                if pkq.device_count() == 0:
                    reason = "the CUDA driver reports no device"
            except pkq.Error as e:
                reason = f"no GPU reachable: {type(e).__name__}: {e}"
        _REASON.append(reason)
    return _REASON[0]


def require_gpu() -> None:
    """Skips (or, with PKQ_REQUIRE_GPU=1, fails) the calling test without a GPU."""
    why = gpu_missing()
    if why is None:
        return
    if os.environ.get("PKQ_REQUIRE_GPU") == "1":
        pytest.fail(f"PKQ_REQUIRE_GPU=1 but {why}")
    pytest.skip(why)


@pytest.fixture(autouse=True)
def _gpu_gate(request):
    """Gates every test marked ``gpu`` on a reachable GPU, and bounds its
    run time: a hang dumps every thread's stack and ends the process."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    require_gpu()
    faulthandler.dump_traceback_later(180, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def rt():
    """A runtime of pkq's defaults on device 0, shut down after the test."""
    r = pkq.Runtime()
    try:
        yield r
    finally:
        r.shutdown()
