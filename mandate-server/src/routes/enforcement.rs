//! `GET/POST /v1/enforcement`: the kill switch, per environment. The answer also names
//! the organization and the environment the key acts on.

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::routing::get;
use mandate_core::Mode;
use mandate_protocol::{field::check_fields, field::object, field::required, wire};

use super::{ok, wire_json};
use crate::clock::{from_ms, ms};
use crate::http::body::JsonBody;
use crate::http::error::ApiError;
use crate::model::Caller;
use crate::state::AppState;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/v1/enforcement", get(show).post(switch))
}

/// The answer: the mode and since when, with the organization and environment it is of
/// (the review console shows them).
async fn body(
    state: &AppState,
    caller: &Caller,
    mode: Mode,
    since_ms: i64,
) -> Result<serde_json::Value, ApiError> {
    wire_json(&wire::Enforcement {
        environment: Some(caller.env.as_str().to_owned()),
        mode,
        organization: Some(state.store.org_name(&caller.org_id).await?),
        since: from_ms(since_ms),
    })
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    refuse_parameters(query.as_deref())?;
    let (mode, since) = state.store.mode(&caller.org_id, caller.env).await?;
    Ok(ok(body(&state, &caller, mode, since).await?))
}

/// The read takes no query parameter: one given is refused, as lists refuse those they do
/// not know, rather than ignored.
fn refuse_parameters(query: Option<&str>) -> Result<(), ApiError> {
    match form_urlencoded::parse(query.unwrap_or("").as_bytes()).next() {
        None => Ok(()),
        Some((name, _)) => {
            let shown: String = name.chars().take(64).collect();
            Err(ApiError::InvalidRequest(format!(
                "unknown query parameter {shown}; GET /v1/enforcement takes no query parameters"
            )))
        }
    }
}

async fn switch(
    State(state): State<AppState>,
    caller: Caller,
    request: Result<JsonBody, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    caller.require_org()?;
    let JsonBody(request) = request?;
    let fields = object(&request)?;
    check_fields(fields, "", &["mode"], &["since"])?;
    let mode = required(fields, "mode", "mode")?
        .as_str()
        .and_then(Mode::parse)
        .ok_or_else(|| ApiError::InvalidRequest("mode must be 'observe' or 'enforce'".into()))?;
    let (mode, since) = state
        .store
        .set_mode(&caller.org_id, caller.env, mode, ms(state.now()))
        .await?;
    // After the commit, before the answer: the next decision sees the new mode.
    state.modes.set(&caller.org_id, caller.env, mode);
    Ok(ok(body(&state, &caller, mode, since).await?))
}
