//! Background work across processes: every process runs the delivery and timer workers,
//! and each event is still delivered once, by one process at a time; a killed process's
//! delivery is taken over by another; a timer fires once.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use mandate_server::clock::ManualClock;
use mandate_server::serve;

use crate::deploy::{Http, mandate};
use crate::deployment;
use crate::receiver::{Mode, Receiver};

/// Registers a webhook for `events` at `url` through `base`; returns its id.
async fn webhook(http: &Http, base: &str, org_key: &str, url: &str, events: &[&str]) -> String {
    let body = serde_json::json!({ "url": url, "events": events }).to_string();
    let r = http.post(base, org_key, "/v1/webhooks", &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body["webhook"]
        .as_str()
        .or(r.body["id"].as_str())
        .unwrap()
        .to_owned()
}

/// Three processes with a webhook; 30 pings and 9 review_pending events made on all three
/// at once, with a receiver that takes 200 ms to answer: every event reaches the receiver
/// exactly once, never twice at the same time, and nothing more arrives afterwards.
#[tokio::test]
async fn each_event_is_delivered_once_while_three_processes_deliver() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let procs = deployment.serve_n(3);
    let http = Http::default();
    let receiver = Receiver::start(Mode::Answer {
        delay: Duration::from_millis(200),
    })
    .await;
    let hook = webhook(
        &http,
        &procs[0].api,
        &org.sandbox,
        &receiver.url,
        &["ping", "decision.review_pending"],
    )
    .await;
    let ping = format!("/v1/webhooks/{hook}/ping");
    let pings =
        join_all((0..30).map(|n| http.post_empty(&procs[n % 3].api, &org.sandbox, &ping))).await;
    let mut made = BTreeSet::new();
    for r in &pings {
        assert_eq!(r.status, 202, "{}", r.text);
        made.insert(r.body["event"].as_str().unwrap().to_owned());
    }
    let key = http.agent(&procs[1].api, &org.sandbox, "pending").await;
    http.mandate(
        &procs[1].api,
        &org.sandbox,
        &mandate("pending", "100", "100000", Some("10")),
    )
    .await;
    let reviews =
        join_all((0..9).map(|n| http.authorize(&procs[n % 3].api, &key, "50", "software"))).await;
    for r in &reviews {
        assert_eq!(r.body["verdict"], "review", "{}", r.text);
    }
    receiver
        .wait_acknowledged("ping", 30, Duration::from_secs(60))
        .await;
    receiver
        .wait_acknowledged("decision.review_pending", 9, Duration::from_secs(60))
        .await;
    // Long enough for a second delivery by another process to show.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let seen = receiver.seen();
    assert_eq!(seen.len(), 39, "{seen:?}");
    for (id, s) in &seen {
        assert_eq!(
            s.received, 1,
            "{id} was delivered {} times: {s:?}",
            s.received
        );
        assert_eq!(s.acknowledged, 1, "{id}: {s:?}");
        assert_eq!(s.most_in_flight, 1, "{id}: {s:?}");
    }
    let pinged: BTreeSet<String> = seen
        .iter()
        .filter(|(_, s)| s.event_type == "ping")
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(pinged, made);
}

/// A process is killed with SIGKILL while it delivers an event (the receiver holds the
/// request): another process delivers it within seconds, never while the first still had
/// it in flight, and once.
#[tokio::test]
async fn a_killed_processes_delivery_is_taken_over_by_another() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let mut first = deployment.serve();
    let http = Http::default();
    let receiver = Receiver::start(Mode::Hang).await;
    let hook = webhook(&http, &first.api, &org.sandbox, &receiver.url, &["ping"]).await;
    let ping = http
        .post_empty(
            &first.api,
            &org.sandbox,
            &format!("/v1/webhooks/{hook}/ping"),
        )
        .await;
    assert_eq!(ping.status, 202, "{}", ping.text);
    let event = ping.body["event"].as_str().unwrap().to_owned();
    // The first process has the delivery in flight.
    let deadline = Instant::now() + Duration::from_secs(10);
    while receiver.seen().get(&event).is_none_or(|s| s.in_flight == 0) {
        assert!(
            Instant::now() < deadline,
            "the first process never delivered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = deployment.serve();
    first.kill9();
    let killed = Instant::now();
    receiver.set_mode(Mode::Answer {
        delay: Duration::ZERO,
    });
    receiver
        .wait_acknowledged("ping", 1, Duration::from_secs(60))
        .await;
    let taken_over = receiver.seen()[&event].acknowledged_at.unwrap() - killed;
    eprintln!("a killed process's delivery was taken over after {taken_over:?}");
    // A delivery's claim lasts 15 s (storage::deliveries::CLAIM_MS): then the next tick.
    assert!(
        taken_over <= Duration::from_secs(20),
        "taken over only after {taken_over:?}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let seen = &receiver.seen()[&event];
    assert_eq!(seen.acknowledged, 1, "{seen:?}");
    assert_eq!(
        seen.received, 2,
        "the killed attempt and the one that took over: {seen:?}"
    );
    assert_eq!(seen.most_in_flight, 1, "{seen:?}");
    // The delivery is recorded as done, whichever process is asked.
    let stored = http
        .get(&second.api, &org.sandbox, &format!("/v1/events/{event}"))
        .await;
    assert_eq!(stored.status, 200, "{}", stored.text);
    drop(second);
}

/// Twelve mandates created, through three processes, inside their seven-day
/// `mandate.expiring` window: every process's timer finds them due, and each fires once
/// (one event in the log) and is delivered once.
#[tokio::test]
async fn mandate_expiring_fires_once_while_three_processes_run_timers() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let procs = deployment.serve_n(3);
    let http = Http::default();
    let receiver = Receiver::start(Mode::Answer {
        delay: Duration::ZERO,
    })
    .await;
    webhook(
        &http,
        &procs[0].api,
        &org.sandbox,
        &receiver.url,
        &["mandate.expiring"],
    )
    .await;
    let expires = (time::OffsetDateTime::now_utc() + time::Duration::days(3)).date();
    let expires = mandate_protocol::mandate::format_date(expires);
    let mut mandates = BTreeSet::new();
    for n in 0..12 {
        let p = &procs[n % 3];
        let name = format!("soon{n}");
        http.agent(&p.api, &org.sandbox, &name).await;
        let body = mandate(&name, "100", "1000", None).replace("2099-12-31", &expires);
        let m = http.mandate(&p.api, &org.sandbox, &body).await;
        mandates.insert(m["id"].as_str().unwrap().to_owned());
    }
    receiver
        .wait_acknowledged("mandate.expiring", 12, Duration::from_secs(60))
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let seen = receiver.seen();
    assert_eq!(seen.len(), 12, "{seen:?}");
    assert!(
        seen.values()
            .all(|s| s.received == 1 && s.acknowledged == 1),
        "{seen:?}"
    );
    let events = http.walk(&procs[2].api, &org.sandbox, "/v1/events").await;
    let fired: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "mandate.expiring")
        .map(|e| e["data"]["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(fired.len(), 12, "{fired:?}");
    assert_eq!(fired.into_iter().collect::<BTreeSet<_>>(), mandates);
}

/// Reviews expire on the clock, which a process's own cannot be moved 24 hours: two servers
/// in this process on the one database, on one manual clock, stand for two processes (they
/// share nothing but the database). Six reviews opened through both, then the clock moved
/// past their 24 hours: both timers find them due, and each expires once (one
/// decision.resolved, delivered once).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_review_expires_once_while_two_servers_run_timers() {
    let deployment = deployment!();
    let clock = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
    let config = deployment.in_process_config();
    let first = serve::start(config.clone(), clock.clone()).await.unwrap();
    let second = serve::start(config, clock.clone()).await.unwrap();
    let apis = [
        format!("http://{}", first.api_addr),
        format!("http://{}", second.api_addr),
    ];
    let org = deployment.onboard("acme");
    let http = Http::default();
    let receiver = Receiver::start(Mode::Answer {
        delay: Duration::from_millis(50),
    })
    .await;
    webhook(
        &http,
        &apis[0],
        &org.sandbox,
        &receiver.url,
        &["decision.resolved"],
    )
    .await;
    let key = http.agent(&apis[1], &org.sandbox, "waiting").await;
    http.mandate(
        &apis[0],
        &org.sandbox,
        &mandate("waiting", "100", "100000", Some("10")),
    )
    .await;
    let mut reviews = BTreeSet::new();
    for n in 0..6 {
        let r = http.authorize(&apis[n % 2], &key, "50", "software").await;
        assert_eq!(r.body["verdict"], "review", "{}", r.text);
        reviews.insert(r.body["review"]["id"].as_str().unwrap().to_owned());
    }
    clock.advance(time::Duration::hours(24) + time::Duration::seconds(1));
    receiver
        .wait_acknowledged("decision.resolved", 6, Duration::from_secs(60))
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let seen = receiver.seen();
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert!(
        seen.values()
            .all(|s| s.received == 1 && s.acknowledged == 1),
        "{seen:?}"
    );
    let events = http.walk(&apis[1], &org.sandbox, "/v1/events").await;
    let expired: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "decision.resolved")
        .map(|e| &e["data"])
        .collect();
    assert_eq!(expired.len(), 6, "{expired:?}");
    assert!(
        expired.iter().all(|d| d["status"] == "expired"),
        "{expired:?}"
    );
    let ids: BTreeSet<String> = expired
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, reviews);
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}
