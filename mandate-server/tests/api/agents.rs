//! POST /v1/agents, GET /v1/agents, GET /v1/agents/{id}.

use serde_json::{Value, json};

use crate::helpers::spawn_app;

#[mandate_test_macros::on_each_engine]
async fn create_returns_the_id_and_a_key_shown_once() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let r = app
        .post(&org, "/v1/agents", json!({"name": "buyer-1"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["id"], "agt_buyer-1");
    assert_eq!(r.body["name"], "buyer-1");
    assert_eq!(r.body["created_at"], "2026-11-22T12:00:00Z");
    let key = r.body["agent_key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("ak_sandbox_"), "{key}");
    assert!(key.len() > "ak_sandbox_".len() + 20, "{key}");

    // The key works as that agent's credential.
    let own = app.get(&key, "/v1/agents/agt_buyer-1").await;
    assert_eq!(own.status, 200, "{}", own.text);

    // It is never shown again: not on GET, not in the list, not to the agent itself.
    for (caller, path) in [
        (&org, "/v1/agents/agt_buyer-1"),
        (&org, "/v1/agents"),
        (&key, "/v1/agents/agt_buyer-1"),
        (&key, "/v1/agents"),
    ] {
        let r = app.get(caller, path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        assert!(!r.text.contains("agent_key"), "{path}: {}", r.text);
        assert!(!r.text.contains(&key), "{path}: {}", r.text);
    }
    let one = app.get(&org, "/v1/agents/agt_buyer-1").await;
    assert_eq!(
        one.body,
        json!({"id": "agt_buyer-1", "name": "buyer-1", "created_at": "2026-11-22T12:00:00Z"})
    );

    // A live organization key makes live agent keys.
    let live = app
        .post(&app.org.live, "/v1/agents", json!({"name": "buyer-1"}))
        .await;
    assert_eq!(live.status, 201, "{}", live.text);
    assert!(
        live.body["agent_key"]
            .as_str()
            .unwrap()
            .starts_with("ak_live_")
    );
    assert_ne!(live.body["agent_key"], r.body["agent_key"]);
}

#[mandate_test_macros::on_each_engine]
async fn names_follow_the_rules_and_errors_name_the_field() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let max = format!("a{}", "b".repeat(62));
    for good in ["a", "0", "a_b-c9", max.as_str()] {
        let r = app.post(&org, "/v1/agents", json!({ "name": good })).await;
        assert_eq!(r.status, 201, "{good}: {}", r.text);
        assert_eq!(r.body["id"], format!("agt_{good}"));
    }
    let too_long = format!("a{}", "b".repeat(63));
    let bad: [Value; 12] = [
        json!(""),
        json!("Buyer"),
        json!("-x"),
        json!("_x"),
        json!("a b"),
        json!("a/b"),
        json!("a.b"),
        json!("café"),
        json!(too_long),
        json!(5),
        json!(null),
        json!(["a"]),
    ];
    for name in bad {
        let r = app.post(&org, "/v1/agents", json!({ "name": name })).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.starts_with("name "), "{name}: {message}");
    }
    let r = app.post(&org, "/v1/agents", json!({})).await;
    assert_eq!(r.assert_error(400, "invalid_request"), "name is required");
    let r = app.post_text(&org, "/v1/agents", "[]").await;
    r.assert_error(400, "invalid_request");
    // Nothing but the four good ones was created.
    let list = app.get(&org, "/v1/agents").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 4);
}

#[mandate_test_macros::on_each_engine]
async fn a_taken_name_is_409_name_taken_within_one_org_and_env_only() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let first = app.agent(&org, "dup").await;
    let r = app.post(&org, "/v1/agents", json!({"name": "dup"})).await;
    let message = r.assert_error(409, "name_taken");
    assert!(message.contains("dup"), "{message}");
    // The first agent keeps its key.
    assert_eq!(app.get(&first, "/v1/agents/agt_dup").await.status, 200);
    let list = app.get(&org, "/v1/agents").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);

    // The same name is free in live and in another organization.
    let live = app
        .post(&app.org.live, "/v1/agents", json!({"name": "dup"}))
        .await;
    assert_eq!(live.status, 201, "{}", live.text);
    let other = app.onboard("other").await;
    let theirs = app
        .post(&other.sandbox, "/v1/agents", json!({"name": "dup"}))
        .await;
    assert_eq!(theirs.status, 201, "{}", theirs.text);
    assert_eq!(theirs.body["id"], "agt_dup");
    // ...and they are different agents: each key reads only its own.
    let their_key = theirs.body["agent_key"].as_str().unwrap();
    assert_ne!(their_key, first);
    let mine = app.get(&first, "/v1/agents").await;
    let theirs_seen = app.get(their_key, "/v1/agents").await;
    assert_eq!(mine.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(theirs_seen.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(mine.body["data"][0]["id"], "agt_dup");
    assert_eq!(theirs_seen.body["data"][0]["id"], "agt_dup");
}

#[mandate_test_macros::on_each_engine]
async fn get_one_and_list_newest_first() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    for name in ["one", "two", "three"] {
        app.agent(&org, name).await;
        app.advance(1);
    }
    let r = app.get(&org, "/v1/agents/agt_two").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["id"], "agt_two");
    assert_eq!(r.body["created_at"], "2026-11-22T12:00:01Z");
    app.get(&org, "/v1/agents/agt_four")
        .await
        .assert_error(404, "not_found");
    app.get(&org, "/v1/agents/two")
        .await
        .assert_error(404, "not_found");

    let list = app.get(&org, "/v1/agents").await;
    assert_eq!(list.status, 200);
    let ids: Vec<_> = list.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["agt_three", "agt_two", "agt_one"]);
    assert_eq!(list.body["has_more"], false);
    assert!(list.body.get("next_cursor").is_none(), "{}", list.text);
}

#[mandate_test_macros::on_each_engine]
async fn read_only_and_unknown_fields_are_400() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let cases = [
        (
            json!({"name": "a", "id": "agt_a"}),
            "id is read-only and cannot be set",
        ),
        (
            json!({"name": "a", "agent_key": "ak_sandbox_x"}),
            "agent_key is read-only and cannot be set",
        ),
        (
            json!({"name": "a", "created_at": "2026-01-01T00:00:00Z"}),
            "created_at is read-only and cannot be set",
        ),
        (json!({"name": "a", "x": 1}), "unknown field x"),
    ];
    for (body, message) in cases {
        let r = app.post(&org, "/v1/agents", body.clone()).await;
        assert_eq!(r.assert_error(400, "invalid_request"), message, "{body}");
    }
    // None of them created the agent: the name is still free.
    assert_eq!(app.get(&org, "/v1/agents").await.body["data"], json!([]));
    let r = app.post(&org, "/v1/agents", json!({"name": "a"})).await;
    assert_eq!(r.status, 201, "{}", r.text);
}
