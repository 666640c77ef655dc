//! Decisions: the log of every verdict. Rows are never updated.

use mandate_core::amount::Amount;
use mandate_core::claims::{RequestClaims, VerdictClaims};
use mandate_core::id::{AgentId, DecisionId, MandateId, Nonce, ReviewId};
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::{Mode, Verdict};
use mandate_core::review::ReviewStatus;
use rusqlite::{Connection, OptionalExtension, ToSql, params};

use super::{StorageError, verdict_from};
use crate::model::Env;
use crate::model::decision::{
    Decision, ReviewState, TokenSignature, bindings_column, with_bindings_column,
};
use crate::storage::decisions::Filters;

pub use crate::storage::deciding::AgentHint;

/// Appends a decision.
pub fn insert(tx: &Connection, org_id: &str, env: Env, d: &Decision) -> rusqlite::Result<()> {
    insert_with(tx, org_id, env, d, AgentHint::default())
}

/// Appends a decision, trusting `hint` (an agent's cached state) for what it says.
pub fn insert_with(
    tx: &Connection,
    org_id: &str,
    env: Env,
    d: &Decision,
    hint: AgentHint,
) -> rusqlite::Result<()> {
    let c = &d.claims;
    // COALESCE jumps over the lookup when the hint gives the key (`NotNull` in the plan).
    let mut stmt = tx.prepare_cached(
        "INSERT INTO decisions (id, org_id, env, agent_id, mandate_id, verdict, policy_verdict,
            reason, mode, amount, currency, recipient, category, nonce, policy_version, iss,
            iat, exp, created_ms, supersedes, review_id, is_request, agent_seq, signing_kid,
            signature, bindings)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
            ?18, ?19, ?20, ?21, ?22,
            COALESCE(?23, (SELECT seq FROM agents WHERE org_id = ?2 AND env = ?3 AND id = ?4)),
            ?24, ?25, ?26)",
    )?;
    stmt.execute(params![
        c.jti.as_str(),
        org_id,
        env,
        c.request.agent.as_str(),
        c.mandate.as_ref().map(MandateId::as_str),
        c.verdict.as_str(),
        c.policy_verdict.as_str(),
        d.reason,
        d.mode.as_str(),
        c.request.amount.to_string(),
        c.request.currency.as_str(),
        c.request.recipient.as_str(),
        c.request.category.as_str(),
        c.nonce.as_str(),
        c.policy_version,
        c.iss,
        c.iat,
        c.exp,
        d.created_ms,
        d.supersedes.as_ref().map(DecisionId::as_str),
        d.review.as_ref().map(ReviewId::as_str),
        d.is_request,
        hint.seq,
        d.signature.as_ref().map(|s| s.kid.as_str()),
        d.signature.as_ref().map(|s| s.bytes.as_slice()),
        bindings_column(c),
    ])?;
    let month = month_index(d.created_ms);
    if hint.month_marked != Some(month) {
        // Where this agent's decisions of this month begin (see migration 0004).
        tx.prepare_cached(
            "INSERT OR IGNORE INTO decision_months (org_id, env, agent_id, month, first_seq)
             VALUES (?1, ?2, ?3, ?4, last_insert_rowid())",
        )?
        .execute(params![org_id, env, c.request.agent.as_str(), month])?;
    }
    Ok(())
}

/// The agent's integer key (`agents.seq`), if it exists.
pub fn agent_seq(
    conn: &Connection,
    org_id: &str,
    env: Env,
    agent: &str,
) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT seq FROM agents WHERE org_id = ?1 AND env = ?2 AND id = ?3")?
        .query_row(params![org_id, env, agent], |r| r.get(0))
        .optional()
}

/// The UTC month of a unix-ms time as `year * 12 + month - 1`: the key of
/// `decision_months`, computed as migration 0004 computes it.
pub fn month_index(unix_ms: i64) -> i64 {
    let at = crate::clock::from_ms(unix_ms);
    i64::from(at.year()) * 12 + i64::from(u8::from(at.month())) - 1
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

/// One row of `decisions` as read by [`COLUMNS`], each column under its own name; decoded
/// into a [`Decision`] by [`DecisionRow::decode`].
struct DecisionRow {
    seq: i64,
    id: String,
    agent_id: String,
    mandate_id: Option<String>,
    verdict: String,
    policy_verdict: String,
    reason: Option<String>,
    mode: String,
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
    review_id: Option<String>,
    is_request: bool,
    review_status: Option<String>,
    review_expires_ms: Option<i64>,
    review_resolution: Option<String>,
    signing_kid: Option<String>,
    signature: Option<Vec<u8>>,
    bindings: Option<String>,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DecisionRow> {
    Ok(DecisionRow {
        seq: r.get(0)?,
        id: r.get(1)?,
        agent_id: r.get(2)?,
        mandate_id: r.get(3)?,
        verdict: r.get(4)?,
        policy_verdict: r.get(5)?,
        reason: r.get(6)?,
        mode: r.get(7)?,
        amount: r.get(8)?,
        currency: r.get(9)?,
        recipient: r.get(10)?,
        category: r.get(11)?,
        nonce: r.get(12)?,
        policy_version: r.get(13)?,
        iss: r.get(14)?,
        iat: r.get(15)?,
        exp: r.get(16)?,
        created_ms: r.get(17)?,
        supersedes: r.get(18)?,
        review_id: r.get(19)?,
        is_request: r.get(20)?,
        review_status: r.get(21)?,
        review_expires_ms: r.get(22)?,
        review_resolution: r.get(23)?,
        signing_kid: r.get(24)?,
        signature: r.get(25)?,
        bindings: r.get(26)?,
    })
}

impl DecisionRow {
    /// The decision, every column parsed into its type; a value that does not parse is a
    /// corrupt row naming the column.
    fn decode(self) -> Result<(i64, Decision), StorageError> {
        let bad = |what: &str| StorageError::Corrupt(format!("decision column {what}"));
        let id = DecisionId::parse(&self.id).map_err(|_| bad("id"))?;
        let claims = VerdictClaims {
            ap2_mandate: None,
            ap2_transaction: None,
            x402_payment: None,
            iss: self.iss,
            jti: id,
            iat: self.iat,
            exp: self.exp,
            verdict: verdict_from(&self.verdict)?,
            policy_verdict: verdict_from(&self.policy_verdict)?,
            mandate: self
                .mandate_id
                .as_deref()
                .map(MandateId::parse)
                .transpose()
                .map_err(|_| bad("mandate_id"))?,
            policy_version: self.policy_version,
            nonce: Nonce::parse(&self.nonce).map_err(|_| bad("nonce"))?,
            request: RequestClaims {
                agent: AgentId::parse(&self.agent_id).map_err(|_| bad("agent_id"))?,
                amount: Amount::parse(&self.amount).map_err(|_| bad("amount"))?,
                currency: Currency::parse(&self.currency).map_err(|_| bad("currency"))?,
                recipient: Recipient::parse(&self.recipient).map_err(|_| bad("recipient"))?,
                category: Category::parse(&self.category).map_err(|_| bad("category"))?,
            },
        };
        let claims =
            with_bindings_column(claims, self.bindings.as_deref()).map_err(|_| bad("bindings"))?;
        Ok((
            self.seq,
            Decision {
                claims,
                reason: self.reason,
                mode: Mode::parse(&self.mode).ok_or_else(|| bad("mode"))?,
                supersedes: self
                    .supersedes
                    .as_deref()
                    .map(DecisionId::parse)
                    .transpose()
                    .map_err(|_| bad("supersedes"))?,
                review: self
                    .review_id
                    .as_deref()
                    .map(ReviewId::parse)
                    .transpose()
                    .map_err(|_| bad("review_id"))?,
                created_ms: self.created_ms,
                is_request: self.is_request,
                review_state: match (self.review_status, self.review_expires_ms) {
                    (Some(status), Some(expires_ms)) => Some(ReviewState {
                        status: ReviewStatus::parse(&status).ok_or_else(|| bad("review status"))?,
                        expires_ms,
                        resolution: self
                            .review_resolution
                            .as_deref()
                            .map(DecisionId::parse)
                            .transpose()
                            .map_err(|_| bad("review resolution"))?,
                    }),
                    _ => None,
                },
                signature: match (self.signing_kid, self.signature) {
                    (Some(kid), Some(bytes)) => Some(TokenSignature { kid, bytes }),
                    _ => None,
                },
            },
        ))
    }
}

/// One decision, optionally only if it belongs to `agent`.
pub fn get(
    conn: &Connection,
    org_id: &str,
    env: Env,
    agent: Option<&AgentId>,
    id: &DecisionId,
) -> Result<Option<Decision>, StorageError> {
    let (agent, id) = (agent.map(AgentId::as_str), id.as_str());
    let raw = conn
        .query_row(
            &format!(
                "SELECT {COLUMNS} FROM decisions
                 WHERE org_id = ?1 AND env = ?2 AND id = ?3 AND (?4 IS NULL OR agent_id = ?4)"
            ),
            params![org_id, env, id, agent],
            row,
        )
        .optional()?;
    raw.map(DecisionRow::decode)
        .transpose()
        .map(|d| d.map(|(_, d)| d))
}

/// The seq of one decision, optionally only if it belongs to `agent`.
pub fn seq_of(
    conn: &Connection,
    org_id: &str,
    env: Env,
    agent: Option<&AgentId>,
    id: &DecisionId,
) -> Result<Option<i64>, StorageError> {
    let (agent, id) = (agent.map(AgentId::as_str), id.as_str());
    Ok(conn
        .prepare_cached(
            "SELECT seq FROM decisions
             WHERE id = ?3 AND org_id = ?1 AND env = ?2 AND (?4 IS NULL OR agent_id = ?4)",
        )?
        .query_row(params![org_id, env, id, agent], |r| r.get(0))
        .optional()?)
}

/// Which way a filtered read walks the log.
#[derive(Clone, Copy)]
enum Order {
    NewestFirst,
    OldestFirst,
}

/// `decisions_by_agent` leads with `seq >> BUCKET_BITS` (migration 0006): its entries are
/// grouped in buckets of 2^18 consecutive decisions, so that a new decision's entry lands in
/// the latest bucket (a few MB, which the writer's cache holds) however long the history.
/// A read by agent walks the buckets its seq range spans, one seek each.
pub const BUCKET_BITS: u32 = 18;

/// The bucket expression, written as the index is, so that SQLite matches queries to it.
const BUCKET: &str = "(seq >> 18)";

/// The bucket of a seq.
fn bucket_of(seq: i64) -> i64 {
    seq >> BUCKET_BITS
}

/// The buckets that hold seqs `low..=high`, in `order`.
fn buckets(low: i64, high: i64, order: Order) -> Box<dyn Iterator<Item = i64>> {
    let range = bucket_of(low)..=bucket_of(high);
    match order {
        Order::NewestFirst => Box::new(range.rev()),
        Order::OldestFirst => Box::new(range),
    }
}

/// Where one agent's decisions lie: its key and the seqs to walk.
struct AgentSpan {
    agent_seq: i64,
    low: i64,
    high: i64,
}

impl AgentSpan {
    /// The agent's decisions from month `from_month` on (any month if `None`), within
    /// (`above`, `below`); `None` if the agent has none there. The agent's first decision
    /// of a month is its `decision_months` mark, so a quiet agent's walk starts at its
    /// own first decision, not at the first of all.
    fn find(
        conn: &Connection,
        org_id: &str,
        env: Env,
        agent: &str,
        from_month: Option<i64>,
        above: i64,
        below: i64,
    ) -> rusqlite::Result<Option<Self>> {
        let Some(agent_seq) = agent_seq(conn, org_id, env, agent)? else {
            return Ok(None);
        };
        let first: Option<i64> = conn
            .prepare_cached(
                "SELECT MIN(first_seq) FROM decision_months
                 WHERE org_id = ?1 AND env = ?2 AND agent_id = ?3 AND month >= ?4",
            )?
            .query_row(
                params![org_id, env, agent, from_month.unwrap_or(i64::MIN)],
                |r| r.get(0),
            )?;
        let Some(first) = first else {
            return Ok(None);
        };
        let low = first.max(above.saturating_add(1));
        let high = last_seq(conn)?.min(below.saturating_sub(1));
        Ok((low <= high).then_some(Self {
            agent_seq,
            low,
            high,
        }))
    }

    /// Runs `sql`, a query on one bucket (`?1` the bucket, `?2` the agent's key, seqs in
    /// `?3..=?4`, then `more`, then, given a `limit`, how many rows are still wanted), once
    /// per bucket of the span in `order`, and collects the rows it maps, at most `limit`.
    fn walk<T>(
        &self,
        conn: &Connection,
        sql: &str,
        order: Order,
        more: &[&dyn ToSql],
        limit: Option<i64>,
        mut map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<Vec<T>> {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut out = Vec::new();
        for bucket in buckets(self.low, self.high, order) {
            let wanted = limit.map(|limit| limit.saturating_sub(count(&out)));
            if wanted.is_some_and(|wanted| wanted <= 0) {
                break;
            }
            let mut values: Vec<&dyn ToSql> = vec![&bucket, &self.agent_seq, &self.low, &self.high];
            values.extend_from_slice(more);
            if let Some(wanted) = &wanted {
                values.push(wanted);
            }
            let mut rows = stmt.query(values.as_slice())?;
            while let Some(r) = rows.next()? {
                out.push(map(r)?);
            }
        }
        Ok(out)
    }
}

/// The query behind [`filtered`] for one bucket of one agent's decisions (`?1` bucket,
/// `?2` agent_seq, seqs in `?3..=?4`). It names its index: SQLite has no statistics to
/// prefer it over `decisions_by_env` for an `ORDER BY seq`.
fn by_agent_sql(order: Order) -> String {
    let direction = order.sql();
    format!(
        "SELECT {COLUMNS} FROM decisions INDEXED BY decisions_by_agent
         WHERE {BUCKET} = ?1 AND agent_seq = ?2 AND seq >= ?3 AND seq <= ?4
           AND org_id = ?5 AND env = ?6
           AND (?7 IS NULL OR verdict = ?7) AND (?8 IS NULL OR policy_verdict = ?8)
         ORDER BY seq {direction} LIMIT ?9"
    )
}

/// The query behind [`filtered`] without an agent: the environment's decisions through
/// `decisions_by_env`.
fn by_env_sql(order: Order) -> String {
    let direction = order.sql();
    format!(
        "SELECT {COLUMNS} FROM decisions
         WHERE org_id = ?1 AND env = ?2
           AND (?3 IS NULL OR verdict = ?3) AND (?4 IS NULL OR policy_verdict = ?4)
           AND seq > ?5 AND seq < ?6
         ORDER BY seq {direction} LIMIT ?7"
    )
}

/// The query behind [`filtered`] with a review status: from the reviews in that status
/// (few when pending: they expire within a day) to their decisions, rather than through
/// every decision of the environment. `?1` org, `?2` env, `?3` status, `?4` agent or null.
fn by_review_sql(order: Order) -> String {
    let direction = order.sql();
    format!(
        "SELECT {COLUMNS} FROM decisions
         WHERE seq IN (SELECT d.seq FROM reviews r JOIN decisions d ON d.id = r.decision_id
                       WHERE r.status = ?3 AND r.org_id = ?1 AND r.env = ?2
                         AND (?4 IS NULL OR r.agent_id = ?4))
           AND org_id = ?1 AND env = ?2
           AND (?5 IS NULL OR verdict = ?5) AND (?6 IS NULL OR policy_verdict = ?6)
           AND seq > ?7 AND seq < ?8
         ORDER BY seq {direction} LIMIT ?9"
    )
}

impl Order {
    fn sql(self) -> &'static str {
        match self {
            Order::NewestFirst => "DESC",
            Order::OldestFirst => "ASC",
        }
    }
}

/// Decisions matching `filters` with seq strictly between `above` and `below`, at most
/// `limit`, in `order`: the one query behind lists and exports.
#[allow(clippy::too_many_arguments)]
fn filtered(
    conn: &Connection,
    org_id: &str,
    env: Env,
    filters: &Filters,
    above: i64,
    below: i64,
    order: Order,
    limit: i64,
) -> Result<Vec<(i64, Decision)>, StorageError> {
    let verdict = filters.verdict.map(Verdict::as_str);
    let policy_verdict = filters.policy_verdict.map(Verdict::as_str);
    if let Some(status) = filters.review_status {
        let raws = conn
            .prepare_cached(&by_review_sql(order))?
            .query_map(
                params![
                    org_id,
                    env,
                    status.as_str(),
                    filters.agent,
                    verdict,
                    policy_verdict,
                    above,
                    below,
                    limit
                ],
                row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        return raws.into_iter().map(DecisionRow::decode).collect();
    }
    let raws = match &filters.agent {
        None => conn
            .prepare_cached(&by_env_sql(order))?
            .query_map(
                params![org_id, env, verdict, policy_verdict, above, below, limit],
                row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?,
        Some(agent) => match AgentSpan::find(conn, org_id, env, agent, None, above, below)? {
            None => Vec::new(),
            Some(span) => span.walk(
                conn,
                &by_agent_sql(order),
                order,
                &[&org_id, &env, &verdict, &policy_verdict],
                Some(limit),
                row,
            )?,
        },
    };
    raws.into_iter().map(DecisionRow::decode).collect()
}

/// A length as the `i64` that SQLite's LIMIT takes.
fn count<T>(items: &[T]) -> i64 {
    i64::try_from(items.len()).unwrap_or(i64::MAX)
}

/// A page of decisions, newest first, strictly before seq `before`.
pub fn page(
    conn: &Connection,
    org_id: &str,
    env: Env,
    filters: &Filters,
    before: i64,
    limit: i64,
) -> Result<Vec<(i64, Decision)>, StorageError> {
    filtered(
        conn,
        org_id,
        env,
        filters,
        i64::MIN,
        before,
        Order::NewestFirst,
        limit,
    )
}

/// The highest seq of any decision so far (0 if none): the log's watermark, since the one
/// writer commits decisions in seq order. An export reads up to it, so the set it covers is
/// fixed when it starts.
pub fn last_seq(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM decisions")?
        .query_row([], |r| r.get(0))
}

/// Up to `limit` decisions matching `filters`, oldest first, with seq in (`after`, `upto`]:
/// one page of an export, walked by seq (keyset pagination).
pub fn export_page(
    conn: &Connection,
    org_id: &str,
    env: Env,
    filters: &Filters,
    after: i64,
    upto: i64,
    limit: i64,
) -> Result<Vec<(i64, Decision)>, StorageError> {
    let below = upto.saturating_add(1);
    filtered(
        conn,
        org_id,
        env,
        filters,
        after,
        below,
        Order::OldestFirst,
        limit,
    )
}

fn recent_request_times_sql() -> String {
    format!(
        "SELECT created_ms FROM decisions INDEXED BY decisions_by_agent
         WHERE {BUCKET} = ?1 AND agent_seq = ?2 AND seq >= ?3 AND seq <= ?4
           AND org_id = ?5 AND env = ?6 AND is_request = 1
         ORDER BY seq DESC LIMIT ?7"
    )
}

/// Times (unix ms) of the agent's latest `limit` requests, oldest first: the velocity
/// window is rebuilt from these.
pub fn recent_request_times(
    conn: &Connection,
    org_id: &str,
    env: Env,
    agent: &str,
    limit: i64,
) -> rusqlite::Result<Vec<i64>> {
    let Some(span) = AgentSpan::find(conn, org_id, env, agent, None, i64::MIN, i64::MAX)? else {
        return Ok(Vec::new());
    };
    let mut times = span.walk(
        conn,
        &recent_request_times_sql(),
        Order::NewestFirst,
        &[&org_id, &env],
        Some(limit),
        |r| r.get(0),
    )?;
    times.reverse();
    Ok(times)
}

fn allowed_since_sql() -> String {
    format!(
        "SELECT amount, created_ms FROM decisions INDEXED BY decisions_by_agent
         WHERE {BUCKET} = ?1 AND agent_seq = ?2 AND seq >= ?3 AND seq <= ?4
           AND org_id = ?5 AND env = ?6
           AND mandate_id = ?7 AND verdict = 'allow' AND created_ms >= ?8
         ORDER BY seq"
    )
}

/// Amounts and times (unix ms) of the `allow` decisions taken under `mandate_id` for
/// `agent` since `since_ms`, in order: month-to-date spend is rebuilt from these.
///
/// It walks the agent's decisions from the first one of `since_ms`'s month on
/// (`decision_months`), so its cost is the agent's decisions of this month, not of all
/// time.
pub fn allowed_since(
    conn: &Connection,
    org_id: &str,
    env: Env,
    agent: &str,
    mandate_id: &str,
    since_ms: i64,
) -> Result<Vec<(Amount, i64)>, StorageError> {
    let month = Some(month_index(since_ms));
    let Some(span) = AgentSpan::find(conn, org_id, env, agent, month, i64::MIN, i64::MAX)? else {
        return Ok(Vec::new());
    };
    let rows = span.walk(
        conn,
        &allowed_since_sql(),
        Order::OldestFirst,
        &[&org_id, &env, &mandate_id, &since_ms],
        None,
        |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
    )?;
    rows.into_iter()
        .map(|(amount, at)| {
            Amount::parse(&amount)
                .map(|amount| (amount, at))
                .map_err(|_| StorageError::Corrupt(format!("amount {amount:?}")))
        })
        .collect()
}

#[cfg(test)]
#[path = "decisions_tests.rs"]
mod tests;
