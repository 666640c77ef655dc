//! The contracts of the decision path and what moves money or time: the decision log and
//! its idempotency record, a failing or stale decision, reviews, timers and escrows.

use super::*;

pub async fn decisions_are_logged_with_their_idempotency_record_in_order(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_d", 10).await;
    agent(store, "agt_other", 11).await;
    let mandate = mandate(store, "agt_d").await;
    let deciding = Deciding::new();
    let before = store.settled_decision_seq(ORG).await.unwrap();
    let (claimed, _) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-decide", [5; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(claimed, NextAction::StartProcessing);
    let first = deciding
        .authorize(store, "agt_d", "10", Some(record("k-decide", "req_d1")))
        .await;
    assert_eq!(first["verdict"], "allow");
    // The idempotency record was stored with the decision.
    let (action, original) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-decide", [5; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert!(
        matches!(action, NextAction::ReturnSavedResponse(_)),
        "{action:?}"
    );
    assert_eq!(original.as_deref(), Some("req_d1"));
    let second = deciding.authorize(store, "agt_d", "600", None).await;
    assert_eq!(second["verdict"], "deny_limit");
    let third = deciding.authorize(store, "agt_d", "20", None).await;
    assert_eq!(third["verdict"], "allow");
    let unmandated = deciding.authorize(store, "agt_other", "1", None).await;
    assert_eq!(unmandated["verdict"], "deny_no_mandate");
    // The log: newest first, paged by seq, filtered.
    let page = store
        .decisions_page(ORG, Env::Sandbox, &DecisionFilters::default(), i64::MAX, 3)
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|(_, d)| d.claims.jti.as_str()).collect();
    let answered = |v: &Value| v["id"].as_str().unwrap().to_owned();
    assert_eq!(
        ids,
        [answered(&unmandated), answered(&third), answered(&second)]
    );
    assert!(page.windows(2).all(|w| w[0].0 > w[1].0));
    // Every decision answered is settled: the watermark is at or above it (above where a
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
    assert_eq!(allows.len(), 2);
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
    let exported: Vec<&str> = export.iter().map(|(_, d)| d.claims.jti.as_str()).collect();
    assert_eq!(
        exported,
        [answered(&first), answered(&second), answered(&third)]
    );
    // A decision read back is the one answered; `only` scopes it to its agent.
    let stored = decision(store, &third).await;
    assert_eq!(stored.claims.request.amount, Amount::parse("20").unwrap());
    assert_eq!(stored.claims.mandate.as_ref(), Some(&mandate.id));
    assert!(stored.is_request);
    assert!(
        store
            .decision(
                ORG,
                Env::Sandbox,
                Some(&agent_id("agt_other")),
                &stored.claims.jti
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
    let deciding = Deciding::new();
    let answer = deciding.authorize(store, "agt_f", "10", None).await;
    let stored = decision(store, &answer).await;
    let last = store.settled_decision_seq(ORG).await.unwrap();
    let events = event_types(store).await;
    // The same decision again (its id taken) with an idempotency record: the decision's
    // insert fails, so the record is not stored either.
    let (claimed, _) = store
        .claim_idempotency_key(ORG, ORG_KEY, "k-fail", [6; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(claimed, NextAction::StartProcessing);
    let fresh_record = store
        .agent_record(Arc::from(ORG), Env::Sandbox, agent_id("agt_f"), 10, 0)
        .await
        .unwrap();
    let outcome = store
        .record_decision(NewDecision {
            org: Arc::from(ORG),
            env: Env::Sandbox,
            decision: stored,
            review: None,
            idempotency: Some(record("k-fail", "req_fail")),
            hint: fresh_record.hint,
            accepts: None,
        })
        .await;
    assert!(
        !matches!(outcome, Ok(Recorded::Stored(_))),
        "a decision whose id is taken is not stored: {outcome:?}"
    );
    // Nothing was added to the log after the last decision.
    assert_nothing_after(store, last).await;
    assert_eq!(event_types(store).await, events);
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
    let stale = store
        .agent_record(Arc::from(ORG), Env::Sandbox, agent_id("agt_s"), 10, 0)
        .await
        .unwrap();
    // Another process decides first: the agent moves on.
    let answer = Deciding::new().authorize(store, "agt_s", "10", None).await;
    let mut again = decision(store, &answer).await;
    again.claims.jti = DecisionId::from_random(random16());
    again.claims.nonce = Nonce::from_random(random16());
    let last = store.settled_decision_seq(ORG).await.unwrap();
    let outcome = store
        .record_decision(NewDecision {
            org: Arc::from(ORG),
            env: Env::Sandbox,
            decision: again,
            review: None,
            idempotency: None,
            hint: stale.hint,
            accepts: None,
        })
        .await
        .unwrap();
    assert!(matches!(outcome, Recorded::Changed(_)), "{outcome:?}");
    // Nothing was added to the log after the last decision.
    assert_nothing_after(store, last).await;
}

/// A single-use credential presented five times at once is accepted by exactly one
/// decision (an allow; a `review` accepts one too, a denial does not); every other
/// presentation, at once or later, through this process's state or another's (rebuilt
/// from the store, as after a restart), is `deny_replay` naming it.
pub async fn a_single_use_credential_is_accepted_once_even_at_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_c", 10).await;
    mandate(store, "agt_c").await;
    let one = Deciding::new();
    // Denied (over per_transaction 500): the credential is not used up.
    let denied = one.present(store, "agt_c", "600", "cred_1").await;
    assert_eq!(denied["verdict"], "deny_limit");
    let answers = join_all((0..5).map(|_| one.present(store, "agt_c", "10", "cred_1"))).await;
    let mut verdicts: Vec<&str> = answers
        .iter()
        .map(|a| a["verdict"].as_str().unwrap())
        .collect();
    verdicts.sort();
    assert_eq!(
        verdicts,
        [
            "allow",
            "deny_replay",
            "deny_replay",
            "deny_replay",
            "deny_replay"
        ]
    );
    let replay = answers
        .iter()
        .find(|a| a["verdict"] == "deny_replay")
        .unwrap();
    assert_eq!(
        replay["reason"],
        "single-use credential cred_1 was already accepted and cannot be presented again"
    );
    let other = Deciding::new();
    let again = other.present(store, "agt_c", "10", "cred_1").await;
    assert_eq!(again["verdict"], "deny_replay");
    // Another credential is its own; a review accepts it.
    let reviewed = other.present(store, "agt_c", "300", "cred_2").await;
    assert_eq!(reviewed["verdict"], "review");
    let again = one.present(store, "agt_c", "300", "cred_2").await;
    assert_eq!(again["verdict"], "deny_replay");
}

/// A credential checked against a mandate that another replaced before the decision held
/// the agent's lock is refused (`MandateReplaced`): nothing is stored and the credential
/// stays unused, so the same credential is accepted under the mandate now in force.
pub async fn a_credential_checked_under_a_replaced_mandate_is_not_accepted(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_m", 10).await;
    let first = mandate(store, "agt_m").await;
    // The route checked the credential under `first`; `second` replaced it meanwhile.
    let second = mandate(store, "agt_m").await;
    let deciding = Deciding::new();
    assert_ne!(first.id, second.id);
    let credential = |mandate: &Mandate| Credential {
        id: "cred_m".to_owned(),
        mandate: mandate.id.clone(),
    };
    let stale = deciding
        .try_decide(store, "agt_m", "10", None, Some(credential(&first)))
        .await;
    match stale {
        Err(DecisionError::MandateReplaced { checked, .. }) => assert_eq!(checked, first.id),
        other => panic!("expected MandateReplaced, got {other:?}"),
    }
    assert!(
        !store
            .credential_accepted(Arc::from(ORG), Env::Sandbox, "cred_m".to_owned())
            .await
            .unwrap()
    );
    let fresh_answer = deciding
        .try_decide(store, "agt_m", "10", None, Some(credential(&second)))
        .await
        .unwrap();
    assert_eq!(fresh_answer["verdict"], "allow");
    assert_eq!(fresh_answer["mandate"], second.id.as_str());
}

/// The agent's withdrawal of its own review (a denial marked withdrawn) is stored and read
/// back as one, by the review and by the decision that opened it, which the `denied` filter
/// still finds; and nothing resolves the review afterwards.
pub async fn an_agents_withdrawal_reads_back_withdrawn_and_ends_the_review(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_w", 10).await;
    mandate(store, "agt_w").await;
    let deciding = Deciding::new();
    let reviewed = deciding.authorize(store, "agt_w", "300", None).await;
    assert_eq!(reviewed["verdict"], "review");
    let review_id =
        mandate_protocol::id::ReviewId::parse(reviewed["review"]["id"].as_str().unwrap()).unwrap();
    let read = || store.review(Arc::from(ORG), Env::Sandbox, review_id.clone());
    let (review, _agent) = read().await.unwrap().unwrap();
    let withdrawn = review
        .withdraw(Some("the client cancelled".into()), NOW)
        .unwrap();
    let resolution = |review| Resolution {
        org: Arc::from(ORG),
        env: Env::Sandbox,
        review,
        decision: None,
        at_ms: ms(NOW),
        hint: Default::default(),
    };
    assert!(
        store
            .resolve_review(resolution(withdrawn.clone()))
            .await
            .unwrap()
            .is_some()
    );
    let (stored, _agent) = read().await.unwrap().unwrap();
    assert_eq!(stored, withdrawn);
    assert!(stored.withdrawn && stored.status == ReviewStatus::Denied);
    assert_eq!(stored.resolution, None);
    let state = decision(store, &reviewed).await.review_state.unwrap();
    assert_eq!(
        (
            state.status,
            state.withdrawn,
            state.resolution,
            state.reason
        ),
        (
            ReviewStatus::Denied,
            true,
            None,
            Some("the client cancelled".to_owned())
        )
    );
    let denied = store
        .decisions_page(
            ORG,
            Env::Sandbox,
            &DecisionFilters {
                review_status: Some(ReviewStatus::Denied),
                ..Default::default()
            },
            i64::MAX,
            10,
        )
        .await
        .unwrap();
    assert_eq!(denied.len(), 1);
    assert!(denied[0].1.review_state.as_ref().unwrap().withdrawn);
    // A denial written anyway (over the core's refusal) finds the review resolved.
    let person = Review {
        withdrawn: false,
        ..withdrawn.clone()
    };
    assert!(
        store
            .resolve_review(resolution(person))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(read().await.unwrap().unwrap().0, withdrawn);
}

pub async fn a_review_is_resolved_once_and_expires_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_r", 10).await;
    mandate(store, "agt_r").await;
    let deciding = Deciding::new();
    let reviewed = deciding.authorize(store, "agt_r", "300", None).await;
    assert_eq!(reviewed["verdict"], "review");
    let other = deciding.authorize(store, "agt_r", "250", None).await;
    assert_eq!(store.backlog().await.unwrap().reviews, 2);
    let pending = event_types(store).await;
    assert_eq!(
        pending,
        ["decision.review_pending", "decision.review_pending"]
    );
    let review_id =
        mandate_protocol::id::ReviewId::parse(reviewed["review"]["id"].as_str().unwrap()).unwrap();
    let (review, agent_of) = store
        .review(Arc::from(ORG), Env::Sandbox, review_id.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (review.status, agent_of),
        (ReviewStatus::Pending, agent_id("agt_r"))
    );
    // Denied once; a second resolution finds it resolved and writes nothing.
    let denied = review.deny(Some("no".into()), NOW).unwrap();
    let resolution = Resolution {
        org: Arc::from(ORG),
        env: Env::Sandbox,
        review: denied,
        decision: None,
        at_ms: ms(NOW),
        hint: Default::default(),
    };
    assert!(
        store
            .resolve_review(resolution.clone())
            .await
            .unwrap()
            .is_some()
    );
    assert!(store.resolve_review(resolution).await.unwrap().is_none());
    assert_eq!(all_events(store, Some("decision.resolved")).await.len(), 1);
    let stored = decision(store, &reviewed).await;
    assert_eq!(
        stored.review_state.map(|s| s.status),
        Some(ReviewStatus::Denied)
    );
    // The other expires when its deadline passes: once, with its event.
    let late = NOW + mandate_protocol::review::REVIEW_LIFETIME + Duration::seconds(1);
    assert!(
        store
            .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
            .await
            .unwrap()
            .0
            .is_empty(),
        "not due before its deadline"
    );
    let (reviews, _) = store
        .due_timers(ms(late), "2026-11-23", "2026-11-30", 10)
        .await
        .unwrap();
    let other_review = other["review"]["id"].as_str().unwrap();
    assert_eq!(
        reviews,
        [DueItem {
            id: other_review.to_owned(),
            org_id: ORG.to_owned(),
            env: Env::Sandbox
        }]
    );
    store
        .expire_review(&reviews[0], late, review_expiry)
        .await
        .unwrap();
    store
        .expire_review(&reviews[0], late, review_expiry)
        .await
        .unwrap();
    let resolved = all_events(store, Some("decision.resolved")).await;
    assert_eq!(resolved.len(), 2, "{resolved:?}");
    assert_eq!(resolved[0].created_ms, ms(late));
    assert_eq!(resolved[0].data["id"], other_review);
    assert_eq!(resolved[0].data["status"], "expired");
    // A resolved review is not expired: the rule says nothing for it, and an engine told
    // to expire it anyway stores nothing (its row is no longer pending), event included.
    let denied_item = DueItem {
        id: review_id.as_str().to_owned(),
        org_id: ORG.to_owned(),
        env: Env::Sandbox,
    };
    store
        .expire_review(&denied_item, late, review_expiry)
        .await
        .unwrap();
    let regardless = |review: &Review, now: OffsetDateTime| {
        let mut expired = review.clone();
        expired.status = ReviewStatus::Expired;
        expired.resolved_at = Some(now);
        Ok(Some(ReviewExpiry {
            event: NewEvent {
                event_type: "decision.resolved",
                data: serde_json::to_value(&expired).unwrap(),
            },
            review: expired,
            at_ms: ms(now),
        }))
    };
    store
        .expire_review(&denied_item, late, regardless)
        .await
        .unwrap();
    assert_eq!(all_events(store, Some("decision.resolved")).await.len(), 2);
    let stored = decision(store, &reviewed).await;
    assert_eq!(
        stored.review_state.map(|s| s.status),
        Some(ReviewStatus::Denied)
    );
    assert_eq!(store.backlog().await.unwrap().reviews, 0);
    let (expired, _) = store
        .review(
            Arc::from(ORG),
            Env::Sandbox,
            mandate_protocol::id::ReviewId::parse(other_review).unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(expired.status, ReviewStatus::Expired);
    assert!(
        store
            .due_timers(ms(late), "2026-11-23", "2026-11-30", 10)
            .await
            .unwrap()
            .0
            .is_empty()
    );
}

pub async fn a_mandates_expiring_event_fires_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_x", 10).await;
    let soon = mandate_of("agt_x", &TERMS.replace("2026-12-31", "2026-11-25"), NOW);
    store
        .insert_mandate(ORG, Env::Sandbox, &soon)
        .await
        .unwrap();
    let (_, mandates) = store
        .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
        .await
        .unwrap();
    assert_eq!(mandates.len(), 1);
    assert_eq!(mandates[0].id, soon.id.as_str());
    store
        .fire_expiring(&mandates[0], NOW, expiring_event)
        .await
        .unwrap();
    store
        .fire_expiring(&mandates[0], NOW, expiring_event)
        .await
        .unwrap();
    let fired = all_events(store, Some("mandate.expiring")).await;
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0].data["id"], soon.id.as_str());
    assert_eq!(fired[0].created_ms, ms(NOW));
    // Told to fire again regardless, the engine's second mark fails, and the event
    // appended before it in the same transaction is not stored either.
    let regardless =
        |mandate: &Mandate, _fired: bool, now: OffsetDateTime| expiring_event(mandate, false, now);
    assert!(
        store
            .fire_expiring(&mandates[0], NOW, regardless)
            .await
            .is_err()
    );
    assert_eq!(all_events(store, Some("mandate.expiring")).await.len(), 1);
    assert!(
        store
            .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
            .await
            .unwrap()
            .1
            .is_empty(),
        "fired once, not due again"
    );
    // Not due yet: nothing fires.
    let later = mandate_of("agt_x", &TERMS.replace("2026-12-31", "2027-01-31"), NOW);
    store
        .insert_mandate(ORG, Env::Sandbox, &later)
        .await
        .unwrap();
    let item = DueItem {
        id: later.id.as_str().to_owned(),
        org_id: ORG.to_owned(),
        env: Env::Sandbox,
    };
    store
        .fire_expiring(&item, NOW, expiring_event)
        .await
        .unwrap();
    assert_eq!(all_events(store, Some("mandate.expiring")).await.len(), 1);
}

/// Nothing in the log after seq `last`, up to the watermark.
async fn assert_nothing_after(store: &dyn Store, last: i64) {
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
