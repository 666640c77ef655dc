//! Issue #48 item 2: a PostgreSQL database of the previous release, converted in place by
//! the new build's `mandate-server migrate`, keeps everything, on plain PostgreSQL and on a
//! Citus coordinator with two workers (docs/scale.md, "Setting up a cluster for Mandate").
//!
//! The database is `testdata/previous-release/` (its README says how the release filled it
//! and what a conversion must keep), restored with `psql` into a fresh database. Then the
//! real binary: `migrate`, the tables compared with the restored ones (nothing lost; only
//! the changes the design names), `migrate` again (nothing more), `serve`, and through its
//! HTTP API: every old decision's export line byte for byte and its token verifying against
//! the release's JWK Set, `after=` the export mark, the old keys authenticating, new
//! decisions (and the AP2 credential, the pending review, the Idempotency-Key of the
//! release) continuing where the release stopped. On Citus also: every organization's table
//! distributed by `org_id` and co-located, the organizations on both workers.
//!
//! Without PostgreSQL (or Citus) the tests say they were skipped and pass, unless
//! `MANDATE_REQUIRE_POSTGRES=1` (`MANDATE_REQUIRE_CITUS=1`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use mandate_test_kit::ap2 as ap2_tokens;
use mandate_test_kit::citus;
use mandate_test_kit::postgres;

mod acting;
mod distribution;
mod exports;
mod fixture;
mod server;
mod tables;

use fixture::Fixture;
use server::Server;
use tables::Snapshot;

/// The migration that keys every organization's table by `org_id` (#48): a build from it
/// on converts the release's tables, before it only migrates them.
const CONVERSION: i64 = 11;

/// Whether this build converts (has migration [`CONVERSION`]). Read from the migrations'
/// folder, not from the latest number: a later migration (0012, the decision log) may land
/// before it.
fn converts() -> bool {
    let prefix = format!("{CONVERSION:04}_");
    std::fs::read_dir(format!(
        "{}/../mandate-storage-postgres/migrations",
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
    ))
    .expect("the PostgreSQL migrations folder")
    .any(|entry| {
        entry
            .expect("a migration file")
            .file_name()
            .to_string_lossy()
            .starts_with(&prefix)
    })
}

/// Restores the release into the empty database `url`, checks it whole, runs `migrate`
/// twice and checks what each left; returns the tables as restored and as migrated.
async fn restore_and_migrate(url: &str, fixture: &Fixture) -> (Snapshot, Snapshot) {
    let c = postgres::connect(url).await.unwrap();
    let restore_url = url.to_owned();
    tokio::task::spawn_blocking(move || fixture::restore(&restore_url))
        .await
        .unwrap();
    let before = tables::snapshot(&c).await;
    tables::assert_restored(fixture, &before);
    migrate(url, fixture).await;
    let after = tables::snapshot(&c).await;
    tables::assert_kept(&before, &after, converts());
    tables::assert_migrations(
        &before,
        &after,
        mandate_server::storage::postgres::migrations::latest(),
    );
    if converts() {
        let orgs: Vec<&str> = fixture.orgs.iter().map(|o| o.id.as_str()).collect();
        tables::assert_org_counters(&before, &after, &orgs);
    }
    migrate(url, fixture).await;
    assert_eq!(
        tables::snapshot(&c).await,
        after,
        "a second migrate changed the converted database"
    );
    (before, after)
}

async fn migrate(url: &str, fixture: &Fixture) {
    let (url, kek) = (url.to_owned(), fixture.kek.clone());
    tokio::task::spawn_blocking(move || server::migrate(&url, &kek))
        .await
        .unwrap();
}

/// The API's checks of the converted database, served by `server`.
async fn through_the_api(server: &Server, fixture: &Fixture) {
    acting::assert_jwks(server, fixture).await;
    for export in &fixture.exports {
        exports::assert_old_lines(server, fixture, export).await;
        exports::assert_mark(server, export).await;
    }
    acting::assert_keys(server, fixture).await;
    let made = acting::make_decisions(server, fixture).await;
    acting::assert_continued(server, fixture, &made).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_database_of_the_previous_release_is_converted_in_place() {
    let Some(db) = postgres::database(postgres::Durability::Fast).await else {
        return;
    };
    let fixture = Fixture::load();
    restore_and_migrate(&db.url, &fixture).await;
    let server = Server::start(&db.url, &fixture.kek);
    through_the_api(&server, &fixture).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_citus_coordinators_database_of_the_previous_release_is_converted_and_distributed() {
    let Some(db) = citus::database(citus::Share::WithOthers).await else {
        return;
    };
    let fixture = Fixture::load();
    restore_and_migrate(&db.url, &fixture).await;
    let orgs: Vec<&str> = fixture.orgs.iter().map(|o| o.id.as_str()).collect();
    let held = if distribution::distributes(&db).await {
        distribution::assert_distributed(&db).await;
        Some(distribution::assert_on_both_workers(&db, &orgs).await)
    } else {
        None
    };
    let server = Server::start(&db.url, &fixture.kek);
    through_the_api(&server, &fixture).await;
    for (org, worker) in held.iter().flatten() {
        distribution::assert_decisions_on(&db, org, worker).await;
    }
}
