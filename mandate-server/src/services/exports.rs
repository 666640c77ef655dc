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
//! memory. The export also fixes, when it starts, the newest checkpoint of the
//! organization's decision log readers are shown: the route answers it in a header, and
//! every line it covers carries its `log` against it (`null` after it). A failure after the first byte aborts the response, which the client sees as a
//! body that did not end properly (no final chunk), never as a short but valid export.

use std::sync::Arc;

use axum::body::Bytes;
use futures_util::Stream;
use mandate_core::DecisionId;

use crate::model::decision::Decision;
use crate::model::{Caller, Env};
use crate::services::decision_log;
use crate::storage::decisions::Filters;
use crate::storage::log::ShownCheckpoint;
use crate::storage::{StorageError, Store};

/// Decisions read (and held) at a time.
pub const PAGE: i64 = 1000;

/// Why an export could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// `after` names no decision the caller can read (as a read of it would answer).
    #[error(
        "after names no decision of this environment that this key can read ({0}): pass the id of the last decision a previous export returned"
    )]
    UnknownAfter(DecisionId),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A decision could not be encoded.
    #[error("encoding a decision: {0}")]
    Encoding(String),
}

/// The export of the decisions `filters` select that `caller` may read, committed after
/// the decision `after` (from the first when `None`), as a stream of NDJSON chunks, and
/// the decision log's checkpoint its lines prove against: the first page is read before
/// this returns.
pub async fn start(
    store: Arc<dyn Store>,
    caller: &Caller,
    filters: Filters,
    after: Option<DecisionId>,
) -> Result<
    (
        Option<ShownCheckpoint>,
        impl Stream<Item = Result<Bytes, ExportError>> + use<>,
    ),
    ExportError,
> {
    let (org, env) = (caller.org_id.clone(), caller.env);
    // Where an incremental export resumes: the seq of the decision it names, which must be
    // one the caller can read.
    let after = match after {
        None => 0,
        Some(id) => store
            .decision_seq(&org, env, caller.agent.as_ref(), &id)
            .await?
            // As a read of that decision would answer: not found, for this key.
            .ok_or(ExportError::UnknownAfter(id))?,
    };
    // The checkpoint first: every decision it covers is at or below the watermark read
    // after it, so each covered decision is in the export.
    let checkpoint = store.shown_checkpoint(&org, env).await?;
    let upto = store.settled_decision_seq(&org).await?;
    let mut walk = Walk {
        store,
        org: org.to_string(),
        env,
        filters,
        upto,
        after,
        checkpoint: checkpoint.clone(),
        ready: None,
        done: false,
    };
    walk.ready = Some(read_page(&walk).await?);
    Ok((checkpoint, futures_util::stream::unfold(walk, next_chunk)))
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
    /// The decision log's checkpoint the lines prove against.
    checkpoint: Option<ShownCheckpoint>,
    /// A page already read (the first one) and not sent yet.
    ready: Option<Page>,
    done: bool,
}

/// A page of the export.
struct Page {
    /// The seq of its last decision (`None`: empty).
    last: Option<i64>,
    /// How many decisions.
    len: usize,
    /// Its NDJSON lines.
    lines: Bytes,
}

/// The next page after `walk.after`, each decision with its `log`.
async fn read_page(walk: &Walk) -> Result<Page, ExportError> {
    let store = &*walk.store;
    let rows: Vec<(i64, Decision)> = store
        .decisions_export_page(
            &walk.org,
            walk.env,
            &walk.filters,
            walk.after,
            walk.upto,
            PAGE,
        )
        .await?;
    let at = walk.checkpoint.clone();
    let shown = match at {
        // Without a checkpoint nothing is covered: every line's log is null.
        None => rows.iter().map(|(_, d)| with_null_log(d)).collect(),
        Some(at) => decision_log::with_log(store, &walk.org, walk.env, &rows, Some(at)).await?,
    };
    let mut out = Vec::with_capacity(rows.len() * 1200);
    for line in &shown {
        serde_json::to_writer(&mut out, line).map_err(|e| ExportError::Encoding(e.to_string()))?;
        out.push(b'\n');
    }
    Ok(Page {
        last: rows.last().map(|(seq, _)| *seq),
        len: rows.len(),
        lines: Bytes::from(out),
    })
}

/// A decision as a line, with `log: null`.
fn with_null_log(decision: &Decision) -> serde_json::Value {
    let mut json = decision.to_json();
    if let serde_json::Value::Object(members) = &mut json {
        members.insert("log".into(), serde_json::Value::Null);
    }
    json
}

/// The next chunk of the export, or `None` when it is complete.
async fn next_chunk(mut walk: Walk) -> Option<(Result<Bytes, ExportError>, Walk)> {
    if walk.done {
        return None;
    }
    let page = match walk.ready.take() {
        Some(page) => page,
        None => match read_page(&walk).await {
            Ok(page) => page,
            Err(e) => {
                tracing::error!("export aborted: {e}");
                walk.done = true;
                return Some((Err(e), walk));
            }
        },
    };
    walk.after = page.last?;
    walk.done = i64::try_from(page.len).unwrap_or(i64::MAX) < PAGE;
    Some((Ok(page.lines), walk))
}
