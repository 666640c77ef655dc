//! The conformance suite on SQLite: each test on a fresh file of its own.

use std::sync::Arc;

use mandate_storage_sqlite::{Db, SqliteStore};

use super::suite::{Capabilities, Fresh};

async fn fresh() -> Option<Fresh> {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("conformance.db")).unwrap();
    Some(Fresh {
        store: Arc::new(SqliteStore::new(db)),
        keep: Box::new(dir),
        capabilities: Capabilities {
            shared_by_processes: false,
        },
    })
}

conformance!(fresh);
