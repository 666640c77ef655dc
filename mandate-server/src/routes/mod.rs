//! One module per resource; each builds its own router and [`api`] merges them. The errors
//! of the layers below (the decision service, `services/`) become the envelope in
//! [`errors`], where the two meet.

pub mod agents;
pub mod authorizations;
pub mod console;
pub mod decisions;
pub mod enforcement;
pub mod errors;
pub mod escrows;
pub mod events;
pub mod exports;
pub mod mandates;
pub mod public;
pub mod reviews;
pub mod tiles;
pub mod webhooks;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::http::error::ApiError;
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

/// An object of [`mandate_protocol::wire`] as the JSON value a route answers with
/// ([`crate::services::wire_json`], its failure the server's).
pub fn wire_json<T: serde::Serialize>(object: &T) -> Result<Value, ApiError> {
    Ok(crate::services::wire_json(object)?)
}

/// The error for a stored value (an id, a name) that no longer parses: the server's fault,
/// never the caller's.
pub fn unreadable<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> ApiError {
    move |e| ApiError::Server(format!("stored {what} does not parse: {e}"))
}
