//! The protocols' objects as third-party libraries make them, read by the core:
//!
//! - AP2 mandates issued with the IETF SD-JWT reference implementation (PyPI `sd-jwt`) and
//!   jwcrypto, as AP2's SDK signs them (`testdata/ap2/third_party.py`): the committed
//!   fixtures (`testdata/ap2/third_party.json`, one high-S and one low-S issuer signature),
//!   and fresh ones made by the script on every run. Each digest is the one the script
//!   computes (AP2's `issuer_jwt_hash`); a high-S token and its low-S twin are one consent.
//! - ACP allowances: `acp_allowance` is the SHA-256 of the JSON the `rfc8785` package
//!   (an independent RFC 8785 implementation) writes.
//! - x402 `upto`: requirements and a signed `PaymentPayload` made by the x402 Python SDK's
//!   own `upto` server and client schemes, read and bound by the core.
//!
//! The Python is `MANDATE_THIRD_PARTY_PYTHON` (default `python3`) with `sd-jwt`,
//! `jwcrypto`, `rfc8785` and `x402[evm]`. Without them a test says it skipped, unless
//! `MANDATE_REQUIRE_THIRD_PARTY=1` (CI, which installs them): then it fails.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::path::PathBuf;
use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::{
    Allowance, Amount, Currency, JwkSet, OpenMandate, PaymentRequirements, Recipient,
    verify_closed_mandate, verify_open_mandate,
};
use p256::ecdsa::Signature;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

const FIXTURES: &str = include_str!("../../testdata/ap2/third_party.json");

fn script() -> PathBuf {
    PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../testdata/ap2/third_party.py")
}

/// Says a skip on stderr itself: `eprintln!` in a test is captured, and shown only when the
/// test fails.
fn skipped(what: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {what}");
}

fn required() -> bool {
    std::env::var("MANDATE_REQUIRE_THIRD_PARTY").as_deref() == Ok("1")
}

/// What `python <args>` printed (JSON), or `None` when the libraries are not installed.
fn python(library: &str, args: &[&str]) -> Option<Value> {
    let python =
        std::env::var("MANDATE_THIRD_PARTY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let out = match Command::new(&python).args(args).output() {
        Ok(out) => out,
        Err(e) if !required() => {
            skipped(&format!("{library} (cannot run: {e})"));
            return None;
        }
        Err(e) => panic!("{library}: {python}: {e}"),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named") && !required() {
        skipped(&format!(
            "{library} (not installed; MANDATE_REQUIRE_THIRD_PARTY=1 fails instead): {}",
            stderr.trim()
        ));
        return None;
    }
    assert!(out.status.success(), "{library}: {stderr}");
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn hash(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

fn issuers(fixtures: &Value) -> JwkSet {
    JwkSet::from_json(fixtures["issuer_jwks"].to_string().as_bytes()).unwrap()
}

/// The issuer JWT of `token` with the other ECDSA twin of its signature, `(r, n - s)`.
fn twin(token: &str) -> String {
    let (jwt, rest) = token.split_once('~').unwrap();
    let (input, signature) = jwt.rsplit_once('.').unwrap();
    let signature = Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).unwrap()).unwrap();
    let (r, s) = signature.split_scalars();
    let other = Signature::from_scalars(r, -s).unwrap();
    format!(
        "{input}.{}~{rest}",
        URL_SAFE_NO_PAD.encode(other.to_bytes())
    )
}

/// One issued mandate checked: its digest is the script's `issuer_jwt_hash` (high-S or
/// low-S), its closed mandate verifies with the digest as `open_digest`.
fn check_issued(one: &Value, issuers: &JwkSet, now: OffsetDateTime) -> OpenMandate {
    let token = one["open_mandate"].as_str().unwrap();
    let open = verify_open_mandate(token, issuers, now).unwrap();
    assert_eq!(open.digest(), one["issuer_jwt_hash"].as_str().unwrap());
    assert_eq!(open.digest(), hash(token.split('~').next().unwrap()));
    let low_s = !one["high_s"].as_bool().unwrap();
    assert_eq!(
        open.digest() == mandate_protocol::ap2::consent_key(&open),
        low_s,
        "{one}"
    );
    assert_eq!(
        open.terms()["recipients"],
        json!({"allow": ["vendor:s-1", "vendor:m-2"]})
    );
    let closed = verify_closed_mandate(one["presentation"].as_str().unwrap(), &open, now).unwrap();
    assert_eq!(closed.open_digest, open.digest());
    assert_eq!(closed.amount.to_string(), "12.34");
    open
}

#[test]
fn committed_fixtures_high_s_and_low_s_have_their_issuers_digest() {
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let now = OffsetDateTime::from_unix_timestamp(fixtures["now"].as_i64().unwrap()).unwrap();
    let issuers = issuers(&fixtures);
    assert_eq!(fixtures["high_s"]["high_s"], true);
    assert_eq!(fixtures["low_s"]["high_s"], false);
    for name in ["high_s", "low_s"] {
        let one = &fixtures[name];
        let open = check_issued(one, &issuers, now);
        // The other twin: another digest (its own bytes'), the same consent and so the
        // same single-use credential for the same transaction.
        let token = one["open_mandate"].as_str().unwrap();
        let other = verify_open_mandate(&twin(token), &issuers, now).unwrap();
        assert_ne!(other.digest(), open.digest());
        assert_eq!(other.digest(), hash(twin(token).split('~').next().unwrap()));
        assert_eq!(
            mandate_protocol::ap2::consent_key(&other),
            mandate_protocol::ap2::consent_key(&open)
        );
        let presentation = one["presentation"].as_str().unwrap();
        let closed = verify_closed_mandate(presentation, &open, now).unwrap();
        let under_twin = verify_closed_mandate(presentation, &other, now).unwrap();
        assert_eq!(
            mandate_protocol::ap2::credential_id(&under_twin),
            mandate_protocol::ap2::credential_id(&closed)
        );
    }
}

#[test]
fn fresh_sd_jwt_mandates_have_their_issuers_digest_high_s_or_low_s() {
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let issuers = issuers(&fixtures);
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let script = script();
    let Some(issued) = python(
        "sd-jwt and jwcrypto",
        &[script.to_str().unwrap(), "issue", "24", &now.to_string()],
    ) else {
        return;
    };
    let now = OffsetDateTime::from_unix_timestamp(now).unwrap();
    let mut high = 0;
    for one in issued.as_array().unwrap() {
        check_issued(one, &issuers, now);
        high += usize::from(one["high_s"].as_bool().unwrap());
    }
    // jwcrypto signs high-S about half the time: both kinds were seen (all 24 alike has a
    // chance of 2^-23).
    assert!(high > 0 && high < 24, "{high} of 24 high-S");
}

const RFC8785: &str = r#"
import base64, hashlib, json, sys, rfc8785
out = []
for allowance in json.loads(sys.argv[1]):
    canonical = rfc8785.dumps(allowance)
    out.append({"canonical": canonical.decode("utf-8"),
                "digest": base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()})
print(json.dumps(out))
"#;

#[test]
fn the_acp_allowance_digest_is_rfc8785s() {
    let allowances = json!([
        {"reason": "one_time", "max_amount": 2000, "currency": "usd",
         "checkout_session_id": "csn_01HV3P3XYZ9ABC", "merchant_id": "acme_store",
         "expires_at": "2025-10-09T07:20:50.52Z"},
        // Member order, escapes, characters outside ASCII and the largest amount.
        {"expires_at": "2026-02-15T18:30:00+01:00", "merchant_id": "m.1-x_Y",
         "checkout_session_id": "csn \"quoted\" \\ / é € 😀 \u{1} \u{1f} \u{7f} \n\t",
         "currency": "JPY", "max_amount": 9_007_199_254_740_991u64, "reason": "one_time"},
        {"reason": "one_time", "max_amount": 0, "currency": "kwd",
         "checkout_session_id": "c", "merchant_id": "m", "expires_at": "2026-01-01T00:00:00Z"}
    ]);
    let ours: Vec<Allowance> = allowances
        .as_array()
        .unwrap()
        .iter()
        .map(|a| Allowance::from_json(a, "acp.allowance").unwrap())
        .collect();
    let Some(theirs) = python("rfc8785", &["-c", RFC8785, &allowances.to_string()]) else {
        return;
    };
    for (ours, theirs) in ours.iter().zip(theirs.as_array().unwrap()) {
        assert_eq!(
            mandate_protocol::acp::canonical_json(ours),
            theirs["canonical"].as_str().unwrap()
        );
        assert_eq!(
            mandate_protocol::acp::digest(ours),
            theirs["digest"].as_str().unwrap()
        );
    }
}

const X402_UPTO: &str = r#"
import json
from eth_account import Account
from x402.schemas import PaymentRequirements, SupportedKind
from x402.mechanisms.evm.upto import UptoEvmClientScheme, UptoEvmServerScheme

network = "eip155:84532"
server = UptoEvmServerScheme()
price = server.parse_price("$0.05", network)
requirements = PaymentRequirements(
    scheme="upto", network=network, asset=price.asset, amount=price.amount,
    pay_to="0x209693Bc6afc0C5328bA36FaF03C514EF312287C", max_timeout_seconds=300,
    extra=price.extra)
kind = SupportedKind(x402_version=2, scheme="upto", network=network,
                     extra={"facilitatorAddress": "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"})
requirements = server.enhance_payment_requirements(requirements, kind, [])
account = Account.from_key("0x" + "11" * 32)
payload = UptoEvmClientScheme(account).create_payment_payload(requirements)
wire = requirements.model_dump(by_alias=True, mode="json")
print(json.dumps({"requirements": wire,
                  "payment_payload": {"x402Version": 2, "accepted": wire, "payload": payload}}))
"#;

#[test]
fn x402_upto_requirements_of_the_sdk_are_read_and_bound_on_their_maximum() {
    let Some(made) = python("x402[evm]", &["-c", X402_UPTO]) else {
        return;
    };
    let requirements = PaymentRequirements::from_json(&made["requirements"], "x402").unwrap();
    let from_payload = PaymentRequirements::from_json(&made["payment_payload"], "x402").unwrap();
    assert_eq!(requirements, from_payload);
    assert!(mandate_protocol::x402::is_upto(&requirements));
    assert!(!mandate_protocol::x402::is_fiat(&requirements));
    // $0.05 at USDC's 6 decimals: the maximum the client signs.
    assert_eq!(requirements.amount, "50000");
    assert_eq!(
        made["payment_payload"]["payload"]["permit2Authorization"]["permitted"]["amount"],
        "50000"
    );
    let usd = Currency::parse("USD").unwrap();
    let pay_to = Recipient::parse("vendor:0x209693Bc6afc0C5328bA36FaF03C514EF312287C").unwrap();
    let maximum = Amount::parse("0.05").unwrap();
    assert_eq!(
        mandate_protocol::x402::consistency(&requirements, maximum, &usd, &pay_to, Some(6)),
        vec![]
    );
    assert_eq!(
        mandate_protocol::x402::consistency(
            &requirements,
            Amount::parse("0.04").unwrap(),
            &usd,
            &pay_to,
            Some(6)
        )
        .len(),
        1
    );
    // The digest is of the five members as the SDK wrote them.
    let wire = &made["requirements"];
    let canonical = format!(
        r#"{{"amount":{},"asset":{},"network":{},"payTo":{},"scheme":"upto"}}"#,
        wire["amount"], wire["asset"], wire["network"], wire["payTo"]
    );
    assert_eq!(
        mandate_protocol::x402::digest(&requirements),
        hash(&canonical)
    );
}
