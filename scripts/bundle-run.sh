#!/usr/bin/env bash
# Runner of a pkq GPU bundle (made by scripts/gpu-bundle.sh): every test
# binary (CPU and GPU tests), then the benches, writing results to OUT.
#
# Usage: run.sh [--tests] [--benches] [--variants] [--out DIR] [--sanitize TOOL] [-- LATENCY_ARGS...]
#   --tests / --benches   run only those (default: both)
#   --variants            also the design sweep (examples/latency_variants)
#   --out DIR             where bench results go (default: $OUT, else ./results)
#   --sanitize TOOL       run the GPU tests under compute-sanitizer --tool TOOL
#                         (memcheck, racecheck, synccheck, initcheck)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$PWD/results}"
run_tests=0 run_benches=0 run_variants=0 sanitize=""
bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) run_tests=1 ;;
    --benches) run_benches=1 ;;
    --variants) run_variants=1 ;;
    --out) out="$2"; shift ;;
    --sanitize) sanitize="$2"; shift ;;
    --help|-h) sed -n '2,13p' "$0"; exit 0 ;;
    --) shift; bench_args=("$@"); break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ $run_tests = 0 ] && [ $run_benches = 0 ] && [ $run_variants = 0 ]; then run_tests=1 run_benches=1; fi
mkdir -p "$out"
echo "pkq bundle $(head -c 12 "$here/COMMIT" 2>/dev/null) on $(hostname), $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null || true
failed=()
if [ $run_tests = 1 ]; then
  for t in "$here"/tests/*; do
    name="$(basename "$t")"
    echo "=== test binary: $name"
    if [ -n "$sanitize" ] && [ "$name" = gpu ]; then
      timeout 900 compute-sanitizer --tool "$sanitize" --error-exitcode 9 "$t" || failed+=("$name under $sanitize")
    else
      timeout 600 "$t" || failed+=("$name")
    fi
  done
fi
if [ $run_benches = 1 ]; then
  echo "=== bench: submit (host side, criterion)"
  PKQ_BENCH_JSON="$out/submit.json" CRITERION_HOME="$out/criterion" timeout 300 \
    "$here/benches/submit" --bench --warm-up-time 1 --measurement-time 3 || failed+=(submit)
  echo "=== bench: latency"
  timeout 600 "$here/examples/latency" --json "$out/latency.json" --svg "$out/latency.svg" "${bench_args[@]}" \
    || failed+=(latency)
fi
if [ $run_variants = 1 ]; then
  echo "=== bench: latency_variants"
  timeout 600 "$here/examples/latency_variants" --json "$out/latency_variants.json" || failed+=(latency_variants)
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all passed"
