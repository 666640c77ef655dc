//! The request the engine judges: the body of `POST /v1/authorizations`, parsed at the
//! edge into exact, checked values.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::amount::Amount;
use crate::field::{FieldError, amount, check_fields, invalid, object, required, string};
use crate::id::AgentId;
use crate::names::{Category, Currency, Recipient};

/// An agent's request to spend, parsed at the edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationRequest {
    /// The agent asking (from its key, not from the body).
    pub agent: AgentId,
    /// The amount, exact.
    pub amount: Amount,
    /// The currency of the amount.
    pub currency: Currency,
    /// Who is to be paid, `vendor:<name>`.
    pub recipient: Recipient,
    /// The spending category.
    pub category: Category,
}

impl AuthorizationRequest {
    /// Parses the body of `POST /v1/authorizations` for `agent`, naming the field in every
    /// error.
    pub fn from_json(agent: AgentId, body: &Value) -> Result<Self, FieldError> {
        let fields = object(body)?;
        check_fields(
            fields,
            "",
            &["amount", "currency", "recipient", "category"],
            &["agent", "id", "verdict"],
        )?;
        Self::build(
            agent,
            || amount(required(fields, "amount", "amount")?, "amount"),
            || string(required(fields, "currency", "currency")?, "currency"),
            || string(required(fields, "recipient", "recipient")?, "recipient"),
            || string(required(fields, "category", "category")?, "category"),
        )
    }

    /// The checks after parsing, shared by [`AuthorizationRequest::from_json`] and
    /// [`AuthorizationRequest::from_json_bytes`]: each field is read (by its closure) and
    /// checked in this order, so the first problem found is the one reported.
    fn build<'a>(
        agent: AgentId,
        amount: impl FnOnce() -> Result<Amount, FieldError>,
        currency: impl FnOnce() -> Result<&'a str, FieldError>,
        recipient: impl FnOnce() -> Result<&'a str, FieldError>,
        category: impl FnOnce() -> Result<&'a str, FieldError>,
    ) -> Result<Self, FieldError> {
        let amount = amount()?;
        let currency = Currency::parse(currency()?).map_err(|e| invalid("currency", e))?;
        let recipient = Recipient::parse(recipient()?).map_err(|e| invalid("recipient", e))?;
        let category = Category::parse(category()?).map_err(|e| invalid("category", e))?;
        Ok(Self {
            agent,
            amount,
            currency,
            recipient,
            category,
        })
    }
}

/// Why the bytes of a `POST /v1/authorizations` body do not make a request: the same
/// errors as any body's ([`crate::field::BodyError`]).
pub use crate::field::BodyError as RequestBodyError;

/// The plain shape of a request body: the four fields, once each, with strings that need
/// no unescaping and a number for the amount (kept as its raw text, so it is exact whatever
/// serde_json's features), and the protocol members an authorization may carry beside
/// them ([`AuthorizationBody`]), each read into a tree as it is met.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainRequest<'a> {
    #[serde(borrow)]
    amount: &'a serde_json::value::RawValue,
    currency: &'a str,
    recipient: &'a str,
    category: &'a str,
    #[serde(default, deserialize_with = "member")]
    acp: Option<Value>,
    #[serde(default, deserialize_with = "member")]
    ap2: Option<Value>,
    #[serde(default, deserialize_with = "member")]
    x402: Option<Value>,
}

/// A protocol member, present (`null` too), read into a tree in the same pass; one that
/// repeats a member inside is refused here, so the `Value` way names the repeat.
fn member<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    use serde::de::{DeserializeSeed, Error};
    let found = std::cell::RefCell::new(None);
    let seed = crate::field::Tree {
        place: &crate::field::Place::Root,
        found: &found,
    };
    let value = seed.deserialize(deserializer)?;
    match found.into_inner() {
        Some(_) => Err(D::Error::custom("a repeated member")),
        None => Ok(Some(value)),
    }
}

impl<'a> PlainRequest<'a> {
    /// The body read in the plain shape, or `None` (then only the `Value` way says why).
    fn read(body: &'a [u8]) -> Option<Self> {
        // serde's derive reads a struct from an array too (by position), so only an object
        // takes the plain way; it refuses a repeated field, which the `Value` way names.
        let is_object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        if !is_object {
            return None;
        }
        let plain = serde_json::from_slice::<PlainRequest<'_>>(body).ok()?;
        let is_number = plain
            .amount
            .get()
            .starts_with(|c: char| c == '-' || c.is_ascii_digit());
        is_number.then_some(plain)
    }

    fn has_members(&self) -> bool {
        self.acp.is_some() || self.ap2.is_some() || self.x402.is_some()
    }
}

impl AuthorizationRequest {
    /// Parses the bytes of a `POST /v1/authorizations` body for `agent`: the same
    /// request, and the same error, as parsing them into a [`Value`] and calling
    /// [`AuthorizationRequest::from_json`].
    ///
    /// A body of the plain shape (the four fields, once each, strings without escapes)
    /// is read straight into them, without building a `Value` (a map, and a string for
    /// every key and value, on every authorization). Anything else (a field unknown,
    /// read-only, missing, repeated, null or of another type, an escape in a string, JSON
    /// that is not an object, or no JSON at all) goes the `Value` way, whose messages name
    /// the problem. In the plain shape the checks after parsing are the same code, in the
    /// same order, as in `from_json` (`build`).
    pub fn from_json_bytes(agent: AgentId, body: &[u8]) -> Result<Self, RequestBodyError> {
        if let Some(plain) = PlainRequest::read(body)
            && !plain.has_members()
        {
            return Ok(Self::from_plain(agent, plain)?);
        }
        let value = crate::field::parse_body(body)?;
        Ok(Self::from_json(agent, &value)?)
    }

    fn from_plain(agent: AgentId, plain: PlainRequest<'_>) -> Result<Self, FieldError> {
        let PlainRequest {
            amount: number,
            currency,
            recipient,
            category,
            ..
        } = plain;
        Self::build(
            agent,
            || Amount::parse(number.get()).map_err(|e| invalid("amount", e)),
            || Ok(currency),
            || Ok(recipient),
            || Ok(category),
        )
    }
}

/// The body of `POST /v1/authorizations` as the server reads it, in one parse: the
/// payment protocols' members taken out (`acp`, `ap2`, `x402`; each as sent, `null`
/// too, `None` when absent), and the request read from the rest.
#[derive(Debug)]
#[must_use]
pub struct AuthorizationBody {
    /// The request, or the first problem in it, named as
    /// [`AuthorizationRequest::from_json`] names it (the caller decides whether a
    /// protocol member's problem is told first).
    pub request: Result<AuthorizationRequest, FieldError>,
    /// `acp`: the ACP allowance the request is made under.
    pub acp: Option<Value>,
    /// `ap2`: the agent's AP2 closed payment mandate.
    pub ap2: Option<Value>,
    /// `x402`: the x402 payment the request is for.
    pub x402: Option<Value>,
}

impl AuthorizationBody {
    /// Reads `body` for `agent` once: the plain shape (the four fields as
    /// [`AuthorizationRequest::from_json_bytes`] reads them, and the protocol members as
    /// trees) in one pass over the bytes; any other body into one [`Value`]
    /// ([`crate::field::parse_body`]), from which the protocol members are taken. Malformed JSON
    /// and a member repeated anywhere (a protocol member too) are refused here.
    pub fn from_json_bytes(agent: AgentId, body: &[u8]) -> Result<Self, RequestBodyError> {
        if let Some(mut plain) = PlainRequest::read(body) {
            let (acp, ap2, x402) = (plain.acp.take(), plain.ap2.take(), plain.x402.take());
            return Ok(Self {
                request: AuthorizationRequest::from_plain(agent, plain),
                acp,
                ap2,
                x402,
            });
        }
        let mut value = crate::field::parse_body(body)?;
        let mut take = |name: &str| value.as_object_mut().and_then(|o| o.remove(name));
        let (acp, ap2, x402) = (take("acp"), take("ap2"), take("x402"));
        Ok(Self {
            request: AuthorizationRequest::from_json(agent, &value),
            acp,
            ap2,
            x402,
        })
    }
}

/// A single-use credential presented with a request (an AP2 closed payment mandate): its
/// id, and whether a decision already accepted it, as the owner's stored decisions say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleUse {
    /// The credential's id (for an AP2 closed payment mandate, its digest).
    pub id: String,
    /// Whether an earlier decision accepted it (its verdict was `allow` or `review`).
    pub already_accepted: bool,
}
