//! Funding an escrow from a signed verdict.
//!
//! `POST /v1/escrows` locks a buyer's money for a seller. It is backed by a decision: an
//! unexpired `allow` of that buyer for exactly the same amount, currency and recipient.
//! [`FundingRequest::from_json`] parses the body at the edge and [`check_funding`] is the
//! whole rule, a pure function of the request, the decision's claims and `now`. That a
//! decision funds at most one escrow (its nonce is spent) is the server's to enforce, with
//! a unique key; [`FundingError::Spent`] is its message.

use serde_json::Value;
use time::OffsetDateTime;

use crate::amount::Amount;
use crate::claims::VerdictClaims;
use crate::field::{FieldError, amount, check_fields, invalid, object, present, required, string};
use crate::id::{AgentId, DecisionId};
use crate::names::{Currency, Recipient};
use crate::policy::Verdict;

/// The longest `arbiter` accepted, in characters.
pub const MAX_ARBITER_CHARS: usize = 128;

/// The body of `POST /v1/escrows`, parsed at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FundingRequest {
    /// The amount to lock, exactly the decision's.
    pub amount: Amount,
    /// Its currency, exactly the decision's.
    pub currency: Currency,
    /// The agent whose funds are locked: the decision's agent.
    pub buyer: AgentId,
    /// Who is paid on release: the decision's recipient.
    pub seller: Recipient,
    /// The `allow` decision that backs the escrow.
    pub decision: DecisionId,
    /// A party named to settle disputes: stored and returned, never read.
    pub arbiter: Option<String>,
}

impl FundingRequest {
    /// Parses the body, naming the field in every error.
    pub fn from_json(body: &Value) -> Result<Self, FieldError> {
        let fields = object(body)?;
        check_fields(
            fields,
            "",
            &[
                "amount", "currency", "buyer", "seller", "decision", "arbiter",
            ],
            &["id", "escrow", "state", "disputed", "history", "created_at"],
        )?;
        let text =
            |key: &str| -> Result<&str, FieldError> { string(required(fields, key, key)?, key) };
        let amount = amount(required(fields, "amount", "amount")?, "amount")?;
        let currency = Currency::parse(text("currency")?).map_err(|e| invalid("currency", e))?;
        let buyer = AgentId::parse(text("buyer")?)
            .map_err(|_| invalid("buyer", "must be an agent id, agt_<name>"))?;
        let seller = Recipient::parse(text("seller")?).map_err(|e| invalid("seller", e))?;
        let decision = DecisionId::parse(text("decision")?)
            .map_err(|_| invalid("decision", "must be a decision id, dec_…"))?;
        let arbiter = match present(fields, "arbiter") {
            None => None,
            Some(value) => Some(parse_arbiter(string(value, "arbiter")?)?),
        };
        Ok(Self {
            amount,
            currency,
            buyer,
            seller,
            decision,
            arbiter,
        })
    }
}

fn parse_arbiter(text: &str) -> Result<String, FieldError> {
    let count = text.chars().count();
    if count == 0 || count > MAX_ARBITER_CHARS || text.chars().any(char::is_control) {
        return Err(invalid(
            "arbiter",
            format!("must be 1 to {MAX_ARBITER_CHARS} characters, without control characters"),
        ));
    }
    Ok(text.to_owned())
}

/// Why a decision cannot fund the escrow asked for. Each message names the numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FundingError {
    /// The decision was made for another agent.
    #[error("decision {decision} was made for {agent}, not for the buyer {buyer}")]
    WrongBuyer {
        /// The decision.
        decision: DecisionId,
        /// Its agent.
        agent: AgentId,
        /// The buyer asked for.
        buyer: AgentId,
    },
    /// The decision's verdict is not `allow`.
    #[error("decision {decision} has verdict {verdict}; only an allow decision funds an escrow")]
    NotAllowed {
        /// The decision.
        decision: DecisionId,
        /// Its verdict.
        verdict: Verdict,
    },
    /// The verdict's five minutes are over.
    #[error(
        "decision {decision} expired at {expired_at}; a verdict funds an escrow only within 300 seconds of issue"
    )]
    Expired {
        /// The decision.
        decision: DecisionId,
        /// Its `exp`, RFC 3339.
        expired_at: String,
    },
    /// The amount differs from the decision's.
    #[error("amount {amount} does not match decision {decision}, which allows {allowed}")]
    WrongAmount {
        /// The decision.
        decision: DecisionId,
        /// The amount asked for.
        amount: Amount,
        /// The decision's amount.
        allowed: Amount,
    },
    /// The currency differs from the decision's.
    #[error("currency {currency} does not match decision {decision}, which is in {allowed}")]
    WrongCurrency {
        /// The decision.
        decision: DecisionId,
        /// The currency asked for.
        currency: Currency,
        /// The decision's currency.
        allowed: Currency,
    },
    /// The seller is not the decision's recipient.
    #[error("seller {seller} does not match decision {decision}, whose recipient is {recipient}")]
    WrongSeller {
        /// The decision.
        decision: DecisionId,
        /// The seller asked for.
        seller: Recipient,
        /// The decision's recipient.
        recipient: Recipient,
    },
    /// The decision already funded an escrow: its nonce is spent.
    #[error(
        "decision {decision} has already funded an escrow (its nonce is spent); each decision funds at most one escrow"
    )]
    Spent {
        /// The decision.
        decision: DecisionId,
    },
}

/// Whether the decision with `claims` may fund `request` at `now`: an unexpired `allow`
/// (`now < exp`) of the buyer for the same amount (exact decimal equality, so `12.5`
/// matches `12.50`), currency and recipient. The first rule that fails is reported.
pub fn check_funding(
    request: &FundingRequest,
    claims: &VerdictClaims,
    now: OffsetDateTime,
) -> Result<(), FundingError> {
    let decision = claims.jti.clone();
    let asked = &claims.request;
    if asked.agent != request.buyer {
        return Err(FundingError::WrongBuyer {
            decision,
            agent: asked.agent.clone(),
            buyer: request.buyer.clone(),
        });
    }
    if claims.verdict != Verdict::Allow {
        return Err(FundingError::NotAllowed {
            decision,
            verdict: claims.verdict,
        });
    }
    if now.unix_timestamp() >= claims.exp {
        let expired_at = OffsetDateTime::from_unix_timestamp(claims.exp)
            .map(crate::timefmt::format)
            .unwrap_or_else(|_| claims.exp.to_string());
        return Err(FundingError::Expired {
            decision,
            expired_at,
        });
    }
    if asked.amount != request.amount {
        return Err(FundingError::WrongAmount {
            decision,
            amount: request.amount,
            allowed: asked.amount,
        });
    }
    if asked.currency != request.currency {
        return Err(FundingError::WrongCurrency {
            decision,
            currency: request.currency.clone(),
            allowed: asked.currency.clone(),
        });
    }
    if asked.recipient != request.seller {
        return Err(FundingError::WrongSeller {
            decision,
            seller: request.seller.clone(),
            recipient: asked.recipient.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::id::Nonce;
    use crate::policy::AuthorizationRequest;

    const NOW: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);

    fn claims(verdict: Verdict) -> VerdictClaims {
        let iat = NOW.unix_timestamp();
        VerdictClaims {
            bindings: crate::claims::Bindings::default(),
            iss: "https://verdicts.example".into(),
            jti: DecisionId::parse("dec_one").unwrap(),
            iat,
            exp: iat + 300,
            verdict,
            policy_verdict: verdict,
            mandate: None,
            policy_version: "pol_2026-11-22.1".into(),
            nonce: Nonce::parse("n_one").unwrap(),
            request: AuthorizationRequest {
                agent: AgentId::parse("agt_buyer").unwrap(),
                amount: Amount::parse("12.50").unwrap(),
                currency: Currency::parse("USD").unwrap(),
                recipient: Recipient::parse("vendor:acme").unwrap(),
                category: crate::names::Category::parse("software").unwrap(),
            },
        }
    }

    fn request(body: &str) -> Result<FundingRequest, FieldError> {
        FundingRequest::from_json(&serde_json::from_str(body).unwrap())
    }

    fn good() -> FundingRequest {
        request(r#"{"amount": 12.5, "currency": "USD", "buyer": "agt_buyer", "seller": "vendor:acme", "decision": "dec_one"}"#).unwrap()
    }

    #[test]
    fn an_unexpired_allow_for_the_same_terms_funds() {
        assert_eq!(check_funding(&good(), &claims(Verdict::Allow), NOW), Ok(()));
        let last_second = NOW + time::Duration::seconds(299);
        assert_eq!(
            check_funding(&good(), &claims(Verdict::Allow), last_second),
            Ok(())
        );
    }

    #[test]
    fn each_rule_refuses_with_its_numbers() {
        let allow = claims(Verdict::Allow);
        let at_exp = NOW + time::Duration::seconds(300);
        let expired = check_funding(&good(), &allow, at_exp).unwrap_err();
        assert_eq!(
            expired.to_string(),
            "decision dec_one expired at 2026-11-22T12:05:00Z; a verdict funds an escrow only within 300 seconds of issue"
        );
        let review = check_funding(&good(), &claims(Verdict::Review), NOW).unwrap_err();
        assert!(matches!(review, FundingError::NotAllowed { .. }));
        let mut other = good();
        other.amount = Amount::parse("12.51").unwrap();
        assert_eq!(
            check_funding(&other, &allow, NOW).unwrap_err().to_string(),
            "amount 12.51 does not match decision dec_one, which allows 12.50"
        );
        let mut other = good();
        other.currency = Currency::parse("EUR").unwrap();
        assert!(matches!(
            check_funding(&other, &allow, NOW),
            Err(FundingError::WrongCurrency { .. })
        ));
        let mut other = good();
        other.seller = Recipient::parse("vendor:other").unwrap();
        assert!(matches!(
            check_funding(&other, &allow, NOW),
            Err(FundingError::WrongSeller { .. })
        ));
        let mut other = good();
        other.buyer = AgentId::parse("agt_someone").unwrap();
        assert_eq!(
            check_funding(&other, &allow, NOW).unwrap_err().to_string(),
            "decision dec_one was made for agt_buyer, not for the buyer agt_someone"
        );
    }

    #[test]
    fn bodies_are_parsed_at_the_edge() {
        let with_arbiter = request(r#"{"amount": 1, "currency": "USD", "buyer": "agt_b", "seller": "vendor:s", "decision": "dec_d", "arbiter": "role:legal"}"#).unwrap();
        assert_eq!(with_arbiter.arbiter.as_deref(), Some("role:legal"));
        let cases = [
            (
                r#"{"currency": "USD", "buyer": "agt_b", "seller": "vendor:s", "decision": "dec_d"}"#,
                "amount is required",
            ),
            (
                r#"{"amount": "1", "currency": "USD", "buyer": "agt_b", "seller": "vendor:s", "decision": "dec_d"}"#,
                "amount must be a plain decimal number such as 12.50",
            ),
            (
                r#"{"amount": 1, "currency": "usd", "buyer": "agt_b", "seller": "vendor:s", "decision": "dec_d"}"#,
                "currency must be three upper-case letters, for example USD",
            ),
            (
                r#"{"amount": 1, "currency": "USD", "buyer": "b", "seller": "vendor:s", "decision": "dec_d"}"#,
                "buyer must be an agent id, agt_<name>",
            ),
            (
                r#"{"amount": 1, "currency": "USD", "buyer": "agt_b", "seller": "acme", "decision": "dec_d"}"#,
                "seller must be vendor:<name>, where name is 1 to 128 characters of [A-Za-z0-9._-]",
            ),
            (
                r#"{"amount": 1, "currency": "USD", "buyer": "agt_b", "seller": "vendor:s", "decision": "rev_d"}"#,
                "decision must be a decision id, dec_…",
            ),
            (
                r#"{"amount": 1, "currency": "USD", "buyer": "agt_b", "seller": "vendor:s", "decision": "dec_d", "arbiter": ""}"#,
                "arbiter must be 1 to 128 characters, without control characters",
            ),
            (
                r#"{"amount": 1, "currency": "USD", "buyer": "agt_b", "seller": "vendor:s", "decision": "dec_d", "state": "released"}"#,
                "state is read-only and cannot be set",
            ),
            (
                r#"{"amount": 1, "currency": "USD", "buyer": "agt_b", "seller": "vendor:s", "decision": "dec_d", "memo": 1}"#,
                "unknown field memo",
            ),
        ];
        for (body, message) in cases {
            assert_eq!(request(body).unwrap_err().to_string(), message, "{body}");
        }
    }
}
