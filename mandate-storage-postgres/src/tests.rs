//! The PostgreSQL engine against a real database: each test makes its own
//! ([`TestDb`], on `MANDATE_TEST_POSTGRES_URL`; skipped with a note without it). Two
//! [`PostgresStore`]s on one database are two server processes: two pools, nothing shared
//! but the database. The decision path across processes is tested in `tests/pg_store.rs`.
//!
//! What only this engine has (its migrations run by several processes at once, claims that
//! run out when a process dies) is tested here rather than in the conformance suite; its
//! writer groups, seq claims and watermark in `tests/writers.rs`.

use std::sync::Arc;

use mandate_protocol::idempotency::NextAction;
use time::macros::datetime;

use super::PostgresStore;
use super::test_db::TestDb;
use mandate_storage::clock::ms;
use mandate_storage::deciding::{DecidingStore, Resolution};
use mandate_storage::deliveries::{Attempt, DeliveryStore};
use mandate_storage::idempotency::{IdempotencyRecord, IdempotencyStore, Sealed};
use mandate_storage::location::{DbLocation, PostgresUrl};
use mandate_storage::model::Env;
use mandate_storage::peers::{PeerStore, Peers};
use mandate_storage::timers::{DueItem, TimerStore};
use mandate_storage::{AdminStore, StorageError};

/// A fresh database, or return from the test (skipped) when there is no cluster.
macro_rules! database {
    ($test:expr) => {
        match TestDb::create($test) {
            Some(db) => db,
            None => return,
        }
    };
}

fn url(text: &str) -> PostgresUrl {
    match text.parse::<DbLocation>() {
        Ok(DbLocation::Postgres(url)) => url,
        other => panic!("{text} is not a PostgreSQL URL: {other:?}"),
    }
}

async fn open(db: &TestDb) -> PostgresStore {
    PostgresStore::open(&url(&db.url), true).await.unwrap()
}

const NOW: time::OffsetDateTime = datetime!(2026-11-22 12:00 UTC);

/// An organization, an agent and one decision of it, written as rows (for what needs a
/// decision to point at).
fn seed(db: &TestDb) {
    db.execute(
        "INSERT INTO orgs VALUES ('org_1', 'acme', 'pol_2026-11-22.1', 0);
         INSERT INTO org_counters VALUES ('org_1', 'decisions', 1), ('org_1', 'agents', 1),
            ('org_1', 'mandates', 0), ('org_1', 'events', 0), ('org_1', 'webhooks', 0);
         INSERT INTO environments VALUES ('org_1', 'sandbox', 'enforce', 0), ('org_1', 'live', 'observe', 0);
         INSERT INTO agents (seq, id, org_id, env, created_ms) VALUES (1, 'agt_buyer', 'org_1', 'sandbox', 0);
         INSERT INTO decisions (seq, id, org_id, env, agent_id, agent_seq, mandate_id, verdict,
            policy_verdict, mode, amount, currency, recipient, category, nonce,
            policy_version, iss, iat, exp, created_ms, is_request)
         VALUES (1, 'dec_1', 'org_1', 'sandbox', 'agt_buyer', 1, 'mnd_1', 'allow', 'allow',
            'enforce', '10.50', 'USD', 'vendor:x', 'software', 'n_1', 'pol', 'iss', 0, 300, 0, true);",
    );
}

#[tokio::test]
async fn migrations_apply_once_even_at_once_and_a_newer_or_older_schema_is_refused() {
    let db = database!("migrations_apply_once_even_at_once_and_a_newer_or_older_schema_is_refused");
    let location = url(&db.url);
    // Without migrating, an empty database is refused, saying what to run.
    let refused = PostgresStore::open(&location, false)
        .await
        .err()
        .expect("an empty database is refused without --migrate");
    let text = refused.to_string();
    assert!(matches!(refused, StorageError::Schema(_)), "{text}");
    assert!(text.contains("mandate-server migrate"), "{text}");
    // Two processes starting at once both come up, and each migration is applied once.
    let (a, b) = tokio::join!(
        PostgresStore::open(&location, true),
        PostgresStore::open(&location, true)
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(
        db.number("SELECT COUNT(*) FROM schema_migrations"),
        super::migrations::count()
    );
    PostgresStore::open(&location, false).await.unwrap();
    // A migration missing below the highest applied one (a gap a later build filled) makes
    // the schema older: refused without migrating (migrating applies the missing one:
    // tests/citus/schema.rs).
    db.execute("DELETE FROM schema_migrations WHERE version = 1");
    let text = PostgresStore::open(&location, false)
        .await
        .err()
        .expect("a schema missing a migration is refused without migrating")
        .to_string();
    assert!(text.contains("at migration 0"), "{text}");
    db.execute("INSERT INTO schema_migrations VALUES (1, 0)");
    PostgresStore::open(&location, false).await.unwrap();
    // A schema a newer server wrote: refused with or without migrating, nothing touched.
    let newer = super::migrations::latest() + 1;
    db.execute(&format!(
        "INSERT INTO schema_migrations VALUES ({newer}, 0)"
    ));
    for migrate in [true, false] {
        let text = PostgresStore::open(&location, migrate)
            .await
            .err()
            .expect("a newer schema is refused")
            .to_string();
        assert!(
            text.contains(&format!("migration {newer}")) && text.contains("newer"),
            "{text}"
        );
    }
}

/// A URL's password shows in no error: not when the server cannot be reached, not when a
/// parameter is wrong, not when a root certificate file is missing.
#[tokio::test]
async fn no_error_shows_the_urls_password() {
    let password = "Sup3r-Secret-pw";
    for text in [
        format!("postgres://mandate:{password}@127.0.0.1:1/mandate?connect_timeout=2"),
        format!("postgres://mandate:{password}@127.0.0.1:1/mandate?sslmode=sometimes"),
        format!(
            "postgres://mandate:{password}@127.0.0.1:1/m?sslmode=verify-full&sslrootcert=/nonexistent/root.pem"
        ),
        format!("postgres://mandate@127.0.0.1:1/mandate?password={password}&port=notaport"),
        format!("postgres://mandate:{password}@127.0.0.1:1/mandate?pool_max_size=0"),
    ] {
        let error = PostgresStore::open(&url(&text), true)
            .await
            .err()
            .expect("nothing listens on port 1");
        for shown in [error.to_string(), format!("{error:?}")] {
            assert!(!shown.contains(password), "{shown}");
            assert!(
                shown.contains("127.0.0.1"),
                "the message names the server: {shown}"
            );
        }
    }
}

#[tokio::test]
async fn an_idempotency_key_is_claimed_once_across_processes_and_a_dead_processs_claim_runs_out() {
    let db = database!(
        "an_idempotency_key_is_claimed_once_across_processes_and_a_dead_processs_claim_runs_out"
    );
    let (a, b) = (open(&db).await, open(&db).await);
    let (hash, digest, other) = ([7u8; 32], [1u8; 32], [2u8; 32]);
    // Twenty requests with one fresh key, on two processes at once: one runs.
    let claims = futures_util::future::join_all((0..20).map(|i| {
        let store = if i % 2 == 0 { &a } else { &b };
        store.claim_idempotency_key("org_1", hash, "k-race", digest, [i; 16], NOW)
    }))
    .await;
    let started = claims
        .iter()
        .filter(|c| matches!(c.as_ref().unwrap().0, NextAction::StartProcessing))
        .count();
    assert_eq!(started, 1, "{claims:?}");
    assert!(claims.iter().all(|c| matches!(
        c.as_ref().unwrap().0,
        NextAction::StartProcessing | NextAction::ConflictInFlight
    )));
    // Another body under the same key: refused.
    let (action, _) = b
        .claim_idempotency_key("org_1", hash, "k-race", other, [50; 16], NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::ConflictDifferentRequest);
    // A process starting now leaves the live claim of another alone...
    b.prepare_start(ms(NOW) - 24 * 3600 * 1000, &[0; 32])
        .unwrap();
    let later = NOW + time::Duration::seconds(30);
    let (action, _) = b
        .claim_idempotency_key("org_1", hash, "k-race", digest, [51; 16], later)
        .await
        .unwrap();
    assert_eq!(action, NextAction::ConflictInFlight);
    // ...and once the claim ran out (its process died), a retry takes it over.
    let expired = NOW + time::Duration::milliseconds(mandate_storage::idempotency::CLAIM_MS + 1);
    let (action, _) = b
        .claim_idempotency_key("org_1", hash, "k-race", digest, [52; 16], expired)
        .await
        .unwrap();
    assert_eq!(action, NextAction::StartProcessing);
    let record = |claim: [u8; 16], body: &[u8]| IdempotencyRecord {
        org_id: "org_1".into(),
        key_hash: hash,
        idem_key: "k-race".into(),
        status: 201,
        body: Sealed(body.to_vec()),
        request_id: "req_first".into(),
        claim,
    };
    // The first claimant (whichever of the twenty it was) neither completes nor releases
    // the claim taken over from it.
    for first in 0..20u8 {
        for outcome in [None, Some(record([first; 16], b"stale"))] {
            a.finish_idempotency("org_1", hash, "k-race", [first; 16], outcome)
                .await
                .unwrap();
        }
    }
    // The answer stored through one process is replayed through the other.
    b.finish_idempotency(
        "org_1",
        hash,
        "k-race",
        [52; 16],
        Some(record([52; 16], b"sealed")),
    )
    .await
    .unwrap();
    let (action, original) = a
        .claim_idempotency_key("org_1", hash, "k-race", digest, [53; 16], expired)
        .await
        .unwrap();
    assert!(
        matches!(&action, NextAction::ReturnSavedResponse(r) if r.status == 201 && r.body == b"sealed"),
        "{action:?}"
    );
    assert_eq!(original.as_deref(), Some("req_first"));
    // A start-up sweep drops claims that ran out, not finished records.
    let (fresh, _) = a
        .claim_idempotency_key("org_1", hash, "k-dead", digest, [54; 16], NOW)
        .await
        .unwrap();
    assert_eq!(fresh, NextAction::StartProcessing);
    a.prepare_start(ms(expired) - 24 * 3600 * 1000, &[0; 32])
        .unwrap();
    assert_eq!(
        db.number("SELECT COUNT(*) FROM idempotency WHERE idem_key = 'k-dead'"),
        0
    );
    assert_eq!(db.number("SELECT COUNT(*) FROM idempotency"), 1);
}

/// Writes an org with an active webhook subscribed to `ping`, and `n` pending deliveries
/// due at 0.
fn deliveries(db: &TestDb, n: usize) {
    seed(db);
    db.execute(
        "INSERT INTO webhooks (seq, id, org_id, env, url, events, status, created_ms)
         VALUES (1, 'whk_1', 'org_1', 'sandbox', 'http://127.0.0.1:9/hook', '[\"ping\"]', 'active', 0)",
    );
    for i in 0..n {
        db.execute(&format!(
            "INSERT INTO events (seq, id, org_id, env, type, data, created_ms)
             VALUES ({i}, 'evt_{i}', 'org_1', 'sandbox', 'ping', '{{}}', 0);
             INSERT INTO deliveries
                (org_id, event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
             VALUES ('org_1', 'evt_{i}', 'whk_1', 0, 0, 'pending', 0);"
        ));
    }
}

#[tokio::test]
async fn a_delivery_is_attempted_by_one_process_at_a_time_and_taken_over_when_its_claim_runs_out() {
    let db = database!(
        "a_delivery_is_attempted_by_one_process_at_a_time_and_taken_over_when_its_claim_runs_out"
    );
    let (a, b) = (open(&db).await, open(&db).await);
    deliveries(&db, 12);
    let now = 1_000;
    // Both processes pick at once: every delivery goes to exactly one of them.
    let (picked_a, picked_b) = tokio::join!(
        a.due_deliveries(now, 100, 100),
        b.due_deliveries(now, 100, 100)
    );
    let (picked_a, picked_b) = (picked_a.unwrap(), picked_b.unwrap());
    let mut ids: Vec<_> = picked_a
        .iter()
        .chain(&picked_b)
        .map(|d| d.id.clone())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 12, "{} + {}", picked_a.len(), picked_b.len());
    assert_eq!(
        picked_a.len() + picked_b.len(),
        12,
        "no delivery went to both"
    );
    // While claimed, nobody picks them again.
    assert!(
        a.due_deliveries(now + 1, 100, 100)
            .await
            .unwrap()
            .is_empty()
    );
    // Given back (no room to attempt them), they are due for anyone at once.
    let (first, rest) = if picked_a.is_empty() {
        (&picked_b, &picked_a)
    } else {
        (&picked_a, &picked_b)
    };
    let given_back: Vec<_> = first.iter().map(|d| d.id.clone()).collect();
    let owner = if picked_a.is_empty() { &b } else { &a };
    owner.release_deliveries(given_back.clone()).await.unwrap();
    let again = b.due_deliveries(now + 2, 100, 100).await.unwrap();
    let mut again_ids: Vec<_> = again.iter().map(|d| d.id.clone()).collect();
    again_ids.sort_unstable();
    let mut expected = given_back.clone();
    expected.sort_unstable();
    assert_eq!(again_ids, expected);
    // An attempt recorded ends the claim; one never recorded (its process died) is picked
    // up once the claim has run out.
    let recorded = again[0].id.clone();
    let attempt = Attempt {
        attempt: 1,
        at_ms: now,
        status: Some(200),
        latency_ms: 3,
        error: None,
    };
    let delivered = mandate_storage::deliveries::DeliveryChange {
        attempt: Some(attempt),
        attempts: 1,
        state: mandate_storage::deliveries::DeliveryState::Delivered,
        next_attempt_ms: None,
        last_error: None,
        finished_ms: Some(now + 3),
    };
    b.record_delivery(recorded.clone(), delivered)
        .await
        .unwrap();
    let after = now + mandate_storage::deliveries::CLAIM_MS + 10;
    let taken_over = a.due_deliveries(after, 100, 100).await.unwrap();
    assert_eq!(taken_over.len(), 11, "{taken_over:?}");
    assert!(taken_over.iter().all(|d| d.id != recorded));
    assert!(rest.iter().all(|d| taken_over.iter().any(|t| t.id == d.id)));
}

#[tokio::test]
async fn processes_count_each_other_by_their_heartbeats() {
    let db = database!("processes_count_each_other_by_their_heartbeats");
    let (a, b) = (open(&db).await, open(&db).await);
    let peers = |live, sweeps| Peers { live, sweeps };
    assert_eq!(b.heartbeat("proc-b").await.unwrap(), peers(1, true));
    // The live process with the lowest id sweeps: a joins and takes it over.
    assert_eq!(a.heartbeat("proc-a").await.unwrap(), peers(2, true));
    assert_eq!(b.heartbeat("proc-b").await.unwrap(), peers(2, false));
    a.leave("proc-a").await.unwrap();
    assert_eq!(b.heartbeat("proc-b").await.unwrap(), peers(1, true));
    assert_eq!(a.heartbeat("proc-a").await.unwrap(), peers(2, true));
    // A process that stopped beating (killed) no longer counts once its lease ran out, nor
    // sweeps.
    db.execute("UPDATE processes SET expires_at = now() - INTERVAL '1 second' WHERE id = 'proc-a'");
    assert_eq!(b.heartbeat("proc-b").await.unwrap(), peers(1, true));
}

/// A review, pending, of the seeded decision, expiring long after [`NOW`].
fn review(db: &TestDb) {
    db.execute(
        "INSERT INTO reviews (id, org_id, env, decision_id, agent_id, status, created_ms, expires_ms)
         VALUES ('rev_1', 'org_1', 'sandbox', 'dec_1', 'agt_buyer', 'pending', 0, 99999999999999)",
    );
}

#[tokio::test]
async fn a_review_resolves_once_across_processes_and_expires_once() {
    use mandate_protocol::id::ReviewId;

    let db = database!("a_review_resolves_once_across_processes_and_expires_once");
    let (a, b) = (open(&db).await, open(&db).await);
    seed(&db);
    review(&db);
    let org: Arc<str> = Arc::from("org_1");
    let (found, _) = a
        .review(org.clone(), Env::Sandbox, ReviewId::parse("rev_1").unwrap())
        .await
        .unwrap()
        .unwrap();
    let denied = found.deny(Some("no".into()), NOW).unwrap();
    let resolution = || Resolution {
        org: org.clone(),
        env: Env::Sandbox,
        review: denied.clone(),
        decision: None,
        at_ms: ms(NOW),
        hint: Default::default(),
    };
    let (one, two) = tokio::join!(
        a.resolve_review(resolution()),
        b.resolve_review(resolution())
    );
    let resolved = [one.unwrap(), two.unwrap()];
    assert_eq!(resolved.iter().filter(|r| r.is_some()).count(), 1);
    assert_eq!(
        db.number("SELECT COUNT(*) FROM events WHERE type = 'decision.resolved'"),
        1
    );
    // Expiry, run by every process's timer at once: one event.
    db.execute(
        "INSERT INTO reviews (id, org_id, env, decision_id, agent_id, status, created_ms, expires_ms)
         VALUES ('rev_2', 'org_1', 'sandbox', 'dec_1', 'agt_buyer', 'pending', 0, 0)",
    );
    let item = DueItem {
        id: "rev_2".into(),
        org_id: "org_1".into(),
        env: Env::Sandbox,
    };
    let (due, _) = a
        .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
        .await
        .unwrap();
    assert_eq!(due, vec![item.clone()]);
    let expired = futures_util::future::join_all((0..6).map(|i| {
        let store = if i % 2 == 0 { &a } else { &b };
        store.expire_review(&item, NOW, expire)
    }))
    .await;
    assert!(expired.iter().all(Result::is_ok), "{expired:?}");
    assert_eq!(
        db.number("SELECT COUNT(*) FROM events WHERE type = 'decision.resolved'"),
        2
    );
    assert_eq!(
        db.number("SELECT COUNT(*) FROM reviews WHERE status = 'expired'"),
        1
    );
}

#[tokio::test]
async fn mandate_expiring_fires_once_across_processes() {
    let db = database!("mandate_expiring_fires_once_across_processes");
    let (a, b) = (open(&db).await, open(&db).await);
    seed(&db);
    db.execute(
        "INSERT INTO mandates (seq, id, org_id, env, agent_id, terms, expires, status, created_ms)
         VALUES (1, 'mnd_06h0v91accynrwvvmyfvhsvqh8', 'org_1', 'sandbox', 'agt_buyer',
           '{\"agent\": \"agt_buyer\", \"limits\": {\"per_transaction\": 100, \"per_month\": 450, \"currency\": \"USD\"}, \"categories\": [\"software\"], \"expires\": \"2026-11-25\"}',
           '2026-11-25', 'active', 0)",
    );
    let item = DueItem {
        id: "mnd_06h0v91accynrwvvmyfvhsvqh8".into(),
        org_id: "org_1".into(),
        env: Env::Sandbox,
    };
    let (_, due) = a
        .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
        .await
        .unwrap();
    assert_eq!(due, vec![item.clone()]);
    let fired = futures_util::future::join_all((0..6).map(|i| {
        let store = if i % 2 == 0 { &a } else { &b };
        store.fire_expiring(&item, NOW, fire)
    }))
    .await;
    assert!(fired.iter().all(Result::is_ok), "{fired:?}");
    assert_eq!(
        db.number("SELECT COUNT(*) FROM events WHERE type = 'mandate.expiring'"),
        1
    );
    let (_, due) = b
        .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
        .await
        .unwrap();
    assert!(due.is_empty());
}

/// When `mandate.expiring` is due for a mandate expiring on `expires` (as
/// `workers::timers::expiring_at`, which storage may not import): 00:00 UTC seven days before.
fn expiring_at(expires: time::Date) -> time::OffsetDateTime {
    (expires - time::Duration::days(7)).midnight().assume_utc()
}

/// The timers' decisions as the worker makes them (`workers::timers`, above storage): an
/// expired pending review with its event; `mandate.expiring` once, when due.
fn expire(
    review: &mandate_protocol::review::Review,
    now: time::OffsetDateTime,
) -> Result<Option<mandate_storage::timers::ReviewExpiry>, mandate_storage::StorageError> {
    Ok(review
        .expire(now)
        .ok()
        .map(|review| mandate_storage::timers::ReviewExpiry {
            event: mandate_storage::events::NewEvent {
                event_type: "decision.resolved",
                data: serde_json::to_value(&review).unwrap(),
            },
            review,
            at_ms: ms(now),
        }))
}

fn fire(
    mandate: &mandate_core::Mandate,
    fired: bool,
    now: time::OffsetDateTime,
) -> Option<mandate_storage::timers::ExpiringEvent> {
    (!fired && now >= expiring_at(mandate.terms.expires)).then(|| {
        mandate_storage::timers::ExpiringEvent {
            event: mandate_storage::events::NewEvent {
                event_type: "mandate.expiring",
                data: mandate_protocol::wire::mandate_json(mandate, now),
            },
            at_ms: ms(now),
        }
    })
}

/// Every statement prepares; the decision path's statements read no more as tables grow.
mod statement_costs;

/// The decision writers, their seq claims and the watermark.
mod writers;

/// A group of many organizations' decisions.
mod organizations;

/// A writer set to wait for a fuller group, on a real database.
mod gather;

/// Signing keys made and sealed again by processes at once.
mod keys;

/// The month marks an agent's allows are read from.
mod months;

/// Room on the pages of the log's heads.
mod log_heads;

/// Escrows funded once, and held to their organization's decisions.
mod escrows;
