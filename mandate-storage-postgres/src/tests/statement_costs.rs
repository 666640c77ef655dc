//! What the PostgreSQL engine's statements cost and whether they are sound: every
//! statement prepares on a migrated database, and the statements of the decision path read
//! what they need and no more, however large the tables grow.

use super::*;

/// Every statement of the boundary has SQL on PostgreSQL that it prepares on a migrated
/// database: each value's type is known, each table and column exists.
#[tokio::test]
async fn every_statement_prepares() {
    let db = database!("every_statement_prepares");
    let store = open(&db).await;
    let client = store.pool().get().await.unwrap();
    let mut failed = Vec::new();
    for stmt in mandate_storage::every::every() {
        for text in crate::statements::sql(stmt).unwrap() {
            if let Err(e) = client.prepare(&text).await {
                failed.push(format!("{stmt:?}: {}", crate::pg_error(e)));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Storing a review's deliveries costs the same however many events the organization has:
/// its statement reads no event. A plan cached while the table was small (as a writer's
/// connection caches it soon after start) once found the event by a scan of the table, or
/// through `events_by_env`, walking every event of the environment.
#[tokio::test]
async fn a_reviews_deliveries_cost_the_same_however_many_events_there_are() {
    let db = database!("a_reviews_deliveries_cost_the_same_however_many_events_there_are");
    let _store = open(&db).await;
    seed(&db);
    let statement = crate::record::DELIVERIES.replace('\'', "''");
    // The shared buffers read by the statement's generic plan, made while `events` is small
    // and run again once it is large (the counts below; one session: the plan is cached
    // in it).
    db.execute(&format!(
        "CREATE FUNCTION delivery_buffers() RETURNS BIGINT LANGUAGE plpgsql AS $f$
         DECLARE plan JSON; first BIGINT;
         BEGIN
           INSERT INTO events (org_id, seq, env, id, type, data, created_ms)
           SELECT 'org_1', n, 'sandbox', 'evt_' || n, 'decision.review_pending', '{{}}', n
           FROM generate_series(1, 10) AS n;
           ANALYZE events;
           SET plan_cache_mode = force_generic_plan;
           EXECUTE 'PREPARE d(TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT) AS {statement}';
           EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE d(''org_1'', ''sandbox'', ''evt_1'', ''decision.review_pending'', ''{{}}'', 0)' INTO plan;
           INSERT INTO events (org_id, seq, env, id, type, data, created_ms)
           SELECT 'org_1', n, 'sandbox', 'evt_' || n, 'decision.review_pending', '{{}}', n
           FROM generate_series(11, 20000) AS n;
           EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE d(''org_1'', ''sandbox'', ''evt_20000'', ''decision.review_pending'', ''{{}}'', 0)' INTO plan;
           RETURN (plan -> 0 -> 'Plan' ->> 'Shared Hit Blocks')::BIGINT
                + COALESCE((plan -> 0 -> 'Plan' ->> 'Shared Read Blocks')::BIGINT, 0);
         END $f$;"
    ));
    let buffers = db.number("SELECT delivery_buffers()");
    assert!(
        buffers <= 10,
        "{buffers} buffers read for one review's deliveries"
    );
}

/// The writers' call prepares on a migrated database: every parameter's type is the one
/// `mandate_record` takes (a call that names a parameter more or less, or of another type,
/// fails here).
#[tokio::test]
async fn the_writers_call_prepares_against_its_function() {
    use crate::record::RECORD_CALL;

    let db = database!("the_writers_call_prepares_against_its_function");
    let store = open(&db).await;
    let client = store.pool().get().await.unwrap();
    let prepared = client
        .prepare(RECORD_CALL)
        .await
        .unwrap_or_else(|e| panic!("{RECORD_CALL}: {e}"));
    assert_eq!(prepared.params().len(), 46);
}

/// The one text value a simple query answers.
pub(super) async fn one_text(client: &tokio_postgres::Client, sql: &str) -> String {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no value"))
}
