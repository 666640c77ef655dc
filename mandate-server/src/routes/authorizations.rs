//! `POST /v1/authorizations`: the hot path. The decision service locks the agent,
//! evaluates, signs and stores (with the review it opens, its event and its idempotency
//! record, in one transaction); the 201 is sent only after the commit.

use axum::Router;
use axum::extract::{Extension, State};
use axum::response::Response;
use axum::routing::post;
use mandate_core::Bindings;
use mandate_core::policy::AuthorizationRequest;

use super::ap2;
use crate::decision::service::{DecisionError, Input};
use crate::http::auth::AgentSlotHandle;
use crate::http::body::JsonBytes;
use crate::http::error::ApiError;
use crate::http::idempotency::{AlreadyStored, IdempotencySlot};
use crate::model::Caller;
use crate::state::AppState;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/v1/authorizations", post(authorize))
}

async fn authorize(
    State(state): State<AppState>,
    caller: Caller,
    slot: Option<Extension<AgentSlotHandle>>,
    idempotency: Option<Extension<IdempotencySlot>>,
    body: Result<JsonBytes, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    let agent = caller.require_agent()?.clone();
    let JsonBytes(body) = body?;
    let now = state.now();
    // With `ap2`: the agent's AP2 closed payment mandate for exactly this payment
    // (routes/ap2.rs), a single-use credential.
    let (request, presented) = match ap2::split_authorization(&body)? {
        Some((plain, presentation)) => {
            let request = AuthorizationRequest::from_json(agent.clone(), &plain)?;
            let presented =
                ap2::closed_mandate(&state, &caller, &agent, &request, &presentation, now).await?;
            (request, Some(presented))
        }
        None => (AuthorizationRequest::from_json_bytes(agent, &body)?, None),
    };
    let (credential, bindings) = match presented {
        Some(p) => (
            Some(p.credential),
            Bindings {
                ap2_mandate: Some(p.open_digest),
                ap2_transaction: Some(p.transaction_id),
                ..Bindings::default()
            },
        ),
        None => (None, Bindings::default()),
    };
    let mode = state.mode(&caller.org_id, caller.env).await?;
    let slot = slot.map(|Extension(AgentSlotHandle(slot))| slot);
    // The answer is sealed for its idempotency record before it is stored (again if the
    // decision is made again on fresh state).
    let seal = |body: &[u8]| match &idempotency {
        Some(Extension(slot)) => slot
            .seal(201, body)
            .map(|sealed| Some(slot.record(201, sealed)))
            .map_err(|e| DecisionError::Encoding(e.to_string())),
        None => Ok(None),
    };
    let answer = state
        .decider(&caller, mode, now)?
        .run(
            Input::Request {
                request,
                slot,
                credential,
                bindings,
            },
            seal,
        )
        .await?;
    let mut response = crate::routes::created_encoded(answer);
    if idempotency.is_some() {
        response.extensions_mut().insert(AlreadyStored);
    }
    Ok(response)
}
