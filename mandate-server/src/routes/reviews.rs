//! `POST /v1/reviews/{id}/approve` and `POST /v1/reviews/{id}/deny`.
//!
//! Both take the organization key. `deny` also takes the agent key of the decision's agent,
//! which withdraws its own pending review (its client no longer wants the payment, e.g. an
//! MCP task was cancelled): the review is denied and says it was withdrawn, and any later
//! resolution of it, an approval above all, is a 409.
//!
//! There is no read path for reviews: a pending review is visible through the decision that
//! opened it and through the `decision.review_pending` event.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use mandate_core::DecisionId;
use mandate_protocol::{
    field::check_fields, field::invalid, field::object, field::present, field::string,
    id::ReviewId, review::Review, review::ReviewError,
};

use super::{created_encoded, ok};
use crate::clock::{ms, ordered16};
use crate::decision::service::{DecisionError, Input};
use crate::http::body::OptionalJsonBody;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::model::Caller;
use crate::state::AppState;
use crate::storage::deciding::Resolution;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/reviews/{id}/approve", post(approve))
        .route("/v1/reviews/{id}/deny", post(deny))
}

/// Loads a review of the caller's organization and environment, or 404; under an agent
/// key, only a review of that agent's decisions (another agent's is 404, as a missing one).
async fn find(state: &AppState, caller: &Caller, id: &str) -> Result<Review, ApiError> {
    let found = match ReviewId::parse(id) {
        Ok(wanted) => {
            state
                .store
                .review(caller.org_id.clone(), caller.env, wanted)
                .await?
        }
        Err(_) => None,
    };
    found
        .filter(|(_review, agent)| caller.agent.as_ref().is_none_or(|own| own == agent))
        .map(|(review, _agent)| review)
        .ok_or_else(|| ApiError::not_found("review", id))
}

/// Stores a resolution made without a fresh decision (a denial, a withdrawal, an expiry);
/// a review no longer pending is refused as [`resolved_meanwhile`] says.
async fn resolve(state: &AppState, caller: &Caller, review: Review) -> Result<(), ApiError> {
    let id = review.id.clone();
    let resolution = Resolution {
        org: caller.org_id.clone(),
        env: caller.env,
        review,
        decision: None,
        at_ms: ms(state.now()),
        hint: Default::default(),
    };
    if state.store.resolve_review(resolution).await?.is_some() {
        // Its `decision.resolved` event is delivered at once.
        state.news.evented(&caller.org_id);
        Ok(())
    } else {
        Err(resolved_meanwhile(state, caller, id).await)
    }
}

/// The refusal of a resolution that found the review resolved by another request: a 409
/// when its agent withdrew it, else a 400.
async fn resolved_meanwhile(state: &AppState, caller: &Caller, id: ReviewId) -> ApiError {
    let found = state
        .store
        .review(caller.org_id.clone(), caller.env, id.clone())
        .await;
    match found {
        Ok(Some((review, _agent))) if review.withdrawn => ApiError::Withdrawn(format!(
            "review {id} cannot be resolved: {}",
            ReviewError::Withdrawn
        )),
        Err(e) => e.into(),
        Ok(_) => DecisionError::AlreadyResolved(id).into(),
    }
}

/// Turns a refused transition into an error: 409 for a review its agent withdrew, else
/// 400; an expired review is marked expired first.
async fn refuse(
    state: &AppState,
    caller: &Caller,
    review: &Review,
    error: ReviewError,
) -> ApiError {
    if error == ReviewError::Expired
        && let Ok(expired) = review.expire(state.now())
        && let Err(e @ ApiError::Server(_)) = resolve(state, caller, expired).await
    {
        return e;
    }
    let message = format!("review {} cannot be resolved: {error}", review.id);
    match error {
        ReviewError::Withdrawn => ApiError::Withdrawn(message),
        _ => ApiError::InvalidRequest(message),
    }
}

async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require_org()?;
    let now = state.now();
    let review = find(&state, &caller, &id).await?;
    let approved = match review.approve(DecisionId::from_random(ordered16(now)), now) {
        Ok(r) => r,
        Err(e) => return Err(refuse(&state, &caller, &review, e).await),
    };
    let original = state
        .store
        .decision(&caller.org_id, caller.env, None, &review.decision)
        .await?
        .ok_or_else(|| {
            ApiError::Server(format!(
                "decision {} of a review is missing",
                review.decision
            ))
        })?;
    let answer = state
        .deciding()
        .decider(&caller, now)
        .await?
        .run(
            Input::Approval {
                approved,
                original: Box::new(original),
            },
            |_| Ok(None),
        )
        .await;
    match answer {
        Ok(answer) => Ok(created_encoded(answer)),
        Err(DecisionError::AlreadyResolved(id)) => {
            Err(resolved_meanwhile(&state, &caller, id).await)
        }
        Err(e) => Err(e.into()),
    }
}

/// A denial with the organization key; with the agent key of the decision's agent, the
/// agent's withdrawal of its own review (denied, and marked withdrawn).
async fn deny(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Result<OptionalJsonBody, ApiError>,
) -> Result<Response, ApiError> {
    let OptionalJsonBody(body) = body?;
    let reason = deny_reason(body.as_ref())?;
    let now = state.now();
    let review = find(&state, &caller, &id).await?;
    let resolved = match caller.agent {
        None => review.deny(reason, now),
        Some(_) => review.withdraw(reason, now),
    };
    let denied = match resolved {
        Ok(r) => r,
        Err(e) => return Err(refuse(&state, &caller, &review, e).await),
    };
    resolve(&state, &caller, denied.clone()).await?;
    Ok(ok(super::wire_json::<mandate_protocol::wire::Review>(
        &denied,
    )?))
}

/// The optional `reason` of a denial's body, at most 500 characters.
fn deny_reason(body: Option<&serde_json::Value>) -> Result<Option<String>, ApiError> {
    Ok(match body {
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
    })
}
