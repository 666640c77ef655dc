//! The security matrix: every operation of the API × {no key, malformed header, revoked
//! key, wrong class, other environment, other organization, other agent} answers the status
//! of the spec (401, 401, 401, 403, 404, 404, 404 where they apply), and each 404 for
//! someone else's object is indistinguishable from the 404 for a missing id: same status,
//! envelope, headers and message (with the id substituted), and the same timing class.
//! Then mass assignment: read-only fields in a create body are 400 and never stored.

use std::time::{Duration, Instant};

use mandate_server::operator;
use mandate_server::routes::ROUTES;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Resp, TestApp, spawn_app};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Org,
    Agent,
    Any,
}

/// One operation, on the victim's objects.
struct Op {
    method: Method,
    /// The route as in `ROUTES`.
    route: &'static str,
    /// The concrete path.
    path: String,
    class: Class,
    body: Option<String>,
    /// The victim's id in the path or the body, if any.
    target: Option<String>,
    /// What a key of another environment, organization or agent gets.
    foreign: u16,
}

/// The keys of the test.
struct Keys {
    org: String,
    org_live: String,
    other_org: String,
    alice: String,
    bob: String,
    revoked_org: String,
    revoked_agent: String,
}

/// The same id shape, surely missing: the part after the prefix reversed.
fn missing(id: &str) -> String {
    let (prefix, rest) = id.split_at(id.find('_').unwrap() + 1);
    let reversed: String = rest.chars().rev().collect();
    assert_ne!(reversed, rest);
    format!("{prefix}{reversed}")
}

async fn send(app: &TestApp, op: &Op, auth: Option<String>, swap: Option<(&str, &str)>) -> Resp {
    let (mut path, mut body) = (op.path.clone(), op.body.clone());
    if let Some((from, to)) = swap {
        path = path.replace(from, to);
        body = body.map(|b| b.replace(from, to));
    }
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|v| vec![("authorization", v)])
        .unwrap_or_default();
    app.send(op.method.clone(), None, &path, body, &headers)
        .await
}

/// Asserts `foreign` is exactly the 404 a missing id gives.
#[track_caller]
fn assert_same_404(what: &str, foreign: &Resp, id: &str, missing: &Resp, missing_id: &str) {
    let foreign_message = foreign.assert_error(404, "not_found");
    let missing_message = missing.assert_error(404, "not_found");
    assert_eq!(
        foreign_message.replace(id, missing_id),
        missing_message,
        "{what}"
    );
    let names = |r: &Resp| {
        let mut n: Vec<String> = r.headers.keys().map(|k| k.to_string()).collect();
        n.sort();
        n
    };
    assert_eq!(names(foreign), names(missing), "{what}");
    assert_eq!(
        foreign.headers.get("content-type"),
        missing.headers.get("content-type"),
        "{what}"
    );
}

/// Onboards, lifts the rates of the keys used (the clock is manual, so a per-second window
/// never moves), and builds one object of each kind for alice of `acme`'s sandbox.
async fn victim() -> (TestApp, Keys, Vec<Op>) {
    let app = spawn_app().await;
    let store = app.running.as_ref().unwrap().state.store.clone();
    let lift = |key: &str| operator::set_rate(&*store, key, 1_000_000).unwrap();
    lift(&app.org.sandbox);
    lift(&app.org.live);
    let other = app.onboard("intruders").await;
    lift(&other.sandbox);
    let org = app.org.sandbox.clone();
    let alice = app.standard_agent(&org, "alice").await;
    lift(&alice);
    let bob = app.standard_agent(&org, "bob").await;
    lift(&bob);
    let revoked_agent = app.agent(&org, "gone").await;
    let (revoked_org, _) = operator::issue_key(
        &*store,
        &app.running.as_ref().unwrap().state.api_keys,
        "acme",
        mandate_server::model::Env::Sandbox,
        app.clock_now(),
    )
    .unwrap();
    for key in [&revoked_org, &revoked_agent] {
        operator::revoke_key(&*store, key, app.clock_now()).unwrap();
        app.until_refused(key).await;
    }

    let review = app.authorize(&alice, "60", "software").await;
    assert_eq!(review.body["verdict"], "review", "{}", review.text);
    let review_decision = review.body["id"].as_str().unwrap().to_owned();
    let review_id = review.body["review"]["id"].as_str().unwrap().to_owned();
    let mandate = review.body["mandate"].as_str().unwrap().to_owned();
    let allow = app.authorize(&alice, "42.50", "software").await;
    assert_eq!(allow.body["verdict"], "allow", "{}", allow.text);
    let allow_id = allow.body["id"].as_str().unwrap().to_owned();
    let funding = format!(
        r#"{{"amount": 42.50, "currency": "USD", "buyer": "agt_alice", "seller": "vendor:acme", "decision": "{allow_id}"}}"#
    );
    let escrow = app.post_text(&org, "/v1/escrows", &funding).await;
    assert_eq!(escrow.status, 201, "{}", escrow.text);
    let escrow = escrow.body["id"].as_str().unwrap().to_owned();
    let hook = app
        .post(
            &org,
            "/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/hook", "events": ["ping"]}),
        )
        .await;
    assert_eq!(hook.status, 201, "{}", hook.text);
    let hook = hook.body["webhook"]
        .as_str()
        .or(hook.body["id"].as_str())
        .unwrap()
        .to_owned();
    let events = app.get(&org, "/v1/events").await;
    let event = events.body["data"][0]["id"].as_str().unwrap().to_owned();

    let op = |method: Method,
              route: &'static str,
              path: String,
              class: Class,
              body: Option<String>,
              target: Option<&str>,
              foreign: u16| Op {
        method,
        route,
        path,
        class,
        body,
        target: target.map(str::to_owned),
        foreign,
    };
    let a_mandate = crate::helpers::standard_mandate("alice");
    let ops = vec![
        op(Method::POST, "/v1/agents", "/v1/agents".into(), Class::Org, Some(r#"{"name": "newbie"}"#.into()), None, 404),
        op(Method::GET, "/v1/agents", "/v1/agents".into(), Class::Any, None, None, 404),
        op(Method::GET, "/v1/agents/{id}", "/v1/agents/agt_alice".into(), Class::Any, None, Some("agt_alice"), 404),
        op(Method::POST, "/v1/mandates", "/v1/mandates".into(), Class::Org, Some(a_mandate), Some("agt_alice"), 404),
        op(Method::GET, "/v1/mandates", "/v1/mandates".into(), Class::Any, None, None, 404),
        op(Method::GET, "/v1/mandates/{id}", format!("/v1/mandates/{mandate}"), Class::Any, None, Some(&mandate), 404),
        // DELETE on a mandate is always 400, whoever asks and whatever the id.
        op(Method::DELETE, "/v1/mandates/{id}", format!("/v1/mandates/{mandate}"), Class::Any, None, Some(&mandate), 400),
        op(Method::POST, "/v1/mandates/{id}/revoke", format!("/v1/mandates/{mandate}/revoke"), Class::Org, None, Some(&mandate), 404),
        op(Method::POST, "/v1/authorizations", "/v1/authorizations".into(), Class::Agent, Some(r#"{"amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#.into()), None, 404),
        op(Method::POST, "/v1/reviews/{id}/approve", format!("/v1/reviews/{review_id}/approve"), Class::Org, None, Some(&review_id), 404),
        // The organization key denies; the agent key of the decision's agent (alice) withdraws
        // its own review; any other agent's key (bob) is 404, as a missing review.
        op(Method::POST, "/v1/reviews/{id}/deny", format!("/v1/reviews/{review_id}/deny"), Class::Any, None, Some(&review_id), 404),
        op(Method::GET, "/v1/enforcement", "/v1/enforcement".into(), Class::Org, None, None, 404),
        op(Method::POST, "/v1/enforcement", "/v1/enforcement".into(), Class::Org, Some(r#"{"mode": "enforce"}"#.into()), None, 404),
        op(Method::GET, "/v1/decisions", "/v1/decisions".into(), Class::Any, None, None, 404),
        op(Method::GET, "/v1/decisions/{id}", format!("/v1/decisions/{review_decision}"), Class::Any, None, Some(&review_decision), 404),
        op(Method::POST, "/v1/webhooks", "/v1/webhooks".into(), Class::Org, Some(r#"{"url": "http://127.0.0.1:9/other", "events": ["ping"]}"#.into()), None, 404),
        op(Method::GET, "/v1/webhooks", "/v1/webhooks".into(), Class::Org, None, None, 404),
        op(Method::GET, "/v1/webhooks/{id}", format!("/v1/webhooks/{hook}"), Class::Org, None, Some(&hook), 404),
        op(Method::DELETE, "/v1/webhooks/{id}", format!("/v1/webhooks/{hook}"), Class::Org, None, Some(&hook), 404),
        op(Method::POST, "/v1/webhooks/{id}/ping", format!("/v1/webhooks/{hook}/ping"), Class::Org, None, Some(&hook), 404),
        op(Method::GET, "/v1/events", "/v1/events".into(), Class::Org, None, None, 404),
        op(Method::GET, "/v1/events/{id}", format!("/v1/events/{event}"), Class::Org, None, Some(&event), 404),
        op(Method::POST, "/v1/escrows", "/v1/escrows".into(), Class::Org, Some(funding.clone()), Some(&allow_id), 404),
        // An escrow is a public contract: any valid key that holds its id reads it.
        op(Method::GET, "/v1/escrows/{id}", format!("/v1/escrows/{escrow}"), Class::Any, None, Some(&escrow), 200),
        op(Method::POST, "/v1/escrows/{id}/deliver", format!("/v1/escrows/{escrow}/deliver"), Class::Org, None, Some(&escrow), 404),
        op(Method::POST, "/v1/escrows/{id}/release", format!("/v1/escrows/{escrow}/release"), Class::Org, None, Some(&escrow), 404),
        op(Method::POST, "/v1/escrows/{id}/refund", format!("/v1/escrows/{escrow}/refund"), Class::Org, None, Some(&escrow), 404),
        op(Method::POST, "/v1/escrows/{id}/dispute", format!("/v1/escrows/{escrow}/dispute"), Class::Org, None, Some(&escrow), 404),
        op(Method::GET, "/v1/exports/decisions", "/v1/exports/decisions".into(), Class::Any, None, None, 404),
    ];
    let keys = Keys {
        org,
        org_live: app.org.live.clone(),
        other_org: other.sandbox,
        alice,
        bob,
        revoked_org,
        revoked_agent,
    };
    (app, keys, ops)
}

#[mandate_test_macros::on_each_engine]
async fn every_operation_refuses_every_stranger_as_the_spec_says() {
    let (app, keys, ops) = victim().await;
    // The table covers every operation of the API.
    let mut covered: Vec<(String, &str)> = ops
        .iter()
        .map(|o| (o.method.to_string(), o.route))
        .collect();
    covered.sort();
    let mut all: Vec<(String, &str)> = ROUTES.iter().map(|(m, p)| ((*m).to_owned(), *p)).collect();
    all.sort();
    assert_eq!(covered, all, "the matrix must list every operation");

    let anonymous = app
        .send(Method::GET, None, "/v1/agents", None, &[])
        .await
        .assert_error(401, "unauthorized");
    let malformed = [
        "Token {k}",
        "Bearer",
        "bearer {k}",
        "Basic {k}",
        "Bearer {k}{k}",
        "{k}",
    ];
    let mut checked = 0;
    for (n, op) in ops.iter().enumerate() {
        let what = |case: &str| format!("{} {} / {case}", op.method, op.route);
        let (right, revoked, wrong) = match op.class {
            Class::Org | Class::Any => (&keys.org, &keys.revoked_org, &keys.alice),
            Class::Agent => (&keys.alice, &keys.revoked_agent, &keys.org),
        };
        let header = malformed[n % malformed.len()].replace("{k}", right);
        for (case, auth) in [
            ("no key", None),
            ("malformed header", Some(header)),
            ("revoked key", Some(format!("Bearer {revoked}"))),
        ] {
            let r = send(&app, op, auth, None).await;
            assert_eq!(r.status, 401, "{}: {}", what(case), r.text);
            assert_eq!(
                r.assert_error(401, "unauthorized"),
                anonymous,
                "{}",
                what(case)
            );
            checked += 1;
        }
        if op.class != Class::Any {
            let r = send(&app, op, Some(format!("Bearer {wrong}")), None).await;
            assert_eq!(r.status, 403, "{}: {}", what("wrong class"), r.text);
            r.assert_error(403, "forbidden");
            checked += 1;
        }
        let Some(target) = &op.target else { continue };
        let mut strangers = vec![
            ("other environment", &keys.org_live),
            ("other organization", &keys.other_org),
        ];
        if op.class == Class::Any {
            strangers.push(("other agent", &keys.bob));
        }
        for (case, key) in strangers {
            let auth = Some(format!("Bearer {key}"));
            let foreign = send(&app, op, auth.clone(), None).await;
            assert_eq!(
                foreign.status,
                op.foreign,
                "{}: {}",
                what(case),
                foreign.text
            );
            checked += 1;
            if op.foreign == 404 {
                let missing_id = missing(target);
                let missing = send(&app, op, auth, Some((target, &missing_id))).await;
                assert_same_404(&what(case), &foreign, target, &missing, &missing_id);
            }
        }
    }
    eprintln!(
        "security matrix: {} operations, {checked} refusals checked",
        ops.len()
    );

    // Nothing of the victim's changed: the mandate is active, the review pending, the
    // escrow funded, the webhook active, one agent more than none, no agent named newbie.
    let mandates = app.get(&keys.org, "/v1/mandates?agent=agt_alice").await;
    assert_eq!(mandates.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(mandates.body["data"][0]["status"], "active");
    let hooks = app.get(&keys.org, "/v1/webhooks").await;
    assert_eq!(hooks.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(hooks.body["data"][0]["status"], "active");
    let escrow_op = ops.iter().find(|o| o.route == "/v1/escrows/{id}").unwrap();
    let escrow = app.get(&keys.org, &escrow_op.path).await;
    assert_eq!(escrow.body["state"], "funded", "{}", escrow.text);
    assert_eq!(escrow.body["disputed"], false);
    assert_eq!(
        app.get(&keys.org, "/v1/agents/agt_newbie").await.status,
        404
    );
    assert_eq!(
        app.get(&keys.other_org, "/v1/agents").await.body["data"],
        json!([])
    );
    let decisions = app.get(&keys.org, "/v1/decisions").await;
    assert_eq!(decisions.body["data"].as_array().unwrap().len(), 2);
    let review = ops
        .iter()
        .find(|o| o.route == "/v1/decisions/{id}")
        .unwrap();
    let review = app.get(&keys.org, &review.path).await;
    assert_eq!(review.body["review_status"], "pending", "{}", review.text);
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[mandate_test_macros::on_each_engine]
async fn someone_elses_404_takes_as_long_as_a_missing_ids() {
    let (app, keys, ops) = victim().await;
    for route in [
        "/v1/decisions/{id}",
        "/v1/mandates/{id}",
        "/v1/escrows/{id}/deliver",
    ] {
        let op = ops.iter().find(|o| o.route == route).unwrap();
        let target = op.target.as_deref().unwrap();
        let missing_id = missing(target);
        let auth = Some(format!("Bearer {}", keys.other_org));
        let (mut foreign, mut absent) = (Vec::new(), Vec::new());
        for round in 0..50 {
            // Alternate the order so that neither side always runs warm.
            for first in [round % 2 == 0, round % 2 == 1] {
                let started = Instant::now();
                let swap = if first {
                    None
                } else {
                    Some((target, missing_id.as_str()))
                };
                let r = send(&app, op, auth.clone(), swap).await;
                assert_eq!(r.status, 404);
                if first {
                    foreign.push(started.elapsed());
                } else {
                    absent.push(started.elapsed());
                }
            }
        }
        let (f, m) = (median(foreign), median(absent));
        let ratio = f.as_secs_f64().max(m.as_secs_f64()) / f.as_secs_f64().min(m.as_secs_f64());
        eprintln!("{route}: median foreign {f:?}, missing {m:?}");
        assert!(ratio < 3.0, "{route}: foreign {f:?} vs missing {m:?}");
    }
}

/// The create bodies and the read-only fields that must never be written through them.
#[mandate_test_macros::on_each_engine]
async fn read_only_fields_in_a_body_are_400_and_never_stored() {
    let (app, keys, ops) = victim().await;
    let org = &keys.org;
    let count = |path: &'static str, key: &str| {
        let (app, key) = (&app, key.to_owned());
        async move {
            let r = app.get(&key, path).await;
            r.body["data"].as_array().unwrap().len()
        }
    };
    // A fresh allow to fund with (the victim's is spent).
    let allow = app.authorize(&keys.alice, "42.50", "software").await;
    let funding = format!(
        r#"{{"amount": 42.50, "currency": "USD", "buyer": "agt_alice", "seller": "vendor:acme", "decision": "{}"}}"#,
        allow.body["id"].as_str().unwrap()
    );
    let before = (
        count("/v1/agents", org).await,
        count("/v1/mandates", org).await,
        count("/v1/decisions", org).await,
        count("/v1/webhooks", org).await,
        count("/v1/events", org).await,
    );
    let review = ops
        .iter()
        .find(|o| o.route == "/v1/reviews/{id}/deny")
        .unwrap();
    let creates: Vec<(&str, &str, Value)> = vec![
        (org, "/v1/agents", json!({"name": "sneaky"})),
        (
            org,
            "/v1/mandates",
            serde_json::from_str(&crate::helpers::standard_mandate("bob")).unwrap(),
        ),
        (
            &keys.alice,
            "/v1/authorizations",
            json!({"amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software"}),
        ),
        (
            org,
            "/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/x", "events": ["ping"]}),
        ),
        (org, "/v1/escrows", serde_json::from_str(&funding).unwrap()),
        (org, "/v1/enforcement", json!({"mode": "observe"})),
        (org, review.path.as_str(), json!({"reason": "no"})),
    ];
    let forged = [
        ("id", json!("agt_forged")),
        ("status", json!("revoked")),
        ("agent_key", json!("ak_sandbox_forged")),
        ("created_at", json!("2020-01-01T00:00:00Z")),
    ];
    for (key, path, body) in &creates {
        for (field, value) in &forged {
            let mut sent = body.clone();
            sent[*field] = value.clone();
            let r = app.post(key, path, sent.clone()).await;
            let message = r.assert_error(400, "invalid_request");
            assert!(message.contains(field), "{path} with {field}: {message}");
        }
    }
    let after = (
        count("/v1/agents", org).await,
        count("/v1/mandates", org).await,
        count("/v1/decisions", org).await,
        count("/v1/webhooks", org).await,
        count("/v1/events", org).await,
    );
    assert_eq!(before, after, "a refused body left something behind");
    let enforcement = app.get(org, "/v1/enforcement").await;
    assert_eq!(enforcement.body["mode"], "enforce");
    // The bodies without the forged fields are accepted: the 400s were about those fields.
    for (key, path, body) in &creates {
        let r = app.post(key, path, body.clone()).await;
        assert!(r.status < 300, "{path}: {}", r.text);
    }
}

/// The server's log, at its most verbose, holds no key, token or request body, even when
/// requests fail (bad keys, bad bodies, a refused write).
#[mandate_test_macros::on_each_engine]
async fn no_secret_reaches_the_log() {
    use crate::process::{Client, Server, free_port, onboard};
    let dir = tempfile::tempdir().unwrap();
    let db = crate::helpers::TestDatabase::new(dir.path(), "logs.db").await;
    let log = dir.path().join("server.log");
    let org = onboard(db.arg(), "loggers");
    let server = Server::start_logging(db.arg(), free_port(), &[], Some((&log, "trace")));
    let client = Client::new(&server.api);
    let agent = client
        .post(&org, "/v1/agents", r#"{"name": "talker"}"#)
        .await;
    let agent_key = agent.body["agent_key"].as_str().unwrap().to_owned();
    let mandate = crate::helpers::standard_mandate("talker").replace("2026-12-31", "2099-12-31");
    assert_eq!(
        client.post(&org, "/v1/mandates", &mandate).await.status,
        201
    );
    let body = r#"{"amount": 7, "currency": "USD", "recipient": "vendor:secretive-vendor", "category": "software"}"#;
    let allowed = client.post(&agent_key, "/v1/authorizations", body).await;
    let token = allowed.body["verdict_token"].as_str().unwrap().to_owned();
    let _ = client
        .post(&format!("{org}x"), "/v1/agents", r#"{"name": "nope"}"#)
        .await;
    let _ = client
        .post(&org, "/v1/agents", r#"{"name": "Secretive Name"}"#)
        .await;
    let _ = client
        .send(
            Method::POST,
            &agent_key,
            "/v1/authorizations",
            Some(body),
            Some("idem-secretive"),
        )
        .await
        .unwrap();
    let hook = r#"{"url": "http://127.0.0.1:9/secretive-path", "events": ["ping"]}"#;
    let hook = client.post(&org, "/v1/webhooks", hook).await;
    let hook_id = hook.body["webhook"]
        .as_str()
        .or(hook.body["id"].as_str())
        .unwrap()
        .to_owned();
    // A ping to a closed port: the failed delivery is logged.
    let ping = client
        .post(&org, &format!("/v1/webhooks/{hook_id}/ping"), "")
        .await;
    assert_eq!(ping.status, 202, "{}", ping.text);
    for _ in 0..100 {
        if std::fs::read_to_string(&log)
            .unwrap()
            .contains("delivery attempt failed")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    for secret in [
        org.as_str(),
        agent_key.as_str(),
        token.as_str(),
        "secretive",
        "Secretive",
        "Bearer",
    ] {
        assert!(!text.contains(secret), "the log holds {secret:?}");
    }
    assert!(text.contains("delivery attempt failed"), "{text}");
    // The next attempt is a UTC time, as GET /v1/events/{id} shows it, not raw milliseconds.
    let line = text
        .lines()
        .find(|l| l.contains("delivery attempt failed"))
        .unwrap();
    let next = line
        .split("next_attempt")
        .nth(1)
        .unwrap_or_else(|| panic!("no next_attempt in {line}"));
    assert!(
        next.contains("T") && next.contains("Z") && !line.contains("RetryAt"),
        "{line}"
    );
    let signing: Vec<u8> = db
        .query_bytes("SELECT secret FROM signing_keys LIMIT 1", &[])
        .remove(0);
    let hex: String = signing.iter().map(|b| format!("{b:02x}")).collect();
    assert!(!text.contains(&hex));
    eprintln!("log: {} bytes, no secret", text.len());
}
