//! Every event type produced by its action and delivered, and the event log (`GET /v1/events`).

use super::*;

#[mandate_test_macros::on_each_engine]
async fn every_event_type_is_produced_by_its_action_and_delivered() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let receiver = Receiver::start(0).await;
    let all = [
        "decision.review_pending",
        "decision.resolved",
        "mandate.revoked",
        "mandate.expiring",
        "ping",
    ];
    let webhook = register(&app, &org, &receiver.url, &all).await;

    // decision.review_pending, then decision.resolved on approve and on deny.
    let agent = app.standard_agent(&org, "buyer").await;
    let mut reviews = Vec::new();
    for _ in 0..3 {
        let r = app.authorize(&agent, "60", "software").await;
        assert_eq!(r.body["verdict"], "review", "{}", r.text);
        reviews.push((
            r.body["id"].as_str().unwrap().to_owned(),
            r.body["review"]["id"].as_str().unwrap().to_owned(),
        ));
    }
    let pending = event_ids(&app, &org, "decision.review_pending").await;
    assert_eq!(pending.len(), 3);
    let approved = app
        .post_empty(&org, &format!("/v1/reviews/{}/approve", reviews[0].1))
        .await;
    assert_eq!(approved.status, 201, "{}", approved.text);
    let denied = app
        .post(
            &org,
            &format!("/v1/reviews/{}/deny", reviews[1].1),
            json!({"reason": "no"}),
        )
        .await;
    assert_eq!(denied.status, 200, "{}", denied.text);
    // Resolving again fails and writes nothing.
    app.post_empty(&org, &format!("/v1/reviews/{}/deny", reviews[1].1))
        .await
        .assert_error(400, "invalid_request");
    app.post_empty(&org, &format!("/v1/reviews/{}/approve", reviews[0].1))
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(event_ids(&app, &org, "decision.resolved").await.len(), 2);

    // decision.resolved on expiry: the worker marks the third review expired after 24 h.
    app.advance(24 * 3600 - 1);
    settle().await;
    assert_eq!(event_ids(&app, &org, "decision.resolved").await.len(), 2);
    app.advance(1);
    eventually("the review to expire", || {
        let status = app
            .db
            .query_value("SELECT status FROM reviews WHERE id = $1", &[&reviews[2].1])
            .unwrap();
        (status == "expired").then_some(())
    })
    .await;
    let resolved = event_ids(&app, &org, "decision.resolved").await;
    assert_eq!(resolved.len(), 3);
    let expired = app.get(&org, &format!("/v1/events/{}", resolved[0])).await;
    assert_eq!(expired.body["data"]["id"], reviews[2].1.as_str());
    assert_eq!(expired.body["data"]["status"], "expired");
    assert_eq!(expired.body["data"]["decision"], reviews[2].0.as_str());
    assert_eq!(expired.body["data"]["resolved_at"], "2026-11-23T12:00:00Z");
    // Approving it now is refused and adds no second event.
    app.post_empty(&org, &format!("/v1/reviews/{}/approve", reviews[2].1))
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(event_ids(&app, &org, "decision.resolved").await.len(), 3);

    // mandate.revoked; revoking twice writes no second event.
    let mandate_id = app.get(&org, "/v1/mandates?agent=agt_buyer").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = app
        .post_empty(&org, &format!("/v1/mandates/{mandate_id}/revoke"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    app.post_empty(&org, &format!("/v1/mandates/{mandate_id}/revoke"))
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(event_ids(&app, &org, "mandate.revoked").await.len(), 1);

    // mandate.expiring: at once for a mandate created inside the window (now 2026-11-23)...
    app.agent(&org, "soon").await;
    let soon = app
        .mandate(
            &org,
            &standard_mandate("soon").replace("2026-12-31", "2026-11-28"),
        )
        .await;
    let expiring = eventually("mandate.expiring for the short mandate", || {
        app.db.query_value(
            "SELECT event_id FROM mandate_expiring_fired WHERE mandate_id = $1",
            &[soon["id"].as_str().unwrap()],
        )
    })
    .await;
    let read = app.get(&org, &format!("/v1/events/{expiring}")).await;
    assert_eq!(read.body["type"], "mandate.expiring");
    assert_eq!(read.body["data"]["id"], soon["id"]);
    assert_eq!(read.body["data"]["expires"], "2026-11-28");
    // ...and at 00:00 UTC seven days before `expires` for the others; a revoked mandate
    // never fires.
    app.agent(&org, "later").await;
    let later = app.mandate(&org, &standard_mandate("later")).await;
    app.clock.set(datetime!(2026-12-23 23:59:59 UTC));
    settle().await;
    assert_eq!(event_ids(&app, &org, "mandate.expiring").await.len(), 1);
    app.clock.set(datetime!(2026-12-24 00:00 UTC));
    let both = eventually("mandate.expiring for the long mandate", || {
        let n = app
            .db
            .query_i64("SELECT COUNT(*) FROM mandate_expiring_fired", &[]);
        (n == 2).then_some(())
    });
    both.await;
    let fired = event_ids(&app, &org, "mandate.expiring").await;
    assert_eq!(fired.len(), 2);
    let read = app.get(&org, &format!("/v1/events/{}", fired[0])).await;
    assert_eq!(read.body["data"]["id"], later["id"]);
    assert_eq!(read.body["created_at"], "2026-12-24T00:00:00Z");
    // Once only.
    app.advance(3 * 24 * 3600);
    settle().await;
    assert_eq!(event_ids(&app, &org, "mandate.expiring").await.len(), 2);

    let ping_event = ping(&app, &org, &webhook).await;

    // Everything in the log reached the receiver, signed, once each.
    let r = app.get(&org, "/v1/events?limit=100").await;
    let logged: Vec<(String, String)> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(logged.len(), 3 + 3 + 1 + 2 + 1);
    assert_eq!(logged[0].0, ping_event);
    let types: BTreeSet<_> = logged.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(types, all.into_iter().collect());
    let seen = receiver.wait_for(logged.len()).await;
    let jwks = app.jwks().await;
    let now = app.clock_now().unix_timestamp();
    // Each event verifies at the time it was sent (the clock moved days since the first).
    let mut received: Vec<(String, String)> = seen
        .iter()
        .map(|r| {
            let sent = signed_at(&r.body);
            assert!(sent <= now);
            let claims = verify(&jwks, &app.issuer(), sent, &r.body);
            assert_eq!(claims.exp, sent + 300);
            (claims.jti.to_string(), claims.event_type)
        })
        .collect();
    let mut expected = logged.clone();
    received.sort();
    expected.sort();
    assert_eq!(received, expected);
}

// ---------------------------------------------------------------------------------------
// The log.

#[mandate_test_macros::on_each_engine]
async fn events_list_filter_and_get() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let webhook = register(&app, &org, "http://127.0.0.1:9/hook", &["ping"]).await;
    let mut pings = Vec::new();
    for _ in 0..3 {
        pings.push(ping(&app, &org, &webhook).await);
        app.advance(1);
    }
    app.agent(&org, "buyer").await;
    let mandate = app.mandate(&org, &standard_mandate("buyer")).await;
    let id = mandate["id"].as_str().unwrap();
    app.post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;

    let all = app.get(&org, "/v1/events").await;
    assert_eq!(all.status, 200);
    let data = all.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 4);
    assert_eq!(data[0]["type"], "mandate.revoked");
    assert_eq!(data[0]["data"]["id"], id);
    let keys: Vec<_> = data[0].as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["created_at", "data", "id", "type"]);
    let ids: Vec<_> = data[1..]
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [pings[2].as_str(), &pings[1], &pings[0]]);
    assert_eq!(all.body["has_more"], false);

    assert_eq!(
        event_ids(&app, &org, "ping").await,
        [pings[2].clone(), pings[1].clone(), pings[0].clone()]
    );
    assert_eq!(event_ids(&app, &org, "mandate.revoked").await.len(), 1);
    assert!(event_ids(&app, &org, "mandate.expiring").await.is_empty());

    // Pages, with the filter bound to the cursor.
    let page = app.get(&org, "/v1/events?type=ping&limit=2").await;
    assert_eq!(page.body["has_more"], true);
    let cursor = page.body["next_cursor"].as_str().unwrap().to_owned();
    let next = app
        .get(
            &org,
            &format!("/v1/events?type=ping&limit=2&cursor={cursor}"),
        )
        .await;
    assert_eq!(next.body["data"][0]["id"], pings[0].as_str());
    assert_eq!(next.body["has_more"], false);
    assert!(next.body.get("next_cursor").is_none());
    app.get(&org, &format!("/v1/events?limit=2&cursor={cursor}"))
        .await
        .assert_error(400, "invalid_request");

    let message = app
        .get(&org, "/v1/events?type=nope")
        .await
        .assert_error(400, "invalid_request");
    assert!(message.starts_with("type must be one of"), "{message}");
    app.get(&org, "/v1/events?kind=ping")
        .await
        .assert_error(400, "invalid_request");
    app.get(&org, "/v1/events?limit=0")
        .await
        .assert_error(400, "invalid_request");

    let one = app.get(&org, &format!("/v1/events/{}", pings[0])).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.body["id"], pings[0].as_str());
    assert_eq!(one.body["type"], "ping");
    assert_eq!(one.body["data"]["webhook"], webhook.as_str());
    assert_eq!(one.body["created_at"], "2026-11-22T12:00:00Z");
    // The read carries the event's deliveries: the ping's one, none for an event no
    // endpoint was subscribed to.
    assert_eq!(one.body["deliveries"][0]["webhook"], webhook.as_str());
    assert_eq!(one.body["deliveries"].as_array().unwrap().len(), 1);
    let revoked = data[0]["id"].as_str().unwrap();
    let read = app.get(&org, &format!("/v1/events/{revoked}")).await;
    assert_eq!(read.body["deliveries"], json!([]));
    app.get(&org, "/v1/events/evt_missing")
        .await
        .assert_error(404, "not_found");
    // Another organization's key and the live key of the same one: 404, and empty lists.
    let rival = app.onboard("rival").await;
    for key in [&rival.sandbox, &app.org.live] {
        app.get(key, &format!("/v1/events/{}", pings[0]))
            .await
            .assert_error(404, "not_found");
        assert_eq!(app.get(key, "/v1/events").await.body["data"], json!([]));
    }
}
