//! One module per resource; each builds its own router and [`api`] merges them.

pub mod agents;
pub mod authorizations;
pub mod console;
pub mod decisions;
pub mod enforcement;
pub mod escrows;
pub mod events;
pub mod exports;
pub mod mandates;
pub mod public;
pub mod reviews;
pub mod webhooks;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::decision::service::DecisionError;
use crate::http::error::ApiError;
use crate::services::escrows::EscrowError;
use crate::services::webhooks::WebhookError;
use crate::state::AppState;

/// Every `/v1` route.
pub fn api() -> Router<AppState> {
    Router::new()
        .merge(agents::router())
        .merge(mandates::router())
        .merge(authorizations::router())
        .merge(reviews::router())
        .merge(enforcement::router())
        .merge(decisions::router())
        .merge(webhooks::router())
        .merge(events::router())
        .merge(escrows::router())
        .merge(exports::router())
}

/// Every operation of the API host as (method, path): the 29 operations across 23 paths.
/// `tests/api/contract.rs` checks both the routers above and `openapi.yaml` against this
/// table, in both directions, so that neither can gain or lose an operation alone.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/agents"),
    ("GET", "/v1/agents"),
    ("GET", "/v1/agents/{id}"),
    ("POST", "/v1/mandates"),
    ("GET", "/v1/mandates"),
    ("GET", "/v1/mandates/{id}"),
    ("DELETE", "/v1/mandates/{id}"),
    ("POST", "/v1/mandates/{id}/revoke"),
    ("POST", "/v1/authorizations"),
    ("POST", "/v1/reviews/{id}/approve"),
    ("POST", "/v1/reviews/{id}/deny"),
    ("GET", "/v1/enforcement"),
    ("POST", "/v1/enforcement"),
    ("GET", "/v1/decisions"),
    ("GET", "/v1/decisions/{id}"),
    ("POST", "/v1/webhooks"),
    ("GET", "/v1/webhooks"),
    ("GET", "/v1/webhooks/{id}"),
    ("DELETE", "/v1/webhooks/{id}"),
    ("POST", "/v1/webhooks/{id}/ping"),
    ("GET", "/v1/events"),
    ("GET", "/v1/events/{id}"),
    ("POST", "/v1/escrows"),
    ("GET", "/v1/escrows/{id}"),
    ("POST", "/v1/escrows/{id}/deliver"),
    ("POST", "/v1/escrows/{id}/release"),
    ("POST", "/v1/escrows/{id}/refund"),
    ("POST", "/v1/escrows/{id}/dispute"),
    ("GET", "/v1/exports/decisions"),
];

/// 201 with a JSON body.
pub fn created(body: Value) -> Response {
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

/// 201 with a body already encoded as JSON.
pub fn created_encoded(body: Vec<u8>) -> Response {
    (
        StatusCode::CREATED,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// 200 with a JSON body.
pub fn ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

pub use crate::services::wire_json;

/// The error for a stored value (an id, a name) that no longer parses: the server's fault,
/// never the caller's.
pub fn unreadable<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> ApiError {
    move |e| ApiError::Server(format!("stored {what} does not parse: {e}"))
}

/// A decision that could not be made or stored, as the envelope answers it. Here, where the
/// routes meet the decision service: the HTTP layers know no decision service, and the
/// decision service knows no HTTP.
impl From<DecisionError> for ApiError {
    fn from(e: DecisionError) -> Self {
        match e {
            DecisionError::Storage(e) => e.into(),
            DecisionError::Contended(_) | DecisionError::MandateReplaced { .. } => {
                Self::Unavailable(e.to_string())
            }
            DecisionError::ClaimLost => Self::IdempotencyConflict(e.to_string()),
            DecisionError::AlreadyResolved(_) => Self::InvalidRequest(e.to_string()),
            DecisionError::Encoding(_) | DecisionError::Signing(_) => Self::Server(e.to_string()),
        }
    }
}

/// An escrow request refused or failed, as the envelope answers it.
impl From<EscrowError> for ApiError {
    fn from(e: EscrowError) -> Self {
        match e {
            EscrowError::NoEscrow(id) => Self::not_found("escrow", &id),
            EscrowError::NoDecision(id) => Self::not_found("decision", &id),
            EscrowError::Funding(_) | EscrowError::Transition(_) => {
                Self::InvalidRequest(e.to_string())
            }
            EscrowError::Storage(e) => e.into(),
            EscrowError::Settlement(_) | EscrowError::Encoding(_) => Self::Server(e.to_string()),
        }
    }
}

/// A webhook request refused or failed, as the envelope answers it.
impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::NoWebhook(id) => Self::not_found("webhook", &id),
            WebhookError::Url(_) => Self::InvalidRequest(e.to_string()),
            WebhookError::Storage(e) => e.into(),
            WebhookError::Encoding(_) => Self::Server(e.to_string()),
        }
    }
}
