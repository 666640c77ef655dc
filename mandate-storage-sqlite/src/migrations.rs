//! The numbered schema migrations, applied in order at open; a database remembers which
//! it has (`schema_migrations`).

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::StorageError;

/// The numbered migrations, applied in order. Never edit one that has landed: add another.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (2, include_str!("../migrations/0002_webhooks.sql")),
    (3, include_str!("../migrations/0003_escrows.sql")),
    (4, include_str!("../migrations/0004_lean_decisions.sql")),
    (5, include_str!("../migrations/0005_agent_key.sql")),
    (
        6,
        include_str!("../migrations/0006_agent_index_by_range.sql"),
    ),
    (7, include_str!("../migrations/0007_escrow_actor_role.sql")),
    (
        8,
        include_str!("../migrations/0008_purge_plaintext_agent_keys.sql"),
    ),
    (
        9,
        include_str!("../migrations/0009_decision_signatures.sql"),
    ),
    (
        10,
        include_str!("../migrations/0010_idempotency_claims.sql"),
    ),
    (
        11,
        include_str!("../migrations/0011_accepted_credentials.sql"),
    ),
    (12, include_str!("../migrations/0012_decision_bindings.sql")),
    (
        13,
        include_str!("../migrations/0013_ap2_issuers_and_sources.sql"),
    ),
    (14, include_str!("../migrations/0014_api_key_binding.sql")),
    (15, include_str!("../migrations/0015_ap2_consents.sql")),
    (16, include_str!("../migrations/0016_decision_log.sql")),
    (17, include_str!("../migrations/0017_decision_keys.sql")),
    (18, include_str!("../migrations/0018_ap2_running_total.sql")),
    (19, include_str!("../migrations/0019_log_entries.sql")),
];

/// The highest migration this build knows.
pub(super) fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |(version, _)| *version)
}

/// The highest migration the database has applied (0 for none, or no table of them).
pub(super) fn applied(conn: &Connection) -> Result<i64, StorageError> {
    let has_table: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations')",
        [],
        |row| row.get(0),
    ).map_err(crate::sqlite_error)?;
    if !has_table {
        return Ok(0);
    }
    conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        [],
        |row| row.get(0),
    )
    .map_err(crate::sqlite_error)
}

/// Refuses a database whose schema is newer than this build knows: a server must never
/// write to a schema it does not know.
pub(super) fn refuse_newer(conn: &Connection) -> Result<i64, StorageError> {
    let applied = applied(conn)?;
    mandate_storage::health::refuse_newer(applied, latest())?;
    Ok(applied)
}

/// Checks, without changing anything, that the schema is the one this build runs on
/// (`serve --no-migrate`): neither older nor newer.
pub(super) fn check(conn: &Connection) -> Result<(), StorageError> {
    let applied = refuse_newer(conn)?;
    mandate_storage::health::refuse_older(applied, latest())
}

/// Applies the migrations not applied yet; returns whether any was.
pub(super) fn migrate(conn: &mut Connection) -> Result<bool, StorageError> {
    refuse_newer(conn)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)",
    ).map_err(crate::sqlite_error)?;
    // A migration may rebuild a table that others reference (SQLite's documented way to
    // change a table's constraints): foreign keys are off while migrations run (the
    // pragma is a no-op inside a transaction) and checked before each one commits.
    conn.pragma_update(None, "foreign_keys", "OFF")
        .map_err(crate::sqlite_error)?;
    let result = MIGRATIONS.iter().try_fold(false, |any, (version, sql)| {
        Ok::<_, StorageError>(apply(conn, *version, sql)? || any)
    });
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(crate::sqlite_error)?;
    result
}

/// Applies migration `version` unless it was; returns whether it was applied now.
fn apply(conn: &mut Connection, version: i64, sql: &str) -> Result<bool, StorageError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(crate::sqlite_error)?;
    let applied: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?1)",
            [version],
            |row| row.get(0),
        )
        .map_err(crate::sqlite_error)?;
    if !applied {
        tx.execute_batch(sql).map_err(crate::sqlite_error)?;
        let broken: Option<String> = tx
            .query_row("PRAGMA foreign_key_check", [], |row| row.get(0))
            .optional()
            .map_err(crate::sqlite_error)?;
        if let Some(table) = broken {
            return Err(StorageError::Corrupt(format!(
                "migration {version} left a row of {table} pointing at nothing"
            )));
        }
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_ms) VALUES (?1, ?2)",
            rusqlite::params![version, 0],
        )
        .map_err(crate::sqlite_error)?;
    }
    tx.commit().map_err(crate::sqlite_error)?;
    Ok(!applied)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::writer::lock;
    use crate::{Db, decisions};
    use mandate_storage::model::Env;

    /// Without migrating (`serve --no-migrate`) a database behind this server's schema is
    /// refused, saying what to run; a schema newer than this server knows is refused with or
    /// without migrating, and nothing is written to it.
    #[test]
    fn an_older_schema_is_refused_without_migrating_and_a_newer_one_always() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("schema.db");
        let refused = Db::open_with(&path, false)
            .err()
            .expect("an empty file is refused");
        let text = refused.to_string();
        assert!(matches!(refused, StorageError::Schema(_)), "{text}");
        assert!(text.contains("mandate-server migrate"), "{text}");
        drop(Db::open(&path).unwrap());
        drop(Db::open_with(&path, false).unwrap());
        let newer = latest() + 1;
        Connection::open(&path)
            .unwrap()
            .execute("INSERT INTO schema_migrations VALUES (?1, 0)", [newer])
            .unwrap();
        for migrate in [true, false] {
            let text = Db::open_with(&path, migrate)
                .err()
                .expect("a newer schema is refused")
                .to_string();
            assert!(
                text.contains(&format!("migration {newer}")) && text.contains("newer"),
                "{text}"
            );
        }
    }

    /// A database written before migration 4 (decisions with the by-mandate index, an
    /// escrow pointing at one of them) comes out with every row, the escrow's reference
    /// intact and enforced, the month marks filled, and month-to-date read through them.
    /// The first column of `sql`'s rows.
    fn column<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> Vec<T> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// A database as a server before migration 4 left it (migrations 1 to 3): an
    /// organization, an agent, four decisions across a month's end, an escrow funded by one.
    fn old_database(path: &std::path::Path) {
        let mut old = Connection::open(path).unwrap();
        old.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)",
        )
        .unwrap();
        for (version, sql) in &MIGRATIONS[..3] {
            old.execute_batch(sql).unwrap();
            old.execute("INSERT INTO schema_migrations VALUES (?1, 0)", [version])
                .unwrap();
        }
        let tx = old.transaction().unwrap();
        tx.execute_batch(
            "INSERT INTO orgs VALUES ('org_1', 'o', 'v1', 0);
             INSERT INTO agents (id, org_id, env, created_ms) VALUES ('agt_1', 'org_1', 'sandbox', 0);",
        )
        .unwrap();
        // 2026-10-31T23:59:59Z, 2026-11-01T00:00:00Z and later in November.
        let rows: [(&str, &str, &str, i64); 4] = [
            ("dec_a", "agt_1", "allow", 1_793_491_199_000),
            ("dec_b", "agt_1", "allow", 1_793_491_200_000),
            ("dec_c", "agt_1", "deny_category", 1_793_491_300_000),
            ("dec_d", "agt_1", "allow", 1_793_491_400_000),
        ];
        for (id, agent, verdict, at) in rows {
            tx.execute(
                "INSERT INTO decisions (id, org_id, env, agent_id, mandate_id, verdict,
                    policy_verdict, reason, mode, amount, currency, recipient, category,
                    nonce, policy_version, iss, iat, exp, created_ms, supersedes,
                    review_id, is_request)
                 VALUES (?1, 'org_1', 'sandbox', ?2, 'mdt_1', ?3, ?3, NULL, 'enforce',
                    '10.50', 'USD', 'vendor:x', 'software', 'n_' || ?1, 'v1', 'iss',
                    ?4 / 1000, ?4 / 1000 + 300, ?4, NULL, NULL, 1)",
                rusqlite::params![id, agent, verdict, at],
            )
            .unwrap();
        }
        tx.execute(
            "INSERT INTO escrows (id, org_id, env, amount, currency, buyer, seller,
                decision_id, nonce, arbiter, state, disputed, created_ms)
             VALUES ('esc_1', 'org_1', 'sandbox', '10.50', 'USD', 'agt_1', 'vendor:x',
                'dec_b', 'n_dec_b', NULL, 'funded', 0, 0)",
            [],
        )
        .unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn migrations_4_and_5_keep_every_decision_and_fill_the_month_marks_and_agent_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        old_database(&path);
        let db = Db::open(&path).unwrap();
        let conn = lock(&db.writer);
        let ids: Vec<(i64, String)> = conn
            .prepare("SELECT seq, id FROM decisions ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            ids,
            vec![
                (1, "dec_a".to_owned()),
                (2, "dec_b".to_owned()),
                (3, "dec_c".to_owned()),
                (4, "dec_d".to_owned())
            ]
        );
        let indexes: Vec<String> = column(
            &conn,
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'decisions' ORDER BY name",
        );
        assert_eq!(
            indexes,
            [
                "decisions_by_agent",
                "decisions_by_env",
                "sqlite_autoindex_decisions_1"
            ]
        );
        let marks: Vec<(i64, i64)> = conn
            .prepare("SELECT month, first_seq FROM decision_months ORDER BY month")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(marks, vec![(2026 * 12 + 9, 1), (2026 * 12 + 10, 2)]);
        assert_eq!(decisions::month_index(1_793_491_199_000), 2026 * 12 + 9);
        assert_eq!(decisions::month_index(1_793_491_200_000), 2026 * 12 + 10);
        // November's allows only, through the month mark.
        let november = decisions::allowed_since(
            &conn,
            "org_1",
            Env::Sandbox,
            "agt_1",
            "mdt_1",
            1_793_491_200_000,
        )
        .unwrap();
        assert_eq!(
            november
                .iter()
                .map(|(a, at)| (a.to_string(), *at))
                .collect::<Vec<_>>(),
            vec![
                ("10.50".to_owned(), 1_793_491_200_000),
                ("10.50".to_owned(), 1_793_491_400_000)
            ]
        );
        // The escrow still points at its decision, and the reference is enforced again.
        let funded_by: String = conn
            .query_row(
                "SELECT d.id FROM escrows e JOIN decisions d ON d.id = e.decision_id",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(funded_by, "dec_b");
        let dangling = conn.execute(
            "UPDATE escrows SET decision_id = 'dec_missing' WHERE id = 'esc_1'",
            [],
        );
        assert!(
            dangling.is_err(),
            "foreign keys are enforced after migrating"
        );
        agents_and_scopes_are_keys(&conn);
    }

    /// Migrations 5 and 17: every decision carries its agent's and its scope's integer
    /// keys, and new decisions go on from the highest seq.
    fn agents_and_scopes_are_keys(conn: &rusqlite::Connection) {
        // Migration 5: every decision carries its agent's integer key.
        let keyed: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM decisions WHERE agent_seq = (SELECT seq FROM agents WHERE id = 'agt_1')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(keyed, 4);
        // Migration 17: the organization and environment are the scope's key, and the
        // agent's id is read through its key.
        let scoped: Vec<String> = column(
            conn,
            "SELECT a.id FROM decisions d JOIN agents a ON a.seq = d.agent_seq
             WHERE d.scope = (SELECT key FROM decision_scopes
                              WHERE org_id = 'org_1' AND env = 'sandbox')
             ORDER BY d.seq",
        );
        assert_eq!(scoped, ["agt_1"; 4]);
        // New decisions go on from the highest seq.
        let next: i64 = conn
            .query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM decisions", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(next, 5);
    }
}
