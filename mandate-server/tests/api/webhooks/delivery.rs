//! Delivery: signed events to a real receiver, retries with backoff on the injected clock, the 24-hour window, restarts, routing by environment and subscription.

use super::*;

#[mandate_test_macros::on_each_engine]
async fn a_ping_is_delivered_as_a_verifiable_signed_event() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(0).await;
    let webhook = register(&app, &org, &receiver.url, &["mandate.revoked"]).await;
    let event = ping(&app, &org, &webhook).await;
    assert!(event.starts_with("evt_"));

    let seen = receiver.wait_for(1).await;
    assert_eq!(seen[0].content_type, "application/jwt");
    let jwks = app.jwks().await;
    let claims = verify(&jwks, &app.issuer(), START.unix_timestamp(), &seen[0].body);
    assert_eq!(claims.jti.as_str(), event);
    assert_eq!(claims.iss, app.issuer());
    assert_eq!(claims.iat, START.unix_timestamp());
    assert_eq!(claims.event_type, "ping");
    assert_eq!(claims.data["webhook"], webhook.as_str());
    assert_eq!(claims.data["url"], receiver.url.as_str());
    // The attempt lives five minutes, like a verdict: a strict verifier refuses it after.
    assert_eq!(claims.exp, claims.iat + 300);
    let payload = seen[0].body.split('.').nth(1).unwrap();
    let payload: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(payload["exp"], START.unix_timestamp() + 300, "{payload}");
    let late = VerifyOptions {
        issuer: app.issuer(),
        now: START + time::Duration::seconds(300),
        leeway_secs: 0,
    };
    assert_eq!(
        verify_event(&seen[0].body, &jwks, &late),
        Err(TokenError::Expired {
            exp: START.unix_timestamp() + 300
        })
    );

    let row = eventually("the delivery to be recorded", || {
        let row = delivery(&app, &event);
        (row.state == DeliveryState::Delivered).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 1);
    assert_eq!(row.tried.len(), 1);
    assert_eq!(row.tried[0].status, Some(204));
    assert_eq!(row.tried[0].at_ms, START.unix_timestamp() * 1000);
    assert_eq!(row.tried[0].error, None);
    assert_eq!(row.next_attempt_ms, None);

    // The ping is in the log, readable like any event.
    let read = app.get(&org, &format!("/v1/events/{event}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body["type"], "ping");
    assert_eq!(read.body["data"], claims.data);
    assert_eq!(read.body["created_at"], "2026-11-22T12:00:00Z");
    // Delivered once: nothing more arrives however far the clock moves.
    app.advance(48 * 3600);
    settle().await;
    assert_eq!(receiver.count(), 1);
}

#[mandate_test_macros::on_each_engine]
async fn a_receiver_that_fails_three_times_gets_the_event_with_the_same_jti() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(3).await;
    let webhook = register(&app, &org, &receiver.url, &["mandate.revoked"]).await;
    app.agent(&org, "buyer").await;
    let mandate = app.mandate(&org, &standard_mandate("buyer")).await;
    let id = mandate["id"].as_str().unwrap();
    let r = app
        .post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = event_ids(&app, &org, "mandate.revoked").await;
    assert_eq!(events.len(), 1);
    let event = &events[0];

    receiver.wait_for(1).await;
    let first = eventually("the first attempt to be recorded", || {
        let row = delivery(&app, event);
        (row.attempts == 1).then_some(row)
    })
    .await;
    assert_eq!(first.state, DeliveryState::Pending);
    let wait = first.next_attempt_ms.unwrap() - START.unix_timestamp() * 1000;
    assert!((800..=1200).contains(&wait), "first backoff {wait} ms");
    // The event's read shows the delivery as stored: the webhook, its state, the attempts,
    // the last answer, and the next attempt as a timestamp.
    let shown = app.get(&org, &format!("/v1/events/{event}")).await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    let at = |ms: i64| {
        mandate_protocol::timefmt::format(
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap(),
        )
    };
    assert_eq!(
        shown.body["deliveries"],
        json!([{
            "webhook": webhook, "state": "pending", "attempts": 1, "last_status": 500,
            "last_error": "HTTP 500", "last_attempt_at": at(first.tried[0].at_ms),
            "next_attempt_at": at(first.next_attempt_ms.unwrap()),
        }])
    );
    // Not before its time: the clock has not moved.
    settle().await;
    assert_eq!(receiver.count(), 1);

    // Backoffs of about 1 s, 2 s, 4 s (each within 20 %): move the clock past each.
    for (n, step) in [(2, 2), (3, 3), (4, 5)] {
        // Move the clock only once the previous attempt is recorded: its retry is scheduled
        // from the clock at that moment.
        eventually("the previous attempt to be recorded", || {
            (usize::try_from(delivery(&app, event).attempts).unwrap() + 1 == n).then_some(())
        })
        .await;
        app.advance(step);
        receiver.wait_for(n).await;
    }
    let row = eventually("the delivery to be acknowledged", || {
        let row = delivery(&app, event);
        (row.state == DeliveryState::Delivered).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 4);
    let statuses: Vec<_> = row.tried.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [Some(500), Some(500), Some(500), Some(204)]);
    let shown = app.get(&org, &format!("/v1/events/{event}")).await;
    assert_eq!(
        shown.body["deliveries"],
        json!([{
            "webhook": webhook, "state": "delivered", "attempts": 4, "last_status": 204,
            "last_error": null, "last_attempt_at": at(row.tried[3].at_ms),
            "next_attempt_at": null,
        }])
    );
    let numbers: Vec<_> = row.tried.iter().map(|a| a.attempt).collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
    assert!(row.tried.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
    assert!(row.tried.iter().all(|a| a.latency_ms >= 0));

    let jwks = app.jwks().await;
    let now = app.clock_now().unix_timestamp();
    let seen = receiver.seen();
    assert_eq!(seen.len(), 4);
    let mut first_data = None;
    for (received, tried) in seen.iter().zip(&row.tried) {
        let claims = verify(&jwks, &app.issuer(), now, &received.body);
        // Each attempt is signed when it is sent: iat is the attempt's time, exp five
        // minutes later; jti, type and data are the same in every attempt.
        assert_eq!(claims.iat, tried.at_ms.div_euclid(1000));
        assert_eq!(claims.exp, claims.iat + 300);
        assert_eq!(claims.jti.as_str(), event.as_str());
        assert_eq!(claims.event_type, "mandate.revoked");
        assert_eq!(claims.data["id"], id);
        assert_eq!(claims.data["status"], "revoked");
        assert_eq!(first_data.get_or_insert(claims.data.clone()), &claims.data);
    }
    let iats: Vec<i64> = seen
        .iter()
        .map(|r| verify(&jwks, &app.issuer(), now, &r.body).iat)
        .collect();
    let start = START.unix_timestamp();
    assert_eq!(iats, [start, start + 2, start + 5, start + 10]);
    app.advance(3600);
    settle().await;
    assert_eq!(receiver.count(), 4);
}

#[mandate_test_macros::on_each_engine]
async fn a_receiver_that_never_accepts_stops_receiving_after_24_hours() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(usize::MAX).await;
    let webhook = register(&app, &org, &receiver.url, &["ping"]).await;
    let event = ping(&app, &org, &webhook).await;
    let deadline = START.unix_timestamp() * 1000 + RETRY_WINDOW_MS;

    let mut attempts = 0;
    let row = loop {
        let row = eventually("the next attempt", || {
            let row = delivery(&app, &event);
            (row.attempts > attempts || row.state != DeliveryState::Pending).then_some(row)
        })
        .await;
        attempts = row.attempts;
        if row.state != DeliveryState::Pending {
            break row;
        }
        // Past the longest backoff (1 hour + 20 %), one attempt per step.
        app.advance(75 * 60);
        assert!(
            app.clock_now() < START + time::Duration::days(2),
            "still pending after 48 hours: {row:?}"
        );
    };
    assert_eq!(row.state, DeliveryState::Failed);
    assert_eq!(row.next_attempt_ms, None);
    assert!(row.attempts >= 15, "{} attempts", row.attempts);
    assert_eq!(receiver.count(), row.tried.len());
    assert!(row.tried.iter().all(|a| a.status == Some(500)));
    assert!(row.tried.iter().all(|a| a.at_ms < deadline));
    assert_eq!(row.last_error.as_deref(), Some("HTTP 500"));
    let count = receiver.count();
    app.advance(7 * 24 * 3600);
    settle().await;
    assert_eq!(receiver.count(), count);
    // The event stays readable in the log.
    assert_eq!(
        app.get(&org, &format!("/v1/events/{event}")).await.status,
        200
    );
}

#[mandate_test_macros::on_each_engine]
async fn a_delivery_window_that_closed_while_waiting_is_failed_without_an_attempt() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(usize::MAX).await;
    let webhook = register(&app, &org, &receiver.url, &["ping"]).await;
    let event = ping(&app, &org, &webhook).await;
    eventually("the first attempt", || {
        (delivery(&app, &event).attempts == 1).then_some(())
    })
    .await;
    app.advance(25 * 3600);
    let row = eventually("the delivery to fail", || {
        let row = delivery(&app, &event);
        (row.state == DeliveryState::Failed).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 1);
    assert!(row.last_error.unwrap().contains("24-hour"));
    assert_eq!(receiver.count(), 1);
}

#[mandate_test_macros::on_each_engine]
async fn deliveries_resume_after_a_restart() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(1).await;
    let webhook = register(&app, &org, &receiver.url, &["ping"]).await;
    let event = ping(&app, &org, &webhook).await;
    receiver.wait_for(1).await;
    eventually("the failed attempt to be recorded", || {
        (delivery(&app, &event).attempts == 1).then_some(())
    })
    .await;

    // The harness's issuer is the public listener's URL, whose port changes on restart.
    let issuer_before = app.issuer();
    app.restart().await;
    // The next attempt is in the database, not in the old process.
    settle().await;
    assert_eq!(receiver.count(), 1);
    app.advance(2);
    let seen = receiver.wait_for(2).await;
    let row = eventually("the delivery to be acknowledged", || {
        let row = delivery(&app, &event);
        (row.state == DeliveryState::Delivered).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 2);
    let jwks = app.jwks().await;
    let now = app.clock_now().unix_timestamp();
    for (received, issuer) in seen.iter().zip([issuer_before, app.issuer()]) {
        assert_eq!(
            verify(&jwks, &issuer, now, &received.body).jti.as_str(),
            event
        );
    }
}

#[mandate_test_macros::on_each_engine]
async fn an_event_goes_to_the_subscribed_active_webhooks_of_its_environment_only() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let url = "http://127.0.0.1:9/hook";
    let subscribed = register(&app, &org, url, &["mandate.revoked", "ping"]).await;
    register(&app, &org, url, &["decision.review_pending"]).await;
    let deleted = register(&app, &org, url, &["mandate.revoked"]).await;
    app.send(
        Method::DELETE,
        Some(&org),
        &format!("/v1/webhooks/{deleted}"),
        None,
        &[],
    )
    .await;
    register(
        &app,
        &app.org.live,
        "https://hooks.example.com/",
        &["mandate.revoked"],
    )
    .await;
    let rival = app.onboard("rival").await;
    register(&app, &rival.sandbox, url, &["mandate.revoked"]).await;

    app.agent(&org, "buyer").await;
    let mandate = app.mandate(&org, &standard_mandate("buyer")).await;
    let id = mandate["id"].as_str().unwrap();
    app.post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;
    let event = event_ids(&app, &org, "mandate.revoked").await.remove(0);
    let rows = deliveries_of(&app, &event);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].webhook_id, subscribed);
}

#[mandate_test_macros::on_each_engine]
async fn deleting_a_webhook_ends_its_pending_deliveries() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(usize::MAX).await;
    let webhook = register(&app, &org, &receiver.url, &["ping"]).await;
    let event = ping(&app, &org, &webhook).await;
    eventually("the first attempt", || {
        (delivery(&app, &event).attempts == 1).then_some(())
    })
    .await;
    let r = app
        .send(
            Method::DELETE,
            Some(&org),
            &format!("/v1/webhooks/{webhook}"),
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    let row = delivery(&app, &event);
    assert_eq!(row.state, DeliveryState::Failed);
    assert_eq!(row.last_error.as_deref(), Some("webhook deleted"));
    app.advance(3600);
    settle().await;
    assert_eq!(receiver.count(), 1);
}

#[mandate_test_macros::on_each_engine]
async fn a_slow_receiver_delays_no_other_receiver_nor_authorizations() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let slow = Receiver::start(0).await;
    slow.shared.delay_ms.store(3000, Ordering::SeqCst);
    let fast = Receiver::start(0).await;
    let slow_hook = register(&app, &org, &slow.url, &["ping"]).await;
    let fast_hook = register(&app, &org, &fast.url, &["ping"]).await;
    for _ in 0..6 {
        ping(&app, &org, &slow_hook).await;
    }
    slow.wait_for(1).await;
    let started = std::time::Instant::now();
    ping(&app, &org, &fast_hook).await;
    let agent = app.standard_agent(&org, "buyer").await;
    assert_eq!(
        app.authorize(&agent, "5", "software").await.body["verdict"],
        "allow"
    );
    fast.wait_for(1).await;
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "the fast receiver waited {:?}",
        started.elapsed()
    );
    // The slow one is still busy with its first batch (at most 4 at once to one endpoint).
    assert!(slow.count() <= 4, "{}", slow.count());
}
