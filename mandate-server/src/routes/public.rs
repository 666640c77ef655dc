//! The public host, no key needed: the JWK Set (the verdicts host) and the OpenAPI
//! contract (the docs host).

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

/// The routes of the public listener.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/jwks.json", get(jwks))
        .route("/openapi.yaml", get(openapi))
}

/// The contract, `openapi.yaml` at the repository root, compiled in.
pub const OPENAPI: &str = include_str!("../../../openapi.yaml");

async fn openapi() -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/yaml"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        OPENAPI,
    )
        .into_response()
}

async fn jwks(State(state): State<AppState>) -> Response {
    let set = state
        .keys
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .jwks
        .clone();
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        serde_json::to_string(set.as_ref()).unwrap_or_else(|_| "{\"keys\":[]}".into()),
    )
        .into_response()
}
