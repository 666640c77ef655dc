//! AP2 SD-JWTs for the server's tests (issue #36), signed in Rust with real P-256 keys,
//! shaped as AP2's SDK issues them (the mandate the one disclosed element of
//! `delegate_payload`; a closed mandate a `kb+sd-jwt` hop chained by `sd_hash`), and AP2's
//! own vectors (`testdata/ap2/vectors.json`, issued by its Python SDK).
#![allow(dead_code, clippy::unwrap_used)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::{P256Signer, Signer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// AP2's vectors, issued by its Python SDK.
pub const VECTORS: &str = include_str!("../../testdata/ap2/vectors.json");

/// The vectors as JSON.
pub fn vectors() -> Value {
    serde_json::from_str(VECTORS).unwrap()
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// base64url SHA-256 of `text`: AP2's digests.
pub fn hash(text: &str) -> String {
    b64(&Sha256::digest(text.as_bytes()))
}

/// A compact JWS of `header` and `payload` signed by `signer`.
pub fn jwt(signer: &dyn Signer, header: &Value, payload: &Value) -> String {
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(payload.to_string().as_bytes())
    );
    let signature = signer.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", b64(&signature))
}

/// A disclosure `[salt, value]` (an array element) in base64url.
fn disclosure(salt: &str, value: Value) -> String {
    b64(json!([salt, value]).to_string().as_bytes())
}

/// An issuer and the agent (the holder its open mandates bind through `cnf`).
pub struct Ap2Keys {
    /// Signs open mandates; its JWK is what the operator trusts.
    pub issuer: P256Signer,
    /// The agent's key: signs closed mandates.
    pub holder: P256Signer,
}

impl Ap2Keys {
    /// Keys drawn from `seed` (deterministic, distinct per seed).
    pub fn new(seed: u8) -> Self {
        let key = |n: u8| {
            let mut bytes = [n; 32];
            bytes[0] = 1;
            bytes
        };
        Self {
            issuer: P256Signer::from_secret_bytes(format!("issuer-{seed}"), &key(seed)).unwrap(),
            holder: P256Signer::from_secret_bytes(
                format!("agent-{seed}"),
                &key(seed.wrapping_add(100)),
            )
            .unwrap(),
        }
    }

    /// The issuer's public JWK, as a file the operator command reads.
    pub fn issuer_jwk(&self) -> String {
        serde_json::to_string(&self.issuer.public_jwk()).unwrap()
    }

    /// The holder's public JWK, as `cnf.jwk` carries it.
    pub fn holder_jwk(&self) -> Value {
        serde_json::to_value(self.holder.public_jwk()).unwrap()
    }

    /// An open payment mandate with `constraints`, issued at `iat`, expiring at `exp`
    /// (unix seconds), bound to the holder key.
    pub fn open(&self, constraints: Value, iat: i64, exp: i64) -> String {
        self.open_with(json!({
            "vct": "mandate.payment.open.1",
            "constraints": constraints,
            "cnf": {"jwk": self.holder.public_jwk()},
            "iat": iat,
            "exp": exp,
        }))
    }

    /// An open mandate of exactly `mandate`, signed by the issuer.
    pub fn open_with(&self, mandate: Value) -> String {
        issue(&self.issuer, mandate)
    }

    /// The agent's closed payment mandate for transaction `tx`: `minor` units of
    /// `currency` to payee `payee` (its merchant id), chained to `open` (as presented:
    /// `<open>~~<closed>`), signed by the holder at `iat`.
    pub fn closed(
        &self,
        open: &str,
        tx: &str,
        minor: i64,
        currency: &str,
        payee: &str,
        iat: i64,
    ) -> String {
        closed_by(&self.holder, open, tx, minor, currency, payee, iat)
    }
}

/// An SD-JWT of `mandate` as AP2's SDK issues one.
pub fn issue(signer: &dyn Signer, mandate: Value) -> String {
    let item = disclosure("salt-mandate", mandate);
    let payload = json!({"delegate_payload": [{"...": hash(&item)}], "_sd_alg": "sha-256"});
    let header = json!({"alg": "ES256", "kid": signer.kid()});
    format!("{}~{item}~", jwt(signer, &header, &payload))
}

/// A closed mandate signed by `signer` (the holder, or another key to test a refusal).
pub fn closed_by(
    signer: &dyn Signer,
    open: &str,
    tx: &str,
    minor: i64,
    currency: &str,
    payee: &str,
    iat: i64,
) -> String {
    let mandate = json!({
        "vct": "mandate.payment.1",
        "transaction_id": tx,
        "payee": {"id": payee, "name": payee},
        "payment_amount": {"amount": minor, "currency": currency},
        "payment_instrument": {"id": "pi-1", "type": "credit"},
    });
    let item = disclosure(&format!("salt-{tx}"), mandate);
    let payload = json!({
        "delegate_payload": [{"...": hash(&item)}],
        "iat": iat,
        "aud": "merchant",
        "nonce": format!("nonce-{tx}"),
        "sd_hash": hash(open),
        "_sd_alg": "sha-256",
    });
    let header = json!({"alg": "ES256", "typ": "kb+sd-jwt", "kid": signer.kid()});
    let closed = format!("{}~{item}~", jwt(signer, &header, &payload));
    format!("{}~~{closed}", open.strip_suffix('~').unwrap())
}
