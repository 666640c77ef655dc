//! One module per resource; each builds its own router and [`api`] merges them.

pub mod agents;
pub mod authorizations;
pub mod decisions;
pub mod enforcement;
pub mod events;
pub mod mandates;
pub mod public;
pub mod reviews;
pub mod webhooks;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

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
}

/// 201 with a JSON body.
pub fn created(body: Value) -> Response {
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

/// 200 with a JSON body.
pub fn ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}
