// The entry for browsers, bundlers and edge runtimes: the wasm-bindgen module built for the
// web, which must be loaded once with `await init()` before the first check.
import initWasm from "./web/mandate_verify_wasm.js";
import * as native from "./web/mandate_verify_wasm.js";
import { makeApi } from "./api.js";

let ready = false;

export { CheckError, InputError } from "./api.js";
export const { Checker, check } = makeApi(native, () => ready);

/**
 * Loads the WebAssembly module: from beside this file by default, or from `wasm` (a URL,
 * a Response, the bytes, or a compiled WebAssembly.Module, as a runtime without fetch of
 * relative URLs needs).
 */
export async function init(wasm) {
  if (ready) return;
  await initWasm(wasm === undefined ? undefined : { module_or_path: wasm });
  ready = true;
}
