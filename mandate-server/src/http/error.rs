//! The one error type of the HTTP API and its mapping to the spec's envelope.
//!
//! Every handler returns `Result<_, ApiError>`; this is the only place where an error
//! becomes a status code and a body. A server error is logged with its detail and answered
//! with a generic message: internals never reach a client.

use axum::body::to_bytes;
use axum::extract::rejection::PathRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mandate_core::{CursorError, FieldError, RequestBodyError};
use mandate_protocol::{wire::ErrorBody, wire::ErrorDetail, wire::codes};

use crate::http::request_id;
use crate::model::WrongKeyClass;
use crate::storage::StorageError;

/// The message of every 401.
pub const UNAUTHORIZED_MESSAGE: &str = "API key missing or revoked: send Authorization: Bearer <API_KEY>. Keys are issued at onboarding by the operator; there is no self-serve signup";

/// An error answered to the client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed; the message says what to fix.
    #[error("{0}")]
    InvalidRequest(String),
    /// 401: missing or revoked key. Carries the docs host (`serve --docs-url`) when known,
    /// so that the message points at the contract.
    #[error("{UNAUTHORIZED_MESSAGE}{}", docs_hint(.docs.as_deref()))]
    Unauthorized {
        /// `{docs_url}`, normalized (no trailing slash).
        docs: Option<String>,
    },
    /// 403: a valid key of the wrong class.
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such object, or someone else's.
    #[error("{0}")]
    NotFound(String),
    /// 409: an agent name already in use.
    #[error("{0}")]
    NameTaken(String),
    /// 409: idempotency key reused with another body, or still in flight.
    #[error("{0}")]
    IdempotencyConflict(String),
    /// 409: a review its agent withdrew, which nothing can resolve any more.
    #[error("{0}")]
    Withdrawn(String),
    /// 429: over the key's request rate.
    #[error(
        "request rate of {limit} per second exceeded for this key; retry after {retry_after} s"
    )]
    RateLimited {
        /// The key's rate, requests per second.
        limit: u32,
        /// Seconds to wait.
        retry_after: u64,
    },
    /// 5xx: our fault. The detail is logged, never sent.
    #[error("internal: {0}")]
    Server(String),
    /// 503: the database cannot be used right now, or other server processes kept changing
    /// the agent; the message says to retry after a second (with `Retry-After: 1`).
    #[error("{0}")]
    Unavailable(String),
    /// 503: more requests in flight than the server takes; retry after a second.
    #[error("the server is overloaded; retry after 1 s (a POST with the same Idempotency-Key)")]
    Overloaded,
}

/// The end of a 401 message that names where the contract is published.
fn docs_hint(docs: Option<&str>) -> String {
    docs.map(|d| format!(". The API is described at {d}/openapi.yaml"))
        .unwrap_or_default()
}

impl ApiError {
    /// A 404 for an object of kind `what` with id `id`: the same for missing and foreign.
    pub fn not_found(what: &str, id: &str) -> Self {
        let shown: String = id.chars().take(80).collect();
        Self::NotFound(format!("no {what} with id {shown}"))
    }

    /// The status and code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::InvalidRequest(_) => (StatusCode::BAD_REQUEST, codes::INVALID_REQUEST),
            Self::Unauthorized { .. } => (StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, codes::FORBIDDEN),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, codes::NOT_FOUND),
            Self::NameTaken(_) => (StatusCode::CONFLICT, codes::NAME_TAKEN),
            Self::IdempotencyConflict(_) => (StatusCode::CONFLICT, codes::IDEMPOTENCY_CONFLICT),
            Self::Withdrawn(_) => (StatusCode::CONFLICT, codes::REVIEW_WITHDRAWN),
            Self::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, codes::RATE_LIMITED),
            Self::Server(_) => (StatusCode::INTERNAL_SERVER_ERROR, codes::SERVER_ERROR),
            Self::Overloaded | Self::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, codes::SERVER_ERROR)
            }
        }
    }
}

impl From<WrongKeyClass> for ApiError {
    fn from(e: WrongKeyClass) -> Self {
        Self::Forbidden(e.to_string())
    }
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        match e {
            // The detail is logged, never sent (it may name the database).
            StorageError::Unavailable(_) | StorageError::Conflict => {
                tracing::error!(request_id = %request_id::current(), "storage unavailable: {e}");
                Self::Unavailable(
                    "the database is unavailable right now; retry after 1 s (a POST with the same Idempotency-Key)"
                        .into(),
                )
            }
            other => Self::Server(other.to_string()),
        }
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self::InvalidRequest(e.to_string())
    }
}

impl From<RequestBodyError> for ApiError {
    /// Both kinds are 400s; the message is the one `JsonBody` gives for the same body.
    fn from(e: RequestBodyError) -> Self {
        Self::InvalidRequest(e.to_string())
    }
}

impl From<CursorError> for ApiError {
    fn from(e: CursorError) -> Self {
        Self::InvalidRequest(e.to_string())
    }
}

impl From<PathRejection> for ApiError {
    /// A path segment that is not valid UTF-8 once percent-decoded (`/v1/agents/%FF`), or
    /// any other path that cannot be read: 400, saying what to fix.
    fn from(e: PathRejection) -> Self {
        use axum::extract::path::ErrorKind;
        match e {
            PathRejection::FailedToDeserializePathParams(e)
                if matches!(e.kind(), ErrorKind::InvalidUtf8InPathParam { .. }) =>
            {
                Self::InvalidRequest(
                    "a path segment is not valid UTF-8 once percent-decoded; ids in paths are ASCII, like agt_…".into(),
                )
            }
            PathRejection::FailedToDeserializePathParams(e)
                if e.status() == StatusCode::BAD_REQUEST =>
            {
                Self::InvalidRequest(format!("the path cannot be read: {}", e.kind()))
            }
            other => Self::Server(format!("path parameters: {other}")),
        }
    }
}

/// The code of the envelope for an error answered with `status`.
fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => codes::UNAUTHORIZED,
        StatusCode::FORBIDDEN => codes::FORBIDDEN,
        StatusCode::NOT_FOUND => codes::NOT_FOUND,
        StatusCode::TOO_MANY_REQUESTS => codes::RATE_LIMITED,
        s if s.is_server_error() => codes::SERVER_ERROR,
        _ => codes::INVALID_REQUEST,
    }
}

/// Whether `response` is an error that is not the envelope: one a framework made itself,
/// such as an extractor's rejection (`text/plain`).
pub fn is_bare_error(response: &Response) -> bool {
    (response.status().is_client_error() || response.status().is_server_error())
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_none_or(|v| v.as_bytes() != b"application/json")
}

/// `response` as the envelope, with its status: a framework's own error answer (see
/// [`is_bare_error`]) gets its text as the message (a 5xx a generic one, its text
/// logged); any other response is returned as it is.
pub async fn enveloped(response: Response) -> Response {
    if !is_bare_error(&response) {
        return response;
    }
    let status = response.status();
    // The extensions (the route and the caller, for the request line) go to the envelope.
    let (parts, body) = response.into_parts();
    let text = match to_bytes(body, 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let mut answer = if status.is_server_error() {
        ApiError::Server(format!("{status}: {text}")).into_response()
    } else {
        let message = if text.is_empty() {
            format!(
                "the request was refused: {}",
                status.canonical_reason().unwrap_or("client error")
            )
        } else {
            text
        };
        envelope(status, code_of(status), &message)
    };
    answer.extensions_mut().extend(parts.extensions);
    answer
}

/// The whole HTTP/1.1 answer, in the envelope with a fresh request id, to a request head
/// that hyper could not parse and would have answered with a bare `status` itself (see
/// `connections::Answered`). The connection is closed after it, as hyper does.
pub fn unparsed_request_answer(status: u16) -> Vec<u8> {
    let (status, message) = match status {
        414 => (
            StatusCode::URI_TOO_LONG,
            "the URI is too long: send a path and query of at most 64 KiB",
        ),
        431 => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "the request's headers are too large or too many: send at most 100 headers, well under 400 KB in all",
        ),
        _ => (
            StatusCode::BAD_REQUEST,
            "the request line or a header is not valid HTTP/1.1: the method, path and query must be ASCII (percent-encode any other byte, as %FF) and header names must be tokens",
        ),
    };
    let id = request_id::current();
    let body = ErrorBody {
        error: ErrorDetail {
            code: code_of(status).to_owned(),
            message: message.to_owned(),
            request_id: id.clone(),
        },
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\n{}: {id}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        request_id::HEADER,
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// Builds the envelope response for `status`, `code` and `message`.
pub fn envelope(status: StatusCode, code: &str, message: &str) -> Response {
    let id = request_id::current();
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.to_owned(),
            message: message.to_owned(),
            request_id: id.clone(),
        },
    };
    let mut response = (status, axum::Json(body)).into_response();
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(request_id::HEADER, value);
    }
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match &self {
            Self::Server(detail) => {
                tracing::error!(request_id = %request_id::current(), "server error: {detail}");
                "the server failed to process the request; a POST may be retried with the same Idempotency-Key".to_owned()
            }
            other => other.to_string(),
        };
        let mut response = envelope(status, code, &message);
        if let Self::RateLimited { retry_after, .. } = self
            && let Ok(value) = HeaderValue::from_str(&retry_after.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        if let Self::Overloaded | Self::Unavailable(_) = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
