#!/usr/bin/env bash
# The npm and Python packages' figures in one run: verifications a second of the whole
# check against jose (Node) and PyJWT (Python) checking the ES256 signature alone, on the
# `allow` token of testdata/verify/cases.json, and the size of the wasm module (raw and
# gzip -9). Build both packages first (bindings/wasm/build.sh, bindings/python/build.sh),
# and run it on a quiet machine, never while something compiles.
#
# jose and PyJWT (with cryptography) are installed here, into bindings/.bench and a
# virtual environment bindings/.bench/venv, with the wheel of bindings/python/dist.
# Prints TSV: runtime, what, verifications_per_s; then the module's size.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=bindings/.bench
mkdir -p "$bench"
if [ ! -d "$bench/node_modules/jose" ]; then
  npm install --silent --no-audit --no-fund --prefix "$bench" "jose@6.2.18" >/dev/null
fi
if [ ! -x "$bench/venv/bin/python" ]; then
  python3 -m venv "$bench/venv"
fi
"$bench/venv/bin/pip" install --quiet --disable-pip-version-check "PyJWT[crypto]==2.10.1"
"$bench/venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
  bindings/python/dist/*.whl
cases=testdata/verify/cases.json
printf 'runtime\twhat\tverifications_per_s\n'
node bindings/bench/node.mjs bindings/wasm/package "$bench/node_modules" "$cases"
"$bench/venv/bin/python" bindings/bench/python.py "$cases"
wasm=bindings/wasm/package/node/mandate_verify_wasm_bg.wasm
printf 'wasm_bytes\t%s\nwasm_gzip_bytes\t%s\n' "$(wc -c <"$wasm")" "$(gzip -9 -c "$wasm" | wc -c)"
