//! Mandates: create, read, list, supersede, revoke; exact decimals; field errors.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, standard_mandate};

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The events of the `acme` organization's sandbox, oldest first.
fn sandbox_events(app: &TestApp) -> Vec<(String, Value)> {
    app.stored_events("acme", "sandbox")
}

#[mandate_test_macros::on_each_engine]
async fn create_returns_the_full_mandate_with_exact_decimals() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    app.agent(&org, "buyer").await;
    let body = r#"{"agent": "agt_buyer", "principal": "role:cfo",
        "limits": {"per_transaction": 100.10, "per_month": 1000.005, "currency": "EUR"},
        "categories": ["software", "travel"], "review_above": 50.50,
        "expires": "2026-12-31", "escrow": {"required_above": 250.00}}"#;
    let r = app.post_text(&org, "/v1/mandates", body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("mnd_") && id.len() > 4, "{id}");
    assert_eq!(r.body["status"], "active");
    assert_eq!(r.body["agent"], "agt_buyer");
    assert_eq!(r.body["principal"], "role:cfo");
    assert_eq!(r.body["limits"]["currency"], "EUR");
    assert_eq!(r.body["categories"], json!(["software", "travel"]));
    assert_eq!(r.body["expires"], "2026-12-31");
    assert_eq!(r.body["created_at"], "2026-11-22T12:00:00Z");
    // Numbers come back as they were sent, digit for digit.
    for needle in [
        r#""per_transaction":100.10"#,
        r#""per_month":1000.005"#,
        r#""review_above":50.50"#,
        r#""required_above":250.00"#,
    ] {
        assert!(r.text.contains(needle), "{needle} in {}", r.text);
    }
    assert_eq!(r.body["limits"]["per_transaction"].to_string(), "100.10");
    assert_eq!(r.body["escrow"]["required_above"].to_string(), "250.00");

    // Reading it back gives the same object, with what it has spent (nothing yet).
    let read = app.get(&org, &format!("/v1/mandates/{id}")).await;
    assert_eq!(read.status, 200, "{}", read.text);
    let mut spent = r.body.clone();
    spent["spent"] = json!({"day": 0, "week": 0, "month": 0});
    // And what each limit still allows: all of it, exact.
    spent["remaining"] =
        serde_json::from_str(r#"{"per_month": 1000.005, "per_transaction": 100.10}"#).unwrap();
    assert_eq!(read.body, spent);
    assert!(read.text.contains(r#""per_transaction":100.10"#));
    assert!(read.text.contains(r#""required_above":250.00"#));
}

#[mandate_test_macros::on_each_engine]
async fn escrow_required_above_is_stored_and_echoed_but_changes_no_outcome() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.agent(&org, "escrowed").await;
    let body = standard_mandate("escrowed").replace(
        r#""expires""#,
        r#""escrow": {"required_above": 10}, "expires""#,
    );
    let m = app.mandate(&org, &body).await;
    assert_eq!(m["escrow"], json!({"required_above": 10}));
    let listed = app.get(&org, "/v1/mandates").await;
    assert_eq!(listed.body["data"][0]["escrow"]["required_above"], 10);
    // 20 is above required_above but within the limits: still allow.
    let r = app.authorize(&agent, "20", "software").await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);

    for (escrow, message) in [
        (
            r#"{"required_above": -1}"#,
            "escrow.required_above must be >= 0",
        ),
        (
            r#"{"required_above": "5"}"#,
            "escrow.required_above must be",
        ),
        (r#"{}"#, "escrow.required_above is required"),
        (r#"{"required_above": 1, "x": 1}"#, "unknown field escrow.x"),
        (r#"5"#, "escrow must be an object"),
    ] {
        let body = standard_mandate("escrowed")
            .replace(r#""expires""#, &format!(r#""escrow": {escrow}, "expires""#));
        let r = app.post_text(&org, "/v1/mandates", &body).await;
        let got = r.assert_error(400, "invalid_request");
        assert!(got.starts_with(message), "{escrow}: {got}");
    }
}

#[mandate_test_macros::on_each_engine]
async fn required_unknown_and_read_only_fields_are_400_naming_the_field() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    app.agent(&org, "strict").await;
    let good: Value = serde_json::from_str(&standard_mandate("strict")).unwrap();
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        v
    };
    let cases = [
        (
            edit(&|v| {
                v["limits"].as_object_mut().unwrap().remove("currency");
            }),
            "limits.currency is required",
        ),
        (
            edit(&|v| {
                v["limits"]
                    .as_object_mut()
                    .unwrap()
                    .remove("per_transaction");
            }),
            "limits.per_transaction is required",
        ),
        (
            edit(&|v| {
                v.as_object_mut().unwrap().remove("agent");
            }),
            "agent is required",
        ),
        (
            edit(&|v| {
                v.as_object_mut().unwrap().remove("categories");
            }),
            "categories is required",
        ),
        (
            edit(&|v| {
                v.as_object_mut().unwrap().remove("expires");
            }),
            "expires is required",
        ),
        (
            edit(&|v| v["categories"] = json!([])),
            "categories must not be empty",
        ),
        (edit(&|v| v["x"] = json!(1)), "unknown field x"),
        (
            edit(&|v| v["limits"]["daily"] = json!(1)),
            "unknown field limits.daily",
        ),
        (
            edit(&|v| v["status"] = json!("active")),
            "status is read-only and cannot be set",
        ),
        (
            edit(&|v| v["id"] = json!("mnd_x")),
            "id is read-only and cannot be set",
        ),
        (
            edit(&|v| v["limits"]["currency"] = json!("usd")),
            "limits.currency must be three upper-case letters, for example USD",
        ),
        (
            edit(&|v| v["expires"] = json!("31/12/2026")),
            "expires must be a date, YYYY-MM-DD",
        ),
        (
            edit(&|v| v["principal"] = json!("cfo")),
            "principal must be role:<name>",
        ),
    ];
    for (body, message) in cases {
        let r = app.post(&org, "/v1/mandates", body.clone()).await;
        let got = r.assert_error(400, "invalid_request");
        assert!(got.starts_with(message), "{body}: {got}");
    }
    // Optional fields may be left out.
    let minimal = json!({"agent": "agt_strict", "limits": {"per_transaction": 5, "currency": "USD"},
        "categories": ["software"], "expires": "2026-12-31"});
    let r = app.post(&org, "/v1/mandates", minimal).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(r.body.get("principal").is_none());
    assert!(r.body.get("review_above").is_none());
    assert!(r.body["limits"].get("per_month").is_none());
    // Only that one was created.
    assert_eq!(ids(&app.get(&org, "/v1/mandates").await.body).len(), 1);
}

#[mandate_test_macros::on_each_engine]
async fn a_mandate_for_an_unknown_agent_is_404() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let r = app
        .post_text(&org, "/v1/mandates", &standard_mandate("ghost"))
        .await;
    let message = r.assert_error(404, "not_found");
    assert!(message.contains("agt_ghost"), "{message}");
    assert_eq!(app.get(&org, "/v1/mandates").await.body["data"], json!([]));
}

#[mandate_test_macros::on_each_engine]
async fn mandates_for_agents_that_do_not_exist_take_no_agent_slot() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agents = || app.running.as_ref().unwrap().state.agents.len();
    let before = agents();
    for n in 0..300 {
        let r = app
            .post_text(
                &org,
                "/v1/mandates",
                &standard_mandate(&format!("ghost{n}")),
            )
            .await;
        let message = r.assert_error(404, "not_found");
        assert_eq!(
            message,
            format!("no agent with id agt_ghost{n}; register it with POST /v1/agents first")
        );
        if n % 50 == 49 {
            app.advance(1); // under the key's 100 requests a second
        }
    }
    // Also with the live key, and for a name that is not an agent id at all (400).
    let r = app
        .post_text(&app.org.live, "/v1/mandates", &standard_mandate("ghost0"))
        .await;
    r.assert_error(404, "not_found");
    let r = app
        .post_text(&org, "/v1/mandates", &standard_mandate("Not An Id"))
        .await;
    assert!(
        r.assert_error(400, "invalid_request").contains("agent"),
        "{}",
        r.text
    );
    assert_eq!(agents(), before, "slots grew for agents that do not exist");
    // An agent that exists gets its slot, and its mandate.
    app.agent(&org, "real").await;
    app.mandate(&org, &standard_mandate("real")).await;
    assert_eq!(agents(), before + 1);
    assert_eq!(ids(&app.get(&org, "/v1/mandates").await.body).len(), 1);
}

#[mandate_test_macros::on_each_engine]
async fn a_new_mandate_supersedes_the_previous_one() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "renewed").await;
    let first = app.get(&org, "/v1/mandates").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.advance(1);
    let second = app
        .mandate(
            &org,
            &standard_mandate("renewed")
                .replace(r#""per_transaction": 100"#, r#""per_transaction": 5"#),
        )
        .await;
    let second = second["id"].as_str().unwrap().to_owned();
    assert_ne!(first, second);
    let old = app.get(&org, &format!("/v1/mandates/{first}")).await;
    assert_eq!(old.body["status"], "superseded");
    let new = app.get(&org, &format!("/v1/mandates/{second}")).await;
    assert_eq!(new.body["status"], "active");
    // The new terms are the ones in force.
    let r = app.authorize(&agent, "6", "software").await;
    assert_eq!(r.body["verdict"], "deny_limit");
    assert_eq!(r.body["mandate"], second.as_str());
    // A superseded mandate cannot be revoked.
    let r = app
        .post_empty(&org, &format!("/v1/mandates/{first}/revoke"))
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("superseded"), "{message}");
}

#[mandate_test_macros::on_each_engine]
async fn revoke_once_then_400_and_delete_is_always_400() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "revocable").await;
    let id = app.get(&org, "/v1/mandates").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let r = app
        .send(
            Method::DELETE,
            Some(&org),
            &format!("/v1/mandates/{id}"),
            None,
            &[],
        )
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("DELETE"), "{message}");
    assert!(message.contains("revoke"), "{message}");
    assert!(r.header("allow").is_none());
    // DELETE changed nothing.
    let read = app.get(&org, &format!("/v1/mandates/{id}")).await;
    assert_eq!(read.body["status"], "active");
    // An agent key gets the same 400.
    let r = app
        .send(
            Method::DELETE,
            Some(&agent),
            &format!("/v1/mandates/{id}"),
            None,
            &[],
        )
        .await;
    r.assert_error(400, "invalid_request");

    assert!(sandbox_events(&app).is_empty());
    app.advance(5);
    let revoked = app
        .post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    assert_eq!(revoked.body["status"], "revoked");
    assert_eq!(revoked.body["id"], id.as_str());
    assert_eq!(revoked.body["agent"], "agt_revocable");
    let read = app.get(&org, &format!("/v1/mandates/{id}")).await;
    assert_eq!(read.body["status"], "revoked");
    let events = sandbox_events(&app);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "mandate.revoked");
    assert_eq!(events[0].1["id"], id.as_str());
    assert_eq!(events[0].1["status"], "revoked");
    assert_eq!(
        app.authorize(&agent, "1", "software").await.body["verdict"],
        "deny_revoked"
    );

    let again = app
        .post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;
    let message = again.assert_error(400, "invalid_request");
    assert!(message.contains("revoked"), "{message}");
    // The second attempt wrote no event.
    assert_eq!(sandbox_events(&app).len(), 1);

    app.post_empty(&org, "/v1/mandates/mnd_missing/revoke")
        .await
        .assert_error(404, "not_found");
    app.post_empty(&agent, &format!("/v1/mandates/{id}/revoke"))
        .await
        .assert_error(403, "forbidden");
}

#[mandate_test_macros::on_each_engine]
async fn get_and_list_with_agent_and_status_filters() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    app.agent(&org, "a").await;
    app.agent(&org, "b").await;
    app.agent(&org, "c").await;
    let a1 = app.mandate(&org, &standard_mandate("a")).await;
    let a2 = app.mandate(&org, &standard_mandate("a")).await;
    let b1 = app.mandate(&org, &standard_mandate("b")).await;
    let c1 = app
        .mandate(
            &org,
            &standard_mandate("c").replace("2026-12-31", "2026-11-23"),
        )
        .await;
    let id = |m: &Value| m["id"].as_str().unwrap().to_owned();
    let (a1, a2, b1, c1) = (id(&a1), id(&a2), id(&b1), id(&c1));
    let revoked = app
        .post_empty(&org, &format!("/v1/mandates/{b1}/revoke"))
        .await;
    assert_eq!(revoked.status, 200);

    let list = |query: &'static str| {
        let app = &app;
        let org = org.clone();
        async move {
            let r = app.get(&org, &format!("/v1/mandates{query}")).await;
            assert_eq!(r.status, 200, "{query}: {}", r.text);
            ids(&r.body)
        }
    };
    assert_eq!(
        list("").await,
        [c1.as_str(), b1.as_str(), a2.as_str(), a1.as_str()]
    );
    assert_eq!(list("?agent=agt_a").await, [a2.as_str(), a1.as_str()]);
    assert_eq!(list("?agent=agt_b").await, [b1.as_str()]);
    assert!(list("?agent=agt_nobody").await.is_empty());
    assert_eq!(list("?status=active").await, [c1.as_str(), a2.as_str()]);
    assert_eq!(list("?status=superseded").await, [a1.as_str()]);
    assert_eq!(list("?status=revoked").await, [b1.as_str()]);
    assert!(list("?status=expired").await.is_empty());
    assert_eq!(list("?agent=agt_a&status=active").await, [a2.as_str()]);
    assert!(list("?agent=agt_b&status=active").await.is_empty());

    // The day after c1's expires date, it reads expired everywhere.
    app.clock
        .set(time::macros::datetime!(2026-11-23 23:59:59 UTC));
    assert_eq!(list("?status=expired").await.len(), 0);
    app.advance(1);
    let read = app.get(&org, &format!("/v1/mandates/{c1}")).await;
    assert_eq!(read.body["status"], "expired");
    assert_eq!(list("?status=expired").await, [c1.as_str()]);
    assert_eq!(list("?status=active").await, [a2.as_str()]);
    let all = app.get(&org, "/v1/mandates").await;
    let statuses: Vec<_> = all.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["expired", "revoked", "active", "superseded"]);

    // An expired mandate is not active: it cannot be revoked, and stays expired.
    let r = app
        .post_empty(&org, &format!("/v1/mandates/{c1}/revoke"))
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("expired"), "{message}");
    let read = app.get(&org, &format!("/v1/mandates/{c1}")).await;
    assert_eq!(read.body["status"], "expired");

    for bad in ["?status=gone", "?status=", "?status=Active", "?owner=x"] {
        let r = app.get(&org, &format!("/v1/mandates{bad}")).await;
        r.assert_error(400, "invalid_request");
    }
    app.get(&org, "/v1/mandates/mnd_nope")
        .await
        .assert_error(404, "not_found");
}
