//! `POST /v1/escrows`, `GET /v1/escrows/{id}` and
//! `POST /v1/escrows/{id}/deliver|release|refund|dispute`: extract, call
//! [`crate::services::escrows`], answer. Escrows are public contracts: any valid key that
//! holds the id reads one, whatever its organization; only the funding organization's keys
//! fund and move them.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use mandate_protocol::{escrow::EscrowAction, funding::FundingRequest, id::EscrowId};

use super::{created, ok, wire_json};
use crate::clock::random16;
use crate::http::body::JsonBody;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::model::Caller;
use crate::services::escrows::{self, escrow_wire};
use crate::state::AppState;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/escrows", post(create))
        .route("/v1/escrows/{id}", get(show))
        .route("/v1/escrows/{id}/deliver", post(deliver))
        .route("/v1/escrows/{id}/release", post(release))
        .route("/v1/escrows/{id}/refund", post(refund))
        .route("/v1/escrows/{id}/dispute", post(dispute))
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    caller.require_org()?;
    let JsonBody(body) = body?;
    let request = FundingRequest::from_json(&body)?;
    let id = EscrowId::from_random(random16());
    let owner = (&*caller.org_id, caller.env);
    let settlement = state.settlement.as_ref();
    let escrow = escrows::fund(
        state.store.as_ref(),
        settlement,
        owner,
        id,
        &request,
        state.now(),
    )
    .await?;
    // Its `escrow.funded` event is delivered at once.
    state.news.evented(&caller.org_id);
    Ok(created(wire_json(&escrow_wire(&escrow))?))
}

async fn show(
    State(state): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let escrow = escrows::show(state.store.as_ref(), &id).await?;
    Ok(ok(wire_json(&escrow_wire(&escrow))?))
}

async fn act(
    state: AppState,
    caller: Caller,
    id: String,
    action: EscrowAction,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let owner = (&*caller.org_id, caller.env);
    let settlement = state.settlement.as_ref();
    let escrow = escrows::act(
        state.store.as_ref(),
        settlement,
        owner,
        &id,
        action,
        state.now(),
    )
    .await?;
    // Its event is delivered at once.
    state.news.evented(&caller.org_id);
    Ok(ok(wire_json(&escrow_wire(&escrow))?))
}

async fn deliver(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    act(state, caller, id, EscrowAction::Deliver).await
}

async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    act(state, caller, id, EscrowAction::Release).await
}

async fn refund(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    act(state, caller, id, EscrowAction::Refund).await
}

async fn dispute(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    act(state, caller, id, EscrowAction::Dispute).await
}
