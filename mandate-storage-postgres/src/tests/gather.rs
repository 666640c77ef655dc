//! A decision writer set to wait for a fuller group (`decision_gather_us`), against a real
//! database: what arrives during its wait is committed in the group that waited.

use super::*;

/// After a group of two (decisions are arriving), a writer set to wait takes a lone
/// decision, waits, and commits the decision that came during its wait in the same
/// transaction (one `xmin` for both rows); both are stored and answered.
#[tokio::test]
async fn what_arrives_during_a_writers_wait_is_committed_in_its_group() {
    use mandate_storage::deciding::Recorded;
    use std::time::{Duration, Instant};

    let db = database!("what_arrives_during_a_writers_wait_is_committed_in_its_group");
    let store = open(&db).await;
    super::writers::seed_four_agents(&db);
    let seq = |agent: &str| db.number(&format!("SELECT seq FROM agents WHERE id = '{agent}'"));
    let new = |id: &str, agent: &str| super::writers::new_decision(id, agent, seq(agent), 0);
    let writers = crate::writer::Writers::start(
        &store.writers_pool().unwrap(),
        None,
        1,
        Some(Duration::from_millis(300)),
    );
    let (a, b) = tokio::join!(
        writers.record(new("dec_a", "agt_buyer")),
        writers.record(new("dec_b", "agt_two")),
    );
    assert!(matches!(a, Ok(Recorded::Stored(_))), "{a:?}");
    assert!(matches!(b, Ok(Recorded::Stored(_))), "{b:?}");

    let started = Instant::now();
    let later = async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        writers.record(new("dec_d", "agt_four")).await
    };
    let (c, d) = tokio::join!(writers.record(new("dec_c", "agt_three")), later);
    assert!(matches!(c, Ok(Recorded::Stored(_))), "{c:?}");
    assert!(matches!(d, Ok(Recorded::Stored(_))), "{d:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    let transactions = |ids: &str| {
        db.number(&format!(
            "SELECT COUNT(DISTINCT xmin::TEXT)::BIGINT FROM decisions WHERE id IN ({ids})"
        ))
    };
    assert_eq!(transactions("'dec_c', 'dec_d'"), 1);
    // The first two, and the waiting group, are separate transactions.
    assert_eq!(transactions("'dec_a', 'dec_c'"), 2);
}
