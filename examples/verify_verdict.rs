//! A counterparty checks a Mandate verdict before it settles, with `mandate-core` alone.
//!
//! ```text
//! cargo run -p mandate-core --example verify_verdict
//! ```
//!
//! [`check`] is what a merchant runs when an agent hands it a `verdict_token`: the
//! signature against the service's JWK Set (ES256 only, the key by `kid`), the issuer, the
//! expiry, the environment of the signing key (a live key; a sandbox key only on a test
//! system), that the verdict is `allow`, that the signed amount, currency and recipient are
//! the transaction about to be settled, and that the nonce was never accepted before.
//!
//! `main` plays both sides so that the example runs without a server: it signs verdicts
//! with two example keys as the service would (one live, one sandbox), publishes them as a
//! JWK Set, and runs `check` on a good token and on bad ones, asserting each outcome. The
//! keys come from fixed bytes (the core draws no random numbers; a real service's keys come
//! from the operating system's RNG and never leave it).

use std::collections::HashSet;
use std::process::ExitCode;

use mandate_core::amount::Amount;
use mandate_core::claims::{RequestClaims, VERDICT_LIFETIME_SECS, VerdictClaims};
use mandate_core::environment::{Environment, token_kid};
use mandate_core::id::{AgentId, DecisionId, MandateId, Nonce};
use mandate_core::jwk::JwkSet;
use mandate_core::jws::{
    P256Signer, Signer, TokenError, VerifyOptions, sign_token, verify_verdict,
};
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::Verdict;

/// The service's verdicts URL: the `iss` of every token, where its JWK Set is published.
const ISSUER: &str = "https://verdicts.example.com";

/// The transaction the merchant is about to settle.
struct Transaction {
    amount: Amount,
    currency: Currency,
    recipient: Recipient,
}

/// Why a token does not authorize this transaction.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// Signature, algorithm, key, issuer, expiry or shape: the core's verdict on the token.
    #[error("invalid token: {0}")]
    Token(#[from] TokenError),
    /// Signed by a sandbox key (or a kid of no environment) where only live ones count.
    #[error("signed by {kid:?}, not a live key: a sandbox verdict authorizes no real payment")]
    NotLive {
        /// The token's kid.
        kid: String,
    },
    /// A valid token whose verdict is not `allow`.
    #[error("the verdict is {0}, not allow")]
    NotAllow(Verdict),
    /// A valid `allow` for another transaction.
    #[error("the token is for {amount} {currency} to {recipient}, not this transaction")]
    Mismatch {
        /// The signed amount.
        amount: Amount,
        /// The signed currency.
        currency: Currency,
        /// The signed recipient.
        recipient: Recipient,
    },
    /// The nonce was accepted before.
    #[error("nonce {0} was accepted before: a replay")]
    Replay(String),
}

/// Checks `token` against the published key set for `tx`, at `now` (seconds since the
/// epoch). Only live keys are accepted unless `accept_sandbox` (a test system). On success
/// the nonce is recorded in `accepted`; keep it durably, for longer than a token lives.
fn check(
    token: &str,
    jwks: &JwkSet,
    now: i64,
    tx: &Transaction,
    accept_sandbox: bool,
    accepted: &mut HashSet<String>,
) -> Result<VerdictClaims, Refusal> {
    // Signature (ES256 only, key by kid), issuer, expiry and iat.
    let options = VerifyOptions {
        issuer: ISSUER.to_owned(),
        now,
        leeway_secs: 0,
    };
    let claims = verify_verdict(token, jwks, &options)?;

    // Sandbox and live share the issuer and the key set: only the kid tells them apart.
    // The header is under the signature, so the kid of an accepted token is trustworthy.
    let kid = token_kid(token).unwrap_or_default();
    match Environment::of_kid(&kid) {
        Some(Environment::Live) => {}
        Some(Environment::Sandbox) if accept_sandbox => {}
        _ => return Err(Refusal::NotLive { kid }),
    }

    if claims.verdict != Verdict::Allow {
        return Err(Refusal::NotAllow(claims.verdict));
    }
    // Amounts compare as exact decimals: 42.5 equals 42.50.
    let signed = &claims.request;
    if signed.amount != tx.amount
        || signed.currency != tx.currency
        || signed.recipient != tx.recipient
    {
        return Err(Refusal::Mismatch {
            amount: signed.amount,
            currency: signed.currency.clone(),
            recipient: signed.recipient.clone(),
        });
    }
    if !accepted.insert(claims.nonce.to_string()) {
        return Err(Refusal::Replay(claims.nonce.to_string()));
    }
    Ok(claims)
}

/// The claims of a verdict as the service would sign them, issued at `iat`.
fn claims(verdict: Verdict, amount: &str, iat: i64, seed: u8) -> Result<VerdictClaims, String> {
    Ok(VerdictClaims {
        iss: ISSUER.to_owned(),
        // Ids and nonces are made from random bytes the service draws; fixed here.
        jti: DecisionId::from_random([seed; 16]),
        iat,
        exp: iat + VERDICT_LIFETIME_SECS,
        verdict,
        policy_verdict: verdict,
        mandate: Some(MandateId::from_random([1; 16])),
        policy_version: "pol_2026-11-01.1".to_owned(),
        nonce: Nonce::from_random([seed.wrapping_add(100); 16]),
        request: RequestClaims {
            agent: AgentId::parse("agt_buyer").map_err(|e| e.to_string())?,
            amount: Amount::parse(amount).map_err(|e| e.to_string())?,
            currency: Currency::parse("USD").map_err(|e| e.to_string())?,
            recipient: Recipient::parse("vendor:acme").map_err(|e| e.to_string())?,
            category: Category::parse("software").map_err(|e| e.to_string())?,
        },
    })
}

fn run() -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    // Example keys from fixed bytes: never use these anywhere real.
    let live = P256Signer::from_secret_bytes("live-1", &[7; 32]).map_err(|e| err(&e))?;
    let sandbox = P256Signer::from_secret_bytes("sandbox-1", &[8; 32]).map_err(|e| err(&e))?;
    // What GET {verdicts_url}/.well-known/jwks.json returns, parsed as a counterparty would.
    let published = serde_json::to_vec(&JwkSet {
        keys: vec![live.public_jwk(), sandbox.public_jwk()],
    })
    .map_err(|e| err(&e))?;
    let jwks = JwkSet::from_json(&published).map_err(|e| err(&e))?;

    // 2026-11-22T12:00:00Z; a merchant takes the time from its clock.
    let iat = 1_795_348_800;
    let now = iat + 10;
    let sign = |signer: &P256Signer, claims: &VerdictClaims| {
        sign_token(signer, claims).map_err(|e| e.to_string())
    };
    let good = sign(&live, &claims(Verdict::Allow, "42.50", iat, 2)?)?;
    let from_sandbox = sign(&sandbox, &claims(Verdict::Allow, "42.50", iat, 3)?)?;
    let denied = sign(&live, &claims(Verdict::DenyLimit, "42.50", iat, 4)?)?;
    let other = sign(&live, &claims(Verdict::Allow, "4250", iat, 5)?)?;
    // The claims of one token under the signature of another.
    let parts = |t: &str| t.split('.').map(str::to_owned).collect::<Vec<_>>();
    let (a, b) = (parts(&good), parts(&other));
    let tampered = format!("{}.{}.{}", a[0], b[1], a[2]);

    let tx = Transaction {
        amount: Amount::parse("42.5").map_err(|e| err(&e))?,
        currency: Currency::parse("USD").map_err(|e| err(&e))?,
        recipient: Recipient::parse("vendor:acme").map_err(|e| err(&e))?,
    };
    let mut accepted = HashSet::new();
    let mut test_system = HashSet::new();
    let expired_at = iat + VERDICT_LIFETIME_SECS;

    // (what, result, whether it must be accepted)
    let cases = [
        (
            "live allow, matching",
            check(&good, &jwks, now, &tx, false, &mut accepted),
            true,
        ),
        (
            "the same token again",
            check(&good, &jwks, now, &tx, false, &mut accepted),
            false,
        ),
        (
            "expired",
            check(&good, &jwks, expired_at, &tx, false, &mut HashSet::new()),
            false,
        ),
        (
            "another amount",
            check(&other, &jwks, now, &tx, false, &mut accepted),
            false,
        ),
        (
            "a denial",
            check(&denied, &jwks, now, &tx, false, &mut accepted),
            false,
        ),
        (
            "tampered",
            check(&tampered, &jwks, now, &tx, false, &mut accepted),
            false,
        ),
        (
            "sandbox, in production",
            check(&from_sandbox, &jwks, now, &tx, false, &mut accepted),
            false,
        ),
        (
            "sandbox, on a test system",
            check(&from_sandbox, &jwks, now, &tx, true, &mut test_system),
            true,
        ),
    ];
    let mut wrong = 0;
    for (what, result, expected) in cases {
        let line = match &result {
            Ok(claims) => format!(
                "accepted: {} {} to {}",
                claims.request.amount, claims.request.currency, claims.request.recipient
            ),
            Err(refusal) => format!("refused: {refusal}"),
        };
        println!("{what:<26} {line}");
        if result.is_ok() != expected {
            wrong += 1;
        }
    }
    if wrong > 0 {
        return Err(format!("{wrong} case(s) did not end as expected"));
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
