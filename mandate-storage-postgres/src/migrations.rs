//! The numbered schema migrations of `migrations/`; a database remembers which it
//! has (`schema_migrations`). Several processes may start at once: each migration is
//! applied in a transaction that first inserts its version, so the others wait on that row
//! and then find it applied.

use tokio_postgres::error::SqlState;

use super::Result;
use mandate_storage::StorageError;

/// The numbered migrations, applied in order. Never edit one that has landed: add another.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (
        2,
        include_str!("../migrations/0002_decision_signatures.sql"),
    ),
    (3, include_str!("../migrations/0003_idempotency_claims.sql")),
    (
        4,
        include_str!("../migrations/0004_decision_seq_in_commit_order.sql"),
    ),
    (
        5,
        include_str!("../migrations/0005_accepted_credentials.sql"),
    ),
    (6, include_str!("../migrations/0006_decision_bindings.sql")),
    (
        7,
        include_str!("../migrations/0007_ap2_issuers_and_sources.sql"),
    ),
    (8, include_str!("../migrations/0008_api_key_binding.sql")),
    (9, include_str!("../migrations/0009_decision_claims.sql")),
    (10, include_str!("../migrations/0010_ap2_consents.sql")),
    (
        11,
        include_str!("../migrations/0011_keyed_by_organization.sql"),
    ),
    (12, include_str!("../migrations/0012_decision_log.sql")),
    (13, include_str!("../migrations/0013_event_claims.sql")),
    (14, include_str!("../migrations/0014_decision_months.sql")),
    (
        15,
        include_str!("../migrations/0015_decision_group_functions.sql"),
    ),
    (16, include_str!("../migrations/0016_ap2_running_total.sql")),
    (
        17,
        include_str!("../migrations/0017_decision_group_one_call.sql"),
    ),
    (18, include_str!("../migrations/0018_log_entries.sql")),
    (19, include_str!("../migrations/0019_log_entries_put.sql")),
    (20, include_str!("../migrations/0020_log_heads_room.sql")),
    (21, include_str!("../migrations/0021_decision_ids_lead.sql")),
];

/// The Citus step, run after the numbered migrations by every `migrate`: nothing without
/// the `citus` extension or once done (`migrations/citus.sql`).
const CITUS: &str = include_str!("../migrations/citus.sql");

/// The highest migration this build knows.
pub fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |(version, _)| *version)
}

/// How many migrations this build knows (their numbers may leave gaps).
#[cfg(test)]
pub fn count() -> i64 {
    MIGRATIONS.len() as i64
}

/// Where the database's schema stands: the highest migration it has applied (0 for none,
/// or no table of them), or, when a migration this build knows is missing below that
/// (numbers may leave gaps, and a gap may be filled by a later build: a database that ran
/// 16 before 15 existed still needs 15), the one just below the first missing. A schema
/// newer than this build knows is said as it is, to be refused.
pub async fn applied(client: &tokio_postgres::Client) -> Result<i64> {
    let highest = highest(client).await?;
    if highest == 0 || highest > latest() {
        return Ok(highest);
    }
    let have: Vec<i64> = client
        .query("SELECT version FROM schema_migrations", &[])
        .await
        .map_err(crate::pg_error)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let missing = MIGRATIONS
        .iter()
        .map(|(version, _)| *version)
        .find(|v| *v < highest && !have.contains(v));
    Ok(missing.map_or(highest, |v| v - 1))
}

/// The highest migration the database has applied (0 for none, or no table of them).
async fn highest(client: &tokio_postgres::Client) -> Result<i64> {
    let has_table: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables
                            WHERE table_schema = current_schema() AND table_name = 'schema_migrations')",
            &[],
        )
        .await.map_err(crate::pg_error)?
        .get(0);
    if !has_table {
        return Ok(0);
    }
    Ok(client
        .query_one(
            "SELECT COALESCE(MAX(version), 0)::BIGINT FROM schema_migrations",
            &[],
        )
        .await
        .map_err(crate::pg_error)?
        .get(0))
}

/// Refuses a database whose schema is newer than this build knows.
pub fn refuse_newer(applied: i64) -> Result<()> {
    mandate_storage::health::refuse_newer(applied, latest())
}

/// Refuses a database whose schema is older than this build needs (`serve --no-migrate`).
pub fn refuse_older(applied: i64) -> Result<()> {
    mandate_storage::health::refuse_older(applied, latest())
}

/// Applies the migrations not applied yet, then the Citus step (which distributes the
/// tables on a Citus coordinator, once); returns how many migrations this call applied.
pub async fn migrate(client: &mut tokio_postgres::Client) -> Result<usize> {
    let count = numbered(client).await?;
    let tx = client.transaction().await.map_err(crate::pg_error)?;
    tx.batch_execute(CITUS).await.map_err(|e| {
        let why = crate::pg_error(e);
        StorageError::Schema(format!("distributing the tables on Citus failed: {why}"))
    })?;
    tx.commit().await.map_err(crate::pg_error)?;
    Ok(count)
}

/// Applies the numbered migrations not applied yet; how many this call applied.
async fn numbered(client: &mut tokio_postgres::Client) -> Result<usize> {
    let applied = applied(client).await?;
    refuse_newer(applied)?;
    if applied == latest() {
        return Ok(0);
    }
    create_table(client).await?;
    let mut count = 0;
    for (version, sql) in MIGRATIONS {
        let tx = client.transaction().await.map_err(crate::pg_error)?;
        // The version row first: a process migrating at the same time waits on it here,
        // then finds it taken and skips the migration.
        let claimed = tx
            .execute(
                "INSERT INTO schema_migrations (version, applied_ms)
                 VALUES ($1, (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT)
                 ON CONFLICT (version) DO NOTHING",
                &[version],
            )
            .await
            .map_err(crate::pg_error)?;
        if claimed == 0 {
            tx.rollback().await.map_err(crate::pg_error)?;
            continue;
        }
        tx.batch_execute(sql).await.map_err(|e| {
            let why = crate::pg_error(e);
            StorageError::Schema(format!("migration {version} failed: {why}"))
        })?;
        tx.commit().await.map_err(crate::pg_error)?;
        count += 1;
    }
    Ok(count)
}

/// `schema_migrations`, if missing. Two processes creating it at once: one of them gets a
/// duplicate error (of the table, of its row type or of the catalog's unique index,
/// whichever it meets first), and finds it there on its second try.
async fn create_table(client: &tokio_postgres::Client) -> Result<()> {
    const CREATE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
        version BIGINT PRIMARY KEY, applied_ms BIGINT NOT NULL)";
    match client.batch_execute(CREATE).await {
        Ok(()) => Ok(()),
        Err(e)
            if e.code() == Some(&SqlState::UNIQUE_VIOLATION)
                || e.code() == Some(&SqlState::DUPLICATE_TABLE)
                || e.code() == Some(&SqlState::DUPLICATE_OBJECT) =>
        {
            Ok(client
                .batch_execute(CREATE)
                .await
                .map_err(crate::pg_error)?)
        }
        Err(e) => Err(crate::pg_error(e)),
    }
}
