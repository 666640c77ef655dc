//! Decisions: the log of every verdict. Rows are never updated.

use mandate_core::{AgentId, Amount, DecisionId, Mandate, MandateId, Verdict};
use mandate_protocol::id::ReviewId;
use rusqlite::{Connection, OptionalExtension, ToSql, params};

use super::StorageError;
use mandate_storage::deciding::{AgentHint, AgentRecord, allows_from};
use mandate_storage::decisions::{Filters, decision_columns, read};
use mandate_storage::engine::Scope;
use mandate_storage::mandates;
use mandate_storage::model::Env;
use mandate_storage::model::decision::{Decision, bindings_column};

/// The columns of a decision here: its agent's id is read through `agent_seq`, its
/// policy version and issuer through `issuer` (migration 0017).
pub(super) const COLUMNS: &str = decision_columns!(
    "(SELECT id FROM agents WHERE agents.seq = decisions.agent_seq)",
    "(SELECT policy_version FROM decision_issuers i WHERE i.key = decisions.issuer),
     (SELECT iss FROM decision_issuers i WHERE i.key = decisions.issuer)",
    "reviews.id = decisions.review_id"
);

/// The decision's insert, its issuer's key looked up by its `iss` (`?16`) and policy version
/// (`?15`): NULL, which the column refuses, the first time a pair is met.
const INSERT: &str = "INSERT INTO decisions (id, scope, agent_seq, mandate_id, verdict,
        policy_verdict, reason, mode, amount, currency, recipient, category, nonce, issuer,
        iat, exp, created_ms, supersedes, review_id, is_request, signing_kid, signature,
        bindings)
     VALUES (?1, (SELECT key FROM decision_scopes WHERE org_id = ?2 AND env = ?3),
        COALESCE(?23, (SELECT seq FROM agents WHERE org_id = ?2 AND env = ?3 AND id = ?4)),
        ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
        (SELECT key FROM decision_issuers WHERE iss = ?16 AND policy_version = ?15),
        ?17, ?18, ?19, ?20, ?21, ?22, ?24, ?25, ?26)";

/// Whether `e` is the decision's insert refused for want of its issuer's row.
fn no_issuer(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, Some(message))
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_NOTNULL
            && message.contains("decisions.issuer"))
}

/// The key of an organization's environment in `decision_scopes` (`?1` org, `?2` env), as
/// a scalar subquery: what a read of the decisions of an environment compares `scope` to.
pub(super) const SCOPE_OF: &str =
    "(SELECT key FROM decision_scopes WHERE org_id = ?1 AND env = ?2)";

/// Appends a decision, trusting `hint` (an agent's cached state) for what it says.
pub fn insert_with(
    tx: &Connection,
    org_id: &str,
    env: Env,
    d: &Decision,
    hint: AgentHint,
) -> rusqlite::Result<()> {
    let c = &d.claims;
    // The organization, environment, agent and issuer are stored as their integer keys
    // (migration 0017). COALESCE jumps over the agent's lookup when the hint gives its key
    // (`NotNull` in the plan); the scope and the issuer are one probe each of a table of a
    // row per environment or per issuer and policy version.
    let values = params![
        c.jti.as_str(),
        org_id,
        env.as_str(),
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
    ];
    let mut insert = tx.prepare_cached(INSERT)?;
    match insert.execute(values) {
        Err(e) if no_issuer(&e) => {
            // The first decision of this issuer and policy version: its row, then the
            // decision (a failed statement changed nothing).
            tx.prepare_cached(
                "INSERT OR IGNORE INTO decision_issuers (iss, policy_version) VALUES (?1, ?2)",
            )?
            .execute(params![c.iss, c.policy_version])?;
            insert.execute(values)?;
        }
        other => {
            other?;
        }
    }
    let month = month_index(d.created_ms);
    if hint.month_marked != Some(month) {
        // Where this agent's decisions of this month begin (see migration 0004).
        tx.prepare_cached(
            "INSERT OR IGNORE INTO decision_months (org_id, env, agent_id, month, first_seq)
             VALUES (?1, ?2, ?3, ?4, last_insert_rowid())",
        )?
        .execute(params![
            org_id,
            env.as_str(),
            c.request.agent.as_str(),
            month
        ])?;
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
        .query_row(params![org_id, env.as_str(), agent], |r| r.get(0))
        .optional()
}

pub use mandate_storage::clock::month_index;

/// Which way a filtered read walks the log.
#[derive(Clone, Copy)]
pub(super) enum Order {
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
                params![org_id, env.as_str(), agent, from_month.unwrap_or(i64::MIN)],
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
        mut map: impl FnMut(&rusqlite::Row<'_>) -> Result<T, StorageError>,
    ) -> Result<Vec<T>, StorageError> {
        let mut stmt = conn.prepare_cached(sql).map_err(crate::sqlite_error)?;
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
            let mut rows = stmt.query(values.as_slice()).map_err(crate::sqlite_error)?;
            while let Some(r) = rows.next().map_err(crate::sqlite_error)? {
                out.push(map(r)?);
            }
        }
        Ok(out)
    }
}

/// The query behind [`filtered`] for one bucket of one agent's decisions (`?1` bucket,
/// `?2` agent_seq, seqs in `?3..=?4`; the agent's key names its organization and
/// environment). It names its index: SQLite has no statistics to
/// prefer it over `decisions_by_env` for an `ORDER BY seq`.
fn by_agent_sql(order: Order) -> String {
    let direction = order.sql();
    format!(
        "SELECT {COLUMNS} FROM decisions INDEXED BY decisions_by_agent
         WHERE {BUCKET} = ?1 AND agent_seq = ?2 AND seq >= ?3 AND seq <= ?4
           AND (?5 IS NULL OR verdict = ?5) AND (?6 IS NULL OR policy_verdict = ?6)
         ORDER BY seq {direction} LIMIT ?7"
    )
}

/// The query behind [`filtered`] without an agent: the environment's decisions through
/// `decisions_by_env`.
fn by_env_sql(order: Order) -> String {
    let direction = order.sql();
    format!(
        "SELECT {COLUMNS} FROM decisions
         WHERE scope = {SCOPE_OF}
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
           AND scope = {SCOPE_OF}
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
pub(super) fn filtered(
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
        let mut stmt = conn
            .prepare_cached(&by_review_sql(order))
            .map_err(crate::sqlite_error)?;
        let status = status.as_str();
        let values = params![
            org_id,
            env.as_str(),
            status,
            filters.agent,
            verdict,
            policy_verdict,
            above,
            below,
            limit
        ];
        return collect(stmt.query(values).map_err(crate::sqlite_error)?);
    }
    match &filters.agent {
        None => {
            let mut stmt = conn
                .prepare_cached(&by_env_sql(order))
                .map_err(crate::sqlite_error)?;
            let values = params![
                org_id,
                env.as_str(),
                verdict,
                policy_verdict,
                above,
                below,
                limit
            ];
            collect(stmt.query(values).map_err(crate::sqlite_error)?)
        }
        Some(agent) => match AgentSpan::find(conn, org_id, env, agent, None, above, below)
            .map_err(crate::sqlite_error)?
        {
            None => Ok(Vec::new()),
            Some(span) => span.walk(
                conn,
                &by_agent_sql(order),
                order,
                &[&verdict, &policy_verdict],
                Some(limit),
                |r| read(&crate::row::SqliteRow(r)),
            ),
        },
    }
}

/// The decisions of a query's rows.
fn collect(mut rows: rusqlite::Rows<'_>) -> Result<Vec<(i64, Decision)>, StorageError> {
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(crate::sqlite_error)? {
        out.push(read(&crate::row::SqliteRow(r))?);
    }
    Ok(out)
}

/// A length as the `i64` that SQLite's LIMIT takes.
fn count<T>(items: &[T]) -> i64 {
    i64::try_from(items.len()).unwrap_or(i64::MAX)
}

/// The highest seq of any decision so far (0 if none): the log's watermark, since the one
/// writer commits decisions in seq order. An export reads up to it, so the set it covers is
/// fixed when it starts.
pub fn last_seq(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM decisions")?
        .query_row([], |r| r.get(0))
}

fn recent_request_times_sql() -> String {
    format!(
        "SELECT created_ms FROM decisions INDEXED BY decisions_by_agent
         WHERE {BUCKET} = ?1 AND agent_seq = ?2 AND seq >= ?3 AND seq <= ?4
           AND is_request = 1
         ORDER BY seq DESC LIMIT ?5"
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
) -> Result<Vec<i64>, StorageError> {
    let Some(span) = AgentSpan::find(conn, org_id, env, agent, None, i64::MIN, i64::MAX)
        .map_err(crate::sqlite_error)?
    else {
        return Ok(Vec::new());
    };
    let mut times = span.walk(
        conn,
        &recent_request_times_sql(),
        Order::NewestFirst,
        &[],
        Some(limit),
        |r| r.get(0).map_err(crate::sqlite_error),
    )?;
    times.reverse();
    Ok(times)
}

fn allowed_since_sql() -> String {
    format!(
        "SELECT amount, created_ms FROM decisions INDEXED BY decisions_by_agent
         WHERE {BUCKET} = ?1 AND agent_seq = ?2 AND seq >= ?3 AND seq <= ?4
           AND mandate_id = ?5 AND verdict = 'allow' AND created_ms >= ?6
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
    let Some(span) = AgentSpan::find(conn, org_id, env, agent, month, i64::MIN, i64::MAX)
        .map_err(crate::sqlite_error)?
    else {
        return Ok(Vec::new());
    };
    let rows = span.walk(
        conn,
        &allowed_since_sql(),
        Order::OldestFirst,
        &[&mandate_id, &since_ms],
        None,
        |r| {
            Ok((
                r.get::<_, String>(0).map_err(crate::sqlite_error)?,
                r.get::<_, i64>(1).map_err(crate::sqlite_error)?,
            ))
        },
    )?;
    rows.into_iter()
        .map(|(amount, at)| {
            Amount::parse(&amount)
                .map(|amount| (amount, at))
                .map_err(|_| StorageError::Corrupt(format!("amount {amount:?}")))
        })
        .collect()
}

/// The statement behind [`current`], kept prepared on each connection.
pub(crate) fn current_sql() -> String {
    format!(
        "SELECT {} FROM mandates WHERE org_id = ?1 AND env = ?2 AND agent_id = ?3
         ORDER BY seq DESC LIMIT 1",
        mandates::COLUMNS
    )
}

/// The agent's current mandate: its newest, whatever its status.
pub(crate) fn current(
    conn: &Connection,
    org_id: &str,
    env: Env,
    agent: &str,
) -> Result<Option<Mandate>, StorageError> {
    // Cached: every agent's first request runs this (a prepare costs more than the query).
    let mut stmt = conn
        .prepare_cached(&current_sql())
        .map_err(crate::sqlite_error)?;
    let mut rows = stmt
        .query(params![org_id, env.as_str(), agent])
        .map_err(crate::sqlite_error)?;
    match rows.next().map_err(crate::sqlite_error)? {
        Some(r) => Ok(Some(mandates::read(&crate::row::SqliteRow(r))?.1)),
        None => Ok(None),
    }
}

/// What an agent's next decision depends on, read in the caller's snapshot.
pub(super) fn agent_record(
    conn: &Connection,
    s: Scope<'_>,
    agent: &AgentId,
    limit: usize,
    allowed_since_ms: i64,
) -> Result<AgentRecord, StorageError> {
    let (org, env, agent) = (s.org, s.env, agent.as_str());
    let mandate = current(conn, org, env, agent)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let recent_requests = recent_request_times(conn, org, env, agent, limit)?;
    let allowed_since = match &mandate {
        Some(m) => {
            let from = allows_from(m, allowed_since_ms);
            allowed_since(conn, org, env, agent, m.id.as_str(), from)?
        }
        None => Vec::new(),
    };
    let hint = AgentHint {
        seq: agent_seq(conn, org, env, agent).map_err(crate::sqlite_error)?,
        month_marked: None,
        version: 0,
    };
    Ok(AgentRecord {
        mandate,
        recent_requests,
        allowed_since,
        hint,
        mode: None,
    })
}

#[cfg(test)]
mod tests;
