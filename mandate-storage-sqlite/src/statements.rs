//! The SQLite engine's SQL: the statements of the boundary it says in its own dialect, and
//! for the rest the standard SQL (`storage::statements::standard`). Its one writer
//! serializes every write, so a read that a write transaction holds elsewhere is a plain
//! read here.

use super::decisions::{COLUMNS as DECISION_COLUMNS, SCOPE_OF};
use mandate_storage::StorageError;
use mandate_storage::engine::{Result, Sql, Stmt, built, each, none, one};
use mandate_storage::standard::{INSERT_EVENT, standard};
use mandate_storage::statements::Ap2Sql;
use mandate_storage::statements::DecisionSql;
use mandate_storage::statements::EventSql;
use mandate_storage::statements::IdempotencySql;
use mandate_storage::statements::LogSql;
use mandate_storage::statements::ProcessSql;
use mandate_storage::statements::{DeliverySql, EscrowSql, TimerSql, WebhookSql};
use mandate_storage::statements::{KeySql, MandateSql, SigningSql};

/// The SQL of `stmt`.
pub(crate) fn sql(stmt: Stmt) -> Result<Sql> {
    own(stmt)
        .or_else(|| standard(stmt, |_| ""))
        .ok_or_else(|| StorageError::Backend(format!("SQLite has no SQL for {stmt:?}")))
}

/// The key of agent `?4` of organization `?1`'s environment `?2`, as a scalar subquery.
const AGENT_OF: &str = "(SELECT seq FROM agents WHERE org_id = ?1 AND env = ?2 AND id = ?4)";

/// What SQLite says its own way.
fn own(stmt: Stmt) -> Option<Sql> {
    Some(match stmt {
        Stmt::Delivery(s) => deliveries(s)?,
        Stmt::Escrow(s) => escrows(s)?,
        Stmt::Idempotency(s) => idempotency(s),
        Stmt::Timer(s) => timers(s)?,
        // The organization (`?1`) is the endpoint's: deliveries are found by their endpoint.
        Stmt::Webhook(WebhookSql::FailDeliveries) => one(
            "UPDATE deliveries SET state = 'failed', next_attempt_ms = NULL,
                last_error = ?4, finished_ms = ?3
             WHERE webhook_id = ?2 AND state = 'pending'",
        ),
        // A list is bound as JSON text.
        Stmt::Ap2(Ap2Sql::Sources) => one(
            "SELECT id, ap2_open_mandate, ap2_digest, ap2_spent FROM mandates
             WHERE org_id = ?1 AND env = ?2 AND id IN (SELECT value FROM json_each(?3))
               AND ap2_digest IS NOT NULL",
        ),
        // One writer runs every write transaction: mandate changes already take turns.
        Stmt::Mandate(MandateSql::Turn) => none(),
        // Decisions name their environment by its scope key (migration 0017).
        Stmt::Log(LogSql::WithNews) => one("SELECT e.org_id, e.env FROM environments e
             LEFT JOIN log_heads h ON h.org_id = e.org_id AND h.env = e.env
             WHERE (h.shown_size IS NOT NULL AND h.shown_size < h.size)
                OR ((h.signed_ms IS NULL OR h.signed_ms < ?2)
                    AND EXISTS (SELECT 1 FROM decisions d
                                WHERE d.scope = (SELECT s.key FROM decision_scopes s
                                                 WHERE s.org_id = e.org_id AND s.env = e.env)
                                  AND d.seq > COALESCE(h.scanned_seq, 0)))
             LIMIT ?1"),
        Stmt::Log(LogSql::Ids) => built(format!(
            "SELECT seq, id, NULL FROM decisions
             WHERE scope = {SCOPE_OF} AND seq > ?3 AND seq < ?4
             ORDER BY seq LIMIT ?5"
        )),
        // Each seq's strip: the greatest first_seq not above it, one index probe a seq.
        Stmt::Log(LogSql::StripsOf) => one(
            "SELECT DISTINCT s.start, s.first_seq, s.seqs
             FROM json_each(?3) AS q
             JOIN log_strips s ON s.org_id = ?1 AND s.env = ?2
              AND s.first_seq = (SELECT MAX(m.first_seq) FROM log_strips m
                                 WHERE m.org_id = ?1 AND m.env = ?2 AND m.first_seq <= q.value)",
        ),
        // A decision names its organization, environment and agent by their keys
        // (migration 0017).
        Stmt::Decision(DecisionSql::Get) => built(format!(
            "SELECT {DECISION_COLUMNS} FROM decisions WHERE id = ?3 AND scope = {SCOPE_OF}
               AND (CAST(?4 AS TEXT) IS NULL OR agent_seq = {AGENT_OF})"
        )),
        Stmt::Decision(DecisionSql::Seq) => built(format!(
            "SELECT seq FROM decisions WHERE id = ?3 AND scope = {SCOPE_OF}
               AND (CAST(?4 AS TEXT) IS NULL OR agent_seq = {AGENT_OF})"
        )),
        // Subscribed types are a JSON array in a text column.
        Stmt::Event(EventSql::AppendFor) => each(&[
            INSERT_EVENT,
            "INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
             VALUES (?3, ?7, 0, ?6, 'pending', ?6)",
        ]),
        Stmt::Event(EventSql::Append) => each(&[
            INSERT_EVENT,
            "INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
             SELECT ?3, w.id, 0, ?6, 'pending', ?6 FROM webhooks w
             WHERE w.org_id = ?1 AND w.env = ?2 AND w.status = 'active'
               AND EXISTS (SELECT 1 FROM json_each(w.events) j WHERE j.value = ?4)",
        ]),
        Stmt::Key(KeySql::BumpGeneration) => one(
            "INSERT INTO settings (name, value) VALUES ('keys_generation', 1)
             ON CONFLICT (name) DO UPDATE SET value = value + 1",
        ),
        Stmt::Key(KeySql::Generation) => one(
            "SELECT COALESCE((SELECT value FROM settings WHERE name = 'keys_generation'), 0)",
        ),
        // One process has the file: the one alive is this one.
        Stmt::Process(ProcessSql::Heartbeat) => one("SELECT 1, TRUE"),
        Stmt::Process(ProcessSql::Leave) => none(),
        // A row inserted and deleted in one job: the net change is nothing, but the page is
        // dirtied, so the commit writes the WAL and the sync thread syncs it, as for any
        // decision. (An `UPDATE` to the same value would write nothing: SQLite leaves a page
        // alone when a cell's new bytes equal the old.) Version 0 is never a migration's.
        Stmt::Process(ProcessSql::Probe) => each(&[
            "INSERT INTO schema_migrations (version, applied_ms) VALUES (0, 0)",
            "DELETE FROM schema_migrations WHERE version = 0",
        ]),
        // The replaced bytes are overwritten in the file, not left in free space of pages.
        Stmt::Signing(SigningSql::SecureDelete { on: true }) => one("PRAGMA secure_delete = ON"),
        Stmt::Signing(SigningSql::SecureDelete { on: false }) => {
            one("PRAGMA secure_delete = OFF")
        }
        // The replaced bytes are still in older WAL frames: copy the pages into the file
        // and empty the WAL (best effort: readers may hold it back).
        Stmt::Signing(SigningSql::Compact) => one("PRAGMA wal_checkpoint(TRUNCATE)"),
        _ => return None,
    })
}

/// A delivery is its row, found by its event and endpoint (`?2`, `?3`; `?1`, the
/// organization, names nothing more here).
/// [`DeliverySql::Due`], with `of_org` among its conditions ([`DeliverySql::DueOf`]).
fn due_sql(of_org: &str) -> String {
    format!(
        "SELECT w.org_id, d.event_id, d.webhook_id, d.attempts, w.url, w.env, e.type, e.data,
                e.created_ms
         FROM (SELECT id, attempts, webhook_id, event_id, next_attempt_ms,
                      ROW_NUMBER() OVER (PARTITION BY webhook_id ORDER BY next_attempt_ms, id) AS rn
               FROM deliveries WHERE state = 'pending' AND next_attempt_ms <= ?1) d
         JOIN webhooks w ON w.id = d.webhook_id
         JOIN events e ON e.id = d.event_id
         WHERE d.rn <= ?2{of_org}
         ORDER BY d.next_attempt_ms, d.id LIMIT ?3"
    )
}

fn deliveries(s: DeliverySql) -> Option<Sql> {
    Some(match s {
        DeliverySql::InsertAttempt => one(
            "INSERT INTO delivery_attempts (delivery_id, attempt, at_ms, status, latency_ms, error)
             SELECT id, ?4, ?5, ?6, ?7, ?8 FROM deliveries WHERE event_id = ?2 AND webhook_id = ?3",
        ),
        DeliverySql::OfEvent => one(
            "SELECT webhook_id, attempts, state, next_attempt_ms, last_error
             FROM deliveries WHERE event_id = ?2 ORDER BY id",
        ),
        DeliverySql::Attempts => one(
            "SELECT attempt, at_ms, status, latency_ms, error FROM delivery_attempts
             WHERE delivery_id = (SELECT id FROM deliveries WHERE event_id = ?2 AND webhook_id = ?3)
             ORDER BY attempt, id",
        ),
        // One process has the database: nothing is claimed, the due ones are read.
        DeliverySql::Due => built(due_sql("")),
        DeliverySql::DueOf => built(due_sql(" AND w.org_id = ?4")),
        DeliverySql::Release => none(),
        // One process: what is due is its own.
        DeliverySql::Claim => one("SELECT 1"),
        DeliverySql::Update => one(
            "UPDATE deliveries SET attempts = ?4, state = ?5, next_attempt_ms = ?6,
                last_error = ?7, finished_ms = ?8
             WHERE event_id = ?2 AND webhook_id = ?3 AND state = 'pending'",
        ),
        DeliverySql::Backlog => return None,
    })
}

/// An escrow's history and movements, found by the escrow (`?2`; `?1`, its organization,
/// names nothing more here).
fn escrows(s: EscrowSql) -> Option<Sql> {
    Some(match s {
        EscrowSql::PushHistory => one(
            "INSERT INTO escrow_history (escrow_id, step, state, disputed, at_ms, actor)
             VALUES (?2, ?3, ?4, ?5, ?6, ?7)",
        ),
        EscrowSql::History => one("SELECT state, disputed, at_ms, actor FROM escrow_history
             WHERE escrow_id = ?2 ORDER BY step"),
        EscrowSql::RecordMovement => one("INSERT INTO settlement_movements
                (escrow_id, kind, amount, currency, from_party, to_party, created_ms)
             VALUES (?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (escrow_id, kind) DO NOTHING"),
        EscrowSql::Movements => one(
            "SELECT escrow_id, kind, amount, currency, from_party, to_party, created_ms
             FROM settlement_movements WHERE escrow_id = ?2 ORDER BY id",
        ),
        _ => return None,
    })
}

/// Idempotency records by key hash and Idempotency-Key (`?2`, `?3`; `?1`, the key's
/// organization, names nothing more here).
fn idempotency(s: IdempotencySql) -> Sql {
    match s {
        IdempotencySql::ClaimFresh => one("INSERT INTO idempotency
                (key_hash, idem_key, request_digest, created_ms, claimed_until, claim)
             VALUES (?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (key_hash, idem_key) DO NOTHING"),
        IdempotencySql::Read { .. } => one(
            "SELECT request_digest, created_ms, status, body, request_id, claimed_until
             FROM idempotency WHERE key_hash = ?2 AND idem_key = ?3",
        ),
        IdempotencySql::Reclaim => one(
            "UPDATE idempotency SET request_digest = ?4, created_ms = ?5, claimed_until = ?6,
                status = NULL, body = NULL, request_id = NULL, claim = ?7
             WHERE key_hash = ?2 AND idem_key = ?3",
        ),
        IdempotencySql::Owned => one("SELECT 1 FROM idempotency
             WHERE key_hash = ?2 AND idem_key = ?3 AND claim = ?4 AND status IS NULL"),
        IdempotencySql::Complete => one(
            "UPDATE idempotency SET status = ?4, body = ?5, request_id = ?6, claimed_until = NULL
             WHERE key_hash = ?2 AND idem_key = ?3 AND claim = ?7 AND status IS NULL",
        ),
        IdempotencySql::Release => one("DELETE FROM idempotency
             WHERE key_hash = ?2 AND idem_key = ?3 AND claim = ?4 AND status IS NULL"),
        // At start no request is in flight (one process): every unfinished claim goes.
        IdempotencySql::Sweep => {
            one("DELETE FROM idempotency WHERE created_ms < ?1 OR status IS NULL")
        }
        // Swept whole above: its records are not kept by organization.
        IdempotencySql::ExpiredOrgs | IdempotencySql::SweepOrg => Vec::new(),
    }
}

/// `mandate.expiring`'s marks, by mandate (`?2`; `?1`, its organization, names nothing
/// more here).
fn timers(s: TimerSql) -> Option<Sql> {
    Some(match s {
        TimerSql::DueExpiring => one("SELECT m.id, m.org_id, m.env FROM mandates m
             WHERE m.status = 'active' AND m.expires >= ?1 AND m.expires <= ?2
               AND NOT EXISTS (SELECT 1 FROM mandate_expiring_fired f WHERE f.mandate_id = m.id)
             ORDER BY m.expires, m.seq LIMIT ?3"),
        TimerSql::ExpiringFired => {
            one("SELECT EXISTS (SELECT 1 FROM mandate_expiring_fired WHERE mandate_id = ?2)")
        }
        TimerSql::MarkExpiringFired => one(
            "INSERT INTO mandate_expiring_fired (mandate_id, event_id, fired_ms) VALUES (?2, ?3, ?4)",
        ),
        TimerSql::DueReviews => return None,
    })
}
