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
const DISTRIBUTED: [&str; 22] = [
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
    // The step again (a process starting, an operator's `migrate`) changes nothing.
    drop(store);
    let again = open(&db).await;
    assert_eq!(citus_tables(&db).await, tables);
    drop(again);
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
