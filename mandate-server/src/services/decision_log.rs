//! The decision log on the reads of decisions (docs/audit.md): each decision read
//! (`GET /v1/decisions/{id}`, a list's items, an export's lines) carries `log: {index,
//! checkpoint, inclusion_proof}` once a checkpoint covers it, `null` until then.

use std::collections::HashMap;

use serde_json::Value;

use crate::model::Env;
use crate::model::decision::Decision;
use crate::storage::log::ShownCheckpoint;
use crate::storage::{StorageError, Store};

/// The decisions of `rows` as the API shows them, each with its `log` member: against
/// `at` (an export fixes the checkpoint it started with), or the checkpoint readers are
/// shown now when `None`.
pub async fn with_log(
    store: &dyn Store,
    org: &str,
    env: Env,
    rows: &[(i64, Decision)],
    at: Option<ShownCheckpoint>,
) -> Result<Vec<Value>, StorageError> {
    let seqs: Vec<i64> = rows.iter().map(|(seq, _)| *seq).collect();
    let mut entries = if seqs.is_empty() {
        HashMap::new()
    } else {
        store.log_entries(org, env, seqs, at).await?
    };
    Ok(rows
        .iter()
        .map(|(seq, decision)| {
            let mut json = decision.to_json();
            let entry = entries
                .remove(seq)
                .and_then(|entry| serde_json::to_value(entry).ok())
                .unwrap_or(Value::Null);
            if let Value::Object(members) = &mut json {
                members.insert("log".into(), entry);
            }
            json
        })
        .collect())
}
