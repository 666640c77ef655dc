#!/usr/bin/env bash
# The npm and Python packages of the counterparty check (bindings/), as a user meets them:
# built (bindings/wasm/build.sh, bindings/python/build.sh), their tests run in the checkout,
# then the packed tarball installed with npm and the wheel installed with pip into fresh
# folders, and the tests run again against those installed copies (the docs' examples among
# them). Every tool is installed from its registry: wasm-bindgen-cli from crates.io (by
# .ci/run, in the background, waited for there), maturin and pytest from PyPI into
# .ci/venv, Node and npm from Debian, TypeScript from npm. A missing tool fails, never
# skips.
# The Rust side of the shared cases (mandate-core/tests/verify_cases.rs and
# mandate-server/tests/verify_cases) runs in .ci/run's test step.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq nodejs npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; }
fi
node --version
if [ ! -x .ci/venv/bin/python ]; then
  python3 -m venv .ci/venv
fi
.ci/venv/bin/pip install --quiet --disable-pip-version-check "maturin==1.16.0" "pytest==9.2.0"
rustup target add wasm32-unknown-unknown

bash bindings/wasm/build.sh
MATURIN=.ci/venv/bin/maturin bash bindings/python/build.sh

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

echo "-- npm package: its tests in the checkout, then installed from the packed tarball"
(cd bindings/wasm/package && node --test test/)
(cd bindings/wasm/package && npm pack --silent --pack-destination "$scratch" >/dev/null)
mkdir "$scratch/npm"
(cd "$scratch/npm" && npm init -y >/dev/null &&
  npm install --silent --no-audit --no-fund "$scratch"/mandate-verify-*.tgz)
(cd bindings/wasm/package &&
  MANDATE_VERIFY_PACKAGE="$scratch/npm/node_modules/mandate-verify" node --test test/)
# The TypeScript example of docs/embedding.md type-checks, strictly, against the installed
# package's index.d.ts (TypeScript from npm).
awk '/^## Verifying in TypeScript or JavaScript$/ {under = 1} under && /^```ts$/ {inside = 1; next}
     inside && /^```$/ {exit} inside' docs/embedding.md >"$scratch/npm/example.mts"
test -s "$scratch/npm/example.mts"
(cd "$scratch/npm" && npm install --silent --no-audit --no-fund "typescript@5.9.3" "@types/node@20" &&
  npx tsc --module nodenext --moduleResolution nodenext --target es2022 --strict --noEmit \
    --types node example.mts)

echo "-- Python package: installed from the wheel into a fresh virtual environment"
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install --quiet --disable-pip-version-check \
  bindings/python/dist/*.whl "pytest==9.2.0"
# Run from the scratch folder, so that `import mandate_verify` is the installed wheel.
(cd "$scratch" && "$scratch/venv/bin/python" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests")
