#!/usr/bin/env bash
# Builds the npm package in bindings/wasm/package: mandate-verify-wasm compiled to
# WebAssembly, bound by wasm-bindgen once for Node (node/, CommonJS, loaded at import) and
# once for browsers, bundlers and edge runtimes (web/, an ES module loaded by init()), and
# the licence. `npm pack` in that folder then makes the tarball that would be published.
#
# Needs the wasm32-unknown-unknown target (rustup target add) and wasm-bindgen-cli of
# exactly the wasm-bindgen version in Cargo.lock (cargo install wasm-bindgen-cli --version
# V), found on PATH or as $WASM_BINDGEN.
set -euo pipefail
cd "$(dirname "$0")/../.."
pkg=bindings/wasm/package
target="${CARGO_TARGET_DIR:-$PWD/target}"
bindgen="${WASM_BINDGEN:-wasm-bindgen}"

# The package's version is the workspace's.
workspace_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
package_version=$(node -p 'require("./'"$pkg"'/package.json").version')
if [ "$workspace_version" != "$package_version" ]; then
  echo "$pkg/package.json has version $package_version, the workspace $workspace_version: write $workspace_version there" >&2
  exit 1
fi

# The CLI must be the library's exact version, or the glue it writes does not fit.
locked=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"$/\1/p')
if ! command -v "$bindgen" >/dev/null 2>&1; then
  echo "wasm-bindgen is not installed: cargo install wasm-bindgen-cli --version $locked (or set WASM_BINDGEN)" >&2
  exit 1
fi
found=$("$bindgen" --version | awk '{print $2}')
if [ "$found" != "$locked" ]; then
  echo "wasm-bindgen $found is installed, Cargo.lock has $locked: cargo install wasm-bindgen-cli --version $locked --force" >&2
  exit 1
fi

# Small and fast: one codegen unit with LTO, no debug info (the workspace's release
# profile keeps line tables for the server's profiles), panics abort (a panic in the check
# is a bug either way, and unwinding code would only grow the module).
CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_LTO=true CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
  CARGO_PROFILE_RELEASE_PANIC=abort \
  cargo build --locked --release -p mandate-verify-wasm --target wasm32-unknown-unknown
wasm="$target/wasm32-unknown-unknown/release/mandate_verify_wasm.wasm"

rm -rf "$pkg/node" "$pkg/web"
"$bindgen" --target nodejs --no-typescript --out-dir "$pkg/node" "$wasm"
"$bindgen" --target web --no-typescript --out-dir "$pkg/web" "$wasm"
# node/ is CommonJS and web/ an ES module, whatever the package's own "type".
echo '{"type": "commonjs"}' >"$pkg/node/package.json"
echo '{"type": "module"}' >"$pkg/web/package.json"
cp mandate-core/LICENSE "$pkg/LICENSE"
echo "built $pkg: $(wc -c <"$pkg/node/mandate_verify_wasm_bg.wasm") bytes of wasm"
