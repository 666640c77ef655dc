//! The contracts of reviews and timers: a review opened by its decision is resolved once
//! (by a person, or withdrawn by its agent) or expires once, and a mandate's expiring
//! event fires once; what each writes is all or nothing.

use super::*;

use made::opening_review;

/// The agent's withdrawal of its own review (a denial marked withdrawn) is stored and read
/// back as one, by the review and by the decision that opened it, which the `denied` filter
/// still finds; and nothing resolves the review afterwards.
pub async fn an_agents_withdrawal_reads_back_withdrawn_and_ends_the_review(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_w", 10).await;
    mandate(store, "agt_w").await;
    let (reviewed, review_id) = open_review(store, "agt_w", "300").await;
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
    let state = decision(store, &reviewed.claims.jti)
        .await
        .review_state
        .unwrap();
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
    let (reviewed, review_id) = open_review(store, "agt_r", "300").await;
    let (_, other_review) = open_review(store, "agt_r", "250").await;
    assert_eq!(store.backlog().await.unwrap().reviews, 2);
    let pending = event_types(store).await;
    assert_eq!(
        pending,
        ["decision.review_pending", "decision.review_pending"]
    );
    // Each with the decision that opened it, in the order stored.
    let opened = all_events(store, None).await;
    assert_eq!(opened[1].data["id"], reviewed.claims.jti.as_str());
    assert_eq!(opened[1].data["review"], review_id.as_str());
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
    let stored = decision(store, &reviewed.claims.jti).await;
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
    assert_eq!(
        reviews,
        [DueItem {
            id: other_review.as_str().to_owned(),
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
    assert_eq!(resolved[0].data["id"], other_review.as_str());
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
    let stored = decision(store, &reviewed.claims.jti).await;
    assert_eq!(
        stored.review_state.map(|s| s.status),
        Some(ReviewStatus::Denied)
    );
    assert_eq!(store.backlog().await.unwrap().reviews, 0);
    let (expired, _) = store
        .review(Arc::from(ORG), Env::Sandbox, other_review)
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

/// A `review` of `amount` for `agent`, stored with the review it opens; the decision and
/// the review's id.
async fn open_review(store: &dyn Store, agent: &str, amount: &str) -> (Decision, ReviewId) {
    let new = opening_review(decided(store, agent, amount, Verdict::Review).await);
    let id = new.review.as_ref().unwrap().0.id.clone();
    (stored(store, new).await, id)
}
