//! `POST/GET /v1/webhooks`, `GET/DELETE /v1/webhooks/{id}`, `POST /v1/webhooks/{id}/ping`:
//! extract, call [`crate::services::webhooks`], answer. Organization keys only. A deleted
//! endpoint reads as 404.

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mandate_protocol::{field::check_fields, field::object, field::required, field::string, wire};
use serde_json::Value;

use super::{created, ok, wire_json};
use crate::clock::ms;
use crate::http::body::JsonBody;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::http::list;
use crate::model::Caller;
use crate::services::webhooks::{self, webhook_wire};
use crate::state::AppState;
use crate::storage::webhooks::WebhookRow;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/webhooks", post(create).get(index))
        .route("/v1/webhooks/{id}", get(show).delete(delete))
        .route("/v1/webhooks/{id}/ping", post(ping))
}

fn webhook_json(row: &WebhookRow) -> Result<Value, ApiError> {
    wire_json(&webhook_wire(row))
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
    let url = string(required(fields, "url", "url")?, "url")?;
    let events = webhooks::subscribed(required(fields, "events", "events")?)?;
    let owner = (&*caller.org_id, caller.env);
    let now = ms(state.now());
    let row = webhooks::create(state.store.as_ref(), owner, url, &events, now).await?;
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
    let before = list::start(state.paging(), &params, &context)?;
    let rows = state
        .store
        .webhooks_page(&caller.org_id, caller.env, before, params.limit + 1)
        .await?;
    let rows = rows
        .iter()
        .map(|r| Ok((r.seq, webhook_json(r)?)))
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
    let owner = (&*caller.org_id, caller.env);
    let row = webhooks::show(state.store.as_ref(), owner, &id).await?;
    Ok(ok(webhook_json(&row)?))
}

async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let owner = (&*caller.org_id, caller.env);
    let now = ms(state.now());
    let row = webhooks::delete(state.store.as_ref(), owner, &id, now).await?;
    Ok(ok(webhook_json(&row)?))
}

async fn ping(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let owner = (&*caller.org_id, caller.env);
    let now = ms(state.now());
    let event = webhooks::ping(state.store.as_ref(), owner, &id, now).await?;
    // Delivered at once.
    state.news.evented(&caller.org_id);
    let answer = wire_json(&wire::PingAnswer { event })?;
    Ok((StatusCode::ACCEPTED, axum::Json(answer)).into_response())
}
