//! `POST /v1/authorizations`: the hot path. The decision service locks the agent,
//! evaluates, signs and stores (with the review it opens, its event and its idempotency
//! record, in one transaction); the 201 is sent only after the commit.

use axum::Router;
use axum::extract::{Extension, State};
use axum::response::Response;
use axum::routing::post;
use mandate_core::claims::Bindings;
use mandate_core::id::AgentId;
use mandate_core::policy::AuthorizationRequest;
use mandate_core::x402::{Inconsistency, PaymentRequirements};
use mandate_core::{FieldError, parse_body};

use crate::decision::agents::AgentSlotHandle;
use crate::decision::service::{DecisionError, Input};
use crate::http::body::JsonBytes;
use crate::http::error::ApiError;
use crate::http::fields::invalid;
use crate::http::idempotency::{AlreadyStored, IdempotencySlot};
use crate::model::Caller;
use crate::services::ap2;
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
    // (services/ap2.rs), a single-use credential; the rest of the body is read as without.
    let (request, mut bindings, presentation) = match ap2::split_authorization(&body)? {
        Some((plain, presentation)) => {
            let plain = serde_json::to_vec(&plain)
                .map_err(|e| ApiError::Server(format!("re-encoding the request: {e}")))?;
            let (request, bindings) = read_body(agent.clone(), &plain)?;
            (request, bindings, Some(presentation))
        }
        None => {
            let (request, bindings) = read_body(agent.clone(), &body)?;
            (request, bindings, None)
        }
    };
    let credential = match presentation {
        Some(presentation) => {
            let presented =
                ap2::closed_mandate(&state, &caller, &agent, &request, &presentation, now).await?;
            bindings.ap2_mandate = Some(presented.open_digest);
            bindings.ap2_transaction = Some(presented.transaction_id);
            Some(presented.credential)
        }
        None => None,
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

/// The request, and what its verdict is bound to: the body's optional `x402` member (an
/// x402 v2 PaymentRequirements, or a PaymentPayload whose `accepted` requirements are read)
/// gives the `x402_payment` claim once it is consistent with the request (recipient
/// `vendor:<payTo>`, a fiat asset the currency; the amount in the asset's atomic units is
/// left to the verifier, who knows the asset's decimals: docs/protocols.md). A body
/// without it takes the usual way, and its errors are that way's.
fn read_body(agent: AgentId, body: &[u8]) -> Result<(AuthorizationRequest, Bindings), ApiError> {
    let first = match AuthorizationRequest::from_json_bytes(agent.clone(), body) {
        Ok(request) => return Ok((request, Bindings::default())),
        Err(e) => e,
    };
    let Ok(mut value) = parse_body(body) else {
        return Err(first.into());
    };
    let Some(x402) = take_x402(&mut value) else {
        return Err(first.into());
    };
    let request = AuthorizationRequest::from_json(agent, &value)?;
    let bindings = Bindings {
        x402_payment: x402_payment(&x402, &request)?,
        ..Bindings::default()
    };
    Ok((request, bindings))
}

/// Takes the `x402` member out of a body read as a tree (what is left is the request
/// `AuthorizationRequest::from_json` reads); `None` when it has none.
pub fn take_x402(body: &mut serde_json::Value) -> Option<serde_json::Value> {
    body.as_object_mut().and_then(|o| o.remove("x402"))
}

/// The `x402_payment` claim for the `x402` member taken from a request's body (`None` for
/// a null one), or the 400 naming what in it is malformed or not the request's payment.
pub fn x402_payment(
    x402: &serde_json::Value,
    request: &AuthorizationRequest,
) -> Result<Option<String>, ApiError> {
    if x402.is_null() {
        return Ok(None);
    }
    let payment = PaymentRequirements::from_json(x402, "x402")?;
    let refused = payment.consistency(request.amount, &request.currency, &request.recipient, None);
    if let Some(first) = refused.first() {
        return Err(inconsistent(x402, first).into());
    }
    Ok(Some(payment.digest()))
}

/// The 400 for an x402 payment that is not the request's, naming the x402 member.
fn inconsistent(x402: &serde_json::Value, problem: &Inconsistency) -> FieldError {
    let base = if x402.get("accepted").is_some() {
        "x402.accepted"
    } else {
        "x402"
    };
    let member = match problem {
        Inconsistency::PayTo { .. } => "payTo",
        Inconsistency::Asset { .. } => "asset",
        _ => "amount",
    };
    invalid(
        &format!("{base}.{member}"),
        format!("does not match the request: {problem}"),
    )
}
