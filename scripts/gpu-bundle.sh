#!/usr/bin/env bash
# Builds pkq's test, example and bench binaries (release) and gathers them,
# with a runner, into one folder, so that a GPU host with the NVIDIA driver
# but no Rust toolchain runs the whole GPU suite and the benches with one
# command:   <bundle>/run.sh            (see run.sh --help)
#
# Usage: scripts/gpu-bundle.sh [OUT_DIR]     (default: target/gpu-bundle)
# Needs nvcc here (see DEVELOPERS.md); the host needs none.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/gpu-bundle}"
# The commit the binaries name (build_info::GIT_COMMIT, in every bench's
# JSON) is worked out when pkq's build script runs, which a change to src/
# or examples/ alone does not make it do: bundle committed code only, so
# that the name is the code's (PKQ_BUNDLE_DIRTY=1 to bundle anyway).
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && [ "${PKQ_BUNDLE_DIRTY:-0}" != 1 ]; then
    echo "error: the work tree has uncommitted changes; commit them (or PKQ_BUNDLE_DIRTY=1)" >&2
    exit 1
fi
log=target/gpu-bundle-build.jsonl
mkdir -p target
cargo build --release --tests --examples --benches --message-format=json-render-diagnostics >"$log"
# What pkq's build script made for this build (its own OUT_DIR, named in the
# log: target/ may hold others, of other features or NVCC settings): the
# worker's fatbin (FATBIN) and, with the feature `bench` that the tests,
# examples and benches turn on, the measurement kernels' (BENCH_FATBIN) and
# the custom-handler example's, all built by nvcc.
python3 - "$log" <<'PY'
import json, os, sys
import re
# pkq's own build-script runs: by their output folder (cargo leaves the
# package name out of package_id when the checkout's folder is named pkq).
runs = [m for m in map(json.loads, open(sys.argv[1]))
        if m.get("reason") == "build-script-executed"
        and re.search(r"/build/pkq-[0-9a-f]+/out$", m.get("out_dir", ""))]
if not runs:
    sys.exit("error: the build log shows no run of pkq's build script")
for m in runs:
    gen = open(os.path.join(m["out_dir"], "kernel_gen.rs")).read()
    if "BENCH_FATBIN" not in gen:
        sys.exit(f"error: {m['out_dir']}: pkq was built without its feature `bench`")
    if "FATBIN: Result<&[u8], &str> = Err" in gen:
        sys.exit("error: pkq was built without its CUDA kernels (nvcc not found); see DEVELOPERS.md")
    for name in ("custom_handler", "control_loop", "risk_check"):
        fk = os.path.join(m["out_dir"], f"{name}.fatbin")
        if os.path.getsize(fk) == 0:
            sys.exit(f"error: {fk} is empty (built without nvcc); see DEVELOPERS.md")
PY
rm -rf "$out"
mkdir -p "$out/tests" "$out/examples" "$out/benches"
python3 - "$out" "$log" <<'PY'
import json, os, shutil, sys
out, log = sys.argv[1], sys.argv[2]
for line in open(log):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    kind, name = m["target"]["kind"][0], m["target"]["name"]
    if kind == "lib" and m["profile"]["test"]:
        dest = "tests/unit"
    elif kind == "test" and name == "readme":
        continue  # checks the repository's files, not the code: stays home
    elif kind == "test":
        dest = f"tests/{name}"
    elif kind == "example":
        dest = f"examples/{name}"
    elif kind == "bench":
        dest = f"benches/{name}"
    else:
        continue
    shutil.copy2(m["executable"], os.path.join(out, dest))
PY
# Debug info is most of each binary's size; the symbols stay for backtraces.
strip --strip-debug "$out"/tests/* "$out"/examples/* "$out"/benches/* 2>/dev/null || true
cp scripts/bundle-run.sh "$out/run.sh"
chmod +x "$out/run.sh"
git rev-parse HEAD >"$out/COMMIT" 2>/dev/null || echo unknown >"$out/COMMIT"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then echo "(work tree dirty)" >>"$out/COMMIT"; fi
# One archive of it as well: the binaries each embed the kernels, so it
# packs to a fraction (what a device tool with a size limit carries):
#   tar xzf <bundle>.tar.gz -C <dir> && <dir>/<bundle>/run.sh
tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
du -sh "$out" "$out.tar.gz"
find "$out" -type f | sort
