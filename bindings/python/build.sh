#!/usr/bin/env bash
# Builds the Python package's wheel into bindings/python/dist: mandate-verify-python as an
# abi3 extension module (one wheel for every CPython from 3.9 on) under the typed wrapper
# in python/mandate_verify, with the licence and the README. Needs maturin (pip install
# maturin), found on PATH or as $MATURIN.
set -euo pipefail
cd "$(dirname "$0")/../.."
maturin="${MATURIN:-maturin}"
if ! command -v "$maturin" >/dev/null 2>&1; then
  echo "maturin is not installed: pip install maturin (or set MATURIN)" >&2
  exit 1
fi
cp mandate-core/LICENSE bindings/python/LICENSE
rm -rf bindings/python/dist
# As the npm package's module: no debug info, one codegen unit with LTO.
CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_LTO=true CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
  "$maturin" build --release --locked --manifest-path bindings/python/Cargo.toml \
  --out bindings/python/dist
ls bindings/python/dist
