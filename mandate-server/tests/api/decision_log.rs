//! The decision log (docs/audit.md) against the real server: the log keys in the JWK Set,
//! `log` on decision reads, lists and export lines, the export's checkpoint header, each
//! proof checked with the core's verifier against the published keys, one log per
//! organization and environment.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mandate_core::{LogEntry, LogKeys};
use mandate_protocol::tlog::{AuditLeaf, AuditState};
use serde_json::Value;

use crate::helpers::{TestApp, spawn_app, spawn_app_with};

impl TestApp {
    /// The published JWK Set as served.
    async fn jwks_bytes(&self) -> Vec<u8> {
        let url = format!("{}/.well-known/jwks.json", self.public);
        let r = self.client.get(url).send().await.unwrap();
        r.bytes().await.unwrap().to_vec()
    }

    /// Reads decision `id` until its `log` is there (bounded: 10 s).
    async fn logged(&self, key: &str, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.get(key, &format!("/v1/decisions/{id}")).await;
            assert_eq!(r.status, 200, "{}", r.text);
            if !r.body["log"].is_null() {
                return r.body;
            }
            assert!(Instant::now() < deadline, "{id} not logged: {}", r.text);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The log's name for the app's organization `org` in `env`.
fn origin(app: &TestApp, org: &str, env: &str) -> String {
    let issuer = app.issuer();
    let host = issuer.split_once("://").unwrap().1;
    format!("{host}/log/{}/{env}", app.org_id(org))
}

fn entry(decision: &Value) -> LogEntry {
    serde_json::from_value(decision["log"].clone()).unwrap()
}

#[mandate_test_macros::on_each_engine]
async fn every_decision_read_proves_its_place_in_the_log() {
    let app = spawn_app().await;
    let agent = app.standard_agent(&app.org.live, "ada").await;
    let mut ids = Vec::new();
    for (amount, category) in [("10", "software"), ("60", "software"), ("5", "food")] {
        let r = app.authorize(&agent, amount, category).await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.push(r.body["id"].as_str().unwrap().to_owned());
    }
    let last = app.logged(&app.org.live, &ids[2]).await;
    let jwks = app.jwks_bytes().await;
    let keys = LogKeys::from_jwks_json(&jwks).unwrap();
    assert_eq!(
        mandate_protocol::tlog::keys_of(&keys).len(),
        2,
        "a log key per environment"
    );
    // The verdict keys are still read as they were: the log keys are skipped.
    assert!(
        app.jwks()
            .await
            .keys
            .iter()
            .all(|k| !k.kid().starts_with("log-"))
    );
    let origin = origin(&app, "acme", "live");
    for (index, id) in ids.iter().enumerate() {
        let read = app.get(&app.org.live, &format!("/v1/decisions/{id}")).await;
        let log = entry(&read.body);
        assert_eq!(log.index, index as u64);
        let token = read.body["verdict_token"].as_str().unwrap();
        let checkpoint = log.verify(token, &keys).unwrap();
        assert_eq!(checkpoint.origin(), origin);
        assert!(checkpoint.size() >= 3);
        // Another decision's token is not at this index.
        let other = last["verdict_token"].as_str().unwrap();
        if index != 2 {
            assert!(log.verify(other, &keys).is_err());
        }
    }
    // The list's items carry the same proofs.
    let list = app.get(&app.org.live, "/v1/decisions?limit=10").await;
    let items = list.body["data"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for item in items {
        let token = item["verdict_token"].as_str().unwrap();
        entry(item).verify(token, &keys).unwrap();
    }
    // The agent's own reads too.
    let own = app.get(&agent, &format!("/v1/decisions/{}", ids[0])).await;
    assert_eq!(entry(&own.body).index, 0);
}

#[mandate_test_macros::on_each_engine]
async fn the_export_carries_its_checkpoint_and_an_auditor_accepts_it() {
    let app = spawn_app().await;
    let agent = app.standard_agent(&app.org.live, "ada").await;
    let mut last = String::new();
    for i in 0..12 {
        let r = app
            .authorize(&agent, &format!("{}", i + 1), "software")
            .await;
        last = r.body["id"].as_str().unwrap().to_owned();
    }
    app.logged(&app.org.live, &last).await;
    let export = app.get(&app.org.live, "/v1/exports/decisions").await;
    assert_eq!(export.status, 200, "{}", export.text);
    let header = export.header("mandate-log-checkpoint").unwrap();
    let note = String::from_utf8(STANDARD.decode(header).unwrap()).unwrap();
    let keys = LogKeys::from_jwks_json(&app.jwks_bytes().await).unwrap();
    let checkpoint = keys.verify(&note).unwrap();
    assert_eq!(checkpoint.size(), 12);
    let lines: Vec<Value> = export
        .text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 12);
    let mut leaves = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let log = entry(line);
        assert_eq!(
            (log.index, log.checkpoint.as_str()),
            (i as u64, note.as_str())
        );
        let token = line["verdict_token"].as_str().unwrap();
        leaves.push(AuditLeaf::token(token, Some(log)));
    }
    let audit = AuditState::new(origin(&app, "acme", "live"))
        .advance(&leaves, &note, &keys)
        .unwrap();
    assert_eq!(audit.size(), 12);
    // An incremental export after the last decision: no line, the same checkpoint.
    let after = app
        .get(
            &app.org.live,
            &format!("/v1/exports/decisions?after={last}"),
        )
        .await;
    assert_eq!(after.text, "");
    assert_eq!(after.header("mandate-log-checkpoint"), Some(header));
    assert_eq!(audit.advance(&[], &note, &keys).unwrap(), audit);
}

#[mandate_test_macros::on_each_engine]
async fn each_environment_and_organization_has_a_log_of_its_own() {
    let app = spawn_app().await;
    let other = app.onboard("globex").await;
    let live = app.standard_agent(&app.org.live, "ada").await;
    let sandbox = app.standard_agent(&app.org.sandbox, "ada").await;
    let globex = app.standard_agent(&other.live, "bob").await;
    app.authorize(&live, "1", "software").await;
    let s = app.authorize(&sandbox, "1", "software").await;
    let g = app.authorize(&globex, "1", "software").await;
    let keys = LogKeys::from_jwks_json(&app.jwks_bytes().await).unwrap();
    for (key, read, org, env) in [
        (&app.org.sandbox, &s, "acme", "sandbox"),
        (&other.live, &g, "globex", "live"),
    ] {
        let id = read.body["id"].as_str().unwrap();
        let logged = app.logged(key, id).await;
        let log = entry(&logged);
        assert_eq!(log.index, 0);
        let token = logged["verdict_token"].as_str().unwrap();
        let checkpoint = log.verify(token, &keys).unwrap();
        assert_eq!(
            (checkpoint.origin(), checkpoint.size()),
            (origin(&app, org, env).as_str(), 1)
        );
    }
}

#[mandate_test_macros::on_each_engine]
async fn before_a_checkpoint_covers_it_a_decision_reads_log_null() {
    let app = spawn_app_with(|c| c.log_checkpoint_interval = Duration::from_secs(600)).await;
    let agent = app.standard_agent(&app.org.live, "ada").await;
    let r = app.authorize(&agent, "10", "software").await;
    let id = r.body["id"].as_str().unwrap();
    let read = app.get(&app.org.live, &format!("/v1/decisions/{id}")).await;
    assert_eq!(read.status, 200);
    assert!(read.body.as_object().unwrap().contains_key("log"));
    assert!(read.body["log"].is_null());
    let export = app.get(&app.org.live, "/v1/exports/decisions").await;
    assert_eq!(export.header("mandate-log-checkpoint"), None);
    let line: Value = serde_json::from_str(export.text.lines().next().unwrap()).unwrap();
    assert!(line["log"].is_null());
}

/// A log with fewer decisions waiting than `--log-quiet-below` whose checkpoint was signed
/// within the last two intervals waits for a later round (here the server's clock stands
/// still, so it waits until the test moves it); one with as many waiting is extended at the
/// next round, and a log never signed is too.
#[mandate_test_macros::on_each_engine]
async fn a_quiet_log_waits_two_intervals_after_its_checkpoint_and_a_busier_one_does_not() {
    let app = spawn_app_with(|c| c.log_quiet_below = 4).await;
    let agent = app.standard_agent(&app.org.live, "quiet").await;
    let decide = async || {
        let r = app.authorize(&agent, "1", "software").await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body["id"].as_str().unwrap().to_owned()
    };
    // Never signed: logged at once.
    let first = decide().await;
    app.logged(&app.org.live, &first).await;
    // One waiting, the checkpoint signed now: rounds while the clock stands leave it waiting.
    let second = decide().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let read = app
        .get(&app.org.live, &format!("/v1/decisions/{second}"))
        .await;
    assert!(read.body["log"].is_null(), "{}", read.text);
    // Two intervals after the checkpoint it is logged.
    app.clock.advance(time::Duration::milliseconds(201));
    let logged = app.logged(&app.org.live, &second).await;
    assert_eq!(logged["log"]["index"], 1);
    // Four waiting (as many as the threshold), the clock still: logged without waiting.
    let mut busier = Vec::new();
    for _ in 0..4 {
        busier.push(decide().await);
    }
    for (i, id) in busier.iter().enumerate() {
        let logged = app.logged(&app.org.live, id).await;
        assert_eq!(logged["log"]["index"], 2 + i);
    }
}

/// The worker takes the leaf hash of each decision its own process made from memory, and
/// reads the rows of the others (here made before a restart, by a process whose worker
/// never ran) to rebuild their tokens: a log holding both kinds has every decision at its
/// place, each proof checking against the published keys and the auditor accepting it.
#[mandate_test_macros::on_each_engine]
async fn decisions_another_process_made_are_logged_from_their_rows() {
    let mut app = spawn_app_with(|c| c.log_checkpoint_interval = Duration::from_secs(600)).await;
    let agent = app.standard_agent(&app.org.live, "ada").await;
    let other = app.standard_agent(&app.org.sandbox, "sam").await;
    let mut ids = Vec::new();
    for amount in ["1", "2", "3"] {
        let r = app.authorize(&agent, amount, "software").await;
        ids.push(r.body["id"].as_str().unwrap().to_owned());
        // The sandbox's decisions sit between the live ones in the organization's seqs.
        let r = app.authorize(&other, amount, "software").await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // A new process (the worker at its default interval) has none of them in memory.
    app.restart().await;
    for amount in ["4", "5"] {
        let r = app.authorize(&agent, amount, "software").await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.push(r.body["id"].as_str().unwrap().to_owned());
    }
    app.logged(&app.org.live, &ids[4]).await;
    let keys = LogKeys::from_jwks_json(&app.jwks_bytes().await).unwrap();
    let export = app.get(&app.org.live, "/v1/exports/decisions").await;
    let mut leaves = Vec::new();
    for (i, line) in export.text.lines().enumerate() {
        let line: Value = serde_json::from_str(line).unwrap();
        assert_eq!(line["id"], ids[i].as_str());
        let log = entry(&line);
        assert_eq!(log.index, i as u64, "{line}");
        let token = line["verdict_token"].as_str().unwrap();
        log.verify(token, &keys).unwrap();
        leaves.push(AuditLeaf::token(token, Some(log)));
    }
    let first: Value = serde_json::from_str(export.text.lines().next().unwrap()).unwrap();
    let note = entry(&first).checkpoint;
    let audit = AuditState::new(origin(&app, "acme", "live"))
        .advance(&leaves, &note, &keys)
        .unwrap();
    assert_eq!(audit.size(), 5);
}

/// Decisions committed side by side by many agents (on PostgreSQL by several writers, whose
/// groups commit out of seq order) while the checkpoint worker runs every 100 ms: each is
/// logged exactly once, at its place in seq order. The worker reads only up to the
/// organization's watermark, so none committed below a seq it already passed is skipped
/// (a skipped one would stay `log: null` and shift every index after it).
#[mandate_test_macros::on_each_engine]
async fn decisions_committed_side_by_side_are_each_logged_at_their_place() {
    let app = spawn_app().await;
    let mut agents = Vec::new();
    for i in 0..8 {
        agents.push(app.standard_agent(&app.org.live, &format!("a{i}")).await);
    }
    futures_util::future::join_all(agents.iter().map(|agent| async {
        for _ in 0..25 {
            let r = app.authorize(agent, "1", "software").await;
            assert_eq!(r.status, 201, "{}", r.text);
        }
    }))
    .await;
    let keys = LogKeys::from_jwks_json(&app.jwks_bytes().await).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let lines = loop {
        let export = app.get(&app.org.live, "/v1/exports/decisions").await;
        assert_eq!(export.status, 200, "{}", export.text);
        let lines: Vec<Value> = export
            .text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 200);
        if lines.iter().all(|line| !line["log"].is_null()) {
            break lines;
        }
        let unlogged = lines.iter().filter(|l| l["log"].is_null()).count();
        assert!(
            Instant::now() < deadline,
            "{unlogged} of 200 decisions not logged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut leaves = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let log = entry(line);
        assert_eq!(log.index, i as u64, "{line}");
        let token = line["verdict_token"].as_str().unwrap();
        log.verify(token, &keys).unwrap();
        leaves.push(AuditLeaf::token(token, Some(log)));
    }
    let note = entry(&lines[0]).checkpoint;
    let audit = AuditState::new(origin(&app, "acme", "live"))
        .advance(&leaves, &note, &keys)
        .unwrap();
    assert_eq!(audit.size(), 200);
}

/// An organization deciding more than a batch an interval: once a round's batch comes back
/// full the worker starts the next round at once, so the log catches up within about one
/// interval instead of one interval a batch (here 30 decisions, batches of 2, 3 s apart:
/// 45 s waiting an interval between batches).
#[mandate_test_macros::on_each_engine]
async fn a_log_behind_by_many_batches_catches_up_without_waiting_an_interval_each() {
    let app = spawn_app_with(|c| {
        c.log_checkpoint_interval = Duration::from_secs(3);
        c.log_checkpoint_batch = 2;
    })
    .await;
    let mut agents = Vec::new();
    for i in 0..3 {
        agents.push(app.standard_agent(&app.org.live, &format!("b{i}")).await);
    }
    for agent in &agents {
        for _ in 0..10 {
            let r = app.authorize(agent, "1", "software").await;
            assert_eq!(r.status, 201, "{}", r.text);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        let export = app.get(&app.org.live, "/v1/exports/decisions").await;
        assert_eq!(export.status, 200, "{}", export.text);
        let unlogged = export
            .text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|line| line["log"].is_null())
            .count();
        if unlogged == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{unlogged} of 30 decisions still not logged 12 s after the last"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The consistency proofs the checkpoint worker sends witnesses (`LogStore::log_consistency`,
/// read from the stored tiles): from every smaller size to the log's, each checked with the
/// core's verifier against the roots of the trees of the exported tokens; a size above the
/// log's is refused.
#[mandate_test_macros::on_each_engine]
async fn consistency_proofs_from_the_stored_tiles_prove_each_older_tree() {
    use mandate_protocol::tlog::{self, TreeEdge, verify_consistency};

    let app = spawn_app().await;
    let agent = app.standard_agent(&app.org.live, "ada").await;
    let mut last = String::new();
    for i in 0..13 {
        let r = app
            .authorize(&agent, &format!("{}", i + 1), "software")
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        last = r.body["id"].as_str().unwrap().to_owned();
    }
    let logged = app.logged(&app.org.live, &last).await;
    assert_eq!(entry(&logged).index, 12);
    let export = app.get(&app.org.live, "/v1/exports/decisions").await;
    let mut edge = TreeEdge::new();
    let mut roots = vec![edge.root()];
    for line in export.text.lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let token = line["verdict_token"].as_str().unwrap();
        edge.push(tlog::leaf_hash(token.as_bytes())).unwrap();
        roots.push(edge.root());
    }
    assert_eq!(roots.len(), 14);
    let store = &app.running.as_ref().unwrap().state.store;
    let org = app.org_id("acme");
    let env = mandate_server::model::Env::Live;
    for old in 1..=13u64 {
        let proof = store.log_consistency(&org, env, old, 13).await.unwrap();
        verify_consistency(old, &roots[old as usize], 13, &roots[13], &proof)
            .unwrap_or_else(|e| panic!("from {old}: {e}"));
    }
    assert!(store.log_consistency(&org, env, 5, 14).await.is_err());
}

/// The logs of many organizations, left to a new process's worker (which finds them in
/// one sweep): each is extended and its checkpoint shown. On PostgreSQL the round serves
/// them all at once: its appends are one transaction, its checkpoints shown in another,
/// so the transactions that write (each takes a transaction id) stay a few whatever the
/// number of logs; a round of one log at a time writes two for each log.
#[mandate_test_macros::on_each_engine]
async fn a_round_over_many_organizations_logs_writes_each_in_a_few_transactions() {
    const ORGS: usize = 24;
    let mut app = spawn_app_with(|c| c.log_checkpoint_interval = Duration::from_secs(600)).await;
    let mut decided = Vec::new();
    for i in 0..ORGS {
        let org = app.onboard(&format!("org{i}")).await;
        let agent = app.standard_agent(&org.live, "ada").await;
        let r = app.authorize(&agent, "1", "software").await;
        assert_eq!(r.status, 201, "{}", r.text);
        decided.push((org.live.clone(), r.body["id"].as_str().unwrap().to_owned()));
    }
    let next_xid = |app: &TestApp| {
        app.db.query_i64(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::BIGINT",
            &[],
        )
    };
    let before = crate::engine::postgres().then(|| next_xid(&app));
    app.restart().await;
    for (key, id) in &decided {
        let logged = app.logged(key, id).await;
        assert_eq!(entry(&logged).index, 0);
    }
    if let Some(before) = before {
        // The transactions whose rows the log's tables now hold, counted by the rows' own
        // transaction ids (xmin) in this database: the cluster's counter of ids also
        // moves for the tests running beside this one on other databases.
        let before = (before % (1 << 32)).to_string();
        let written = app.db.query_i64(
            "SELECT count(DISTINCT x) FROM (
                 SELECT xmin::text::BIGINT AS x FROM log_heads
                 UNION ALL SELECT xmin::text::BIGINT FROM log_strips
                 UNION ALL SELECT xmin::text::BIGINT FROM log_entries
                 UNION ALL SELECT xmin::text::BIGINT FROM log_tiles) AS t
             WHERE x >= $1::text::BIGINT",
            &[&before],
        );
        assert!(
            written < ORGS as i64,
            "{written} transactions hold the rows of the {ORGS} logs extended and shown"
        );
    }
}
