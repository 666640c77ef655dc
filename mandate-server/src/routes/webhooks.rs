//! `POST/GET /v1/webhooks`, `GET/DELETE /v1/webhooks/{id}`, `POST /v1/webhooks/{id}/ping`.
//!
//! Organization keys only. A URL is judged by [`crate::workers::ssrf`] before it is stored (and
//! again before every delivery). A deleted endpoint reads as 404 and its pending deliveries
//! end; a ping is an event like any other, delivered to that one endpoint.

use crate::http::fields::{check_fields, invalid, object, required, string};
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mandate_core::delivery::{EVENT_TYPES, is_event_type};
use mandate_core::id::WebhookId;
use mandate_core::wire;
use serde_json::Value;

use super::{created, ok, unreadable, wire_json};
use crate::clock::{from_ms, ms, random16};
use crate::http::body::JsonBody;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::http::list;
use crate::model::Caller;
use crate::state::AppState;
use crate::storage::webhooks::WebhookRow;
use crate::workers::ssrf::{self, Host};

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/webhooks", post(create).get(index))
        .route("/v1/webhooks/{id}", get(show).delete(delete))
        .route("/v1/webhooks/{id}/ping", post(ping))
}

/// A webhook in its API shape.
pub fn webhook_wire(row: &WebhookRow) -> Result<wire::Webhook, ApiError> {
    Ok(wire::Webhook {
        created_at: from_ms(row.created_ms),
        events: row.events.clone(),
        status: row.status.clone(),
        url: row.url.clone(),
        webhook: WebhookId::parse(&row.id).map_err(unreadable("webhook id"))?,
    })
}

/// A webhook as the JSON value of an answer or an event's data.
pub fn webhook_json(row: &WebhookRow) -> Result<Value, ApiError> {
    wire_json(&webhook_wire(row)?)
}

/// Parses `events`: a non-empty array of known event types; repeats are dropped.
fn parse_events(value: &Value) -> Result<Vec<String>, ApiError> {
    let items = value
        .as_array()
        .ok_or_else(|| invalid("events", "must be an array of event types"))?;
    if items.is_empty() {
        return Err(invalid("events", "must name at least one event type").into());
    }
    let mut events: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("events[{i}]");
        let name = string(item, &path)?;
        if !is_event_type(name) {
            let shown: String = name.chars().take(64).collect();
            return Err(invalid(
                &path,
                format!(
                    "{shown:?} is not an event type; the types are {}",
                    EVENT_TYPES.join(", ")
                ),
            )
            .into());
        }
        if !events.iter().any(|e| e == name) {
            events.push(name.to_owned());
        }
    }
    Ok(events)
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    caller.require_org()?;
    let JsonBody(body) = body?;
    let fields = object(&body)?;
    check_fields(
        fields,
        "",
        &["url", "events"],
        &["webhook", "id", "status", "created_at"],
    )?;
    let text = string(required(fields, "url", "url")?, "url")?;
    let events = parse_events(required(fields, "events", "events")?)?;
    let refused = |e: ssrf::UrlError| ApiError::InvalidRequest(e.to_string());
    let url = ssrf::check_url(text, caller.env).map_err(refused)?;
    if let Host::Name(name) = &url.host
        && let Some(ips) = ssrf::resolve(name, url.port).await
    {
        ssrf::check_resolved(name, &ips, caller.env).map_err(refused)?;
    }
    let id = WebhookId::from_random(random16());
    let now = ms(state.now());
    let row = state
        .store
        .create_webhook(
            &caller.org_id,
            caller.env,
            &id,
            url.url.as_str(),
            &events,
            now,
        )
        .await?;
    Ok(created(webhook_json(&row)?))
}

async fn index(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let params = list::parse(query.as_deref(), &[])?;
    let context = list::context("webhooks", &caller, &params);
    let before = list::start(&state, &params, &context)?;
    let rows = state
        .store
        .webhooks_page(&caller.org_id, caller.env, before, params.limit + 1)
        .await?;
    let rows = rows
        .iter()
        .map(|r| Ok((r.seq, webhook_json(r)?)))
        .collect::<Result<_, ApiError>>()?;
    Ok(ok(list::envelope(&state, &context, params.limit, rows)))
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let row = match WebhookId::parse(&id) {
        Ok(wanted) => {
            state
                .store
                .webhook(&caller.org_id, caller.env, &wanted)
                .await?
        }
        Err(_) => None,
    };
    let row = row.ok_or_else(|| ApiError::not_found("webhook", &id))?;
    Ok(ok(webhook_json(&row)?))
}

async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let now = ms(state.now());
    let row = match WebhookId::parse(&id) {
        Ok(wanted) => {
            state
                .store
                .delete_webhook(&caller.org_id, caller.env, &wanted, now)
                .await?
        }
        Err(_) => None,
    };
    let row = row.ok_or_else(|| ApiError::not_found("webhook", &id))?;
    Ok(ok(webhook_json(&row)?))
}

async fn ping(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let now = ms(state.now());
    let missing = || ApiError::not_found("webhook", &id);
    let wanted = WebhookId::parse(&id).map_err(|_| missing())?;
    let webhook = state
        .store
        .webhook(&caller.org_id, caller.env, &wanted)
        .await?
        .ok_or_else(missing)?;
    // Deleted between the read and the write: the ping finds no endpoint.
    let event = state
        .store
        .ping_webhook(
            &caller.org_id,
            caller.env,
            &wanted,
            webhook_json(&webhook)?,
            now,
        )
        .await?
        .ok_or_else(missing)?;
    let answer = wire_json(&wire::PingAnswer { event })?;
    Ok((StatusCode::ACCEPTED, axum::Json(answer)).into_response())
}
