#!/usr/bin/env bash
# Runner of a pkq GPU bundle (made by scripts/gpu-bundle.sh): every test
# binary (pkq's and pkq-bench's, CPU and GPU tests), then the benches
# (pkq-bench's programs, in bench/) and the examples, writing results to OUT.
#
# Usage: run.sh [--tests] [--benches] [--bindings] [--variants] [--soak SECS] [--out DIR] [--sanitize TOOLS] [-- LATENCY_ARGS...]
#   --tests / --benches   run only those (default: both)
#   --bindings            only the bindings bench (one of the benches)
#   --variants            also the design sweep (pkq-bench's latency_variants)
#   --out DIR             where bench results go (default: $OUT, else ./results)
#   --soak SECS           pkq-bench's soak for SECS seconds (writes soak.json)
#   --sanitize TOOLS      run the GPU tests under compute-sanitizer, once per
#                         tool of the comma-separated list (memcheck,
#                         racecheck, synccheck, initcheck); racecheck runs
#                         the tests whose kernels use shared memory
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$PWD/results}"
run_tests=0 run_benches=0 run_bindings=0 run_variants=0 soak=0 sanitize=""
bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) run_tests=1 ;;
    --benches) run_benches=1 ;;
    --variants) run_variants=1 ;;
    --bindings) run_bindings=1 ;;
    --soak) soak="$2"; shift ;;
    --out) out="$2"; shift ;;
    --sanitize) sanitize="$2"; shift ;;
    --help|-h) sed -n '2,15p' "$0"; exit 0 ;;
    --) shift; bench_args=("$@"); break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ $run_tests = 0 ] && [ $run_benches = 0 ] && [ $run_bindings = 0 ] && [ $run_variants = 0 ] && [ "$soak" = 0 ] && [ -z "$sanitize" ]; then
  run_tests=1 run_benches=1
fi
mkdir -p "$out"
echo "pkq bundle $(head -c 12 "$here/COMMIT" 2>/dev/null) on $(hostname), $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null || true
failed=()
if [ $run_tests = 1 ]; then
  for t in "$here"/tests/*; do
    name="$(basename "$t")"
    echo "=== test binary: $name"
    # A bundle runs on a GPU host: the C API's test program fails rather than
    # skip its GPU part (the Rust GPU tests say what they skipped).
    PKQ_REQUIRE_GPU=1 PKQ_TEST_FATBIN="$here/fk.fatbin" timeout 600 "$t" || failed+=("$name")
  done
fi
# The Python package on this host's Python, beside its NumPy, CuPy and
# PyTorch (unpacked into a folder of its own; nothing downloaded): its
# tests, and the bindings bench's Python rows.
site="$(mktemp -d)/site"
if [ $run_tests = 1 ]; then
  echo "=== python tests"
  PKQ_GPU_SITE="$site" PKQ_TEST_FATBIN="$here/fk.fatbin" PKQ_TEST_KERNEL=fk_worker_kernel \
    timeout 900 bash "$here/python/run-gpu-tests.sh" "$here"/python/pkq-*.whl -rP || failed+=(python)
fi
if [ -n "$sanitize" ]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  for tool in ${sanitize//,/ }; do
    echo "=== GPU tests under compute-sanitizer --tool $tool"
    # API errors are not reported: pkq provokes some on purpose (the tests
    # of refused modules, and the check that a caller's kernel takes no
    # second parameter), and turns every other into a typed error the
    # tests check. Device memory and synchronization errors all count.
    # racecheck checks shared memory: the tests whose kernels use it (state,
    # IO rooms, wide lanes' blocks and groups, the examples' wide ops), by
    # name; the protocol tests' millions of round trips would take hours
    # under it. Not the IO tasks' tests: their pollers hand chunks to each
    # other with shared-memory atomics and block fences (IoHelp), which
    # racecheck reports as hazards (DEVELOPERS.md).
    filters=()
    if [ "$tool" = racecheck ]; then
      filters=(io_rooms state_ wide width host_buffer device_buffers_on every_block_of \
        builtin_ops custom_handler_vs fk_wide options_random)
    fi
    PKQ_UNDER_SANITIZER=1 timeout -k 10 400 "$sanitizer" --tool "$tool" --report-api-errors no \
      --error-exitcode 9 "$here/tests/gpu" "${filters[@]}" || failed+=("gpu under $tool")
  done
fi
if [ $run_benches = 1 ] || [ $run_bindings = 1 ]; then
  echo "=== bench: bindings"
  if [ ! -d "$site/pkq" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-index --target "$site" \
      "$here"/python/pkq-*.whl
  fi
  timeout 600 "$here/bench/bindings" --c "$here/bindings/round_trip_c" --cpp "$here/bindings/round_trip_cpp" \
    --python "env PYTHONPATH=$site python3 $here/python/round_trip.py" \
    --json "$out/bindings.json" --svg "$out/bindings.svg" || failed+=(bindings)
fi
if [ $run_benches = 1 ]; then
  echo "=== bench: latency"
  timeout 600 "$here/bench/latency" --json "$out/latency.json" --svg "$out/latency.svg" "${bench_args[@]}" \
    || failed+=(latency)
  echo "=== bench: gemv_crossover"
  timeout 300 "$here/bench/gemv_crossover" --json "$out/gemv_crossover.json" --svg "$out/gemv_crossover.svg" \
    || failed+=(gemv_crossover)
  echo "=== bench: width"
  timeout 300 "$here/bench/width" --json "$out/width.json" --svg "$out/width.svg" || failed+=(width)
  echo "=== bench: throughput"
  timeout 300 "$here/bench/throughput" --json "$out/throughput.json" --svg "$out/throughput.svg" \
    || failed+=(throughput)
  for w in 4 16 256; do
    echo "=== bench: throughput, $w workers"
    timeout 300 "$here/bench/throughput" --workers $w --json "$out/throughput_workers$w.json" \
      --svg "$out/throughput_workers$w.svg" || failed+=("throughput $w workers")
  done
  echo "=== bench: access_rate"
  timeout 300 "$here/bench/access_rate" --json "$out/access_rate.json" || failed+=(access_rate)
  echo "=== bench: bulk_rate"
  timeout 300 "$here/bench/bulk_rate" --json "$out/bulk_rate.json" || failed+=(bulk_rate)
  echo "=== bench: payload"
  timeout 300 "$here/bench/payload" --json "$out/payload.json" --svg "$out/payload.svg" \
    || failed+=(payload)
  echo "=== bench: custom_handler"
  timeout 300 "$here/bench/custom_handler" --json "$out/custom_handler.json" || failed+=(custom_handler)
  echo "=== bench: waiting"
  timeout 300 "$here/bench/waiting" --json "$out/waiting.json" --svg "$out/waiting.svg" \
    || failed+=(waiting)
  echo "=== bench: isolation"
  timeout 300 "$here/bench/isolation" --json "$out/isolation.json" --svg "$out/isolation.svg" \
    || failed+=(isolation)
  echo "=== bench: pool"
  timeout 300 "$here/bench/pool" --json "$out/pool.json" || failed+=(pool)
  for example in round_trip async_tasks; do
    echo "=== example: $example"
    timeout 120 "$here/examples/$example" || failed+=("$example")
  done
  for example in custom_handler_demo options_demo; do
    echo "=== example: $example"
    timeout 120 "$here/examples/$example" || failed+=("$example")
  done
fi
if [ "$soak" != 0 ]; then
  echo "=== soak: $soak s"
  timeout $((soak + 60)) "$here/bench/soak" --seconds "$soak" --json "$out/soak.json" || failed+=(soak)
fi
if [ $run_variants = 1 ]; then
  echo "=== bench: latency_variants"
  timeout 600 "$here/bench/latency_variants" --json "$out/latency_variants.json" || failed+=(latency_variants)
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all passed"
