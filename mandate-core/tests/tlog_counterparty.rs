//! A counterparty that requires proof that a verdict is in the issuer's log: the token, its
//! `log` entry and the log keys of the issuer's JWK Set, checked with the rest in one call.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use mandate_core::{
    AgentId, Amount, AuthorizationRequest, CheckError, Counterparty, DecisionId,
    ExpectedTransaction, Issuance, JwkSet, LogEntry, LogError, LogKeys, Mandate, MandateDraft,
    MandateId, MandateStatus, MemoryReplayGuard, Mode, Nonce, Objection, P256Signer, Signer,
    VerdictClaims, evaluate, sign_token,
};
use mandate_protocol::tlog::LogHash;
use mandate_protocol::{tlog::LogKey, tlog::ProofPlan, tlog::TreeEdge, tlog::sign_checkpoint};
use time::OffsetDateTime;

const ISSUER: &str = "https://verdicts.example.com";
const ORIGIN: &str = "verdicts.example.com/log/org_4Fq2/live";

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_795_348_800).unwrap()
}

fn verdict_key() -> P256Signer {
    P256Signer::from_secret_bytes("live-1", &[7; 32]).unwrap()
}

fn log_key() -> P256Signer {
    P256Signer::from_secret_bytes("log-1", &[9; 32]).unwrap()
}

/// An `allow` for 42.50 USD to vendor:acme, with nonce `n`.
fn token(n: u8) -> String {
    let body = serde_json::from_str(
        r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "currency": "USD"},
            "categories": ["software"], "expires": "2026-12-31"}"#,
    )
    .unwrap();
    let mandate = Mandate {
        id: MandateId::from_random([1; 16]),
        terms: MandateDraft::from_json(&body).unwrap(),
        status: MandateStatus::Active,
        created_at: now(),
    };
    let request = AuthorizationRequest::from_json(
        AgentId::parse("agt_buyer").unwrap(),
        &serde_json::from_str(
            r#"{"amount": 42.50, "currency": "USD", "recipient": "vendor:acme",
            "category": "software"}"#,
        )
        .unwrap(),
    )
    .unwrap();
    let evaluation = evaluate(
        Some(&mandate),
        &request,
        &Default::default(),
        Mode::Enforce,
        now(),
    );
    let issuance = Issuance {
        issuer: ISSUER.to_owned(),
        jti: DecisionId::from_random([n; 16]),
        nonce: Nonce::from_random([n; 16]),
        policy_version: "pol_2026-11-01.1".to_owned(),
        issued_at: now(),
    };
    let claims = VerdictClaims::new(request, &evaluation, Some(mandate.id), issuance);
    sign_token(&verdict_key(), &claims).unwrap()
}

/// The service's JWK Set: the verdict key and the log key.
fn jwks_json() -> Vec<u8> {
    serde_json::json!({ "keys": [verdict_key().public_jwk(), LogKey::of_signer(&log_key())] })
        .to_string()
        .into_bytes()
}

/// A log of these tokens; the entry of token `index` against a checkpoint signed by
/// `signer`.
fn entry(tokens: &[String], index: u64, signer: &P256Signer) -> LogEntry {
    let mut edge = TreeEdge::new();
    let mut stored = std::collections::HashMap::new();
    for token in tokens {
        stored.extend(
            edge.push(mandate_protocol::tlog::leaf_hash(token.as_bytes()))
                .unwrap(),
        );
    }
    let checkpoint = mandate_protocol::tlog::checkpoint(ORIGIN, edge.size(), edge.root()).unwrap();
    let plan = ProofPlan::inclusion(index, edge.size()).unwrap();
    let hashes: Vec<LogHash> = plan.nodes().iter().map(|id| stored[id]).collect();
    mandate_protocol::tlog::log_entry(
        index,
        sign_checkpoint(&checkpoint, signer).unwrap(),
        plan.assemble(&hashes).unwrap(),
    )
}

fn expected() -> ExpectedTransaction {
    ExpectedTransaction::new(
        Amount::parse("42.50").unwrap(),
        "USD".parse().unwrap(),
        "vendor:acme".parse().unwrap(),
    )
}

fn counterparty() -> Counterparty {
    Counterparty::new(ISSUER).require_log(LogKeys::from_jwks_json(&jwks_json()).unwrap())
}

fn objections(result: Result<impl std::fmt::Debug, CheckError>) -> Vec<Objection> {
    match result {
        Err(CheckError::Refused { objections, .. }) => objections,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_logged_verdict_passes_and_names_its_log() {
    let tokens: Vec<String> = (1..=5).map(token).collect();
    let jwks = JwkSet::from_json(&jwks_json()).unwrap();
    let entry = entry(&tokens, 3, &log_key());
    // The entry travels as the decision's `log` member.
    let entry: LogEntry = serde_json::from_value(serde_json::to_value(&entry).unwrap()).unwrap();
    let verified = counterparty()
        .check_logged(
            &tokens[3],
            &entry,
            &jwks,
            &expected(),
            &mut MemoryReplayGuard::default(),
            now(),
        )
        .unwrap();
    let checkpoint = verified.log.unwrap();
    assert_eq!((checkpoint.origin(), checkpoint.size()), (ORIGIN, 5));
}

#[test]
fn a_required_log_refuses_a_verdict_without_proof_and_burns_no_nonce() {
    let tokens: Vec<String> = (1..=5).map(token).collect();
    let jwks = JwkSet::from_json(&jwks_json()).unwrap();
    let mut guard = MemoryReplayGuard::default();
    let found = objections(counterparty().check(&tokens[0], &jwks, &expected(), &mut guard, now()));
    assert_eq!(found, [Objection::NotLogged]);
    // Another token's entry: the proof does not lead from this token to the root.
    let found = objections(counterparty().check_logged(
        &tokens[0],
        &entry(&tokens, 1, &log_key()),
        &jwks,
        &expected(),
        &mut guard,
        now(),
    ));
    assert!(
        matches!(
            &found[..],
            [Objection::Log(LogError::NotIncluded {
                index: 1,
                size: 5,
                ..
            })]
        ),
        "{found:?}"
    );
    // A checkpoint signed by the verdict key, not the log key: no known signature.
    let found = objections(counterparty().check_logged(
        &tokens[0],
        &entry(&tokens, 0, &verdict_key()),
        &jwks,
        &expected(),
        &mut guard,
        now(),
    ));
    assert!(
        matches!(&found[..], [Objection::Log(LogError::Checkpoint(_))]),
        "{found:?}"
    );
    assert!(guard.is_empty(), "a refused token burns no nonce");
    // The same token with its own entry then passes.
    let entry = entry(&tokens, 0, &log_key());
    assert!(
        counterparty()
            .check_logged(&tokens[0], &entry, &jwks, &expected(), &mut guard, now())
            .is_ok()
    );
}

#[test]
fn without_a_required_log_check_is_unchanged_and_an_entry_needs_keys() {
    let tokens: Vec<String> = (1..=2).map(token).collect();
    let jwks = JwkSet::from_json(&jwks_json()).unwrap();
    let plain = Counterparty::new(ISSUER);
    let verified = plain
        .check(
            &tokens[0],
            &jwks,
            &expected(),
            &mut MemoryReplayGuard::default(),
            now(),
        )
        .unwrap();
    assert_eq!(verified.log, None);
    // An entry checked with no log key known is refused, not taken on trust.
    let found = objections(plain.check_logged(
        &tokens[1],
        &entry(&tokens, 1, &log_key()),
        &jwks,
        &expected(),
        &mut MemoryReplayGuard::default(),
        now(),
    ));
    assert!(
        matches!(&found[..], [Objection::Log(LogError::Checkpoint(_))]),
        "{found:?}"
    );
    assert!(
        found[0]
            .to_string()
            .starts_with("the verdict is not proven to be in the log")
    );
}
