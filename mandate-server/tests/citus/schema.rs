//! Mandate's own migrations on the Citus cluster: every organization's table distributed by
//! `org_id`, co-located; the tables shared by all as reference tables; the processes' and
//! readiness tables on the coordinator; organizations landing on both workers; the Citus
//! step idempotent.

use std::collections::{BTreeMap, BTreeSet};

use mandate_server::model::Env;
use mandate_server::storage::admin::NewOrg;
use mandate_server::storage::postgres::PostgresStore;
use mandate_server::storage::{AdminStore, DbLocation};

use crate::citus::{CitusDb, Share, database};

/// The tables that hold an organization's rows, distributed by `org_id`.
const DISTRIBUTED: [&str; 23] = [
    "environments",
    "org_counters",
    "agents",
    "mandates",
    "decisions",
    "decision_claims",
    "reviews",
    "events",
    "webhooks",
    "deliveries",
    "delivery_attempts",
    "mandate_expiring_fired",
    "idempotency",
    "accepted_credentials",
    "ap2_issuers",
    "escrows",
    "escrow_history",
    "settlement_movements",
    "decision_months",
    "log_strips",
    "log_tiles",
    "log_heads",
    "log_entries",
];

/// The tables shared by all organizations: a copy on every node.
const REFERENCE: [&str; 8] = [
    "orgs",
    "api_keys",
    "signing_keys",
    "log_keys",
    "settings",
    "counters",
    "ap2_consents",
    "schema_migrations",
];

/// The store on `db`'s coordinator, migrated (the numbered migrations, then the Citus step).
pub async fn open(db: &CitusDb) -> PostgresStore {
    let DbLocation::Postgres(url) = db.url.parse::<DbLocation>().unwrap() else {
        panic!("the Citus harness gave no PostgreSQL URL");
    };
    PostgresStore::open(&url, true).await.unwrap()
}

/// Creates organization `name` (id `org_<name>`) with one sandbox key; its id.
pub fn onboard(store: &PostgresStore, name: &str, key: u8) -> String {
    let id = format!("org_{name}");
    store
        .create_org(&NewOrg {
            id: id.clone(),
            name: name.into(),
            policy_prefix: "pol_2026-11-25.".into(),
            keys: vec![([key; 32], Env::Sandbox, None)],
            now_ms: 1_795_000_000_000,
        })
        .unwrap()
        .expect("a fresh name");
    id
}

/// Each Citus table of the database: its type (`distributed`, `reference`, `local`) and
/// co-location group.
async fn citus_tables(db: &CitusDb) -> BTreeMap<String, (String, i32)> {
    let c = db.connect().await;
    c.query(
        "SELECT table_name::TEXT, citus_table_type, colocation_id FROM citus_tables",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), (r.get(1), r.get(2))))
    .collect()
}

#[tokio::test]
async fn mandates_migrations_distribute_every_organizations_table_co_located() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let store = open(&db).await;
    let tables = citus_tables(&db).await;
    let distributed: BTreeSet<&str> = tables
        .iter()
        .filter(|(_, (kind, _))| kind == "distributed")
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(distributed, DISTRIBUTED.into_iter().collect(), "{tables:?}");
    let groups: BTreeSet<i32> = DISTRIBUTED.iter().map(|t| tables[*t].1).collect();
    assert_eq!(groups.len(), 1, "one co-location group: {tables:?}");
    for table in REFERENCE {
        assert_eq!(tables[table].0, "reference", "{table}: {tables:?}");
    }
    // On the coordinator, reachable from every node: a lost worker fails no heartbeat.
    for table in ["processes", "readiness_probe"] {
        assert_eq!(tables[table].0, "local", "{table}: {tables:?}");
    }
    // The step again (a process starting, an operator's `migrate`) changes nothing, and
    // makes no two-phase commit: with nothing to migrate, nothing reaches a worker.
    drop(store);
    let commits = db.two_phase_commits().await;
    for _ in 0..3 {
        drop(open(&db).await);
    }
    assert_eq!(citus_tables(&db).await, tables);
    assert_eq!(
        db.two_phase_commits().await,
        commits,
        "a migrate with nothing to do made two-phase commits"
    );
    // A database distributed before a migration added an organization's table (as
    // `decision_months`, 0014, was added after 0011's distribution): the next step
    // distributes that table alone, its rows with it.
    let c = db.connect().await;
    c.batch_execute(
        "SELECT undistribute_table('decision_months');
         INSERT INTO decision_months VALUES ('org_before', 24322, 7);",
    )
    .await
    .unwrap();
    assert_eq!(
        citus_tables(&db)
            .await
            .get("decision_months")
            .map(|t| t.0.as_str()),
        None
    );
    let upgraded = open(&db).await;
    assert_eq!(citus_tables(&db).await, tables);
    let kept: i64 = c
        .query_one(
            "SELECT first_seq FROM decision_months WHERE org_id = 'org_before' AND month = 24322",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 7);
    drop(upgraded);

    // What the step distributes is read from the schema: a table a later migration adds
    // with an org_id is an organization's, distributed co-located (after the table its
    // foreign key names) with no list to edit; one with no org_id and not listed as shared
    // stops the step, naming it.
    c.batch_execute(
        "CREATE TABLE later_parents (org_id TEXT NOT NULL, id TEXT NOT NULL,
                                     PRIMARY KEY (org_id, id));
         CREATE TABLE a_later_child (org_id TEXT NOT NULL, parent TEXT NOT NULL,
                                     PRIMARY KEY (org_id, parent),
                                     FOREIGN KEY (org_id, parent)
                                         REFERENCES later_parents (org_id, id));
         INSERT INTO later_parents VALUES ('org_before', 'p1');
         INSERT INTO a_later_child VALUES ('org_before', 'p1');",
    )
    .await
    .unwrap();
    let grown = open(&db).await;
    let now = citus_tables(&db).await;
    for table in ["later_parents", "a_later_child"] {
        assert_eq!(now[table].0, "distributed", "{table}: {now:?}");
        assert_eq!(now[table].1, tables["environments"].1, "{table}: {now:?}");
    }
    let rows: i64 = c
        .query_one(
            "SELECT count(*) FROM a_later_child WHERE org_id = 'org_before'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    drop(grown);
    c.batch_execute("CREATE TABLE nobodys (id TEXT PRIMARY KEY)")
        .await
        .unwrap();
    let DbLocation::Postgres(url) = db.url.parse::<DbLocation>().unwrap() else {
        unreachable!()
    };
    let refused = PostgresStore::open(&url, true)
        .await
        .err()
        .expect("a table of no organization's, not listed, stops the step")
        .to_string();
    assert!(
        refused.contains("nobodys") && refused.contains("org_id"),
        "{refused}"
    );
    c.batch_execute("DROP TABLE nobodys; DROP TABLE a_later_child; DROP TABLE later_parents")
        .await
        .unwrap();
}

/// Every table the numbered migrations make is, on Citus, an organization's (distributed),
/// shared (reference) or the coordinator's (local): none is left a plain table of the
/// coordinator, and the organization's tables are exactly those with an `org_id` column
/// that are not shared.
#[tokio::test]
async fn every_table_of_the_schema_is_of_one_kind_on_citus() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let store = open(&db).await;
    let tables = citus_tables(&db).await;
    let c = db.connect().await;
    let schema: BTreeMap<String, bool> = c
        .query(
            "SELECT t.table_name::TEXT,
                    EXISTS (SELECT 1 FROM information_schema.columns k
                            WHERE k.table_schema = t.table_schema
                              AND k.table_name = t.table_name AND k.column_name = 'org_id')
             FROM information_schema.tables t
             WHERE t.table_schema = current_schema() AND t.table_type = 'BASE TABLE'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (table, has_org) in &schema {
        let kind = tables
            .get(table)
            .map(|t| t.0.as_str())
            .unwrap_or_else(|| panic!("{table} is a plain table of the coordinator: {tables:?}"));
        let want = if REFERENCE.contains(&table.as_str()) {
            "reference"
        } else if *has_org {
            "distributed"
        } else {
            "local"
        };
        assert_eq!(kind, want, "{table}");
    }
    let organizations: BTreeSet<&str> = schema
        .iter()
        .filter(|(t, has_org)| **has_org && !REFERENCE.contains(&t.as_str()))
        .map(|(t, _)| t.as_str())
        .collect();
    assert_eq!(organizations, DISTRIBUTED.into_iter().collect());
    drop(store);
}

#[tokio::test]
async fn onboarded_organizations_land_on_both_workers_each_whole_on_one() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let store = open(&db).await;
    let orgs: Vec<String> = (0..12u8)
        .map(|n| onboard(&store, &format!("tenant{n}"), n + 1))
        .collect();
    let mut workers = BTreeSet::new();
    for org in &orgs {
        let worker = db.worker_of("environments", org).await;
        // Every table's rows of the organization are on that one worker.
        for table in ["org_counters", "agents", "decisions", "idempotency"] {
            assert_eq!(db.worker_of(table, org).await, worker, "{org} {table}");
        }
        workers.insert(worker.to_string());
    }
    assert_eq!(
        workers.len(),
        2,
        "organizations on both workers: {workers:?}"
    );
    // Each organization's counters were made with it, where its rows are.
    let c = db.connect().await;
    let counters: i64 = c
        .query_one("SELECT COUNT(*) FROM org_counters", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(counters, 12 * 5);
}

/// A database Citus distributed at migration 13 (before `decision_months`), with decisions
/// of three months, migrated by this build: migration 14 runs on the distributed
/// `decisions` (each DDL command reaching the workers alone), marks the months, and the
/// Citus step distributes `decision_months` co-located with the rest.
#[tokio::test]
async fn a_database_distributed_before_migration_14_takes_it_with_its_decisions() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let store = open(&db).await;
    let org = onboard(&store, "before", 9);
    let tables = citus_tables(&db).await;
    drop(store);
    // The schema as migration 13 left it, one statement a message; then an agent's 90
    // decisions, one a day from 2026-09-21 (September 10, October 31, November 30, December
    // 19 of them).
    let c = db.connect().await;
    for statement in [
        "DROP TABLE decision_months".to_owned(),
        "ALTER TABLE decisions DROP CONSTRAINT decisions_pkey".to_owned(),
        "ALTER TABLE decisions ADD PRIMARY KEY (org_id, seq)".to_owned(),
        "CREATE INDEX decisions_by_env ON decisions (org_id, env, seq)".to_owned(),
        "CREATE INDEX decisions_by_agent_time ON decisions (org_id, agent_seq, created_ms)"
            .to_owned(),
        // Nor the writers' functions of migrations 15 and 17, nor the AP2 columns of 16.
        "DROP FUNCTION mandate_claim".to_owned(),
        "DROP FUNCTION mandate_store".to_owned(),
        "DROP FUNCTION mandate_record".to_owned(),
        "ALTER TABLE mandates DROP COLUMN ap2_consent, DROP COLUMN ap2_spent".to_owned(),
        // Nor the log's entries of 18, nor their function of 19.
        "DROP TABLE log_entries".to_owned(),
        "DROP FUNCTION mandate_log_put_entries".to_owned(),
        // Nor 21's key on the decisions' ids, id first: org_id first as before it.
        "ALTER TABLE escrows DROP CONSTRAINT escrows_org_id_decision_id_fkey".to_owned(),
        "ALTER TABLE decisions DROP CONSTRAINT decisions_id_org_id_key".to_owned(),
        "ALTER TABLE decisions ADD CONSTRAINT decisions_org_id_id_key UNIQUE (org_id, id)"
            .to_owned(),
        "ALTER TABLE escrows ADD CONSTRAINT escrows_org_id_decision_id_fkey
         FOREIGN KEY (org_id, decision_id) REFERENCES decisions (org_id, id)"
            .to_owned(),
        "DELETE FROM schema_migrations WHERE version >= 14".to_owned(),
        format!(
            "INSERT INTO agents (org_id, seq, env, id, created_ms)
             VALUES ('{org}', 1, 'sandbox', 'agt_x', 0)"
        ),
        format!(
            "INSERT INTO decisions (seq, id, org_id, env, agent_id, agent_seq, mandate_id,
                verdict, policy_verdict, mode, amount, currency, recipient, category, nonce,
                policy_version, iss, iat, exp, created_ms, is_request)
             SELECT n, 'dec_' || n, '{org}', 'sandbox', 'agt_x', 1, 'mnd_1', 'allow', 'allow',
                'enforce', '1.00', 'USD', 'vendor:x', 'software', 'n_' || n, 'pol', 'iss', 0,
                300, 1790000000000 + n::BIGINT * 86400000, true
             FROM generate_series(0, 89) AS n"
        ),
    ] {
        c.batch_execute(&statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let migrated = open(&db).await;
    assert_eq!(citus_tables(&db).await, tables);
    let marks: Vec<(i64, i64)> = c
        .query(
            "SELECT month, first_seq FROM decision_months WHERE org_id = $1 ORDER BY month",
            &[&org],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let september = 2026 * 12 + 8;
    assert_eq!(
        marks,
        [
            (september, 0),
            (september + 1, 10),
            (september + 2, 41),
            (september + 3, 71)
        ]
    );
    let key: String = c
        .query_one(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint
             WHERE conrelid = 'decisions'::regclass AND contype = 'p'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(key, "PRIMARY KEY (org_id, env, seq)");
    let indexes: BTreeSet<String> = c
        .query(
            "SELECT indexname::TEXT FROM pg_indexes WHERE tablename = 'decisions'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        indexes,
        [
            "decisions_by_agent",
            "decisions_id_org_id_key",
            "decisions_pkey"
        ]
        .map(String::from)
        .into_iter()
        .collect()
    );
    drop(migrated);
}

/// docs/scale.md's "Shards: few, two a worker": `citus.shard_count` set on the database
/// before the first `migrate` gives every organization's table that many shards, and the
/// Citus step writes one function of the group's call for each of them.
#[tokio::test]
async fn the_databases_shard_count_before_migrate_sets_the_shards_and_their_functions() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let c = db.connect().await;
    let name: String = c
        .query_one("SELECT current_database()::TEXT", &[])
        .await
        .unwrap()
        .get(0);
    c.batch_execute(&format!(
        "ALTER DATABASE \"{name}\" SET citus.shard_count = 4"
    ))
    .await
    .unwrap();
    drop(open(&db).await);
    let shards: Vec<(String, i64)> = c
        .query(
            "SELECT logicalrelid::TEXT, count(*) FROM pg_dist_shard \
             WHERE logicalrelid::TEXT = ANY($1) GROUP BY 1 ORDER BY 1",
            &[&DISTRIBUTED.to_vec()],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(shards.len(), DISTRIBUTED.len(), "{shards:?}");
    assert!(shards.iter().all(|(_, n)| *n == 4), "{shards:?}");
    let functions = texts(
        &c,
        "SELECT proname::TEXT FROM pg_proc WHERE proname LIKE 'mandate\\_record\\_s%' ORDER BY 1",
    )
    .await;
    let environments = texts(
        &c,
        "SELECT 'mandate_record_s' || shardid FROM pg_dist_shard \
         WHERE logicalrelid = 'environments'::regclass ORDER BY 1",
    )
    .await;
    assert_eq!(functions, environments);
}

/// The one text column of `sql`'s rows, in their order.
async fn texts(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    c.query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}
