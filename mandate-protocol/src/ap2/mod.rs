//! Google's Agent Payments Protocol (AP2 v0.2): open payment mandates read into Mandate
//! terms, closed payment mandates checked against them. Pure: `now` is an argument.
//!
//! # What is read
//!
//! An AP2 mandate is an SD-JWT (RFC 9901) in compact form,
//! `<issuer-jwt>~<disclosure>~...~`, as AP2's Python SDK (`ap2.sdk.mandate.MandateClient`)
//! issues it: the issuer JWT's payload holds `_sd_alg` (`sha-256`, the only one accepted)
//! and a `delegate_payload` array whose one element is the mandate itself, itself
//! selectively disclosed (`{"...": <digest>}`), with its members either plain or disclosed
//! through `_sd` digests. A payload without `delegate_payload` is read as the mandate
//! itself. Every disclosure (`[salt, name, value]` for an object member, `[salt, value]`
//! for an array element) must be referenced by exactly one digest of the token, anywhere
//! (recursively); a digest that names no disclosure is a decoy and is ignored.
//!
//! - [`verify_open_mandate`]: the issuer's ES256 signature against the organization's
//!   trusted keys, the disclosures, `vct` = `mandate.payment.open.1`, `iat`/`exp` against `now`, and
//!   each constraint mapped onto Mandate terms ([`OpenMandate::terms`]) or kept as a bound
//!   value ([`OpenMandate::payment_reference`], ...), or refused naming it.
//! - [`read_stored_open_mandate`]: the same reading of a token verified at import, without
//!   the signature and the clock.
//! - [`verify_closed_mandate`]: the agent's closed payment mandate, a key-binding SD-JWT
//!   (`typ` `kb+sd-jwt`) signed by the open mandate's `cnf` key, chained to it by `sd_hash`
//!   or `issuer_jwt_hash`, with its transaction id, amount, currency and payee.
//!
//! Only ES256 is accepted for every signature: `alg` `none`, `HS256` or anything else is
//! [`Ap2Error::UnsupportedAlgorithm`]. Both `r || s` twins of an ECDSA signature are
//! accepted (AP2's issuers, through Python's `cryptography` and jwcrypto, do not normalize
//! `s`: about half their signatures are high-S). An open mandate's
//! [`OpenMandate::digest`] is of its issuer JWT exactly as issued, either twin (what AP2
//! and a merchant compute); its [`consent_key`] is one name for both twins,
//! so a twin is never a second consent.
//!
//! Times are checked with a leeway of [`LEEWAY_SECS`] seconds each way, for clocks that
//! differ a little (AP2's SDK allows 300). A closed mandate's `iat` lies within its open
//! mandate's validity, and without an `exp` it is refused once older than
//! [`CLOSED_MAX_AGE_SECS`] (15 minutes).
//!
//! Payee ids are compared exactly (AP2's evaluator, `merchant_matches`, does): a closed
//! mandate's payee must be one of the open mandate's `payment.allowed_payees` as written.
//! Budgets finer than the currency's minor unit (JPY `150.5`) are refused; the amounts
//! of the terms are written at the currency's minor unit (`150.00` USD).
//!
//! Amounts: AP2 writes `payment.amount_range` and payment amounts in integer minor units
//! of the currency, and `payment.budget` in major units. Minor units become exact decimals
//! by the currency's ISO 4217 exponent ([`minor_unit_exponent`]); a currency outside that
//! table is refused. `payment.budget.max` is read from the JSON number's text: exact when
//! serde_json keeps number text (`arbitrary_precision`, as in the server); otherwise a
//! fractional budget is refused rather than rounded.

mod closed;
mod open;
mod sdjwt;

use thiserror::Error;

pub use closed::{ClosedMandate, verify_closed_mandate};
pub use open::{OpenMandate, read_stored_open_mandate, verify_open_mandate};

/// The `vct` of an AP2 open payment mandate (`open_payment_mandate.json`).
pub(crate) const OPEN_VCT: &str = "mandate.payment.open.1";

/// The `vct` of an AP2 closed payment mandate (`payment_mandate.json`).
pub(crate) const CLOSED_VCT: &str = "mandate.payment.1";

/// How far, in seconds, `iat` may lie ahead of `now` and `exp` behind it.
pub const LEEWAY_SECS: i64 = 60;

/// How old, in seconds, a closed mandate without `exp` may be when it is presented (its
/// `iat` at most 15 minutes, plus [`LEEWAY_SECS`], before `now`): a consent to one
/// payment is redeemed when it is made, not kept for later. A closed mandate with an
/// `exp` is valid until then instead.
pub const CLOSED_MAX_AGE_SECS: i64 = 15 * 60;

/// Why an AP2 mandate was refused. Each message names what to fix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Ap2Error {
    /// The text is not a compact SD-JWT, or a part of it is not base64url JSON of the
    /// expected shape (names the part).
    #[error("malformed AP2 SD-JWT: {0}")]
    Malformed(String),
    /// A JWT's `alg` is not ES256 (`none`, `HS256`, `RS256`, ...): only ES256 is accepted.
    #[error("the {token} is signed with alg {alg:?}; only ES256 is accepted")]
    UnsupportedAlgorithm {
        /// Which token (`open mandate`, `closed mandate`).
        token: &'static str,
        /// The `alg` found.
        alg: String,
    },
    /// No key of the organization's trusted AP2 issuer keys is the one named by the
    /// token's `kid`, or (without a `kid`) none verifies it.
    #[error(
        "the open mandate's issuer is not trusted: {0}; add its key to the organization's trusted AP2 issuer keys"
    )]
    UntrustedIssuer(String),
    /// The issuer's signature does not verify under the trusted key its `kid` names.
    #[error("the open mandate's signature does not verify under trusted issuer key {0:?}")]
    BadSignature(String),
    /// `_sd_alg` is not `sha-256`.
    #[error("_sd_alg {0:?} is not supported; use sha-256")]
    UnsupportedSdAlg(String),
    /// A disclosure is not base64url of a JSON array `[salt, name, value]` or
    /// `[salt, value]` fit for its place.
    #[error("disclosure {index} of the {token} is malformed: {problem}")]
    BadDisclosure {
        /// Which token.
        token: &'static str,
        /// Its position among the token's disclosures, from 0.
        index: usize,
        /// What is wrong.
        problem: String,
    },
    /// A disclosure whose digest no `_sd` array or `{"...": digest}` of the token holds.
    #[error("disclosure {index} of the {token} is not referenced by any digest of its issuer JWT")]
    UnreferencedDisclosure {
        /// Which token.
        token: &'static str,
        /// Its position among the token's disclosures, from 0.
        index: usize,
    },
    /// The same disclosure appears twice, or one digest appears twice in the token.
    #[error("the {token} repeats {what}; each disclosure and digest must appear once")]
    Duplicate {
        /// Which token.
        token: &'static str,
        /// What is repeated (`disclosure 3`, `digest <d>`).
        what: String,
    },
    /// The open mandate holds a digest without its disclosure (a withheld claim, or a
    /// decoy: they cannot be told apart) at this path. Mandate must see every claim it
    /// enforces, so only elements of an `allowed` list may be withheld (that narrows it).
    #[error(
        "the open mandate withholds a claim at {0} (a digest without its disclosure); present it with every disclosure"
    )]
    Withheld(String),
    /// `vct` (or the key-binding JWT's `typ`) is not the one AP2 defines.
    #[error("the {token}'s {claim} is {found:?}; it must be {expected:?}")]
    WrongType {
        /// Which token.
        token: &'static str,
        /// `vct` or `typ`.
        claim: &'static str,
        /// What AP2 defines.
        expected: &'static str,
        /// What the token carries.
        found: String,
    },
    /// `exp` is more than [`LEEWAY_SECS`] in the past.
    #[error("the {token} expired at {exp} (unix seconds)")]
    Expired {
        /// Which token.
        token: &'static str,
        /// Its `exp`.
        exp: i64,
    },
    /// A closed mandate without `exp` whose `iat` is more than [`CLOSED_MAX_AGE_SECS`]
    /// (plus [`LEEWAY_SECS`]) before `now`.
    #[error(
        "the closed mandate was issued at {iat} (unix seconds), more than {max_age_secs} s ago, and has no exp; ask the agent for a fresh one"
    )]
    TooOld {
        /// Its `iat`.
        iat: i64,
        /// [`CLOSED_MAX_AGE_SECS`].
        max_age_secs: i64,
    },
    /// `iat` is more than [`LEEWAY_SECS`] in the future.
    #[error("the {token} is issued in the future (iat {iat} unix seconds)")]
    NotYetValid {
        /// Which token.
        token: &'static str,
        /// Its `iat`.
        iat: i64,
    },
    /// A claim AP2 requires is absent.
    #[error("the {token} has no {claim} claim")]
    MissingClaim {
        /// Which token.
        token: &'static str,
        /// The claim's dotted path.
        claim: String,
    },
    /// A claim has a value of the wrong form.
    #[error("the {token}'s {claim} {problem}")]
    InvalidClaim {
        /// Which token.
        token: &'static str,
        /// The claim's dotted path.
        claim: String,
        /// What is wrong, phrased to follow the claim.
        problem: String,
    },
    /// A constraint Mandate does not know: it could not be enforced, so the mandate is
    /// refused rather than the constraint dropped.
    #[error(
        "constraint {0:?} is not supported by Mandate; remove it or ask the issuer for a mandate without it"
    )]
    UnsupportedConstraint(String),
    /// A known constraint with a value Mandate cannot enforce (names the constraint and
    /// why, for example `payment.agent_recurrence` with `QUARTERLY`).
    #[error("constraint {constraint} cannot be enforced: {problem}")]
    UnenforceableConstraint {
        /// The constraint's `type`.
        constraint: String,
        /// Why.
        problem: String,
    },
    /// A currency outside the ISO 4217 table of [`minor_unit_exponent`].
    #[error("currency {0:?} is not an ISO 4217 currency Mandate knows")]
    UnknownCurrency(String),
    /// The presentation's open mandate is another one than the stored open mandate.
    #[error(
        "the closed mandate is chained to another open mandate (issuer JWT hash {found}), not to {expected}"
    )]
    NotChained {
        /// The digest of the stored open mandate.
        expected: String,
        /// The digest of the open mandate the presentation carries.
        found: String,
    },
    /// The closed mandate's signature does not verify under the open mandate's `cnf` key.
    #[error("the closed mandate is not signed by the open mandate's cnf key {0:?}")]
    WrongHolderKey(String),
    /// The closed mandate's `sd_hash` (or `issuer_jwt_hash`) is not the hash of the open
    /// mandate it is presented with.
    #[error("the closed mandate's {claim} does not match the open mandate it is presented with")]
    BindingMismatch {
        /// `sd_hash` or `issuer_jwt_hash`.
        claim: &'static str,
    },
    /// The closed mandate's payment falls outside a constraint the open mandate binds
    /// (its instrument, its PISP, its currency).
    #[error("the closed mandate's {field} is not allowed by the open mandate's {constraint}")]
    NotAllowed {
        /// The closed mandate's field.
        field: &'static str,
        /// The open mandate's constraint.
        constraint: &'static str,
    },
}

/// The ISO 4217 minor-unit exponent of `currency` (2 for USD: 27999 minor units are
/// 279.99), or `None` for a code outside the table: active ISO 4217 currencies, plus
/// the funds codes with their own exponent (CLF, UYI, UYW).
pub fn minor_unit_exponent(currency: &str) -> Option<u32> {
    const ZERO: &[&str] = &[
        "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND",
        "VUV", "XAF", "XOF", "XPF",
    ];
    const THREE: &[&str] = &["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"];
    const FOUR: &[&str] = &["CLF", "UYW"];
    const TWO: &[&str] = &[
        "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN",
        "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHF", "CNY",
        "COP", "CRC", "CUP", "CVE", "CZK", "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD",
        "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR",
        "ILS", "INR", "IRR", "JMD", "KES", "KGS", "KHR", "KPW", "KYD", "KZT", "LAK", "LBP", "LKR",
        "LRD", "LSL", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK",
        "MXN", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "PAB", "PEN", "PGK", "PHP",
        "PKR", "PLN", "QAR", "RON", "RSD", "RUB", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP",
        "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TOP", "TRY",
        "TTD", "TWD", "TZS", "UAH", "USD", "UYU", "UZS", "VES", "WST", "XCD", "XCG", "YER", "ZAR",
        "ZMW", "ZWG",
    ];
    if ZERO.contains(&currency) {
        Some(0)
    } else if TWO.contains(&currency) {
        Some(2)
    } else if THREE.contains(&currency) {
        Some(3)
    } else if FOUR.contains(&currency) {
        Some(4)
    } else {
        None
    }
}

// What Mandate's server and CLI compute with this module's types beyond their methods
// an embedder sees through mandate-core.

/// The single-use credential id of a closed mandate: `ap2_` and the base64url SHA-256
/// of its open mandate's [`consent_key`] followed by the transaction id.
pub fn credential_id(closed: &ClosedMandate) -> String {
    closed.credential_id()
}

/// The name of the consent an open mandate carries, free of signature malleability
/// (the digest of its issuer JWT with a low-S signature): where a service keeps each
/// open mandate in force in one place.
pub fn consent_key(open: &OpenMandate) -> &str {
    open.consent_key()
}

/// The open mandate's SD-JWT as read, to store ([`read_stored_open_mandate`] reads it
/// back).
pub fn sd_jwt(open: &OpenMandate) -> &str {
    open.sd_jwt()
}
