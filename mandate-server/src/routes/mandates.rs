//! `POST/GET /v1/mandates`, `GET/DELETE /v1/mandates/{id}`, `POST /v1/mandates/{id}/revoke`:
//! handlers that extract, call [`crate::services::mandates`] and answer.

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::routing::{get, post};

use super::{created, ok};
use crate::http::body::JsonBody;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::http::list;
use crate::model::Caller;
use crate::services::mandates;
use crate::state::AppState;
use crate::storage::mandates::Filters;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/mandates", post(create).get(index))
        .route("/v1/mandates/{id}", get(show).delete(delete))
        .route("/v1/mandates/{id}/revoke", post(revoke))
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    caller.require_org()?;
    let JsonBody(body) = body?;
    let shown = state.mandates().create(&caller, body, state.now()).await?;
    Ok(created(shown))
}

async fn index(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = list::parse(query.as_deref(), &["agent", "status"])?;
    let status = mandates::status_filter(params.filters.get("status"))?;
    let mut agent = params.filters.get("agent").cloned();
    if let Some(own) = &caller.agent {
        if agent.as_ref().is_some_and(|a| a != own.as_str()) {
            return Ok(ok(list::empty()));
        }
        agent = Some(own.to_string());
    }
    let context = list::context("mandates", &caller, &params);
    let before = list::start(state.paging(), &params, &context)?;
    let filters = Filters { agent, status };
    let limit = params.limit + 1;
    let rows = state
        .mandates()
        .page(&caller, &filters, before, limit, state.now())
        .await?;
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
    Ok(ok(state.mandates().show(&caller, &id, state.now()).await?))
}

async fn delete() -> ApiError {
    ApiError::InvalidRequest(
        "DELETE is not supported on /v1/mandates/{id}; to end a mandate, POST /v1/mandates/{id}/revoke".into(),
    )
}

async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let revoked = state.mandates().revoke(&caller, &id, state.now()).await?;
    // Its `mandate.revoked` event is delivered at once.
    state.news.evented(&caller.org_id);
    Ok(ok(revoked))
}
