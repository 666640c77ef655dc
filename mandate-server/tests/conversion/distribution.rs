//! On Citus: what `migrate` made of the release's tables (docs/scale.md, "What is distributed, and why"):
//! every organization's table distributed by `org_id` and co-located, the shared ones
//! reference tables, the coordinator's own tables in the metadata, nothing left only on
//! the coordinator, and the organizations' rows on both workers.

use std::collections::BTreeMap;

use crate::citus::{CitusDb, Worker};

/// The tables of an organization's data: distributed by `org_id`, co-located with the
/// first.
pub const DISTRIBUTED: &[&str] = &[
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
];

/// The tables shared by every organization, or read before the organization is known:
/// one copy on every node.
const REFERENCE: &[&str] = &[
    "orgs",
    "api_keys",
    "signing_keys",
    "settings",
    "counters",
    "ap2_consents",
    "schema_migrations",
];

/// The coordinator's own tables, reachable from every node: a lost worker must not fail a
/// process's heartbeat or readiness.
const COORDINATOR_LOCAL: &[&str] = &["processes", "readiness_probe"];

/// How Citus holds a table: its type, distribution column and co-location group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placed {
    kind: String,
    column: Option<String>,
    colocation: i32,
}

/// `citus_tables`, by table.
async fn citus_tables(db: &CitusDb) -> BTreeMap<String, Placed> {
    let c = db.connect().await;
    c.query(
        "SELECT table_name::TEXT, citus_table_type, distribution_column, colocation_id
         FROM citus_tables",
        &[],
    )
    .await
    .expect("reading citus_tables")
    .iter()
    .map(|r| {
        let column: String = r.get(2);
        (
            r.get(0),
            Placed {
                kind: r.get(1),
                column: (column != "<none>").then_some(column),
                colocation: r.get(3),
            },
        )
    })
    .collect()
}

/// Whether `migrate` distributed anything: until the build's Citus step has landed (#48,
/// in steps), it leaves every table on the coordinator, and this test checks the rest of
/// the conversion on Citus without the distribution (said on stderr). Goes once the step
/// is on main: `migrate` must then distribute.
pub async fn distributes(db: &CitusDb) -> bool {
    let c = db.connect().await;
    let n: i64 = c
        .query_one("SELECT COUNT(*) FROM citus_tables", &[])
        .await
        .unwrap()
        .get(0);
    if n == 0 {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "conversion on Citus: migrate distributed no table (this build has no Citus \
             step yet); the distribution was not checked"
        );
    }
    n > 0
}

/// Every table of the schema is where the design puts it.
pub async fn assert_distributed(db: &CitusDb) {
    let placed = citus_tables(db).await;
    let c = db.connect().await;
    let tables: Vec<String> = c
        .query(
            "SELECT table_name::TEXT FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for table in &tables {
        assert!(
            placed.contains_key(table),
            "table {table} is left on the coordinator alone (not in Citus's metadata): {placed:?}"
        );
    }
    let group = placed["environments"].colocation;
    for table in DISTRIBUTED {
        let p = &placed[*table];
        assert_eq!(p.kind, "distributed", "{table}: {p:?}");
        assert_eq!(p.column.as_deref(), Some("org_id"), "{table}: {p:?}");
        assert_eq!(
            p.colocation, group,
            "{table} not co-located with environments"
        );
    }
    for table in REFERENCE {
        assert_eq!(
            placed[*table].kind, "reference",
            "{table}: {:?}",
            placed[*table]
        );
    }
    for table in COORDINATOR_LOCAL {
        assert_eq!(
            placed[*table].kind, "local",
            "{table}: {:?}",
            placed[*table]
        );
    }
}

/// Each organization's rows of every distributed table are on one worker, the organizations
/// of the fixture on both workers; returns each organization's worker.
pub async fn assert_on_both_workers(db: &CitusDb, org_ids: &[&str]) -> BTreeMap<String, Worker> {
    let mut held = BTreeMap::new();
    for org in org_ids {
        let worker = db.worker_of("environments", org).await;
        for table in DISTRIBUTED {
            assert_eq!(
                db.worker_of(table, org).await,
                worker,
                "{org}'s {table} is not on its environments' worker"
            );
        }
        held.insert((*org).to_owned(), worker);
    }
    let workers: std::collections::BTreeSet<&Worker> = held.values().collect();
    assert_eq!(
        workers.len(),
        db.workers().len(),
        "the organizations are not on every worker: {held:?}"
    );
    held
}

/// `org_id`'s decisions are physically on `worker` (in its shard there, read on the worker,
/// not through the coordinator) and nowhere else, as many as the coordinator reads.
pub async fn assert_decisions_on(db: &CitusDb, org_id: &str, worker: &Worker) {
    let coordinator = db.connect().await;
    let through: i64 = coordinator
        .query_one(
            "SELECT COUNT(*) FROM decisions WHERE org_id = $1",
            &[&org_id],
        )
        .await
        .unwrap()
        .get(0);
    let shard = db.shard_of("decisions", org_id).await;
    let table: String = coordinator
        .query_one("SELECT shard_name('decisions'::REGCLASS, $1)", &[&shard])
        .await
        .unwrap()
        .get(0);
    for node in db.workers() {
        let c = crate::citus::connect(&db.worker_url(node)).await.unwrap();
        let there: bool = c
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .unwrap()
            .get(0);
        let rows: i64 = if there {
            c.query_one(
                &format!("SELECT COUNT(*) FROM {table} WHERE org_id = $1"),
                &[&org_id],
            )
            .await
            .unwrap()
            .get(0)
        } else {
            0
        };
        let expected = if node == worker { through } else { 0 };
        assert_eq!(rows, expected, "{org_id}'s decisions on {node}");
    }
    assert!(through > 0, "{org_id} has no decisions");
}
