//! A webhook receiver: a real HTTP server on 127.0.0.1 that counts, per event id (`jti`),
//! the deliveries it received, acknowledged, and had in flight at once.
#![allow(dead_code)]
// Shared harness: each test uses a part of it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 204 after `delay`.
    Answer { delay: Duration },
    /// Holds every request without answering (until the sender gives up or dies).
    Hang,
}

/// What the receiver saw of one event.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub event_type: String,
    /// Requests received.
    pub received: usize,
    /// Requests answered 2xx.
    pub acknowledged: usize,
    /// Requests being handled now.
    pub in_flight: usize,
    /// The most requests ever handled at once.
    pub most_in_flight: usize,
    /// When the first request arrived, and the first acknowledged one.
    pub first_at: Option<Instant>,
    pub acknowledged_at: Option<Instant>,
}

#[derive(Clone)]
struct Shared {
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    mode: Arc<Mutex<Mode>>,
}

pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    shared: Shared,
}

/// The claims of a JWT, read without verifying it.
pub fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
        .unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

async fn receive(State(s): State<Shared>, body: String) -> StatusCode {
    let claims = claims(&body);
    let jti = claims["jti"].as_str().unwrap_or("?").to_owned();
    {
        let mut seen = s.seen.lock().unwrap();
        let entry = seen.entry(jti.clone()).or_default();
        entry.event_type = claims["type"].as_str().unwrap_or("?").to_owned();
        entry.received += 1;
        entry.in_flight += 1;
        entry.most_in_flight = entry.most_in_flight.max(entry.in_flight);
        entry.first_at.get_or_insert_with(Instant::now);
    }
    // Counted out of flight however this request ends (the sender may drop it).
    struct Leaving(Shared, String);
    impl Drop for Leaving {
        fn drop(&mut self) {
            if let Some(e) = self.0.seen.lock().unwrap().get_mut(&self.1) {
                e.in_flight -= 1;
            }
        }
    }
    let _leaving = Leaving(s.clone(), jti.clone());
    let mode = *s.mode.lock().unwrap();
    match mode {
        Mode::Answer { delay } => tokio::time::sleep(delay).await,
        Mode::Hang => {
            // Until the mode changes; then this request is dropped unanswered, as a hung
            // receiver's would be.
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if *s.mode.lock().unwrap() != Mode::Hang {
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
            }
        }
    }
    let mut seen = s.seen.lock().unwrap();
    let entry = seen.get_mut(&jti).unwrap();
    entry.acknowledged += 1;
    entry.acknowledged_at.get_or_insert_with(Instant::now);
    StatusCode::NO_CONTENT
}

impl Receiver {
    pub async fn start(mode: Mode) -> Receiver {
        let shared = Shared {
            seen: Arc::default(),
            mode: Arc::new(Mutex::new(mode)),
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, shared }
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// What was seen, by event id.
    pub fn seen(&self) -> BTreeMap<String, Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Waits (bounded by `limit`) until `n` events of `event_type` were acknowledged.
    pub async fn wait_acknowledged(&self, event_type: &str, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let done = self
                .seen()
                .values()
                .filter(|s| s.event_type == event_type && s.acknowledged > 0)
                .count();
            if done >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{done} of {n} {event_type} events acknowledged after {limit:?}: {:?}",
                self.seen()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
