#!/usr/bin/env bash
# Builds pkq's Python package (one abi3 wheel for CPython 3.10+) and runs its
# tests: the CPU part everywhere; the GPU part where a GPU is reachable
# (skipped with its reason otherwise; PKQ_REQUIRE_GPU=1 makes a missing GPU
# a failure). Needs only Python 3 (3.10 or later) and Rust.
#
#   bash pkq-py/run-tests.sh [pytest arguments...]
#
# The venv lives in $CARGO_TARGET_DIR/py-venv (the workspace's target/ by
# default), the wheel goes to $CARGO_TARGET_DIR/wheels; cargo's builds are
# the workspace's, so a second run rebuilds only what changed.
#
# The kernel is embedded in the wheel only where nvcc is found (NVCC,
# CUDA_HOME, ... as pkq's build script looks; PKQ_REQUIRE_KERNEL=1 makes a
# missing nvcc a build error): both are read from the environment.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
python="${PYTHON:-python3}"
venv="$CARGO_TARGET_DIR/py-venv"
wheels="$CARGO_TARGET_DIR/wheels"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"
pip_quiet=(--quiet --disable-pip-version-check)
if ! python -c 'import maturin, pytest' 2>/dev/null \
    || [ "$(python -m maturin --version 2>/dev/null)" != "maturin 1.16.0" ]; then
    python -m pip install "${pip_quiet[@]}" "maturin==1.16.0" pytest
fi
# NumPy is optional (the tests run both ways); installed where PyPI has it.
python -c 'import numpy' 2>/dev/null \
    || python -m pip install "${pip_quiet[@]}" numpy \
    || echo "run-tests.sh: numpy not installed: its tests are skipped"

mkdir -p "$wheels"
rm -f "$wheels"/pkq-*.whl
python -m maturin build --release --manifest-path "$here/Cargo.toml" --out "$wheels"
wheel="$(ls "$wheels"/pkq-*.whl)"
python -m pip install "${pip_quiet[@]}" --no-deps --force-reinstall "$wheel"
echo "run-tests.sh: testing $wheel"

# From the tests' folder, so that `import pkq` is the installed wheel, not
# the source folder.
cd "$here/tests"
python -m pytest -ra "$@" .
