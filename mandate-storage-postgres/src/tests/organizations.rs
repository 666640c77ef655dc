//! A group of the PostgreSQL writers holding the decisions of many organizations.

use super::writers::{new_decision, one_writer, opening_review, seed_four_agents};
use super::*;

/// On plain PostgreSQL a group holds the decisions of many organizations, and each
/// organization gets what a group of its own would: its decisions at the next seqs of its
/// own counter, in its agents' order, its review's event at the next seq of its events,
/// its month marked with its first seq in the group, and nothing claimed ahead; a decision
/// whose agent moved on is refused alone and takes no seq, so none is left as a gap.
#[tokio::test]
async fn a_group_of_many_organizations_takes_each_ones_seqs_as_its_own() {
    use mandate_storage::deciding::Recorded;
    use mandate_storage::decisions::DecisionStore;

    let db = database!("a_group_of_many_organizations_takes_each_ones_seqs_as_its_own");
    let store = open(&db).await;
    seed_four_agents(&db);
    db.execute(
        "INSERT INTO orgs VALUES ('org_2', 'bolt', 'pol_2026-11-22.1', 0), ('org_3', 'cask', 'pol_2026-11-22.1', 0);
         INSERT INTO org_counters VALUES ('org_2', 'decisions', 40), ('org_2', 'agents', 1),
            ('org_2', 'mandates', 0), ('org_2', 'events', 9), ('org_2', 'webhooks', 0),
            ('org_3', 'decisions', 700), ('org_3', 'agents', 2), ('org_3', 'mandates', 0),
            ('org_3', 'events', 0), ('org_3', 'webhooks', 0);
         INSERT INTO environments VALUES ('org_2', 'sandbox', 'enforce', 0), ('org_3', 'sandbox', 'enforce', 0);
         INSERT INTO agents (seq, id, org_id, env, created_ms) VALUES
            (1, 'agt_bolt', 'org_2', 'sandbox', 0), (1, 'agt_cask', 'org_3', 'sandbox', 0),
            (2, 'agt_keg', 'org_3', 'sandbox', 0);",
    );
    let of = |org: &str, id: &str, agent: &str, agent_seq: i64, version: i64| {
        let mut new = new_decision(id, agent, agent_seq, version);
        new.org = Arc::from(org);
        new
    };
    let writers = one_writer(&store);
    // One group (one writer, sent together): two of org_1, a review of org_2, two of org_3
    // of which one was read at a version its agent has left.
    let (a, b, c, d, e) = tokio::join!(
        writers.record(of("org_3", "dec_c1", "agt_cask", 1, 0)),
        writers.record(of("org_1", "dec_a2", "agt_two", 2, 0)),
        writers.record(opening_review(of("org_2", "dec_b1", "agt_bolt", 1, 0))),
        writers.record(of("org_3", "dec_c2", "agt_keg", 2, 5)),
        writers.record(of("org_1", "dec_a1", "agt_buyer", 1, 0)),
    );
    for stored in [&a, &b, &c, &e] {
        assert!(
            matches!(stored, Ok(Recorded::Stored(h)) if h.version == 1),
            "{stored:?}"
        );
    }
    assert!(matches!(d, Ok(Recorded::Changed(_))), "{d:?}");
    let seqs = db.one::<String>(
        "SELECT string_agg(org_id || ':' || id || '=' || seq, ' ' ORDER BY org_id, seq)
         FROM decisions WHERE id <> 'dec_1'",
    );
    // Each organization's decisions in its agents' order from its counter on (org_3's
    // refused decision took none).
    assert_eq!(
        seqs,
        "org_1:dec_a1=2 org_1:dec_a2=3 org_2:dec_b1=41 org_3:dec_c1=701"
    );
    assert_eq!(
        db.one::<String>(
            "SELECT string_agg(org_id || '=' || value, ' ' ORDER BY org_id) FROM org_counters
             WHERE name = 'decisions'"
        ),
        "org_1=3 org_2=41 org_3=701"
    );
    assert_eq!(
        db.one::<String>(
            "SELECT org_id || '=' || seq FROM events WHERE type = 'decision.review_pending'"
        ),
        "org_2=10"
    );
    assert_eq!(
        db.number("SELECT COUNT(*) FROM org_counters WHERE name = 'events' AND value <> 0"),
        1,
        "only org_2 took an event seq"
    );
    let month = mandate_storage::clock::month_index(ms(NOW));
    assert_eq!(
        db.one::<String>(&format!(
            "SELECT string_agg(org_id || '=' || first_seq, ' ' ORDER BY org_id)
             FROM decision_months WHERE month = {month}"
        )),
        "org_1=2 org_2=41 org_3=701"
    );
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decision_claims"),
        0,
        "nothing claimed ahead"
    );
    for org in ["org_1", "org_2", "org_3"] {
        let settled = store.settled_decision_seq(org).await.unwrap();
        let counter = db.number(&format!(
            "SELECT value FROM org_counters WHERE org_id = '{org}' AND name = 'decisions'"
        ));
        assert_eq!(settled, counter, "{org}'s readers read up to its counter");
    }
}
