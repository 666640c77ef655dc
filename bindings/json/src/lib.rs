//! # mandate-verify-json
//!
//! The counterparty's check of mandate-core ([`Counterparty::check`]) with JSON text in and
//! out: what the npm package (bindings/wasm) and the Python package (bindings/python) call,
//! so that both take the same arguments, refuse with the same codes and answer with the
//! same object, and neither re-implements a rule.
//!
//! Why JSON text: a number that crosses from JavaScript or Python as a float is already
//! rounded, so the bindings hand over the caller's objects as the text their own JSON
//! encoder writes, amounts as decimal strings, and read the answer back the same way.
//!
//! The arguments, each a JSON object:
//!
//! - the expected transaction: `amount` (a decimal string, never a number), `currency`,
//!   `recipient`, and optionally `x402` (`{"requirements": {…}, "decimals": 6}`), `ap2`
//!   (`{"mandate": digest, "transaction": id}`) and `acp` (`{"allowance": {…}}`);
//! - the key set: the issuer's JWK Set as fetched;
//! - the options: `issuer` and `now` (unix seconds, or an RFC 3339 string), and
//!   optionally `environments` (`"live_only"`, the default, or `"live_or_sandbox"`),
//!   `leeway_secs`, `require_log` (the log keys are the key set's) and `log` (the
//!   decision's `log` member).
//!
//! The answer ([`Checker::check`]) is the verified claims (the amount a decimal string),
//! the signing key's `kid` and `environment`, and the bindings the check did not expect
//! (`unchecked`); a refusal is a [`Failure`] whose `code` is [`CheckError::code`].
//!
//! Like mandate-core, this crate does no I/O: `now` is an argument.

mod input;
mod output;

use mandate_core::{CheckError, Counterparty, JwkSet, LogKeys, MemoryReplayGuard};
use serde_json::{Value, json};

pub use input::{Expected, Options};

/// The code of a refusal of the arguments themselves (a member missing, of the wrong type,
/// or not parsable), before any check: the caller must fix the call, not the token.
pub const INVALID_INPUT: &str = "invalid_input";

/// Why [`Checker::check`] did not accept a token.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The arguments are wrong: the message names the member and what to write instead.
    Input(String),
    /// The check refused the token.
    Refused {
        /// [`CheckError::code`]: the token's flaw, or the first objection to it.
        code: &'static str,
        /// The whole refusal, in words.
        message: String,
        /// Every objection to a token whose signature held, in the check's order, as
        /// `(code, message)`; empty when the token itself was refused.
        objections: Vec<(&'static str, String)>,
        /// The verified claims, when the signature held (the issuer's, but not for this
        /// transaction).
        claims: Option<Value>,
    },
}

impl Failure {
    /// The failure's code: [`INVALID_INPUT`], or the refusal's.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Input(_) => INVALID_INPUT,
            Self::Refused { code, .. } => code,
        }
    }

    /// The failure as the bindings hand it over: `{"kind": "input" | "refused", "code",
    /// "message", "objections": [{"code", "message"}], "claims"}`.
    pub fn to_json(&self) -> String {
        let value = match self {
            Self::Input(message) => json!({
                "kind": "input", "code": INVALID_INPUT, "message": message,
                "objections": [], "claims": null,
            }),
            Self::Refused {
                code,
                message,
                objections,
                claims,
            } => json!({
                "kind": "refused", "code": code, "message": message,
                "objections": objections
                    .iter()
                    .map(|(code, message)| json!({"code": code, "message": message}))
                    .collect::<Vec<_>>(),
                "claims": claims,
            }),
        };
        value.to_string()
    }

    fn from_check(error: CheckError) -> Self {
        let code = error.code();
        let message = error.to_string();
        match error {
            CheckError::Refused { claims, objections } => Self::Refused {
                code,
                message,
                objections: objections
                    .iter()
                    .map(|o| (o.code(), o.to_string()))
                    .collect(),
                claims: Some(output::claims(&claims)),
            },
            _ => Self::Refused {
                code,
                message,
                objections: Vec::new(),
                claims: None,
            },
        }
    }
}

/// A counterparty's verifier with its replay guard: a nonce it accepted once is refused
/// after (`replay`), for as long as its token could still be accepted. Keep one for the
/// life of the process (the guard is in its memory).
#[derive(Debug, Default)]
pub struct Checker {
    guard: MemoryReplayGuard,
}

impl Checker {
    /// A checker that has accepted nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The whole check of `token` (see the crate doc for the arguments): the answer as a
    /// JSON object, or why not.
    pub fn check(
        &mut self,
        token: &str,
        expected: &str,
        key_set: &str,
        options: &str,
    ) -> Result<Value, Failure> {
        let expected = Expected::from_json(expected).map_err(Failure::Input)?;
        let options = Options::from_json(options).map_err(Failure::Input)?;
        let jwks = JwkSet::from_json(key_set.as_bytes()).map_err(|e| {
            Failure::Input(format!(
                "key set: {e}; pass the issuer's JWK Set as fetched from /.well-known/jwks.json"
            ))
        })?;
        let mut counterparty = Counterparty::new(options.issuer.clone())
            .environments(options.environments)
            .leeway_secs(options.leeway_secs);
        if options.require_log {
            let keys = LogKeys::from_jwks_json(key_set.as_bytes())
                .map_err(|e| Failure::Input(format!("key set, its log keys: {e}")))?;
            counterparty = counterparty.require_log(keys);
        }
        let transaction = expected.transaction();
        let checked = match &options.log {
            Some(entry) => counterparty.check_logged(
                token,
                entry,
                &jwks,
                &transaction,
                &mut self.guard,
                options.now,
            ),
            None => counterparty.check(token, &jwks, &transaction, &mut self.guard, options.now),
        };
        checked
            .map(|verified| output::verified(&verified))
            .map_err(Failure::from_check)
    }
}
