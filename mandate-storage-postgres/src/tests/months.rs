//! An agent's allows since the start of its window, read through `decisions_by_agent` from
//! the month marks of `decision_months` (migration 0014): what the claims and the
//! decisions stored outside the groups mark, what the reads find, and what they cost.

use super::statement_costs::one_text;
use super::writers::{new_decision, one_writer, seed_four_agents};
use super::*;
use crate::PgTx;
use mandate_core::{AgentId, MandateId};
use mandate_storage::clock::month_index;
use mandate_storage::deciding::Recorded;

const OCTOBER_LAST_MS: time::OffsetDateTime = datetime!(2026-10-31 23:59:59.999 UTC);
const NOVEMBER: time::OffsetDateTime = datetime!(2026-11-01 00:00 UTC);
const DECEMBER: time::OffsetDateTime = datetime!(2026-12-01 00:00 UTC);

/// `id` of `agent` (its key `agent_seq`, read at `version`), an allow under `mnd_1` made
/// at `at`.
fn allow_at(
    id: &str,
    agent: &str,
    agent_seq: i64,
    version: i64,
    at: time::OffsetDateTime,
) -> mandate_storage::deciding::NewDecision {
    let mut new = new_decision(id, agent, agent_seq, version);
    new.decision.created_ms = ms(at);
    new.decision.claims.mandate = Some(MandateId::parse("mnd_1").unwrap());
    new
}

/// The allows of `agent` under `mnd_1` since `since`, as the engine reads them for a limit
/// over the mandate's life.
async fn allowed_since(
    store: &PostgresStore,
    agent: &str,
    since: time::OffsetDateTime,
) -> Vec<i64> {
    let mut c = store.pool().get().await.unwrap();
    let tx = c.transaction().await.unwrap();
    crate::decisions::allowed_since(
        &PgTx::of_transaction(&tx),
        "org_1",
        Env::Sandbox,
        &AgentId::parse(agent).unwrap(),
        &MandateId::parse("mnd_1").unwrap(),
        ms(since),
    )
    .await
    .unwrap()
    .into_iter()
    .map(|(_, at)| at)
    .collect()
}

/// A group names the month of its latest decision, marked with the first seq of its
/// block unless marked already; a decision stored outside the groups marks its own month
/// with its seq. A read from a month on finds every allow of that month and later, and
/// only those, even where a group spans two months and only the later one is marked.
#[tokio::test]
async fn a_groups_claim_marks_its_latest_month_and_reads_start_there() {
    let db = database!("a_groups_claim_marks_its_latest_month_and_reads_start_there");
    let store = open(&db).await;
    seed_four_agents(&db);
    let seq = |agent: &str| db.number(&format!("SELECT seq FROM agents WHERE id = '{agent}'"));
    // One writer, so the two go out as one group: October's last millisecond and November's
    // first, in one block of seqs.
    let writers = one_writer(&store);
    let (october, november) = tokio::join!(
        writers.record(allow_at(
            "dec_oct",
            "agt_two",
            seq("agt_two"),
            0,
            OCTOBER_LAST_MS
        )),
        writers.record(allow_at(
            "dec_nov",
            "agt_buyer",
            seq("agt_buyer"),
            0,
            NOVEMBER
        )),
    );
    assert!(matches!(october, Ok(Recorded::Stored(_))), "{october:?}");
    assert!(matches!(november, Ok(Recorded::Stored(_))), "{november:?}");
    let block = db.number("SELECT MIN(seq) FROM decisions WHERE id IN ('dec_oct', 'dec_nov')");
    let marks = || {
        db.one::<String>(
            "SELECT COALESCE(string_agg(month || ':' || first_seq, ',' ORDER BY month), '')
             FROM decision_months WHERE org_id = 'org_1'",
        )
    };
    assert_eq!(marks(), format!("{}:{block}", month_index(ms(NOVEMBER))));
    assert_eq!(
        allowed_since(&store, "agt_two", datetime!(2026-10-01 00:00 UTC)).await,
        [ms(OCTOBER_LAST_MS)]
    );
    assert!(allowed_since(&store, "agt_two", NOVEMBER).await.is_empty());
    assert_eq!(
        allowed_since(&store, "agt_buyer", NOVEMBER).await,
        [ms(NOVEMBER)]
    );
    // December has no mark and no decision: nothing to read.
    assert!(
        allowed_since(&store, "agt_buyer", DECEMBER)
            .await
            .is_empty()
    );

    // A decision stored outside the groups (an approval) in a month no claim named marks it
    // with its own seq.
    let mut approving = store.pool().get().await.unwrap();
    let tx = approving.transaction().await.unwrap();
    let mut approval = allow_at("dec_approved", "agt_three", seq("agt_three"), 0, DECEMBER);
    approval.decision.is_request = false;
    crate::decisions::insert(
        &PgTx::of_transaction(&tx),
        "org_1",
        Env::Sandbox,
        seq("agt_three"),
        &approval.decision,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let approved_seq = db.number("SELECT seq FROM decisions WHERE id = 'dec_approved'");
    assert_eq!(
        marks(),
        format!(
            "{}:{block},{}:{approved_seq}",
            month_index(ms(NOVEMBER)),
            month_index(ms(DECEMBER))
        )
    );
    assert_eq!(
        allowed_since(&store, "agt_three", DECEMBER).await,
        [ms(DECEMBER)]
    );
    // A later group of December leaves the mark as it is.
    let later = writers
        .record(allow_at(
            "dec_later",
            "agt_four",
            seq("agt_four"),
            0,
            DECEMBER,
        ))
        .await;
    assert!(matches!(later, Ok(Recorded::Stored(_))), "{later:?}");
    assert!(
        marks().ends_with(&format!(":{approved_seq}")),
        "{}",
        marks()
    );
    assert_eq!(
        allowed_since(&store, "agt_four", NOVEMBER).await,
        [ms(DECEMBER)]
    );
}

/// The decision path's read of an agent's allows since the start of its month costs the
/// same however many decisions the agent made in the months before: it starts at the
/// month's mark, not at the agent's first decision.
#[tokio::test]
async fn an_agents_allows_this_month_cost_the_same_however_long_its_history() {
    let db = database!("an_agents_allows_this_month_cost_the_same_however_long_its_history");
    let store = open(&db).await;
    seed(&db);
    // A long September history of allows of the agent (the series below), marked as
    // migration 0014 marks a history, and its current mandate.
    let september = ms(datetime!(2026-09-10 00:00 UTC));
    db.execute(&format!(
        "INSERT INTO mandates (seq, id, org_id, env, agent_id, terms, expires, status, created_ms)
         VALUES (1, 'mnd_1', 'org_1', 'sandbox', 'agt_buyer', '{{}}', '2027-01-01', 'active', 0);
         INSERT INTO decisions (seq, id, org_id, env, agent_id, agent_seq, mandate_id, verdict,
            policy_verdict, mode, amount, currency, recipient, category, nonce,
            policy_version, iss, iat, exp, created_ms, is_request)
         SELECT n, 'dec_s' || n, 'org_1', 'sandbox', 'agt_buyer', 1, 'mnd_1', 'allow', 'allow',
            'enforce', '1.00', 'USD', 'vendor:x', 'software', 'n_s' || n, 'pol', 'iss', 0, 300,
            {september} + n, true
         FROM generate_series(2, 5001) AS n;
         UPDATE org_counters SET value = 5001 WHERE org_id = 'org_1' AND name = 'decisions';
         INSERT INTO decision_months VALUES ('org_1', {}, 2);
         ANALYZE decisions;",
        month_index(september)
    ));
    let agent_seq = db.number("SELECT seq FROM agents WHERE id = 'agt_buyer'");
    let writers = one_writer(&store);
    let stored = writers
        .record(allow_at("dec_nov", "agt_buyer", agent_seq, 0, NOVEMBER))
        .await;
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    let client = store.pool().get().await.unwrap();
    let read = |since: time::OffsetDateTime| {
        format!(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE allowed ('org_1', 'sandbox', 'agt_buyer', {}, {})",
            ms(since),
            month_index(ms(since))
        )
    };
    client
        .batch_execute(&format!(
            "PREPARE allowed (TEXT, TEXT, TEXT, BIGINT, BIGINT) AS {}",
            crate::deciding::ALLOWED_SQL
        ))
        .await
        .unwrap();
    let plan = |json: String| -> (i64, i64) {
        let plan: serde_json::Value = serde_json::from_str(&json).unwrap();
        let top = &plan[0]["Plan"];
        let buffers = top["Shared Hit Blocks"].as_i64().unwrap_or(0)
            + top["Shared Read Blocks"].as_i64().unwrap_or(0);
        (top["Actual Rows"].as_i64().unwrap(), buffers)
    };
    let (rows, buffers) = plan(one_text(&client, &read(NOVEMBER)).await);
    assert_eq!(rows, 1, "November's allows");
    assert!(
        buffers <= 16,
        "{buffers} buffers read for one allow this month beside the agent's September history"
    );
    // From September on, all of them: the same statement, walking the history.
    let (rows, _) = plan(one_text(&client, &read(datetime!(2026-09-01 00:00 UTC))).await);
    assert_eq!(rows, 5001);
}

/// A writer marks a month once: its next groups of that month find it in what it knows and
/// send no mark (here a mark removed behind its back stays removed), while another writer,
/// which does not know it, marks it again.
#[tokio::test]
async fn a_writer_marks_a_month_once() {
    let db = database!("a_writer_marks_a_month_once");
    let store = open(&db).await;
    seed_four_agents(&db);
    let seq = |agent: &str| db.number(&format!("SELECT seq FROM agents WHERE id = '{agent}'"));
    let version =
        |agent: &str| db.number(&format!("SELECT version FROM agents WHERE id = '{agent}'"));
    let marks = || db.number("SELECT COUNT(*) FROM decision_months WHERE org_id = 'org_1'");
    let writers = one_writer(&store);
    let stored = writers
        .record(allow_at("dec_a", "agt_two", seq("agt_two"), 0, NOVEMBER))
        .await;
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    let november = month_index(ms(NOVEMBER));
    assert_eq!(marks(), 1);
    db.execute("DELETE FROM decision_months");
    let stored = writers
        .record(allow_at(
            "dec_b",
            "agt_two",
            seq("agt_two"),
            version("agt_two"),
            NOVEMBER,
        ))
        .await;
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    assert_eq!(marks(), 0, "the writer knew November was marked");
    let other = one_writer(&store);
    let stored = other
        .record(allow_at(
            "dec_c",
            "agt_three",
            seq("agt_three"),
            0,
            NOVEMBER,
        ))
        .await;
    assert!(matches!(stored, Ok(Recorded::Stored(_))), "{stored:?}");
    assert_eq!(
        db.number(&format!(
            "SELECT first_seq FROM decision_months WHERE org_id = 'org_1' AND month = {november}"
        )),
        db.number("SELECT seq FROM decisions WHERE id = 'dec_c'")
    );
}
