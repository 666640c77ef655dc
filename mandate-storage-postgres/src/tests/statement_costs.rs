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

/// A round of the decision log over many logs reads the strips and tiles of the logs it
/// lists, through their keys, however many logs the tables hold. Once a round listed a
/// good share of the logs (as a round over many busy organizations does), the planner
/// joined the list to a scan of every strip: a round then read the table whole, and more
/// each round as logs grew. Each statement here, planned for the values it is given (as a
/// connection's first executions are) and for any values (as its cached plan is), reads
/// neither table by a scan.
#[tokio::test]
async fn a_log_rounds_reads_of_tiles_take_only_the_logs_listed() {
    use mandate_storage::engine::Stmt;
    use mandate_storage::statements::LogSql;

    let db = database!("a_log_rounds_reads_of_tiles_take_only_the_logs_listed");
    let store = open(&db).await;
    // A log in each environment of every organization seeded, each with a level-1 tile
    // and a few strips in its first tile.
    db.execute(
        "INSERT INTO log_tiles (org_id, env, level, idx, hashes)
         SELECT 'org_' || o, e, 1, 0, decode(repeat('ab', 256), 'hex')
         FROM generate_series(1, 1000) AS o, unnest(ARRAY['sandbox', 'live']) AS e;
         INSERT INTO log_strips (org_id, env, start, first_seq, seqs, hashes)
         SELECT t.org_id, t.env, s * 4, s * 4 + 1, '\\x010101'::BYTEA,
                decode(repeat('cd', 128), 'hex')
         FROM log_tiles t, generate_series(0, 4) AS s;
         ANALYZE log_tiles; ANALYZE log_strips;",
    );
    // A round over the sandbox logs of most of the organizations, as a busy one lists.
    const LISTED: usize = 646;
    let list = |each: &dyn Fn(usize) -> String, kind: &str| {
        let items: Vec<String> = (0..LISTED).map(each).collect();
        format!("ARRAY[{}]::{kind}[]", items.join(", "))
    };
    let orgs = list(&|i| format!("'org_{}'", 1 + i), "TEXT");
    let envs = list(&|_| "'sandbox'".to_owned(), "TEXT");
    let numbers = |n: i64| list(&|_| n.to_string(), "BIGINT");
    let statements: Vec<(LogSql, Vec<String>)> = vec![
        (
            LogSql::StripRangesOf,
            vec![orgs.clone(), envs.clone(), numbers(0)],
        ),
        (
            LogSql::TilesOf,
            vec![orgs.clone(), envs.clone(), numbers(1), numbers(0)],
        ),
    ];
    let client = store.pool().get().await.unwrap();
    let mut costly = Vec::new();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        for (n, (stmt, args)) in statements.iter().enumerate() {
            let texts = crate::statements::sql(Stmt::Log(*stmt)).unwrap();
            let [text] = texts.as_slice() else {
                panic!("{stmt:?} is one statement");
            };
            let name = format!("round_{mode}_{n}");
            client
                .batch_execute(&format!(
                    "SET plan_cache_mode = {mode}; PREPARE {name} AS {text}"
                ))
                .await
                .unwrap_or_else(|e| panic!("{stmt:?}: {}", crate::pg_error(e)));
            let explain = format!(
                "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}({})",
                args.join(", ")
            );
            let plan = one_text(&client, &explain).await;
            let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
            let scans = scans_of_log_tables(&plan[0]["Plan"]);
            if !scans.is_empty() {
                costly.push(format!("{stmt:?} ({mode}): {}", scans.join(", ")));
            }
        }
    }
    assert!(costly.is_empty(), "{costly:#?}");
}

/// The nodes of `plan` (EXPLAIN's JSON) that read a log table by a sequential scan: the
/// table and the rows the scan went through.
fn scans_of_log_tables(plan: &serde_json::Value) -> Vec<String> {
    let mut found = Vec::new();
    let table = plan["Relation Name"].as_str().unwrap_or_default();
    if plan["Node Type"] == "Seq Scan" && table.starts_with("log_") {
        let rows = plan["Actual Rows"].as_i64().unwrap_or(0)
            + plan["Rows Removed by Filter"].as_i64().unwrap_or(0);
        found.push(format!("a scan of {table} through {rows} rows"));
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        found.extend(scans_of_log_tables(child));
    }
    found
}
