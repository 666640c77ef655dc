//! # mandate-verify-python
//!
//! mandate-core's counterparty check for Python: the extension module
//! `mandate_verify._native`, which the `mandate_verify` package (python/mandate_verify)
//! wraps in a typed `check(token, expected, key_set, options)` that raises a `CheckError`
//! carrying the Rust refusal's code. What it takes and answers is mandate-verify-json's, as
//! JSON text: the wrapper dumps the caller's dicts with `json` and loads the answer, so no
//! amount crosses the boundary as a float.
//!
//! Nothing here reads a clock or draws a random number: `now` comes in the options (the
//! Python wrapper puts the current time there when the caller leaves it out).

use mandate_verify_json::Checker as JsonChecker;
use pyo3::prelude::*;

/// A verifier with its replay guard: a nonce it accepted is refused after. The Python
/// wrapper keeps one per `Checker`, and one for the module-level `check`.
#[pyclass(module = "mandate_verify._native")]
#[derive(Debug, Default)]
struct Checker {
    inner: JsonChecker,
}

#[pymethods]
impl Checker {
    /// A checker that has accepted nothing yet.
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// The whole check. Each argument is JSON text (mandate-verify-json's crate doc):
    /// `(True, answer)` with the answer's JSON text, or `(False, failure)` with the
    /// failure's, which the wrapper raises as a `CheckError` or an `InputError`.
    fn check_json(
        &mut self,
        token: &str,
        expected: &str,
        key_set: &str,
        options: &str,
    ) -> (bool, String) {
        match self.inner.check(token, expected, key_set, options) {
            Ok(answer) => (true, answer.to_string()),
            Err(failure) => (false, failure.to_json()),
        }
    }
}

/// The extension module: the `Checker` class.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Checker>()
}
