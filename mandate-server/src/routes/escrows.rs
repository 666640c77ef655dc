//! `POST /v1/escrows`, `GET /v1/escrows/{id}` and
//! `POST /v1/escrows/{id}/deliver|release|refund|dispute`.
//!
//! An escrow is funded by an unexpired `allow` decision of its buyer for the same amount,
//! currency and recipient ([`mandate_core::funding`]) and spends it. Its transitions are
//! [`mandate_core::escrow::transition`]. Each change, its history step, its money movement
//! (through the live [`crate::settlement::SettlementProvider`]) and its `escrow.*` event
//! are one transaction. Escrows are public contracts: any valid key that holds the id reads
//! one, whatever its organization; only the funding organization's keys move it.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use mandate_core::escrow::{EscrowAction, EscrowStatus, HistoryEntry};
use mandate_core::funding::{FundingError, FundingRequest, check_funding};
use mandate_core::id::EscrowId;
use mandate_core::wire;
use serde_json::Value;
use time::OffsetDateTime;

use super::{created, ok, wire_json};
use crate::clock::{from_ms, ms, random16};
use crate::http::body::JsonBody;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::model::Caller;
use crate::model::decision::Decision;
use crate::settlement::{Movement, MovementKind, SettlementError};
use crate::state::AppState;
use crate::storage::escrows::{EscrowChange, EscrowRow};
use crate::storage::events::NewEvent;

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

/// The actor of every history step: only the funding organization's keys move an escrow,
/// and the public contract names it by its role, not its organization id.
pub const FUNDER: &str = "funder";

/// An escrow in its API shape, also the `data` of every `escrow.*` event. `escrow` repeats
/// `id` under the name the event data of the written interface uses. `environment` tells a
/// reader of another organization whether the money is real (`live`) or not (`sandbox`);
/// the funding organization's id is not shown.
pub fn escrow_wire(e: &EscrowRow) -> wire::Escrow {
    wire::Escrow {
        amount: e.amount,
        arbiter: e.arbiter.clone(),
        buyer: e.buyer.clone(),
        created_at: from_ms(e.created_ms),
        currency: e.currency.clone(),
        decision: e.decision.clone(),
        disputed: e.status.disputed,
        environment: e.env.clone(),
        escrow: e.id.clone(),
        history: e.history.clone(),
        id: e.id.clone(),
        seller: e.seller.clone(),
        state: e.status.state,
    }
}

/// An escrow as the JSON value of an answer or an event's data.
pub fn escrow_json(e: &EscrowRow) -> Result<Value, ApiError> {
    wire_json(&escrow_wire(e))
}

fn settle_error(e: SettlementError) -> ApiError {
    ApiError::Server(e.to_string())
}

fn refused(e: FundingError) -> ApiError {
    ApiError::InvalidRequest(e.to_string())
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
    let now = state.now();
    let decision = funding_decision(&state, &caller, &request).await?;
    check_funding(&request, &decision.claims, now).map_err(refused)?;
    let escrow = new_escrow(EscrowId::from_random(random16()), &caller, &request, now);
    let movement = state
        .settlement
        .settle(&movement(&escrow, MovementKind::Lock), escrow.created_ms)
        .map_err(settle_error)?;
    let event = NewEvent {
        event_type: "escrow.funded",
        data: escrow_json(&escrow)?,
    };
    let funded = state
        .store
        .fund_escrow(
            escrow.clone(),
            decision.claims.nonce.as_str(),
            movement,
            event,
        )
        .await?;
    if !funded {
        return Err(refused(FundingError::Spent {
            decision: request.decision.clone(),
        }));
    }
    Ok(created(escrow_json(&escrow)?))
}

/// Any valid key of any organization reads an escrow by its id: it is a public contract.
async fn show(
    State(state): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let escrow = match EscrowId::parse(&id) {
        Ok(wanted) => state.store.escrow(&wanted, None).await?,
        Err(_) => None,
    };
    let escrow = escrow.ok_or_else(|| ApiError::not_found("escrow", &id))?;
    Ok(ok(escrow_json(&escrow)?))
}

/// The decision `request` would fund, of the caller's organization and environment.
/// Decisions are never changed once stored: the one read is checked outside the write, and
/// the escrow's unique keys decide between racing requests.
async fn funding_decision(
    state: &AppState,
    caller: &Caller,
    request: &FundingRequest,
) -> Result<Decision, ApiError> {
    let wanted = request.decision.as_str();
    state
        .store
        .decision(&caller.org_id, caller.env, None, &request.decision)
        .await?
        .ok_or_else(|| ApiError::not_found("decision", wanted))
}

/// A new escrow, funded now by `request`.
fn new_escrow(
    id: EscrowId,
    caller: &Caller,
    request: &FundingRequest,
    now: OffsetDateTime,
) -> EscrowRow {
    EscrowRow {
        id,
        org_id: caller.org_id.to_string(),
        env: caller.env.as_str().to_owned(),
        amount: request.amount,
        currency: request.currency.clone(),
        buyer: request.buyer.clone(),
        seller: request.seller.clone(),
        decision: request.decision.clone(),
        arbiter: request.arbiter.clone(),
        status: EscrowStatus::FUNDED,
        history: vec![HistoryEntry::new(EscrowStatus::FUNDED, now, FUNDER)],
        created_ms: ms(now),
    }
}

/// The money movement of `kind` for `escrow`: a lock from the buyer into the escrow, a
/// release to the seller or a refund to the buyer out of it.
fn movement(escrow: &EscrowRow, kind: MovementKind) -> Movement<'_> {
    let (from, to) = match kind {
        MovementKind::Lock => (escrow.buyer.as_str(), escrow.id.as_str()),
        MovementKind::Release => (escrow.id.as_str(), escrow.seller.as_str()),
        MovementKind::Refund => (escrow.id.as_str(), escrow.buyer.as_str()),
    };
    Movement {
        escrow: escrow.id.as_str(),
        kind,
        amount: escrow.amount,
        currency: &escrow.currency,
        from,
        to,
    }
}

/// Applies `action` to `escrow` as read (its status and history), settling its money
/// movement: the change to write if the escrow still stands where it was read.
fn apply(
    state: &AppState,
    escrow: &mut EscrowRow,
    action: EscrowAction,
    now: OffsetDateTime,
) -> Result<EscrowChange, ApiError> {
    let from = escrow.status;
    let to = from
        .apply(action)
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let entry = HistoryEntry::new(to, now, FUNDER);
    let step = escrow.history.len();
    escrow.status = to;
    escrow.history.push(entry.clone());
    let movement = match MovementKind::for_action(action) {
        Some(kind) => Some(
            state
                .settlement
                .settle(&movement(escrow, kind), ms(now))
                .map_err(settle_error)?,
        ),
        None => None,
    };
    Ok(EscrowChange {
        from,
        entry,
        step,
        movement,
        event: NewEvent {
            event_type: event_type(action),
            data: escrow_json(escrow)?,
        },
    })
}

/// The event each action fires.
fn event_type(action: EscrowAction) -> &'static str {
    match action {
        EscrowAction::Deliver => "escrow.delivered",
        EscrowAction::Release => "escrow.released",
        EscrowAction::Refund => "escrow.refunded",
        EscrowAction::Dispute => "escrow.disputed",
    }
}

/// Applies `action` to an escrow of the caller's organization and environment: the state
/// change, its history step, its money movement and its event, in one transaction. A
/// refused action writes nothing.
///
/// The change is computed from the escrow as read, and written only if the escrow still
/// stands where it was read; when another change came first, it is read again and the
/// action judged anew, so concurrent actions apply one after the other.
async fn act(
    state: AppState,
    caller: Caller,
    id: String,
    action: EscrowAction,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let now = state.now();
    let missing = || ApiError::not_found("escrow", &id);
    let wanted = EscrowId::parse(&id).map_err(|_| missing())?;
    let owner = Some((&*caller.org_id, caller.env));
    let escrow = loop {
        let mut escrow = state
            .store
            .escrow(&wanted, owner)
            .await?
            .ok_or_else(missing)?;
        let change = apply(&state, &mut escrow, action, now)?;
        if state
            .store
            .advance_escrow(&caller.org_id, caller.env, &wanted, change)
            .await?
        {
            break escrow;
        }
    };
    Ok(ok(escrow_json(&escrow)?))
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
