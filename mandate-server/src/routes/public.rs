//! The public host: the JWK Set (the verdicts host), no key needed.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

/// The routes of the public listener.
pub fn router() -> Router<AppState> {
    Router::new().route("/.well-known/jwks.json", get(jwks))
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
