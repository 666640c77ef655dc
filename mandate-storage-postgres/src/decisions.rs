//! Decisions: the log of every verdict. Rows are never updated.

use mandate_core::{AgentId, Amount, MandateId, Verdict};
use mandate_protocol::review::ReviewStatus;
use tokio_postgres::types::ToSql;

use super::Result;
use super::tx::PgTx;
use mandate_storage::StorageError;
use mandate_storage::decisions::{COLUMNS, Filters, read};
use mandate_storage::model::Env;
use mandate_storage::model::decision::{Decision, bindings_column};

/// The columns of an insert, in [`Params`]' order (`seq` and `agent_seq` are not among
/// them: each insert supplies them its own way).
pub(crate) const INSERT_COLUMNS: &str = "id, org_id, env, agent_id, mandate_id, verdict,
    policy_verdict, reason, mode, amount, currency, recipient, category, nonce, policy_version,
    iss, iat, exp, created_ms, supersedes, review_id, is_request, signing_kid, signature,
    bindings, leaf";

/// A decision's values for an insert, owned.
pub(crate) struct Params {
    id: String,
    org_id: String,
    env: &'static str,
    agent: String,
    mandate: Option<String>,
    verdict: &'static str,
    policy_verdict: &'static str,
    reason: Option<String>,
    mode: &'static str,
    amount: String,
    currency: String,
    recipient: String,
    category: String,
    nonce: String,
    policy_version: String,
    iss: String,
    iat: i64,
    exp: i64,
    created_ms: i64,
    supersedes: Option<String>,
    review: Option<String>,
    is_request: bool,
    signing_kid: Option<String>,
    signature: Option<Vec<u8>>,
    bindings: Option<String>,
    leaf: Option<Vec<u8>>,
}

impl Params {
    /// When the decision was made (unix ms).
    pub(crate) fn created_ms(&self) -> i64 {
        self.created_ms
    }

    /// The values of `d`, stored for `org_id` and `env`.
    pub(crate) fn of(org_id: &str, env: Env, d: &Decision) -> Self {
        let c = &d.claims;
        Self {
            id: c.jti.as_str().to_owned(),
            org_id: org_id.to_owned(),
            env: env.as_str(),
            agent: c.request.agent.as_str().to_owned(),
            mandate: c.mandate.as_ref().map(|m| m.as_str().to_owned()),
            verdict: c.verdict.as_str(),
            policy_verdict: c.policy_verdict.as_str(),
            reason: d.reason.clone(),
            mode: d.mode.as_str(),
            amount: c.request.amount.to_string(),
            currency: c.request.currency.as_str().to_owned(),
            recipient: c.request.recipient.as_str().to_owned(),
            category: c.request.category.as_str().to_owned(),
            nonce: c.nonce.as_str().to_owned(),
            policy_version: c.policy_version.clone(),
            iss: c.iss.clone(),
            iat: c.iat,
            exp: c.exp,
            created_ms: d.created_ms,
            supersedes: d.supersedes.as_ref().map(|s| s.as_str().to_owned()),
            review: d.review.as_ref().map(|r| r.as_str().to_owned()),
            is_request: d.is_request,
            signing_kid: d.signature.as_ref().map(|s| s.kid.clone()),
            signature: d.signature.as_ref().map(|s| s.bytes.clone()),
            bindings: bindings_column(c),
            // The leaf's tag when there is one (the log's worker of any process checks it),
            // else its hash, as rows of earlier releases hold.
            leaf: d
                .signature
                .as_ref()
                .and_then(|s| s.tag.or(s.leaf))
                .map(|h| h.as_bytes().to_vec()),
        }
    }
}

impl Params {
    /// Its values, in [`INSERT_COLUMNS`]' order.
    fn values(&self) -> [&(dyn ToSql + Sync); 26] {
        [
            &self.id,
            &self.org_id,
            &self.env,
            &self.agent,
            &self.mandate,
            &self.verdict,
            &self.policy_verdict,
            &self.reason,
            &self.mode,
            &self.amount,
            &self.currency,
            &self.recipient,
            &self.category,
            &self.nonce,
            &self.policy_version,
            &self.iss,
            &self.iat,
            &self.exp,
            &self.created_ms,
            &self.supersedes,
            &self.review,
            &self.is_request,
            &self.signing_kid,
            &self.signature,
            &self.bindings,
            &self.leaf,
        ]
    }
}

/// Decisions' values as one array a column, for `mandate_record` (migration 0017).
pub(crate) struct RowArrays<'a> {
    id: Vec<&'a str>,
    org_id: Vec<&'a str>,
    env: Vec<&'a str>,
    agent: Vec<&'a str>,
    mandate: Vec<Option<&'a str>>,
    verdict: Vec<&'a str>,
    policy_verdict: Vec<&'a str>,
    reason: Vec<Option<&'a str>>,
    amount: Vec<&'a str>,
    currency: Vec<&'a str>,
    recipient: Vec<&'a str>,
    category: Vec<&'a str>,
    nonce: Vec<&'a str>,
    policy_version: Vec<&'a str>,
    iss: Vec<&'a str>,
    iat: Vec<i64>,
    exp: Vec<i64>,
    created_ms: Vec<i64>,
    supersedes: Vec<Option<&'a str>>,
    review: Vec<Option<&'a str>>,
    is_request: Vec<bool>,
    signing_kid: Vec<Option<&'a str>>,
    signature: Vec<Option<&'a [u8]>>,
    bindings: Vec<Option<&'a str>>,
    leaf: Vec<Option<&'a [u8]>>,
}

impl<'a> RowArrays<'a> {
    /// Empty, with room for `n` rows.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            id: Vec::with_capacity(n),
            org_id: Vec::with_capacity(n),
            env: Vec::with_capacity(n),
            agent: Vec::with_capacity(n),
            mandate: Vec::with_capacity(n),
            verdict: Vec::with_capacity(n),
            policy_verdict: Vec::with_capacity(n),
            reason: Vec::with_capacity(n),
            amount: Vec::with_capacity(n),
            currency: Vec::with_capacity(n),
            recipient: Vec::with_capacity(n),
            category: Vec::with_capacity(n),
            nonce: Vec::with_capacity(n),
            policy_version: Vec::with_capacity(n),
            iss: Vec::with_capacity(n),
            iat: Vec::with_capacity(n),
            exp: Vec::with_capacity(n),
            created_ms: Vec::with_capacity(n),
            supersedes: Vec::with_capacity(n),
            review: Vec::with_capacity(n),
            is_request: Vec::with_capacity(n),
            signing_kid: Vec::with_capacity(n),
            signature: Vec::with_capacity(n),
            bindings: Vec::with_capacity(n),
            leaf: Vec::with_capacity(n),
        }
    }

    /// Adds `p`'s values as the next row (its mode is the call's own column).
    pub(crate) fn push(&mut self, p: &'a Params) {
        self.id.push(&p.id);
        self.org_id.push(&p.org_id);
        self.env.push(p.env);
        self.agent.push(&p.agent);
        self.mandate.push(p.mandate.as_deref());
        self.verdict.push(p.verdict);
        self.policy_verdict.push(p.policy_verdict);
        self.reason.push(p.reason.as_deref());
        self.amount.push(&p.amount);
        self.currency.push(&p.currency);
        self.recipient.push(&p.recipient);
        self.category.push(&p.category);
        self.nonce.push(&p.nonce);
        self.policy_version.push(&p.policy_version);
        self.iss.push(&p.iss);
        self.iat.push(p.iat);
        self.exp.push(p.exp);
        self.created_ms.push(p.created_ms);
        self.supersedes.push(p.supersedes.as_deref());
        self.review.push(p.review.as_deref());
        self.is_request.push(p.is_request);
        self.signing_kid.push(p.signing_kid.as_deref());
        self.signature.push(p.signature.as_deref());
        self.bindings.push(p.bindings.as_deref());
        self.leaf.push(p.leaf.as_deref());
    }

    /// The arrays in `mandate_record`'s order: `d_org` and `d_env` first, then from `d_id`
    /// on (the agent's key, version and mode, which come between, are the call's own).
    pub(crate) fn values(&self) -> [&(dyn ToSql + Sync); 25] {
        [
            &self.org_id,
            &self.env,
            &self.id,
            &self.agent,
            &self.mandate,
            &self.verdict,
            &self.policy_verdict,
            &self.reason,
            &self.amount,
            &self.currency,
            &self.recipient,
            &self.category,
            &self.nonce,
            &self.policy_version,
            &self.iss,
            &self.iat,
            &self.exp,
            &self.created_ms,
            &self.supersedes,
            &self.review,
            &self.is_request,
            &self.signing_kid,
            &self.signature,
            &self.bindings,
            &self.leaf,
        ]
    }
}

/// The values of one row of the decisions' insert: its seq, the agent's key, the rest.
pub(crate) type Row<'a> = (&'a i64, &'a i64, &'a Params);

/// The statement that inserts `rows` decisions of one organization: a multi-row `INSERT …
/// VALUES`, each row its seq, the columns of [`INSERT_COLUMNS`] and `agent_seq`, 28 values
/// a row (on Citus, one command to the worker holding the organization; an `INSERT … SELECT`
/// from arrays would go through the coordinator). Its text depends on the count: prepared
/// once a count on a connection.
pub(crate) fn insert_sql(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let row: Vec<String> = (1..=28).map(|k| format!("${}", r * 28 + k)).collect();
            format!("({})", row.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO decisions (seq, {INSERT_COLUMNS}, agent_seq) VALUES {}",
        values.join(", ")
    )
}

/// The values of [`insert_sql`] for `rows`, in order.
pub(crate) fn insert_values<'a>(rows: &[Row<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    let mut values: Vec<&'a (dyn ToSql + Sync)> = Vec::with_capacity(rows.len() * 28);
    for (seq, agent_seq, params) in rows {
        values.push(*seq);
        values.extend(params.values());
        values.push(*agent_seq);
    }
    values
}

/// The organization's next decision seq (`$1` the organization), taken from its counter
/// row `org_counters('decisions')` (migration 0011) inside the transaction that inserts the
/// decision: the way of the decisions made outside the writers' groups (an approved
/// review's, `deciding.rs`). The row stays locked until that transaction ends, so no claim
/// ([`super::claims`]) can move the counter past this seq before it is committed, and the
/// watermark, read as the counter or below the lowest open claim, stays below it until
/// then (docs/exports.md, "A log that never skips"). The writers' groups take their seqs by
/// claim instead.
const TAKE_SEQ: &str = "UPDATE org_counters SET value = value + 1
    WHERE org_id = $1 AND name = 'decisions' RETURNING value";

/// Marks month `$2` of organization `$1` with seq `$3`, taken by [`TAKE_SEQ`], unless the
/// month is marked already: every seq marked before is below it (migration 0014).
const MARK_MONTH: &str = "INSERT INTO decision_months (org_id, month, first_seq)
    VALUES ($1, $2, $3) ON CONFLICT (org_id, month) DO NOTHING";

/// Appends a decision of the agent with key `agent_seq` (in the caller's transaction),
/// with the organization's next seq, and marks its month (`MARK_MONTH`).
pub async fn insert(
    tx: &PgTx<'_>,
    org_id: &str,
    env: Env,
    agent_seq: i64,
    d: &Decision,
) -> Result<()> {
    let params = Params::of(org_id, env, d);
    let take = tx.prepare(TAKE_SEQ).await?;
    let seq: i64 = tx
        .client()
        .query_one(&take, &[&org_id])
        .await
        .map_err(crate::pg_error)?
        .get(0);
    let month = mandate_storage::clock::month_index(d.created_ms);
    let mark = tx.prepare(MARK_MONTH).await?;
    tx.client()
        .execute(&mark, &[&org_id, &month, &seq])
        .await
        .map_err(crate::pg_error)?;
    let stmt = tx.prepare(&insert_sql(1)).await?;
    tx.client()
        .execute(&stmt, &insert_values(&[(&seq, &agent_seq, &params)]))
        .await
        .map_err(crate::pg_error)?;
    Ok(())
}

/// Decisions matching `filters` with seq strictly between `above` and `below`, at most
/// `limit`, newest or oldest first: the one query behind lists and exports.
#[allow(clippy::too_many_arguments)]
pub(super) async fn filtered(
    tx: &PgTx<'_>,
    org_id: &str,
    env: Env,
    filters: &Filters,
    above: i64,
    below: i64,
    newest_first: bool,
    limit: i64,
) -> Result<Vec<(i64, Decision)>> {
    let direction = if newest_first { "DESC" } else { "ASC" };
    // The agent is looked up by its key, so that the plan walks decisions_by_agent.
    let agent_clause = if filters.agent.is_some() {
        "agent_seq = (SELECT seq FROM agents WHERE org_id = $1 AND env = $2 AND id = $3)"
    } else {
        "$3::TEXT IS NULL"
    };
    // With a review status: from the reviews in that status (few when pending: they
    // expire within a day) to their decisions, not through every decision.
    let review_clause = if filters.review_status.is_some() {
        "seq IN (SELECT d.seq FROM reviews r
                 JOIN decisions d ON d.org_id = $1 AND d.id = r.decision_id
                 WHERE r.status = $9 AND r.org_id = $1 AND r.env = $2)"
    } else {
        "$9::TEXT IS NULL"
    };
    // The reviews named by the organization's value, not the row's: one shard on Citus.
    let columns = COLUMNS.replace(
        "reviews.id = decisions.review_id",
        "reviews.org_id = $1 AND reviews.id = decisions.review_id",
    );
    let stmt = tx
        .prepare(&format!(
            "SELECT {columns} FROM decisions
             WHERE org_id = $1 AND env = $2 AND {agent_clause} AND {review_clause}
               AND ($4::TEXT IS NULL OR verdict = $4) AND ($5::TEXT IS NULL OR policy_verdict = $5)
               AND seq > $6 AND seq < $7
             ORDER BY seq {direction} LIMIT $8"
        ))
        .await?;
    let review_status = filters.review_status.map(ReviewStatus::as_str);
    let verdict = filters.verdict.map(Verdict::as_str);
    let policy_verdict = filters.policy_verdict.map(Verdict::as_str);
    let rows = tx
        .client()
        .query(
            &stmt,
            &[
                &org_id,
                &env.as_str(),
                &filters.agent,
                &verdict,
                &policy_verdict,
                &above,
                &below,
                &limit,
                &review_status,
            ],
        )
        .await
        .map_err(crate::pg_error)?;
    rows.iter().map(|r| read(&crate::tx::PgRow(r))).collect()
}

/// The amounts and times of `agent`'s `allow` decisions under `mandate` since `since_ms`,
/// oldest first: walked through `decisions_by_agent` from the month's mark on (as
/// `deciding::ALLOWED_SQL`).
pub(super) async fn allowed_since(
    tx: &PgTx<'_>,
    org_id: &str,
    env: Env,
    agent: &AgentId,
    mandate: &MandateId,
    since_ms: i64,
) -> Result<Vec<(Amount, i64)>> {
    let stmt = tx
        .prepare(
            "SELECT amount, created_ms FROM decisions
             WHERE org_id = $1
               AND agent_seq = (SELECT seq FROM agents WHERE org_id = $1 AND env = $2 AND id = $3)
               AND mandate_id = $4 AND created_ms >= $5 AND verdict = 'allow'
               AND seq >= (SELECT MIN(first_seq) FROM decision_months
                           WHERE org_id = $1 AND month >= $6)
             ORDER BY seq",
        )
        .await?;
    let rows = tx
        .client()
        .query(
            &stmt,
            &[
                &org_id,
                &env.as_str(),
                &agent.as_str(),
                &mandate.as_str(),
                &since_ms,
                &mandate_storage::clock::month_index(since_ms),
            ],
        )
        .await
        .map_err(crate::pg_error)?;
    rows.iter()
        .map(|r| {
            let amount: &str = r.get(0);
            Amount::parse(amount)
                .map(|a| (a, r.get(1)))
                .map_err(|_| StorageError::Corrupt("decision column amount".into()))
        })
        .collect()
}
