// Node's entry: the wasm-bindgen module built for Node (CommonJS, loaded synchronously from
// the package's files), ready at import.
import { createRequire } from "node:module";
import { makeApi } from "./api.js";

const native = createRequire(import.meta.url)("./node/mandate_verify_wasm.js");

export { CheckError, InputError } from "./api.js";
export const { Checker, check } = makeApi(native, () => true);

/** Nothing to load in Node: the module is ready at import. For code shared with browsers. */
export async function init() {}
