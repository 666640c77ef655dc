//! Wire types shared by the server and its clients: the request and response bodies of
//! the API's operations, the error envelope and the list envelope. Defined once so that
//! the server writes and the CLI reads the same shapes (`openapi.yaml` is the contract).
//!
//! The bytes of an object on the wire are those of its [`serde_json::Value`]
//! ([`to_value`]): the server answers through a `Value`, whose maps keep their keys in
//! alphabetical order, so every object's members come sorted by name, nested ones too.
//! The response types declare their fields in that order, so that serializing one
//! directly gives the same members in the same order. The one exception is [`Decision`],
//! declared in the order of the signed claims, in which the answer to the request that
//! made a decision and events' data are written (see its documentation); reads of the log
//! answer it through a `Value`, sorted like every other object.
//!
//! Optional members follow the API: a member documented as nullable is written `null`
//! when empty (`Option` without `skip_serializing_if`), one documented as optional is
//! left out (`skip_serializing_if = "Option::is_none"`).

mod agents;
mod decisions;
mod enforcement;
mod escrows;
mod events;
mod mandates;
mod reviews;
mod webhooks;

pub use agents::{Agent, CreateAgent, CreatedAgent};
pub use decisions::{
    AcpAllowance, AcpPresentation, Ap2Presentation, Authorize, Decision, OpenedReview,
};
pub use enforcement::{Enforcement, SetEnforcement};
pub use escrows::{CreateEscrow, Escrow};
pub use events::{Event, EventDelivery};
pub use mandates::{CreateMandate, Mandate, MandateSource, Spent, SpentBefore, mandate_json};
pub use reviews::{DenyReview, Review};
pub use webhooks::{CreateWebhook, PingAnswer, Webhook};

use serde::{Deserialize, Serialize};

/// An object as the server writes it: its `Value`, members sorted by name.
pub fn to_value<T: Serialize>(object: &T) -> serde_json::Result<serde_json::Value> {
    serde_json::to_value(object)
}

/// The body of every error response: `{"error": {code, message, request_id}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The inside of the error envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// One of `invalid_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `idempotency_conflict`, `rate_limited`, `server_error`, `name_taken`,
    /// `review_withdrawn`.
    pub code: String,
    /// What went wrong and what to fix.
    pub message: String,
    /// The request id, also in the `X-Request-Id` header.
    pub request_id: String,
}

/// One page of a list: `{data, has_more, next_cursor}`; `next_cursor` is absent on the
/// last page. Walk until `has_more` is false, not until `data` is empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListPage<T> {
    /// The objects, newest first.
    pub data: Vec<T>,
    /// Whether another page follows.
    pub has_more: bool,
    /// The cursor of the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Error codes, as constants.
pub mod codes {
    /// 400.
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// 401.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// 403.
    pub const FORBIDDEN: &str = "forbidden";
    /// 404.
    pub const NOT_FOUND: &str = "not_found";
    /// 409, idempotency.
    pub const IDEMPOTENCY_CONFLICT: &str = "idempotency_conflict";
    /// 409, agent name.
    pub const NAME_TAKEN: &str = "name_taken";
    /// 409, a review its agent withdrew.
    pub const REVIEW_WITHDRAWN: &str = "review_withdrawn";
    /// 429.
    pub const RATE_LIMITED: &str = "rate_limited";
    /// 5xx.
    pub const SERVER_ERROR: &str = "server_error";
}
