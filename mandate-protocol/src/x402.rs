//! x402 payments (github.com/coinbase/x402, protocol version 2) as a verdict binds them.
//!
//! A request to `POST /v1/authorizations` may name the x402 payment it is for: its
//! `PaymentRequirements` (one element of a `PaymentRequired`'s `accepts`), or the client's
//! `PaymentPayload`, whose `accepted` member is those requirements. The verdict then
//! carries the `x402_payment` claim, [`digest`] of the five members that say what
//! is paid to whom: `scheme`, `network`, `asset`, `amount` and `payTo`. Everything else
//! (`maxTimeoutSeconds`, `extra`, the payload's signature, `resource`, `extensions`) is not
//! digested: it does not change what is paid.
//!
//! The digest is the base64url (no padding) SHA-256 of the canonical JSON of an object
//! holding exactly those five members as strings, canonical as RFC 8785 (JCS) writes it:
//! members sorted by name (`amount`, `asset`, `network`, `payTo`, `scheme`), no
//! whitespace, strings escaped as JSON requires and nothing more. For example
//! `{"amount":"10000","asset":"0x036C…","network":"eip155:84532","payTo":"0x2096…","scheme":"exact"}`.
//! Any JCS implementation computes the same bytes; [`canonical_json`] gives them.
//!
//! The `asset` is read as x402 defines it (`asset::Asset`): an ISO 4217 code (fiat, in any
//! letter case, with spaces around it or an `iso4217:` prefix), an on-chain address of the
//! shapes x402's schemes use, or a CAIP-19 asset id, all in ASCII; any other spelling is
//! refused when the requirements are read.
//!
//! [`consistency`] says what of a payment can be checked against a
//! request (amount, currency, recipient) and what cannot: the recipient must be
//! `vendor:<payTo>`; a fiat `asset` must be the request's currency; the `amount` is in
//! the asset's atomic units, so it is compared with the request's amount where the
//! asset's decimals are known: a currency's are its ISO 4217 minor units, a token's those
//! its verifier gives, or its server's operator lists ([`ListedAssets`]).
//!
//! Schemes: `exact` pays `amount`. `upto` ([`is_upto`]) lets the
//! client sign a maximum, `amount`, and the resource server settle at most that: the
//! request is decided on the maximum and the verdict bound to the requirements the
//! client signed (with the maximum), like `exact`; the verifier settling it checks the
//! settled amount is at most the signed one ([`crate::counterparty::Counterparty::check`]). Any other
//! scheme is bound the same way and read as `exact`.

use rust_decimal::Decimal;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::amount::Amount;
use crate::field::{FieldError, invalid};
use crate::names::{Currency, Recipient};

pub(crate) mod asset;

use asset::Asset;
pub use asset::{ListedAssets, MAX_DECIMALS};

/// The longest member this reads (an address, a CAIP-2 network, an atomic amount are far
/// shorter): a bound on what is hashed and stored.
const MAX_MEMBER_LEN: usize = 512;

/// The members of an x402 v2 `PaymentRequirements` a verdict binds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentRequirements {
    /// The payment scheme, for example `exact`.
    pub scheme: String,
    /// The network, CAIP-2, for example `eip155:8453`.
    pub network: String,
    /// The token's address (or CAIP-19 id), or an ISO 4217 code for fiat, in ASCII (the
    /// spellings docs/protocols.md lists).
    pub asset: String,
    /// The amount in the asset's atomic units: decimal digits.
    pub amount: String,
    /// Who is paid: an address (`payTo`).
    pub pay_to: String,
}

/// How a payment's requirements disagree with the request (or the transaction) they are
/// said to be for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Inconsistency {
    /// The recipient is not `vendor:<payTo>`.
    #[error("recipient {recipient} is not vendor:{pay_to}, the x402 payTo")]
    PayTo {
        /// The x402 `payTo`.
        pay_to: String,
        /// The request's recipient.
        recipient: Recipient,
    },
    /// A fiat asset that is not the request's currency.
    #[error("currency {currency} is not the x402 asset {asset}")]
    Asset {
        /// The x402 `asset`.
        asset: String,
        /// The request's currency.
        currency: Currency,
    },
    /// The asset is spelled in none of the ways an x402 asset is (docs/protocols.md): it names
    /// no currency or token Mandate can tell.
    #[error("asset: {why}")]
    Spelling {
        /// The x402 `asset`.
        asset: String,
        /// Why it is none, and what an asset is.
        why: String,
    },
    /// The atomic amount is not the request's amount in the asset's decimals.
    #[error(
        "amount {expected} is {} atomic units at {decimals} decimals, not the x402 amount {atomic}",
        atomic_units(*expected, *decimals).map_or_else(|| "more".to_owned(), |d| d.to_string())
    )]
    Amount {
        /// The x402 `amount`, atomic units.
        atomic: String,
        /// The asset's decimals used to convert.
        decimals: u32,
        /// The amount it was compared with.
        expected: Amount,
    },
}

impl PaymentRequirements {
    /// Reads the requirements from an x402 object found at `path` (a field name for the
    /// error messages, such as `x402`): a `PaymentRequirements`, or a `PaymentPayload` (an
    /// object with `accepted`), whose `accepted` requirements are read. A
    /// `PaymentRequired` (with `accepts`, a list) is refused: the payment is one of them,
    /// chosen by the client. Members other than the five bound ones are not read.
    pub fn from_json(value: &Value, path: &str) -> Result<Self, FieldError> {
        let object = value.as_object().ok_or_else(|| {
            invalid(
                path,
                "must be an x402 PaymentRequirements or PaymentPayload object",
            )
        })?;
        if object.contains_key("accepts") {
            return Err(invalid(
                path,
                "is a PaymentRequired (with accepts): send the one PaymentRequirements chosen from accepts, or the PaymentPayload",
            ));
        }
        if let Some(version) = object.get("x402Version")
            && version.as_f64() != Some(2.0)
        {
            return Err(invalid(
                &format!("{path}.x402Version"),
                "must be 2: only x402 protocol version 2 is read",
            ));
        }
        match object.get("accepted") {
            Some(accepted) => {
                let path = format!("{path}.accepted");
                let inner = accepted
                    .as_object()
                    .ok_or_else(|| invalid(&path, "must be a PaymentRequirements object"))?;
                Self::from_members(inner, &path)
            }
            None => Self::from_members(object, path),
        }
    }

    fn from_members(object: &Map<String, Value>, path: &str) -> Result<Self, FieldError> {
        let member = |key: &str| -> Result<String, FieldError> {
            let field = format!("{path}.{key}");
            let text = object
                .get(key)
                .filter(|v| !v.is_null())
                .ok_or(FieldError::Missing(field.clone()))?
                .as_str()
                .ok_or_else(|| invalid(&field, "must be a string"))?;
            if text.is_empty() || text.chars().count() > MAX_MEMBER_LEN {
                return Err(invalid(
                    &field,
                    format!("must be 1 to {MAX_MEMBER_LEN} characters"),
                ));
            }
            Ok(text.to_owned())
        };
        let requirements = Self {
            scheme: member("scheme")?,
            network: member("network")?,
            asset: member("asset")?,
            amount: member("amount")?,
            pay_to: member("payTo")?,
        };
        asset::read(&requirements.asset).map_err(|why| {
            invalid(
                &format!("{path}.asset"),
                format!("must be an x402 asset: {why}"),
            )
        })?;
        let digits = requirements.amount.bytes().all(|b| b.is_ascii_digit());
        if !digits || (requirements.amount.len() > 1 && requirements.amount.starts_with('0')) {
            return Err(invalid(
                &format!("{path}.amount"),
                "must be the amount in the asset's atomic units: a string of decimal digits without leading zeros, such as \"10000\"",
            ));
        }
        Ok(requirements)
    }

    /// The canonical JSON of the five bound members (see the module documentation).
    pub(crate) fn canonical_json(&self) -> String {
        // Written by hand in JCS order; serde_json's string escaping is JCS's for strings.
        let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
        format!(
            "{{\"amount\":{},\"asset\":{},\"network\":{},\"payTo\":{},\"scheme\":{}}}",
            text(&self.amount),
            text(&self.asset),
            text(&self.network),
            text(&self.pay_to),
            text(&self.scheme),
        )
    }

    /// The `x402_payment` claim of a verdict for this payment: base64url (no padding)
    /// SHA-256 of [`canonical_json`].
    pub(crate) fn digest(&self) -> String {
        payment_digest(self)
    }

    /// Whether the asset is fiat: an ISO 4217 code in one of the spellings x402's fiat
    /// form takes (letter case, spaces around it, an `iso4217:` prefix: `USD`, `usd`,
    /// `" EUR"`, `iso4217:EUR`; [`asset`]), which the request's currency must then be.
    pub(crate) fn is_fiat(&self) -> bool {
        matches!(asset::read(&self.asset), Ok(Asset::Fiat(_)))
    }

    /// Whether the scheme is `upto`: the client signs a maximum (this `amount`) and the
    /// settled amount is at most that. A verdict for it is decided on the maximum; the
    /// verifier settling it compares the settled amount with the signed maximum.
    pub(crate) fn is_upto(&self) -> bool {
        self.scheme == "upto"
    }

    /// What in this payment disagrees with a request (or transaction) of `amount`,
    /// `currency` and `recipient`: the recipient must be `vendor:<payTo>` (an EVM address,
    /// `0x` and 40 hex digits, compared without regard to case, as EVM addresses are); the
    /// asset must be spelled as an x402 asset is (`asset::Asset`), and a fiat one
    /// ([`is_fiat`](Self::is_fiat)) must be the currency; with `decimals` (the asset's; for
    /// fiat, when not given, its ISO 4217 minor units), the atomic amount must be `amount` ×
    /// 10^decimals exactly. Without decimals the amount is not compared (its digest still
    /// binds it). For `upto` requirements the atomic amount is the maximum, and `amount`
    /// the one decided (the maximum too).
    pub(crate) fn consistency(
        &self,
        amount: Amount,
        currency: &Currency,
        recipient: &Recipient,
        decimals: Option<u32>,
    ) -> Vec<Inconsistency> {
        let mut out = Vec::new();
        let name = recipient
            .as_str()
            .strip_prefix("vendor:")
            .unwrap_or_default();
        let same = if is_evm_address(&self.pay_to) {
            name.eq_ignore_ascii_case(&self.pay_to)
        } else {
            name == self.pay_to
        };
        if !same {
            out.push(Inconsistency::PayTo {
                pay_to: self.pay_to.clone(),
                recipient: recipient.clone(),
            });
        }
        let fiat = match asset::read(&self.asset) {
            Ok(Asset::Fiat(code)) => Some(code),
            Ok(Asset::OnChain) => None,
            Err(why) => {
                out.push(Inconsistency::Spelling {
                    asset: self.asset.clone(),
                    why,
                });
                None
            }
        };
        if let Some(code) = &fiat
            && code != currency
        {
            out.push(Inconsistency::Asset {
                asset: self.asset.clone(),
                currency: currency.clone(),
            });
        }
        let minor_units = fiat.and_then(|code| crate::ap2::minor_unit_exponent(code.as_str()));
        if let Some(decimals) = decimals.or(minor_units) {
            let atomic = self.amount.parse::<Decimal>().ok();
            if atomic.is_none() || atomic != atomic_units(amount, decimals) {
                out.push(Inconsistency::Amount {
                    atomic: self.amount.clone(),
                    decimals,
                    expected: amount,
                });
            }
        }
        out
    }
}

/// `amount` in atomic units of an asset with `decimals` decimals (`None` when it is not a
/// whole number of them, or too large to hold).
fn atomic_units(amount: Amount, decimals: u32) -> Option<Decimal> {
    let mut atomic = amount.value();
    for _ in 0..decimals {
        atomic = atomic.checked_mul(Decimal::TEN)?;
    }
    (atomic.fract().is_zero()).then(|| atomic.normalize())
}

fn is_evm_address(text: &str) -> bool {
    text.len() == 42
        && text.starts_with("0x")
        && text.bytes().skip(2).all(|b| b.is_ascii_hexdigit())
}

/// The `x402_payment` claim for a payment: base64url (no padding) SHA-256 of
/// [`canonical_json`]. A verifier holding the payment computes the
/// same value and compares.
pub(crate) fn payment_digest(requirements: &PaymentRequirements) -> String {
    use base64::Engine;
    let hash = Sha256::digest(requirements.canonical_json().as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash)
}

// What Mandate's server and CLI compute with this module's types beyond their methods
// an embedder sees through mandate-core.

/// The canonical JSON of the five bound members (`amount`, `asset`, `network`,
/// `payTo`, `scheme`, sorted, no whitespace).
pub fn canonical_json(requirements: &PaymentRequirements) -> String {
    requirements.canonical_json()
}

/// The `x402_payment` claim of a verdict for this payment: base64url (no padding)
/// SHA-256 of [`canonical_json`].
pub fn digest(requirements: &PaymentRequirements) -> String {
    requirements.digest()
}

/// The decimals of the requirements' asset where they are known: an ISO 4217
/// currency's minor units, or those `listed` gives the token on the requirements'
/// network (or on every network); `None` otherwise.
pub fn known_decimals(listed: &ListedAssets, requirements: &PaymentRequirements) -> Option<u32> {
    listed.decimals(&requirements.network, &requirements.asset)
}

/// Whether the asset is fiat: an ISO 4217 code in one of x402's spellings, which the
/// request's currency must then be.
pub fn is_fiat(requirements: &PaymentRequirements) -> bool {
    requirements.is_fiat()
}

/// Whether the scheme is `upto`: the amount is a maximum.
pub fn is_upto(requirements: &PaymentRequirements) -> bool {
    requirements.is_upto()
}

/// What in the payment disagrees with a request of `amount`, `currency` and
/// `recipient` (with the asset's `decimals`, the atomic amount too).
pub fn consistency(
    requirements: &PaymentRequirements,
    amount: Amount,
    currency: &Currency,
    recipient: &Recipient,
    decimals: Option<u32>,
) -> Vec<Inconsistency> {
    requirements.consistency(amount, currency, recipient, decimals)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec_requirements() -> Value {
        // x402-specification-v2.md, 5.1.1.
        json!({
            "scheme": "exact",
            "network": "eip155:84532",
            "amount": "10000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "maxTimeoutSeconds": 60,
            "extra": {"name": "USDC", "version": "2"}
        })
    }

    #[test]
    fn the_digest_is_sha256_of_the_canonical_five_members() {
        let r = PaymentRequirements::from_json(&spec_requirements(), "x402").unwrap();
        assert_eq!(
            r.canonical_json(),
            "{\"amount\":\"10000\",\"asset\":\"0x036CbD53842c5426634e7929541eC2318f3dCF7e\",\"network\":\"eip155:84532\",\"payTo\":\"0x209693Bc6afc0C5328bA36FaF03C514EF312287C\",\"scheme\":\"exact\"}"
        );
        // Computed independently: python3, json.dumps(sort_keys=True, separators=(',', ':')).
        assert_eq!(r.digest(), "2u1cFoO7_fCOiDQOEyglGLApNutTyhsbWfIXO6jXLEo");
        // A payload's `accepted` gives the same payment; unbound members change nothing.
        let mut other = spec_requirements();
        other["maxTimeoutSeconds"] = json!(5);
        other["extra"] = json!({});
        let payload = json!({"x402Version": 2, "accepted": other, "payload": {"signature": "0x"}});
        let p = PaymentRequirements::from_json(&payload, "x402").unwrap();
        assert_eq!(p.digest(), r.digest());
        // Each bound member changes it.
        for key in ["scheme", "network", "amount", "asset", "payTo"] {
            let mut changed = spec_requirements();
            changed[key] = json!(format!("{}1", changed[key].as_str().unwrap()));
            let c = PaymentRequirements::from_json(&changed, "x402").unwrap();
            assert_ne!(c.digest(), r.digest(), "{key}");
        }
    }

    #[test]
    fn malformed_requirements_are_refused_naming_the_member() {
        let cases = [
            (json!("x"), "x402"),
            (json!({"accepts": [spec_requirements()]}), "x402"),
            (
                json!({"x402Version": 1, "accepted": spec_requirements()}),
                "x402.x402Version",
            ),
            (json!({"accepted": "no"}), "x402.accepted"),
            (json!({"scheme": "exact"}), "x402.network"),
        ];
        for (value, field) in cases {
            let e = PaymentRequirements::from_json(&value, "x402").unwrap_err();
            assert!(e.to_string().starts_with(field), "{e} for {value}");
        }
        for (key, bad) in [
            ("amount", json!("1.5")),
            ("amount", json!("0100")),
            ("amount", json!(100)),
            ("payTo", json!("")),
            ("asset", json!(null)),
        ] {
            let mut value = spec_requirements();
            value[key] = bad.clone();
            let e = PaymentRequirements::from_json(&value, "x402").unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("x402.{key}")),
                "{e} for {bad}"
            );
        }
    }

    #[test]
    fn consistency_compares_recipient_fiat_asset_and_amount_at_the_decimals() {
        let r = PaymentRequirements::from_json(&spec_requirements(), "x402").unwrap();
        let usd = Currency::parse("USD").unwrap();
        let lower = Recipient::parse("vendor:0x209693bc6afc0c5328ba36faf03c514ef312287c").unwrap();
        let cent = Amount::parse("0.010").unwrap();
        assert_eq!(r.consistency(cent, &usd, &lower, Some(6)), vec![]);
        assert_eq!(
            r.consistency(Amount::parse("0.02").unwrap(), &usd, &lower, None),
            vec![]
        );
        let wrong = r.consistency(Amount::parse("0.02").unwrap(), &usd, &lower, Some(6));
        assert!(matches!(
            wrong.as_slice(),
            [Inconsistency::Amount { decimals: 6, .. }]
        ));
        // Not a whole number of atomic units.
        let tiny = r.consistency(Amount::parse("0.0100001").unwrap(), &usd, &lower, Some(6));
        assert_eq!(tiny.len(), 1);
        let acme = Recipient::parse("vendor:acme").unwrap();
        assert!(matches!(
            r.consistency(cent, &usd, &acme, Some(6)).as_slice(),
            [Inconsistency::PayTo { .. }]
        ));
        // Fiat: the asset is the currency, the atomic units its minor units.
        let mut fiat = r.clone();
        fiat.asset = "EUR".into();
        fiat.amount = "1250".into();
        fiat.pay_to = "merchant-7".into();
        let m7 = Recipient::parse("vendor:merchant-7").unwrap();
        let eur = Currency::parse("EUR").unwrap();
        let amount = Amount::parse("12.50").unwrap();
        assert_eq!(fiat.consistency(amount, &eur, &m7, Some(2)), vec![]);
        assert!(matches!(
            fiat.consistency(amount, &usd, &m7, Some(2)).as_slice(),
            [Inconsistency::Asset { .. }]
        ));
        // A name other than an EVM address is compared exactly.
        let upper = Recipient::parse("vendor:Merchant-7").unwrap();
        assert_eq!(fiat.consistency(amount, &eur, &upper, None).len(), 1);
    }

    #[test]
    fn an_asset_spelling_an_iso_4217_code_in_any_way_is_the_currency() {
        let mut r = PaymentRequirements::from_json(&spec_requirements(), "x402").unwrap();
        r.pay_to = "merchant-7".into();
        // 12.50 in cents, the minor units of EUR and USD.
        r.amount = "1250".into();
        let m7 = Recipient::parse("vendor:merchant-7").unwrap();
        let (eur, usd) = (
            Currency::parse("EUR").unwrap(),
            Currency::parse("USD").unwrap(),
        );
        let amount = Amount::parse("12.50").unwrap();
        for asset in [
            "EUR",
            "eur",
            " EUR",
            "EUR ",
            "Eur",
            "iso4217:EUR",
            "ISO4217:eur",
            "iso4217: EUR",
            " iso4217:EUR ",
        ] {
            r.asset = asset.into();
            assert!(r.is_fiat(), "{asset:?}");
            assert_eq!(r.consistency(amount, &eur, &m7, None), vec![], "{asset:?}");
            assert!(
                matches!(
                    r.consistency(amount, &usd, &m7, None).as_slice(),
                    [Inconsistency::Asset { .. }]
                ),
                "{asset:?}"
            );
        }
        // A contract address, a CAIP-19 id: not fiat, not compared with the currency.
        for asset in [
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "eip155:8453/erc20:0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        ] {
            r.asset = asset.into();
            assert!(!r.is_fiat(), "{asset:?}");
            assert_eq!(r.consistency(amount, &usd, &m7, None), vec![], "{asset:?}");
        }
        // Any other spelling names nothing Mandate can tell: neither fiat nor a token,
        // refused whatever the currency (an iso4217: asset naming no code, a token's
        // symbol, a look-alike of a code: #67).
        for asset in [
            "iso4217:XYZ",
            "USDC",
            "usd coin",
            "ＥＵＲ",
            "EUR\u{200b}",
            "fiat:EUR",
            "\u{395}UR",
        ] {
            r.asset = asset.into();
            assert!(!r.is_fiat(), "{asset:?}");
            for currency in [&usd, &eur] {
                assert!(
                    matches!(
                        r.consistency(amount, currency, &m7, None).as_slice(),
                        [Inconsistency::Spelling { .. }]
                    ),
                    "{asset:?}"
                );
            }
        }
    }

    #[test]
    fn an_asset_in_no_x402_spelling_is_refused_when_read() {
        for asset in [
            "ＥＵＲ",
            "EUR\0",
            "iso-4217:EUR",
            "ISO 4217:EUR",
            "EU R",
            "ÉUR",
            "USDC",
        ] {
            let mut value = spec_requirements();
            value["asset"] = json!(asset);
            let e = PaymentRequirements::from_json(&value, "x402").unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("x402.asset must be an x402 asset: "),
                "{e} for {asset:?}"
            );
            let payload = json!({"x402Version": 2, "accepted": value});
            let e = PaymentRequirements::from_json(&payload, "x402").unwrap_err();
            assert!(
                e.to_string().starts_with("x402.accepted.asset must be"),
                "{e} for {asset:?}"
            );
        }
    }

    #[test]
    fn a_fiat_amount_is_compared_at_its_minor_units_without_decimals_given() {
        let mut r = PaymentRequirements::from_json(&spec_requirements(), "x402").unwrap();
        r.pay_to = "merchant".into();
        let to = Recipient::parse("vendor:merchant").unwrap();
        let usd = Currency::parse("USD").unwrap();
        r.asset = "USD".into();
        r.amount = "10000000".into();
        // 100000 USD in cents is not 0.01 USD.
        assert!(matches!(
            r.consistency(Amount::parse("0.01").unwrap(), &usd, &to, None)
                .as_slice(),
            [Inconsistency::Amount { decimals: 2, .. }]
        ));
        assert_eq!(
            r.consistency(Amount::parse("100000").unwrap(), &usd, &to, None),
            vec![]
        );
        // Zero and three decimals: JPY, KWD.
        r.asset = "iso4217:jpy".into();
        r.amount = "500".into();
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(
            r.consistency(Amount::parse("500").unwrap(), &jpy, &to, None),
            vec![]
        );
        r.asset = "KWD".into();
        let kwd = Currency::parse("KWD").unwrap();
        assert_eq!(
            r.consistency(Amount::parse("0.5").unwrap(), &kwd, &to, None),
            vec![]
        );
        assert_eq!(
            r.consistency(Amount::parse("500").unwrap(), &kwd, &to, None)
                .len(),
            1
        );
    }

    #[test]
    fn upto_requirements_are_read_and_bound_like_exact() {
        // scheme_upto_evm.md's PaymentPayload: the client signs a maximum of 5 USDC.
        let mut accepted = spec_requirements();
        accepted["scheme"] = json!("upto");
        accepted["amount"] = json!("5000000");
        let payload = json!({"x402Version": 2, "accepted": accepted,
                             "payload": {"signature": "0x2d", "permit2Authorization": {}}});
        let r = PaymentRequirements::from_json(&payload, "x402").unwrap();
        assert!(r.is_upto());
        assert!(
            !PaymentRequirements::from_json(&spec_requirements(), "x402")
                .unwrap()
                .is_upto()
        );
        assert_eq!(
            r.canonical_json(),
            "{\"amount\":\"5000000\",\"asset\":\"0x036CbD53842c5426634e7929541eC2318f3dCF7e\",\"network\":\"eip155:84532\",\"payTo\":\"0x209693Bc6afc0C5328bA36FaF03C514EF312287C\",\"scheme\":\"upto\"}"
        );
        let usd = Currency::parse("USD").unwrap();
        let to = Recipient::parse("vendor:0x209693Bc6afc0C5328bA36FaF03C514EF312287C").unwrap();
        // Decided on the maximum: 5 USDC at 6 decimals.
        assert_eq!(
            r.consistency(Amount::parse("5").unwrap(), &usd, &to, Some(6)),
            vec![]
        );
        assert_eq!(
            r.consistency(Amount::parse("4.99").unwrap(), &usd, &to, Some(6))
                .len(),
            1
        );
    }
}
