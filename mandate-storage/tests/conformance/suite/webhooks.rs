//! The contracts of webhooks and their deliveries: a ping becomes deliveries, deleting an
//! endpoint ends them, and a delivery's outcome is stored as recorded.

use super::*;

use mandate_storage::webhooks::{DELETED_ERROR, PING_EVENT, WebhookStatus};

pub(super) async fn webhook(store: &dyn Store, events: &[&str]) -> WebhookId {
    let id = WebhookId::from_random(random16());
    let events: Vec<String> = events.iter().map(|e| (*e).to_owned()).collect();
    let row = store
        .create_webhook(
            ORG,
            Env::Sandbox,
            &id,
            "https://hooks.example/in",
            &events,
            ms(NOW),
        )
        .await
        .unwrap();
    assert_eq!(
        (row.id.as_str(), row.status.as_str()),
        (id.as_str(), "active")
    );
    assert_eq!(row.events, events);
    id
}

pub async fn webhooks_ping_into_deliveries_and_deleting_ends_them(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let first = webhook(store, &["mandate.revoked"]).await;
    let second = webhook(store, &["escrow.funded"]).await;
    let page = store
        .webhooks_page(ORG, Env::Sandbox, i64::MAX, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, [second.as_str(), first.as_str()], "newest first");
    // A ping is an event delivered to that endpoint alone.
    let ping = store
        .ping_webhook(ORG, Env::Sandbox, &first, json!({"hello": 1}), ms(NOW))
        .await
        .unwrap()
        .expect("an active endpoint is pinged");
    let event = store
        .event(ORG, Env::Sandbox, ping.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (event.event_type.as_str(), &event.data),
        (PING_EVENT, &json!({"hello": 1}))
    );
    let deliveries = store.deliveries_of(ORG, ping.as_str()).await.unwrap();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(deliveries[0].webhook_id, first.as_str());
    assert_eq!(deliveries[0].state, DeliveryState::Pending);
    // An event is delivered to every endpoint subscribed to its type, in its transaction.
    agent(store, "agt_w", 10).await;
    let mandate = mandate(store, "agt_w").await;
    store
        .revoke_mandate(ORG, Env::Sandbox, &mandate.id, NOW, revocation)
        .await
        .unwrap();
    let revoked = &all_events(store, Some("mandate.revoked")).await[0];
    let to = store.deliveries_of(ORG, &revoked.id).await.unwrap();
    assert_eq!(to.len(), 1);
    assert_eq!(to[0].webhook_id, first.as_str());
    // Deleting: the endpoint is gone, its pending deliveries end, and it is not pinged.
    let deleted = store
        .delete_webhook(ORG, Env::Sandbox, &first, ms(NOW) + 1)
        .await
        .unwrap()
        .expect("an active endpoint");
    assert_eq!(deleted.status, WebhookStatus::Deleted);
    assert!(
        store
            .webhook(ORG, Env::Sandbox, &first)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .delete_webhook(ORG, Env::Sandbox, &first, ms(NOW) + 2)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .ping_webhook(ORG, Env::Sandbox, &first, json!({}), ms(NOW) + 3)
            .await
            .unwrap()
            .is_none()
    );
    for delivery in store.deliveries_of(ORG, ping.as_str()).await.unwrap() {
        assert_ne!(delivery.state, DeliveryState::Pending, "{delivery:?}");
        assert_eq!(delivery.last_error.as_deref(), Some(DELETED_ERROR));
    }
    assert!(
        store
            .due_deliveries(ms(NOW) + 10_000, 10, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn a_delivery_is_retried_delivered_or_given_up_as_recorded(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let hook = webhook(store, &["mandate.revoked"]).await;
    let mut pings = Vec::new();
    for i in 0..3 {
        let id = store
            .ping_webhook(ORG, Env::Sandbox, &hook, json!({"n": i}), ms(NOW) + i)
            .await
            .unwrap()
            .unwrap();
        pings.push(id);
    }
    assert_eq!(store.backlog().await.unwrap().deliveries, 3);
    // Due now: oldest first, at most `per_webhook` of one endpoint.
    let due = store.due_deliveries(ms(NOW) + 10, 2, 10).await.unwrap();
    assert_eq!(due.len(), 2, "{due:?}");
    assert_eq!(due[0].event_id, pings[0]);
    assert_eq!(due[1].event_id, pings[1]);
    assert_eq!(
        (due[0].webhook_id.as_str(), due[0].env, due[0].attempts),
        (hook.as_str(), Env::Sandbox, 0)
    );
    assert_eq!(due[0].data, json!({"n": 0}));
    store
        .release_deliveries(due.iter().map(|d| d.id.clone()).collect())
        .await
        .unwrap();
    let at = ms(NOW) + 20;
    let attempt = |status, error: Option<&str>| Attempt {
        attempt: 1,
        at_ms: at,
        status,
        latency_ms: 5,
        error: error.map(str::to_owned),
    };
    // Delivered, retried later, given up: each as the delivery worker's rules decide.
    store
        .record_delivery(
            due[0].id.clone(),
            delivered_by(attempt(Some(200), None), at),
        )
        .await
        .unwrap();
    let retry = DeliveryChange {
        attempt: Some(attempt(Some(500), None)),
        attempts: 1,
        state: DeliveryState::Pending,
        next_attempt_ms: Some(at + 60_000),
        last_error: Some("HTTP 500".into()),
        finished_ms: None,
    };
    store
        .record_delivery(due[1].id.clone(), retry)
        .await
        .unwrap();
    let third = store.deliveries_of(ORG, pings[2].as_str()).await.unwrap()[0]
        .id
        .clone();
    store
        .record_delivery(
            third.clone(),
            DeliveryChange {
                attempt: None,
                attempts: 0,
                state: DeliveryState::Failed,
                next_attempt_ms: None,
                last_error: Some("the endpoint's URL is refused".into()),
                finished_ms: Some(at),
            },
        )
        .await
        .unwrap();
    let delivered = &store.deliveries_of(ORG, pings[0].as_str()).await.unwrap()[0];
    assert_eq!(
        (
            delivered.state,
            delivered.attempts,
            delivered.next_attempt_ms
        ),
        (DeliveryState::Delivered, 1, None)
    );
    assert_eq!(delivered.last_error, None);
    assert_eq!(delivered.tried, vec![attempt(Some(200), None)]);
    let retried = &store.deliveries_of(ORG, pings[1].as_str()).await.unwrap()[0];
    assert_eq!(retried.state, DeliveryState::Pending);
    assert_eq!(retried.next_attempt_ms, Some(at + 60_000));
    assert_eq!(retried.last_error.as_deref(), Some("HTTP 500"));
    assert_eq!(retried.tried, vec![attempt(Some(500), None)]);
    let failed = &store.deliveries_of(ORG, pings[2].as_str()).await.unwrap()[0];
    assert_eq!(
        (failed.state, failed.attempts, failed.next_attempt_ms),
        (DeliveryState::Failed, 0, None)
    );
    assert_eq!(
        failed.last_error.as_deref(),
        Some("the endpoint's URL is refused")
    );
    assert!(failed.tried.is_empty(), "given up without an attempt");
    // A delivery no longer pending keeps its state; a late attempt is recorded all the same.
    store
        .record_delivery(third, delivered_by(attempt(Some(200), None), at))
        .await
        .unwrap();
    let failed = &store.deliveries_of(ORG, pings[2].as_str()).await.unwrap()[0];
    assert_eq!(failed.state, DeliveryState::Failed);
    assert_eq!(failed.tried, vec![attempt(Some(200), None)]);
    assert_eq!(store.backlog().await.unwrap().deliveries, 1);
    // The retry is not due before its time, and is at it.
    assert!(
        store
            .due_deliveries(at + 59_999, 10, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = store.due_deliveries(at + 60_000, 10, 10).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 1);
}

/// What a delivered `attempt` writes, finished at `at_ms`.
fn delivered_by(attempt: Attempt, at_ms: i64) -> DeliveryChange {
    DeliveryChange {
        attempts: attempt.attempt,
        attempt: Some(attempt),
        state: DeliveryState::Delivered,
        next_attempt_ms: None,
        last_error: None,
        finished_ms: Some(at_ms),
    }
}
