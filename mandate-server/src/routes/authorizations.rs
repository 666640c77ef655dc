//! `POST /v1/authorizations`: the hot path.
//!
//! Under the agent's lock: evaluate with the core, sign, commit the decision (with its
//! review, its event and its idempotency record) in one transaction, then update the
//! in-memory history. The 201 is sent only after the commit. The agent's state is taken
//! out of its slot for the duration, so a request cancelled mid-way leaves the slot empty
//! and the next request rebuilds it from what was actually committed.

use axum::Router;
use axum::extract::{Extension, State};
use axum::response::Response;
use axum::routing::post;
use mandate_core::claims::RequestClaims;
use mandate_core::id::{DecisionId, ReviewId};
use mandate_core::policy::{AuthorizationRequest, evaluate};
use mandate_core::review::Review;

use crate::clock::{ms, ordered16};
use crate::decision::agents::AgentStates;
use crate::decision::record::{Decision, Signed, sign_new};
use crate::http::body::JsonBytes;
use crate::http::error::ApiError;
use crate::http::idempotency::{AlreadyStored, IdempotencySlot};
use crate::model::Caller;
use crate::state::AppState;
use crate::storage::{decisions, events, reviews};

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/v1/authorizations", post(authorize))
}

/// The response body: the decision, its token, and the review it opened.
pub fn response_body(
    decision: &Decision,
    token: &str,
    review: Option<&Review>,
    signed_claims: &[u8],
) -> Result<Vec<u8>, ApiError> {
    decision
        .answer_json(token, review, Some(signed_claims))
        .map_err(|e| ApiError::Server(format!("encoding the decision: {e}")))
}

async fn authorize(
    State(state): State<AppState>,
    caller: Caller,
    slot_ext: Option<Extension<IdempotencySlot>>,
    body: Result<JsonBytes, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    let agent = caller.require_agent()?.clone();
    let JsonBytes(body) = body?;
    let request = AuthorizationRequest::from_json_bytes(agent, &body)?;
    let agent = &request.agent;
    let now = state.now();
    let mode = state.mode(&caller.org_id, caller.env).await?;

    let slot = match &caller.agent_slot {
        Some(slot) => slot.clone(),
        None => state.agents.slot(&caller.org_id, caller.env, agent),
    };
    let mut slot =
        AgentStates::lock_slot(slot, &state.db, &caller.org_id, caller.env, agent, now).await?;
    let mut agent_state = slot
        .take()
        .ok_or_else(|| ApiError::Server("agent state not loaded".into()))?;
    let evaluation = evaluate(
        agent_state.mandate.as_ref(),
        &request,
        &agent_state.history,
        mode,
        now,
    );
    let amount = request.amount;

    let Signed {
        claims,
        token,
        claims_json,
    } = sign_new(
        &state,
        &caller,
        DecisionId::from_random(ordered16(now)),
        &evaluation,
        agent_state.mandate.as_ref(),
        // The request itself is not needed after this: its fields move into the claims.
        RequestClaims {
            agent: request.agent,
            amount,
            currency: request.currency,
            recipient: request.recipient,
            category: request.category,
        },
        now,
    )?;
    let review = evaluation.opens_review().then(|| {
        Review::open(
            ReviewId::from_random(ordered16(now)),
            claims.jti.clone(),
            now,
        )
    });
    let decision = Decision {
        claims,
        reason: evaluation.reason.as_ref().map(ToString::to_string),
        mode,
        supersedes: None,
        review: review.as_ref().map(|r| r.id.clone()),
        created_ms: ms(now),
        is_request: true,
    };
    let bytes = response_body(&decision, &token, review.as_ref(), &claims_json)?;
    // The event's data, encoded here rather than on the writer thread that all share.
    let encoding =
        |e: &dyn std::fmt::Display| ApiError::Server(format!("encoding the decision: {e}"));
    let review_event = match &review {
        Some(_) => {
            let json = decision
                .view_json(Some(&claims_json))
                .map_err(|e| encoding(&e))?;
            Some(String::from_utf8(json).map_err(|e| encoding(&e))?)
        }
        None => None,
    };

    let (org, env) = (caller.org_id.clone(), caller.env);
    let idempotency = slot_ext.map(|Extension(s)| s);
    // The idempotency record keeps a copy of the answer; without a key, nothing to copy.
    let stored_body = idempotency
        .as_ref()
        .map(|slot| slot.seal(201, &bytes))
        .transpose()?;
    let stored_in_tx = idempotency.is_some();
    let hint = agent_state.stored;
    let month = decisions::month_index(decision.created_ms);
    state
        .db
        .write(move |tx| -> Result<(), ApiError> {
            decisions::insert_with(tx, &org, env.as_str(), &decision, hint)?;
            if let (Some(review), Some(data)) = (&review, &review_event) {
                reviews::insert(
                    tx,
                    &org,
                    env.as_str(),
                    decision.claims.request.agent.as_str(),
                    review,
                )?;
                events::append_json(
                    tx,
                    &org,
                    env.as_str(),
                    "decision.review_pending",
                    data,
                    decision.created_ms,
                )?;
            }
            if let (Some(slot), Some(body)) = (&idempotency, &stored_body) {
                slot.complete(tx, 201, body)?;
            }
            Ok(())
        })
        .await?;
    agent_state.history.record(&evaluation, amount, now);
    // Committed: the agent's row for this month is stored.
    agent_state.stored.month_marked = Some(month);
    *slot = Some(agent_state);
    drop(slot);

    let mut response = crate::routes::created_encoded(bytes);
    if stored_in_tx {
        response.extensions_mut().insert(AlreadyStored);
    }
    Ok(response)
}
