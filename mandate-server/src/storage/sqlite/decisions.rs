//! Decisions: the log of every verdict. Rows are never updated.

use mandate_core::amount::Amount;
use mandate_core::claims::{RequestClaims, VerdictClaims};
use mandate_core::id::{AgentId, DecisionId, MandateId, Nonce, ReviewId};
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::{Mode, Verdict};
use rusqlite::{Connection, OptionalExtension, ToSql, params};

use super::{StorageError, verdict_from};
use crate::model::decision::Decision;
use crate::storage::decisions::Filters;

pub use crate::storage::deciding::AgentHint;

/// Appends a decision.
pub fn insert(tx: &Connection, org_id: &str, env: &str, d: &Decision) -> rusqlite::Result<()> {
    insert_with(tx, org_id, env, d, AgentHint::default())
}

/// Appends a decision, trusting `hint` (an agent's cached state) for what it says.
pub fn insert_with(
    tx: &Connection,
    org_id: &str,
    env: &str,
    d: &Decision,
    hint: AgentHint,
) -> rusqlite::Result<()> {
    let c = &d.claims;
    // COALESCE jumps over the lookup when the hint gives the key (`NotNull` in the plan).
    let mut stmt = tx.prepare_cached(
        "INSERT INTO decisions (id, org_id, env, agent_id, mandate_id, verdict, policy_verdict,
            reason, mode, amount, currency, recipient, category, nonce, policy_version, iss,
            iat, exp, created_ms, supersedes, review_id, is_request, agent_seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
            ?18, ?19, ?20, ?21, ?22,
            COALESCE(?23, (SELECT seq FROM agents WHERE org_id = ?2 AND env = ?3 AND id = ?4)))",
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
    env: &str,
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

const COLUMNS: &str = "seq, id, agent_id, mandate_id, verdict, policy_verdict, reason, mode,
    amount, currency, recipient, category, nonce, policy_version, iss, iat, exp, created_ms,
    supersedes, review_id, is_request";

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
    })
}

impl DecisionRow {
    /// The decision, every column parsed into its type; a value that does not parse is a
    /// corrupt row naming the column.
    fn decode(self) -> Result<(i64, Decision), StorageError> {
        let bad = |what: &str| StorageError::Corrupt(format!("decision column {what}"));
        let id = DecisionId::parse(&self.id).map_err(|_| bad("id"))?;
        let claims = VerdictClaims {
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
            },
        ))
    }
}

/// One decision, optionally only if it belongs to `agent`.
pub fn get(
    conn: &Connection,
    org_id: &str,
    env: &str,
    agent: Option<&str>,
    id: &str,
) -> Result<Option<Decision>, StorageError> {
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
        env: &str,
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
    env: &str,
    filters: &Filters,
    above: i64,
    below: i64,
    order: Order,
    limit: i64,
) -> Result<Vec<(i64, Decision)>, StorageError> {
    let verdict = filters.verdict.map(Verdict::as_str);
    let policy_verdict = filters.policy_verdict.map(Verdict::as_str);
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
    env: &str,
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

/// The highest seq of any decision so far (0 if none). An export reads up to it, so the set
/// it covers is fixed when it starts.
pub fn last_seq(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM decisions")?
        .query_row([], |r| r.get(0))
}

/// Up to `limit` decisions matching `filters`, oldest first, with seq in (`after`, `upto`]:
/// one page of an export, walked by seq (keyset pagination).
pub fn export_page(
    conn: &Connection,
    org_id: &str,
    env: &str,
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
    env: &str,
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
    env: &str,
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn stored(agent: &AgentId, n: u8, created_ms: i64) -> Decision {
        use mandate_core::claims::{RequestClaims, VerdictClaims};
        Decision {
            claims: VerdictClaims {
                iss: "http://127.0.0.1".into(),
                jti: DecisionId::from_random([n; 16]),
                iat: created_ms / 1000,
                exp: created_ms / 1000 + 300,
                verdict: Verdict::Allow,
                policy_verdict: Verdict::Allow,
                mandate: None,
                policy_version: "pol_2026-11-22.1".into(),
                nonce: Nonce::from_random([n.wrapping_add(100); 16]),
                request: RequestClaims {
                    agent: agent.clone(),
                    amount: Amount::parse("1.00").unwrap(),
                    currency: Currency::parse("USD").unwrap(),
                    recipient: Recipient::parse("vendor:acme").unwrap(),
                    category: Category::parse("software").unwrap(),
                },
            },
            reason: None,
            mode: Mode::Enforce,
            supersedes: None,
            review: None,
            created_ms,
            is_request: true,
        }
    }

    /// A decision stored with what its agent's cached state knows (its key, its month
    /// already marked) is keyed and marked like one stored without; a new month is
    /// marked even when an older one is known; and a month the hint calls marked is not
    /// probed at all (the lookup it saves is real).
    #[test]
    fn a_hint_saves_lookups_and_stores_the_same_keys_and_marks() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::storage::sqlite::Db::open(&dir.path().join("hint.db")).unwrap();
        let (a, b) = (
            AgentId::parse("agt_alpha").unwrap(),
            AgentId::parse("agt_beta").unwrap(),
        );
        let nov = 1_795_305_600_000; // 2026-11-22
        let dec = 1_796_083_200_000; // 2026-12-01
        let (seq_a, rows, months) = db
            .write_blocking(|tx| -> Result<_, StorageError> {
                tx.execute(
                    "INSERT INTO orgs (id, name, policy_version, created_ms)
                     VALUES ('org_1', 'o', 'pol_1', 0)",
                    [],
                )?;
                for agent in [&a, &b] {
                    tx.execute(
                        "INSERT INTO agents (id, org_id, env, created_ms)
                         VALUES (?1, 'org_1', 'live', 0)",
                        [agent.as_str()],
                    )?;
                }
                let seq_a = agent_seq(tx, "org_1", "live", a.as_str())?.unwrap();
                insert(tx, "org_1", "live", &stored(&a, 1, nov))?;
                let known = AgentHint {
                    seq: Some(seq_a),
                    month_marked: Some(month_index(nov)),
                };
                insert_with(tx, "org_1", "live", &stored(&a, 2, nov + 1), known)?;
                insert_with(tx, "org_1", "live", &stored(&a, 3, dec), known)?;
                // Agent b has no row for November; a hint that says it has is trusted.
                let wrong = AgentHint {
                    seq: agent_seq(tx, "org_1", "live", b.as_str())?,
                    month_marked: Some(month_index(nov)),
                };
                insert_with(tx, "org_1", "live", &stored(&b, 4, nov), wrong)?;
                let rows: Vec<(i64, String, i64)> = tx
                    .prepare(
                        "SELECT d.seq, d.agent_id, d.agent_seq FROM decisions d ORDER BY d.seq",
                    )?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                let months: Vec<(String, i64, i64)> = tx
                    .prepare(
                        "SELECT agent_id, month, first_seq FROM decision_months
                         ORDER BY agent_id, month",
                    )?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok((seq_a, rows, months))
            })
            .unwrap();
        let seq_b = seq_a + 1;
        let ids: Vec<_> = rows
            .iter()
            .map(|(_, id, key)| (id.as_str(), *key))
            .collect();
        assert_eq!(
            ids,
            [
                (a.as_str(), seq_a),
                (a.as_str(), seq_a),
                (a.as_str(), seq_a),
                (b.as_str(), seq_b)
            ]
        );
        assert_eq!(
            months,
            [
                (a.to_string(), month_index(nov), rows[0].0),
                (a.to_string(), month_index(dec), rows[2].0),
            ],
            "a's November from its first decision, December from its third, none for b"
        );
    }

    /// A list or export filtered by agent walks the agent's index, whichever way it goes;
    /// unfiltered, the environment's.
    #[test]
    fn filtered_reads_use_the_index_of_what_they_filter_on() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::storage::sqlite::Db::open(&dir.path().join("plan.db")).unwrap();
        let plan = |sql: String| -> String {
            db.write_blocking(|tx| -> Result<String, StorageError> {
                use rusqlite::types::Value;
                let mut stmt = tx.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let values = [
                    Value::Text("org_1".into()),
                    Value::Text("sandbox".into()),
                    Value::Text("x_1".into()),
                    Value::Null,
                    Value::Null,
                    Value::Integer(0),
                    Value::Integer(10),
                    Value::Integer(50),
                    Value::Integer(5),
                ];
                let count = stmt.parameter_count();
                let rows = stmt.query_map(
                    rusqlite::params_from_iter(values.into_iter().take(count)),
                    |r| r.get::<_, String>(3),
                )?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?.join("; "))
            })
            .unwrap()
        };
        for order in [Order::NewestFirst, Order::OldestFirst] {
            let by_agent = plan(by_agent_sql(order));
            assert!(
                by_agent
                    .contains("decisions_by_agent (<expr>=? AND agent_seq=? AND seq>? AND seq<?)"),
                "{by_agent}"
            );
            assert!(!by_agent.contains("TEMP B-TREE"), "{by_agent}");
            let by_env = plan(by_env_sql(order));
            assert!(by_env.contains("decisions_by_env"), "{by_env}");
            assert!(!by_env.contains("TEMP B-TREE"), "{by_env}");
        }
        // Rebuilding an agent's state reads through its index too, one bucket a seek.
        for sql in [recent_request_times_sql(), allowed_since_sql()] {
            let by_agent = plan(sql);
            assert!(
                by_agent.contains("decisions_by_agent (<expr>=? AND agent_seq=?"),
                "{by_agent}"
            );
            assert!(!by_agent.contains("TEMP B-TREE"), "{by_agent}");
        }
        let by_type = plan(crate::storage::sqlite::events::page_sql(true));
        assert!(by_type.contains("events_by_type"), "{by_type}");
    }

    /// The index's bucket expression is the one the queries use.
    #[test]
    fn the_queries_use_the_migrations_bucket_expression() {
        let migration = include_str!("../../../migrations/sqlite/0006_agent_index_by_range.sql");
        assert!(migration.contains(&format!(
            "ON decisions (seq >> {BUCKET_BITS}, agent_seq, seq)"
        )));
        assert_eq!(BUCKET, format!("(seq >> {BUCKET_BITS})"));
    }

    /// One stored decision of the random histories below.
    #[derive(Debug, Clone)]
    struct Step {
        /// Agent 0 or 1 (both read), or a jump: `gap` decisions' worth of seqs skipped.
        agent: usize,
        gap: i64,
        verdict: Verdict,
        is_request: bool,
        /// Mandate 0 or 1 of the agent.
        mandate: usize,
        cents: u32,
        /// Minutes after the start of the history.
        minute: i64,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        (
            0usize..3,
            prop_oneof![Just(0i64), 1i64..4 << BUCKET_BITS],
            prop_oneof![
                Just(Verdict::Allow),
                Just(Verdict::Review),
                Just(Verdict::DenyCategory)
            ],
            any::<bool>(),
            0usize..2,
            1u32..100_000,
            0i64..90 * 24 * 60,
        )
            .prop_map(
                |(agent, gap, verdict, is_request, mandate, cents, minute)| Step {
                    agent,
                    gap: if agent == 2 { gap } else { 0 },
                    verdict,
                    is_request,
                    mandate,
                    cents,
                    minute,
                },
            )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Whatever buckets an agent's decisions fall in, every read by agent (pages,
        /// exports, the velocity and month-to-date rebuilds) finds exactly what a scan of
        /// the whole table finds, in the same order.
        #[test]
        fn reads_by_agent_across_buckets_match_a_full_scan(
            mut steps in proptest::collection::vec(step(), 1..60),
            limit in 1i64..12,
            cut in 0usize..60,
        ) {
            // Decisions are stored in time order, as the server stores them.
            steps.sort_by_key(|s| s.minute);
            let dir = tempfile::tempdir().unwrap();
            let db = crate::storage::sqlite::Db::open(&dir.path().join("buckets.db")).unwrap();
            let agents = [
                AgentId::parse("agt_zero").unwrap(),
                AgentId::parse("agt_one").unwrap(),
            ];
            let start = 1_788_220_800_000; // 2026-09-01
            let checks = db
                .write_blocking(|tx| -> Result<_, StorageError> {
                    tx.execute(
                        "INSERT INTO orgs (id, name, policy_version, created_ms)
                         VALUES ('org_1', 'o', 'pol_1', 0)",
                        [],
                    )?;
                    for agent in &agents {
                        tx.execute(
                            "INSERT INTO agents (id, org_id, env, created_ms)
                             VALUES (?1, 'org_1', 'live', 0)",
                            [agent.as_str()],
                        )?;
                    }
                    let spacer = AgentId::parse("agt_spacer").unwrap();
                    for (n, s) in steps.iter().enumerate() {
                        let created_ms = start + s.minute * 60_000;
                        let agent = agents.get(s.agent).unwrap_or(&spacer);
                        let mut d = stored(agent, 0, created_ms);
                        let mut id = [0u8; 16];
                        id[..8].copy_from_slice(&(n as u64).to_be_bytes());
                        d.claims.jti = DecisionId::from_random(id);
                        d.claims.verdict = s.verdict;
                        d.claims.policy_verdict = s.verdict;
                        d.is_request = s.is_request;
                        d.claims.mandate =
                            Some(MandateId::parse(&format!("mnd_m{}", s.mandate)).unwrap());
                        d.claims.request.amount =
                            Amount::parse(&format!("{}.{:02}", s.cents / 100, s.cents % 100))
                                .unwrap();
                        insert(tx, "org_1", "live", &d)?;
                        if s.gap > 0 {
                            // The next decision starts `gap` seqs later.
                            tx.execute(
                                "UPDATE decisions SET seq = seq + ?1 WHERE seq = last_insert_rowid()",
                                [s.gap],
                            )?;
                        }
                    }
                    let full = |agent: &str, extra: &str, order: &str| -> Result<Vec<i64>, StorageError> {
                        Ok(tx
                            .prepare(&format!(
                                "SELECT seq FROM decisions NOT INDEXED
                                 WHERE org_id = 'org_1' AND env = 'live' AND agent_id = ?1 {extra}
                                 ORDER BY seq {order}"
                            ))?
                            .query_map([agent], |r| r.get(0))?
                            .collect::<rusqlite::Result<_>>()?)
                    };
                    let mut checks = Vec::new();
                    for agent in &agents {
                        let all = full(agent.as_str(), "", "DESC")?;
                        // A cursor position: one of the agent's seqs, or past the end.
                        let before = all.get(cut % (all.len() + 1)).copied().unwrap_or(i64::MAX);
                        for verdict in [None, Some(Verdict::Allow), Some(Verdict::Review)] {
                            let filters = Filters {
                                agent: Some(agent.to_string()),
                                verdict,
                                policy_verdict: None,
                            };
                            let extra = verdict
                                .map(|v| format!("AND verdict = '{}'", v.as_str()))
                                .unwrap_or_default();
                            let want: Vec<i64> = full(agent.as_str(), &format!("{extra} AND seq < {before}"), "DESC")?
                                .into_iter()
                                .take(limit as usize)
                                .collect();
                            let got: Vec<i64> = page(tx, "org_1", "live", &filters, before, limit)?
                                .into_iter()
                                .map(|(seq, _)| seq)
                                .collect();
                            checks.push(("page", format!("{got:?}"), format!("{want:?}")));
                            let after = if before == i64::MAX { 0 } else { before };
                            let upto = last_seq(tx)?;
                            let want: Vec<i64> = full(agent.as_str(), &format!("{extra} AND seq > {after}"), "ASC")?
                                .into_iter()
                                .take(limit as usize)
                                .collect();
                            let got: Vec<i64> = export_page(tx, "org_1", "live", &filters, after, upto, limit)?
                                .into_iter()
                                .map(|(seq, _)| seq)
                                .collect();
                            checks.push(("export", format!("{got:?}"), format!("{want:?}")));
                        }
                        let mut want: Vec<i64> = tx
                            .prepare(
                                "SELECT created_ms FROM decisions NOT INDEXED
                                 WHERE agent_id = ?1 AND is_request = 1 ORDER BY seq DESC LIMIT ?2",
                            )?
                            .query_map(params![agent.as_str(), limit], |r| r.get(0))?
                            .collect::<rusqlite::Result<_>>()?;
                        want.reverse();
                        let got = recent_request_times(tx, "org_1", "live", agent.as_str(), limit)?;
                        checks.push(("velocity", format!("{got:?}"), format!("{want:?}")));
                        for since in [start, start + 30 * 24 * 60 * 60_000, start + 61 * 24 * 60 * 60_000] {
                            let want: Vec<(String, i64)> = tx
                                .prepare(
                                    "SELECT amount, created_ms FROM decisions NOT INDEXED
                                     WHERE agent_id = ?1 AND mandate_id = 'mnd_m1'
                                       AND verdict = 'allow' AND created_ms >= ?2 ORDER BY seq",
                                )?
                                .query_map(params![agent.as_str(), since], |r| Ok((r.get(0)?, r.get(1)?)))?
                                .collect::<rusqlite::Result<_>>()?;
                            let got: Vec<(String, i64)> =
                                allowed_since(tx, "org_1", "live", agent.as_str(), "mnd_m1", since)?
                                    .into_iter()
                                    .map(|(a, at)| (a.to_string(), at))
                                    .collect();
                            checks.push(("month-to-date", format!("{got:?}"), format!("{want:?}")));
                        }
                    }
                    Ok(checks)
                })
                .unwrap();
            for (what, got, want) in checks {
                proptest::prop_assert_eq!(got, want, "{}", what);
            }
        }
    }
}
