//! AP2 closed payment mandates, checked against the open mandate they are chained to.
//!
//! AP2 presents a closed payment mandate as the last hop of a delegation chain
//! (`MandateClient.present`): `<open-sd-jwt without its last ~>~~<closed>`, where
//! `<closed>` is an SD-JWT `<jwt>~<disclosure>~...~` whose JWT has `typ` `kb+sd-jwt`, is
//! signed by the open mandate's `cnf` key, binds the open mandate it follows by `sd_hash`
//! (the hash of that open SD-JWT as presented, disclosures included) or `issuer_jwt_hash`
//! (the hash of its issuer JWT only), carries `iat`, `aud` and `nonce`, and discloses the
//! payment mandate (`vct` `mandate.payment.1`) in its `delegate_payload`. The closed token
//! alone (without `~~`) is read as chained to the stored open mandate as stored.

use rust_decimal::Decimal;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::open::{OpenMandate, payee_recipient};
use super::sdjwt::{self, Claims, Compact, b64_sha256};
use super::{Ap2Error, CLOSED_MAX_AGE_SECS, CLOSED_VCT, LEEWAY_SECS, minor_unit_exponent};
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
    /// The open mandate's [`OpenMandate::consent_key`], which names the consent.
    open_consent_key: String,
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
    /// mandate's [`OpenMandate::consent_key`] followed by the transaction id. One consent
    /// (this checkout under this open mandate) has one id, however often or differently
    /// the closed mandate is re-signed, and whichever ECDSA twin of the issuer's
    /// signature the open mandate carries.
    pub(crate) fn credential_id(&self) -> String {
        format!(
            "ap2_{}",
            b64_sha256(&format!("{}{}", self.open_consent_key, self.transaction_id))
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
/// (module doc): the open mandate it carries is `open` (the same issuer JWT, or its ECDSA
/// twin) and not expired, `alg` ES256, `typ` `kb+sd-jwt`, the signature by `open`'s `cnf`
/// key, `sd_hash` or `issuer_jwt_hash`, the times (`iat` present, not in the future,
/// within the open mandate's validity; an `exp` not past, or without one `iat` at most
/// [`CLOSED_MAX_AGE_SECS`] old; [`LEEWAY_SECS`] of leeway each), `aud` and `nonce`
/// present, the disclosures, `vct` `mandate.payment.1`, the payee among the open mandate's
/// allowed payees (ids compared exactly, as AP2's evaluator does), and the payment
/// instrument and PISP among those it allows. Amount, currency and payee are returned for
/// the caller to compare with its request (the policy engine checks them against the
/// mandate's terms).
pub fn verify_closed_mandate(
    presentation: &str,
    open: &OpenMandate,
    now: OffsetDateTime,
) -> Result<ClosedMandate, Ap2Error> {
    let at = now.unix_timestamp();
    let (open_text, closed_text) = split_presentation(presentation, open)?;
    let open_hop = sdjwt::split(&open_text, "open mandate")?;
    check_open_hop(&open_hop, open, at)?;
    let (outer, mandate) = decode_closed_hop(closed_text, open)?;
    check_binding(&outer, &open_hop)?;
    let iat = check_times(&outer, &mandate, open, at)?;
    let audience = string(&outer, "aud")?.to_owned();
    let nonce = string(&outer, "nonce")?.to_owned();
    check_vct(&mandate)?;
    let payment = read_payment(&mandate, open)?;
    let (payment_instrument, pisp) = instrument_and_pisp(&mandate, open)?;
    Ok(ClosedMandate {
        transaction_id: payment.transaction_id,
        amount: payment.amount,
        currency: payment.currency,
        payee: payment.payee,
        open_digest: open.digest().to_owned(),
        open_consent_key: open.consent_key().to_owned(),
        payment_instrument,
        pisp,
        audience,
        nonce,
        issued_at: OffsetDateTime::from_unix_timestamp(iat)
            .map_err(|_| invalid("iat", "is out of range"))?,
    })
}

/// The presentation's open hop (ending in `~`) and its closed hop: `<open>~~<closed>`, or
/// the closed hop alone, read as chained to `open` as stored.
fn split_presentation<'a>(
    presentation: &'a str,
    open: &OpenMandate,
) -> Result<(String, &'a str), Ap2Error> {
    let mut hops = presentation.trim().split("~~");
    match (hops.next(), hops.next(), hops.next()) {
        (Some(closed), None, _) => Ok((open.sd_jwt().to_owned(), closed)),
        (Some(first), Some(closed), None) => Ok((format!("{first}~"), closed)),
        _ => Err(Ap2Error::Malformed(
            "the presentation has more than two hops; only <open>~~<closed> is accepted".to_owned(),
        )),
    }
}

/// The open hop presented is `open` (its issuer JWT, or that JWT's ECDSA twin: the same
/// consent), with genuine disclosures, and `open` has not expired at `at`.
fn check_open_hop(open_hop: &Compact<'_>, open: &OpenMandate, at: i64) -> Result<(), Ap2Error> {
    let open_jwt = sdjwt::decode_jwt(open_hop.issuer_jwt, "open mandate")?;
    if open_jwt.consent_key() != open.consent_key() {
        return Err(Ap2Error::NotChained {
            expected: open.digest().to_owned(),
            found: open_jwt.digest(),
        });
    }
    sdjwt::resolve(open_jwt.payload, &open_hop.disclosures, "open mandate")?;
    if let Some(exp) = open.expires_at().map(OffsetDateTime::unix_timestamp)
        && exp.saturating_add(LEEWAY_SECS) < at
    {
        return Err(Ap2Error::Expired {
            token: "open mandate",
            exp,
        });
    }
    Ok(())
}

/// The closed hop's key-binding JWT checked (`typ`, the `cnf` key's signature) and its
/// disclosures resolved: its outer claims and the payment mandate it delegates.
fn decode_closed_hop(closed_text: &str, open: &OpenMandate) -> Result<(Claims, Claims), Ap2Error> {
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
    // from it must be disclosed, and is checked after.
    let (resolved, _) = sdjwt::resolve(jwt.payload, &closed_hop.disclosures, TOKEN)?;
    sdjwt::delegate(resolved, TOKEN)
}

/// Exactly one of `sd_hash` (the open hop as presented, disclosures included) and
/// `issuer_jwt_hash` (its issuer JWT as presented) binds the closed hop to the open hop.
fn check_binding(outer: &Claims, open_hop: &Compact<'_>) -> Result<(), Ap2Error> {
    match (outer.get("sd_hash"), outer.get("issuer_jwt_hash")) {
        (Some(hash), None) if hash.as_str() == Some(b64_sha256(&open_hop.sd_jwt()).as_str()) => {
            Ok(())
        }
        (Some(_), None) => Err(Ap2Error::BindingMismatch { claim: "sd_hash" }),
        (None, Some(hash)) if hash.as_str() == Some(b64_sha256(open_hop.issuer_jwt).as_str()) => {
            Ok(())
        }
        (None, Some(_)) => Err(Ap2Error::BindingMismatch {
            claim: "issuer_jwt_hash",
        }),
        _ => Err(missing("sd_hash or issuer_jwt_hash (exactly one)")),
    }
}

/// The closed mandate's times at `at` (each with [`LEEWAY_SECS`]): `iat` present, not in
/// the future, within the open mandate's validity (not before its `iat`, not after its
/// `exp`); an `exp` (of the token or the mandate), when given, not past; without one,
/// `iat` at most [`CLOSED_MAX_AGE_SECS`] old. Returns `iat`.
fn check_times(
    outer: &Claims,
    mandate: &Claims,
    open: &OpenMandate,
    at: i64,
) -> Result<i64, Ap2Error> {
    let iat = sdjwt::time_claim(outer, "iat", TOKEN)?.ok_or_else(|| missing("iat"))?;
    if iat > at.saturating_add(LEEWAY_SECS) {
        return Err(Ap2Error::NotYetValid { token: TOKEN, iat });
    }
    if let Some(open_iat) = open.issued_at().map(OffsetDateTime::unix_timestamp)
        && iat.saturating_add(LEEWAY_SECS) < open_iat
    {
        return Err(invalid(
            "iat",
            format!(
                "{iat} is before the open mandate's iat {open_iat}: a closed mandate is made under an open mandate already issued"
            ),
        ));
    }
    if let Some(open_exp) = open.expires_at().map(OffsetDateTime::unix_timestamp)
        && iat > open_exp.saturating_add(LEEWAY_SECS)
    {
        return Err(invalid(
            "iat",
            format!("{iat} is after the open mandate's exp {open_exp}"),
        ));
    }
    let mut exp = None;
    for object in [outer, mandate] {
        if let Some(e) = sdjwt::time_claim(object, "exp", TOKEN)? {
            exp = Some(exp.map_or(e, |x: i64| x.min(e)));
        }
    }
    match exp {
        Some(exp) if exp.saturating_add(LEEWAY_SECS) < at => {
            Err(Ap2Error::Expired { token: TOKEN, exp })
        }
        Some(_) => Ok(iat),
        None if iat
            .saturating_add(CLOSED_MAX_AGE_SECS)
            .saturating_add(LEEWAY_SECS)
            < at =>
        {
            Err(Ap2Error::TooOld {
                iat,
                max_age_secs: CLOSED_MAX_AGE_SECS,
            })
        }
        None => Ok(iat),
    }
}

/// The payment mandate's `vct` is `mandate.payment.1`, and it ends the chain (no `cnf`).
fn check_vct(mandate: &Claims) -> Result<(), Ap2Error> {
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
    Ok(())
}

/// What a closed mandate pays.
struct Payment {
    transaction_id: String,
    amount: Decimal,
    currency: Currency,
    payee: String,
}

/// The transaction id, the amount (minor units at the currency's exponent), the currency
/// and the payee, which must be one of the open mandate's allowed payees exactly.
fn read_payment(mandate: &Claims, open: &OpenMandate) -> Result<Payment, Ap2Error> {
    let transaction_id = string(mandate, "transaction_id")?.to_owned();
    let payee = payee_recipient(mandate.get("payee").ok_or_else(|| missing("payee"))?)
        .map_err(|problem| invalid("payee.id", problem))?;
    if let Some(allowed) = open.allowed_payees()
        && !allowed.contains(&payee)
    {
        return Err(Ap2Error::NotAllowed {
            field: "payee.id",
            constraint: "payment.allowed_payees",
        });
    }
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
    Ok(Payment {
        transaction_id,
        amount: Decimal::new(units, exponent),
        currency,
        payee,
    })
}

/// `payment_instrument` (required) and `pisp`, each among those the open mandate allows.
fn instrument_and_pisp(
    mandate: &Claims,
    open: &OpenMandate,
) -> Result<(Value, Option<Value>), Ap2Error> {
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
    Ok((payment_instrument, pisp))
}

/// Whether `a` and `b` carry the same, present, values for each of `members`.
fn same(a: &Value, b: &Value, members: &[&str]) -> bool {
    members.iter().all(|m| {
        a.get(m)
            .is_some_and(|v| !v.is_null() && Some(v) == b.get(m))
    })
}
