//! The PostgreSQL engine's decision writers against a real database: a group's failing
//! decision costs the others nothing, a claim of a process of the previous release holds
//! readers below it, and a decision stored outside the groups holds the watermark, and the
//! groups, until it commits.

use super::*;

/// One writer on `store`'s writers' pool, never waiting for a fuller group.
pub(super) fn one_writer(store: &PostgresStore) -> crate::writer::Writers {
    crate::writer::Writers::start(
        &store.writers_pool().unwrap(),
        None,
        1,
        Some(std::time::Duration::ZERO),
    )
}

/// `seed`, and org_1's sandbox agents `agt_two`, `agt_three` and `agt_four` beside
/// `agt_buyer`.
pub(super) fn seed_four_agents(db: &TestDb) {
    seed(db);
    db.execute(
        "INSERT INTO agents (seq, id, org_id, env, created_ms) VALUES (2, 'agt_two', 'org_1', 'sandbox', 0), (3, 'agt_three', 'org_1', 'sandbox', 0), (4, 'agt_four', 'org_1', 'sandbox', 0);",
    );
}

/// A decision of `agent` with id `id`, as the decision service makes one.
fn decision(id: &str, agent: &str) -> mandate_storage::model::decision::Decision {
    use mandate_core::{
        AgentId, AuthorizationRequest, Category, Currency, DecisionId, Mode, Nonce, Recipient,
        Verdict, VerdictClaims,
    };
    mandate_storage::model::decision::Decision {
        claims: VerdictClaims {
            bindings: mandate_core::Bindings::default(),
            iss: "https://verdicts.test".into(),
            jti: DecisionId::parse(id).unwrap(),
            iat: 0,
            exp: 300,
            verdict: Verdict::Allow,
            policy_verdict: Verdict::Allow,
            mandate: None,
            policy_version: "pol_2026-11-22.1".into(),
            nonce: Nonce::from_random(mandate_storage::clock::random16()),
            request: AuthorizationRequest {
                agent: AgentId::parse(agent).unwrap(),
                amount: mandate_core::Amount::parse("1.25").unwrap(),
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
pub(super) fn new_decision(
    id: &str,
    agent: &str,
    agent_seq: i64,
    version: i64,
) -> mandate_storage::deciding::NewDecision {
    mandate_storage::deciding::NewDecision {
        org: Arc::from("org_1"),
        env: Env::Sandbox,
        decision: decision(id, agent),
        review: None,
        idempotency: None,
        hint: mandate_storage::deciding::AgentHint {
            seq: Some(agent_seq),
            month_marked: None,
            version,
        },
        accepts: None,
    }
}

/// `new` opening a review (with its `decision.review_pending` event).
pub(super) fn opening_review(
    mut new: mandate_storage::deciding::NewDecision,
) -> mandate_storage::deciding::NewDecision {
    use mandate_protocol::{id::ReviewId, review::Review};
    let decision = new.decision.claims.jti.clone();
    let review = Review::open(ReviewId::from_random([7; 16]), decision, NOW);
    new.review = Some((review, r#"{"id":"dec_live"}"#.into()));
    new
}

/// A claim of `seqs` decision seqs and `events` event seqs in org_1 by writer `dead-0` of a
/// process of the previous release that then died (migration 0015's `mandate_claim`): the
/// first of each (of the event seqs, when any are claimed).
async fn dead_claim(store: &PostgresStore, seqs: i64, events: i64) -> (i64, Option<i64>) {
    let c = store.pool().get().await.unwrap();
    let row = c
        .query_one(
            "SELECT claimed_seq, claimed_event FROM mandate_claim($1, $2, $3, $4, $5, $6)",
            &[
                &"org_1",
                &"dead-0",
                &vec!["org_1"],
                &vec![seqs],
                &vec![events],
                &vec![mandate_storage::clock::month_index(ms(NOW))],
            ],
        )
        .await
        .unwrap();
    (row.get::<_, i64>(0), row.get::<_, Option<i64>>(1))
}

/// A connection whose open transaction took org_1's next event seq outside the writers'
/// groups (as a review resolved or a mandate revoked does), holding the events counter row.
async fn appending_outside(store: &PostgresStore) -> deadpool_postgres::Object {
    let c = store.pool().get().await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.execute(crate::record::EVENT_SEQ, &[&"org_1"])
        .await
        .unwrap();
    c
}

/// A group in which one decision fails is rolled back and each decision stored again
/// alone: the others are stored, the failing one gets its error, and a decision whose agent
/// changed is refused without spoiling the group.
#[tokio::test]
async fn a_failing_decision_costs_the_others_of_its_group_nothing() {
    use mandate_storage::deciding::Recorded;
    use mandate_storage::decisions::DecisionStore;

    let db = database!("a_failing_decision_costs_the_others_of_its_group_nothing");
    let store = open(&db).await;
    seed_four_agents(&db);
    let seq = |agent: &str| db.number(&format!("SELECT seq FROM agents WHERE id = '{agent}'"));
    let new = |id: &str, agent: &str, version: i64| new_decision(id, agent, seq(agent), version);
    // One writer: the four go out as one group.
    let writers = one_writer(&store);
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
    // A decision that fails alone, with nothing after it, leaves no gap and holds readers up
    // in nothing: its group's counter move was rolled back with the rest.
    let again = writers.record(new("dec_1", "agt_two", 0)).await;
    assert!(matches!(again, Err(StorageError::Backend(_))), "{again:?}");
    let stored = db.number("SELECT MAX(seq) FROM decisions");
    assert_eq!(
        db.number("SELECT value FROM org_counters WHERE org_id = 'org_1' AND name = 'decisions'"),
        stored
    );
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), stored);
}

/// During a rolling upgrade: the watermark readers stop at stays below a claim of a process
/// of the previous release still open, even with this release's decisions above it
/// committed; a claim left open by a process that died is swept after a while and the
/// watermark goes on.
#[tokio::test]
async fn readers_stop_below_an_open_claim_and_a_dead_processs_claim_is_swept() {
    use mandate_storage::deciding::Recorded;
    use mandate_storage::decisions::DecisionStore;

    let db = database!("readers_stop_below_an_open_claim_and_a_dead_processs_claim_is_swept");
    let store = open(&db).await;
    seed(&db);
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 1);
    // A writer of a process that then died claimed five seqs (2 to 6) and never committed.
    let (claimed, _) = dead_claim(&store, 5, 0).await;
    assert_eq!(claimed, 2);
    // A live writer's decision is committed above the claim.
    let writers = one_writer(&store);
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    let stored = writers
        .record(new_decision("dec_live", "agt_buyer", agent_seq, 0))
        .await;
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    let live_seq = db.number("SELECT seq FROM decisions WHERE id = 'dec_live'");
    assert_eq!(live_seq, 7);
    // Readers stop below the open claim: seqs 2 to 6 might still be committed.
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 1);
    // Four seconds on it still stands (a group of a stalled database may still commit)...
    db.execute(
        "UPDATE decision_claims SET claimed_at = now() - INTERVAL '4 seconds' WHERE writer = 'dead-0'",
    );
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 1);
    // ...and past five seconds, longer than a live group runs, it is swept and readers go on.
    db.execute(
        "UPDATE decision_claims SET claimed_at = now() - INTERVAL '6 seconds' WHERE writer = 'dead-0'",
    );
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 7);
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decision_claims WHERE writer = 'dead-0'"),
        0
    );
}

/// A decision inserted outside the writers' groups (an approved review's) takes its seq from
/// the counter row in its own transaction: until that commits, the watermark stays below it
/// and a writer's group waits, so the decision can never land behind what readers have read.
#[tokio::test]
async fn a_decision_inserted_in_its_own_transaction_holds_the_watermark_until_it_commits() {
    use mandate_storage::deciding::Recorded;
    use mandate_storage::decisions::DecisionStore;

    let db = database!("a_decision_inserted_in_its_own_transaction_holds_the_watermark");
    let store = open(&db).await;
    seed(&db);
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    // The approval's transaction, open: its decision has seq 2, not yet committed.
    let mut approving = store.pool().get().await.unwrap();
    let tx = approving.transaction().await.unwrap();
    crate::decisions::insert(
        &crate::PgTx::of_transaction(&tx),
        "org_1",
        Env::Sandbox,
        agent_seq,
        &decision("dec_approved", "agt_buyer"),
    )
    .await
    .unwrap();
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 1);
    // A writer's group meanwhile: it waits for the counter row, so it cannot commit a seq
    // above the approval's before the approval commits.
    let writers = one_writer(&store);
    let mut group =
        Box::pin(writers.record(new_decision("dec_grouped", "agt_buyer", agent_seq, 0)));
    let waited = tokio::time::timeout(std::time::Duration::from_millis(300), &mut group).await;
    assert!(
        waited.is_err(),
        "the group committed past an open seq: {waited:?}"
    );
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 1);
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
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 3);
}

/// A group's plain decisions move their agents' versions in one statement, and still each
/// on its own terms: a decision whose agent left the version it was read at, or whose
/// environment is no longer in the mode it was made in, is refused alone, while the others
/// of the run are stored and their agents' versions move by one.
#[tokio::test]
async fn a_run_of_version_moves_refuses_only_its_stale_decisions() {
    use mandate_storage::deciding::Recorded;

    let db = database!("a_run_of_version_moves_refuses_only_its_stale_decisions");
    let store = open(&db).await;
    seed_four_agents(&db);
    let seq = |agent: &str| db.number(&format!("SELECT seq FROM agents WHERE id = '{agent}'"));
    let new = |id: &str, agent: &str, version: i64| new_decision(id, agent, seq(agent), version);
    let mut observed = new("dec_d", "agt_four", 0);
    observed.decision.mode = mandate_core::Mode::Observe;
    let writers = one_writer(&store);
    let (one, two, three, four) = tokio::join!(
        writers.record(new("dec_a", "agt_buyer", 0)),
        // Read at a version the agent has left.
        writers.record(new("dec_b", "agt_two", 3)),
        writers.record(new("dec_c", "agt_three", 0)),
        // Made in observe while the sandbox enforces.
        writers.record(observed),
    );
    assert!(
        matches!(one, Ok(Recorded::Stored(h)) if h.version == 1),
        "{one:?}"
    );
    assert!(matches!(two, Ok(Recorded::Changed(_))), "{two:?}");
    assert!(
        matches!(three, Ok(Recorded::Stored(h)) if h.version == 1),
        "{three:?}"
    );
    assert!(matches!(four, Ok(Recorded::Changed(_))), "{four:?}");
    assert_eq!(
        db.number(
            "SELECT COUNT(*) FROM decisions WHERE id IN ('dec_a', 'dec_b', 'dec_c', 'dec_d')"
        ),
        2
    );
    let versions = db.number(
        "SELECT (SUM(version) FILTER (WHERE id IN ('agt_buyer', 'agt_three')) * 10
                + COALESCE(SUM(version) FILTER (WHERE id IN ('agt_two', 'agt_four')), 0))::BIGINT
         FROM agents",
    );
    assert_eq!(
        versions, 20,
        "agt_buyer and agt_three moved once, the others not"
    );
    let last = db.number("SELECT COUNT(*) FROM agents WHERE last_decision IN ('dec_a', 'dec_c')");
    assert_eq!(last, 2);
}

/// A decision's leaf hash is stored with its row, by the writers' groups and by an insert
/// in its own transaction alike, and the log's tail reads it back: the worker of another
/// process logs the decision without rebuilding its token. A row stored without one (the
/// seed's) is read as having none, which the worker rebuilds.
#[tokio::test]
async fn a_decisions_leaf_hash_is_stored_with_its_row_for_the_log() {
    use mandate_protocol::tlog::leaf_hash;
    use mandate_storage::log::LogStore;
    use mandate_storage::model::decision::TokenSignature;

    let db = database!("a_decisions_leaf_hash_is_stored_with_its_row_for_the_log");
    let store = open(&db).await;
    seed(&db);
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    let token = |n: u8| format!("h{n}.p.{}", "A".repeat(86));
    let signed = |id: &str, n: u8| {
        let mut d = new_decision(id, "agt_buyer", agent_seq, 0);
        d.decision.signature = TokenSignature::of("kid_1", &token(n));
        d
    };
    let writers = one_writer(&store);
    writers.record(signed("dec_grouped", 1)).await.unwrap();
    let mut conn = store.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    let mut alone = decision("dec_alone", "agt_buyer");
    alone.signature = TokenSignature::of("kid_1", &token(2));
    crate::decisions::insert(
        &crate::PgTx::of_transaction(&tx),
        "org_1",
        Env::Sandbox,
        agent_seq,
        &alone,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let tail = store
        .log_tail("org_1", Env::Sandbox, 10, None)
        .await
        .unwrap();
    let leaves: Vec<(&str, Option<_>)> = tail
        .decisions
        .iter()
        .map(|(_, id, leaf)| (id.as_str(), *leaf))
        .collect();
    assert_eq!(
        leaves,
        vec![
            ("dec_1", None),
            ("dec_grouped", Some(leaf_hash(token(1).as_bytes()))),
            ("dec_alone", Some(leaf_hash(token(2).as_bytes()))),
        ]
    );
}

/// A group's review takes its event's seq in the group's own transaction, above a claim of
/// event seqs of a process of the previous release; readers of the events stop below that
/// claim while it is open, as readers of the decisions do, and go on once the dead
/// process's claim is swept.
#[tokio::test]
async fn a_reviews_event_takes_a_claimed_seq_and_readers_stop_below_an_open_claim() {
    use mandate_storage::deciding::Recorded;
    use mandate_storage::events::EventStore;

    let db = database!("a_reviews_event_takes_a_claimed_seq_and_readers_stop_below_an_open_claim");
    let store = open(&db).await;
    seed(&db);
    // A writer of a process that then died claimed a decision seq and two event seqs.
    let (_, first_event) = dead_claim(&store, 1, 2).await;
    assert_eq!(first_event, Some(1));
    // A live writer's decision opens a review: its event takes the next seq.
    let writers = one_writer(&store);
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    let new = opening_review(new_decision("dec_live", "agt_buyer", agent_seq, 0));
    let stored = writers.record(new).await;
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    let event = "SELECT seq FROM events WHERE type = 'decision.review_pending'";
    assert_eq!(db.number(event), 3);
    assert_eq!(
        db.number("SELECT value FROM org_counters WHERE org_id = 'org_1' AND name = 'events'"),
        3
    );
    // The live group claimed nothing ahead: it took its seqs in its transaction.
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decision_claims WHERE writer <> 'dead-0'"),
        0
    );
    // Readers of the events stop below the open claim: seqs 1 and 2 might still commit.
    let page = || store.events_page("org_1", Env::Sandbox, None, i64::MAX, 100);
    assert!(page().await.unwrap().is_empty());
    let typed = store.events_page(
        "org_1",
        Env::Sandbox,
        Some("decision.review_pending"),
        i64::MAX,
        100,
    );
    assert!(typed.await.unwrap().is_empty());
    // Four seconds on the claim still stands; past five it is swept and readers go on.
    db.execute(
        "UPDATE decision_claims SET claimed_at = now() - INTERVAL '4 seconds' WHERE writer = 'dead-0'",
    );
    assert!(page().await.unwrap().is_empty());
    db.execute(
        "UPDATE decision_claims SET claimed_at = now() - INTERVAL '6 seconds' WHERE writer = 'dead-0'",
    );
    let seqs: Vec<i64> = page().await.unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![3]);
}

/// An event appended outside the groups (a review resolved) holds the events counter row
/// to its commit; a group opening a review waits for it, after its agents' rows (every
/// transaction takes counter rows last), and its event lies above the other's.
#[tokio::test]
async fn a_group_opening_a_review_waits_for_an_event_appended_outside_and_lies_above_it() {
    use mandate_storage::deciding::Recorded;

    let db =
        database!("a_group_opening_a_review_waits_for_an_event_appended_outside_and_lies_above_it");
    let store = open(&db).await;
    seed(&db);
    let appending = appending_outside(&store).await;
    let writers = one_writer(&store);
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    let new = opening_review(new_decision("dec_live", "agt_buyer", agent_seq, 0));
    let recording = tokio::spawn(async move { writers.record(new).await });
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert!(
        !recording.is_finished(),
        "the group waits for the event's commit"
    );
    // The group waits for the counter with its agent's row taken: that order, agents then
    // counters, is every transaction's.
    let other = store.pool().get().await.unwrap();
    other
        .execute(
            "SELECT 1 FROM agents WHERE id = 'agt_buyer' FOR UPDATE NOWAIT",
            &[],
        )
        .await
        .expect_err("the waiting group holds its agent's row");
    appending
        .execute(
            crate::record::EVENT,
            &[
                &"org_1",
                &"sandbox",
                &"evt_outside",
                &"mandate.revoked",
                &"{}",
                &0i64,
            ],
        )
        .await
        .unwrap();
    appending.batch_execute("COMMIT").await.unwrap();
    let stored = recording.await.unwrap();
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    assert_eq!(
        db.number("SELECT seq FROM events WHERE id = 'evt_outside'"),
        1
    );
    assert_eq!(
        db.number("SELECT seq FROM events WHERE type = 'decision.review_pending'"),
        2
    );
}

/// A group that opens no review takes no event seq: it is stored while an event appended
/// outside the groups holds the events counter, where one opening a review waits (above).
#[tokio::test]
async fn a_group_opening_no_review_does_not_wait_for_an_event_appended_outside() {
    use mandate_storage::deciding::Recorded;

    let db = database!("a_group_opening_no_review_does_not_wait_for_an_event_appended_outside");
    let store = open(&db).await;
    seed(&db);
    let appending = appending_outside(&store).await;
    let writers = one_writer(&store);
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    let new = new_decision("dec_plain", "agt_buyer", agent_seq, 0);
    let stored = tokio::time::timeout(std::time::Duration::from_secs(3), writers.record(new))
        .await
        .expect("a group opening no review does not wait for the events counter");
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    appending.batch_execute("ROLLBACK").await.unwrap();
}

/// A group takes its organizations' seqs in its own transaction and holds their counter rows
/// to its commit: another group of the same organization (another process's writer) waits
/// for that commit and takes the seqs after it, readers' watermark stays at the committed
/// counter meanwhile, and a group rolled back leaves no gap.
#[tokio::test]
async fn a_group_holds_its_counters_to_its_commit_so_seqs_commit_in_order() {
    use crate::record::{GroupOrgs, RECORD_CALL, RecordCall, RecordStatement};
    use mandate_storage::deciding::Recorded;
    use mandate_storage::decisions::DecisionStore;

    let db = database!("a_group_holds_its_counters_to_its_commit_so_seqs_commit_in_order");
    let store = open(&db).await;
    seed_four_agents(&db);
    let seq = |agent: &str| db.number(&format!("SELECT seq FROM agents WHERE id = '{agent}'"));
    // One process's group, its transaction left open after the call.
    let first =
        RecordStatement::of(&new_decision("dec_first", "agt_two", seq("agt_two"), 0)).unwrap();
    let orgs = GroupOrgs::of(&[&first], &Default::default());
    let call = RecordCall::of(&[&first], &orgs, true);
    let mut open_group = store.pool().get().await.unwrap();
    let tx = open_group.transaction().await.unwrap();
    let codes: Vec<i32> = tx
        .query_one(RECORD_CALL, &call.values())
        .await
        .unwrap()
        .get(0);
    assert_eq!(codes, vec![1]);
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 1);
    // Another process's group of the organization, for another agent: it waits.
    let writers = one_writer(&store);
    let mut second =
        Box::pin(writers.record(new_decision("dec_second", "agt_three", seq("agt_three"), 0)));
    let waited = tokio::time::timeout(std::time::Duration::from_millis(300), &mut second).await;
    assert!(
        waited.is_err(),
        "the second group committed first: {waited:?}"
    );
    tx.commit().await.unwrap();
    assert!(matches!(second.await, Ok(Recorded::Stored(_))));
    assert_eq!(
        db.number("SELECT seq FROM decisions WHERE id = 'dec_first'"),
        2
    );
    assert_eq!(
        db.number("SELECT seq FROM decisions WHERE id = 'dec_second'"),
        3
    );
    assert_eq!(store.settled_decision_seq("org_1").await.unwrap(), 3);
    // A group rolled back moves no counter: the next decision takes the next seq.
    let third =
        RecordStatement::of(&new_decision("dec_third", "agt_four", seq("agt_four"), 0)).unwrap();
    let orgs = GroupOrgs::of(&[&third], &Default::default());
    let call = RecordCall::of(&[&third], &orgs, true);
    let tx = open_group.transaction().await.unwrap();
    tx.query_one(RECORD_CALL, &call.values()).await.unwrap();
    tx.rollback().await.unwrap();
    let fourth = writers
        .record(new_decision("dec_fourth", "agt_four", seq("agt_four"), 0))
        .await;
    assert!(matches!(fourth, Ok(Recorded::Stored(_))), "{fourth:?}");
    assert_eq!(
        db.number("SELECT seq FROM decisions WHERE id = 'dec_fourth'"),
        4
    );
}
