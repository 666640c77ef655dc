//! A log that never skips (docs/exports.md): three processes on one database decide under
//! concurrent load while an incremental exporter (each export resumed with `after` the last
//! decision it received) and a cursor walker (each walk from the newest down to the newest
//! of its previous walk) read the log in a loop through all three. At the end each of them
//! has seen every decision answered 201, and none twice.
//!
//! With a decision's seq taken when its row is inserted rather than in commit order, a
//! decision can become visible after one with a higher seq: both readers then skip it, and
//! this test fails.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::Value;

use crate::deploy::{Backend, Http, mandate};
use crate::{deployment, on_each_backend};

/// How long the load runs.
const LOAD: Duration = Duration::from_secs(8);

/// Requests in flight at once.
const SENDERS: usize = 36;

/// Agents the senders share (each sender keeps to one agent and one process).
const AGENTS: usize = 18;

/// The ids of `ids` seen more than once, and the ids of `answered` not among `ids`.
fn twice_and_missing(ids: &[String], answered: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let mut counts = BTreeMap::<&str, usize>::new();
    for id in ids {
        *counts.entry(id).or_default() += 1;
    }
    let twice = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| (*id).to_owned())
        .collect();
    let missing = answered
        .iter()
        .filter(|id| !counts.contains_key(id.as_str()))
        .cloned()
        .collect();
    (twice, missing)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_incremental_exporter_and_a_cursor_walker_miss_no_decision_and_see_none_twice() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    // The readers poll fast: the organization key's rate is no limit here.
    deployment.operator(&["set-rate", &org.sandbox, "--per-second", "100000"]);
    let procs = Arc::new(deployment.serve_n(3));
    let http = Http::default();
    let mut keys = Vec::new();
    for a in 0..AGENTS {
        let name = format!("log{a}");
        let api = &procs[a % 3].api;
        keys.push(http.agent(api, &org.sandbox, &name).await);
        http.mandate(api, &org.sandbox, &mandate(&name, "100", "100000000", None))
            .await;
    }
    let stop = Arc::new(AtomicBool::new(false));

    // The load: each sender sends one request after another for its agent to one process;
    // what is answered 201 is a committed decision (denials included).
    let senders = (0..SENDERS).map(|s| {
        let (http, procs, key) = (http.clone(), procs.clone(), keys[s % AGENTS].clone());
        tokio::spawn(async move {
            let api = procs[(s % AGENTS) % 3].api.clone();
            let until = Instant::now() + LOAD;
            let mut answered = Vec::new();
            while Instant::now() < until {
                let r = http.authorize(&api, &key, "1", "software").await;
                match r.status {
                    201 => answered.push(r.body["id"].as_str().unwrap().to_owned()),
                    429 => tokio::time::sleep(Duration::from_millis(20)).await,
                    _ => panic!("{}: {}", r.status, r.text),
                }
            }
            answered
        })
    });

    // The incremental exporter: each round on the next process, after the last decision
    // it received. A round that starts once the load has stopped is the last.
    let exporter = {
        let (http, procs, key, stop) = (
            http.clone(),
            procs.clone(),
            org.sandbox.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let (mut seen, mut after, mut rounds) = (Vec::<String>::new(), None::<String>, 0);
            loop {
                let last = stop.load(Ordering::SeqCst);
                let path = match &after {
                    Some(id) => format!("/v1/exports/decisions?after={id}"),
                    None => "/v1/exports/decisions".to_owned(),
                };
                let r = http.get(&procs[rounds % 3].api, &key, &path).await;
                assert_eq!(r.status, 200, "{}", r.text);
                for line in r.text.lines() {
                    let d: Value = serde_json::from_str(line).unwrap();
                    seen.push(d["id"].as_str().unwrap().to_owned());
                }
                after = seen.last().cloned().or(after);
                rounds += 1;
                if last {
                    return (seen, rounds);
                }
            }
        })
    };

    // The cursor walker: from the newest decision down, page by page, to the newest one
    // of its previous walk, each walk on the next process.
    let walker = {
        let (http, procs, key, stop) = (
            http.clone(),
            procs.clone(),
            org.sandbox.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let (mut seen, mut top, mut walks) = (Vec::<String>::new(), None::<String>, 0);
            loop {
                let last = stop.load(Ordering::SeqCst);
                let api = &procs[walks % 3].api;
                let (mut cursor, mut fresh) = (None::<String>, Vec::new());
                'walk: loop {
                    let path = match &cursor {
                        Some(c) => format!("/v1/decisions?limit=100&cursor={c}"),
                        None => "/v1/decisions?limit=100".to_owned(),
                    };
                    let page = http.get(api, &key, &path).await;
                    assert_eq!(page.status, 200, "{}", page.text);
                    for d in page.body["data"].as_array().unwrap() {
                        let id = d["id"].as_str().unwrap().to_owned();
                        if top.as_ref() == Some(&id) {
                            break 'walk;
                        }
                        fresh.push(id);
                    }
                    if page.body["has_more"] != true {
                        break;
                    }
                    cursor = Some(page.body["next_cursor"].as_str().unwrap().to_owned());
                }
                if let Some(newest) = fresh.first() {
                    top = Some(newest.clone());
                }
                seen.extend(fresh);
                walks += 1;
                if last {
                    return (seen, walks);
                }
            }
        })
    };

    let mut answered = BTreeSet::new();
    for ids in join_all(senders).await {
        answered.extend(ids.unwrap());
    }
    // Every sender has its answers: the readers' next rounds are their last.
    stop.store(true, Ordering::SeqCst);
    let (exported, rounds) = exporter.await.unwrap();
    let (walked, walks) = walker.await.unwrap();
    assert!(answered.len() >= 200, "too little load: {}", answered.len());
    assert!(rounds >= 5 && walks >= 5, "{rounds} exports, {walks} walks");
    eprintln!(
        "{} decisions answered 201; {rounds} incremental exports; {walks} cursor walks",
        answered.len()
    );
    for (reader, seen) in [
        ("incremental exporter", &exported),
        ("cursor walker", &walked),
    ] {
        let (twice, missing) = twice_and_missing(seen, &answered);
        assert!(
            twice.is_empty() && missing.is_empty(),
            "the {reader} saw {} decisions of {} answered 201: {} missing {:?}, {} seen twice {:?}",
            seen.len(),
            answered.len(),
            missing.len(),
            missing.iter().take(5).collect::<Vec<_>>(),
            twice.len(),
            twice.iter().take(5).collect::<Vec<_>>(),
        );
        assert_eq!(seen.len(), answered.len(), "the {reader} saw nothing else");
    }
}

on_each_backend!(two_processes_deciding_in_one_organization_log_every_decision);

/// Two processes deciding in one organization leave its log to each other whenever the
/// other signed it within the interval (on PostgreSQL, whose rounds serve many logs at
/// once, and on Citus, one log at a time): every decision is still logged, within a few
/// intervals of the last, whichever process made it and whichever stops deciding first.
async fn two_processes_deciding_in_one_organization_log_every_decision(backend: Backend) {
    let deployment = deployment!(backend);
    let org = deployment.onboard("acme");
    let procs = deployment.serve_n(2);
    let http = Http::default();
    let mut keys = Vec::new();
    for (p, name) in ["left0", "left1"].iter().enumerate() {
        let api = &procs[p].api;
        keys.push(http.agent(api, &org.sandbox, name).await);
        http.mandate(api, &org.sandbox, &mandate(name, "100", "100000000", None))
            .await;
    }
    // Both decide for a while, then only the first: the second's last decisions were left
    // to the first, or are logged by it.
    let mut answered = Vec::new();
    for round in 0..40 {
        for p in 0..2 {
            if round >= 30 && p == 1 {
                continue;
            }
            let r = http
                .authorize(&procs[p].api, &keys[p], "1", "software")
                .await;
            assert_eq!(r.status, 201, "{}", r.text);
            answered.push(r.body["id"].as_str().unwrap().to_owned());
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = http
            .get(&procs[1].api, &org.sandbox, "/v1/exports/decisions")
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let lines: Vec<Value> = r
            .text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let unlogged: Vec<&str> = lines
            .iter()
            .filter(|d| d["log"].is_null())
            .map(|d| d["id"].as_str().unwrap())
            .collect();
        if unlogged.is_empty() {
            let ids: BTreeSet<String> = lines
                .iter()
                .map(|d| d["id"].as_str().unwrap().to_owned())
                .collect();
            assert!(answered.iter().all(|id| ids.contains(id)));
            // Each at its place: the leaves' indexes are the export's order.
            for (i, d) in lines.iter().enumerate() {
                assert_eq!(d["log"]["index"].as_u64(), Some(i as u64), "{d}");
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} decisions not logged: {unlogged:?}",
            unlogged.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
