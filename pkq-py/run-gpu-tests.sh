#!/usr/bin/env bash
# Runs pkq's Python tests against a prebuilt wheel, on a GPU host without
# Rust: the wheel is unpacked beside the host's packages (NumPy, CuPy,
# PyTorch), nothing is downloaded, and a missing GPU fails the run
# (PKQ_REQUIRE_GPU=1) instead of skipping its tests. PKQ_GPU_SITE names the
# folder it is unpacked into (default: a new temporary one).
#
#   bash pkq-py/run-gpu-tests.sh path/to/pkq-*.whl [pytest arguments...]
#
# Needs pytest installed for the system's Python. PKQ_TEST_FATBIN and
# PKQ_TEST_KERNEL name a module of your own for the custom-module test.
set -euo pipefail

if [ $# -lt 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 WHEEL [pytest arguments...]" >&2
    exit 2
fi
wheel="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
# The wheel unpacked into a folder of its own, put first on the path of the
# host's own interpreter (which has NumPy, CuPy, PyTorch and pytest; a venv
# would not see packages installed in the user's site).
site="${PKQ_GPU_SITE:-$(mktemp -d)/site}"

"$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
    --target "$site" --upgrade "$wheel"
"$python" -c 'import pytest' || {
    echo "run-gpu-tests.sh: pytest is not installed for $python" >&2
    exit 2
}
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PKQ_REQUIRE_GPU=1
cd "$here/tests"
"$python" -m pytest -ra "$@" .
