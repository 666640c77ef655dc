//! AP2 closed payment mandates, checked against the open mandate they are chained to.
//!
//! AP2 presents a closed payment mandate as the last hop of a delegation chain
//! (`MandateClient.present`): `<open-sd-jwt without its last ~>~~<closed>`, where
//! `<closed>` is an SD-JWT `<jwt>~<disclosure>~...~` whose JWT has `typ` `kb+sd-jwt`, is
//! signed by the open mandate's `cnf` key, binds the open mandate it follows by `sd_hash`
//! (the hash of that open SD-JWT as presented, disclosures included) or `issuer_jwt_hash`
//! (the hash of its issuer JWT only), carries `iat`, `aud` and `nonce`, and discloses the
//! payment mandate (`vct` [`CLOSED_VCT`]) in its `delegate_payload`. The closed token
//! alone (without `~~`) is read as chained to the stored open mandate as stored.

use rust_decimal::Decimal;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::open::{OpenMandate, payee_recipient};
use super::sdjwt::{self, b64_sha256};
use super::{Ap2Error, CLOSED_VCT, LEEWAY_SECS, minor_unit_exponent};
use crate::names::Currency;

const TOKEN: &str = "closed mandate";

/// The `typ`s AP2 gives a terminal key-binding SD-JWT (`ap2.sdk.sdjwt.kb_sd_jwt`).
const TERMINAL_TYPS: [&str; 2] = ["kb+sd-jwt", "kb-sd-jwt"];

/// A verified AP2 closed payment mandate: one payment the holder of an open mandate
/// consents to. Made by [`verify_closed_mandate`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClosedMandate {
    /// Its `transaction_id`: the checkout it pays (AP2: the base64url hash of the checkout
    /// JWT).
    pub transaction_id: String,
    /// `payment_amount.amount` in major units: the integer minor units scaled exactly by
    /// the currency's ISO 4217 exponent (27999 USD minor units are 279.99).
    pub amount: Decimal,
    /// `payment_amount.currency`.
    pub currency: Currency,
    /// The payee as a Mandate recipient, `vendor:<payee.id>` (as the open mandate's
    /// `payment.allowed_payees` are mapped).
    pub payee: String,
    /// The digest of the open mandate it is chained to ([`OpenMandate::digest`]).
    pub open_digest: String,
    /// `payment_instrument`, as given.
    pub payment_instrument: Value,
    /// `pisp`, as given, if any.
    pub pisp: Option<Value>,
    /// The key-binding JWT's `aud`.
    pub audience: String,
    /// The key-binding JWT's `nonce`.
    pub nonce: String,
    /// The key-binding JWT's `iat`.
    pub issued_at: OffsetDateTime,
}

impl ClosedMandate {
    /// The single-use credential id: `ap2_` and the base64url SHA-256 of the open
    /// mandate's digest followed by the transaction id. One consent (this checkout under
    /// this open mandate) has one id, however often or differently it is re-signed.
    pub fn credential_id(&self) -> String {
        format!(
            "ap2_{}",
            b64_sha256(&format!("{}{}", self.open_digest, self.transaction_id))
        )
    }
}

fn invalid(claim: impl Into<String>, problem: impl Into<String>) -> Ap2Error {
    Ap2Error::InvalidClaim {
        token: TOKEN,
        claim: claim.into(),
        problem: problem.into(),
    }
}

fn missing(claim: impl Into<String>) -> Ap2Error {
    Ap2Error::MissingClaim {
        token: TOKEN,
        claim: claim.into(),
    }
}

fn string<'a>(object: &'a Map<String, Value>, claim: &str) -> Result<&'a str, Ap2Error> {
    match object.get(claim) {
        None | Some(Value::Null) => Err(missing(claim)),
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(_) => Err(invalid(claim, "must be a non-empty string")),
    }
}

/// Verifies the agent's closed payment mandate `presentation` against `open` at `now`
/// (module doc): the open mandate it carries is `open` (same issuer JWT) and not expired,
/// `alg` ES256, `typ` `kb+sd-jwt`, the signature by `open`'s `cnf` key, `sd_hash` or
/// `issuer_jwt_hash`, `iat` (not after `now` + [`LEEWAY_SECS`]), `exp` if any, `aud` and
/// `nonce` present, the disclosures, `vct` [`CLOSED_VCT`], and the payment instrument and
/// PISP among those the open mandate allows. Amount, currency and payee are returned for
/// the caller to compare with its request (the policy engine checks them against the
/// mandate's terms).
pub fn verify_closed_mandate(
    presentation: &str,
    open: &OpenMandate,
    now: OffsetDateTime,
) -> Result<ClosedMandate, Ap2Error> {
    let presentation = presentation.trim();
    let mut hops = presentation.split("~~");
    let (open_text, closed_text) = match (hops.next(), hops.next(), hops.next()) {
        (Some(closed), None, _) => (open.sd_jwt().to_owned(), closed),
        (Some(first), Some(closed), None) => (format!("{first}~"), closed),
        _ => {
            return Err(Ap2Error::Malformed(
                "the presentation has more than two hops; only <open>~~<closed> is accepted"
                    .to_owned(),
            ));
        }
    };

    // The open mandate presented is the stored one, with genuine disclosures.
    let open_hop = sdjwt::split(&open_text, "open mandate")?;
    let open_jwt = sdjwt::decode_jwt(open_hop.issuer_jwt, "open mandate")?;
    let presented_digest = open_jwt.digest();
    if presented_digest != open.digest() {
        return Err(Ap2Error::NotChained {
            expected: open.digest().to_owned(),
            found: presented_digest,
        });
    }
    sdjwt::resolve(open_jwt.payload, &open_hop.disclosures, "open mandate")?;
    let at = now.unix_timestamp();
    if let Some(exp) = open.expires_at().map(OffsetDateTime::unix_timestamp)
        && exp.saturating_add(LEEWAY_SECS) < at
    {
        return Err(Ap2Error::Expired {
            token: "open mandate",
            exp,
        });
    }

    let closed_hop = sdjwt::split(closed_text, TOKEN)?;
    let jwt = sdjwt::decode_jwt(closed_hop.issuer_jwt, TOKEN)?;
    let typ = jwt
        .header
        .get("typ")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !TERMINAL_TYPS.contains(&typ) {
        return Err(Ap2Error::WrongType {
            token: TOKEN,
            claim: "typ",
            expected: TERMINAL_TYPS[0],
            found: typ.to_owned(),
        });
    }
    if !jwt.verifies_with(open.holder().verifying_key()) {
        return Err(Ap2Error::WrongHolderKey(open.holder().kid().to_owned()));
    }
    // What the closed mandate withholds is the agent's to withhold: what Mandate reads
    // from it must be disclosed, and is checked below.
    let (resolved, _) = sdjwt::resolve(jwt.payload, &closed_hop.disclosures, TOKEN)?;
    let (outer, mandate) = sdjwt::delegate(resolved, TOKEN)?;

    match (outer.get("sd_hash"), outer.get("issuer_jwt_hash")) {
        (Some(hash), None) => {
            if hash.as_str() != Some(b64_sha256(&open_hop.sd_jwt()).as_str()) {
                return Err(Ap2Error::BindingMismatch { claim: "sd_hash" });
            }
        }
        (None, Some(hash)) => {
            if hash.as_str() != Some(b64_sha256(open_hop.issuer_jwt).as_str()) {
                return Err(Ap2Error::BindingMismatch {
                    claim: "issuer_jwt_hash",
                });
            }
        }
        _ => return Err(missing("sd_hash or issuer_jwt_hash (exactly one)")),
    }
    let iat = sdjwt::time_claim(&outer, "iat", TOKEN)?.ok_or_else(|| missing("iat"))?;
    if iat > at.saturating_add(LEEWAY_SECS) {
        return Err(Ap2Error::NotYetValid { token: TOKEN, iat });
    }
    for object in [&outer, &mandate] {
        if let Some(exp) = sdjwt::time_claim(object, "exp", TOKEN)?
            && exp.saturating_add(LEEWAY_SECS) < at
        {
            return Err(Ap2Error::Expired { token: TOKEN, exp });
        }
    }
    let audience = string(&outer, "aud")?.to_owned();
    let nonce = string(&outer, "nonce")?.to_owned();

    match mandate.get("vct") {
        Some(Value::String(vct)) if vct == CLOSED_VCT => {}
        Some(other) => {
            return Err(Ap2Error::WrongType {
                token: TOKEN,
                claim: "vct",
                expected: CLOSED_VCT,
                found: other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned),
            });
        }
        None => return Err(missing("vct")),
    }
    if mandate.contains_key("cnf") {
        return Err(invalid(
            "cnf",
            "must be absent: a closed mandate ends the chain (AP2's terminal hop)",
        ));
    }
    let transaction_id = string(&mandate, "transaction_id")?.to_owned();
    let payee = payee_recipient(mandate.get("payee").ok_or_else(|| missing("payee"))?)
        .map_err(|problem| invalid("payee.id", problem))?;
    let payment = mandate
        .get("payment_amount")
        .and_then(Value::as_object)
        .ok_or_else(|| missing("payment_amount"))?;
    let code = string(payment, "currency")?;
    let exponent =
        minor_unit_exponent(code).ok_or_else(|| Ap2Error::UnknownCurrency(code.to_owned()))?;
    let currency = Currency::parse(code).map_err(|_| Ap2Error::UnknownCurrency(code.to_owned()))?;
    let units = payment
        .get("amount")
        .and_then(Value::as_i64)
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            invalid(
                "payment_amount.amount",
                "must be a whole, non-negative number of minor units",
            )
        })?;
    let amount = Decimal::new(units, exponent);

    let payment_instrument = mandate
        .get("payment_instrument")
        .filter(|v| v.is_object())
        .cloned()
        .ok_or_else(|| missing("payment_instrument"))?;
    if let Some(allowed) = open.allowed_payment_instruments()
        && !allowed
            .iter()
            .any(|a| same(a, &payment_instrument, &["id", "type"]))
    {
        return Err(Ap2Error::NotAllowed {
            field: "payment_instrument",
            constraint: "payment.allowed_payment_instruments",
        });
    }
    let pisp = mandate.get("pisp").filter(|v| !v.is_null()).cloned();
    if let Some(allowed) = open.allowed_pisps()
        && !pisp
            .as_ref()
            .is_some_and(|p| allowed.iter().any(|a| same(a, p, &["domain_name"])))
    {
        return Err(Ap2Error::NotAllowed {
            field: "pisp",
            constraint: "payment.allowed_pisps",
        });
    }

    Ok(ClosedMandate {
        transaction_id,
        amount,
        currency,
        payee,
        open_digest: open.digest().to_owned(),
        payment_instrument,
        pisp,
        audience,
        nonce,
        issued_at: OffsetDateTime::from_unix_timestamp(iat)
            .map_err(|_| invalid("iat", "is out of range"))?,
    })
}

/// Whether `a` and `b` carry the same, present, values for each of `members`.
fn same(a: &Value, b: &Value, members: &[&str]) -> bool {
    members.iter().all(|m| {
        a.get(m)
            .is_some_and(|v| !v.is_null() && Some(v) == b.get(m))
    })
}
