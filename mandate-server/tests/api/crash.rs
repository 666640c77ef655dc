//! Crash safety under load: many agents send authorizations (each with its own
//! Idempotency-Key) while the real binary is killed with SIGKILL at a random moment, four
//! rounds in a row, restarting on the same database each time. Afterwards:
//!
//! - every decision a client was answered 201 for is stored, identical;
//! - `PRAGMA integrity_check` is ok, and each stored review verdict has its review and its
//!   `decision.review_pending` event (they were one transaction);
//! - each request cut by the kill, retried with the same key and body, is answered 201:
//!   either the replay of what was committed or its first execution; no key ever has more
//!   than one decision;
//! - the velocity window and month-to-date the restarted server judges with are those
//!   rebuilt from the stored decisions: its next verdict for every agent is what
//!   `mandate_core::evaluate` says given that history, and the month-to-date in
//!   its reasons is the sum of the stored `allow` amounts.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

use mandate_core::{
    AgentHistory, AgentId, Amount, AuthorizationRequest, Mandate, MandateDraft, MandateId,
    MandateStatus, Mode, evaluate,
};
use mandate_protocol::timefmt;
use reqwest::Method;
use serde_json::Value;

use crate::process::{Answer, Client, Server, free_port, onboard};

const ROUNDS: usize = 4;
/// Agents that send as fast as they are answered (mostly velocity denials after ten).
const FAST: usize = 8;
/// Agents that send one request a round, so that they stay under the velocity rule and
/// their month-to-date shows in the probe's reason.
const SLOW: usize = 8;

/// One request a client sent.
struct Sent {
    agent: usize,
    /// Idempotency-Key, also the recipient's name: one decision per key at most.
    tag: String,
    body: String,
    /// The answer, or `None` if the kill cut it.
    answer: Option<Answer>,
}

fn random(seed: &RandomState, n: u64) -> u64 {
    seed.hash_one(n)
}

fn mandate_body(name: &str) -> String {
    format!(
        r#"{{"agent": "agt_{name}", "limits": {{"per_transaction": 1000, "per_month": 1000, "currency": "USD"}},
            "categories": ["software"], "review_above": 40, "expires": "2099-12-31"}}"#
    )
}

fn request_body(tag: &str, cents: u64) -> String {
    format!(
        r#"{{"amount": {}.{:02}, "currency": "USD", "recipient": "vendor:{tag}", "category": "software"}}"#,
        1 + cents / 100 % 50,
        cents % 100
    )
}

/// Sends requests for `agent` until `quota` are done or the server is gone.
async fn load(
    client: Client,
    key: String,
    agent: usize,
    round: usize,
    quota: usize,
    delay: Duration,
    seed: RandomState,
) -> Vec<Sent> {
    tokio::time::sleep(delay).await;
    let mut sent = Vec::new();
    for n in 0..quota {
        let tag = format!("r{round}-a{agent}-n{n}");
        let body = request_body(
            &tag,
            random(&seed, (round * 100_000 + agent * 1000 + n) as u64),
        );
        let mut answer;
        loop {
            answer = client
                .send(
                    Method::POST,
                    &key,
                    "/v1/authorizations",
                    Some(&body),
                    Some(&tag),
                )
                .await
                .ok();
            // Over the key's rate (a fast server lets a fast agent reach it): the same
            // request again after the second the refusal names, as a client would.
            match &answer {
                Some(a) if a.status == 429 => tokio::time::sleep(Duration::from_secs(1)).await,
                _ => break,
            }
        }
        let cut = answer.is_none();
        sent.push(Sent {
            agent,
            tag,
            body,
            answer,
        });
        if cut {
            break;
        }
    }
    sent
}

/// The decision as the API returns it, from a 201 authorization response.
fn as_stored(response: &Value) -> Value {
    let mut expected = response.clone();
    // Its token is kept, byte for byte.
    let object = expected.as_object_mut().unwrap();
    // Read from the log, a decision that opened a review says where it stands (nobody
    // resolves one here) and when it expires.
    if let Some(review) = object.remove("review").filter(|r| r.is_object()) {
        object.insert("review_status".into(), review["status"].clone());
        object.insert("review_expires_at".into(), review["expires_at"].clone());
    }
    expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_minus_nine_under_load_loses_nothing_and_runs_each_key_once() {
    let started = Instant::now();
    let seed = RandomState::new();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let org = onboard(&db, "crashers");
    let public_port = free_port();
    let mut server = Server::start(&db, public_port, &[]);
    let client = Client::new(&server.api);

    let mut agents = Vec::new(); // (agent key, mandate)
    for i in 0..FAST + SLOW {
        let name = format!("agent{i}");
        let r = client
            .post(&org, "/v1/agents", &format!(r#"{{"name": "{name}"}}"#))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let key = r.body["agent_key"].as_str().unwrap().to_owned();
        let body = mandate_body(&name);
        let m = client.post(&org, "/v1/mandates", &body).await;
        assert_eq!(m.status, 201, "{}", m.text);
        let mandate = Mandate {
            id: MandateId::parse(m.body["id"].as_str().unwrap()).unwrap(),
            terms: MandateDraft::from_json(&serde_json::from_str(&body).unwrap()).unwrap(),
            status: MandateStatus::Active,
            created_at: timefmt::parse(m.body["created_at"].as_str().unwrap()).unwrap(),
        };
        agents.push((key, mandate));
    }

    let mut all: Vec<Sent> = Vec::new();
    let (mut cut, mut replayed, mut executed) = (0, 0, 0);
    for round in 0..ROUNDS {
        let client = Client::new(&server.api);
        let kill_after = Duration::from_millis(60 + random(&seed, round as u64) % 340);
        let tasks: Vec<_> = agents
            .iter()
            .enumerate()
            .map(|(i, (key, _))| {
                let (quota, delay) = if i < FAST {
                    (400, Duration::ZERO)
                } else {
                    (
                        1,
                        Duration::from_millis(random(&seed, (round * 64 + i) as u64) % 250),
                    )
                };
                tokio::spawn(load(
                    client.clone(),
                    key.clone(),
                    i,
                    round,
                    quota,
                    delay,
                    seed.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(kill_after).await;
        server.kill();
        let mut sent = Vec::new();
        for task in tasks {
            sent.extend(task.await.unwrap());
        }
        // Restart on the same database and retry what the kill cut, as a client would.
        server = Server::start(&db, public_port, &[]);
        let client = Client::new(&server.api);
        for s in sent.iter_mut().filter(|s| s.answer.is_none()) {
            cut += 1;
            let key = &agents[s.agent].0;
            let retry = client
                .send(
                    Method::POST,
                    key,
                    "/v1/authorizations",
                    Some(&s.body),
                    Some(&s.tag),
                )
                .await
                .unwrap();
            assert_eq!(retry.status, 201, "retry of {}: {}", s.tag, retry.text);
            if retry.replayed {
                replayed += 1;
            } else {
                executed += 1;
            }
            s.answer = Some(retry);
        }
        all.extend(sent);
    }
    let client = Client::new(&server.api);

    // The file is sound, and what belongs together was committed together.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let orphans: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM decisions d WHERE d.verdict = 'review' AND (
               (SELECT COUNT(*) FROM reviews r WHERE r.decision_id = d.id) != 1
               OR (SELECT COUNT(*) FROM events e WHERE e.type = 'decision.review_pending'
                   AND json_extract(e.data, '$.id') = d.id) != 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        orphans, 0,
        "a review decision lacks its review or its event"
    );
    let reviews_without_decision: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM reviews r WHERE NOT EXISTS (SELECT 1 FROM decisions d WHERE d.id = r.decision_id)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(reviews_without_decision, 0);
    drop(conn);

    // Every 201 is stored, identical; no key ran twice.
    let stored = client.walk(&org, "/v1/decisions").await;
    let by_id: HashMap<&str, &Value> = stored
        .iter()
        .map(|d| (d["id"].as_str().unwrap(), d))
        .collect();
    let mut per_tag: HashMap<&str, usize> = HashMap::new();
    for d in &stored {
        let recipient = d["request"]["recipient"].as_str().unwrap();
        *per_tag
            .entry(recipient.strip_prefix("vendor:").unwrap())
            .or_default() += 1;
    }
    for s in &all {
        let answer = s.answer.as_ref().unwrap();
        assert_eq!(answer.status, 201, "{}: {}", s.tag, answer.text);
        let id = answer.body["id"].as_str().unwrap();
        let got = by_id
            .get(id)
            .unwrap_or_else(|| panic!("decision {id} ({}) was lost", s.tag));
        let mut got = (*got).clone();
        got.as_object_mut().unwrap().remove("review");
        // Its place in the decision log is read beside it, not answered with it.
        got.as_object_mut().unwrap().remove("log");
        assert_eq!(got, as_stored(&answer.body), "decision {id} changed");
        assert_eq!(
            per_tag.get(s.tag.as_str()),
            Some(&1),
            "key {} ran more than once",
            s.tag
        );
    }
    assert!(
        per_tag.values().all(|&n| n == 1),
        "a key ran more than once"
    );
    assert_eq!(per_tag.len(), all.len(), "a decision no client asked for");

    // The restarted server judges with the history rebuilt from what is stored.
    let mut checked_sums = 0;
    for (i, (key, mandate)) in agents.iter().enumerate() {
        let agent = AgentId::parse(&format!("agt_agent{i}")).unwrap();
        let mut mine: Vec<&Value> = stored
            .iter()
            .filter(|d| d["request"]["agent"] == agent.as_str())
            .collect();
        mine.sort_by_key(|d| timefmt::parse(d["created_at"].as_str().unwrap()).unwrap());
        let body = r#"{"amount": 1000, "currency": "USD", "recipient": "vendor:probe", "category": "software"}"#;
        let probe = client.post(key, "/v1/authorizations", body).await;
        assert_eq!(probe.status, 201, "{}", probe.text);
        let now = timefmt::parse(probe.body["created_at"].as_str().unwrap()).unwrap();
        let mut history = AgentHistory::default();
        let mut sum = Amount::ZERO;
        for d in &mine {
            let at = timefmt::parse(d["created_at"].as_str().unwrap()).unwrap();
            mandate_protocol::history::velocity_mut(&mut history).record(at);
            if d["verdict"] == "allow" {
                let amount = Amount::parse(&d["request"]["amount"].to_string()).unwrap();
                mandate_protocol::history::spend_mut(&mut history).add(amount, at);
                sum = sum.checked_add(amount).unwrap();
            }
        }
        let request =
            AuthorizationRequest::from_json(agent.clone(), &serde_json::from_str(body).unwrap())
                .unwrap();
        let expected = evaluate(Some(mandate), &request, &history, Mode::Enforce, now);
        assert_eq!(
            probe.body["verdict"],
            expected.verdict.as_str(),
            "agent{i}: {}",
            probe.text
        );
        assert_eq!(
            probe.body["reason"].as_str(),
            expected.reason.map(|r| r.to_string()).as_deref(),
            "agent{i}"
        );
        if i >= FAST {
            // Under the velocity rule: the reason shows the month-to-date the server holds.
            assert!(mine.len() < 10, "agent{i} sent {} requests", mine.len());
            if sum != Amount::ZERO {
                assert_eq!(
                    probe.body["reason"].as_str().unwrap(),
                    format!(
                        "month-to-date spend {sum} plus amount 1000 exceeds per_month limit 1000"
                    )
                );
                checked_sums += 1;
            } else {
                // Nothing spent (every request of this agent was a review): 1000 fits
                // per_month exactly and is above review_above.
                assert_eq!(probe.body["verdict"], "review", "agent{i}: {}", probe.text);
            }
        }
    }
    eprintln!(
        "crash: {ROUNDS} rounds, {} requests, {cut} cut by kill -9 ({replayed} replayed, {executed} executed on retry), {} decisions stored, {checked_sums} month-to-date sums checked, {:.1} s",
        all.len(),
        stored.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(cut > 0, "no request was in flight at any kill");
    server.kill();
}

/// A request abandoned by its client (gone, or timed out) while it waits goes on to its
/// outcome, which a retry with its Idempotency-Key replays: one decision, never a key left
/// claimed until the next restart.
#[tokio::test]
async fn an_abandoned_request_goes_on_and_a_retry_replays_its_outcome() {
    let app = crate::helpers::spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "quitter").await;
    let state = app.running.as_ref().unwrap().state.clone();
    let org_id: String = rusqlite::Connection::open(&app.db_path)
        .unwrap()
        .query_row("SELECT id FROM orgs WHERE name = 'acme'", [], |r| r.get(0))
        .unwrap();
    // Hold the agent's lock, as a long request of the same agent would.
    let guard = state
        .agents
        .lock(
            state.store.as_ref(),
            &std::sync::Arc::from(org_id.as_str()),
            mandate_server::model::Env::Sandbox,
            &AgentId::parse("agt_quitter").unwrap(),
            app.clock_now(),
        )
        .await
        .unwrap();
    let body =
        r#"{"amount": 5, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gave_up = impatient
        .post(format!("{}/v1/authorizations", app.api))
        .header("authorization", format!("Bearer {agent}"))
        .header("content-type", "application/json")
        .header("idempotency-key", "patience")
        .body(body)
        .send()
        .await;
    assert!(gave_up.is_err(), "the request should have been waiting");
    // The request goes on without its client (its key claimed meanwhile: a retry is told
    // it is still being processed), decides once the lock is free, and stores its outcome:
    // the retry replays it. (Before issue #40 the abandoned request was dropped and its
    // claim released; a release racing the decision's commit could leave two decisions.)
    let r = app
        .send(
            Method::POST,
            Some(&agent),
            "/v1/authorizations",
            Some(body.into()),
            &[("idempotency-key", "patience")],
        )
        .await;
    let message = r.assert_error(409, "idempotency_conflict");
    assert!(message.contains("still being processed"), "{message}");
    drop(guard);
    let mut r = r;
    for _ in 0..40 {
        r = app
            .send(
                Method::POST,
                Some(&agent),
                "/v1/authorizations",
                Some(body.into()),
                &[("idempotency-key", "patience")],
            )
            .await;
        if r.status != 409 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.header("idempotency-replayed"), Some("true"));
    // Exactly one decision, whichever attempt made it.
    let decisions = app.get(&org, "/v1/decisions").await;
    assert_eq!(
        decisions.body["data"].as_array().unwrap().len(),
        1,
        "{}",
        decisions.text
    );
}
