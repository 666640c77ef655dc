//! `POST /v1/reviews/{id}/approve` and `POST /v1/reviews/{id}/deny`.
//!
//! There is no read path for reviews: a pending review is visible through the decision that
//! opened it and through the `decision.review_pending` event.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use mandate_core::field::{check_fields, invalid, object, present, string};
use mandate_core::id::DecisionId;
use mandate_core::policy::{AuthorizationRequest, Verdict, evaluate_approval};
use mandate_core::review::{Review, ReviewError};

use super::{created_encoded, ok};
use crate::clock::{ms, ordered16};
use crate::decision::record::{Decision, Signed, sign_new};
use crate::http::body::OptionalJsonBody;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::model::Caller;
use crate::routes::authorizations::response_body;
use crate::state::AppState;
use crate::storage::{decisions, events, reviews};

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/reviews/{id}/approve", post(approve))
        .route("/v1/reviews/{id}/deny", post(deny))
}

/// Loads a review of the caller's organization and environment, or 404.
async fn find(state: &AppState, caller: &Caller, id: &str) -> Result<(Review, String), ApiError> {
    let (org, env, wanted) = (caller.org_id.clone(), caller.env, id.to_owned());
    state
        .db
        .read(move |conn| -> Result<_, ApiError> {
            Ok(reviews::get(conn, &org, env.as_str(), &wanted)?)
        })
        .await?
        .ok_or_else(|| ApiError::not_found("review", id))
}

/// Turns a refused transition into a 400; an expired review is marked expired first.
async fn refuse(
    state: &AppState,
    caller: &Caller,
    review: &Review,
    error: ReviewError,
) -> ApiError {
    if error == ReviewError::Expired
        && let Ok(expired) = review.expire(state.now())
    {
        let (org, env, now) = (caller.org_id.clone(), caller.env, ms(state.now()));
        let stored = state
            .db
            .write(move |tx| -> Result<(), ApiError> {
                if reviews::resolve(tx, &expired)? {
                    let data = serde_json::to_value(&expired).unwrap_or_default();
                    events::append(tx, &org, env.as_str(), "decision.resolved", &data, now)?;
                }
                Ok(())
            })
            .await;
        if let Err(e) = stored {
            return e;
        }
    }
    ApiError::InvalidRequest(format!("review {} cannot be resolved: {error}", review.id))
}

async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let now = state.now();
    let (review, _agent) = find(&state, &caller, &id).await?;
    let fresh_id = DecisionId::from_random(ordered16(now));
    let approved = match review.approve(fresh_id.clone(), now) {
        Ok(r) => r,
        Err(e) => return Err(refuse(&state, &caller, &review, e).await),
    };
    let (org, env, original_id) = (caller.org_id.clone(), caller.env, review.decision.clone());
    let mode = state.mode(&caller.org_id, caller.env).await?;
    let original = state
        .db
        .read(move |conn| -> Result<_, ApiError> {
            let original = decisions::get(conn, &org, env.as_str(), None, original_id.as_str())?
                .ok_or_else(|| {
                    ApiError::Server(format!("decision {original_id} of a review is missing"))
                })?;
            Ok(original)
        })
        .await?;
    let asked = &original.claims.request;
    let request = AuthorizationRequest {
        agent: asked.agent.clone(),
        amount: asked.amount,
        currency: asked.currency.clone(),
        recipient: asked.recipient.clone(),
        category: asked.category.clone(),
    };

    let mut slot = state
        .agents
        .lock(&state.db, &caller.org_id, caller.env, &request.agent, now)
        .await?;
    let mut agent_state = slot
        .take()
        .ok_or_else(|| ApiError::Server("agent state not loaded".into()))?;
    // The mode in force at approval decides whether the re-check's finding blocks.
    let evaluation = evaluate_approval(
        agent_state.mandate.as_ref(),
        &request,
        &agent_state.history,
        mode,
        now,
    );
    let Signed {
        claims,
        token,
        claims_json,
    } = sign_new(
        &state,
        &caller,
        fresh_id,
        &evaluation,
        agent_state.mandate.as_ref(),
        original.claims.request.clone(),
        now,
    )?;
    let decision = Decision {
        claims,
        reason: evaluation.reason.as_ref().map(ToString::to_string),
        mode,
        supersedes: Some(original.claims.jti.clone()),
        review: None,
        created_ms: ms(now),
        is_request: false,
    };
    let body = response_body(&decision, &token, None, &claims_json)?;
    let (org, env) = (caller.org_id.clone(), caller.env);
    let review_id = review.id.clone();
    let stored = state
        .db
        .write(move |tx| -> Result<(), ApiError> {
            if !reviews::resolve(tx, &approved)? {
                return Err(ApiError::InvalidRequest(format!(
                    "review {review_id} cannot be resolved: it was resolved by another request"
                )));
            }
            decisions::insert(tx, &org, env.as_str(), &decision)?;
            let data = serde_json::to_value(&approved).unwrap_or_default();
            events::append(
                tx,
                &org,
                env.as_str(),
                "decision.resolved",
                &data,
                decision.created_ms,
            )?;
            Ok(())
        })
        .await;
    if let Err(e) = stored {
        *slot = Some(agent_state);
        return Err(e);
    }
    if evaluation.verdict == Verdict::Allow {
        agent_state.history.spend.add(request.amount, now);
    }
    *slot = Some(agent_state);
    Ok(created_encoded(body))
}

async fn deny(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Result<OptionalJsonBody, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    caller.require_org()?;
    let OptionalJsonBody(body) = body?;
    let reason = match &body {
        None => None,
        Some(value) => {
            let fields = object(value)?;
            check_fields(fields, "", &["reason"], &[])?;
            match present(fields, "reason") {
                None => None,
                Some(v) => {
                    let text = string(v, "reason")?;
                    if text.chars().count() > 500 {
                        return Err(invalid("reason", "must be at most 500 characters").into());
                    }
                    Some(text.to_owned())
                }
            }
        }
    };
    let now = state.now();
    let (review, _) = find(&state, &caller, &id).await?;
    let denied = match review.deny(reason, now) {
        Ok(r) => r,
        Err(e) => return Err(refuse(&state, &caller, &review, e).await),
    };
    let (org, env, stored) = (caller.org_id.clone(), caller.env, denied.clone());
    state
        .db
        .write(move |tx| -> Result<(), ApiError> {
            if !reviews::resolve(tx, &stored)? {
                return Err(ApiError::InvalidRequest(format!(
                    "review {} cannot be resolved: it was resolved by another request",
                    stored.id
                )));
            }
            let data = serde_json::to_value(&stored).unwrap_or_default();
            events::append(tx, &org, env.as_str(), "decision.resolved", &data, ms(now))?;
            Ok(())
        })
        .await?;
    Ok(ok(super::wire_json::<mandate_core::wire::Review>(&denied)?))
}
