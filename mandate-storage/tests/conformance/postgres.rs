//! The conformance suite on PostgreSQL: each test on a fresh database of the test harness's
//! throwaway cluster (mandate-test-kit/src/postgres.rs; skipped without PostgreSQL unless
//! `MANDATE_REQUIRE_POSTGRES=1`, as in CI).

use std::sync::Arc;

use mandate_storage::DbLocation;
use mandate_storage_postgres::PostgresStore;

use super::pg_harness::{Durability, database};
use super::suite::{Capabilities, Fresh};

async fn fresh() -> Option<Fresh> {
    let db = database(Durability::Fast).await?;
    let DbLocation::Postgres(url) = db.url.parse::<DbLocation>().unwrap() else {
        panic!("the harness gave no PostgreSQL URL");
    };
    let store = PostgresStore::open(&url, true).await.unwrap();
    Some(Fresh {
        store: Arc::new(store),
        keep: Box::new(db),
        capabilities: Capabilities {
            shared_by_processes: true,
        },
    })
}

conformance!(fresh);
