//! Wire types shared by the server and its clients: the error envelope and the list
//! envelope. Defined once so that the server writes and the CLI reads the same shapes.

use serde::{Deserialize, Serialize};

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
    /// `idempotency_conflict`, `rate_limited`, `server_error`, `name_taken`.
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
    /// 429.
    pub const RATE_LIMITED: &str = "rate_limited";
    /// 5xx.
    pub const SERVER_ERROR: &str = "server_error";
}
