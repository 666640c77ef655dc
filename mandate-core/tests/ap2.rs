//! AP2 mandates: the tokens AP2's own Python SDK issued (`testdata/ap2/vectors.json`, made
//! by `testdata/ap2/generate.py`) read and mapped exactly, and hostile SD-JWTs each refused
//! with the error that names what is wrong.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::{
    Ap2Error, Jwk, JwkSet, MandateDraft, OpenMandate, P256Signer, Signer, verify_closed_mandate,
    verify_open_mandate,
};
use mandate_protocol::{ap2::LEEWAY_SECS, ap2::minor_unit_exponent, ap2::read_stored_open_mandate};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

const VECTORS: &str = include_str!("../../testdata/ap2/vectors.json");

struct Vectors {
    v: Value,
}

impl Vectors {
    fn load() -> Self {
        Self {
            v: serde_json::from_str(VECTORS).unwrap(),
        }
    }
    fn s(&self, name: &str) -> &str {
        self.v[name].as_str().unwrap()
    }
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(self.v["now"].as_i64().unwrap()).unwrap()
    }
    fn issuers(&self) -> JwkSet {
        JwkSet::from_json(self.v["issuer_jwks"].to_string().as_bytes()).unwrap()
    }
    fn signer(&self, name: &str, kid: &str) -> P256Signer {
        let hex = self.s(name);
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        P256Signer::from_secret_bytes(kid, &bytes).unwrap()
    }
    fn issuer(&self) -> P256Signer {
        self.signer("issuer_d", "issuer-key-1")
    }
    fn agent(&self) -> P256Signer {
        self.signer("agent_d", "agent-key-1")
    }
    fn open(&self) -> OpenMandate {
        verify_open_mandate(self.s("open_full"), &self.issuers(), self.now()).unwrap()
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn hash(text: &str) -> String {
    b64(&Sha256::digest(text.as_bytes()))
}

/// A compact JWS of `header` and `payload` signed by `signer`.
fn jwt(signer: &dyn Signer, header: &Value, payload: &Value) -> String {
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(payload.to_string().as_bytes())
    );
    let signature = signer.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", b64(&signature))
}

fn disclosure(salt: &str, parts: &[Value]) -> String {
    let mut array = vec![json!(salt)];
    array.extend(parts.iter().cloned());
    b64(Value::Array(array).to_string().as_bytes())
}

/// An SD-JWT shaped as AP2's SDK issues one: the mandate is the one disclosed element of
/// `delegate_payload`.
fn issue(signer: &dyn Signer, header: Value, mandate: Value, extra: &[String]) -> String {
    let item = disclosure("salt-mandate", &[mandate]);
    let payload = json!({"delegate_payload": [{"...": hash(&item)}], "_sd_alg": "sha-256"});
    let mut token = format!("{}~{item}~", jwt(signer, &header, &payload));
    for d in extra {
        token.push_str(d);
        token.push('~');
    }
    token
}

fn open_mandate(v: &Vectors, overrides: &[(&str, Value)]) -> Value {
    let mut mandate = json!({
        "vct": "mandate.payment.open.1",
        "constraints": [{"type": "payment.amount_range", "currency": "USD", "max": 5000}],
        "cnf": {"jwk": v.v["agent_jwk"].clone()},
        "iat": v.now().unix_timestamp() - 600,
        "exp": v.now().unix_timestamp() + 30 * 86_400,
    });
    for (name, value) in overrides {
        mandate[*name] = value.clone();
    }
    mandate
}

fn es256(kid: &str) -> Value {
    json!({"alg": "ES256", "kid": kid})
}

/// A closed mandate hop signed by `holder`, bound to `open_text` (ending in `~`).
fn closed_hop(
    holder: &dyn Signer,
    open_text: &str,
    tx: &str,
    nonce: &str,
    binding: Value,
) -> String {
    closed_hop_with(holder, open_text, tx, nonce, binding, "pi-1")
}

fn closed_hop_with(
    holder: &dyn Signer,
    open_text: &str,
    tx: &str,
    nonce: &str,
    binding: Value,
    instrument: &str,
) -> String {
    let mandate = json!({
        "vct": "mandate.payment.1",
        "transaction_id": tx,
        "payee": {"id": "s-1", "name": "Shop"},
        "payment_amount": {"amount": 1234, "currency": "USD"},
        "payment_instrument": {"id": instrument, "type": "credit"},
        "pisp": {"legal_name": "PayCo Ltd", "brand_name": "PayCo", "domain_name": "payco.example"},
    });
    let item = disclosure("salt-closed", &[mandate]);
    let mut payload = json!({
        "delegate_payload": [{"...": hash(&item)}],
        "iat": 1_795_557_000,
        "aud": "merchant",
        "nonce": nonce,
        "_sd_alg": "sha-256",
    });
    match binding {
        Value::Null => payload["sd_hash"] = json!(hash(open_text)),
        other => {
            for (k, val) in other.as_object().unwrap() {
                payload[k] = val.clone();
            }
        }
    }
    let header = json!({"alg": "ES256", "typ": "kb+sd-jwt", "kid": holder.kid()});
    format!("{}~{item}~", jwt(holder, &header, &payload))
}

/// The issuer JWT with its signature in low-S form.
fn low_s(jwt: &str) -> String {
    let (input, sig) = jwt.rsplit_once('.').unwrap();
    let signature =
        p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(sig).unwrap()).unwrap();
    format!("{input}.{}", b64(&signature.normalize_s().to_bytes()))
}

fn chain(open_text: &str, closed: &str) -> String {
    format!("{}~~{closed}", open_text.strip_suffix('~').unwrap())
}

#[test]
fn the_sdk_vectors_map_exactly() {
    let v = Vectors::load();
    let open = v.open();
    let terms = Value::Object(open.terms());
    let expected: Value = serde_json::from_str(
        r#"{
            "limits": {
                "per_transaction": 50.00, "min_per_transaction": 1.00, "total": 150.00,
                "count": {"per_month": 1, "total": 12}, "currency": "USD"
            },
            "recipients": {"allow": ["vendor:s-1", "vendor:m-2"]},
            "not_before": "2026-11-23",
            "expires": "2026-12-31"
        }"#,
    )
    .unwrap();
    assert_eq!(terms.to_string(), expected.to_string());
    // Exact text at the currency's minor unit: 5000 minor units are 50.00, the budget
    // the SDK wrote as the float 150.0 is 150.00.
    assert_eq!(terms["limits"]["per_transaction"].to_string(), "50.00");
    assert_eq!(terms["limits"]["min_per_transaction"].to_string(), "1.00");
    assert_eq!(terms["limits"]["total"].to_string(), "150.00");
    // The digest is of the issuer JWT as issued; the consent key of its low-S form.
    let issuer_jwt = v.s("open_full").split('~').next().unwrap();
    assert_eq!(open.digest(), hash(issuer_jwt));
    assert_eq!(
        mandate_protocol::ap2::consent_key(&open),
        hash(&low_s(issuer_jwt))
    );
    assert_eq!(open.holder(), &Jwk::from_value(&v.v["agent_jwk"]).unwrap());
    assert_eq!(open.payment_reference(), Some("chk-digest-1"));
    assert_eq!(open.allowed_payment_instruments().unwrap()[0]["id"], "pi-1");
    assert_eq!(
        open.allowed_pisps().unwrap()[0]["domain_name"],
        "payco.example"
    );
    assert_eq!(open.currency().as_str(), "USD");
    assert_eq!(read_stored_open_mandate(v.s("open_full")).unwrap(), open);

    // The terms are a valid plain mandate once the caller adds agent and categories.
    let mut body = open.terms();
    body.insert("agent".into(), json!("agt_buyer"));
    body.insert("categories".into(), json!(["software"]));
    let draft = MandateDraft::from_json(&Value::Object(body)).unwrap();
    assert_eq!(
        draft.limits.min_per_transaction.unwrap().to_string(),
        "1.00"
    );

    let minimal = verify_open_mandate(v.s("open_minimal"), &v.issuers(), v.now()).unwrap();
    assert_eq!(
        Value::Object(minimal.terms()).to_string(),
        r#"{"expires":"2027-01-23","limits":{"currency":"JPY","per_transaction":5000}}"#
    );
}

#[test]
fn the_sdk_presentations_verify_with_one_credential_per_consent() {
    let v = Vectors::load();
    let open = v.open();
    let closed = verify_closed_mandate(v.s("presentation"), &open, v.now()).unwrap();
    assert_eq!(closed.transaction_id, "tx-1");
    assert_eq!(closed.amount.to_string(), "12.34");
    assert_eq!(closed.currency.as_str(), "USD");
    assert_eq!(closed.payee, "vendor:s-1");
    assert_eq!(closed.open_digest, open.digest());
    assert_eq!(
        (closed.audience.as_str(), closed.nonce.as_str()),
        ("merchant", "n-1")
    );

    let by_issuer_hash =
        verify_closed_mandate(v.s("presentation_issuer_jwt_hash"), &open, v.now()).unwrap();
    assert_eq!(by_issuer_hash.amount.to_string(), "49.99");
    assert_ne!(
        mandate_protocol::ap2::credential_id(&by_issuer_hash),
        mandate_protocol::ap2::credential_id(&closed)
    );

    // The same consent (tx-1 under this open mandate), signed again with another nonce and
    // presented without the open hop: another token, the same credential.
    let again = closed_hop(
        &v.agent(),
        mandate_protocol::ap2::sd_jwt(&open),
        "tx-1",
        "n-9",
        Value::Null,
    );
    let resigned = verify_closed_mandate(&again, &open, v.now()).unwrap();
    assert_eq!(resigned.nonce, "n-9");
    assert_eq!(
        mandate_protocol::ap2::credential_id(&resigned),
        mandate_protocol::ap2::credential_id(&closed)
    );
    assert!(mandate_protocol::ap2::credential_id(&closed).starts_with("ap2_"));
}

#[test]
fn hostile_open_mandates_are_refused_each_with_its_error() {
    let v = Vectors::load();
    let (issuers, now, full) = (v.issuers(), v.now(), v.s("open_full"));
    let verify = |token: &str| verify_open_mandate(token, &issuers, now).unwrap_err();

    // Bad signature: one byte of the issuer JWT's signature changed.
    let (jwt_part, rest) = full.split_once('~').unwrap();
    let (input, sig) = jwt_part.rsplit_once('.').unwrap();
    let mut bytes = URL_SAFE_NO_PAD.decode(sig).unwrap();
    bytes[10] ^= 1;
    let forged = format!("{input}.{}~{rest}", b64(&bytes));
    assert_eq!(
        verify(&forged),
        Ap2Error::BadSignature("issuer-key-1".into())
    );

    // Untrusted issuer: the set holds another key only.
    let stranger = P256Signer::from_secret_bytes("other", &[9; 32]).unwrap();
    let others = JwkSet {
        keys: vec![stranger.public_jwk()],
    };
    assert!(matches!(
        verify_open_mandate(full, &others, now).unwrap_err(),
        Ap2Error::UntrustedIssuer(_)
    ));
    let unnamed = issue(
        &stranger,
        json!({"alg": "ES256"}),
        open_mandate(&v, &[]),
        &[],
    );
    assert!(matches!(verify(&unnamed), Ap2Error::UntrustedIssuer(_)));
    // Without a kid, a trusted key that verifies is found.
    let unnamed = issue(
        &v.issuer(),
        json!({"alg": "ES256"}),
        open_mandate(&v, &[]),
        &[],
    );
    assert!(verify_open_mandate(&unnamed, &issuers, now).is_ok());

    // A disclosure no digest references; a disclosure given twice.
    let extra = disclosure("salt-x", &[json!("payee"), json!({"id": "evil"})]);
    let unreferenced = format!("{full}{extra}~");
    let count = full.matches('~').count();
    assert_eq!(
        verify(&unreferenced),
        Ap2Error::UnreferencedDisclosure {
            token: "open mandate",
            index: count - 1
        }
    );
    let first = rest.split('~').next().unwrap();
    let twice = format!("{full}{first}~");
    assert!(
        matches!(verify(&twice), Ap2Error::Duplicate { .. }),
        "{:?}",
        verify(&twice)
    );

    // One digest in two places.
    let member = disclosure("salt-m", &[json!("risk_data"), json!({})]);
    let mut mandate = open_mandate(&v, &[]);
    mandate["_sd"] = json!([hash(&member), hash(&member)]);
    let doubled = issue(&v.issuer(), es256("issuer-key-1"), mandate, &[member]);
    assert!(
        matches!(verify(&doubled), Ap2Error::Duplicate { what, .. } if what.starts_with("digest"))
    );

    // Wrong vct.
    let wrong = open_mandate(&v, &[("vct", json!("mandate.payment.1"))]);
    let wrong = issue(&v.issuer(), es256("issuer-key-1"), wrong, &[]);
    assert!(matches!(
        verify(&wrong),
        Ap2Error::WrongType { claim: "vct", .. }
    ));

    // Expired (past the leeway), and issued in the future.
    let exp = now.unix_timestamp() - LEEWAY_SECS - 1;
    let expired = issue(
        &v.issuer(),
        es256("issuer-key-1"),
        open_mandate(&v, &[("exp", json!(exp))]),
        &[],
    );
    assert_eq!(
        verify(&expired),
        Ap2Error::Expired {
            token: "open mandate",
            exp
        }
    );
    let within = exp + 2;
    let fresh = issue(
        &v.issuer(),
        es256("issuer-key-1"),
        open_mandate(&v, &[("exp", json!(within))]),
        &[],
    );
    assert!(verify_open_mandate(&fresh, &issuers, now).is_ok());
    let iat = now.unix_timestamp() + LEEWAY_SECS + 1;
    let early = issue(
        &v.issuer(),
        es256("issuer-key-1"),
        open_mandate(&v, &[("iat", json!(iat))]),
        &[],
    );
    assert_eq!(
        verify(&early),
        Ap2Error::NotYetValid {
            token: "open mandate",
            iat
        }
    );

    // alg none, HS256: refused before any key is looked at.
    for alg in ["none", "HS256", "ES384"] {
        let token = issue(
            &v.issuer(),
            json!({"alg": alg, "kid": "issuer-key-1"}),
            open_mandate(&v, &[]),
            &[],
        );
        assert_eq!(
            verify(&token),
            Ap2Error::UnsupportedAlgorithm {
                token: "open mandate",
                alg: alg.into()
            }
        );
    }
    let (_, payload, _) = {
        let mut p = jwt_part.split('.');
        (p.next().unwrap(), p.next().unwrap(), p.next().unwrap())
    };
    let unsigned = format!("{}.{payload}.~{rest}", b64(br#"{"alg":"none"}"#));
    assert!(matches!(
        verify(&unsigned),
        Ap2Error::UnsupportedAlgorithm { .. }
    ));
}

#[test]
fn constraints_are_mapped_or_refused_by_name() {
    let v = Vectors::load();
    let (issuers, now) = (v.issuers(), v.now());
    let with = |constraints: Value| {
        let mandate = open_mandate(&v, &[("constraints", constraints)]);
        let token = issue(&v.issuer(), es256("issuer-key-1"), mandate, &[]);
        verify_open_mandate(&token, &issuers, now)
    };
    let range = json!({"type": "payment.amount_range", "currency": "USD", "max": 5000});
    assert_eq!(
        with(json!([range, {"type": "payment.card_network", "allowed": ["visa"]}])).unwrap_err(),
        Ap2Error::UnsupportedConstraint("payment.card_network".into())
    );
    assert_eq!(
        with(json!([{"type": "payment.amount_range", "currency": "USD", "max": 1, "step": 2}]))
            .unwrap_err(),
        Ap2Error::UnsupportedConstraint("payment.amount_range.step".into())
    );
    for frequency in ["BIWEEKLY", "QUARTERLY", "ANNUALLY"] {
        let recurrence = json!({"type": "payment.agent_recurrence", "frequency": frequency});
        let err = with(json!([range, recurrence])).unwrap_err();
        assert!(
            matches!(&err, Ap2Error::UnenforceableConstraint { constraint, problem }
                if constraint == "payment.agent_recurrence" && problem.contains(frequency)),
            "{err:?}"
        );
    }
    let daily = json!({"type": "payment.agent_recurrence", "frequency": "DAILY"});
    let terms = with(json!([range, daily])).unwrap().terms();
    assert_eq!(terms["limits"]["count"], json!({"per_day": 1}));
    let on_demand = json!({"type": "payment.agent_recurrence", "frequency": "ON_DEMAND"});
    assert!(
        with(json!([range, on_demand])).unwrap().terms()["limits"]
            .get("count")
            .is_none()
    );

    assert_eq!(
        with(json!([{"type": "payment.amount_range", "currency": "XYZ", "max": 1}])).unwrap_err(),
        Ap2Error::UnknownCurrency("XYZ".into())
    );
    let euro_budget = json!({"type": "payment.budget", "currency": "EUR", "max": 10});
    assert!(matches!(
        with(json!([range, euro_budget])).unwrap_err(),
        Ap2Error::UnenforceableConstraint { constraint, .. } if constraint == "payment.budget"
    ));
    let nobody = json!({"type": "payment.allowed_payees", "allowed": []});
    assert!(matches!(
        with(json!([range, nobody])).unwrap_err(),
        Ap2Error::UnenforceableConstraint { .. }
    ));
    let bad_id = json!({"type": "payment.allowed_payees", "allowed": [{"id": "a b", "name": "x"}]});
    assert!(matches!(
        with(json!([range, bad_id])).unwrap_err(),
        Ap2Error::InvalidClaim { .. }
    ));
    assert!(matches!(
        with(json!([range, range])).unwrap_err(),
        Ap2Error::UnenforceableConstraint { .. }
    ));
    assert!(matches!(
        with(json!([])).unwrap_err(),
        Ap2Error::MissingClaim { .. }
    ));

    // A budget alone caps each payment too, written at the currency's minor unit; JPY
    // has no minor unit, KWD three.
    let budget = json!({"type": "payment.budget", "currency": "USD", "max": 150});
    let limits = &with(json!([budget])).unwrap().terms()["limits"];
    assert_eq!(
        (
            limits["per_transaction"].to_string(),
            limits["total"].to_string()
        ),
        ("150.00".into(), "150.00".into())
    );
    let kwd = json!({"type": "payment.amount_range", "currency": "KWD", "max": 1234, "min": 5});
    let limits = &with(json!([kwd])).unwrap().terms()["limits"];
    assert_eq!(limits["per_transaction"].to_string(), "1.234");
    assert_eq!(limits["min_per_transaction"].to_string(), "0.005");
    assert_eq!(
        (minor_unit_exponent("JPY"), minor_unit_exponent("USD")),
        (Some(0), Some(2))
    );

    // An execution window given as date-times is rounded inwards to whole days.
    let window = json!({"type": "payment.execution_date",
        "not_before": "2026-11-25T10:00:00Z", "not_after": "2026-11-30T12:00:00Z"});
    let terms = with(json!([range, window])).unwrap().terms();
    assert_eq!(
        (terms["not_before"].as_str(), terms["expires"].as_str()),
        (Some("2026-11-26"), Some("2026-11-29"))
    );

    // An unknown claim of the mandate is refused, not dropped.
    let mandate = open_mandate(&v, &[("spending_hint", json!(3))]);
    let token = issue(&v.issuer(), es256("issuer-key-1"), mandate, &[]);
    assert!(matches!(
        verify_open_mandate(&token, &issuers, now).unwrap_err(),
        Ap2Error::UnsupportedConstraint(name) if name.starts_with("spending_hint")
    ));
}

#[test]
fn hostile_closed_mandates_are_refused_each_with_its_error() {
    let v = Vectors::load();
    let (now, open) = (v.now(), v.open());
    let agent = v.agent();

    // Chained to another open mandate (same holder, same issuer).
    let other = issue(
        &v.issuer(),
        es256("issuer-key-1"),
        open_mandate(&v, &[]),
        &[],
    );
    let elsewhere = chain(
        &other,
        &closed_hop(&agent, &other, "tx-1", "n", Value::Null),
    );
    let err = verify_closed_mandate(&elsewhere, &open, now).unwrap_err();
    assert!(matches!(err, Ap2Error::NotChained { .. }), "{err:?}");
    // Presented alone, its sd_hash names the other one.
    let alone = closed_hop(&agent, &other, "tx-1", "n", Value::Null);
    assert_eq!(
        verify_closed_mandate(&alone, &open, now).unwrap_err(),
        Ap2Error::BindingMismatch { claim: "sd_hash" }
    );
    // A wrong sd_hash and a wrong issuer_jwt_hash.
    let wrong = closed_hop(
        &agent,
        mandate_protocol::ap2::sd_jwt(&open),
        "tx-1",
        "n",
        json!({"sd_hash": hash("x")}),
    );
    assert_eq!(
        verify_closed_mandate(&wrong, &open, now).unwrap_err(),
        Ap2Error::BindingMismatch { claim: "sd_hash" }
    );
    let wrong = closed_hop(
        &agent,
        mandate_protocol::ap2::sd_jwt(&open),
        "tx-1",
        "n",
        json!({"issuer_jwt_hash": hash("x")}),
    );
    assert_eq!(
        verify_closed_mandate(&wrong, &open, now).unwrap_err(),
        Ap2Error::BindingMismatch {
            claim: "issuer_jwt_hash"
        }
    );
    let right = closed_hop(
        &agent,
        mandate_protocol::ap2::sd_jwt(&open),
        "tx-1",
        "n",
        json!({"issuer_jwt_hash": open.digest()}),
    );
    assert!(verify_closed_mandate(&right, &open, now).is_ok());

    // Bound to another key: signed by a key that is not the open mandate's cnf key.
    let thief = P256Signer::from_secret_bytes("agent-key-1", &[5; 32]).unwrap();
    let stolen = chain(
        mandate_protocol::ap2::sd_jwt(&open),
        &closed_hop(
            &thief,
            mandate_protocol::ap2::sd_jwt(&open),
            "tx-1",
            "n",
            Value::Null,
        ),
    );
    assert_eq!(
        verify_closed_mandate(&stolen, &open, now).unwrap_err(),
        Ap2Error::WrongHolderKey("agent-key-1".into())
    );

    // The open mandate's own exp holds at presentation time.
    let later = open.expires_at().unwrap() + time::Duration::seconds(LEEWAY_SECS + 1);
    let fine = closed_hop(
        &agent,
        mandate_protocol::ap2::sd_jwt(&open),
        "tx-1",
        "n",
        Value::Null,
    );
    assert!(matches!(
        verify_closed_mandate(&fine, &open, later).unwrap_err(),
        Ap2Error::Expired {
            token: "open mandate",
            ..
        }
    ));

    // A closed hop whose typ is not kb+sd-jwt, or whose alg is HS256.
    let (jwt_part, rest) = fine.split_once('~').unwrap();
    let payload = jwt_part.split('.').nth(1).unwrap();
    let payload: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    let typ = jwt(&agent, &json!({"alg": "ES256", "typ": "JWT"}), &payload);
    assert!(matches!(
        verify_closed_mandate(&format!("{typ}~{rest}"), &open, now).unwrap_err(),
        Ap2Error::WrongType { claim: "typ", .. }
    ));
    let hs = jwt(
        &agent,
        &json!({"alg": "HS256", "typ": "kb+sd-jwt"}),
        &payload,
    );
    assert!(matches!(
        verify_closed_mandate(&format!("{hs}~{rest}"), &open, now).unwrap_err(),
        Ap2Error::UnsupportedAlgorithm {
            token: "closed mandate",
            ..
        }
    ));

    // The open mandate allows one instrument and one PISP: another is refused.
    let minimal = verify_open_mandate(v.s("open_minimal"), &v.issuers(), now).unwrap();
    assert!(minimal.allowed_payment_instruments().is_none());
    let other_card = closed_hop_with(
        &agent,
        mandate_protocol::ap2::sd_jwt(&open),
        "tx-1",
        "n",
        Value::Null,
        "pi-2",
    );
    assert_eq!(
        verify_closed_mandate(&other_card, &open, now).unwrap_err(),
        Ap2Error::NotAllowed {
            field: "payment_instrument",
            constraint: "payment.allowed_payment_instruments"
        }
    );
}

/// Every claim of the open mandate must be disclosed, except elements of an `allowed`
/// list: withholding one narrows the list, withholding anything else could hide a
/// constraint.
#[test]
fn withheld_claims_are_refused_unless_withholding_narrows_an_allowed_list() {
    let v = Vectors::load();
    let (issuers, now, full) = (v.issuers(), v.now(), v.s("open_full"));
    let decoded =
        |d: &str| -> Value { serde_json::from_slice(&URL_SAFE_NO_PAD.decode(d).unwrap()).unwrap() };
    let parts: Vec<&str> = full.trim_end_matches('~').split('~').collect();
    let without = |keep: &dyn Fn(&Value) -> bool| {
        let mut text = format!("{}~", parts[0]);
        for d in &parts[1..] {
            if keep(&decoded(d)) {
                text.push_str(d);
                text.push('~');
            }
        }
        text
    };
    // The second payee withheld: the allow list narrows to the first.
    let narrowed = without(&|d| d[1]["id"] != "m-2");
    let open = verify_open_mandate(&narrowed, &issuers, now).unwrap();
    assert_eq!(open.terms()["recipients"], json!({"allow": ["vendor:s-1"]}));
    assert_eq!(open.digest(), v.open().digest());
    // The mandate itself withheld: with its nested disclosures they are unreferenced,
    // without them it is a withheld claim.
    let hidden = without(&|d| d[1].get("vct").is_none());
    assert!(matches!(
        verify_open_mandate(&hidden, &issuers, now).unwrap_err(),
        Ap2Error::UnreferencedDisclosure { .. }
    ));
    let hidden = without(&|_| false);
    assert_eq!(
        verify_open_mandate(&hidden, &issuers, now).unwrap_err(),
        Ap2Error::Withheld("delegate_payload[]".into())
    );

    // A constraint made selectively disclosable and withheld (the budget), and a
    // withheld member of the mandate (its payee).
    let budget = disclosure(
        "salt-b",
        &[json!({"type": "payment.budget", "currency": "USD", "max": 150})],
    );
    let range = json!({"type": "payment.amount_range", "currency": "USD", "max": 5000});
    let mandate = open_mandate(
        &v,
        &[("constraints", json!([range, {"...": hash(&budget)}]))],
    );
    let with_budget = issue(&v.issuer(), es256("issuer-key-1"), mandate, &[budget]);
    let shown = verify_open_mandate(&with_budget, &issuers, now).unwrap();
    assert_eq!(shown.terms()["limits"]["total"].to_string(), "150.00");
    let (head, _) = with_budget.rsplit_once('~').unwrap();
    let (head, _) = head.rsplit_once('~').unwrap();
    assert_eq!(
        verify_open_mandate(&format!("{head}~"), &issuers, now).unwrap_err(),
        Ap2Error::Withheld("delegate_payload[].constraints[]".into())
    );
    let payee = disclosure(
        "salt-p",
        &[json!("payee"), json!({"id": "s-1", "name": "Shop"})],
    );
    let mut mandate = open_mandate(&v, &[]);
    mandate["_sd"] = json!([hash(&payee)]);
    let shown = issue(
        &v.issuer(),
        es256("issuer-key-1"),
        mandate.clone(),
        &[payee],
    );
    let open = verify_open_mandate(&shown, &issuers, now).unwrap();
    assert_eq!(open.terms()["recipients"], json!({"allow": ["vendor:s-1"]}));
    let hidden = issue(&v.issuer(), es256("issuer-key-1"), mandate, &[]);
    assert_eq!(
        verify_open_mandate(&hidden, &issuers, now).unwrap_err(),
        Ap2Error::Withheld("delegate_payload[]._sd".into())
    );
}

/// Python's `cryptography` (AP2's issuers) does not normalize ECDSA's `s`: both twins
/// `(r, s)` and `(r, n - s)` of a signature verify here. Each has the digest of its own
/// bytes (what AP2's `issuer_jwt_hash` is, and what a merchant recomputes), and both name
/// one consent: a closed mandate under either is one credential.
#[test]
fn both_ecdsa_twins_of_an_issuer_signature_verify_as_one_consent() {
    use p256::ecdsa::Signature;
    let v = Vectors::load();
    let token = issue(
        &v.issuer(),
        es256("issuer-key-1"),
        open_mandate(&v, &[]),
        &[],
    );
    let (jwt_part, rest) = token.split_once('~').unwrap();
    let (input, sig) = jwt_part.rsplit_once('.').unwrap();
    let signature = Signature::from_slice(&URL_SAFE_NO_PAD.decode(sig).unwrap()).unwrap();
    let (r, s) = signature.split_scalars();
    let twin = Signature::from_scalars(r, -s).unwrap();
    assert_ne!(twin, signature);
    let twin_jwt = format!("{input}.{}", b64(&twin.to_bytes()));
    let twin_token = format!("{twin_jwt}~{rest}");
    let a = verify_open_mandate(&token, &v.issuers(), v.now()).unwrap();
    let b = verify_open_mandate(&twin_token, &v.issuers(), v.now()).unwrap();
    assert_eq!(a.terms(), b.terms());
    assert_eq!(a.digest(), hash(jwt_part));
    assert_eq!(b.digest(), hash(&twin_jwt));
    assert_ne!(a.digest(), b.digest());
    assert_eq!(
        mandate_protocol::ap2::consent_key(&a),
        mandate_protocol::ap2::consent_key(&b)
    );
    assert_eq!(
        mandate_protocol::ap2::consent_key(&a),
        hash(&low_s(jwt_part))
    );
    assert_eq!(read_stored_open_mandate(&twin_token).unwrap(), b);

    // A closed mandate bound by issuer_jwt_hash to the twin as presented is chained to
    // either, and is the same credential under both.
    let agent = v.agent();
    let bound = json!({"issuer_jwt_hash": hash(&twin_jwt)});
    let closed = chain(
        &twin_token,
        &closed_hop(&agent, &twin_token, "tx-1", "n", bound),
    );
    let under_a = verify_closed_mandate(&closed, &a, v.now()).unwrap();
    let under_b = verify_closed_mandate(&closed, &b, v.now()).unwrap();
    assert_eq!(
        mandate_protocol::ap2::credential_id(&under_a),
        mandate_protocol::ap2::credential_id(&under_b)
    );
    assert_eq!(under_a.open_digest, a.digest());
    assert_eq!(under_b.open_digest, b.digest());
    let plain = chain(
        &token,
        &closed_hop(&agent, &token, "tx-1", "n2", Value::Null),
    );
    let plain = verify_closed_mandate(&plain, &b, v.now()).unwrap();
    assert_eq!(
        mandate_protocol::ap2::credential_id(&plain),
        mandate_protocol::ap2::credential_id(&under_a)
    );
}

/// A closed mandate hop as [`closed_hop`] makes one, bound by `sd_hash` to `open_text`,
/// with members of its payload (`payload`) and of its payment mandate (`mandate`)
/// replaced (a null removes one).
fn closed_with(holder: &dyn Signer, open_text: &str, payload: Value, mandate: Value) -> String {
    let mut body = json!({
        "vct": "mandate.payment.1",
        "transaction_id": "tx-1",
        "payee": {"id": "s-1", "name": "Shop"},
        "payment_amount": {"amount": 1234, "currency": "USD"},
        "payment_instrument": {"id": "pi-1", "type": "credit"},
        "pisp": {"legal_name": "PayCo Ltd", "brand_name": "PayCo", "domain_name": "payco.example"},
    });
    let mut outer = json!({
        "iat": 1_795_557_000,
        "aud": "merchant",
        "nonce": "n",
        "_sd_alg": "sha-256",
        "sd_hash": hash(open_text),
    });
    for (target, changes) in [(&mut body, mandate), (&mut outer, payload)] {
        for (k, val) in changes.as_object().unwrap() {
            match val {
                Value::Null => {
                    target.as_object_mut().unwrap().remove(k);
                }
                other => target[k] = other.clone(),
            }
        }
    }
    let item = disclosure("salt-closed", &[body]);
    outer["delegate_payload"] = json!([{"...": hash(&item)}]);
    let header = json!({"alg": "ES256", "typ": "kb+sd-jwt", "kid": holder.kid()});
    format!("{}~{item}~", jwt(holder, &header, &outer))
}

/// AP2's evaluator matches payee ids exactly (`merchant_matches`): so does the check of
/// a closed mandate against the open mandate's allowed payees.
#[test]
fn a_closed_mandates_payee_is_one_of_the_allowed_payees_exactly() {
    let v = Vectors::load();
    let (now, open, agent) = (v.now(), v.open(), v.agent());
    assert_eq!(
        open.allowed_payees().unwrap(),
        ["vendor:s-1".to_owned(), "vendor:m-2".to_owned()]
    );
    let pay = |id: &str| {
        let hop = closed_with(
            &agent,
            mandate_protocol::ap2::sd_jwt(&open),
            json!({}),
            json!({"payee": {"id": id, "name": "Shop"}}),
        );
        verify_closed_mandate(&hop, &open, now)
    };
    assert_eq!(pay("s-1").unwrap().payee, "vendor:s-1");
    assert_eq!(pay("m-2").unwrap().payee, "vendor:m-2");
    for other in ["S-1", "M-2", "s-2"] {
        let err = pay(other).unwrap_err();
        assert_eq!(
            err,
            Ap2Error::NotAllowed {
                field: "payee.id",
                constraint: "payment.allowed_payees"
            },
            "{other:?}"
        );
    }
    // An open mandate without allowed payees lets the policy's recipients decide.
    let minimal = verify_open_mandate(v.s("open_minimal"), &v.issuers(), now).unwrap();
    assert!(minimal.allowed_payees().is_none());
}

/// A budget or an amount range finer than the currency's minor unit could never be spent
/// exactly: refused, naming the constraint.
#[test]
fn amounts_finer_than_the_minor_unit_are_refused_naming_the_constraint() {
    let v = Vectors::load();
    let (issuers, now) = (v.issuers(), v.now());
    let with = |constraints: Value| {
        let mandate = open_mandate(&v, &[("constraints", constraints)]);
        let token = issue(&v.issuer(), es256("issuer-key-1"), mandate, &[]);
        verify_open_mandate(&token, &issuers, now)
    };
    for (currency, max) in [
        ("JPY", json!(150.5)),
        ("KWD", json!(1.2345)),
        ("USD", json!(0.001)),
    ] {
        let budget = json!({"type": "payment.budget", "currency": currency, "max": max});
        let err = with(json!([budget])).unwrap_err();
        assert!(
            matches!(&err, Ap2Error::UnenforceableConstraint { constraint, problem }
                if constraint == "payment.budget" && problem.contains("minor unit")),
            "{currency} {max}: {err:?}"
        );
        assert!(err.to_string().contains("payment.budget"), "{err}");
    }
    // As fine as the unit or coarser: written at the unit.
    for (currency, max, written) in [
        ("JPY", json!(150.0), "150"),
        ("KWD", json!(1.234), "1.234"),
        ("USD", json!(150.5), "150.50"),
        ("USD", serde_json::from_str("150.000").unwrap(), "150.00"),
    ] {
        let budget = json!({"type": "payment.budget", "currency": currency, "max": max});
        let limits = &with(json!([budget])).unwrap().terms()["limits"];
        assert_eq!(limits["total"].to_string(), written, "{currency} {max}");
    }
    // Amount ranges are whole minor units.
    for member in ["max", "min"] {
        let mut range = json!({"type": "payment.amount_range", "currency": "USD", "max": 5000});
        range[member] = json!(12.5);
        let err = with(json!([range])).unwrap_err();
        assert_eq!(
            err,
            Ap2Error::InvalidClaim {
                token: "open mandate",
                claim: format!("payment.amount_range.{member}"),
                problem: "must be a whole, non-negative number of minor units".into()
            }
        );
    }
}

/// A closed mandate carries an `iat` within its open mandate's validity, and without an
/// `exp` is refused once older than `CLOSED_MAX_AGE_SECS` (15 minutes) and the leeway.
#[test]
fn a_closed_mandates_iat_is_bounded() {
    use mandate_protocol::ap2::CLOSED_MAX_AGE_SECS;
    let v = Vectors::load();
    let (now, open, agent) = (v.now(), v.open(), v.agent());
    let at = now.unix_timestamp();
    let present = |payload: Value| {
        let hop = closed_with(
            &agent,
            mandate_protocol::ap2::sd_jwt(&open),
            payload,
            json!({}),
        );
        verify_closed_mandate(&hop, &open, now)
    };
    let oldest = at - CLOSED_MAX_AGE_SECS - LEEWAY_SECS;
    assert!(present(json!({"iat": oldest})).is_ok());
    assert_eq!(
        present(json!({"iat": oldest - 1})).unwrap_err(),
        Ap2Error::TooOld {
            iat: oldest - 1,
            max_age_secs: 900
        }
    );
    // The 1970 iat of the hostile tester, and none at all.
    assert!(matches!(
        present(json!({"iat": 1})).unwrap_err(),
        Ap2Error::InvalidClaim { claim, .. } if claim == "iat"
    ));
    assert!(matches!(
        present(json!({"iat": null})).unwrap_err(),
        Ap2Error::MissingClaim { claim, .. } if claim == "iat"
    ));
    // An exp lets a closed mandate be older, until then (the token's or the mandate's).
    let old = at - 3_600;
    assert!(present(json!({"iat": old, "exp": at + 60})).is_ok());
    assert_eq!(
        present(json!({"iat": old, "exp": at - LEEWAY_SECS - 1})).unwrap_err(),
        Ap2Error::Expired {
            token: "closed mandate",
            exp: at - LEEWAY_SECS - 1
        }
    );
    let hop = closed_with(
        &agent,
        mandate_protocol::ap2::sd_jwt(&open),
        json!({"iat": old}),
        json!({"exp": at + 60}),
    );
    assert!(verify_closed_mandate(&hop, &open, now).is_ok());
    // Before the open mandate's iat (with an exp, so not too old), or after its exp.
    let open_iat = open.issued_at().unwrap().unix_timestamp();
    let early = open_iat - LEEWAY_SECS - 1;
    let err = present(json!({"iat": early, "exp": at + 60})).unwrap_err();
    assert!(
        matches!(&err, Ap2Error::InvalidClaim { claim, problem, .. }
            if claim == "iat" && problem.contains("before the open mandate's iat")),
        "{err:?}"
    );
    assert!(present(json!({"iat": open_iat, "exp": at + 60})).is_ok());
    let ending = issue(
        &v.issuer(),
        es256("issuer-key-1"),
        open_mandate(&v, &[("exp", json!(at - 30))]),
        &[],
    );
    let ending = verify_open_mandate(&ending, &v.issuers(), now).unwrap();
    let hop = closed_with(
        &agent,
        mandate_protocol::ap2::sd_jwt(&ending),
        json!({"iat": at + 40}),
        json!({}),
    );
    let err = verify_closed_mandate(&hop, &ending, now).unwrap_err();
    assert!(
        matches!(&err, Ap2Error::InvalidClaim { claim, problem, .. }
            if claim == "iat" && problem.contains("after the open mandate's exp")),
        "{err:?}"
    );
}
