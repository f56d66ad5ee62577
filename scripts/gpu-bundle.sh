#!/usr/bin/env bash
# Builds pkq's test and example binaries and pkq-bench's bench programs and
# tests (release) and gathers them, with a runner, into one folder, so that
# a GPU host with the NVIDIA driver but no Rust toolchain runs the whole GPU
# suite and the benches with one command:   <bundle>/run.sh   (see run.sh --help)
# Layout: tests/ (pkq's: unit, api, gpu; pkq-bench's: pkq-bench-*; the C
# and C++ APIs' test programs: pkq-ffi-c-api, pkq-ffi-cpp-api), examples/
# (pkq's examples, the custom-handler demo), bench/ (pkq-bench's programs),
# bindings/ (the bindings bench's C and C++ programs), python/ (the wheel,
# its tests, their runner, the bindings bench's Python script), fk.fatbin
# (the custom-handler module, for the module parts of the C, C++ and Python
# tests).
#
# Usage: scripts/gpu-bundle.sh [OUT_DIR]     (default: target/gpu-bundle)
# Needs nvcc here (see DEVELOPERS.md); the host needs none.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/gpu-bundle}"
# The commit the binaries name (build_info::GIT_COMMIT, in every bench's
# JSON) is worked out when pkq's build script runs, which a change to src/
# or pkq-bench/ alone does not make it do: bundle committed code only, so
# that the name is the code's (PKQ_BUNDLE_DIRTY=1 to bundle anyway).
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && [ "${PKQ_BUNDLE_DIRTY:-0}" != 1 ]; then
    echo "error: the work tree has uncommitted changes; commit them (or PKQ_BUNDLE_DIRTY=1)" >&2
    exit 1
fi
log=target/gpu-bundle-build.jsonl
mkdir -p target
# pkq's tests and examples, the custom-handler demo, pkq-bench's bench
# programs and tests, and every library (pkq-ffi's static library, which the
# C and C++ programs below link: a build of named targets alone leaves it
# as it was) (pkq-build's tests check the build helper, not the GPU:
# they stay home).
cargo build --release --workspace --exclude pkq-build --lib --tests --bins --examples \
    --message-format=json-render-diagnostics >"$log"
# What the build scripts made for this build (their own OUT_DIRs, named in
# the log: target/ may hold others, of other features or NVCC settings):
# pkq's worker fatbin, pkq-bench's kernels and its programs' handlers, and
# the examples' (custom_handler, options), all built by nvcc.
python3 - "$log" <<'PY'
import json, os, re, sys
runs = [m for m in map(json.loads, open(sys.argv[1]))
        if m.get("reason") == "build-script-executed"]
def out_dirs(package):
    # By their output folder (cargo leaves the package name out of
    # package_id when the package's folder is named as the package).
    pattern = re.compile(rf"/build/{re.escape(package)}-[0-9a-f]+/out$")
    return [m["out_dir"] for m in runs if pattern.search(m.get("out_dir", ""))]
for package in ("pkq", "pkq-bench", "custom_handler", "options"):
    if not out_dirs(package):
        sys.exit(f"error: the build log shows no run of {package}'s build script")
for d in out_dirs("pkq"):
    if "FATBIN: Result<&[u8], &str> = Err" in open(os.path.join(d, "kernel_gen.rs")).read():
        sys.exit("error: pkq was built without its CUDA kernel (nvcc not found); see DEVELOPERS.md")
fatbins = [(d, f) for d in out_dirs("pkq-bench")
           for f in ("bench", "control_loop", "risk_check")]
fatbins += [(d, "fk") for d in out_dirs("custom_handler")]
fatbins += [(d, "options") for d in out_dirs("options")]
for d, name in fatbins:
    path = os.path.join(d, f"{name}.fatbin")
    if os.path.getsize(path) == 0:
        sys.exit(f"error: {path} is empty (built without nvcc); see DEVELOPERS.md")
PY
rm -rf "$out"
mkdir -p "$out/tests" "$out/examples" "$out/bench"
python3 - "$out" "$log" "$PWD" <<'PY'
import json, os, shutil, sys
out, log, root = sys.argv[1], sys.argv[2], sys.argv[3]
for line in open(log):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    kind, name = m["target"]["kind"][0], m["target"]["name"]
    package = os.path.relpath(os.path.dirname(m["manifest_path"]), root)
    test = m["profile"]["test"]
    if package == ".":  # pkq
        if kind == "lib" and test:
            dest = "tests/unit"
        elif kind == "test" and name in ("readme", "layers"):
            continue  # checks the repository's files, not the code: stays home
        elif kind == "test":
            dest = f"tests/{name}"
        elif kind == "example":
            dest = f"examples/{name}"
        else:
            continue
    elif package == "pkq-bench":
        if kind == "lib" and test:
            dest = "tests/pkq-bench-unit"
        elif kind == "test":
            dest = f"tests/pkq-bench-{name}"
        elif kind == "bin" and not test:
            dest = f"bench/{name}"
        else:
            continue
    elif package in (os.path.join("examples", "custom_handler"), os.path.join("examples", "options")):
        if kind == "bin" and not test:
            dest = f"examples/{name}"
        else:
            continue
    else:
        continue
    shutil.copy2(m["executable"], os.path.join(out, dest))
PY
# The C and C++ APIs' test programs (pkq-ffi/tests/{c,cpp}, which `cargo
# test` builds and runs here without their GPU parts), linked against the
# static library built above: on the GPU host they run every call on the
# real kernel, the module part on the custom-handler example's fatbin
# (fk.fatbin, which run.sh names in PKQ_TEST_FATBIN). The bindings bench's C
# and C++ programs beside them (bindings/).
mkdir -p "$out/bindings"
ffi=(-I pkq-ffi/include)
syslibs=(target/release/deps/libpkq_ffi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc)
cc -std=c11 -Wall -Wextra -Werror -O1 -g "${ffi[@]}" pkq-ffi/tests/c/api.c "${syslibs[@]}" -o "$out/tests/pkq-ffi-c-api"
c++ -std=c++17 -Wall -Wextra -Werror -O1 -g "${ffi[@]}" pkq-ffi/tests/cpp/api.cpp "${syslibs[@]}" -o "$out/tests/pkq-ffi-cpp-api"
cc -std=c11 -Wall -Wextra -Werror -O2 "${ffi[@]}" pkq-bench/bindings/round_trip.c "${syslibs[@]}" -o "$out/bindings/round_trip_c"
c++ -std=c++17 -Wall -Wextra -Werror -O2 "${ffi[@]}" pkq-bench/bindings/round_trip.cpp "${syslibs[@]}" -o "$out/bindings/round_trip_cpp"
python3 - "$log" "$out" <<'PY'
import json, re, shutil, sys
for m in map(json.loads, open(sys.argv[1])):
    if m.get("reason") == "build-script-executed" and re.search(r"/build/custom_handler-[0-9a-f]+/out$", m.get("out_dir", "")):
        shutil.copy2(m["out_dir"] + "/fk.fatbin", sys.argv[2] + "/fk.fatbin")
        break
else:
    sys.exit("error: no custom_handler build in the log")
PY
# The Python package: its wheel (built, with the kernel, by pkq-py's test
# script, which runs the CPU tests here), its tests and their runner for the
# GPU host, and the bindings bench's Python script.
bash pkq-py/run-tests.sh -q
mkdir -p "$out/python"
cp target/wheels/pkq-*.whl pkq-py/run-gpu-tests.sh pkq-py/bench/round_trip.py "$out/python/"
cp -r pkq-py/tests "$out/python/tests"
rm -rf "$out/python/tests/__pycache__"
# Debug info is most of each binary's size; the symbols stay for backtraces.
strip --strip-debug "$out"/tests/* "$out"/examples/* "$out"/bench/* "$out"/bindings/* 2>/dev/null || true
cp scripts/bundle-run.sh "$out/run.sh"
chmod +x "$out/run.sh"
git rev-parse HEAD >"$out/COMMIT" 2>/dev/null || echo unknown >"$out/COMMIT"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then echo "(work tree dirty)" >>"$out/COMMIT"; fi
# One archive of it as well: the binaries each embed the kernels, so it
# packs to a fraction (for a GPU host reached by a size-limited transfer):
#   tar xzf <bundle>.tar.gz -C <dir> && <dir>/<bundle>/run.sh
tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
du -sh "$out" "$out.tar.gz"
find "$out" -type f | sort
