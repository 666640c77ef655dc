//! Whether the store can serve, for the readiness check: reachable, writable, and its
//! schema the one this server knows.

use super::engine::{Access, Engine, Result, Tx, first};
use super::statements::ProcessSql;
use super::{StorageError, StoreFuture};

/// The schema versions a readiness probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    /// The highest migration the database has applied.
    pub applied: i64,
    /// The highest migration this server knows.
    pub latest: i64,
}

/// The readiness probe of the store.
pub trait HealthStore {
    /// Writes through the path every change takes (a write that leaves nothing changed,
    /// committed and made durable like any other) and reads the schema version. An error
    /// means the store cannot be reached or written.
    fn readiness(&self) -> StoreFuture<'_, Schema>;
}

/// Refuses a database whose schema (at migration `applied`) is newer than this build
/// knows (`latest`): a server must never write to a schema it does not know.
pub fn refuse_newer(applied: i64, latest: i64) -> Result<()> {
    if applied > latest {
        return Err(StorageError::Schema(format!(
            "the database schema is at migration {applied}, newer than this mandate-server knows \
             (up to {latest}): run the newer mandate-server that migrated it"
        )));
    }
    Ok(())
}

/// Refuses a database whose schema is older than this build needs (`serve --no-migrate`).
pub fn refuse_older(applied: i64, latest: i64) -> Result<()> {
    if applied < latest {
        return Err(StorageError::Schema(format!(
            "the database schema is at migration {applied} and this mandate-server needs {latest}: \
             run `mandate-server migrate --db …` first, or start without --no-migrate"
        )));
    }
    Ok(())
}

impl<E: Engine> HealthStore for E {
    fn readiness(&self) -> StoreFuture<'_, Schema> {
        let latest = self.latest_migration();
        Box::pin(self.run(Access::Each, (), move |tx, ()| {
            Box::pin(async move {
                tx.execute(ProcessSql::Probe.into(), &[]).await?;
                let rows = tx
                    .query(ProcessSql::Applied.into(), &[], |r| r.int(0))
                    .await?;
                Ok(Schema {
                    applied: first(rows).unwrap_or(0),
                    latest,
                })
            })
        }))
    }
}
