//! Nothing lost: every table's rows before `migrate` (as restored) and after it, compared
//! value by value on the columns the conversion keeps, with the changes migration 0011
//! makes stated here and nothing else allowed.

use std::collections::{BTreeMap, BTreeSet};

use crate::fixture::Fixture;

/// A table's rows: its columns (in order) and every row's values as PostgreSQL's text
/// (`NULL` as `None`), sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl Rows {
    /// The rows on `columns` only (each of which this has), sorted again.
    fn project(&self, columns: &[String]) -> Vec<Vec<Option<String>>> {
        let at: Vec<usize> = columns
            .iter()
            .map(|c| self.columns.iter().position(|have| have == c).unwrap())
            .collect();
        let mut rows: Vec<Vec<Option<String>>> = self
            .rows
            .iter()
            .map(|row| at.iter().map(|&i| row[i].clone()).collect())
            .collect();
        rows.sort();
        rows
    }

    /// The value of `column` in each row.
    fn column(&self, column: &str) -> Vec<Option<String>> {
        self.project(&[column.to_owned()])
            .into_iter()
            .map(|mut row| row.remove(0))
            .collect()
    }
}

/// Every table of the database's schema, by name.
pub type Snapshot = BTreeMap<String, Rows>;

/// Reads every table of the current schema.
pub async fn snapshot(c: &tokio_postgres::Client) -> Snapshot {
    let tables: Vec<String> = c
        .query(
            "SELECT table_name::TEXT FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
             ORDER BY 1",
            &[],
        )
        .await
        .expect("listing the tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut all = Snapshot::new();
    for table in tables {
        all.insert(table.clone(), rows(c, &table).await);
    }
    all
}

async fn rows(c: &tokio_postgres::Client, table: &str) -> Rows {
    let columns: Vec<String> = c
        .query(
            "SELECT column_name::TEXT FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = $1
             ORDER BY ordinal_position",
            &[&table],
        )
        .await
        .expect("listing a table's columns")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let select = columns
        .iter()
        .map(|c| format!("\"{c}\"::TEXT"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut rows: Vec<Vec<Option<String>>> = c
        .query(&format!("SELECT {select} FROM \"{table}\""), &[])
        .await
        .unwrap_or_else(|e| panic!("reading {table}: {e}"))
        .iter()
        .map(|r| (0..columns.len()).map(|i| r.get(i)).collect())
        .collect();
    rows.sort();
    Rows { columns, rows }
}

/// The restored database is the release's whole: as many rows in each table as
/// `expected.json` counted, and no table it did not count.
pub fn assert_restored(fixture: &Fixture, restored: &Snapshot) {
    let counted: BTreeMap<String, i64> = restored
        .iter()
        .map(|(table, rows)| (table.clone(), rows.rows.len() as i64))
        .collect();
    assert_eq!(
        counted, fixture.counts,
        "the restored dump's rows per table are not expected.json's counts"
    );
}

/// The columns the conversion (migration 0011) drops, by table: handles nothing reads, or
/// replaced by natural keys (migration 0011).
const DROPPED: &[(&str, &str)] = &[
    ("deliveries", "id"),
    ("delivery_attempts", "id"),
    ("delivery_attempts", "delivery_id"),
    ("escrows", "seq"),
    ("reviews", "seq"),
    ("settlement_movements", "id"),
];

/// The counters' rows the conversion moves to tables of their own.
const MOVED_COUNTERS: &[&str] = &["decision_seq", "readiness_probe"];

/// Every row of `before` (the restored release) is in `after` (migrated), with the same
/// values in every column both have, except what the conversion is to change:
/// `counters` loses the rows it moves, `decision_claims` is recreated empty,
/// `schema_migrations` gains this build's migrations, and only the columns of [`DROPPED`]
/// go. `converted` says whether this build has the conversion.
pub fn assert_kept(before: &Snapshot, after: &Snapshot, converted: bool) {
    for (table, old) in before {
        let new = after
            .get(table)
            .unwrap_or_else(|| panic!("table {table} is gone after migrate"));
        let kept: Vec<String> = old
            .columns
            .iter()
            .filter(|c| new.columns.contains(c))
            .cloned()
            .collect();
        let dropped: BTreeSet<&str> = old
            .columns
            .iter()
            .filter(|c| !kept.contains(c))
            .map(String::as_str)
            .collect();
        let may_drop: BTreeSet<&str> = DROPPED
            .iter()
            .filter(|(t, _)| converted && t == table)
            .map(|(_, c)| *c)
            .collect();
        assert!(
            dropped.is_subset(&may_drop),
            "migrate dropped {table}.{dropped:?}; only {may_drop:?} may go"
        );
        let expected = expected_rows(table, old, &kept, converted);
        let found = new.project(&kept);
        if table == "schema_migrations" {
            let found: BTreeSet<_> = found.into_iter().collect();
            let missing: Vec<_> = expected.iter().filter(|r| !found.contains(*r)).collect();
            assert!(missing.is_empty(), "schema_migrations lost {missing:?}");
        } else {
            assert_eq!(
                found.len(),
                expected.len(),
                "{table}: {} rows after migrate, {} expected",
                found.len(),
                expected.len()
            );
            assert_eq!(found, expected, "{table}: rows changed by migrate");
        }
    }
}

/// What `table`'s rows on `columns` are to be after migrate.
fn expected_rows(
    table: &str,
    old: &Rows,
    columns: &[String],
    converted: bool,
) -> Vec<Vec<Option<String>>> {
    let rows = old.project(columns);
    match table {
        "decision_claims" if converted => Vec::new(),
        "counters" if converted => {
            let name = columns.iter().position(|c| c == "name").unwrap();
            rows.into_iter()
                .filter(|row| !MOVED_COUNTERS.contains(&row[name].as_deref().unwrap()))
                .collect()
        }
        _ => rows,
    }
}

/// `schema_migrations` after migrate: the release's versions and every one of this build's
/// up to `latest`, once each.
pub fn assert_migrations(before: &Snapshot, after: &Snapshot, latest: i64) {
    let versions = |s: &Snapshot| -> BTreeSet<i64> {
        s["schema_migrations"]
            .column("version")
            .into_iter()
            .map(|v| v.unwrap().parse().unwrap())
            .collect()
    };
    let (old, new) = (versions(before), versions(after));
    assert_eq!(
        new.len(),
        after["schema_migrations"].rows.len(),
        "a migration recorded twice"
    );
    assert_eq!(new.last(), Some(&latest), "migrate stopped short: {new:?}");
    let added: Vec<i64> = new.difference(&old).copied().collect();
    let release = *old.last().unwrap();
    assert!(
        added.iter().all(|v| *v > release) && !added.is_empty(),
        "migrations added {added:?} to the release's {old:?}"
    );
}

/// The per-organization counters start above everything the release gave: each
/// organization's `decisions`, `agents`, `mandates`, `events` and `webhooks` counter is at
/// least the release's highest seq of that kind (the global `decision_seq` counter for
/// decisions), so every new seq sorts after every old one.
pub fn assert_org_counters(before: &Snapshot, after: &Snapshot, org_ids: &[&str]) {
    let highest = |table: &str| -> i64 {
        before[table]
            .column("seq")
            .into_iter()
            .map(|v| v.unwrap().parse::<i64>().unwrap())
            .max()
            .unwrap_or(0)
    };
    let counters = &before["counters"];
    let decision_seq = counters
        .project(&["name".into(), "value".into()])
        .into_iter()
        .find(|row| row[0].as_deref() == Some("decision_seq"))
        .and_then(|row| row[1].clone())
        .expect("the release's decision_seq counter")
        .parse::<i64>()
        .unwrap();
    let floors = [
        ("decisions", decision_seq.max(highest("decisions"))),
        ("agents", highest("agents")),
        ("mandates", highest("mandates")),
        ("events", highest("events")),
        ("webhooks", highest("webhooks")),
    ];
    let org_counters = after
        .get("org_counters")
        .expect("the conversion's org_counters table");
    let values = org_counters.project(&["org_id".into(), "name".into(), "value".into()]);
    for org in org_ids {
        for (name, floor) in floors {
            let value: i64 = values
                .iter()
                .find(|r| r[0].as_deref() == Some(*org) && r[1].as_deref() == Some(name))
                .and_then(|r| r[2].as_deref())
                .unwrap_or_else(|| panic!("no org_counters row ({org}, {name})"))
                .parse()
                .unwrap();
            assert!(
                value >= floor,
                "org_counters ({org}, {name}) = {value}, below the release's {floor}"
            );
        }
    }
}
