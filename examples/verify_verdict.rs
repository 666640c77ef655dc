//! A counterparty checks a Mandate verdict before it settles, with `mandate-core` alone.
//!
//! ```text
//! cargo run -p mandate-core --example verify_verdict
//! ```
//!
//! [`check`] is what a merchant runs when an agent hands it a `verdict_token`, one call of
//! the core's `Counterparty::check`: the signature against the service's JWK Set (ES256
//! only, the key by `kid`), the issuer, the expiry, the environment of the signing key (a
//! live key; a sandbox key only on a test system), that the verdict is `allow`, that the
//! signed amount, currency and recipient are the transaction about to be settled, and
//! that the nonce was never accepted before.
//!
//! `main` plays both sides so that the example runs without a server: it signs verdicts
//! with two example keys as the service would (one live, one sandbox), publishes them as a
//! JWK Set, and runs `check` on a good token and on bad ones, asserting each outcome. The
//! keys come from fixed bytes (the core draws no random numbers; a real service's keys come
//! from the operating system's RNG and never leave it).

use std::process::ExitCode;

use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, CheckError, Counterparty, Currency,
    DecisionId, EnvironmentPolicy, ExpectedTransaction, JwkSet, MandateId, MemoryReplayGuard,
    Nonce, P256Signer, Recipient, Signer, VERDICT_LIFETIME_SECS, Verdict, VerdictClaims,
    VerifiedVerdict, sign_token,
};
use time::OffsetDateTime;

/// The service's verdicts URL: the `iss` of every token, where its JWK Set is published.
const ISSUER: &str = "https://verdicts.example.com";

/// Checks `token` against the published key set for `tx`, at `now`: the whole procedure
/// is one call of the core. Only live keys are accepted unless `accept_sandbox` (a test
/// system). On success the nonce is recorded in `accepted`; a real merchant keeps it
/// durably (its own `ReplayGuard`), for longer than a token lives.
fn check(
    token: &str,
    jwks: &JwkSet,
    now: OffsetDateTime,
    tx: &ExpectedTransaction,
    accept_sandbox: bool,
    accepted: &mut MemoryReplayGuard,
) -> Result<VerifiedVerdict, CheckError> {
    let environments = if accept_sandbox {
        EnvironmentPolicy::LiveOrSandbox
    } else {
        EnvironmentPolicy::LiveOnly
    };
    Counterparty::new(ISSUER)
        .environments(environments)
        .check(token, jwks, tx, accepted, now)
}

/// The claims of a verdict as the service would sign them, issued at `iat`.
fn claims(verdict: Verdict, amount: &str, iat: i64, seed: u8) -> Result<VerdictClaims, String> {
    Ok(VerdictClaims {
        bindings: mandate_core::Bindings::default(),
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
        request: AuthorizationRequest {
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
    let at = |secs: i64| OffsetDateTime::from_unix_timestamp(secs).map_err(|e| err(&e));
    let now = at(iat + 10)?;
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

    let tx = ExpectedTransaction::new(
        Amount::parse("42.5").map_err(|e| err(&e))?,
        Currency::parse("USD").map_err(|e| err(&e))?,
        Recipient::parse("vendor:acme").map_err(|e| err(&e))?,
    );
    let mut accepted = MemoryReplayGuard::default();
    let mut test_system = MemoryReplayGuard::default();
    let expired_at = at(iat + VERDICT_LIFETIME_SECS)?;

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
            check(
                &good,
                &jwks,
                expired_at,
                &tx,
                false,
                &mut MemoryReplayGuard::default(),
            ),
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
            Ok(verified) => format!(
                "accepted: {} {} to {}",
                verified.claims.request.amount,
                verified.claims.request.currency,
                verified.claims.request.recipient
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
