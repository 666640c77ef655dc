//! Webhooks and the event log: registration and URL rules, signed delivery to a real
//! receiver, retries with backoff on the injected clock, the 24-hour window, restarts,
//! time-driven events, and `GET /v1/events`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use mandate_core::claims::EventClaims;
use mandate_core::delivery::RETRY_WINDOW_MS;
use mandate_core::jwk::JwkSet;
use mandate_core::jws::{TokenError, VerifyOptions, verify_event};
use mandate_server::storage::deliveries::{Attempt, DeliveryRow, DeliveryState};
use reqwest::Method;
use serde_json::{Value, json};
use time::macros::datetime;

use crate::helpers::{START, TestApp, TestDatabase, spawn_app, standard_mandate};

// ---------------------------------------------------------------------------------------
// A receiver: a real HTTP server on 127.0.0.1 port 0 that records every request.

#[derive(Debug, Clone)]
struct Received {
    content_type: String,
    body: String,
}

#[derive(Clone, Default)]
struct Shared {
    seen: Arc<Mutex<Vec<Received>>>,
    fail: Arc<AtomicUsize>,
    delay_ms: Arc<AtomicU64>,
}

struct Receiver {
    url: String,
    shared: Shared,
}

async fn receive(State(s): State<Shared>, headers: HeaderMap, body: String) -> StatusCode {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    s.seen.lock().unwrap().push(Received { content_type, body });
    let delay = s.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let failing = s
        .fail
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

impl Receiver {
    /// A receiver that answers 500 to its first `fail` requests, then 204.
    async fn start(fail: usize) -> Receiver {
        let shared = Shared::default();
        shared.fail.store(fail, Ordering::SeqCst);
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, shared }
    }

    fn seen(&self) -> Vec<Received> {
        self.shared.seen.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.shared.seen.lock().unwrap().len()
    }

    async fn wait_for(&self, n: usize) -> Vec<Received> {
        eventually(&format!("{n} requests at the receiver"), || {
            let seen = self.seen();
            (seen.len() >= n).then_some(seen)
        })
        .await
    }
}

/// Polls `f` (short real sleeps, bounded) until it gives a value: the worker acts on its
/// own tick, while the clock it reads is the test's.
async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..400 {
        if let Some(value) = f() {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Lets the worker run a few ticks, for asserting that nothing happens.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn verify(jwks: &JwkSet, issuer: &str, now: i64, token: &str) -> EventClaims {
    let options = VerifyOptions {
        issuer: issuer.to_owned(),
        now: time::OffsetDateTime::from_unix_timestamp(now).unwrap(),
        leeway_secs: 60,
    };
    verify_event(token, jwks, &options).unwrap()
}

/// The `iat` of an event token, read without verifying it: when the attempt was signed.
fn signed_at(token: &str) -> i64 {
    let payload = token.split('.').nth(1).unwrap();
    let payload: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
            .unwrap(),
    )
    .unwrap();
    payload["iat"].as_i64().unwrap()
}

fn deliveries_of(app: &TestApp, event: &str) -> Vec<DeliveryRow> {
    stored_deliveries(&app.db, event)
}

/// The deliveries of `event` with their attempts, read from the database whichever the
/// engine (from synchronous code: the store's own read is async).
fn stored_deliveries(db: &TestDatabase, event: &str) -> Vec<DeliveryRow> {
    let number = |v: &Option<String>| v.as_deref().map(|n| n.parse::<i64>().unwrap());
    db.query(
        "SELECT id, webhook_id, attempts, state, next_attempt_ms, last_error
         FROM deliveries WHERE event_id = $1 ORDER BY id",
        &[event],
    )
    .into_iter()
    .map(|row| {
        let id = number(&row[0]).unwrap();
        let tried = db
            .query(
                "SELECT attempt, at_ms, status, latency_ms, error FROM delivery_attempts
                 WHERE delivery_id = $1 ORDER BY attempt, id",
                &[&id.to_string()],
            )
            .into_iter()
            .map(|a| Attempt {
                attempt: u32::try_from(number(&a[0]).unwrap()).unwrap(),
                at_ms: number(&a[1]).unwrap(),
                status: number(&a[2]).map(|s| u16::try_from(s).unwrap()),
                latency_ms: number(&a[3]).unwrap(),
                error: a[4].clone(),
            })
            .collect();
        DeliveryRow {
            id,
            webhook_id: row[1].clone().unwrap(),
            attempts: u32::try_from(number(&row[2]).unwrap()).unwrap(),
            state: DeliveryState::parse(row[3].as_deref().unwrap()).unwrap(),
            next_attempt_ms: number(&row[4]),
            last_error: row[5].clone(),
            tried,
        }
    })
    .collect()
}

fn delivery(app: &TestApp, event: &str) -> DeliveryRow {
    let mut rows = deliveries_of(app, event);
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows.remove(0)
}

async fn register(app: &TestApp, key: &str, url: &str, events: &[&str]) -> String {
    let r = app
        .post(key, "/v1/webhooks", json!({"url": url, "events": events}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body["webhook"].as_str().unwrap().to_owned()
}

async fn ping(app: &TestApp, key: &str, webhook: &str) -> String {
    let r = app
        .post_empty(key, &format!("/v1/webhooks/{webhook}/ping"))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    r.body["event"].as_str().unwrap().to_owned()
}

/// The ids of the events of `type`, newest first, through the API.
async fn event_ids(app: &TestApp, key: &str, event_type: &str) -> Vec<String> {
    let r = app
        .get(key, &format!("/v1/events?type={event_type}&limit=100"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Registration.

#[tokio::test]
async fn registration_reads_and_deletion() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let r = app
        .post(
            &org,
            "/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/hook", "events": ["mandate.revoked", "ping", "ping"]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.body["webhook"].as_str().unwrap().to_owned();
    assert!(id.starts_with("whk_"));
    assert_eq!(
        r.body,
        json!({"webhook": id, "url": "http://127.0.0.1:9/hook",
               "events": ["mandate.revoked", "ping"], "status": "active",
               "created_at": "2026-11-22T12:00:00Z"})
    );
    let read = app.get(&org, &format!("/v1/webhooks/{id}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body, r.body);
    let other = register(&app, &org, "https://hooks.example.com/mandate", &["ping"]).await;
    let list = app.get(&org, "/v1/webhooks").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["data"][0]["webhook"], other.as_str());
    assert_eq!(list.body["data"][1], r.body);
    assert_eq!(list.body["has_more"], false);
    let page = app.get(&org, "/v1/webhooks?limit=1").await;
    assert_eq!(page.body["has_more"], true);
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let next = app
        .get(&org, &format!("/v1/webhooks?limit=1&cursor={cursor}"))
        .await;
    assert_eq!(next.body["data"][0]["webhook"], id.as_str());

    // Another organization and the other environment see nothing of it.
    let rival = app.onboard("rival").await;
    for key in [&rival.sandbox, &app.org.live] {
        app.get(key, &format!("/v1/webhooks/{id}"))
            .await
            .assert_error(404, "not_found");
        app.post_empty(key, &format!("/v1/webhooks/{id}/ping"))
            .await
            .assert_error(404, "not_found");
        assert_eq!(app.get(key, "/v1/webhooks").await.body["data"], json!([]));
    }

    app.advance(5);
    let deleted = app
        .send(
            Method::DELETE,
            Some(&org),
            &format!("/v1/webhooks/{id}"),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.body["status"], "deleted");
    assert_eq!(deleted.body["webhook"], id.as_str());
    app.get(&org, &format!("/v1/webhooks/{id}"))
        .await
        .assert_error(404, "not_found");
    app.send(
        Method::DELETE,
        Some(&org),
        &format!("/v1/webhooks/{id}"),
        None,
        &[],
    )
    .await
    .assert_error(404, "not_found");
    app.post_empty(&org, &format!("/v1/webhooks/{id}/ping"))
        .await
        .assert_error(404, "not_found");
    let list = app.get(&org, "/v1/webhooks").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    // PUT is not an operation of this path.
    let put = app
        .send(
            Method::PUT,
            Some(&org),
            &format!("/v1/webhooks/{other}"),
            None,
            &[],
        )
        .await;
    put.assert_error(400, "invalid_request");
    assert!(put.header("allow").is_none());
}

#[tokio::test]
async fn registration_errors_name_the_field_and_agent_keys_get_403() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let cases = [
        (json!({"events": ["ping"]}), "url is required"),
        (json!({"url": "https://a.example"}), "events is required"),
        (
            json!({"url": 5, "events": ["ping"]}),
            "url must be a string",
        ),
        (
            json!({"url": "https://a.example", "events": []}),
            "events must name at least one event type",
        ),
        (
            json!({"url": "https://a.example", "events": "ping"}),
            "events must be an array of event types",
        ),
        (
            json!({"url": "https://a.example", "events": ["ping", 3]}),
            "events[1] must be a string",
        ),
        (
            json!({"url": "https://a.example", "events": ["mandate.*"]}),
            "events[0] \"mandate.*\" is not an event type",
        ),
        (
            json!({"url": "https://a.example", "events": ["ping"], "secret": "x"}),
            "unknown field secret",
        ),
        (
            json!({"url": "https://a.example", "events": ["ping"], "status": "active"}),
            "status is read-only",
        ),
        (
            json!({"url": "http://hooks.example.com/", "events": ["ping"]}),
            "url must use https://",
        ),
        (
            json!({"url": "http://10.0.0.1/", "events": ["ping"]}),
            "url must use https://",
        ),
        (
            json!({"url": "https://169.254.169.254/", "events": ["ping"]}),
            "url host 169.254.169.254 points at a cloud metadata address",
        ),
        (
            json!({"url": "https://10.1.2.3/", "events": ["ping"]}),
            "url host 10.1.2.3 points at a private address",
        ),
        (json!({"url": "not a url", "events": ["ping"]}), "url "),
    ];
    for (body, expected) in cases {
        let r = app.post(&org, "/v1/webhooks", body.clone()).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.starts_with(expected), "{body}: {message}");
    }
    // Live: http is refused even to loopback.
    let r = app
        .post(
            &app.org.live,
            "/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/hook", "events": ["ping"]}),
        )
        .await;
    assert!(
        r.assert_error(400, "invalid_request")
            .starts_with("url must use https://")
    );

    let agent = app.agent(&org, "buyer").await;
    let id = register(&app, &org, "http://localhost:9/hook", &["ping"]).await;
    let attempts = [
        (
            Method::POST,
            "/v1/webhooks".to_owned(),
            Some(json!({"url": "https://a.example", "events": ["ping"]})),
        ),
        (Method::GET, "/v1/webhooks".to_owned(), None),
        (Method::GET, format!("/v1/webhooks/{id}"), None),
        (Method::DELETE, format!("/v1/webhooks/{id}"), None),
        (Method::POST, format!("/v1/webhooks/{id}/ping"), None),
        (Method::GET, "/v1/events".to_owned(), None),
        (Method::GET, "/v1/events/evt_x".to_owned(), None),
    ];
    for (method, path, body) in attempts {
        let r = app
            .send(
                method.clone(),
                Some(&agent),
                &path,
                body.map(|b| b.to_string()),
                &[],
            )
            .await;
        r.assert_error(403, "forbidden");
    }
    // Nothing happened under the agent key.
    assert_eq!(
        app.get(&org, &format!("/v1/webhooks/{id}")).await.status,
        200
    );
    assert_eq!(app.get(&org, "/v1/events").await.body["data"], json!([]));
}

#[tokio::test]
async fn ssrf_forms_are_refused_for_live_webhooks() {
    let app = spawn_app().await;
    let live = app.org.live.clone();
    for url in [
        "https://127.0.0.1/hook",
        "https://127.0.0.2:8443/hook",
        "https://[::1]/hook",
        "https://10.0.0.1/hook",
        "https://172.16.5.4/",
        "https://192.168.1.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://[fd00:ec2::254]/",
        "https://[fe80::1]/",
        "https://[fc00::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:a9fe:a9fe]/",
        "https://100.64.0.1/",
        "https://0.0.0.0/",
        "http://2130706433/",
        "https://2130706433/",
        "https://0x7f000001/",
        "https://0177.0.0.1/",
        "https://127.1/",
        "https://localhost/",
        "https://localhost:8443/hook",
        "https://app.localhost/",
        "http://127.0.0.1:9/hook",
    ] {
        let r = app
            .post(
                &live,
                "/v1/webhooks",
                json!({"url": url, "events": ["ping"]}),
            )
            .await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.starts_with("url "), "{url}: {message}");
    }
    assert_eq!(app.get(&live, "/v1/webhooks").await.body["data"], json!([]));
    // A public address or name is accepted (a name that does not resolve yet is judged
    // again at every delivery).
    register(&app, &live, "https://93.184.216.34/hook", &["ping"]).await;
    register(&app, &live, "https://hooks.example.com/mandate", &["ping"]).await;
    // The sandbox may use loopback, and nothing else internal.
    let sandbox = app.org.sandbox.clone();
    register(&app, &sandbox, "http://localhost:9/hook", &["ping"]).await;
    register(&app, &sandbox, "http://[::1]:9/hook", &["ping"]).await;
    for url in [
        "https://10.0.0.1/",
        "https://169.254.169.254/",
        "http://2130706433/",
    ] {
        let r = app
            .post(
                &sandbox,
                "/v1/webhooks",
                json!({"url": url, "events": ["ping"]}),
            )
            .await;
        assert!(
            r.assert_error(400, "invalid_request").starts_with("url "),
            "{url}"
        );
    }
}

#[tokio::test]
async fn documentation_nat64_local_use_and_teredo_addresses_are_refused() {
    let app = spawn_app().await;
    for (url, kind) in [
        ("https://192.0.2.10/hook", "documentation"),
        ("https://198.51.100.1/", "documentation"),
        ("https://203.0.113.9:8443/", "documentation"),
        ("https://[2001:db8::1]/", "documentation"),
        ("https://[64:ff9b:1::a00:1]/", "reserved"),
        (
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "reserved",
        ),
    ] {
        for key in [&app.org.live, &app.org.sandbox] {
            let r = app
                .post(key, "/v1/webhooks", json!({"url": url, "events": ["ping"]}))
                .await;
            let message = r.assert_error(400, "invalid_request");
            assert!(
                message.starts_with("url host ")
                    && message.contains(&format!("points at a {kind} address"))
                    && message.ends_with("webhooks may not target it"),
                "{url}: {message}"
            );
        }
    }
    assert_eq!(
        app.get(&app.org.live, "/v1/webhooks").await.body["data"],
        json!([])
    );
    // Neighbours of those ranges stay usable.
    register(&app, &app.org.live, "https://203.0.114.9/hook", &["ping"]).await;
    register(&app, &app.org.live, "https://[2001:4860::8888]/", &["ping"]).await;
}

// ---------------------------------------------------------------------------------------
// Delivery.

#[tokio::test]
async fn a_ping_is_delivered_as_a_verifiable_signed_event() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(0).await;
    let webhook = register(&app, &org, &receiver.url, &["mandate.revoked"]).await;
    let event = ping(&app, &org, &webhook).await;
    assert!(event.starts_with("evt_"));

    let seen = receiver.wait_for(1).await;
    assert_eq!(seen[0].content_type, "application/jwt");
    let jwks = app.jwks().await;
    let claims = verify(&jwks, &app.issuer(), START.unix_timestamp(), &seen[0].body);
    assert_eq!(claims.jti.as_str(), event);
    assert_eq!(claims.iss, app.issuer());
    assert_eq!(claims.iat, START.unix_timestamp());
    assert_eq!(claims.event_type, "ping");
    assert_eq!(claims.data["webhook"], webhook.as_str());
    assert_eq!(claims.data["url"], receiver.url.as_str());
    // The attempt lives five minutes, like a verdict: a strict verifier refuses it after.
    assert_eq!(claims.exp, claims.iat + 300);
    let payload = seen[0].body.split('.').nth(1).unwrap();
    let payload: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(payload["exp"], START.unix_timestamp() + 300, "{payload}");
    let late = VerifyOptions {
        issuer: app.issuer(),
        now: START + time::Duration::seconds(300),
        leeway_secs: 0,
    };
    assert_eq!(
        verify_event(&seen[0].body, &jwks, &late),
        Err(TokenError::Expired {
            exp: START.unix_timestamp() + 300
        })
    );

    let row = eventually("the delivery to be recorded", || {
        let row = delivery(&app, &event);
        (row.state == DeliveryState::Delivered).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 1);
    assert_eq!(row.tried.len(), 1);
    assert_eq!(row.tried[0].status, Some(204));
    assert_eq!(row.tried[0].at_ms, START.unix_timestamp() * 1000);
    assert_eq!(row.tried[0].error, None);
    assert_eq!(row.next_attempt_ms, None);

    // The ping is in the log, readable like any event.
    let read = app.get(&org, &format!("/v1/events/{event}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body["type"], "ping");
    assert_eq!(read.body["data"], claims.data);
    assert_eq!(read.body["created_at"], "2026-11-22T12:00:00Z");
    // Delivered once: nothing more arrives however far the clock moves.
    app.advance(48 * 3600);
    settle().await;
    assert_eq!(receiver.count(), 1);
}

#[tokio::test]
async fn a_receiver_that_fails_three_times_gets_the_event_with_the_same_jti() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(3).await;
    let webhook = register(&app, &org, &receiver.url, &["mandate.revoked"]).await;
    app.agent(&org, "buyer").await;
    let mandate = app.mandate(&org, &standard_mandate("buyer")).await;
    let id = mandate["id"].as_str().unwrap();
    let r = app
        .post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = event_ids(&app, &org, "mandate.revoked").await;
    assert_eq!(events.len(), 1);
    let event = &events[0];

    receiver.wait_for(1).await;
    let first = eventually("the first attempt to be recorded", || {
        let row = delivery(&app, event);
        (row.attempts == 1).then_some(row)
    })
    .await;
    assert_eq!(first.state, DeliveryState::Pending);
    let wait = first.next_attempt_ms.unwrap() - START.unix_timestamp() * 1000;
    assert!((800..=1200).contains(&wait), "first backoff {wait} ms");
    // The event's read shows the delivery as stored: the webhook, its state, the attempts,
    // the last answer, and the next attempt as a timestamp.
    let shown = app.get(&org, &format!("/v1/events/{event}")).await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    let at = |ms: i64| {
        mandate_core::timefmt::format(
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap(),
        )
    };
    assert_eq!(
        shown.body["deliveries"],
        json!([{
            "webhook": webhook, "state": "pending", "attempts": 1, "last_status": 500,
            "last_error": "HTTP 500", "last_attempt_at": at(first.tried[0].at_ms),
            "next_attempt_at": at(first.next_attempt_ms.unwrap()),
        }])
    );
    // Not before its time: the clock has not moved.
    settle().await;
    assert_eq!(receiver.count(), 1);

    // Backoffs of about 1 s, 2 s, 4 s (each within 20 %): move the clock past each.
    for (n, step) in [(2, 2), (3, 3), (4, 5)] {
        // Move the clock only once the previous attempt is recorded: its retry is scheduled
        // from the clock at that moment.
        eventually("the previous attempt to be recorded", || {
            (usize::try_from(delivery(&app, event).attempts).unwrap() + 1 == n).then_some(())
        })
        .await;
        app.advance(step);
        receiver.wait_for(n).await;
    }
    let row = eventually("the delivery to be acknowledged", || {
        let row = delivery(&app, event);
        (row.state == DeliveryState::Delivered).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 4);
    let statuses: Vec<_> = row.tried.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [Some(500), Some(500), Some(500), Some(204)]);
    let shown = app.get(&org, &format!("/v1/events/{event}")).await;
    assert_eq!(
        shown.body["deliveries"],
        json!([{
            "webhook": webhook, "state": "delivered", "attempts": 4, "last_status": 204,
            "last_error": null, "last_attempt_at": at(row.tried[3].at_ms),
            "next_attempt_at": null,
        }])
    );
    let numbers: Vec<_> = row.tried.iter().map(|a| a.attempt).collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
    assert!(row.tried.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
    assert!(row.tried.iter().all(|a| a.latency_ms >= 0));

    let jwks = app.jwks().await;
    let now = app.clock_now().unix_timestamp();
    let seen = receiver.seen();
    assert_eq!(seen.len(), 4);
    let mut first_data = None;
    for (received, tried) in seen.iter().zip(&row.tried) {
        let claims = verify(&jwks, &app.issuer(), now, &received.body);
        // Each attempt is signed when it is sent: iat is the attempt's time, exp five
        // minutes later; jti, type and data are the same in every attempt.
        assert_eq!(claims.iat, tried.at_ms.div_euclid(1000));
        assert_eq!(claims.exp, claims.iat + 300);
        assert_eq!(claims.jti.as_str(), event.as_str());
        assert_eq!(claims.event_type, "mandate.revoked");
        assert_eq!(claims.data["id"], id);
        assert_eq!(claims.data["status"], "revoked");
        assert_eq!(first_data.get_or_insert(claims.data.clone()), &claims.data);
    }
    let iats: Vec<i64> = seen
        .iter()
        .map(|r| verify(&jwks, &app.issuer(), now, &r.body).iat)
        .collect();
    let start = START.unix_timestamp();
    assert_eq!(iats, [start, start + 2, start + 5, start + 10]);
    app.advance(3600);
    settle().await;
    assert_eq!(receiver.count(), 4);
}

#[tokio::test]
async fn a_receiver_that_never_accepts_stops_receiving_after_24_hours() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(usize::MAX).await;
    let webhook = register(&app, &org, &receiver.url, &["ping"]).await;
    let event = ping(&app, &org, &webhook).await;
    let deadline = START.unix_timestamp() * 1000 + RETRY_WINDOW_MS;

    let mut attempts = 0;
    let row = loop {
        let row = eventually("the next attempt", || {
            let row = delivery(&app, &event);
            (row.attempts > attempts || row.state != DeliveryState::Pending).then_some(row)
        })
        .await;
        attempts = row.attempts;
        if row.state != DeliveryState::Pending {
            break row;
        }
        // Past the longest backoff (1 hour + 20 %), one attempt per step.
        app.advance(75 * 60);
        assert!(
            app.clock_now() < START + time::Duration::days(2),
            "still pending after 48 hours: {row:?}"
        );
    };
    assert_eq!(row.state, DeliveryState::Failed);
    assert_eq!(row.next_attempt_ms, None);
    assert!(row.attempts >= 15, "{} attempts", row.attempts);
    assert_eq!(receiver.count(), row.tried.len());
    assert!(row.tried.iter().all(|a| a.status == Some(500)));
    assert!(row.tried.iter().all(|a| a.at_ms < deadline));
    assert_eq!(row.last_error.as_deref(), Some("HTTP 500"));
    let count = receiver.count();
    app.advance(7 * 24 * 3600);
    settle().await;
    assert_eq!(receiver.count(), count);
    // The event stays readable in the log.
    assert_eq!(
        app.get(&org, &format!("/v1/events/{event}")).await.status,
        200
    );
}

#[tokio::test]
async fn a_delivery_window_that_closed_while_waiting_is_failed_without_an_attempt() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(usize::MAX).await;
    let webhook = register(&app, &org, &receiver.url, &["ping"]).await;
    let event = ping(&app, &org, &webhook).await;
    eventually("the first attempt", || {
        (delivery(&app, &event).attempts == 1).then_some(())
    })
    .await;
    app.advance(25 * 3600);
    let row = eventually("the delivery to fail", || {
        let row = delivery(&app, &event);
        (row.state == DeliveryState::Failed).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 1);
    assert!(row.last_error.unwrap().contains("24-hour"));
    assert_eq!(receiver.count(), 1);
}

#[tokio::test]
async fn deliveries_resume_after_a_restart() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(1).await;
    let webhook = register(&app, &org, &receiver.url, &["ping"]).await;
    let event = ping(&app, &org, &webhook).await;
    receiver.wait_for(1).await;
    eventually("the failed attempt to be recorded", || {
        (delivery(&app, &event).attempts == 1).then_some(())
    })
    .await;

    // The harness's issuer is the public listener's URL, whose port changes on restart.
    let issuer_before = app.issuer();
    app.restart().await;
    // The next attempt is in the database, not in the old process.
    settle().await;
    assert_eq!(receiver.count(), 1);
    app.advance(2);
    let seen = receiver.wait_for(2).await;
    let row = eventually("the delivery to be acknowledged", || {
        let row = delivery(&app, &event);
        (row.state == DeliveryState::Delivered).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 2);
    let jwks = app.jwks().await;
    let now = app.clock_now().unix_timestamp();
    for (received, issuer) in seen.iter().zip([issuer_before, app.issuer()]) {
        assert_eq!(
            verify(&jwks, &issuer, now, &received.body).jti.as_str(),
            event
        );
    }
}

#[tokio::test]
async fn an_event_goes_to_the_subscribed_active_webhooks_of_its_environment_only() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let url = "http://127.0.0.1:9/hook";
    let subscribed = register(&app, &org, url, &["mandate.revoked", "ping"]).await;
    register(&app, &org, url, &["decision.review_pending"]).await;
    let deleted = register(&app, &org, url, &["mandate.revoked"]).await;
    app.send(
        Method::DELETE,
        Some(&org),
        &format!("/v1/webhooks/{deleted}"),
        None,
        &[],
    )
    .await;
    register(
        &app,
        &app.org.live,
        "https://hooks.example.com/",
        &["mandate.revoked"],
    )
    .await;
    let rival = app.onboard("rival").await;
    register(&app, &rival.sandbox, url, &["mandate.revoked"]).await;

    app.agent(&org, "buyer").await;
    let mandate = app.mandate(&org, &standard_mandate("buyer")).await;
    let id = mandate["id"].as_str().unwrap();
    app.post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;
    let event = event_ids(&app, &org, "mandate.revoked").await.remove(0);
    let rows = deliveries_of(&app, &event);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].webhook_id, subscribed);
}

#[tokio::test]
async fn deleting_a_webhook_ends_its_pending_deliveries() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(usize::MAX).await;
    let webhook = register(&app, &org, &receiver.url, &["ping"]).await;
    let event = ping(&app, &org, &webhook).await;
    eventually("the first attempt", || {
        (delivery(&app, &event).attempts == 1).then_some(())
    })
    .await;
    let r = app
        .send(
            Method::DELETE,
            Some(&org),
            &format!("/v1/webhooks/{webhook}"),
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    let row = delivery(&app, &event);
    assert_eq!(row.state, DeliveryState::Failed);
    assert_eq!(row.last_error.as_deref(), Some("webhook deleted"));
    app.advance(3600);
    settle().await;
    assert_eq!(receiver.count(), 1);
}

#[tokio::test]
async fn a_slow_receiver_delays_no_other_receiver_nor_authorizations() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let slow = Receiver::start(0).await;
    slow.shared.delay_ms.store(3000, Ordering::SeqCst);
    let fast = Receiver::start(0).await;
    let slow_hook = register(&app, &org, &slow.url, &["ping"]).await;
    let fast_hook = register(&app, &org, &fast.url, &["ping"]).await;
    for _ in 0..6 {
        ping(&app, &org, &slow_hook).await;
    }
    slow.wait_for(1).await;
    let started = std::time::Instant::now();
    ping(&app, &org, &fast_hook).await;
    let agent = app.standard_agent(&org, "buyer").await;
    assert_eq!(
        app.authorize(&agent, "5", "software").await.body["verdict"],
        "allow"
    );
    fast.wait_for(1).await;
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "the fast receiver waited {:?}",
        started.elapsed()
    );
    // The slow one is still busy with its first batch (at most 4 at once to one endpoint).
    assert!(slow.count() <= 4, "{}", slow.count());
}

// ---------------------------------------------------------------------------------------
// Every event type reachable today, produced by its action in the same transaction.

#[tokio::test]
async fn every_event_type_is_produced_by_its_action_and_delivered() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(0).await;
    let all = [
        "decision.review_pending",
        "decision.resolved",
        "mandate.revoked",
        "mandate.expiring",
        "ping",
    ];
    let webhook = register(&app, &org, &receiver.url, &all).await;

    // decision.review_pending, then decision.resolved on approve and on deny.
    let agent = app.standard_agent(&org, "buyer").await;
    let mut reviews = Vec::new();
    for _ in 0..3 {
        let r = app.authorize(&agent, "60", "software").await;
        assert_eq!(r.body["verdict"], "review", "{}", r.text);
        reviews.push((
            r.body["id"].as_str().unwrap().to_owned(),
            r.body["review"]["id"].as_str().unwrap().to_owned(),
        ));
    }
    let pending = event_ids(&app, &org, "decision.review_pending").await;
    assert_eq!(pending.len(), 3);
    let approved = app
        .post_empty(&org, &format!("/v1/reviews/{}/approve", reviews[0].1))
        .await;
    assert_eq!(approved.status, 201, "{}", approved.text);
    let denied = app
        .post(
            &org,
            &format!("/v1/reviews/{}/deny", reviews[1].1),
            json!({"reason": "no"}),
        )
        .await;
    assert_eq!(denied.status, 200, "{}", denied.text);
    // Resolving again fails and writes nothing.
    app.post_empty(&org, &format!("/v1/reviews/{}/deny", reviews[1].1))
        .await
        .assert_error(400, "invalid_request");
    app.post_empty(&org, &format!("/v1/reviews/{}/approve", reviews[0].1))
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(event_ids(&app, &org, "decision.resolved").await.len(), 2);

    // decision.resolved on expiry: the worker marks the third review expired after 24 h.
    app.advance(24 * 3600 - 1);
    settle().await;
    assert_eq!(event_ids(&app, &org, "decision.resolved").await.len(), 2);
    app.advance(1);
    eventually("the review to expire", || {
        let status = app
            .db
            .query_value("SELECT status FROM reviews WHERE id = $1", &[&reviews[2].1])
            .unwrap();
        (status == "expired").then_some(())
    })
    .await;
    let resolved = event_ids(&app, &org, "decision.resolved").await;
    assert_eq!(resolved.len(), 3);
    let expired = app.get(&org, &format!("/v1/events/{}", resolved[0])).await;
    assert_eq!(expired.body["data"]["id"], reviews[2].1.as_str());
    assert_eq!(expired.body["data"]["status"], "expired");
    assert_eq!(expired.body["data"]["decision"], reviews[2].0.as_str());
    assert_eq!(expired.body["data"]["resolved_at"], "2026-11-23T12:00:00Z");
    // Approving it now is refused and adds no second event.
    app.post_empty(&org, &format!("/v1/reviews/{}/approve", reviews[2].1))
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(event_ids(&app, &org, "decision.resolved").await.len(), 3);

    // mandate.revoked; revoking twice writes no second event.
    let mandate_id = app.get(&org, "/v1/mandates?agent=agt_buyer").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = app
        .post_empty(&org, &format!("/v1/mandates/{mandate_id}/revoke"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    app.post_empty(&org, &format!("/v1/mandates/{mandate_id}/revoke"))
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(event_ids(&app, &org, "mandate.revoked").await.len(), 1);

    // mandate.expiring: at once for a mandate created inside the window (now 2026-11-23)...
    app.agent(&org, "soon").await;
    let soon = app
        .mandate(
            &org,
            &standard_mandate("soon").replace("2026-12-31", "2026-11-28"),
        )
        .await;
    let expiring = eventually("mandate.expiring for the short mandate", || {
        app.db.query_value(
            "SELECT event_id FROM mandate_expiring_fired WHERE mandate_id = $1",
            &[soon["id"].as_str().unwrap()],
        )
    })
    .await;
    let read = app.get(&org, &format!("/v1/events/{expiring}")).await;
    assert_eq!(read.body["type"], "mandate.expiring");
    assert_eq!(read.body["data"]["id"], soon["id"]);
    assert_eq!(read.body["data"]["expires"], "2026-11-28");
    // ...and at 00:00 UTC seven days before `expires` for the others; a revoked mandate
    // never fires.
    app.agent(&org, "later").await;
    let later = app.mandate(&org, &standard_mandate("later")).await;
    app.clock.set(datetime!(2026-12-23 23:59:59 UTC));
    settle().await;
    assert_eq!(event_ids(&app, &org, "mandate.expiring").await.len(), 1);
    app.clock.set(datetime!(2026-12-24 00:00 UTC));
    let both = eventually("mandate.expiring for the long mandate", || {
        let n = app
            .db
            .query_i64("SELECT COUNT(*) FROM mandate_expiring_fired", &[]);
        (n == 2).then_some(())
    });
    both.await;
    let fired = event_ids(&app, &org, "mandate.expiring").await;
    assert_eq!(fired.len(), 2);
    let read = app.get(&org, &format!("/v1/events/{}", fired[0])).await;
    assert_eq!(read.body["data"]["id"], later["id"]);
    assert_eq!(read.body["created_at"], "2026-12-24T00:00:00Z");
    // Once only.
    app.advance(3 * 24 * 3600);
    settle().await;
    assert_eq!(event_ids(&app, &org, "mandate.expiring").await.len(), 2);

    let ping_event = ping(&app, &org, &webhook).await;

    // Everything in the log reached the receiver, signed, once each.
    let r = app.get(&org, "/v1/events?limit=100").await;
    let logged: Vec<(String, String)> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(logged.len(), 3 + 3 + 1 + 2 + 1);
    assert_eq!(logged[0].0, ping_event);
    let types: BTreeSet<_> = logged.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(types, all.into_iter().collect());
    let seen = receiver.wait_for(logged.len()).await;
    let jwks = app.jwks().await;
    let now = app.clock_now().unix_timestamp();
    // Each event verifies at the time it was sent (the clock moved days since the first).
    let mut received: Vec<(String, String)> = seen
        .iter()
        .map(|r| {
            let sent = signed_at(&r.body);
            assert!(sent <= now);
            let claims = verify(&jwks, &app.issuer(), sent, &r.body);
            assert_eq!(claims.exp, sent + 300);
            (claims.jti.to_string(), claims.event_type)
        })
        .collect();
    let mut expected = logged.clone();
    received.sort();
    expected.sort();
    assert_eq!(received, expected);
}

// ---------------------------------------------------------------------------------------
// The log.

#[tokio::test]
async fn events_list_filter_and_get() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let webhook = register(&app, &org, "http://127.0.0.1:9/hook", &["ping"]).await;
    let mut pings = Vec::new();
    for _ in 0..3 {
        pings.push(ping(&app, &org, &webhook).await);
        app.advance(1);
    }
    app.agent(&org, "buyer").await;
    let mandate = app.mandate(&org, &standard_mandate("buyer")).await;
    let id = mandate["id"].as_str().unwrap();
    app.post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;

    let all = app.get(&org, "/v1/events").await;
    assert_eq!(all.status, 200);
    let data = all.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 4);
    assert_eq!(data[0]["type"], "mandate.revoked");
    assert_eq!(data[0]["data"]["id"], id);
    let keys: Vec<_> = data[0].as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["created_at", "data", "id", "type"]);
    let ids: Vec<_> = data[1..]
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [pings[2].as_str(), &pings[1], &pings[0]]);
    assert_eq!(all.body["has_more"], false);

    assert_eq!(
        event_ids(&app, &org, "ping").await,
        [pings[2].clone(), pings[1].clone(), pings[0].clone()]
    );
    assert_eq!(event_ids(&app, &org, "mandate.revoked").await.len(), 1);
    assert!(event_ids(&app, &org, "mandate.expiring").await.is_empty());

    // Pages, with the filter bound to the cursor.
    let page = app.get(&org, "/v1/events?type=ping&limit=2").await;
    assert_eq!(page.body["has_more"], true);
    let cursor = page.body["next_cursor"].as_str().unwrap().to_owned();
    let next = app
        .get(
            &org,
            &format!("/v1/events?type=ping&limit=2&cursor={cursor}"),
        )
        .await;
    assert_eq!(next.body["data"][0]["id"], pings[0].as_str());
    assert_eq!(next.body["has_more"], false);
    assert!(next.body.get("next_cursor").is_none());
    app.get(&org, &format!("/v1/events?limit=2&cursor={cursor}"))
        .await
        .assert_error(400, "invalid_request");

    let message = app
        .get(&org, "/v1/events?type=nope")
        .await
        .assert_error(400, "invalid_request");
    assert!(message.starts_with("type must be one of"), "{message}");
    app.get(&org, "/v1/events?kind=ping")
        .await
        .assert_error(400, "invalid_request");
    app.get(&org, "/v1/events?limit=0")
        .await
        .assert_error(400, "invalid_request");

    let one = app.get(&org, &format!("/v1/events/{}", pings[0])).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.body["id"], pings[0].as_str());
    assert_eq!(one.body["type"], "ping");
    assert_eq!(one.body["data"]["webhook"], webhook.as_str());
    assert_eq!(one.body["created_at"], "2026-11-22T12:00:00Z");
    // The read carries the event's deliveries: the ping's one, none for an event no
    // endpoint was subscribed to.
    assert_eq!(one.body["deliveries"][0]["webhook"], webhook.as_str());
    assert_eq!(one.body["deliveries"].as_array().unwrap().len(), 1);
    let revoked = data[0]["id"].as_str().unwrap();
    let read = app.get(&org, &format!("/v1/events/{revoked}")).await;
    assert_eq!(read.body["deliveries"], json!([]));
    app.get(&org, "/v1/events/evt_missing")
        .await
        .assert_error(404, "not_found");
    // Another organization's key and the live key of the same one: 404, and empty lists.
    let rival = app.onboard("rival").await;
    for key in [&rival.sandbox, &app.org.live] {
        app.get(key, &format!("/v1/events/{}", pings[0]))
            .await
            .assert_error(404, "not_found");
        assert_eq!(app.get(key, "/v1/events").await.body["data"], json!([]));
    }
}

// ---------------------------------------------------------------------------------------
// A real kill: the binary, SIGKILLed between attempts, on the system clock.

/// A `mandate-server serve` process, killed when dropped.
struct Process {
    child: std::process::Child,
    api: String,
    public: String,
    // Kept open: a closed pipe would make the server's next line of output fail.
    _stdout: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const BIN: &str = env!("CARGO_BIN_EXE_mandate-server");

fn serve(db: &TestDatabase) -> Process {
    use std::io::BufRead;
    let mut child = std::process::Command::new(BIN)
        .arg("serve")
        .arg("--db")
        .arg(db.arg())
        .envs(db.env())
        .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut find = |label: &str| loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(url) = line.trim().strip_prefix(label) {
            return url.trim().to_owned();
        }
    };
    let api = find("api:");
    let public = find("public:");
    find("db:");
    Process {
        child,
        api,
        public,
        _stdout: lines,
    }
}

async fn jwks_of(public: &str) -> JwkSet {
    let bytes = reqwest::get(format!("{public}/.well-known/jwks.json"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    JwkSet::from_json(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_between_attempts_delivers_after_it_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "mandate.db").await;
    let onboard = std::process::Command::new(BIN)
        .arg("onboard")
        .arg("--db")
        .arg(db.arg())
        .envs(db.env())
        .args(["--org", "acme"])
        .output()
        .unwrap();
    assert!(onboard.status.success());
    let stdout = String::from_utf8(onboard.stdout).unwrap();
    let key = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sandbox key:"))
        .unwrap()
        .trim()
        .to_owned();

    let receiver = Receiver::start(1).await;
    let first = serve(&db);
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/v1/webhooks", first.api))
        .bearer_auth(&key)
        .json(&json!({"url": receiver.url, "events": ["ping"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let webhook: Value = r.json().await.unwrap();
    let r = client
        .post(format!(
            "{}/v1/webhooks/{}/ping",
            first.api,
            webhook["webhook"].as_str().unwrap()
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let event = r.json::<Value>().await.unwrap()["event"]
        .as_str()
        .unwrap()
        .to_owned();

    // The first attempt fails and is recorded with a retry about a second later: kill -9.
    let read = |db: &TestDatabase| stored_deliveries(db, &event).remove(0);
    eventually("the failed attempt to be recorded", || {
        (read(&db).attempts == 1).then_some(())
    })
    .await;
    let first_issuer = first.public.clone();
    drop(first);
    assert_eq!(read(&db).state, DeliveryState::Pending);

    let second = serve(&db);
    let seen = receiver.wait_for(2).await;
    let row = eventually("the delivery to be acknowledged", || {
        let row = read(&db);
        (row.state == DeliveryState::Delivered).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 2);
    let jwks = jwks_of(&second.public).await;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    for (received, issuer) in seen.iter().zip([first_issuer, second.public.clone()]) {
        assert_eq!(
            verify(&jwks, &issuer, now, &received.body).jti.as_str(),
            event
        );
    }
}
