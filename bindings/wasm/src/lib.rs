//! # mandate-verify-wasm
//!
//! mandate-core's counterparty check for JavaScript: the npm package in `package/` wraps
//! this module (built by wasm-bindgen for Node and for browsers and edge runtimes) in a
//! typed `check(token, expected, keySet, options)` that throws a `CheckError` carrying the
//! Rust refusal's code. What it takes and answers is mandate-verify-json's, as JSON text:
//! the wrapper stringifies the caller's objects and parses the answer, so no amount
//! crosses the boundary as a float.
//!
//! Nothing here reads a clock or draws a random number: `now` comes in the options (the
//! JavaScript wrapper puts the current time there when the caller leaves it out).

use mandate_verify_json::Checker as JsonChecker;
use wasm_bindgen::prelude::wasm_bindgen;

/// A verifier with its replay guard: a nonce it accepted is refused after. The JavaScript
/// wrapper keeps one per `Checker`, and one for the module-level `check`.
#[wasm_bindgen]
#[derive(Debug, Default)]
pub struct Checker {
    inner: JsonChecker,
}

#[wasm_bindgen]
impl Checker {
    /// A checker that has accepted nothing yet.
    #[wasm_bindgen(constructor)]
    pub fn new() -> Checker {
        Checker::default()
    }

    /// The whole check. Each argument is JSON text (mandate-verify-json's crate doc): the
    /// answer as JSON text, or an error whose value is the failure's JSON text, which the
    /// wrapper turns into a `CheckError` or an `InputError`.
    #[wasm_bindgen(js_name = checkJson)]
    pub fn check_json(
        &mut self,
        token: &str,
        expected: &str,
        key_set: &str,
        options: &str,
    ) -> Result<String, String> {
        self.inner
            .check(token, expected, key_set, options)
            .map(|answer| answer.to_string())
            .map_err(|failure| failure.to_json())
    }
}
