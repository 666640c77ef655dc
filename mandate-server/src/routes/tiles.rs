//! The decision logs on the public host, as C2SP tlog-tiles (docs/audit.md): under each
//! log's origin path, `/log/<org>/<env>`, its checkpoint (`checkpoint`), its hash tiles
//! (`tile/<L>/<N>[.p/<W>]`) and its entry bundles (`tile/entries/<N>[.p/<W>]`, the verdict
//! tokens). Outside the API's paths, like the JWK Set.
//!
//! Who may read: anyone when the operator serves the logs publicly (`--public-logs`);
//! otherwise a secret key of the log's organization and environment (`Authorization:
//! Bearer sk_…`), as on the API host; another organization's key reads a 404. Only what the
//! checkpoint shown to readers covers is served (a tile past it is a 404), so every tile
//! served is durable and never changes: a full one is cached for a year (`immutable`), a
//! partial one briefly (a client asks for the full one once a newer checkpoint needs it).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mandate_protocol::tlog::TilePath;

use crate::http::auth::key_caller;
use crate::http::error::ApiError;
use crate::model::Env;
use crate::state::AppState;
use crate::storage::log_entries::TileRead;

/// The routes of the logs, merged into the public host's.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/log/{org}/{env}/checkpoint", get(checkpoint))
        .route("/log/{org}/{env}/tile/{*path}", get(tile))
}

/// How long a checkpoint may be cached: a few seconds, as the spec asks of a mutable one.
const CHECKPOINT_CACHE: &str = "max-age=5";
/// A full tile or bundle never changes.
const FULL_CACHE: &str = "max-age=31536000, immutable";
/// A partial one neither, but a client moves on to the full one: kept briefly.
const PARTIAL_CACHE: &str = "max-age=60";

/// A log's resource that does not exist (or may not be shown to this caller).
fn no_log(what: &str) -> ApiError {
    ApiError::NotFound(format!("no {what} in this log"))
}

/// The log named by the path, once the caller may read it.
async fn readable(
    state: &AppState,
    headers: &HeaderMap,
    org: &str,
    env: &str,
) -> Result<Env, Response> {
    let well_formed = !org.is_empty()
        && org.len() <= 64
        && org
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let env = Env::parse(env)
        .filter(|_| well_formed)
        .ok_or_else(|| no_log("log").into_response())?;
    if state.public_logs {
        return Ok(env);
    }
    let caller = key_caller(&state.authenticator(), headers).await?;
    if &*caller.org_id != org {
        return Err(no_log("log").into_response());
    }
    if caller.agent.is_some() || caller.env != env {
        return Err(ApiError::Forbidden(format!(
            "an organization's {} log is read with one of its secret keys of that environment (sk_{}_…)",
            env.as_str(),
            env.as_str()
        ))
        .into_response());
    }
    Ok(env)
}

/// The `Cache-Control` of a resource: `public` for a public log, `private` otherwise.
fn cache(state: &AppState, policy: &str) -> HeaderValue {
    let scope = if state.public_logs {
        "public"
    } else {
        "private"
    };
    HeaderValue::from_str(&format!("{scope}, {policy}"))
        .unwrap_or(HeaderValue::from_static("no-store"))
}

/// `<origin>/checkpoint`: the checkpoint shown to readers, as a signed note.
async fn checkpoint(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((org, env)): Path<(String, String)>,
) -> Response {
    let env = match readable(&state, &headers, &org, &env).await {
        Ok(env) => env,
        Err(response) => return response,
    };
    match state.store.shown_checkpoint(&org, env).await {
        Ok(Some(shown)) => (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                ),
                (header::CACHE_CONTROL, cache(&state, CHECKPOINT_CACHE)),
            ],
            shown.note,
        )
            .into_response(),
        Ok(None) => no_log("checkpoint").into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `<origin>/tile/...`: a hash tile or an entry bundle the shown checkpoint covers.
async fn tile(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((org, env, path)): Path<(String, String, String)>,
) -> Response {
    let env = match readable(&state, &headers, &org, &env).await {
        Ok(env) => env,
        Err(response) => return response,
    };
    let Some(tile) = TilePath::parse(&path).filter(|t| t.level.is_none_or(|l| l < 8)) else {
        return no_log("such tile").into_response();
    };
    let covered = match state.store.shown_checkpoint(&org, env).await {
        Ok(shown) => shown.is_some_and(|s| tile.leaves_needed().is_some_and(|n| n <= s.size)),
        Err(e) => return ApiError::from(e).into_response(),
    };
    if !covered {
        return no_log("such tile").into_response();
    }
    let read = match tile.tile() {
        Some(id) => TileRead::Hashes(id),
        None => TileRead::Entries(tile.index),
    };
    let policy = if tile.is_full() {
        FULL_CACHE
    } else {
        PARTIAL_CACHE
    };
    match state.store.log_tile(&org, env, read, tile.width).await {
        Ok(Some(bytes)) => (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                ),
                (header::CACHE_CONTROL, cache(&state, policy)),
            ],
            bytes,
        )
            .into_response(),
        // Covered by the checkpoint but not held: entries logged before they were kept.
        Ok(None) => no_log("such tile").into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
