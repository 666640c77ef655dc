//! Exactness under concurrency: one agent's requests are serialized, different agents'
//! are not.

use std::time::Duration;

use futures_util::future::join_all;

use crate::helpers::spawn_app;

const NO_REVIEW: &str = r#"{"agent": "agt_NAME", "limits": {"per_transaction": 100, "per_month": 450, "currency": "USD"},
    "categories": ["software"], "expires": "2026-12-31"}"#;

#[mandate_test_macros::on_each_engine]
async fn ten_concurrent_hundreds_against_450_allow_exactly_four() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.agent(&org, "racer").await;
    app.mandate(&org, &NO_REVIEW.replace("NAME", "racer")).await;
    let responses = join_all((0..10).map(|_| app.authorize(&agent, "100", "software"))).await;
    let mut verdicts: Vec<String> = responses
        .iter()
        .map(|r| {
            assert_eq!(r.status, 201, "{}", r.text);
            r.body["verdict"].as_str().unwrap().to_owned()
        })
        .collect();
    verdicts.sort();
    assert_eq!(
        verdicts.iter().filter(|v| *v == "allow").count(),
        4,
        "{verdicts:?}"
    );
    assert_eq!(
        verdicts.iter().filter(|v| *v == "deny_limit").count(),
        6,
        "{verdicts:?}"
    );
    // And the log agrees: four allows stored.
    let allows = app.get(&org, "/v1/decisions?verdict=allow&limit=100").await;
    assert_eq!(allows.body["data"].as_array().unwrap().len(), 4);
}

#[mandate_test_macros::on_each_engine]
async fn a_burst_of_twenty_lets_exactly_ten_through_velocity() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.agent(&org, "burst").await;
    app.mandate(&org, &NO_REVIEW.replace("NAME", "burst")).await;
    let responses = join_all((0..20).map(|_| app.authorize(&agent, "1", "software"))).await;
    let velocity = responses
        .iter()
        .filter(|r| r.body["verdict"] == "deny_velocity")
        .count();
    let others = responses
        .iter()
        .filter(|r| r.status == 201 && r.body["verdict"] != "deny_velocity")
        .count();
    assert_eq!((others, velocity), (10, 10));
    // Twenty decisions were recorded: denials are logged too.
    let all = app.get(&org, "/v1/decisions?limit=100").await;
    assert_eq!(all.body["data"].as_array().unwrap().len(), 20);
}

#[mandate_test_macros::on_each_engine]
async fn different_agents_do_not_wait_on_each_other() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let slow = app.agent(&org, "held").await;
    app.mandate(&org, &NO_REVIEW.replace("NAME", "held")).await;
    let free = app.agent(&org, "free").await;
    app.mandate(&org, &NO_REVIEW.replace("NAME", "free")).await;

    // Hold the first agent's lock, as a long request of that agent would.
    let guard = app.hold_agent_lock("held").await;

    // The other agent is answered while the lock is held.
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        app.authorize(&free, "1", "software"),
    )
    .await;
    assert_eq!(
        r.expect("the free agent must not wait").body["verdict"],
        "allow"
    );
    // The held agent's request waits for the lock ...
    let waiting = tokio::spawn({
        let (api, client, key) = (app.api.clone(), app.client.clone(), slow.clone());
        async move {
            client
                .post(format!("{api}/v1/authorizations"))
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(r#"{"amount": 1, "currency": "USD", "recipient": "vendor:a", "category": "software"}"#)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "a request must wait for its agent's lock"
    );
    // ... and is answered once it is released.
    drop(guard);
    let body = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body["verdict"], "allow");
}

#[mandate_test_macros::on_each_engine]
async fn no_allow_after_a_revoke_returns() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.agent(&org, "revokee").await;
    let mut ids = Vec::new();
    for _round in 0..3 {
        let mandate = app
            .mandate(
                &org,
                &NO_REVIEW
                    .replace("NAME", "revokee")
                    .replace("450", "100000"),
            )
            .await;
        let id = mandate["id"].as_str().unwrap().to_owned();
        let racing = join_all((0..5).map(|_| app.authorize(&agent, "1", "software")));
        let path = format!("/v1/mandates/{id}/revoke");
        let revoke = app.post_empty(&org, &path);
        let (responses, revoked) = tokio::join!(racing, revoke);
        assert_eq!(revoked.status, 200, "{}", revoked.text);
        assert!(responses.iter().all(|r| r.status == 201));
        // Once the revoke has answered, nothing is allowed.
        let after = app.authorize(&agent, "1", "software").await;
        assert_eq!(after.body["verdict"], "deny_revoked");
        app.advance(61);
        ids.push(id);
    }
    // The stored order agrees: every allow precedes its mandate's revocation in the log.
    for id in ids {
        let late_allows: i64 = app.db.query_i64(
            "SELECT COUNT(*) FROM decisions d JOIN mandates m ON m.id = d.mandate_id
             WHERE m.id = $1 AND d.verdict = 'allow'
               AND d.seq > (SELECT MAX(seq) FROM decisions WHERE mandate_id = $1 AND verdict = 'deny_revoked')",
            &[&id],
        );
        assert_eq!(late_allows, 0);
    }
}
