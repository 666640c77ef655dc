//! `POST /v1/reviews/{id}/approve` and `POST /v1/reviews/{id}/deny`.
//!
//! There is no read path for reviews: a pending review is visible through the decision that
//! opened it and through the `decision.review_pending` event.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use mandate_core::{
    DecisionId, unstable::fields::check_fields, unstable::fields::invalid,
    unstable::fields::object, unstable::fields::present, unstable::fields::string,
    unstable::id::ReviewId, unstable::review::Review, unstable::review::ReviewError,
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

/// Loads a review of the caller's organization and environment, or 404.
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
        .map(|(review, _agent)| review)
        .ok_or_else(|| ApiError::not_found("review", id))
}

/// Stores a resolution made without a fresh decision (a denial, an expiry); a review no
/// longer pending is a 400.
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
        Err(DecisionError::AlreadyResolved(id).into())
    }
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
        && let Err(e @ ApiError::Server(_)) = resolve(state, caller, expired).await
    {
        return e;
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
    let mode = state.mode(&caller.org_id, caller.env).await?;
    let answer = state
        .decider(&caller, mode, now)?
        .run(
            Input::Approval {
                approved,
                original: Box::new(original),
            },
            |_| Ok(None),
        )
        .await?;
    Ok(created_encoded(answer))
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
    let reason = deny_reason(body.as_ref())?;
    let now = state.now();
    let review = find(&state, &caller, &id).await?;
    let denied = match review.deny(reason, now) {
        Ok(r) => r,
        Err(e) => return Err(refuse(&state, &caller, &review, e).await),
    };
    resolve(&state, &caller, denied.clone()).await?;
    Ok(ok(
        super::wire_json::<mandate_core::unstable::wire::Review>(&denied)?,
    ))
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
