//! `POST /v1/authorizations`: the hot path. The route extracts the caller (an agent key,
//! checked before the body: a wrong key gets 403 whatever it sent), the body, the agent's
//! slot and the Idempotency-Key claim, makes one call of the authorization use case
//! (services/authorizations.rs), and answers 201 with what it committed.

use axum::Router;
use axum::extract::{Extension, State};
use axum::response::Response;
use axum::routing::post;

use crate::decision::agents::AgentSlotHandle;
use crate::http::body::JsonBytes;
use crate::http::error::ApiError;
use crate::http::idempotency::{AlreadyStored, IdempotencySlot};
use crate::model::Caller;
use crate::services::authorizations::{AgentCaller, Authorize, IdempotencyClaim};
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
    let agent = AgentCaller::of(&caller)?;
    let JsonBytes(body) = body?;
    let command = Authorize {
        agent,
        body: &body,
        slot: slot.map(|Extension(AgentSlotHandle(slot))| slot),
        idempotency: idempotency
            .as_ref()
            .map(|Extension(claim)| claim as &dyn IdempotencyClaim),
    };
    let authorized = state.authorizations().authorize(command).await?;
    let mut response = crate::routes::created_encoded(authorized.answer);
    if authorized.recorded {
        // The layer does not store it again.
        response.extensions_mut().insert(AlreadyStored);
    }
    Ok(response)
}
