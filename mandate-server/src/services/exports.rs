//! The decision export below its route (`GET /v1/exports/decisions`): every decision
//! matching the list filters, oldest first, without pagination; with `after` (a decision's
//! id), only those committed after that one: an incremental export. A decision's seq is
//! given in commit order on both engines (docs/exports.md), so resuming after the last
//! decision received skips nothing.
//!
//! The export never holds more than one page of [`PAGE`] decisions. It fixes its upper
//! bound (the highest seq committed when it starts), reads the first page before answering
//! (so a failure there is still an error envelope), then streams: each further page is read
//! through the read pool by seq (keyset pagination) only when the previous chunk has been
//! taken by the connection, so a slow client holds back the reads instead of filling
//! memory. A failure after the first byte aborts the response, which the client sees as a
//! body that did not end properly (no final chunk), never as a short but valid export.

use std::sync::Arc;

use axum::body::Bytes;
use futures_util::Stream;
use mandate_core::id::DecisionId;

use crate::http::error::ApiError;
use crate::model::decision::Decision;
use crate::model::{Caller, Env};
use crate::state::AppState;
use crate::storage::Store;
use crate::storage::decisions::Filters;

/// Decisions read (and held) at a time.
pub const PAGE: i64 = 1000;

/// The export of the decisions `filters` select that `caller` may read, committed after
/// the decision `after` (from the first when `None`), as a stream of NDJSON chunks: the
/// first page is read before this returns.
pub async fn start(
    state: &AppState,
    caller: &Caller,
    filters: Filters,
    after: Option<DecisionId>,
) -> Result<impl Stream<Item = Result<Bytes, ApiError>> + use<>, ApiError> {
    let (org, env) = (caller.org_id.clone(), caller.env);
    // Where an incremental export resumes: the seq of the decision it names, which must be
    // one the caller can read.
    let after = match after {
        None => 0,
        Some(id) => state
            .store
            .decision_seq(&org, env, caller.agent.as_ref(), &id)
            .await?
            .ok_or_else(|| {
                // As a read of that decision would answer: not found, for this key.
                ApiError::NotFound(format!(
                    "after names no decision of this environment that this key can read ({id}): pass the id of the last decision a previous export returned"
                ))
            })?,
    };
    let upto = state.store.settled_decision_seq().await?;
    let first = read_page(&*state.store, &org, env, &filters, after, upto).await?;
    let walk = Walk {
        store: state.store.clone(),
        org: org.to_string(),
        env,
        filters,
        upto,
        after,
        ready: Some(first),
        done: false,
    };
    Ok(futures_util::stream::unfold(walk, next_chunk))
}

/// Where an export stands between two chunks.
struct Walk {
    store: Arc<dyn Store>,
    org: String,
    env: Env,
    filters: Filters,
    /// The highest seq the export covers.
    upto: i64,
    /// The seq of the last decision sent.
    after: i64,
    /// A page already read (the first one) and not sent yet.
    ready: Option<Vec<(i64, Decision)>>,
    done: bool,
}

async fn read_page(
    store: &dyn Store,
    org: &str,
    env: Env,
    filters: &Filters,
    after: i64,
    upto: i64,
) -> Result<Vec<(i64, Decision)>, ApiError> {
    Ok(store
        .decisions_export_page(org, env, filters, after, upto, PAGE)
        .await?)
}

/// One page as NDJSON lines.
fn lines(rows: &[(i64, Decision)]) -> Result<Bytes, ApiError> {
    let mut out = Vec::with_capacity(rows.len() * 640);
    for (_, decision) in rows {
        serde_json::to_writer(&mut out, &decision.to_json())
            .map_err(|e| ApiError::Server(format!("encoding a decision: {e}")))?;
        out.push(b'\n');
    }
    Ok(Bytes::from(out))
}

/// The next chunk of the export, or `None` when it is complete.
async fn next_chunk(mut walk: Walk) -> Option<(Result<Bytes, ApiError>, Walk)> {
    if walk.done {
        return None;
    }
    let rows = match walk.ready.take() {
        Some(rows) => rows,
        None => {
            let page = read_page(
                &*walk.store,
                &walk.org,
                walk.env,
                &walk.filters,
                walk.after,
                walk.upto,
            )
            .await;
            match page {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::error!("export aborted: {e}");
                    walk.done = true;
                    return Some((Err(e), walk));
                }
            }
        }
    };
    let (Some((last, _)), Ok(len)) = (rows.last(), i64::try_from(rows.len())) else {
        return None;
    };
    walk.after = *last;
    walk.done = len < PAGE;
    Some((lines(&rows), walk))
}
