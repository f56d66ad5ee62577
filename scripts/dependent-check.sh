#!/usr/bin/env bash
# pkq as a dependent gets it: the packaged crate (`cargo package -p pkq`)
# holds the library, its kernel's sources, the README, the licenses and the
# single-file examples, nothing else; and a crate of its own that depends on
# the unpacked packages of pkq and pkq-build (published beside it), with no
# path into this repository, builds and runs the README's usage example.
#
# Usage: scripts/dependent-check.sh [OUT_DIR]   (default: target/dependent)
# The example's binary is left at OUT_DIR/target/release/readme-example; on
# a machine without a GPU it runs and reports pkq's typed error (NoDriver or
# NoDevice), which counts as a pass here and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
out="${1:-target/dependent}"

# What the package ships.
list=$(cargo package --list -p pkq --allow-dirty 2>/dev/null)
bad=$(printf '%s\n' "$list" | grep -Ev '^(Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|\.cargo_vcs_info\.json|build\.rs|README\.md|LICENSE-MIT|LICENSE-APACHE|src/.*|cuda/.*|examples/[^/]+\.rs)$' || true)
if [ -n "$bad" ]; then
  echo "cargo package -p pkq ships files it should not:" >&2
  printf '%s\n' "$bad" >&2
  exit 1
fi
echo "cargo package -p pkq ships $(printf '%s\n' "$list" | wc -l) files: the library, cuda/, README, licenses, examples"

# The packages, unpacked (pkq-build packaged beside pkq, which needs it).
cargo package -p pkq-build -p pkq --allow-dirty --no-verify 2>&1 | grep -v '^warning: ignoring' >&2
version() { sed -n 's/^version = "\(.*\)"$/\1/p' "$1" | head -1; }
unpacked="$repo/target/dependent-packages"
rm -rf "$unpacked" && mkdir -p "$unpacked"
pkg="$unpacked/pkq-$(version Cargo.toml)"
build="$unpacked/pkq-build-$(version pkq-build/Cargo.toml)"
for crate in "$pkg" "$build"; do
  tar xzf "$repo/target/package/$(basename "$crate").crate" -C "$unpacked"
  [ -d "$crate" ] || { echo "no unpacked package at $crate" >&2; exit 1; }
done

# A dependent crate: the README's first Rust block (its usage example) as
# its main.
rm -rf "$out"
mkdir -p "$out/src"
cat >"$out/Cargo.toml" <<EOF
[package]
name = "readme-example"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
pkq = { path = "$pkg" }

[patch.crates-io]
pkq-build = { path = "$build" }

[workspace]
EOF
awk '/^## Usage/{u=1} u && /^```rust/{c=1; next} c && /^```/{exit} c' README.md >"$out/src/main.rs"
[ -s "$out/src/main.rs" ] || { echo "no usage example found in README.md" >&2; exit 1; }
(cd "$out" && CARGO_TARGET_DIR="$PWD/target" cargo build --release --quiet)
bin="$out/target/release/readme-example"
set +e
"$bin" >"$out/run.log" 2>&1
rc=$?
set -e
cat "$out/run.log"
if [ $rc -eq 0 ]; then
  echo "the README example ran against the packaged pkq"
elif grep -Eq 'NoDriver|NoDevice|no CUDA driver|no CUDA device' "$out/run.log"; then
  echo "the README example built against the packaged pkq and ran to pkq's typed error: no GPU here (it runs whole on a GPU machine)"
else
  echo "the README example failed (exit $rc)" >&2
  exit 1
fi
