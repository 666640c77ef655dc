//! The PostgreSQL engine's SQL: the statements of the boundary it says in its own dialect,
//! and for the rest the standard SQL (`storage::statements::standard`), its values
//! numbered `$1` where the standard says `?1`, a read a write transaction holds locking
//! its row. Only SQL that CockroachDB accepts too.

use super::claims;
use super::record::{DELIVERIES, EVENT, EVENT_SEQ};
use mandate_storage::StorageError;
use mandate_storage::decisions::COLUMNS;
use mandate_storage::engine::{Lock, Result, Sql, Stmt, built, each, none, one};
use mandate_storage::peers::PEER_LEASE_MS;
use mandate_storage::standard::{events_page, standard};
use mandate_storage::statements::AgentSql;
use mandate_storage::statements::Ap2Sql;
use mandate_storage::statements::DeliverySql;
use mandate_storage::statements::EventSql;
use mandate_storage::statements::LogSql;
use mandate_storage::statements::ProcessSql;
use mandate_storage::statements::WebhookSql;
use mandate_storage::statements::{EscrowSql, IdempotencySql, TimerSql};
use mandate_storage::statements::{KeySql, MandateSql, OrgSql, SigningSql};

/// The SQL of `stmt`.
pub(super) fn sql(stmt: Stmt) -> Result<Sql> {
    if let Some(sql) = own(stmt) {
        return Ok(sql);
    }
    if let Stmt::Log(s) = stmt
        && let Some(sql) = logs_at_once(s)
    {
        return Ok(sql);
    }
    let sql = standard(stmt, locked)
        .ok_or_else(|| StorageError::Backend(format!("PostgreSQL has no SQL for {stmt:?}")))?;
    Ok(sql.iter().map(|text| dollars(text).into()).collect())
}

/// `text` with its values numbered `$1` where it says `?1`.
fn dollars(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let numbered = c == '?' && chars.peek().is_some_and(char::is_ascii_digit);
        out.push(if numbered { '$' } else { c });
    }
    out
}

/// What a read holds: its row locked for the transaction, or left out when another holds
/// it.
fn locked(lock: Lock) -> &'static str {
    match lock {
        Lock::No => "",
        Lock::Wait => " FOR UPDATE",
        Lock::Skip => " FOR UPDATE SKIP LOCKED",
    }
}

/// The log's statements of many logs at once (plain PostgreSQL only,
/// `Engine::logs_at_once`): each list an array, a log a position, every statement one for
/// all of them.
fn logs_at_once(s: LogSql) -> Option<Sql> {
    Some(match s {
        LogSql::HeadsOf { lock } => built(format!(
            "SELECT u.k, h.size, h.scanned_seq, h.checkpoint, h.shown_size, h.signed_ms
             FROM unnest($1::TEXT[], $2::TEXT[]) WITH ORDINALITY AS u (org, env, k)
             JOIN log_heads h ON h.org_id = u.org AND h.env = u.env
             ORDER BY u.k{}",
            if lock {
                " FOR UPDATE OF h SKIP LOCKED"
            } else {
                ""
            }
        )),
        LogSql::EnsureHeadsOf => one(
            "INSERT INTO log_heads (org_id, env, size, scanned_seq, shown_size)
             SELECT u.org, u.env, 0, 0, 0 FROM unnest($1::TEXT[], $2::TEXT[]) AS u (org, env)
             ON CONFLICT DO NOTHING",
        ),
        LogSql::IdsOf => one("SELECT u.k, d.seq, d.id, d.leaf
             FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[])
                  WITH ORDINALITY AS u (org, env, above, below, k)
             CROSS JOIN LATERAL (
                 SELECT seq, id, leaf FROM decisions
                 WHERE org_id = u.org AND env = u.env AND seq > u.above AND seq < u.below
                 ORDER BY seq LIMIT $5) AS d
             ORDER BY u.k, d.seq"),
        LogSql::TokensOf => built(format!(
            "SELECT u.k, d.*
             FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[])
                  WITH ORDINALITY AS u (org, env, above, below, most, k)
             CROSS JOIN LATERAL (
                 SELECT {COLUMNS} FROM decisions
                 WHERE org_id = u.org AND env = u.env AND seq > u.above AND seq < u.below
                 ORDER BY seq LIMIT u.most) AS d"
        )),
        // A tile's strips (at most 256) and a tile, each log's read through its own key:
        // the subquery's LIMIT keeps the planner from joining the lists to a scan of the
        // whole table, which it prefers once they are long and which costs as much as the
        // table holds.
        LogSql::StripRangesOf => one("SELECT u.k, s.start, s.hashes
             FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[])
                  WITH ORDINALITY AS u (org, env, first, k)
             CROSS JOIN LATERAL (
                 SELECT start, hashes FROM log_strips
                 WHERE org_id = u.org AND env = u.env
                   AND start >= u.first AND start < u.first + 256
                 ORDER BY start LIMIT 256) AS s
             ORDER BY u.k, s.start"),
        LogSql::TilesOf => one("SELECT u.k, t.hashes
             FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[])
                  WITH ORDINALITY AS u (org, env, level, idx, k)
             CROSS JOIN LATERAL (
                 SELECT hashes FROM log_tiles
                 WHERE org_id = u.org AND env = u.env AND level = u.level AND idx = u.idx
                 LIMIT 1) AS t"),
        LogSql::AppendStripsOf => one(
            "INSERT INTO log_strips (org_id, env, start, first_seq, seqs, hashes)
             SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[],
                                  $5::BYTEA[], $6::BYTEA[])",
        ),
        LogSql::AppendEntriesOf => one("INSERT INTO log_entries (org_id, env, start, entries)
             SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BYTEA[])"),
        LogSql::PutTilesOf => one("INSERT INTO log_tiles (org_id, env, level, idx, hashes)
             SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[],
                                  $5::BYTEA[])
             ON CONFLICT (org_id, env, level, idx) DO UPDATE SET hashes = excluded.hashes"),
        LogSql::SetHeadsOf => one(
            "UPDATE log_heads h SET size = u.size, scanned_seq = u.scanned,
                 checkpoint = NULLIF(u.checkpoint, ''), signed_ms = u.signed
             FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::TEXT[],
                         $6::BIGINT[]) AS u (org, env, size, scanned, checkpoint, signed)
             WHERE h.org_id = u.org AND h.env = u.env",
        ),
        LogSql::ShowOf => one(
            "UPDATE log_heads h SET shown_size = u.size, shown_checkpoint = u.note,
                 checkpoint = u.note
             FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[])
                  WITH ORDINALITY AS u (org, env, size, signed, note, k)
             WHERE h.org_id = u.org AND h.env = u.env AND h.size = u.size
               AND h.checkpoint = u.signed AND h.shown_size < u.size
             RETURNING u.k",
        ),
        _ => return None,
    })
}

/// What PostgreSQL says its own way.
fn own(stmt: Stmt) -> Option<Sql> {
    Some(match stmt {
        // Every change an agent's next decision depends on moves its version, so that a
        // decision made on the state before it is refused (`record.rs`).
        Stmt::Agent(AgentSql::Changed) => one(
            "UPDATE agents SET version = version + 1 WHERE org_id = $1 AND env = $2 AND id = $3",
        ),
        Stmt::Log(LogSql::Ids) => one(
            "SELECT seq, id, leaf FROM decisions
             WHERE org_id = $1 AND env = $2 AND seq > $3 AND seq < $4
             ORDER BY seq LIMIT $5",
        ),
        // A strip's entries through the function that, on Citus, writes them to the
        // organization's shard when it is on this node (migration 0019, citus.sql).
        Stmt::Log(LogSql::AppendEntries) => {
            one("SELECT mandate_log_put_entries($1, $2, $3, $4)")
        }
        // Each seq's strip: the greatest first_seq not above it, one index probe a seq.
        Stmt::Log(LogSql::StripsOf) => one(
            "SELECT DISTINCT s.start, s.first_seq, s.seqs
             FROM unnest($3::BIGINT[]) AS q(seq)
             JOIN log_strips s ON s.org_id = $1 AND s.env = $2
              AND s.first_seq = (SELECT MAX(m.first_seq) FROM log_strips m
                                 WHERE m.org_id = $1 AND m.env = $2 AND m.first_seq <= q.seq)",
        ),
        // The agent's seq is the organization's next (`org_counters`, its row held to the
        // commit); a name taken in the environment inserts nothing (the counter's gap is
        // harmless). Two statements on the organization's rows (on Citus, each routed to
        // its worker), the insert's count the answer.
        Stmt::Agent(AgentSql::Insert) => each(&[
            "UPDATE org_counters SET value = value + 1 WHERE org_id = $1 AND name = 'agents'",
            "INSERT INTO agents (org_id, seq, env, id, created_ms)
             SELECT c.org_id, c.value, $2::TEXT, $3::TEXT, $4::BIGINT FROM org_counters c
             WHERE c.org_id = $1 AND c.name = 'agents'
             ON CONFLICT DO NOTHING",
        ]),
        Stmt::Mandate(MandateSql::Insert) => one(
            "WITH c AS (
                UPDATE org_counters SET value = value + 1
                WHERE org_id = $1 AND name = 'mandates' RETURNING value)
             INSERT INTO mandates (org_id, seq, env, id, agent_id, terms, expires, status, created_ms)
             SELECT $1, c.value, $2::TEXT, $3::TEXT, $4::TEXT, $5::TEXT, $6::TEXT, $7::TEXT,
                    $8::BIGINT
             FROM c",
        ),
        // An organization starts its counters with it.
        Stmt::Org(OrgSql::Insert) => each(&[
            "INSERT INTO orgs (id, name, policy_version, created_ms) VALUES ($1, $2, $3, $4)",
            "INSERT INTO org_counters (org_id, name, value)
             VALUES ($1, 'decisions', 0), ($1, 'agents', 0), ($1, 'mandates', 0),
                    ($1, 'events', 0), ($1, 'webhooks', 0)",
        ]),
        Stmt::Escrow(s) => escrows(s)?,
        Stmt::Idempotency(s) => idempotency(s)?,
        Stmt::Timer(s) => timers(s)?,
        Stmt::Ap2(Ap2Sql::Sources) => one(
            "SELECT id, ap2_open_mandate, ap2_digest, ap2_spent FROM mandates
             WHERE org_id = $1 AND env = $2 AND id = ANY($3) AND ap2_digest IS NOT NULL",
        ),
        // The organization's mandates counter, the row every mandate insert moves, held
        // before any mandate's row (as every mandate insert takes it, so that none waits
        // on another's turn while holding a row that one needs): the imports of one
        // organization (and so of one open mandate, in force in one organization) take
        // turns, each reading the mandates the one before it stored. On Citus the row is
        // on the organization's worker, with its mandates, so the turn passes when those
        // are committed there.
        Stmt::Mandate(MandateSql::Turn) => one(
            "SELECT value FROM org_counters WHERE org_id = $1 AND name = 'mandates' FOR UPDATE",
        ),
        Stmt::Delivery(s) => deliveries(s)?,
        // The decision path's statements (`record.rs`), one for each table, each on the
        // organization's rows: on Citus each is routed to its worker, and the transaction
        // is no two-phase commit (a statement of several modifying CTEs would be).
        Stmt::Event(EventSql::Append) => each(&[EVENT_SEQ, EVENT, DELIVERIES]),
        Stmt::Event(EventSql::AppendFor) => each(&[EVENT_SEQ, EVENT, DELIVERY_TO]),
        // The events of a group's reviews may commit after events above their claimed seqs:
        // a page stops below the open claims (`claims.rs`), stale ones swept first.
        Stmt::Event(EventSql::Page { by_type }) => vec![
            claims::SWEEP.into(),
            dollars(&events_page(by_type, claims::EVENTS_BELOW_CLAIMS)).into(),
        ],
        Stmt::Key(KeySql::BumpGeneration) => one(
            "INSERT INTO counters (name, value) VALUES ('keys_generation', 1)
             ON CONFLICT (name) DO UPDATE SET value = counters.value + 1",
        ),
        Stmt::Key(KeySql::Generation) => {
            one("SELECT COALESCE((SELECT value FROM counters WHERE name = 'keys_generation'), 0)")
        }
        Stmt::Process(s) => processes(s)?,
        // Types the standard leaves unknown in a SELECT list.
        Stmt::Signing(SigningSql::InsertFirst) => one(
            "INSERT INTO signing_keys (env, kid, n, secret, created_ms)
             SELECT $1::TEXT, $2::TEXT, 1, $3::BYTEA, $4::BIGINT
             WHERE NOT EXISTS (SELECT 1 FROM signing_keys WHERE env = $1)
             ON CONFLICT DO NOTHING",
        ),
        Stmt::Signing(SigningSql::SecureDelete { .. }) => none(),
        // Row versions holding replaced secrets stay until a vacuum (and in the WAL until
        // recycled): the table is rewritten.
        Stmt::Signing(SigningSql::Compact) => one("VACUUM (FULL) signing_keys"),
        Stmt::Webhook(s) => webhooks(s)?,
        _ => return None,
    })
}

/// The one delivery of a ping, due at once, to endpoint `$7`, of the event [`EVENT`]
/// inserted: the values of `EventSql::AppendFor` (the event's row named by all of them, so
/// that each value's type is known).
const DELIVERY_TO: &str = "INSERT INTO deliveries
        (org_id, event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
    SELECT e.org_id, e.id, $7::TEXT, 0, e.created_ms, 'pending', e.created_ms FROM events e
    WHERE e.org_id = $1 AND e.env = $2 AND e.id = $3 AND e.type = $4 AND e.data = $5
      AND e.created_ms = $6";

/// [`DeliverySql::Due`], with `of_org` among the deliveries' conditions and `of_org_joined`
/// among the joined rows' ([`DeliverySql::DueOf`]).
fn due_sql(of_org: &str, of_org_joined: &str) -> String {
    format!(
        "SELECT d.org_id, d.event_id, d.webhook_id, d.attempts, w.url, w.env, e.type, e.data,
                e.created_ms
         FROM (SELECT org_id, event_id, webhook_id, attempts, next_attempt_ms, created_ms,
                      ROW_NUMBER() OVER (PARTITION BY org_id, webhook_id
                                         ORDER BY next_attempt_ms, created_ms, event_id) AS rn
               FROM deliveries
               WHERE state = 'pending' AND next_attempt_ms <= $1
                 AND (claimed_until IS NULL OR claimed_until <= $1){of_org}) d
         JOIN webhooks w ON w.org_id = d.org_id AND w.id = d.webhook_id
         JOIN events e ON e.org_id = d.org_id AND e.id = d.event_id
         WHERE d.rn <= $2{of_org_joined}
         ORDER BY d.next_attempt_ms, d.created_ms, d.event_id LIMIT $3"
    )
}

/// Deliveries are keyed by organization, event and endpoint, and claimed by the process
/// that attempts them (`claimed_until`).
fn deliveries(s: DeliverySql) -> Option<Sql> {
    const KEY: &str = "org_id = $1 AND event_id = $2 AND webhook_id = $3";
    Some(match s {
        // Read across organizations without a lock (on Citus, one read of every shard);
        // each is then claimed by its organization's statement ([`DeliverySql::Claim`]).
        DeliverySql::Due => built(due_sql("", "")),
        // One organization's, each table filtered by it: on Citus one shard's read.
        DeliverySql::DueOf => built(due_sql(
            " AND org_id = $4",
            " AND w.org_id = $4 AND e.org_id = $4",
        )),
        // No two processes attempt a delivery at once: the conditions are checked again on
        // the row as it is when updated (a claim by another process committed after the
        // read is seen, and this one changes nothing).
        DeliverySql::Claim => built(format!(
            "UPDATE deliveries SET claimed_until = $5
             WHERE {KEY} AND state = 'pending' AND next_attempt_ms <= $4
               AND (claimed_until IS NULL OR claimed_until <= $4)
             RETURNING 1"
        )),
        DeliverySql::Release => built(format!(
            "UPDATE deliveries SET claimed_until = NULL WHERE {KEY} AND state = 'pending'"
        )),
        // Two processes recording one attempt number (a claim that ran out mid-attempt):
        // the first stays.
        DeliverySql::InsertAttempt => one("INSERT INTO delivery_attempts
                (org_id, event_id, webhook_id, attempt, at_ms, status, latency_ms, error)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING"),
        DeliverySql::Update => built(format!(
            "UPDATE deliveries SET attempts = $4, state = $5, next_attempt_ms = $6,
                last_error = $7, finished_ms = $8, claimed_until = NULL
             WHERE {KEY} AND state = 'pending'"
        )),
        DeliverySql::OfEvent => one(
            "SELECT webhook_id, attempts, state, next_attempt_ms, last_error
             FROM deliveries WHERE org_id = $1 AND event_id = $2 ORDER BY created_ms, webhook_id",
        ),
        DeliverySql::Attempts => built(format!(
            "SELECT attempt, at_ms, status, latency_ms, error FROM delivery_attempts
             WHERE {KEY} ORDER BY attempt"
        )),
        DeliverySql::Backlog => return None,
    })
}

/// An escrow's history and movements, keyed by its organization.
fn escrows(s: EscrowSql) -> Option<Sql> {
    Some(match s {
        EscrowSql::PushHistory => one(
            "INSERT INTO escrow_history (org_id, escrow_id, step, state, disputed, at_ms, actor)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        ),
        EscrowSql::History => one("SELECT state, disputed, at_ms, actor FROM escrow_history
             WHERE org_id = $1 AND escrow_id = $2 ORDER BY step"),
        EscrowSql::RecordMovement => one("INSERT INTO settlement_movements
                (org_id, escrow_id, kind, amount, currency, from_party, to_party, created_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (org_id, escrow_id, kind) DO NOTHING"),
        // The lock first, then its release or refund.
        EscrowSql::Movements => one(
            "SELECT escrow_id, kind, amount, currency, from_party, to_party, created_ms
             FROM settlement_movements WHERE org_id = $1 AND escrow_id = $2
             ORDER BY created_ms, kind <> 'lock', kind",
        ),
        _ => return None,
    })
}

/// Idempotency records, keyed by the organization of the API key that sent them.
fn idempotency(s: IdempotencySql) -> Option<Sql> {
    const KEY: &str = "org_id = $1 AND key_hash = $2 AND idem_key = $3";
    Some(match s {
        IdempotencySql::ClaimFresh => one("INSERT INTO idempotency
                (org_id, key_hash, idem_key, request_digest, created_ms, claimed_until, claim)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (org_id, key_hash, idem_key) DO NOTHING"),
        IdempotencySql::Read { lock } => built(format!(
            "SELECT request_digest, created_ms, status, body, request_id, claimed_until
             FROM idempotency WHERE {KEY}{}",
            locked(lock)
        )),
        IdempotencySql::Reclaim => built(format!(
            "UPDATE idempotency SET request_digest = $4, created_ms = $5, claimed_until = $6,
                status = NULL, body = NULL, request_id = NULL, claim = $7
             WHERE {KEY}"
        )),
        // Locked: a concurrent take-over or release waits for this transaction (and then
        // sees the claim completed) or goes first (and this one stores nothing).
        IdempotencySql::Owned => built(format!(
            "SELECT 1 FROM idempotency WHERE {KEY} AND claim = $4 AND status IS NULL FOR UPDATE"
        )),
        IdempotencySql::Complete => built(format!(
            "UPDATE idempotency SET status = $4, body = $5, request_id = $6, claimed_until = NULL
             WHERE {KEY} AND claim = $7 AND status IS NULL"
        )),
        IdempotencySql::Release => built(format!(
            "DELETE FROM idempotency WHERE {KEY} AND claim = $4 AND status IS NULL"
        )),
        // One organization at a time (ExpiredOrgs, SweepOrg): on Citus a statement over
        // every organization deletes on every worker, a two-phase commit that fails while
        // any worker is down.
        IdempotencySql::Sweep => Vec::new(),
        IdempotencySql::ExpiredOrgs | IdempotencySql::SweepOrg => return None,
    })
}

/// `mandate.expiring`'s marks, keyed by the mandate's organization.
fn timers(s: TimerSql) -> Option<Sql> {
    Some(match s {
        TimerSql::DueExpiring => one("SELECT m.id, m.org_id, m.env FROM mandates m
             WHERE m.status = 'active' AND m.expires >= $1 AND m.expires <= $2
               AND NOT EXISTS (SELECT 1 FROM mandate_expiring_fired f
                               WHERE f.org_id = m.org_id AND f.mandate_id = m.id)
             ORDER BY m.expires, m.org_id, m.seq LIMIT $3"),
        TimerSql::ExpiringFired => one(
            "SELECT EXISTS (SELECT 1 FROM mandate_expiring_fired WHERE org_id = $1 AND mandate_id = $2)",
        ),
        TimerSql::MarkExpiringFired => one(
            "INSERT INTO mandate_expiring_fired (org_id, mandate_id, event_id, fired_ms)
             VALUES ($1, $2, $3, $4)",
        ),
        TimerSql::DueReviews => return None,
    })
}

/// The processes sharing the database, and the readiness probe.
fn processes(s: ProcessSql) -> Option<Sql> {
    Some(match s {
        // The lease by the database's clock; rows of processes gone a minute are dropped.
        ProcessSql::Heartbeat => built(format!(
            "WITH beat AS (
                INSERT INTO processes (id, expires_at)
                VALUES ($1, now() + INTERVAL '{PEER_LEASE_MS} milliseconds')
                ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at
                RETURNING 1),
             gone AS (
                DELETE FROM processes WHERE expires_at < now() - INTERVAL '1 minute')
             SELECT (SELECT COUNT(*) FROM processes WHERE expires_at > now() AND id <> $1)
                     + (SELECT COUNT(*) FROM beat),
                    NOT EXISTS (SELECT 1 FROM processes
                                WHERE expires_at > now() AND id < $1)"
        )),
        ProcessSql::Leave => one("DELETE FROM processes WHERE id = $1"),
        // A write committed like any other (a new row version, its WAL flushed), that
        // leaves the value as it was.
        ProcessSql::Probe => one("INSERT INTO readiness_probe (id, value) VALUES (1, 0)
             ON CONFLICT (id) DO UPDATE SET value = readiness_probe.value"),
        ProcessSql::Applied => return None,
    })
}

/// Subscribed types are JSONB, read as their text; pending deliveries end with their
/// claim.
fn webhooks(s: WebhookSql) -> Option<Sql> {
    const COLUMNS: &str = "seq, id, url, events::TEXT, status, created_ms";
    Some(match s {
        // The endpoint's seq is the organization's next (`org_counters`).
        WebhookSql::Insert => one("WITH c AS (
                UPDATE org_counters SET value = value + 1
                WHERE org_id = $1 AND name = 'webhooks' RETURNING value)
             INSERT INTO webhooks (org_id, seq, env, id, url, events, status, created_ms)
             SELECT $1, c.value, $2::TEXT, $3::TEXT, $4::TEXT, $5::TEXT::JSONB, 'active', $6::BIGINT
             FROM c"),
        WebhookSql::Get { lock } => built(format!(
            "SELECT {COLUMNS} FROM webhooks
             WHERE org_id = $1 AND env = $2 AND id = $3 AND status = 'active'{}",
            locked(lock)
        )),
        WebhookSql::Page => built(format!(
            "SELECT {COLUMNS} FROM webhooks
             WHERE org_id = $1 AND env = $2 AND status = 'active' AND seq < $3
             ORDER BY seq DESC LIMIT $4"
        )),
        WebhookSql::FailDeliveries => one(
            "UPDATE deliveries SET state = 'failed', next_attempt_ms = NULL,
                last_error = $4, finished_ms = $3, claimed_until = NULL
             WHERE org_id = $1 AND webhook_id = $2 AND state = 'pending'",
        ),
        WebhookSql::Delete => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::dollars;

    /// Values are renumbered; a `?` that is not a value's (a JSONB operator) is left.
    #[test]
    fn the_standard_values_are_numbered_with_dollars() {
        assert_eq!(
            dollars("SELECT ?1 WHERE a = ?12 AND b ? 'x'"),
            "SELECT $1 WHERE a = $12 AND b ? 'x'"
        );
    }
}
