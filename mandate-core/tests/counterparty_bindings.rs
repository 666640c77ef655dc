//! `Counterparty::check` with the bindings of issue #36: an x402 payment, an AP2 open
//! mandate's digest and a closed mandate's transaction id. A binding expected and absent
//! or different is refused with `Objection::Binding`; an x402 payment that is not the
//! transaction with `Objection::X402`; a binding not expected is reported, not refused.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use mandate_core::{
    Amount, AuthorizationRequest, Bindings, CheckError, Counterparty, Currency, DecisionId,
    ExpectedTransaction, Inconsistency, JwkSet, MandateId, MemoryReplayGuard, Nonce, Objection,
    P256Signer, PaymentRequirements, Signer as _, Verdict, VerdictClaims, sign_token,
};
use serde_json::json;
use time::OffsetDateTime;

const ISS: &str = "https://verdicts.example.com";
const IAT: i64 = 1_795_348_800;
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

fn requirements(amount: &str) -> PaymentRequirements {
    let value = json!({
        "scheme": "exact", "network": "eip155:8453", "amount": amount,
        "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "payTo": PAY_TO,
        "maxTimeoutSeconds": 60
    });
    PaymentRequirements::from_json(&value, "x402").unwrap()
}

fn signer() -> P256Signer {
    P256Signer::from_secret_bytes("live-1", &[7; 32]).unwrap()
}

fn token(bindings: Bindings, nonce: &str) -> String {
    let claims = VerdictClaims {
        iss: ISS.into(),
        jti: DecisionId::parse("dec_aaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap(),
        iat: IAT,
        exp: IAT + 300,
        verdict: Verdict::Allow,
        policy_verdict: Verdict::Allow,
        mandate: Some(MandateId::parse("mnd_bbbbbbbbbbbbbbbbbbbbbbbbbb").unwrap()),
        policy_version: "pol_2026-11-01.1".into(),
        nonce: Nonce::parse(nonce).unwrap(),
        request: AuthorizationRequest {
            agent: "agt_buyer".parse().unwrap(),
            amount: Amount::parse("1.50").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            recipient: format!("vendor:{PAY_TO}").parse().unwrap(),
            category: "software".parse().unwrap(),
        },
        bindings: mandate_core::Bindings::default(),
    }
    .with_bindings(bindings);
    sign_token(&signer(), &claims).unwrap()
}

fn all_bound() -> Bindings {
    Bindings {
        ap2_mandate: Some("open-digest".into()),
        ap2_transaction: Some("tx-42".into()),
        x402_payment: Some(mandate_protocol::x402::digest(&requirements("1500000"))),
        ..Bindings::default()
    }
}

fn transaction() -> ExpectedTransaction {
    ExpectedTransaction::new(
        Amount::parse("1.5").unwrap(),
        Currency::parse("USD").unwrap(),
        format!("vendor:{PAY_TO}").parse().unwrap(),
    )
}

fn check(token: &str, expected: &ExpectedTransaction) -> Result<Bindings, Vec<Objection>> {
    let jwks = JwkSet {
        keys: vec![signer().public_jwk()],
    };
    let now = OffsetDateTime::from_unix_timestamp(IAT + 10).unwrap();
    let mut guard = MemoryReplayGuard::default();
    match Counterparty::new(ISS).check(token, &jwks, expected, &mut guard, now) {
        Ok(verified) => Ok(verified.unchecked),
        Err(CheckError::Refused { objections, .. }) => Err(objections),
        Err(other) => panic!("{other}"),
    }
}

#[test]
fn every_binding_expected_and_signed_passes_and_nothing_is_left_unchecked() {
    let expected = transaction()
        .with_x402(requirements("1500000"), Some(6))
        .with_ap2_mandate("open-digest")
        .with_ap2_transaction("tx-42");
    assert_eq!(
        check(&token(all_bound(), "n_1"), &expected),
        Ok(Bindings::default())
    );
    // Without the decimals the atomic amount is bound by the digest alone.
    let expected = transaction().with_x402(requirements("1500000"), None);
    let unchecked = check(&token(all_bound(), "n_2"), &expected).unwrap();
    assert_eq!(unchecked.x402_payment, None);
    assert_eq!(unchecked.ap2_mandate.as_deref(), Some("open-digest"));
}

#[test]
fn a_binding_expected_but_absent_or_different_is_refused() {
    let expected = transaction()
        .with_x402(requirements("1500000"), Some(6))
        .with_ap2_mandate("open-digest")
        .with_ap2_transaction("tx-42");
    // Bound to nothing.
    let objections = check(&token(Bindings::default(), "n_1"), &expected).unwrap_err();
    let claims: Vec<_> = objections
        .iter()
        .map(|o| match o {
            Objection::Binding {
                claim,
                signed: None,
                ..
            } => *claim,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(claims, ["ap2_mandate", "ap2_transaction", "x402_payment"]);
    assert!(objections[2].to_string().contains("no x402_payment claim"));
    // Bound to another payment (another amount in atomic units), mandate and transaction.
    let other = Bindings {
        ap2_mandate: Some("another".into()),
        ap2_transaction: Some("tx-43".into()),
        x402_payment: Some(mandate_protocol::x402::digest(&requirements("1500001"))),
        ..Bindings::default()
    };
    let objections = check(&token(other, "n_2"), &expected).unwrap_err();
    assert_eq!(objections.len(), 3, "{objections:?}");
    assert!(objections.iter().all(|o| matches!(
        o,
        Objection::Binding {
            signed: Some(_),
            ..
        }
    )));
}

#[test]
fn an_x402_payment_that_is_not_the_transaction_is_refused_even_when_signed() {
    // The token is bound to this payment, but the payment pays 2 USDC, not 1.50.
    let two = requirements("2000000");
    let bound = Bindings {
        x402_payment: Some(mandate_protocol::x402::digest(&two)),
        ..Bindings::default()
    };
    let objections = check(
        &token(bound.clone(), "n_1"),
        &transaction().with_x402(two.clone(), Some(6)),
    )
    .unwrap_err();
    assert!(matches!(
        objections.as_slice(),
        [Objection::X402(Inconsistency::Amount { decimals: 6, .. })]
    ));
    // Paying someone other than the recipient.
    let mut elsewhere = requirements("1500000");
    elsewhere.pay_to = "0x1111111111111111111111111111111111111111".into();
    let bound = Bindings {
        x402_payment: Some(mandate_protocol::x402::digest(&elsewhere)),
        ..Bindings::default()
    };
    let objections = check(
        &token(bound, "n_2"),
        &transaction().with_x402(elsewhere, Some(6)),
    )
    .unwrap_err();
    assert!(matches!(
        objections.as_slice(),
        [Objection::X402(Inconsistency::PayTo { .. })]
    ));
}

#[test]
fn a_binding_not_expected_is_reported_not_refused() {
    let unchecked = check(&token(all_bound(), "n_1"), &transaction()).unwrap();
    assert_eq!(unchecked, all_bound());
    let unchecked = check(
        &token(all_bound(), "n_2"),
        &transaction().with_ap2_mandate("open-digest"),
    )
    .unwrap();
    assert_eq!(unchecked.ap2_mandate, None);
    assert_eq!(unchecked.ap2_transaction.as_deref(), Some("tx-42"));
}

/// x402 `upto`: the verdict was decided on the maximum the client signed (1.50 USDC); the
/// facilitator settles what was used, at most that, and checks the verdict against the
/// signed requirements.
#[test]
fn an_upto_payment_settles_at_most_the_signed_maximum() {
    let mut signed = requirements("1500000");
    signed.scheme = "upto".into();
    let bound = Bindings {
        x402_payment: Some(mandate_protocol::x402::digest(&signed)),
        ..Bindings::default()
    };
    let settle = |amount: &str, nonce: &str| {
        let expected = ExpectedTransaction::new(
            Amount::parse(amount).unwrap(),
            Currency::parse("USD").unwrap(),
            format!("vendor:{PAY_TO}").parse().unwrap(),
        )
        .with_x402(signed.clone(), Some(6));
        check(&token(bound.clone(), nonce), &expected)
    };
    assert_eq!(settle("1.50", "n_1"), Ok(Bindings::default()));
    assert_eq!(settle("0.37", "n_2"), Ok(Bindings::default()));
    assert_eq!(settle("0", "n_3"), Ok(Bindings::default()));
    let above = settle("1.51", "n_4").unwrap_err();
    assert!(
        matches!(above.as_slice(), [Objection::AboveMaximum { .. }]),
        "{above:?}"
    );
    assert!(
        above[0]
            .to_string()
            .contains("above the signed maximum 1.50")
    );
    // The same requirements with scheme exact are another payment (another digest), and
    // exact settles exactly.
    let mut exact = signed.clone();
    exact.scheme = "exact".into();
    let expected = ExpectedTransaction::new(
        Amount::parse("0.37").unwrap(),
        Currency::parse("USD").unwrap(),
        format!("vendor:{PAY_TO}").parse().unwrap(),
    )
    .with_x402(exact, Some(6));
    let objections = check(&token(bound, "n_5"), &expected).unwrap_err();
    assert!(
        objections
            .iter()
            .any(|o| matches!(o, Objection::Amount { .. })),
        "{objections:?}"
    );
    assert!(
        objections.iter().any(|o| matches!(
            o,
            Objection::Binding {
                claim: "x402_payment",
                ..
            }
        )),
        "{objections:?}"
    );
}

/// An ACP allowance: the verdict carries its digest and checkout session, and the PSP
/// charges at most its maximum, in its currency, to its merchant, before it expires.
#[test]
fn an_acp_allowance_is_checked_by_digest_session_and_limits() {
    use mandate_core::Allowance;
    let allowance = |max: u64| {
        Allowance::from_json(
            &json!({"reason": "one_time", "max_amount": max, "currency": "usd",
                    "checkout_session_id": "csn_1", "merchant_id": "acme",
                    "expires_at": "2026-11-22T12:05:00Z"}),
            "acp.allowance",
        )
        .unwrap()
    };
    let granted = allowance(150);
    let claims = Bindings {
        acp_allowance: Some(mandate_protocol::acp::digest(&granted)),
        acp_checkout_session: Some("csn_1".into()),
        ..Bindings::default()
    };
    let acme = |amount: &str| {
        ExpectedTransaction::new(
            Amount::parse(amount).unwrap(),
            Currency::parse("USD").unwrap(),
            "vendor:acme".parse().unwrap(),
        )
    };
    // The token signs 1.50 to the x402 address; an ACP token signs vendor:acme.
    let acme_token = |bindings: Bindings, nonce: &str| {
        let jwks_signer = signer();
        let claims = VerdictClaims {
            iss: ISS.into(),
            jti: DecisionId::parse("dec_aaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap(),
            iat: IAT,
            exp: IAT + 300,
            verdict: Verdict::Allow,
            policy_verdict: Verdict::Allow,
            mandate: None,
            policy_version: "pol_2026-11-01.1".into(),
            nonce: Nonce::parse(nonce).unwrap(),
            request: AuthorizationRequest {
                agent: "agt_buyer".parse().unwrap(),
                amount: Amount::parse("1.50").unwrap(),
                currency: Currency::parse("USD").unwrap(),
                recipient: "vendor:acme".parse().unwrap(),
                category: "shopping".parse().unwrap(),
            },
            bindings: mandate_core::Bindings::default(),
        }
        .with_bindings(bindings);
        sign_token(&jwks_signer, &claims).unwrap()
    };
    let ok = check(
        &acme_token(claims.clone(), "n_1"),
        &acme("1.20").with_acp(granted.clone()),
    );
    assert_eq!(ok, Ok(Bindings::default()));
    // Not expected: reported, not refused.
    let unchecked = check(&acme_token(claims.clone(), "n_2"), &acme("1.50")).unwrap();
    assert_eq!(unchecked, claims);
    // Another allowance (another maximum), a charge above the maximum.
    let objections = check(
        &acme_token(claims.clone(), "n_3"),
        &acme("1.60").with_acp(allowance(160)),
    )
    .unwrap_err();
    let kinds: Vec<String> = objections
        .iter()
        .map(|o| match o {
            Objection::Binding { claim, .. } => (*claim).to_owned(),
            Objection::AboveMaximum { .. } => "above".to_owned(),
            Objection::Acp(m) => format!("acp {}", m.member()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["above", "acp_allowance"]);
    let objections = check(
        &acme_token(claims.clone(), "n_4"),
        &acme("1.51").with_acp(allowance(151)),
    )
    .unwrap_err();
    assert!(
        objections
            .iter()
            .any(|o| matches!(o, Objection::AboveMaximum { .. })),
        "{objections:?}"
    );
    // A token without the claims.
    let objections = check(
        &acme_token(Bindings::default(), "n_5"),
        &acme("1.50").with_acp(granted),
    )
    .unwrap_err();
    assert_eq!(objections.len(), 2, "{objections:?}");
}
