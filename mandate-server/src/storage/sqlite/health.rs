//! The readiness probe on SQLite: a write through the writer thread that leaves nothing
//! behind, and the schema version.

use super::SqliteStore;
use super::migrations;
use crate::storage::health::{HealthStore, Schema};
use crate::storage::{StorageError, StoreFuture};

/// Inserts a row and deletes it in the same job: the net change is nothing, but the page
/// is dirtied, so the commit writes the WAL and the sync thread syncs it, as for any
/// decision. (An `UPDATE` to the same value would write nothing: SQLite leaves a page
/// alone when a cell's new bytes equal the old.) Version 0 is never a migration's.
const PROBE: &str = "INSERT INTO schema_migrations (version, applied_ms) VALUES (0, 0);
     DELETE FROM schema_migrations WHERE version = 0;";

impl HealthStore for SqliteStore {
    fn readiness(&self) -> StoreFuture<'_, Schema> {
        Box::pin(self.db().write(|conn| -> Result<Schema, StorageError> {
            conn.execute_batch(PROBE)?;
            Ok(Schema {
                applied: migrations::applied(conn)?,
                latest: migrations::latest(),
            })
        }))
    }
}
