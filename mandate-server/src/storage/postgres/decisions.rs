//! Decisions: the log of every verdict. Rows are never updated.

use deadpool_postgres::GenericClient;
use mandate_core::amount::Amount;
use mandate_core::claims::{RequestClaims, VerdictClaims};
use mandate_core::id::{AgentId, DecisionId, MandateId, Nonce, ReviewId};
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::{Mode, Verdict};
use mandate_core::review::ReviewStatus;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::Result;
use crate::model::Env;
use crate::model::decision::{
    Decision, ReviewState, TokenSignature, bindings_column, with_bindings_column,
};
use crate::storage::StorageError;
use crate::storage::decisions::Filters;

/// The columns of an insert, in [`Batch::values`]' order (`agent_seq` is not among them:
/// each insert supplies it its own way).
pub(crate) const INSERT_COLUMNS: &str = "id, org_id, env, agent_id, mandate_id, verdict,
    policy_verdict, reason, mode, amount, currency, recipient, category, nonce, policy_version,
    iss, iat, exp, created_ms, supersedes, review_id, is_request, signing_kid, signature,
    bindings";

/// A decision's values for an insert, owned, moved into a [`Batch`].
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
}

impl Params {
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
        }
    }
}

/// Seqs taken from the counter row `decision_seq` (migration 0004) inside the transaction
/// that inserts the decisions: the way of the decisions made outside the writers' groups
/// (an approved review's, `deciding.rs`). The row stays locked until that transaction
/// ends, so no claim ([`super::claims`]) can move the counter past these seqs before they
/// are committed, and the watermark, read as the counter or below the lowest open claim,
/// stays below them until then (docs/exports.md, "A log that never skips"). The statement
/// is the last before the commit, so the row is held only for the commit's flush. The
/// writers' groups take their seqs by claim instead ([`INSERT_CLAIMED`]).
const TAKE_SEQS: &str = "UPDATE counters SET value = value + $1 WHERE name = 'decision_seq'
    RETURNING value";

/// Appends a decision of the agent with key `agent_seq` (in the caller's transaction),
/// with the next seq of the log.
pub async fn insert(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    agent_seq: i64,
    d: &Decision,
) -> Result<()> {
    let mut batch = Batch::default();
    batch.push(agent_seq, Params::of(org_id, env, d));
    insert_batch(c, &batch).await
}

/// Decisions to insert in one statement, column by column (each column one array
/// parameter, unnested by the statement).
#[derive(Default)]
pub(crate) struct Batch {
    id: Vec<String>,
    org_id: Vec<String>,
    env: Vec<&'static str>,
    agent: Vec<String>,
    mandate: Vec<Option<String>>,
    verdict: Vec<&'static str>,
    policy_verdict: Vec<&'static str>,
    reason: Vec<Option<String>>,
    mode: Vec<&'static str>,
    amount: Vec<String>,
    currency: Vec<String>,
    recipient: Vec<String>,
    category: Vec<String>,
    nonce: Vec<String>,
    policy_version: Vec<String>,
    iss: Vec<String>,
    iat: Vec<i64>,
    exp: Vec<i64>,
    created_ms: Vec<i64>,
    supersedes: Vec<Option<String>>,
    review: Vec<Option<String>>,
    is_request: Vec<bool>,
    signing_kid: Vec<Option<String>>,
    signature: Vec<Option<Vec<u8>>>,
    bindings: Vec<Option<String>>,
    agent_seq: Vec<i64>,
}

impl Batch {
    /// Adds a decision of the agent with key `agent_seq`.
    pub(crate) fn push(&mut self, agent_seq: i64, p: Params) {
        self.id.push(p.id);
        self.org_id.push(p.org_id);
        self.env.push(p.env);
        self.agent.push(p.agent);
        self.mandate.push(p.mandate);
        self.verdict.push(p.verdict);
        self.policy_verdict.push(p.policy_verdict);
        self.reason.push(p.reason);
        self.mode.push(p.mode);
        self.amount.push(p.amount);
        self.currency.push(p.currency);
        self.recipient.push(p.recipient);
        self.category.push(p.category);
        self.nonce.push(p.nonce);
        self.policy_version.push(p.policy_version);
        self.iss.push(p.iss);
        self.iat.push(p.iat);
        self.exp.push(p.exp);
        self.created_ms.push(p.created_ms);
        self.supersedes.push(p.supersedes);
        self.review.push(p.review);
        self.is_request.push(p.is_request);
        self.signing_kid.push(p.signing_kid);
        self.signature.push(p.signature);
        self.bindings.push(p.bindings);
        self.agent_seq.push(agent_seq);
    }

    /// How many decisions it holds.
    pub(crate) fn len(&self) -> usize {
        self.id.len()
    }

    /// The statement's values: the count, then the columns in [`INSERT_COLUMNS`]' order
    /// and `agent_seq`.
    pub(crate) fn values<'a>(&'a self, count: &'a i64) -> [&'a (dyn ToSql + Sync); 27] {
        [
            count,
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
            &self.agent_seq,
        ]
    }
}

/// `INSERT INTO decisions ... SELECT <seq>, ... FROM <from>unnest(<the batch's columns>)`:
/// the batch's decisions (arrays $2 to $27), each with the seq `seq` gives it from `u.n`,
/// its place in the batch counted from 1.
fn insert_unnested(with: &str, seq: &str, from: &str) -> String {
    let arrays: Vec<String> = (2..=27)
        .map(|n| {
            let cast = match n {
                18..=20 | 27 => "BIGINT[]",
                23 => "BOOLEAN[]",
                25 => "BYTEA[]",
                _ => "TEXT[]",
            };
            format!("${n}::{cast}")
        })
        .collect();
    format!(
        "WITH {with}
         INSERT INTO decisions (seq, {INSERT_COLUMNS}, agent_seq)
         SELECT {seq}, u.id, u.org_id, u.env, u.agent_id, u.mandate_id,
            u.verdict, u.policy_verdict, u.reason, u.mode, u.amount, u.currency, u.recipient,
            u.category, u.nonce, u.policy_version, u.iss, u.iat, u.exp, u.created_ms,
            u.supersedes, u.review_id, u.is_request, u.signing_kid, u.signature, u.bindings,
            u.agent_seq
         FROM {from}unnest({}) WITH ORDINALITY
            AS u(id, org_id, env, agent_id, mandate_id, verdict, policy_verdict, reason, mode,
                 amount, currency, recipient, category, nonce, policy_version, iss, iat, exp,
                 created_ms, supersedes, review_id, is_request, signing_kid, signature,
                 bindings, agent_seq, n)",
        arrays.join(", ")
    )
}

/// The statement that inserts a [`Batch`] ($1 decisions, then one array a column) with
/// the next $1 seqs of the log, in the batch's order, taken from the counter row in the
/// caller's transaction.
pub(crate) static INSERT_BATCH: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    insert_unnested(
        &format!("taken AS ({TAKE_SEQS})"),
        "taken.value - $1 + u.n",
        "taken, ",
    )
});

/// The statement that inserts a [`Batch`] with seqs its writer claimed before the
/// transaction ([`super::claims`]): $1 the claim's first seq, $2 to $27 the columns, $28 the
/// writer. It clears the claim in the same statement; if the claim is no longer open (swept
/// as stale), no seq is found, the insert fails on `seq`'s NOT NULL and the transaction is
/// rolled back.
pub(crate) static INSERT_CLAIMED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    insert_unnested(
        "settled AS (UPDATE decision_claims SET first_seq = NULL
                         WHERE writer = $28 AND first_seq = $1 RETURNING $1::BIGINT AS first)",
        "(SELECT first FROM settled) + u.n - 1",
        "",
    )
});

/// Inserts `batch` (in the caller's transaction) with the log's next seqs.
pub(crate) async fn insert_batch(c: &impl GenericClient, batch: &Batch) -> Result<()> {
    let count = i64::try_from(batch.len()).unwrap_or(i64::MAX);
    let stmt = c.prepare_cached(&INSERT_BATCH).await?;
    c.execute(&stmt, &batch.values(&count)).await?;
    Ok(())
}

/// The columns of a decision, then where the review it opened stands (one lookup by the
/// review's unique id, skipped when it opened none).
const COLUMNS: &str = "seq, id, agent_id, mandate_id, verdict, policy_verdict, reason, mode,
    amount, currency, recipient, category, nonce, policy_version, iss, iat, exp, created_ms,
    supersedes, review_id, is_request,
    CASE WHEN review_id IS NULL THEN NULL
         ELSE (SELECT status FROM reviews WHERE reviews.id = decisions.review_id) END,
    CASE WHEN review_id IS NULL THEN NULL
         ELSE (SELECT expires_ms FROM reviews WHERE reviews.id = decisions.review_id) END,
    CASE WHEN review_id IS NULL THEN NULL
         ELSE (SELECT resolution FROM reviews WHERE reviews.id = decisions.review_id) END,
    signing_kid, signature, bindings";

fn verdict_from(text: &str) -> Result<Verdict> {
    Verdict::parse(text).ok_or_else(|| StorageError::Corrupt(format!("verdict {text:?}")))
}

/// A row read by [`COLUMNS`] as a decision with its seq; a value that does not parse is a
/// corrupt row naming the column.
fn decode(r: &Row) -> Result<(i64, Decision)> {
    let bad = |what: &str| StorageError::Corrupt(format!("decision column {what}"));
    let text = |i: usize| -> &str { r.get(i) };
    let optional = |i: usize| -> Option<&str> { r.get(i) };
    let id = DecisionId::parse(text(1)).map_err(|_| bad("id"))?;
    let claims = VerdictClaims {
        ap2_mandate: None,
        ap2_transaction: None,
        x402_payment: None,
        iss: r.get(14),
        jti: id,
        iat: r.get(15),
        exp: r.get(16),
        verdict: verdict_from(text(4))?,
        policy_verdict: verdict_from(text(5))?,
        mandate: optional(3)
            .map(MandateId::parse)
            .transpose()
            .map_err(|_| bad("mandate_id"))?,
        policy_version: r.get(13),
        nonce: Nonce::parse(text(12)).map_err(|_| bad("nonce"))?,
        request: RequestClaims {
            agent: AgentId::parse(text(2)).map_err(|_| bad("agent_id"))?,
            amount: Amount::parse(text(8)).map_err(|_| bad("amount"))?,
            currency: Currency::parse(text(9)).map_err(|_| bad("currency"))?,
            recipient: Recipient::parse(text(10)).map_err(|_| bad("recipient"))?,
            category: Category::parse(text(11)).map_err(|_| bad("category"))?,
        },
    };
    let claims = with_bindings_column(claims, optional(26)).map_err(|_| bad("bindings"))?;
    Ok((
        r.get(0),
        Decision {
            claims,
            reason: r.get(6),
            mode: Mode::parse(text(7)).ok_or_else(|| bad("mode"))?,
            supersedes: optional(18)
                .map(DecisionId::parse)
                .transpose()
                .map_err(|_| bad("supersedes"))?,
            review: optional(19)
                .map(ReviewId::parse)
                .transpose()
                .map_err(|_| bad("review_id"))?,
            created_ms: r.get(17),
            is_request: r.get(20),
            review_state: match (optional(21), r.get::<_, Option<i64>>(22)) {
                (Some(status), Some(expires_ms)) => Some(ReviewState {
                    status: ReviewStatus::parse(status).ok_or_else(|| bad("review status"))?,
                    expires_ms,
                    resolution: optional(23)
                        .map(DecisionId::parse)
                        .transpose()
                        .map_err(|_| bad("review resolution"))?,
                }),
                _ => None,
            },
            signature: match (
                r.get::<_, Option<String>>(24),
                r.get::<_, Option<Vec<u8>>>(25),
            ) {
                (Some(kid), Some(bytes)) => Some(TokenSignature { kid, bytes }),
                _ => None,
            },
        },
    ))
}

/// One decision, optionally only if it belongs to `agent`.
pub async fn get(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    agent: Option<&AgentId>,
    id: &DecisionId,
) -> Result<Option<Decision>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM decisions
             WHERE org_id = $1 AND env = $2 AND id = $3 AND ($4::TEXT IS NULL OR agent_id = $4)"
        ))
        .await?;
    let agent = agent.map(AgentId::as_str);
    let row = c
        .query_opt(&stmt, &[&org_id, &env.as_str(), &id.as_str(), &agent])
        .await?;
    row.as_ref()
        .map(decode)
        .transpose()
        .map(|d| d.map(|(_, d)| d))
}

/// The seq of one decision, optionally only if it belongs to `agent`.
pub async fn seq_of(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    agent: Option<&AgentId>,
    id: &DecisionId,
) -> Result<Option<i64>> {
    let stmt = c
        .prepare_cached(
            "SELECT seq FROM decisions
             WHERE id = $3 AND org_id = $1 AND env = $2 AND ($4::TEXT IS NULL OR agent_id = $4)",
        )
        .await?;
    let agent = agent.map(AgentId::as_str);
    let row = c
        .query_opt(&stmt, &[&org_id, &env.as_str(), &id.as_str(), &agent])
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Decisions matching `filters` with seq strictly between `above` and `below`, at most
/// `limit`, newest or oldest first: the one query behind lists and exports.
#[allow(clippy::too_many_arguments)]
async fn filtered(
    c: &impl GenericClient,
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
        "seq IN (SELECT d.seq FROM reviews r JOIN decisions d ON d.id = r.decision_id
                 WHERE r.status = $9 AND r.org_id = $1 AND r.env = $2)"
    } else {
        "$9::TEXT IS NULL"
    };
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM decisions
             WHERE org_id = $1 AND env = $2 AND {agent_clause} AND {review_clause}
               AND ($4::TEXT IS NULL OR verdict = $4) AND ($5::TEXT IS NULL OR policy_verdict = $5)
               AND seq > $6 AND seq < $7
             ORDER BY seq {direction} LIMIT $8"
        ))
        .await?;
    let review_status = filters.review_status.map(ReviewStatus::as_str);
    let verdict = filters.verdict.map(Verdict::as_str);
    let policy_verdict = filters.policy_verdict.map(Verdict::as_str);
    let rows = c
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
        .await?;
    rows.iter().map(decode).collect()
}

/// A page of decisions, newest first, strictly before seq `before`.
pub async fn page(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    filters: &Filters,
    before: i64,
    limit: i64,
) -> Result<Vec<(i64, Decision)>> {
    filtered(c, org_id, env, filters, i64::MIN, before, true, limit).await
}

/// Up to `limit` decisions matching `filters`, oldest first, with seq in (`after`, `upto`].
pub async fn export_page(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    filters: &Filters,
    after: i64,
    upto: i64,
    limit: i64,
) -> Result<Vec<(i64, Decision)>> {
    let below = upto.saturating_add(1);
    filtered(c, org_id, env, filters, after, below, false, limit).await
}

/// The amounts and times of `agent`'s `allow` decisions under `mandate` since `since_ms`,
/// oldest first.
pub async fn allowed_since(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    agent: &AgentId,
    mandate: &MandateId,
    since_ms: i64,
) -> Result<Vec<(Amount, i64)>> {
    let stmt = c
        .prepare_cached(
            "SELECT amount, created_ms FROM decisions
             WHERE agent_seq = (SELECT seq FROM agents WHERE org_id = $1 AND env = $2 AND id = $3)
               AND mandate_id = $4 AND created_ms >= $5 AND verdict = 'allow'
             ORDER BY seq",
        )
        .await?;
    let rows = c
        .query(
            &stmt,
            &[
                &org_id,
                &env.as_str(),
                &agent.as_str(),
                &mandate.as_str(),
                &since_ms,
            ],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let amount: &str = r.get(0);
            Amount::parse(amount)
                .map(|a| (a, r.get(1)))
                .map_err(|_| StorageError::Corrupt("decision column amount".into()))
        })
        .collect()
}
