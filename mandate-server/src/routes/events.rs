//! `GET /v1/events` (list conventions, filter `type`) and `GET /v1/events/{id}`: the
//! event log, read whole whatever became of its deliveries. Organization keys only.

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::routing::get;
use mandate_core::EventId;
use mandate_protocol::{delivery::EVENT_TYPES, delivery::is_event_type, id::WebhookId, wire};
use serde_json::Value;

use super::{ok, unreadable, wire_json};
use crate::clock::from_ms;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::http::list;
use crate::model::Caller;
use crate::state::AppState;
use crate::storage::deliveries::{DeliveryRow, DeliveryState};
use crate::storage::events::EventRow;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/events", get(index))
        .route("/v1/events/{id}", get(show))
}

/// An event in its API shape.
pub fn event_wire(row: &EventRow) -> Result<wire::Event, ApiError> {
    Ok(wire::Event {
        created_at: from_ms(row.created_ms),
        data: row.data.clone(),
        deliveries: None,
        id: EventId::parse(&row.id).map_err(unreadable("event id"))?,
        event_type: row.event_type.clone(),
    })
}

/// A delivery in its API shape: the last attempt's status, and times as timestamps.
fn delivery_wire(row: &DeliveryRow) -> Result<wire::EventDelivery, ApiError> {
    let last = row.tried.last();
    Ok(wire::EventDelivery {
        attempts: row.attempts,
        last_attempt_at: last.map(|a| from_ms(a.at_ms)),
        last_error: row.last_error.clone(),
        last_status: last.and_then(|a| a.status),
        next_attempt_at: row
            .next_attempt_ms
            .filter(|_| row.state == DeliveryState::Pending)
            .map(from_ms),
        state: row.state.as_str().to_owned(),
        webhook: WebhookId::parse(&row.webhook_id).map_err(unreadable("webhook id"))?,
    })
}

/// An event as the JSON value of an answer.
pub fn event_json(row: &EventRow) -> Result<Value, ApiError> {
    wire_json(&event_wire(row)?)
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
    let before = list::start(state.paging(), &params, &context)?;
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
    let rows = rows
        .iter()
        .map(|r| Ok((r.seq, event_json(r)?)))
        .collect::<Result<_, ApiError>>()?;
    Ok(ok(list::envelope(
        state.paging(),
        &context,
        params.limit,
        rows,
    )))
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let row = state.store.event(&caller.org_id, caller.env, &id).await?;
    let row = row.ok_or_else(|| ApiError::not_found("event", &id))?;
    // Read after the event: a delivery is queued in the event's own transaction, so every
    // one the event has is there.
    let deliveries = state.store.deliveries_of(&caller.org_id, &row.id).await?;
    let mut event = event_wire(&row)?;
    event.deliveries = Some(
        deliveries
            .iter()
            .map(delivery_wire)
            .collect::<Result<_, _>>()?,
    );
    Ok(ok(wire_json(&event)?))
}
