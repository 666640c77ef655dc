//! Tests of the decisions' SQL: hints, the indexes each read uses, and reads by agent
//! across buckets against a full scan.

#![allow(clippy::unwrap_used)]

use super::*;
use mandate_core::{Category, Currency, Mode, Nonce, Recipient};
use mandate_storage::engine::Stmt;
use mandate_storage::statements::EventSql;

/// A decision appended as a request without a hint.
fn insert(tx: &Connection, org: &str, env: Env, d: &Decision) -> Result<(), StorageError> {
    insert_with(tx, org, env, d, AgentHint::default()).map_err(crate::sqlite_error)
}

/// A page of decisions, newest first, strictly before seq `before`.
fn page(
    tx: &Connection,
    org: &str,
    env: Env,
    filters: &Filters,
    before: i64,
    limit: i64,
) -> Result<Vec<(i64, Decision)>, StorageError> {
    let order = Order::NewestFirst;
    filtered(tx, org, env, filters, i64::MIN, before, order, limit)
}

/// Up to `limit` decisions, oldest first, with seq in (`after`, `upto`].
#[allow(clippy::too_many_arguments)]
fn export_page(
    tx: &Connection,
    org: &str,
    env: Env,
    filters: &Filters,
    after: i64,
    upto: i64,
    limit: i64,
) -> Result<Vec<(i64, Decision)>, StorageError> {
    let order = Order::OldestFirst;
    filtered(tx, org, env, filters, after, upto + 1, order, limit)
}

fn stored(agent: &AgentId, n: u8, created_ms: i64) -> Decision {
    use mandate_core::{AuthorizationRequest, VerdictClaims};
    Decision {
        claims: VerdictClaims {
            bindings: mandate_core::Bindings::default(),
            iss: "http://127.0.0.1".into(),
            jti: DecisionId::from_random([n; 16]),
            iat: created_ms / 1000,
            exp: created_ms / 1000 + 300,
            verdict: Verdict::Allow,
            policy_verdict: Verdict::Allow,
            mandate: None,
            policy_version: "pol_2026-11-22.1".into(),
            nonce: Nonce::from_random([n.wrapping_add(100); 16]),
            request: AuthorizationRequest {
                agent: agent.clone(),
                amount: Amount::parse("1.00").unwrap(),
                currency: Currency::parse("USD").unwrap(),
                recipient: Recipient::parse("vendor:acme").unwrap(),
                category: Category::parse("software").unwrap(),
            },
        },
        reason: None,
        mode: Mode::Enforce,
        supersedes: None,
        review: None,
        created_ms,
        is_request: true,
        review_state: None,
        signature: None,
    }
}

/// A decision stored with what its agent's cached state knows (its key, its month
/// already marked) is keyed and marked like one stored without; a new month is
/// marked even when an older one is known; and a month the hint calls marked is not
/// probed at all (the lookup it saves is real).
#[test]
fn a_hint_saves_lookups_and_stores_the_same_keys_and_marks() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::Db::open(&dir.path().join("hint.db")).unwrap();
    let (a, b) = (
        AgentId::parse("agt_alpha").unwrap(),
        AgentId::parse("agt_beta").unwrap(),
    );
    let nov = 1_795_305_600_000; // 2026-11-22
    let dec = 1_796_083_200_000; // 2026-12-01
    let (seq_a, rows, months) = db
        .write_blocking(|tx| -> Result<_, StorageError> {
            tx.execute(
                "INSERT INTO orgs (id, name, policy_version, created_ms)
                 VALUES ('org_1', 'o', 'pol_1', 0)",
                [],
            )
            .map_err(crate::sqlite_error)?;
            for agent in [&a, &b] {
                tx.execute(
                    "INSERT INTO agents (id, org_id, env, created_ms)
                     VALUES (?1, 'org_1', 'live', 0)",
                    [agent.as_str()],
                )
                .map_err(crate::sqlite_error)?;
            }
            let seq_a = agent_seq(tx, "org_1", Env::Live, a.as_str())
                .map_err(crate::sqlite_error)?
                .unwrap();
            insert(tx, "org_1", Env::Live, &stored(&a, 1, nov))?;
            let known = AgentHint {
                seq: Some(seq_a),
                month_marked: Some(month_index(nov)),
                version: 0,
            };
            insert_with(tx, "org_1", Env::Live, &stored(&a, 2, nov + 1), known)
                .map_err(crate::sqlite_error)?;
            insert_with(tx, "org_1", Env::Live, &stored(&a, 3, dec), known)
                .map_err(crate::sqlite_error)?;
            // Agent b has no row for November; a hint that says it has is trusted.
            let wrong = AgentHint {
                seq: agent_seq(tx, "org_1", Env::Live, b.as_str()).map_err(crate::sqlite_error)?,
                month_marked: Some(month_index(nov)),
                version: 0,
            };
            insert_with(tx, "org_1", Env::Live, &stored(&b, 4, nov), wrong)
                .map_err(crate::sqlite_error)?;
            let rows: Vec<(i64, String, i64)> = tx
                .prepare(
                    "SELECT d.seq, a.id, d.agent_seq FROM decisions d
                     JOIN agents a ON a.seq = d.agent_seq ORDER BY d.seq",
                )
                .map_err(crate::sqlite_error)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(crate::sqlite_error)?
                .collect::<rusqlite::Result<_>>()
                .map_err(crate::sqlite_error)?;
            let months: Vec<(String, i64, i64)> = tx
                .prepare(
                    "SELECT agent_id, month, first_seq FROM decision_months
                     ORDER BY agent_id, month",
                )
                .map_err(crate::sqlite_error)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(crate::sqlite_error)?
                .collect::<rusqlite::Result<_>>()
                .map_err(crate::sqlite_error)?;
            Ok((seq_a, rows, months))
        })
        .unwrap();
    let seq_b = seq_a + 1;
    let ids: Vec<_> = rows
        .iter()
        .map(|(_, id, key)| (id.as_str(), *key))
        .collect();
    assert_eq!(
        ids,
        [
            (a.as_str(), seq_a),
            (a.as_str(), seq_a),
            (a.as_str(), seq_a),
            (b.as_str(), seq_b)
        ]
    );
    assert_eq!(
        months,
        [
            (a.to_string(), month_index(nov), rows[0].0),
            (a.to_string(), month_index(dec), rows[2].0),
        ],
        "a's November from its first decision, December from its third, none for b"
    );
}

/// A list or export filtered by agent walks the agent's index, whichever way it goes;
/// unfiltered, the environment's.
#[test]
fn filtered_reads_use_the_index_of_what_they_filter_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::Db::open(&dir.path().join("plan.db")).unwrap();
    let plan = |sql: String| -> String {
        db.write_blocking(|tx| -> Result<String, StorageError> {
            use rusqlite::types::Value;
            let mut stmt = tx
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .map_err(crate::sqlite_error)?;
            let values = [
                Value::Text("org_1".into()),
                Value::Text("sandbox".into()),
                Value::Text("x_1".into()),
                Value::Null,
                Value::Null,
                Value::Integer(0),
                Value::Integer(10),
                Value::Integer(50),
                Value::Integer(5),
            ];
            let count = stmt.parameter_count();
            let rows = stmt
                .query_map(
                    rusqlite::params_from_iter(values.into_iter().take(count)),
                    |r| r.get::<_, String>(3),
                )
                .map_err(crate::sqlite_error)?;
            Ok(rows
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(crate::sqlite_error)?
                .join("; "))
        })
        .unwrap()
    };
    for order in [Order::NewestFirst, Order::OldestFirst] {
        let by_agent = plan(by_agent_sql(order));
        assert!(
            by_agent.contains("decisions_by_agent (<expr>=? AND agent_seq=? AND seq>? AND seq<?)"),
            "{by_agent}"
        );
        assert!(!by_agent.contains("TEMP B-TREE"), "{by_agent}");
        let by_env = plan(by_env_sql(order));
        assert!(by_env.contains("decisions_by_env"), "{by_env}");
        assert!(!by_env.contains("TEMP B-TREE"), "{by_env}");
    }
    // Rebuilding an agent's state reads through its index too, one bucket a seek.
    for sql in [recent_request_times_sql(), allowed_since_sql()] {
        let by_agent = plan(sql);
        assert!(
            by_agent.contains("decisions_by_agent (<expr>=? AND agent_seq=?"),
            "{by_agent}"
        );
        assert!(!by_agent.contains("TEMP B-TREE"), "{by_agent}");
    }
    let page = Stmt::from(EventSql::Page { by_type: true });
    let by_type = plan(crate::statements::sql(page).unwrap()[0].to_string());
    assert!(by_type.contains("events_by_type"), "{by_type}");
}

/// The index's bucket expression is the one the queries use.
#[test]
fn the_queries_use_the_migrations_bucket_expression() {
    let migration = include_str!("../../migrations/0006_agent_index_by_range.sql");
    assert!(migration.contains(&format!(
        "ON decisions (seq >> {BUCKET_BITS}, agent_seq, seq)"
    )));
    assert_eq!(BUCKET, format!("(seq >> {BUCKET_BITS})"));
}

/// One stored decision of the random histories below.
#[derive(Debug, Clone)]
struct Step {
    /// Agent 0 or 1 (both read), or a jump: `gap` decisions' worth of seqs skipped.
    agent: usize,
    gap: i64,
    verdict: Verdict,
    is_request: bool,
    /// Mandate 0 or 1 of the agent.
    mandate: usize,
    cents: u32,
    /// Minutes after the start of the history.
    minute: i64,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    (
        0usize..3,
        prop_oneof![Just(0i64), 1i64..4 << BUCKET_BITS],
        prop_oneof![
            Just(Verdict::Allow),
            Just(Verdict::Review),
            Just(Verdict::DenyCategory)
        ],
        any::<bool>(),
        0usize..2,
        1u32..100_000,
        0i64..90 * 24 * 60,
    )
        .prop_map(
            |(agent, gap, verdict, is_request, mandate, cents, minute)| Step {
                agent,
                gap: if agent == 2 { gap } else { 0 },
                verdict,
                is_request,
                mandate,
                cents,
                minute,
            },
        )
}

/// The history of `steps` stored for `agents` (a spacer's decisions between theirs), from
/// `start` on, with the seq gaps the steps ask for.
fn seed(
    tx: &Connection,
    steps: &[Step],
    agents: &[AgentId; 2],
    start: i64,
) -> Result<(), StorageError> {
    tx.execute(
        "INSERT INTO orgs (id, name, policy_version, created_ms)
         VALUES ('org_1', 'o', 'pol_1', 0)",
        [],
    )
    .map_err(crate::sqlite_error)?;
    // Every decision's agent exists (decisions.agent_seq is NOT NULL), the spacer too.
    let spacer = AgentId::parse("agt_spacer").unwrap();
    for agent in agents.iter().chain([&spacer]) {
        tx.execute(
            "INSERT INTO agents (id, org_id, env, created_ms)
             VALUES (?1, 'org_1', 'live', 0)",
            [agent.as_str()],
        )
        .map_err(crate::sqlite_error)?;
    }
    for (n, s) in steps.iter().enumerate() {
        let created_ms = start + s.minute * 60_000;
        let agent = agents.get(s.agent).unwrap_or(&spacer);
        let mut d = stored(agent, 0, created_ms);
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&(n as u64).to_be_bytes());
        d.claims.jti = DecisionId::from_random(id);
        d.claims.verdict = s.verdict;
        d.claims.policy_verdict = s.verdict;
        d.is_request = s.is_request;
        d.claims.mandate = Some(MandateId::parse(&format!("mnd_m{}", s.mandate)).unwrap());
        d.claims.request.amount =
            Amount::parse(&format!("{}.{:02}", s.cents / 100, s.cents % 100)).unwrap();
        insert(tx, "org_1", Env::Live, &d)?;
        if s.gap > 0 {
            // The next decision starts `gap` seqs later.
            tx.execute(
                "UPDATE decisions SET seq = seq + ?1 WHERE seq = last_insert_rowid()",
                [s.gap],
            )
            .map_err(crate::sqlite_error)?;
        }
    }
    Ok(())
}

/// One read and what a scan of the whole table finds instead: (what, got, wanted).
type Check = (&'static str, String, String);

/// The seqs of `agent`'s decisions by a scan of the whole table, with `extra` conditions.
fn full(tx: &Connection, agent: &str, extra: &str, order: &str) -> Result<Vec<i64>, StorageError> {
    tx.prepare(&format!(
        "SELECT seq FROM decisions NOT INDEXED
             WHERE scope = (SELECT key FROM decision_scopes WHERE org_id = 'org_1' AND env = 'live')
               AND agent_seq = (SELECT seq FROM agents WHERE id = ?1) {extra}
             ORDER BY seq {order}"
    ))
    .map_err(crate::sqlite_error)?
    .query_map([agent], |r| r.get(0))
    .map_err(crate::sqlite_error)?
    .collect::<rusqlite::Result<_>>()
    .map_err(crate::sqlite_error)
}

/// A page and an export page of `agent`'s decisions from a cursor position, by verdict,
/// against the scan.
fn pages_and_exports(
    tx: &Connection,
    agent: &AgentId,
    cut: usize,
    limit: i64,
) -> Result<Vec<Check>, StorageError> {
    let mut checks = Vec::new();
    let all = full(tx, agent.as_str(), "", "DESC")?;
    // A cursor position: one of the agent's seqs, or past the end.
    let before = all.get(cut % (all.len() + 1)).copied().unwrap_or(i64::MAX);
    for verdict in [None, Some(Verdict::Allow), Some(Verdict::Review)] {
        let filters = Filters {
            agent: Some(agent.to_string()),
            verdict,
            policy_verdict: None,
            review_status: None,
        };
        let extra = verdict
            .map(|v| format!("AND verdict = '{}'", v.as_str()))
            .unwrap_or_default();
        let older = format!("{extra} AND seq < {before}");
        let want: Vec<i64> = full(tx, agent.as_str(), &older, "DESC")?
            .into_iter()
            .take(limit as usize)
            .collect();
        let got: Vec<i64> = page(tx, "org_1", Env::Live, &filters, before, limit)?
            .into_iter()
            .map(|(seq, _)| seq)
            .collect();
        checks.push(("page", format!("{got:?}"), format!("{want:?}")));
        let after = if before == i64::MAX { 0 } else { before };
        let upto = last_seq(tx).map_err(crate::sqlite_error)?;
        let newer = format!("{extra} AND seq > {after}");
        let want: Vec<i64> = full(tx, agent.as_str(), &newer, "ASC")?
            .into_iter()
            .take(limit as usize)
            .collect();
        let got: Vec<i64> = export_page(tx, "org_1", Env::Live, &filters, after, upto, limit)?
            .into_iter()
            .map(|(seq, _)| seq)
            .collect();
        checks.push(("export", format!("{got:?}"), format!("{want:?}")));
    }
    Ok(checks)
}

/// The velocity window's and the month-to-date's rebuilds of `agent`, against the scan.
fn rebuilds(
    tx: &Connection,
    agent: &AgentId,
    limit: i64,
    start: i64,
) -> Result<Vec<Check>, StorageError> {
    let mut checks = Vec::new();
    let mut want: Vec<i64> = tx
        .prepare(
            "SELECT created_ms FROM decisions NOT INDEXED
             WHERE agent_seq = (SELECT seq FROM agents WHERE id = ?1) AND is_request = 1
             ORDER BY seq DESC LIMIT ?2",
        )
        .map_err(crate::sqlite_error)?
        .query_map(params![agent.as_str(), limit], |r| r.get(0))
        .map_err(crate::sqlite_error)?
        .collect::<rusqlite::Result<_>>()
        .map_err(crate::sqlite_error)?;
    want.reverse();
    let got = recent_request_times(tx, "org_1", Env::Live, agent.as_str(), limit)?;
    checks.push(("velocity", format!("{got:?}"), format!("{want:?}")));
    let day = 24 * 60 * 60_000;
    for since in [start, start + 30 * day, start + 61 * day] {
        let want: Vec<(String, i64)> = tx
            .prepare(
                "SELECT amount, created_ms FROM decisions NOT INDEXED
                 WHERE agent_seq = (SELECT seq FROM agents WHERE id = ?1) AND mandate_id = 'mnd_m1'
                   AND verdict = 'allow' AND created_ms >= ?2 ORDER BY seq",
            )
            .map_err(crate::sqlite_error)?
            .query_map(params![agent.as_str(), since], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(crate::sqlite_error)?
            .collect::<rusqlite::Result<_>>()
            .map_err(crate::sqlite_error)?;
        let got: Vec<(String, i64)> =
            allowed_since(tx, "org_1", Env::Live, agent.as_str(), "mnd_m1", since)?
                .into_iter()
                .map(|(a, at)| (a.to_string(), at))
                .collect();
        checks.push(("month-to-date", format!("{got:?}"), format!("{want:?}")));
    }
    Ok(checks)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever buckets an agent's decisions fall in, every read by agent (pages,
    /// exports, the velocity and month-to-date rebuilds) finds exactly what a scan of
    /// the whole table finds, in the same order.
    #[test]
    fn reads_by_agent_across_buckets_match_a_full_scan(
        mut steps in proptest::collection::vec(step(), 1..60),
        limit in 1i64..12,
        cut in 0usize..60,
    ) {
        // Decisions are stored in time order, as the server stores them.
        steps.sort_by_key(|s| s.minute);
        let dir = tempfile::tempdir().unwrap();
        let db = crate::Db::open(&dir.path().join("buckets.db")).unwrap();
        let agents = [
            AgentId::parse("agt_zero").unwrap(),
            AgentId::parse("agt_one").unwrap(),
        ];
        let start = 1_788_220_800_000; // 2026-09-01
        let checks = db
            .write_blocking(|tx| -> Result<_, StorageError> {
                seed(tx, &steps, &agents, start)?;
                let mut checks = Vec::new();
                for agent in &agents {
                    checks.extend(pages_and_exports(tx, agent, cut, limit)?);
                    checks.extend(rebuilds(tx, agent, limit, start)?);
                }
                Ok(checks)
            })
            .unwrap();
        for (what, got, want) in checks {
            proptest::prop_assert_eq!(got, want, "{}", what);
        }
    }
}

/// A decision names its `iss` and policy version by a key of `decision_issuers`: the first
/// decision of a pair writes its row, later ones share it, and every decision reads back
/// the pair it was signed with (its token rebuilt from them byte for byte).
#[test]
fn issuers_and_policy_versions_are_keyed_once_and_read_back_as_signed() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::Db::open(&dir.path().join("issuers.db")).unwrap();
    let agent = AgentId::parse("agt_alpha").unwrap();
    let nov = 1_795_305_600_000; // 2026-11-22
    let signed = |n: u8, iss: &str, version: &str| {
        let mut d = stored(&agent, n, nov + i64::from(n));
        d.claims.iss = iss.into();
        d.claims.policy_version = version.into();
        d
    };
    let decisions = [
        signed(1, "https://a.example", "pol_1"),
        signed(2, "https://a.example", "pol_1"),
        signed(3, "https://a.example", "pol_2"),
        signed(4, "https://b.example", "pol_1"),
        signed(5, "https://a.example", "pol_2"),
    ];
    let (issuers, read) = db
        .write_blocking(|tx| -> Result<_, StorageError> {
            tx.execute(
                "INSERT INTO orgs (id, name, policy_version, created_ms)
                 VALUES ('org_1', 'o', 'pol_1', 0)",
                [],
            )
            .map_err(crate::sqlite_error)?;
            tx.execute(
                "INSERT INTO agents (id, org_id, env, created_ms)
                 VALUES (?1, 'org_1', 'live', 0)",
                [agent.as_str()],
            )
            .map_err(crate::sqlite_error)?;
            for d in &decisions {
                insert(tx, "org_1", Env::Live, d)?;
            }
            let issuers: i64 = tx
                .query_row("SELECT COUNT(*) FROM decision_issuers", [], |r| r.get(0))
                .map_err(crate::sqlite_error)?;
            let read = export_page(tx, "org_1", Env::Live, &Filters::default(), 0, 1_000, 10)?;
            Ok((issuers, read))
        })
        .unwrap();
    assert_eq!(issuers, 3);
    let pairs: Vec<(String, String)> = read
        .iter()
        .map(|(_, d)| (d.claims.iss.clone(), d.claims.policy_version.clone()))
        .collect();
    let want: Vec<(String, String)> = decisions
        .iter()
        .map(|d| (d.claims.iss.clone(), d.claims.policy_version.clone()))
        .collect();
    assert_eq!(pairs, want);
}
