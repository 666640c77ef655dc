//! The PostgreSQL engine against a real database: each test makes its own
//! ([`TestDb`], on `MANDATE_TEST_POSTGRES_URL`; skipped with a note without it). Two
//! [`PostgresStore`]s on one database are two server processes: two pools, nothing shared
//! but the database. The decision path across processes is tested in `tests/pg_store.rs`.
//!
//! Longer than 800 lines: each test seeds its rows by hand in SQL and checks them the same
//! way, so a test is long; and what only this engine has (its migrations run by several
//! processes at once, writer groups, seq claims and the watermark, claims that run out when
//! a process dies) is tested here rather than in the conformance suite.

use std::sync::Arc;

use mandate_core::idempotency::NextAction;
use time::macros::datetime;

use super::PostgresStore;
use super::test_db::TestDb;
use crate::clock::ms;
use crate::model::Env;
use crate::storage::deciding::{DecidingStore, Resolution};
use crate::storage::deliveries::{Attempt, DeliveryStore};
use crate::storage::idempotency::{IdempotencyRecord, IdempotencyStore, Sealed};
use crate::storage::location::{DbLocation, PostgresUrl};
use crate::storage::peers::PeerStore;
use crate::storage::timers::{DueItem, TimerStore};
use crate::storage::{AdminStore, StorageError};

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
         INSERT INTO environments VALUES ('org_1', 'sandbox', 'enforce', 0), ('org_1', 'live', 'observe', 0);
         INSERT INTO agents (id, org_id, env, created_ms) VALUES ('agt_buyer', 'org_1', 'sandbox', 0);
         UPDATE counters SET value = 1 WHERE name = 'decision_seq';
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
        store.claim_idempotency_key(hash, "k-race", digest, [i; 16], NOW)
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
        .claim_idempotency_key(hash, "k-race", other, [50; 16], NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::ConflictDifferentRequest);
    // A process starting now leaves the live claim of another alone...
    b.prepare_start(ms(NOW) - 24 * 3600 * 1000, &[0; 32])
        .unwrap();
    let later = NOW + time::Duration::seconds(30);
    let (action, _) = b
        .claim_idempotency_key(hash, "k-race", digest, [51; 16], later)
        .await
        .unwrap();
    assert_eq!(action, NextAction::ConflictInFlight);
    // ...and once the claim ran out (its process died), a retry takes it over.
    let expired = NOW + time::Duration::milliseconds(crate::storage::idempotency::CLAIM_MS + 1);
    let (action, _) = b
        .claim_idempotency_key(hash, "k-race", digest, [52; 16], expired)
        .await
        .unwrap();
    assert_eq!(action, NextAction::StartProcessing);
    let record = |claim: [u8; 16], body: &[u8]| IdempotencyRecord {
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
        a.finish_idempotency(hash, "k-race", [first; 16], None)
            .await
            .unwrap();
        a.finish_idempotency(
            hash,
            "k-race",
            [first; 16],
            Some(record([first; 16], b"stale")),
        )
        .await
        .unwrap();
    }
    // The answer stored through one process is replayed through the other.
    b.finish_idempotency(hash, "k-race", [52; 16], Some(record([52; 16], b"sealed")))
        .await
        .unwrap();
    let (action, original) = a
        .claim_idempotency_key(hash, "k-race", digest, [53; 16], expired)
        .await
        .unwrap();
    assert!(
        matches!(&action, NextAction::ReturnSavedResponse(r) if r.status == 201 && r.body == b"sealed"),
        "{action:?}"
    );
    assert_eq!(original.as_deref(), Some("req_first"));
    // A start-up sweep drops claims that ran out, not finished records.
    let (fresh, _) = a
        .claim_idempotency_key(hash, "k-dead", digest, [54; 16], NOW)
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

#[tokio::test]
async fn one_decision_funds_one_escrow_whichever_process_is_asked() {
    use crate::storage::escrows::{
        EscrowFunding, EscrowRow, EscrowStore, MovementKind, MovementRow, Party,
    };
    use crate::storage::events::NewEvent;
    use mandate_core::escrow::{EscrowState, EscrowStatus, HistoryEntry};
    use mandate_core::id::{AgentId, DecisionId, EscrowId};

    let db = database!("one_decision_funds_one_escrow_whichever_process_is_asked");
    let (a, b) = (open(&db).await, open(&db).await);
    seed(&db);
    let escrow = |n: u8| EscrowRow {
        id: EscrowId::from_random([n; 16]),
        org_id: "org_1".into(),
        env: Env::Sandbox,
        amount: mandate_core::amount::Amount::parse("10.50").unwrap(),
        currency: mandate_core::names::Currency::parse("USD").unwrap(),
        buyer: AgentId::parse("agt_buyer").unwrap(),
        seller: mandate_core::names::Recipient::parse("vendor:x").unwrap(),
        decision: DecisionId::parse("dec_1").unwrap(),
        arbiter: None,
        status: EscrowStatus {
            state: EscrowState::Funded,
            disputed: false,
        },
        history: vec![HistoryEntry {
            state: EscrowState::Funded,
            disputed: false,
            at: NOW,
            actor: "funder".into(),
        }],
        created_ms: ms(NOW),
    };
    let movement = |n: u8| MovementRow {
        escrow_id: EscrowId::from_random([n; 16]),
        kind: MovementKind::Lock,
        amount: mandate_core::amount::Amount::parse("10.50").unwrap(),
        currency: mandate_core::names::Currency::parse("USD").unwrap(),
        from_party: Party::Agent(AgentId::parse("agt_buyer").unwrap()),
        to_party: Party::Escrow(EscrowId::from_random([n; 16])),
        created_ms: ms(NOW),
    };
    let funded = futures_util::future::join_all((1..=10u8).map(|n| {
        let store = if n % 2 == 0 { &a } else { &b };
        store.fund_escrow(EscrowFunding {
            escrow: escrow(n),
            nonce: "n_1".into(),
            movement: movement(n),
            event: NewEvent {
                event_type: "escrow.funded",
                data: serde_json::json!({"n": n}),
            },
        })
    }))
    .await;
    let yes = funded.iter().filter(|f| *f.as_ref().unwrap()).count();
    assert_eq!(yes, 1, "{funded:?}");
    assert_eq!(db.number("SELECT COUNT(*) FROM escrows"), 1);
    assert_eq!(db.number("SELECT COUNT(*) FROM settlement_movements"), 1);
    assert_eq!(
        db.number("SELECT COUNT(*) FROM events WHERE type = 'escrow.funded'"),
        1
    );
}

/// Writes an org with an active webhook subscribed to `ping`, and `n` pending deliveries
/// due at 0.
fn deliveries(db: &TestDb, n: usize) {
    seed(db);
    db.execute(
        "INSERT INTO webhooks (id, org_id, env, url, events, status, created_ms)
         VALUES ('whk_1', 'org_1', 'sandbox', 'http://127.0.0.1:9/hook', '[\"ping\"]', 'active', 0)",
    );
    for i in 0..n {
        db.execute(&format!(
            "INSERT INTO events (id, org_id, env, type, data, created_ms)
             VALUES ('evt_{i}', 'org_1', 'sandbox', 'ping', '{{}}', 0);
             INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
             VALUES ('evt_{i}', 'whk_1', 0, 0, 'pending', 0);"
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
    let mut ids: Vec<i64> = picked_a.iter().chain(&picked_b).map(|d| d.id).collect();
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
    let given_back: Vec<i64> = first.iter().map(|d| d.id).collect();
    let owner = if picked_a.is_empty() { &b } else { &a };
    owner.release_deliveries(given_back.clone()).await.unwrap();
    let again = b.due_deliveries(now + 2, 100, 100).await.unwrap();
    let mut again_ids: Vec<i64> = again.iter().map(|d| d.id).collect();
    again_ids.sort_unstable();
    let mut expected = given_back.clone();
    expected.sort_unstable();
    assert_eq!(again_ids, expected);
    // An attempt recorded ends the claim; one never recorded (its process died) is picked
    // up once the claim has run out.
    let recorded = again[0].id;
    let attempt = Attempt {
        attempt: 1,
        at_ms: now,
        status: Some(200),
        latency_ms: 3,
        error: None,
    };
    let delivered = crate::storage::deliveries::DeliveryChange {
        attempt: Some(attempt),
        attempts: 1,
        state: crate::storage::deliveries::DeliveryState::Delivered,
        next_attempt_ms: None,
        last_error: None,
        finished_ms: Some(now + 3),
    };
    b.record_delivery(recorded, delivered).await.unwrap();
    let after = now + super::deliveries::CLAIM_MS + 10;
    let taken_over = a.due_deliveries(after, 100, 100).await.unwrap();
    assert_eq!(taken_over.len(), 11, "{taken_over:?}");
    assert!(taken_over.iter().all(|d| d.id != recorded));
    assert!(rest.iter().all(|d| taken_over.iter().any(|t| t.id == d.id)));
}

#[tokio::test]
async fn processes_count_each_other_by_their_heartbeats() {
    let db = database!("processes_count_each_other_by_their_heartbeats");
    let (a, b) = (open(&db).await, open(&db).await);
    assert_eq!(a.heartbeat("proc-a").await.unwrap(), 1);
    assert_eq!(b.heartbeat("proc-b").await.unwrap(), 2);
    assert_eq!(a.heartbeat("proc-a").await.unwrap(), 2);
    a.leave("proc-a").await.unwrap();
    assert_eq!(b.heartbeat("proc-b").await.unwrap(), 1);
    // A process that stopped beating (killed) no longer counts once its lease ran out.
    db.execute("UPDATE processes SET expires_at = now() - INTERVAL '1 second' WHERE id = 'proc-b'");
    assert_eq!(a.heartbeat("proc-a").await.unwrap(), 1);
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
    use mandate_core::id::ReviewId;

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
        "INSERT INTO mandates (id, org_id, env, agent_id, terms, expires, status, created_ms)
         VALUES ('mnd_06h0v91accynrwvvmyfvhsvqh8', 'org_1', 'sandbox', 'agt_buyer',
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

/// Two processes starting at once on an empty database agree on one signing key per
/// environment, and both serve it.
#[tokio::test]
async fn processes_starting_at_once_share_one_signing_key_per_environment() {
    let db = database!("processes_starting_at_once_share_one_signing_key_per_environment");
    let (a, b) = (open(&db).await, open(&db).await);
    // Each process would store bytes of its own: one of them is stored, for both.
    let seal_a = |_kid: &str| -> Result<Vec<u8>, StorageError> { Ok(vec![0xa; 32]) };
    let seal_b = |_kid: &str| -> Result<Vec<u8>, StorageError> { Ok(vec![0xb; 32]) };
    let now = ms(NOW);
    let (ra, rb) = std::thread::scope(|scope| {
        let ta = scope.spawn(|| a.ensure_signing_key(Env::Live, &seal_a, now));
        let tb = scope.spawn(|| b.ensure_signing_key(Env::Live, &seal_b, now));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    ra.unwrap();
    rb.unwrap();
    let (ka, kb) = (
        a.signing_keys_now(0).unwrap(),
        b.signing_keys_now(0).unwrap(),
    );
    assert_eq!(ka.len(), 1);
    assert_eq!(ka[0].kid, "live-1");
    assert_eq!(ka[0].secret, kb[0].secret);
}

/// A key-encryption key rotation replaces every stored secret at once, only if the keys
/// are still exactly those it read; the replaced row versions are rewritten away.
#[tokio::test]
async fn signing_key_secrets_are_replaced_all_at_once_or_not_at_all() {
    use crate::storage::admin::SecretChange;

    let db = database!("signing_key_secrets_are_replaced_all_at_once_or_not_at_all");
    let store = open(&db).await;
    let seal = |kid: &str| -> Result<Vec<u8>, StorageError> { Ok(kid.as_bytes().to_vec()) };
    store.ensure_signing_key(Env::Live, &seal, 0).unwrap();
    store.ensure_signing_key(Env::Sandbox, &seal, 0).unwrap();
    store.rotate_signing_key(Env::Live, &seal, 10).unwrap();
    let all = store.all_signing_keys().unwrap();
    let kids: Vec<&str> = all.iter().map(|k| k.kid.as_str()).collect();
    assert_eq!(kids, ["live-1", "live-2", "sandbox-1"]);
    let changes: Vec<SecretChange> = all
        .iter()
        .map(|k| SecretChange {
            kid: k.kid.clone(),
            from: k.secret.clone(),
            to: format!("sealed {}", k.kid).into_bytes(),
        })
        .collect();
    // A key missing from the list, or one whose secret changed since: nothing is written.
    assert!(!store.replace_signing_key_secrets(&changes[..2]).unwrap());
    let mut stale = changes.clone();
    stale[1].from = b"something else".to_vec();
    assert!(!store.replace_signing_key_secrets(&stale).unwrap());
    assert_eq!(store.all_signing_keys().unwrap()[1].secret, b"live-2");
    let file = "SELECT pg_relation_filenode('signing_keys')::BIGINT";
    let before = db.number(file);
    assert!(store.replace_signing_key_secrets(&changes).unwrap());
    let after: Vec<Vec<u8>> = store
        .all_signing_keys()
        .unwrap()
        .into_iter()
        .map(|k| k.secret)
        .collect();
    assert_eq!(
        after,
        [&b"sealed live-1"[..], b"sealed live-2", b"sealed sandbox-1"]
    );
    // Rewritten into a new file: the old row versions are not in the table's file.
    assert_ne!(db.number(file), before);
}

/// When `mandate.expiring` is due for a mandate expiring on `expires` (as
/// `workers::timers::expiring_at`, which storage may not import): 00:00 UTC seven days before.
fn expiring_at(expires: time::Date) -> time::OffsetDateTime {
    (expires - time::Duration::days(7)).midnight().assume_utc()
}

/// The timers' decisions as the worker makes them (`workers::timers`, above storage): an
/// expired pending review with its event; `mandate.expiring` once, when due.
fn expire(
    review: &mandate_core::review::Review,
    now: time::OffsetDateTime,
) -> Result<Option<crate::storage::timers::ReviewExpiry>, crate::storage::StorageError> {
    Ok(review
        .expire(now)
        .ok()
        .map(|review| crate::storage::timers::ReviewExpiry {
            event: crate::storage::events::NewEvent {
                event_type: "decision.resolved",
                data: serde_json::to_value(&review).unwrap(),
            },
            review,
            at_ms: ms(now),
        }))
}

fn fire(
    mandate: &mandate_core::mandate::Mandate,
    fired: bool,
    now: time::OffsetDateTime,
) -> Option<crate::storage::timers::ExpiringEvent> {
    (!fired && now >= expiring_at(mandate.terms.expires)).then(|| {
        crate::storage::timers::ExpiringEvent {
            event: crate::storage::events::NewEvent {
                event_type: "mandate.expiring",
                data: mandate.to_json(now),
            },
            at_ms: ms(now),
        }
    })
}

/// A decision of `agent` with id `id`, as the decision service makes one.
fn decision(id: &str, agent: &str) -> crate::model::decision::Decision {
    use mandate_core::claims::{RequestClaims, VerdictClaims};
    use mandate_core::id::{AgentId, DecisionId, Nonce};
    use mandate_core::names::{Category, Currency, Recipient};
    use mandate_core::policy::{Mode, Verdict};
    crate::model::decision::Decision {
        claims: VerdictClaims {
            ap2_mandate: None,
            ap2_transaction: None,
            x402_payment: None,
            iss: "https://verdicts.test".into(),
            jti: DecisionId::parse(id).unwrap(),
            iat: 0,
            exp: 300,
            verdict: Verdict::Allow,
            policy_verdict: Verdict::Allow,
            mandate: None,
            policy_version: "pol_2026-11-22.1".into(),
            nonce: Nonce::from_random(crate::clock::random16()),
            request: RequestClaims {
                agent: AgentId::parse(agent).unwrap(),
                amount: mandate_core::amount::Amount::parse("1.25").unwrap(),
                currency: Currency::parse("USD").unwrap(),
                recipient: Recipient::parse("vendor:x").unwrap(),
                category: Category::parse("software").unwrap(),
            },
        },
        reason: None,
        mode: Mode::Enforce,
        supersedes: None,
        review: None,
        created_ms: ms(NOW),
        is_request: true,
        review_state: None,
        signature: None,
    }
}

/// `decision(id, agent)` as the writers take it: org_1's sandbox, no review or
/// idempotency record, the agent's state read at `version` with its `seq` row `agent_seq`.
fn new_decision(
    id: &str,
    agent: &str,
    agent_seq: i64,
    version: i64,
) -> crate::storage::deciding::NewDecision {
    crate::storage::deciding::NewDecision {
        org: Arc::from("org_1"),
        env: Env::Sandbox,
        decision: decision(id, agent),
        review: None,
        idempotency: None,
        hint: crate::storage::deciding::AgentHint {
            seq: Some(agent_seq),
            month_marked: None,
            version,
        },
        accepts: None,
    }
}

/// A group in which one decision fails is rolled back and each decision stored again
/// alone: the others are stored, the failing one gets its error, and a decision whose agent
/// changed is refused without spoiling the group.
#[tokio::test]
async fn a_failing_decision_costs_the_others_of_its_group_nothing() {
    use crate::storage::deciding::Recorded;
    use crate::storage::decisions::DecisionStore;

    let db = database!("a_failing_decision_costs_the_others_of_its_group_nothing");
    let store = open(&db).await;
    seed(&db);
    db.execute(
        "INSERT INTO agents (id, org_id, env, created_ms) VALUES ('agt_two', 'org_1', 'sandbox', 0), ('agt_three', 'org_1', 'sandbox', 0), ('agt_four', 'org_1', 'sandbox', 0);",
    );
    let seq = |agent: &str| db.number(&format!("SELECT seq FROM agents WHERE id = '{agent}'"));
    let new = |id: &str, agent: &str, version: i64| new_decision(id, agent, seq(agent), version);
    // One writer: the four go out as one group.
    let writers = super::writer::Writers::start(store.pool(), 1);
    let (one, two, three, four) = tokio::join!(
        writers.record(new("dec_a", "agt_buyer", 0)),
        // dec_1 exists already (seed): this insert fails.
        writers.record(new("dec_1", "agt_two", 0)),
        writers.record(new("dec_c", "agt_three", 0)),
        // Its state was read at a version the agent has left.
        writers.record(new("dec_d", "agt_four", 7)),
    );
    assert!(
        matches!(one, Ok(Recorded::Stored(h)) if h.version == 1),
        "{one:?}"
    );
    assert!(matches!(two, Err(StorageError::Backend(_))), "{two:?}");
    assert!(matches!(three, Ok(Recorded::Stored(_))), "{three:?}");
    assert!(matches!(four, Ok(Recorded::Changed(_))), "{four:?}");
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decisions WHERE id IN ('dec_a', 'dec_c', 'dec_d')"),
        2
    );
    assert_eq!(
        db.number("SELECT COALESCE(SUM(version), 0)::BIGINT FROM agents"),
        2
    );
    // A decision that fails alone, with nothing after it, leaves no claim open either:
    // every claim of a rolled-back group is cleared, so readers are not held below it.
    let again = writers.record(new("dec_1", "agt_two", 0)).await;
    assert!(matches!(again, Err(StorageError::Backend(_))), "{again:?}");
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decision_claims WHERE first_seq IS NOT NULL"),
        0
    );
    let stored = db.number("SELECT MAX(seq) FROM decisions");
    assert!(store.settled_decision_seq().await.unwrap() >= stored);
}

/// The watermark readers stop at stays below a claim still open, even with decisions above
/// it committed; a claim left open by a process that died is swept after a while and the
/// watermark goes on; a group whose claim was swept cannot insert its decisions.
#[tokio::test]
async fn readers_stop_below_an_open_claim_and_a_dead_processs_claim_is_swept() {
    use crate::storage::deciding::Recorded;
    use crate::storage::decisions::DecisionStore;

    let db = database!("readers_stop_below_an_open_claim_and_a_dead_processs_claim_is_swept");
    let store = open(&db).await;
    seed(&db);
    assert_eq!(store.settled_decision_seq().await.unwrap(), 1);
    // A writer of a process that then died claimed five seqs (2 to 6) and never committed.
    let claimed = {
        let c = store.pool().get().await.unwrap();
        let row = c
            .query_one(super::claims::CLAIM, &[&"dead-0", &5i64])
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    assert_eq!(claimed, 2);
    // A live writer's decision is committed above the claim.
    let writers = super::writer::Writers::start(store.pool(), 1);
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    let stored = writers
        .record(new_decision("dec_live", "agt_buyer", agent_seq, 0))
        .await;
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    let live_seq = db.number("SELECT seq FROM decisions WHERE id = 'dec_live'");
    assert_eq!(live_seq, 7);
    // Readers stop below the open claim: seqs 2 to 6 might still be committed.
    assert_eq!(store.settled_decision_seq().await.unwrap(), 1);
    // Four seconds on it still stands (a group of a stalled database may still commit)...
    db.execute(
        "UPDATE decision_claims SET claimed_at = now() - INTERVAL '4 seconds' WHERE writer = 'dead-0'",
    );
    assert_eq!(store.settled_decision_seq().await.unwrap(), 1);
    // ...and past five seconds, longer than a live group runs, it is swept and readers go on.
    db.execute(
        "UPDATE decision_claims SET claimed_at = now() - INTERVAL '6 seconds' WHERE writer = 'dead-0'",
    );
    assert_eq!(store.settled_decision_seq().await.unwrap(), 7);
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decision_claims WHERE writer = 'dead-0'"),
        0
    );
    // Had that process been alive, its group's insert would find no claim and fail (the
    // transaction rolled back, its decisions stored again alone): nothing lands at or below
    // the watermark after readers passed it.
    let c = store.pool().get().await.unwrap();
    let mut batch = super::decisions::Batch::default();
    let late = decision("dec_late", "agt_buyer");
    batch.push(
        agent_seq,
        super::decisions::Params::of("org_1", Env::Sandbox, &late),
    );
    let first = claimed;
    let mut values = batch.values(&first).to_vec();
    let writer = "dead-0".to_string();
    values.push(&writer);
    let refused = c
        .execute(super::decisions::INSERT_CLAIMED.as_str(), &values)
        .await
        .expect_err("a group whose claim was swept inserts nothing");
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::NOT_NULL_VIOLATION)
    );
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decisions WHERE id = 'dec_late'"),
        0
    );
}

/// A decision inserted outside the writers' groups (an approved review's) takes its seq from
/// the counter row in its own transaction: until that commits, the watermark stays below it
/// and a writer's claim waits, so the decision can never land behind what readers have read.
#[tokio::test]
async fn a_decision_inserted_in_its_own_transaction_holds_the_watermark_until_it_commits() {
    use crate::storage::deciding::Recorded;
    use crate::storage::decisions::DecisionStore;

    let db = database!("a_decision_inserted_in_its_own_transaction_holds_the_watermark");
    let store = open(&db).await;
    seed(&db);
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    // The approval's transaction, open: its decision has seq 2, not yet committed.
    let mut approving = store.pool().get().await.unwrap();
    let tx = approving.transaction().await.unwrap();
    super::decisions::insert(
        &tx,
        "org_1",
        Env::Sandbox,
        agent_seq,
        &decision("dec_approved", "agt_buyer"),
    )
    .await
    .unwrap();
    assert_eq!(store.settled_decision_seq().await.unwrap(), 1);
    // A writer's group meanwhile: its claim waits for the counter row, so it cannot commit
    // a seq above the approval's before the approval commits.
    let writers = super::writer::Writers::start(store.pool(), 1);
    let mut group =
        Box::pin(writers.record(new_decision("dec_grouped", "agt_buyer", agent_seq, 0)));
    let waited = tokio::time::timeout(std::time::Duration::from_millis(300), &mut group).await;
    assert!(
        waited.is_err(),
        "the group committed past an open seq: {waited:?}"
    );
    assert_eq!(store.settled_decision_seq().await.unwrap(), 1);
    tx.commit().await.unwrap();
    let stored = group.await;
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    assert_eq!(
        db.number("SELECT seq FROM decisions WHERE id = 'dec_approved'"),
        2
    );
    assert_eq!(
        db.number("SELECT seq FROM decisions WHERE id = 'dec_grouped'"),
        3
    );
    assert_eq!(store.settled_decision_seq().await.unwrap(), 3);
}
