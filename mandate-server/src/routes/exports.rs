//! `GET /v1/exports/decisions`: every decision matching the list filters, as NDJSON, oldest
//! first, without pagination, for audit; with `after` (a decision's id), only those
//! committed after that one. The handler reads the query and answers the stream
//! [`crate::services::exports`] makes, with the decision log's newest checkpoint as of the
//! start in the header `Mandate-Log-Checkpoint`.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mandate_core::DecisionId;

use crate::http::error::ApiError;
use crate::http::list;
use crate::model::Caller;
// The export takes the filters of `GET /v1/decisions`.
use crate::routes::decisions::{FILTERS, filters};
use crate::services::exports::{self, PAGE};
use crate::state::AppState;

/// The media type of the export.
pub const NDJSON: &str = "application/x-ndjson";

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/v1/exports/decisions", get(export))
}

/// Parses the filters and `after`; `limit` and `cursor` are refused, since the export is
/// not paginated.
fn parse(query: Option<&str>) -> Result<(list::ListParams, Option<DecisionId>), ApiError> {
    let mut filters = BTreeMap::new();
    let mut after = None;
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "limit" | "cursor" => {
                return Err(ApiError::InvalidRequest(
                    "the export is not paginated: it takes no limit or cursor, only the filters agent, verdict, policy_verdict and review_status, and after".into(),
                ));
            }
            "after" => {
                if after.is_some() {
                    return Err(ApiError::InvalidRequest(
                        "query parameter after is given more than once".into(),
                    ));
                }
                let id = DecisionId::parse(&value).map_err(|_| {
                    ApiError::InvalidRequest(
                        "after must be a decision id (dec_…): the last decision a previous export returned".into(),
                    )
                })?;
                after = Some(id);
            }
            known if FILTERS.contains(&known) => {
                if filters
                    .insert(known.to_owned(), value.into_owned())
                    .is_some()
                {
                    return Err(ApiError::InvalidRequest(format!(
                        "query parameter {known} is given more than once"
                    )));
                }
            }
            other => {
                let shown: String = other.chars().take(64).collect();
                return Err(ApiError::InvalidRequest(format!(
                    "unknown query parameter {shown}; the export takes agent, verdict, policy_verdict, review_status and after"
                )));
            }
        }
    }
    let params = list::ListParams {
        limit: PAGE,
        cursor: None,
        filters,
    };
    Ok((params, after))
}

/// The header carrying the newest checkpoint of the organization's decision log as of
/// the export's start (the signed note in standard base64: a header holds no newline).
pub const LOG_CHECKPOINT_HEADER: &str = "mandate-log-checkpoint";

fn ndjson(body: Body, checkpoint: Option<&str>) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, NDJSON),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response();
    let encoded = checkpoint.map(|note| STANDARD.encode(note));
    if let Some(value) = encoded.and_then(|e| HeaderValue::from_str(&e).ok()) {
        response.headers_mut().insert(LOG_CHECKPOINT_HEADER, value);
    }
    response
}

async fn export(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let (params, after) = parse(query.as_deref())?;
    let Some(filters) = filters(&caller, &params)? else {
        return Ok(ndjson(Body::empty(), None));
    };
    let (checkpoint, stream) = exports::start(state.store.clone(), &caller, filters, after).await?;
    let note = checkpoint.as_ref().map(|c| c.note.as_str());
    Ok(ndjson(Body::from_stream(stream), note))
}
