//! The conformance suite on Citus: each test on a fresh database of the Citus test
//! cluster (mandate-test-kit/src/citus.rs: a coordinator and two workers; skipped without Citus
//! unless `MANDATE_REQUIRE_CITUS=1`, as in CI), its schema migrated once in a template and
//! distributed by Mandate's own migrations, the store connected to the coordinator.

use std::sync::Arc;

use mandate_storage::DbLocation;
use mandate_storage::location::PostgresUrl;
use mandate_storage_postgres::PostgresStore;

use super::citus_harness::{Share, database_from_template};
use super::suite::{Capabilities, Fresh};

/// Migrates the template (the numbered migrations, then the Citus step that distributes).
fn migrate(url: &str) {
    let location = postgres_url(url);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        PostgresStore::open(&location, true).await.unwrap();
    });
}

fn postgres_url(url: &str) -> PostgresUrl {
    let DbLocation::Postgres(url) = url.parse::<DbLocation>().unwrap() else {
        panic!("the Citus harness gave no PostgreSQL URL");
    };
    url
}

async fn fresh() -> Option<Fresh> {
    let db = database_from_template(Share::WithOthers, migrate).await?;
    let store = PostgresStore::open(&postgres_url(&db.url), true)
        .await
        .unwrap();
    Some(Fresh {
        store: Arc::new(store),
        keep: Box::new(db),
        capabilities: Capabilities {
            shared_by_processes: true,
        },
    })
}

conformance!(fresh);
