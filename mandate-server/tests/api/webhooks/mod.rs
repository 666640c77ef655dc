//! Webhooks and the event log: registration and URL rules, signed delivery to a real
//! receiver, retries with backoff on the injected clock, the 24-hour window, restarts,
//! time-driven events, and `GET /v1/events`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use mandate_core::{EventClaims, JwkSet, TokenError, VerifyOptions, verify_event};
use mandate_protocol::delivery::RETRY_WINDOW_MS;
use mandate_server::storage::deliveries::{Attempt, DeliveryKey, DeliveryRow, DeliveryState};
use reqwest::Method;
use serde_json::{Value, json};
use time::macros::datetime;

mod delivery;
mod events;
mod registration;
mod restart;

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

/// Polls `f` (short real sleeps, bounded at 30 s, well past a delivery's round trip on busy
/// cores) until it gives a value: the worker acts on its own tick, while the clock it reads
/// is the test's.
async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1200 {
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
    // Attempts name their delivery by its key on PostgreSQL, by its row on SQLite.
    let attempts = if crate::engine::postgres() {
        "SELECT attempt, at_ms, status, latency_ms, error FROM delivery_attempts
         WHERE event_id = $1 AND webhook_id = $2 ORDER BY attempt"
    } else {
        "SELECT attempt, at_ms, status, latency_ms, error FROM delivery_attempts
         WHERE delivery_id = (SELECT id FROM deliveries WHERE event_id = $1 AND webhook_id = $2)
         ORDER BY attempt, id"
    };
    db.query(
        "SELECT (SELECT org_id FROM events WHERE events.id = deliveries.event_id), webhook_id,
                attempts, state, next_attempt_ms, last_error
         FROM deliveries WHERE event_id = $1 ORDER BY created_ms, webhook_id",
        &[event],
    )
    .into_iter()
    .map(|row| {
        let id = DeliveryKey {
            org_id: row[0].clone().unwrap(),
            event_id: event.to_owned(),
            webhook_id: row[1].clone().unwrap(),
        };
        let tried = db
            .query(attempts, &[event, &id.webhook_id])
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
