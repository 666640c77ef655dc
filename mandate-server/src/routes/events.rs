//! `GET /v1/events` (list conventions, filter `type`) and `GET /v1/events/{id}`: the
//! event log, read whole whatever became of its deliveries. Organization keys only.

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::routing::get;
use mandate_core::delivery::{EVENT_TYPES, is_event_type};
use mandate_core::mandate::format_timestamp;
use serde_json::{Value, json};

use super::ok;
use crate::clock::from_ms;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::http::list;
use crate::model::Caller;
use crate::state::AppState;
use crate::storage::events::EventRow;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/events", get(index))
        .route("/v1/events/{id}", get(show))
}

/// An event in its API shape.
pub fn event_json(row: &EventRow) -> Value {
    json!({
        "id": row.id,
        "type": row.event_type,
        "data": row.data,
        "created_at": format_timestamp(from_ms(row.created_ms)),
    })
}

async fn index(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let params = list::parse(query.as_deref(), &["type"])?;
    let event_type = params.filters.get("type").cloned();
    if let Some(t) = &event_type
        && !is_event_type(t)
    {
        return Err(ApiError::InvalidRequest(format!(
            "type must be one of {}",
            EVENT_TYPES.join(", ")
        )));
    }
    let context = list::context("events", &caller, &params);
    let before = list::start(&state, &params, &context)?;
    let rows = state
        .store
        .events_page(
            &caller.org_id,
            caller.env,
            event_type.as_deref(),
            before,
            params.limit + 1,
        )
        .await?;
    let rows = rows.iter().map(|r| (r.seq, event_json(r))).collect();
    Ok(ok(list::envelope(&state, &context, params.limit, rows)))
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let row = state.store.event(&caller.org_id, caller.env, &id).await?;
    row.map(|r| ok(event_json(&r)))
        .ok_or_else(|| ApiError::not_found("event", &id))
}
