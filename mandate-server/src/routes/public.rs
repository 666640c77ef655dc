//! The public host, no key needed: the JWK Set (the verdicts host), the OpenAPI contract
//! (the docs host), the health checks (`/healthz`, `/readyz`), and the review console
//! (`/console/`, [`super::console`]); and the decision logs as C2SP tlog-tiles
//! (`/log/<org>/<env>/`, [`super::tiles`]), which need a key unless the operator made them
//! public.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::model::Env;
use crate::state::AppState;

/// The routes of the public listener.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/jwks.json", get(jwks))
        .route("/openapi.yaml", get(openapi))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(super::console::router())
        .merge(super::tiles::router())
}

/// How long the readiness probe may take before storage counts as unreachable: a write
/// waits for a group commit and its sync, which take milliseconds when the disk is well.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// A health answer: never cached, JSON.
fn health(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.to_string(),
    )
        .into_response()
}

/// Liveness: the process serves HTTP. Touches nothing else.
async fn healthz() -> Response {
    health(StatusCode::OK, serde_json::json!({"status": "ok"}))
}

/// Readiness: storage answers a write, its schema is the one this server knows, and each
/// environment has a signing key. Otherwise 503 with the first reason found; reasons name
/// no path and no secret (the storage error itself goes to the log).
async fn readyz(State(state): State<AppState>) -> Response {
    match state.readiness.check(not_ready(&state)).await {
        None => health(StatusCode::OK, serde_json::json!({"status": "ok"})),
        Some(reason) => health(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "unavailable", "reason": reason}),
        ),
    }
}

/// Why the server is not ready, if it is not.
async fn not_ready(state: &AppState) -> Option<String> {
    for env in [Env::Sandbox, Env::Live] {
        if state.signer(env).is_err() {
            return Some(format!("no signing key is loaded for {}", env.as_str()));
        }
    }
    let schema = match tokio::time::timeout(READY_WITHIN, state.store.readiness()).await {
        Err(_) => {
            return Some(format!(
                "storage did not complete a write within {} s",
                READY_WITHIN.as_secs()
            ));
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: storage refused the probe write");
            return Some("storage cannot be written".into());
        }
        Ok(Ok(schema)) => schema,
    };
    (schema.applied != schema.latest).then(|| {
        format!(
            "the database schema is at migration {} and this server's is {}",
            schema.applied, schema.latest
        )
    })
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
        .published_json();
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        set,
    )
        .into_response()
}
