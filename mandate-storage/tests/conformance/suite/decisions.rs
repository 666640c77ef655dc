//! The contracts of storing decisions: the log and the idempotency record stored with a
//! decision, what an agent's next decision is read from, a failing or stale decision
//! writing nothing, and single-use credentials accepted once.

use super::*;

use made::opening_review;

pub async fn decisions_are_logged_with_their_idempotency_record_in_order(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_d", 10).await;
    agent(store, "agt_other", 11).await;
    let mandate = mandate(store, "agt_d").await;
    let before = store.settled_decision_seq(ORG).await.unwrap();
    let (claimed, _) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-decide", [5; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(claimed, NextAction::StartProcessing);
    let first = NewDecision {
        idempotency: Some(record("k-decide", "req_d1")),
        ..decided(store, "agt_d", "10", Verdict::Allow).await
    };
    assert_eq!(first.decision.claims.mandate.as_ref(), Some(&mandate.id));
    let first = stored(store, first).await;
    // The idempotency record was stored with the decision.
    let (action, original) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-decide", [5; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert!(
        matches!(&action, NextAction::ReturnSavedResponse(r) if r.body == b"sealed k-decide"),
        "{action:?}"
    );
    assert_eq!(original.as_deref(), Some("req_d1"));
    let second = stored(
        store,
        decided(store, "agt_d", "600", Verdict::DenyLimit).await,
    )
    .await;
    let third = stored(store, decided(store, "agt_d", "20", Verdict::Allow).await).await;
    let unmandated = decided(store, "agt_other", "1", Verdict::DenyNoMandate).await;
    assert_eq!(unmandated.decision.claims.mandate, None);
    let unmandated = stored(store, unmandated).await;
    // The log: newest first, paged by seq, filtered.
    let page = store
        .decisions_page(ORG, Env::Sandbox, &DecisionFilters::default(), i64::MAX, 3)
        .await
        .unwrap();
    let ids: Vec<&DecisionId> = page.iter().map(|(_, d)| &d.claims.jti).collect();
    assert_eq!(
        ids,
        [
            &unmandated.claims.jti,
            &third.claims.jti,
            &second.claims.jti
        ]
    );
    assert!(page.windows(2).all(|w| w[0].0 > w[1].0));
    // Every decision stored is settled: the watermark is at or above it (above where a
    // seq was claimed and left as a gap).
    assert!(store.settled_decision_seq(ORG).await.unwrap() >= page[0].0);
    assert!(page[0].0 > before);
    let allows = store
        .decisions_page(
            ORG,
            Env::Sandbox,
            &DecisionFilters {
                agent: Some("agt_d".into()),
                verdict: Some(Verdict::Allow),
                ..DecisionFilters::default()
            },
            i64::MAX,
            10,
        )
        .await
        .unwrap();
    let allowed: Vec<&DecisionId> = allows.iter().map(|(_, d)| &d.claims.jti).collect();
    assert_eq!(allowed, [&third.claims.jti, &first.claims.jti]);
    // The export: oldest first, in (after, upto].
    let export = store
        .decisions_export_page(
            ORG,
            Env::Sandbox,
            &DecisionFilters::default(),
            before,
            page[1].0,
            10,
        )
        .await
        .unwrap();
    let exported: Vec<&DecisionId> = export.iter().map(|(_, d)| &d.claims.jti).collect();
    assert_eq!(
        exported,
        [&first.claims.jti, &second.claims.jti, &third.claims.jti]
    );
    // A decision reads back as it was stored, signature included; `only` scopes it to its
    // agent.
    assert_eq!(decision(store, &third.claims.jti).await, third);
    assert_eq!(decision(store, &second.claims.jti).await, second);
    assert!(third.signature.is_some());
    assert!(
        store
            .decision(
                ORG,
                Env::Sandbox,
                Some(&agent_id("agt_other")),
                &third.claims.jti
            )
            .await
            .unwrap()
            .is_none()
    );
    // What the agent's next decision is made on: its mandate, requests newest first, and
    // the allows under the mandate since the asked instant.
    let record = store
        .agent_record(
            Arc::from(ORG),
            Env::Sandbox,
            agent_id("agt_d"),
            2,
            ms(NOW) - 1,
        )
        .await
        .unwrap();
    assert_eq!(record.mandate.map(|m| m.id), Some(mandate.id.clone()));
    assert_eq!(record.recent_requests, vec![ms(NOW), ms(NOW)]);
    let allowed: Vec<Amount> = record.allowed_since.iter().map(|(a, _)| *a).collect();
    assert_eq!(
        allowed,
        [Amount::parse("10").unwrap(), Amount::parse("20").unwrap()]
    );
    let summed = store
        .mandate_allows_since(
            ORG,
            Env::Sandbox,
            &agent_id("agt_d"),
            &mandate.id,
            ms(NOW) - 1,
        )
        .await
        .unwrap();
    assert_eq!(summed, record.allowed_since);
}

pub async fn a_failing_decision_writes_nothing(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_f", 10).await;
    mandate(store, "agt_f").await;
    let taken = stored(store, decided(store, "agt_f", "10", Verdict::Allow).await).await;
    let last = store.settled_decision_seq(ORG).await.unwrap();
    let events = event_types(store).await;
    // The same decision again (its id taken), opening a review, with an idempotency record
    // and a credential to accept: the decision's insert fails, so none of them is stored.
    let (claimed, _) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-fail", [6; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(claimed, NextAction::StartProcessing);
    let again = NewDecision {
        decision: taken.clone(),
        idempotency: Some(record("k-fail", "req_fail")),
        accepts: Some("cred_fail".into()),
        ..decided(store, "agt_f", "10", Verdict::Review).await
    };
    let outcome = store.record_decision(opening_review(again)).await;
    assert!(
        !matches!(outcome, Ok(Recorded::Stored(_))),
        "a decision whose id is taken is not stored: {outcome:?}"
    );
    // Nothing was added to the log after the last decision, nor to the events.
    assert_nothing_after(store, last).await;
    assert_eq!(event_types(store).await, events);
    assert_eq!(store.backlog().await.unwrap().reviews, 0);
    assert!(!accepted(store, "cred_fail").await);
    assert_eq!(decision(store, &taken.claims.jti).await, taken);
    let (action, _) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-fail", [6; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(
        action,
        NextAction::ConflictInFlight,
        "the claim stands, with no record"
    );
}

pub async fn a_decision_on_a_stale_agent_is_given_back_unstored(fresh: &Fresh) {
    if !fresh.capabilities.shared_by_processes {
        return;
    }
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_s", 10).await;
    mandate(store, "agt_s").await;
    // Made on the agent as read now ...
    let stale = decided(store, "agt_s", "10", Verdict::Allow).await;
    // ... while another process decides first: the agent moves on.
    stored(store, decided(store, "agt_s", "10", Verdict::Allow).await).await;
    let last = store.settled_decision_seq(ORG).await.unwrap();
    let jti = stale.decision.claims.jti.clone();
    let outcome = store.record_decision(stale).await.unwrap();
    assert!(
        matches!(&outcome, Recorded::Changed(back) if back.decision.claims.jti == jti),
        "given back to be made again: {outcome:?}"
    );
    // Nothing was added to the log after the last decision.
    assert_nothing_after(store, last).await;
    // Made again on the agent as it now stands, it is stored.
    stored(store, decided(store, "agt_s", "10", Verdict::Allow).await).await;
}

/// A single-use credential accepted by five decisions at once (of five agents: nothing
/// but the credential is shared) is accepted by exactly one, which alone is stored; the
/// others are given back (made again, they are `deny_replay`), and so is any later one.
/// A decision that accepts nothing (a denial) does not use it up; a `review` accepts one
/// with the review it opens.
pub async fn a_single_use_credential_is_accepted_once_even_at_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let agents = ["agt_c0", "agt_c1", "agt_c2", "agt_c3", "agt_c4"];
    for (i, name) in agents.iter().enumerate() {
        agent(store, name, 10 + i as u8).await;
        mandate(store, name).await;
    }
    let accepting = |new: NewDecision, id: &str| NewDecision {
        accepts: Some(id.to_owned()),
        ..new
    };
    // A denial accepts nothing (the service hands it over without `accepts`): unused.
    stored(
        store,
        decided(store, "agt_c0", "600", Verdict::DenyLimit).await,
    )
    .await;
    assert!(!accepted(store, "cred_1").await);
    let last = store.settled_decision_seq(ORG).await.unwrap();
    let mut at_once = Vec::new();
    for name in agents {
        at_once.push(accepting(
            decided(store, name, "10", Verdict::Allow).await,
            "cred_1",
        ));
    }
    let outcomes: Vec<Recorded> =
        join_all(at_once.into_iter().map(|new| store.record_decision(new)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    let stored_at_once = outcomes
        .iter()
        .filter(|o| matches!(o, Recorded::Stored(_)))
        .count();
    assert_eq!(stored_at_once, 1, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|o| match o {
            Recorded::Stored(_) => true,
            Recorded::Changed(back) => back.accepts.as_deref() == Some("cred_1"),
            Recorded::ClaimLost => false,
        }),
        "the others are given back: {outcomes:?}"
    );
    assert!(accepted(store, "cred_1").await);
    let added = store
        .decisions_export_page(
            ORG,
            Env::Sandbox,
            &DecisionFilters::default(),
            last,
            i64::MAX,
            10,
        )
        .await
        .unwrap();
    assert_eq!(added.len(), 1, "the accepting decision alone: {added:?}");
    // Later, on the agent as it now stands: given back all the same.
    let last = store.settled_decision_seq(ORG).await.unwrap();
    let again = accepting(
        decided(store, "agt_c0", "10", Verdict::Allow).await,
        "cred_1",
    );
    let outcome = store.record_decision(again).await.unwrap();
    assert!(matches!(outcome, Recorded::Changed(_)), "{outcome:?}");
    assert_nothing_after(store, last).await;
    // Another credential is its own; a review accepts it, with its review, once.
    let reviewed = accepting(
        decided(store, "agt_c1", "300", Verdict::Review).await,
        "cred_2",
    );
    stored(store, opening_review(reviewed)).await;
    assert!(accepted(store, "cred_2").await);
    let again = accepting(
        decided(store, "agt_c2", "300", Verdict::Review).await,
        "cred_2",
    );
    let outcome = store.record_decision(opening_review(again)).await.unwrap();
    assert!(matches!(outcome, Recorded::Changed(_)), "{outcome:?}");
    assert_eq!(store.backlog().await.unwrap().reviews, 1);
    assert_eq!(
        all_events(store, Some("decision.review_pending"))
            .await
            .len(),
        1
    );
    // Accepted in its organization's environment only.
    assert!(
        !store
            .credential_accepted(Arc::from(ORG), Env::Live, "cred_1".to_owned())
            .await
            .unwrap()
    );
}

/// A credential is accepted only with the decision that accepts it: a decision that is
/// not stored (given back on an agent that moved on, or failing) leaves it unused, and a
/// decision made again on the agent as it stands accepts it. (That the decision service
/// does not even hand over a decision under a replaced mandate is the server's test,
/// mandate-server/tests/deciding.rs.)
pub async fn a_decision_not_stored_leaves_its_credential_unused(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_m", 10).await;
    mandate(store, "agt_m").await;
    let accepting = |new: NewDecision| NewDecision {
        accepts: Some("cred_m".to_owned()),
        ..new
    };
    if fresh.capabilities.shared_by_processes {
        let stale = accepting(decided(store, "agt_m", "10", Verdict::Allow).await);
        stored(store, decided(store, "agt_m", "20", Verdict::Allow).await).await;
        let outcome = store.record_decision(stale).await.unwrap();
        assert!(matches!(outcome, Recorded::Changed(_)), "{outcome:?}");
        assert!(
            !accepted(store, "cred_m").await,
            "given back, accepting nothing"
        );
    }
    let taken = stored(store, decided(store, "agt_m", "10", Verdict::Allow).await).await;
    let failing = NewDecision {
        decision: taken,
        ..accepting(decided(store, "agt_m", "10", Verdict::Allow).await)
    };
    let outcome = store.record_decision(failing).await;
    assert!(!matches!(outcome, Ok(Recorded::Stored(_))), "{outcome:?}");
    assert!(
        !accepted(store, "cred_m").await,
        "failed, accepting nothing"
    );
    // Under the mandate now in force, on the agent as it stands: accepted, and stored
    // naming that mandate.
    let replacing = mandate(store, "agt_m").await;
    let fresh_one = accepting(decided(store, "agt_m", "10", Verdict::Allow).await);
    let fresh_one = stored(store, fresh_one).await;
    assert!(accepted(store, "cred_m").await);
    let read = decision(store, &fresh_one.claims.jti).await;
    assert_eq!(read.claims.mandate.as_ref(), Some(&replacing.id));
}

/// Whether a decision of the sandbox accepted the credential `id`.
async fn accepted(store: &dyn Store, id: &str) -> bool {
    store
        .credential_accepted(Arc::from(ORG), Env::Sandbox, id.to_owned())
        .await
        .unwrap()
}

/// Nothing in the log after seq `last`, up to the watermark.
pub(super) async fn assert_nothing_after(store: &dyn Store, last: i64) {
    let settled = store.settled_decision_seq(ORG).await.unwrap();
    let added = store
        .decisions_export_page(
            ORG,
            Env::Sandbox,
            &DecisionFilters::default(),
            last,
            settled,
            10,
        )
        .await
        .unwrap();
    assert!(added.is_empty(), "{added:?}");
}
