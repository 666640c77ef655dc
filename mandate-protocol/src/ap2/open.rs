//! AP2 open payment mandates: verified, then mapped onto Mandate terms.
//!
//! | AP2 (open payment mandate) | Mandate term |
//! |---|---|
//! | `payment.amount_range` `max` / `min` (minor units) | `limits.per_transaction` / `limits.min_per_transaction` (major units, by the ISO 4217 exponent) |
//! | `payment.amount_range.currency`, `payment.budget.currency` | `limits.currency` (both must agree) |
//! | `payment.budget.max` (major units) | `limits.total` |
//! | `payment.agent_recurrence` | `limits.count`: `max_occurrences` is `total`; `DAILY`, `WEEKLY`, `MONTHLY` are `per_day`, `per_week`, `per_month` of 1; `ON_DEMAND` no window; `BIWEEKLY`, `QUARTERLY`, `ANNUALLY` refused |
//! | `payment.allowed_payees` | `recipients.allow`: each payee as `vendor:<id>` (its `id` must be 1 to 128 of `[A-Za-z0-9._-]`; an empty list is refused, as Mandate reads an empty allow list as "anyone") |
//! | `payment.execution_date` `not_before` / `not_after` | `not_before` / `expires` (a date; a date-time is rounded inwards to whole UTC days) |
//! | `exp` | `expires` (its UTC date; the exact instant is checked again by [`verify_closed_mandate`](super::verify_closed_mandate)) |
//! | `payment.reference`, `payment.allowed_payment_instruments`, `payment.allowed_pisps` | bound values: [`OpenMandate::payment_reference`], [`OpenMandate::allowed_payment_instruments`], [`OpenMandate::allowed_pisps`] |
//!
//! The pre-set top-level claims are read as the constraint they imply: `payment_amount`
//! as an `amount_range` with `min` = `max`, `payee` as `allowed_payees` of one,
//! `payment_instrument` and `pisp` as allowed lists of one, `execution_date` as an
//! `execution_date` from and to that day. A constraint given twice (also through such a
//! claim) is refused, as is any constraint or claim of the mandate this table does not
//! name (`risk_data`, informational, is the one claim ignored). Without
//! `payment.amount_range`, `limits.per_transaction` is the budget (no single payment can
//! exceed it); with neither, the mandate is refused.
//!
//! Every claim must be disclosed: a digest without its disclosure (a withheld claim, or a
//! decoy) is refused ([`Ap2Error::Withheld`]), as it could hide a constraint, except for
//! elements of an `allowed` list (payees, instruments, PISPs), whose withholding only
//! narrows the list.
//!
//! The terms ([`OpenMandate::terms`]) hold `limits`, `expires` and, when set,
//! `not_before` and `recipients`: the caller adds `agent` and `categories`, which AP2 does
//! not express, and validates the whole body as a plain mandate.

use rust_decimal::Decimal;
use serde_json::{Map, Value, json};
use time::{Date, Duration, OffsetDateTime, Time};

use super::sdjwt::{self, Compact, b64_sha256};
use super::{Ap2Error, LEEWAY_SECS, OPEN_VCT, minor_unit_exponent};
use crate::amount::{Amount, amount_from_json};
use crate::jwk::{Jwk, JwkSet};
use crate::mandate::format_date;
use crate::names::{Currency, Recipient};

const TOKEN: &str = "open mandate";

/// A verified AP2 open payment mandate: its digest, its holder's key, the Mandate terms it
/// maps to and the values bound into verdicts. Made by [`verify_open_mandate`] or
/// [`read_stored_open_mandate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenMandate {
    digest: String,
    consent_key: String,
    sd_jwt: String,
    holder: Jwk,
    terms: Map<String, Value>,
    currency: Currency,
    payees: Option<Vec<String>>,
    reference: Option<String>,
    instruments: Option<Vec<Value>>,
    pisps: Option<Vec<Value>>,
    issued_at: Option<OffsetDateTime>,
    expires_at: Option<OffsetDateTime>,
}

impl OpenMandate {
    /// The mandate terms in the JSON shape `POST /v1/mandates` accepts as plain terms:
    /// `limits` (`per_transaction`, and when set `min_per_transaction`, `total`, `count`;
    /// `currency`), `expires`, and when set `not_before` and `recipients` (see the module
    /// doc). `agent` and `categories` are the caller's.
    pub fn terms(&self) -> Map<String, Value> {
        self.terms.clone()
    }

    /// The open mandate's digest: base64url (no padding) of the SHA-256 of its issuer JWT
    /// exactly as imported (`header.payload.signature`, the signature as the issuer made
    /// it, high-S or low-S), as AP2 computes `issuer_jwt_hash` (`ap2.sdk.sdjwt.common`).
    /// It names the mandate whatever disclosures are presented: the `source.digest` of an
    /// imported mandate and the verdict's `ap2_mandate`.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The name of the consent this open mandate carries, free of signature
    /// malleability: the digest of its issuer JWT with the ECDSA signature in its low-S
    /// form. The two twins `(r, s)`, `(r, n - s)` of the issuer's signature (both valid)
    /// have two [`digest`](Self::digest)s and one consent key, so a twin is the same
    /// consent: [`ClosedMandate::credential_id`](super::ClosedMandate::credential_id) is
    /// made from it, and a service keeping each open mandate in force in one place keys
    /// it by it. Equal to [`digest`](Self::digest) when the issuer's signature is low-S.
    pub(crate) fn consent_key(&self) -> &str {
        &self.consent_key
    }

    /// The holder's key (`cnf.jwk`), which must sign closed mandates. Its `kid` is the
    /// JWK's own, or its RFC 7638 thumbprint when it has none.
    pub fn holder(&self) -> &Jwk {
        &self.holder
    }

    /// The SD-JWT as read (`<issuer-jwt>~<disclosure>~...~`), to store.
    pub(crate) fn sd_jwt(&self) -> &str {
        &self.sd_jwt
    }

    /// The currency of its amounts (`limits.currency` of the terms).
    pub fn currency(&self) -> &Currency {
        &self.currency
    }

    /// `payment.reference`'s `conditional_transaction_id` (the digest of the open checkout
    /// mandate the payment is bound to), for the verdict.
    pub fn payment_reference(&self) -> Option<&str> {
        self.reference.as_deref()
    }

    /// `payment.allowed_payees` as Mandate recipients (`vendor:<id>`, each id as the
    /// issuer wrote it), if constrained: a closed mandate's payee must be one of them
    /// exactly, as AP2's evaluator matches merchant ids.
    pub fn allowed_payees(&self) -> Option<&[String]> {
        self.payees.as_deref()
    }

    /// `payment.allowed_payment_instruments`'s `allowed` list, as given, if constrained.
    pub fn allowed_payment_instruments(&self) -> Option<&[Value]> {
        self.instruments.as_deref()
    }

    /// `payment.allowed_pisps`'s `allowed` list, as given, if constrained.
    pub fn allowed_pisps(&self) -> Option<&[Value]> {
        self.pisps.as_deref()
    }

    /// Its `iat`, if it has one.
    pub fn issued_at(&self) -> Option<OffsetDateTime> {
        self.issued_at
    }

    /// Its `exp` (the earlier one when both the token and the mandate carry one).
    pub fn expires_at(&self) -> Option<OffsetDateTime> {
        self.expires_at
    }
}

/// Verifies an AP2 open payment mandate (compact SD-JWT) issued by one of `issuers` (the
/// organization's trusted AP2 issuer keys, chosen by the token's `kid`, or each tried in
/// turn when it names none; an `x5c` header is not read: trust is the organization's keys) and maps it onto Mandate terms (module doc). `iat` may not be
/// more than [`LEEWAY_SECS`] after `now`, nor `exp` that much before it.
pub fn verify_open_mandate(
    sd_jwt: &str,
    issuers: &JwkSet,
    now: OffsetDateTime,
) -> Result<OpenMandate, Ap2Error> {
    let compact = sdjwt::split(sd_jwt, TOKEN)?;
    let jwt = sdjwt::decode_jwt(compact.issuer_jwt, TOKEN)?;
    match jwt.kid() {
        Some(kid) => {
            let key = issuers
                .keys
                .iter()
                .find(|key| key.kid() == kid)
                .ok_or_else(|| {
                    Ap2Error::UntrustedIssuer(format!("no trusted key has kid {kid:?}"))
                })?;
            if !jwt.verifies_with(key.verifying_key()) {
                return Err(Ap2Error::BadSignature(kid.to_owned()));
            }
        }
        None => {
            if !issuers
                .keys
                .iter()
                .any(|key| jwt.verifies_with(key.verifying_key()))
            {
                return Err(Ap2Error::UntrustedIssuer(
                    "its header names no kid and no trusted key verifies it".to_owned(),
                ));
            }
        }
    }
    let names = Names {
        digest: jwt.digest(),
        consent_key: jwt.consent_key(),
    };
    read(&compact, names, jwt.payload, Some(now))
}

/// Reads an open mandate verified when it was imported: its structure, disclosures and
/// digests, `vct` and the mapping of its constraints, without the signature (the issuer's
/// key may since have been removed) and without the clock.
pub fn read_stored_open_mandate(sd_jwt: &str) -> Result<OpenMandate, Ap2Error> {
    let compact = sdjwt::split(sd_jwt, TOKEN)?;
    let jwt = sdjwt::decode_jwt(compact.issuer_jwt, TOKEN)?;
    let names = Names {
        digest: jwt.digest(),
        consent_key: jwt.consent_key(),
    };
    read(&compact, names, jwt.payload, None)
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

fn unenforceable(constraint: &str, problem: impl Into<String>) -> Ap2Error {
    Ap2Error::UnenforceableConstraint {
        constraint: constraint.to_owned(),
        problem: problem.into(),
    }
}

fn unix(seconds: i64, claim: &str) -> Result<OffsetDateTime, Ap2Error> {
    OffsetDateTime::from_unix_timestamp(seconds).map_err(|_| invalid(claim, "is out of range"))
}

/// The two names of an open mandate ([`OpenMandate::digest`],
/// [`OpenMandate::consent_key`]).
struct Names {
    digest: String,
    consent_key: String,
}

fn read(
    compact: &Compact<'_>,
    names: Names,
    payload: Map<String, Value>,
    now: Option<OffsetDateTime>,
) -> Result<OpenMandate, Ap2Error> {
    let (resolved, withheld) = sdjwt::resolve(payload, &compact.disclosures, TOKEN)?;
    // A withheld claim could be a constraint: only elements of an `allowed` list may be
    // withheld, which narrows the list.
    if let Some(path) = withheld.into_iter().find(|path| {
        !matches!(
            path.as_str(),
            "delegate_payload[].constraints[].allowed[]" | "constraints[].allowed[]"
        )
    }) {
        return Err(Ap2Error::Withheld(path));
    }
    let (outer, mandate) = sdjwt::delegate(resolved, TOKEN)?;
    match mandate.get("vct") {
        Some(Value::String(vct)) if vct == OPEN_VCT => {}
        Some(other) => {
            return Err(Ap2Error::WrongType {
                token: TOKEN,
                claim: "vct",
                expected: OPEN_VCT,
                found: other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned),
            });
        }
        None => return Err(missing("vct")),
    }

    // Times: the earliest exp and the latest iat of the token and the mandate.
    let mut exp: Option<i64> = None;
    let mut iat: Option<i64> = None;
    for object in [&outer, &mandate] {
        if let Some(e) = sdjwt::time_claim(object, "exp", TOKEN)? {
            exp = Some(exp.map_or(e, |x| x.min(e)));
        }
        if let Some(i) = sdjwt::time_claim(object, "iat", TOKEN)? {
            iat = Some(iat.map_or(i, |x| x.max(i)));
        }
    }
    if let Some(now) = now {
        let now = now.unix_timestamp();
        if let Some(exp) = exp
            && exp.saturating_add(LEEWAY_SECS) < now
        {
            return Err(Ap2Error::Expired { token: TOKEN, exp });
        }
        if let Some(iat) = iat
            && iat > now.saturating_add(LEEWAY_SECS)
        {
            return Err(Ap2Error::NotYetValid { token: TOKEN, iat });
        }
    }
    let expires_at = exp.map(|e| unix(e, "exp")).transpose()?;
    let issued_at = iat.map(|i| unix(i, "iat")).transpose()?;

    let holder = holder_key(&mandate)?;
    let constraints = constraints_of(&mandate)?;
    let mapped = Mapped::from_constraints(&constraints)?;

    let expires = match (expires_at.map(OffsetDateTime::date), mapped.not_after) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => return Err(missing("exp (or payment.execution_date.not_after)")),
    };
    let (terms, currency) = mapped.terms(expires)?;
    Ok(OpenMandate {
        digest: names.digest,
        consent_key: names.consent_key,
        sd_jwt: compact.sd_jwt(),
        holder,
        terms,
        currency,
        payees: mapped.payees,
        reference: mapped.reference,
        instruments: mapped.instruments,
        pisps: mapped.pisps,
        issued_at,
        expires_at,
    })
}

/// The holder's key from `cnf.jwk`, parsed strictly as an EC P-256 public key.
fn holder_key(mandate: &Map<String, Value>) -> Result<Jwk, Ap2Error> {
    let jwk = mandate
        .get("cnf")
        .and_then(|cnf| cnf.get("jwk"))
        .and_then(Value::as_object)
        .ok_or_else(|| missing("cnf.jwk"))?;
    let mut jwk = jwk.clone();
    if !jwk.contains_key("kid") {
        // RFC 7638: the SHA-256 of the required members in lexicographic order.
        let member = |name: &str| jwk.get(name).and_then(Value::as_str).unwrap_or_default();
        let canonical = format!(
            r#"{{"crv":"{}","kty":"{}","x":"{}","y":"{}"}}"#,
            member("crv"),
            member("kty"),
            member("x"),
            member("y")
        );
        jwk.insert("kid".to_owned(), Value::String(b64_sha256(&canonical)));
    }
    Jwk::from_value(&Value::Object(jwk)).map_err(|e| invalid("cnf.jwk", format!("is refused: {e}")))
}

/// The constraints of the mandate, with the pre-set top-level claims as the constraints
/// they imply (module doc); an unknown claim of the mandate is refused.
fn constraints_of(mandate: &Map<String, Value>) -> Result<Vec<Map<String, Value>>, Ap2Error> {
    let mut constraints = Vec::new();
    for (name, value) in mandate {
        let implied = match name.as_str() {
            "vct" | "cnf" | "iat" | "exp" | "risk_data" => continue,
            "constraints" => {
                let items = value
                    .as_array()
                    .ok_or_else(|| invalid("constraints", "must be an array"))?;
                for (i, item) in items.iter().enumerate() {
                    let object = item
                        .as_object()
                        .ok_or_else(|| invalid(format!("constraints[{i}]"), "must be an object"))?;
                    constraints.push(object.clone());
                }
                continue;
            }
            "payment_amount" => {
                let amount = value.get("amount").cloned().unwrap_or(Value::Null);
                let currency = value.get("currency").cloned().unwrap_or(Value::Null);
                json!({"type": "payment.amount_range", "currency": currency,
                       "max": amount, "min": amount})
            }
            "payee" => json!({"type": "payment.allowed_payees", "allowed": [value]}),
            "payment_instrument" => {
                json!({"type": "payment.allowed_payment_instruments", "allowed": [value]})
            }
            "pisp" => json!({"type": "payment.allowed_pisps", "allowed": [value]}),
            "execution_date" => {
                json!({"type": "payment.execution_date", "not_before": value, "not_after": value})
            }
            other => {
                return Err(Ap2Error::UnsupportedConstraint(format!(
                    "{other} (a claim of the open mandate)"
                )));
            }
        };
        if let Value::Object(object) = implied {
            constraints.push(object);
        }
    }
    if !mandate.contains_key("constraints") {
        return Err(missing("constraints"));
    }
    Ok(constraints)
}

/// What the constraints say, read and checked.
#[derive(Default)]
struct Mapped {
    currency: Option<(String, String)>,
    max: Option<Amount>,
    min: Option<Amount>,
    budget: Option<Amount>,
    count: Map<String, Value>,
    payees: Option<Vec<String>>,
    not_before: Option<Date>,
    not_after: Option<Date>,
    reference: Option<String>,
    instruments: Option<Vec<Value>>,
    pisps: Option<Vec<Value>>,
}

/// One constraint object being read: its `type` and its members.
struct Constraint<'a> {
    kind: &'a str,
    members: &'a Map<String, Value>,
}

impl Constraint<'_> {
    /// A member, unless absent or null.
    fn field(&self, name: &str) -> Option<&Value> {
        self.members.get(name).filter(|v| !v.is_null())
    }

    /// A member that must be there.
    fn required(&self, name: &str) -> Result<&Value, Ap2Error> {
        self.field(name).ok_or_else(|| missing(self.path(name)))
    }

    /// The member's dotted path, `payment.budget.max`.
    fn path(&self, name: &str) -> String {
        format!("{}.{name}", self.kind)
    }
}

impl Mapped {
    fn from_constraints(constraints: &[Map<String, Value>]) -> Result<Self, Ap2Error> {
        let mut mapped = Self::default();
        let mut seen: Vec<String> = Vec::new();
        for constraint in constraints {
            let kind = match constraint.get("type") {
                Some(Value::String(kind)) => kind.clone(),
                _ => return Err(invalid("constraints[].type", "must be a string")),
            };
            if seen.contains(&kind) {
                return Err(unenforceable(
                    &kind,
                    "it is given more than once (also through a pre-set claim such as payment_amount or payee); give it once",
                ));
            }
            seen.push(kind.clone());
            mapped.read(&kind, constraint)?;
        }
        Ok(mapped)
    }

    fn read(&mut self, kind: &str, c: &Map<String, Value>) -> Result<(), Ap2Error> {
        let members: &[&str] = match kind {
            "payment.amount_range" => &["currency", "max", "min"],
            "payment.budget" => &["currency", "max"],
            "payment.agent_recurrence" => &["frequency", "max_occurrences"],
            "payment.allowed_payees"
            | "payment.allowed_payment_instruments"
            | "payment.allowed_pisps" => &["allowed"],
            "payment.execution_date" => &["not_before", "not_after"],
            "payment.reference" => &["conditional_transaction_id"],
            other => return Err(Ap2Error::UnsupportedConstraint(other.to_owned())),
        };
        if let Some(name) = c
            .keys()
            .find(|k| *k != "type" && !members.contains(&k.as_str()))
        {
            return Err(Ap2Error::UnsupportedConstraint(format!("{kind}.{name}")));
        }
        let c = Constraint { kind, members: c };
        match kind {
            "payment.amount_range" => {
                let exponent = self.currency(kind, c.required("currency")?)?;
                self.max = Some(minor(c.required("max")?, exponent, &c.path("max"))?);
                self.min = c
                    .field("min")
                    .map(|v| minor(v, exponent, &c.path("min")))
                    .transpose()?;
            }
            "payment.budget" => self.read_budget(&c)?,
            "payment.agent_recurrence" => self.read_recurrence(&c)?,
            "payment.allowed_payees" => self.read_payees(&c)?,
            "payment.allowed_payment_instruments" => {
                self.instruments = Some(list(c.required("allowed")?, kind)?.to_vec());
            }
            "payment.allowed_pisps" => {
                self.pisps = Some(list(c.required("allowed")?, kind)?.to_vec())
            }
            "payment.execution_date" => {
                if let Some(v) = c.field("not_before") {
                    self.not_before = Some(day(v, &c.path("not_before"), true)?);
                }
                if let Some(v) = c.field("not_after") {
                    self.not_after = Some(day(v, &c.path("not_after"), false)?);
                }
            }
            _ => {
                let id = c.required("conditional_transaction_id")?;
                let id = id.as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
                    invalid(
                        c.path("conditional_transaction_id"),
                        "must be a non-empty string",
                    )
                })?;
                self.reference = Some(id.to_owned());
            }
        }
        Ok(())
    }

    /// `payment.budget`: major units, no finer than the currency's minor unit, written at
    /// that unit.
    fn read_budget(&mut self, c: &Constraint<'_>) -> Result<(), Ap2Error> {
        let exponent = self.currency(c.kind, c.required("currency")?)?;
        let budget = amount_from_json(c.required("max")?).map_err(|e| {
            invalid(
                c.path("max"),
                format!("must be an exact amount in major units: {e}"),
            )
        })?;
        let at_unit = at_minor_unit(budget, exponent).ok_or_else(|| {
            let code = self.currency.as_ref().map_or("", |(code, _)| code);
            unenforceable(
                c.kind,
                format!(
                    "max {budget} is finer than {code}'s minor unit ({exponent} decimal places): no payment can spend it exactly; give a whole number of minor units"
                ),
            )
        })?;
        self.budget = Some(at_unit);
        Ok(())
    }

    /// `payment.agent_recurrence` as count limits (module doc).
    fn read_recurrence(&mut self, c: &Constraint<'_>) -> Result<(), Ap2Error> {
        let frequency = c.required("frequency")?.as_str().unwrap_or_default();
        let window = match frequency {
            "ON_DEMAND" => None,
            "DAILY" => Some("per_day"),
            "WEEKLY" => Some("per_week"),
            "MONTHLY" => Some("per_month"),
            "BIWEEKLY" | "QUARTERLY" | "ANNUALLY" => {
                return Err(unenforceable(
                    c.kind,
                    format!(
                        "frequency {frequency} has no count window in Mandate (a day, an ISO week, a calendar month)"
                    ),
                ));
            }
            _ => return Err(invalid(c.path("frequency"), "is not an AP2 frequency")),
        };
        if let Some(window) = window {
            self.count.insert(window.to_owned(), json!(1));
        }
        if let Some(max) = c.field("max_occurrences") {
            let n = max.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                invalid(c.path("max_occurrences"), "must be a whole number from 1")
            })?;
            self.count.insert("total".to_owned(), json!(n));
        }
        Ok(())
    }

    /// `payment.allowed_payees` as recipients `vendor:<id>` (a non-empty list).
    fn read_payees(&mut self, c: &Constraint<'_>) -> Result<(), Ap2Error> {
        let allowed = list(c.required("allowed")?, c.kind)?;
        if allowed.is_empty() {
            return Err(unenforceable(
                c.kind,
                "its allowed list is empty (no payee could be paid)",
            ));
        }
        let mut payees = Vec::with_capacity(allowed.len());
        for payee in allowed {
            payees.push(
                payee_recipient(payee)
                    .map_err(|problem| invalid(c.path("allowed[].id"), problem))?,
            );
        }
        self.payees = Some(payees);
        Ok(())
    }

    /// Reads a constraint's currency (it must agree with the others'), its exponent.
    fn currency(&mut self, kind: &str, value: &Value) -> Result<u32, Ap2Error> {
        let code = value.as_str().unwrap_or_default();
        let exponent = minor_unit_exponent(code).ok_or_else(|| {
            Ap2Error::UnknownCurrency(
                value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned),
            )
        })?;
        match &self.currency {
            Some((other, from)) if other != code => Err(unenforceable(
                kind,
                format!("its currency {code} differs from {from}'s {other}"),
            )),
            _ => {
                self.currency = Some((code.to_owned(), kind.to_owned()));
                Ok(exponent)
            }
        }
    }

    /// The terms as `POST /v1/mandates` reads them, and their currency.
    fn terms(&self, expires: Date) -> Result<(Map<String, Value>, Currency), Ap2Error> {
        let per_transaction = self.max.or(self.budget).ok_or_else(|| {
            missing("payment.amount_range or payment.budget constraint (Mandate needs a cap per payment)")
        })?;
        let (code, _) = self.currency.clone().unwrap_or_default();
        let currency =
            Currency::parse(&code).map_err(|_| Ap2Error::UnknownCurrency(code.clone()))?;
        let mut limits = Map::new();
        limits.insert("per_transaction".to_owned(), number(per_transaction));
        if let Some(min) = self.min {
            limits.insert("min_per_transaction".to_owned(), number(min));
        }
        if let Some(total) = self.budget {
            limits.insert("total".to_owned(), number(total));
        }
        if !self.count.is_empty() {
            limits.insert("count".to_owned(), Value::Object(self.count.clone()));
        }
        limits.insert("currency".to_owned(), json!(code));
        let mut terms = Map::new();
        terms.insert("limits".to_owned(), Value::Object(limits));
        if let Some(payees) = &self.payees {
            terms.insert("recipients".to_owned(), json!({"allow": payees}));
        }
        if let Some(start) = self.not_before {
            terms.insert("not_before".to_owned(), json!(format_date(start)));
        }
        terms.insert("expires".to_owned(), json!(format_date(expires)));
        Ok((terms, currency))
    }
}

/// An `allowed` list of a constraint.
fn list<'a>(value: &'a Value, kind: &str) -> Result<&'a [Value], Ap2Error> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| invalid(format!("{kind}.allowed"), "must be an array"))
}

/// A merchant object as a Mandate recipient: `vendor:<id>`.
pub(crate) fn payee_recipient(payee: &Value) -> Result<String, String> {
    let id = payee
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| "must be a string (a payee is named by its merchant id)".to_owned())?;
    let recipient = format!("vendor:{id}");
    Recipient::parse(&recipient)
        .map(|_| recipient)
        .map_err(|_| {
            format!(
                "{id:?} cannot name a recipient: it must be 1 to 128 characters of [A-Za-z0-9._-]"
            )
        })
}

/// An integer count of minor units as an exact amount in major units.
pub(crate) fn minor(value: &Value, exponent: u32, claim: &str) -> Result<Amount, Ap2Error> {
    let units = value
        .as_i64()
        .filter(|n| *n >= 0)
        .ok_or_else(|| invalid(claim, "must be a whole, non-negative number of minor units"))?;
    Amount::from_decimal(Decimal::new(units, exponent))
        .map_err(|e| invalid(claim, format!("is not an amount: {e}")))
}

/// `amount` written at the currency's minor unit (`exponent` decimal places: 150.0 USD
/// is 150.00), or `None` when it is finer than that unit (150.5 JPY, 1.2345 KWD).
fn at_minor_unit(amount: Amount, exponent: u32) -> Option<Amount> {
    let value = amount.value().normalize();
    if value.scale() > exponent {
        return None;
    }
    let mut scaled = value;
    scaled.rescale(exponent);
    // Past 28 digits a wider scale cannot be held: the amount stays as it is, exact.
    if scaled != value {
        return Some(amount);
    }
    Amount::from_decimal(scaled).ok()
}

/// An amount as a JSON number of its exact text (exact where serde_json keeps text).
fn number(amount: Amount) -> Value {
    serde_json::from_str(&amount.to_string()).unwrap_or(Value::Null)
}

/// An execution date (`YYYY-MM-DD`, or an RFC 3339 date-time) as a whole UTC day, rounded
/// inwards: a start after midnight begins the next day, an end before 23:59:59 ends the
/// day before.
fn day(value: &Value, claim: &str, start: bool) -> Result<Date, Ap2Error> {
    let text = value.as_str().unwrap_or_default();
    if let Some(date) = crate::mandate::parse_date(text) {
        return Ok(date);
    }
    let at = OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| {
            invalid(
                claim,
                "must be a date (YYYY-MM-DD) or an RFC 3339 date-time",
            )
        })?
        .to_offset(time::UtcOffset::UTC);
    let date = at.date();
    let shifted = if start && at.time() != Time::MIDNIGHT {
        date.checked_add(Duration::days(1))
    } else if !start && at.time() < Time::from_hms(23, 59, 59).unwrap_or(Time::MIDNIGHT) {
        date.checked_sub(Duration::days(1))
    } else {
        Some(date)
    };
    shifted.ok_or_else(|| invalid(claim, "is out of range"))
}
