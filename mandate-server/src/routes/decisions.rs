//! `GET /v1/decisions` and `GET /v1/decisions/{id}`. Agent keys see their own only.
//!
//! Besides the spec's filters, `review_status` lists the decisions whose review stands in
//! that status (the review console's pending reviews), and a decision read here that
//! opened a review carries `review_status` and `review_expires_at`. Every decision read
//! carries `log`, its place in the organization's decision log with the proof, once a
//! checkpoint covers it (`services/decision_log.rs`).

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::routing::get;
use mandate_core::{DecisionId, Verdict};
use mandate_protocol::review::ReviewStatus;

use super::ok;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::http::list;
use crate::model::Caller;
use crate::services::decision_log;
use crate::state::AppState;
use crate::storage::decisions::Filters;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/decisions", get(index))
        .route("/v1/decisions/{id}", get(show))
}

fn verdict_filter(params: &list::ListParams, name: &str) -> Result<Option<Verdict>, ApiError> {
    params
        .filters
        .get(name)
        .map(|v| {
            Verdict::parse(v).ok_or_else(|| {
                ApiError::InvalidRequest(format!(
                    "{name} must be one of allow, review, deny_no_mandate, deny_revoked, deny_expired, deny_replay, deny_velocity, deny_category, deny_recipient, deny_limit"
                ))
            })
        })
        .transpose()
}

/// The filters of `GET /v1/decisions`, and of the export.
pub const FILTERS: &[&str] = &["agent", "verdict", "policy_verdict", "review_status"];

fn review_status_filter(params: &list::ListParams) -> Result<Option<ReviewStatus>, ApiError> {
    params
        .filters
        .get("review_status")
        .map(|v| {
            ReviewStatus::parse(v).ok_or_else(|| {
                ApiError::InvalidRequest(
                    "review_status must be one of pending, approved, denied, expired".into(),
                )
            })
        })
        .transpose()
}

/// Parses the decision filters of a list or export request for this caller. `None` means
/// an agent key asked for another agent: the answer is empty.
pub fn filters(caller: &Caller, params: &list::ListParams) -> Result<Option<Filters>, ApiError> {
    let mut agent = params.filters.get("agent").cloned();
    if let Some(own) = &caller.agent {
        if agent.as_ref().is_some_and(|a| a != own.as_str()) {
            return Ok(None);
        }
        agent = Some(own.to_string());
    }
    Ok(Some(Filters {
        agent,
        verdict: verdict_filter(params, "verdict")?,
        policy_verdict: verdict_filter(params, "policy_verdict")?,
        review_status: review_status_filter(params)?,
    }))
}

async fn index(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = list::parse(query.as_deref(), FILTERS)?;
    let context = list::context("decisions", &caller, &params);
    let mut before = list::start(state.paging(), &params, &context)?;
    let Some(filters) = filters(&caller, &params)? else {
        return Ok(ok(list::empty()));
    };
    if params.cursor.is_none() {
        // The first page starts at the log's watermark, so that nothing committed later can
        // land below it (docs/exports.md, "A log that never skips"); the next pages follow
        // its cursor down.
        before = state
            .store
            .settled_decision_seq(&caller.org_id)
            .await?
            .saturating_add(1);
    }
    let rows = state
        .store
        .decisions_page(
            &caller.org_id,
            caller.env,
            &filters,
            before,
            params.limit + 1,
        )
        .await?;
    let shown =
        decision_log::with_log(&*state.store, &caller.org_id, caller.env, &rows, None).await?;
    let rows = rows.iter().map(|(seq, _)| *seq).zip(shown).collect();
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
    let decision = match DecisionId::parse(&id) {
        Ok(wanted) => {
            state
                .store
                .decision_at(&caller.org_id, caller.env, caller.agent.as_ref(), &wanted)
                .await?
        }
        Err(_) => None,
    };
    let Some(row) = decision else {
        return Err(ApiError::not_found("decision", &id));
    };
    let store = &*state.store;
    let mut shown = decision_log::with_log(store, &caller.org_id, caller.env, &[row], None).await?;
    Ok(ok(shown.pop().unwrap_or_default()))
}
