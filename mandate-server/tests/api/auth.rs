//! Authentication and scoping: 401 for anyone without a live key, 403 for the wrong key
//! class, 404 for anything outside the caller's organization, environment or agent, and a
//! request id and a per-key rate on every request.

use mandate_server::operator;
use reqwest::Method;
use serde_json::json;

use crate::helpers::{Resp, TestApp, spawn_app, spawn_app_with, standard_mandate};

/// Asserts a 401 envelope with the onboarding message.
#[track_caller]
fn assert_unauthorized(r: &Resp) {
    let message = r.assert_error(401, "unauthorized");
    assert!(message.contains("onboarding"), "{message}");
    assert!(message.contains("missing or revoked"), "{message}");
}

#[mandate_test_macros::on_each_engine]
async fn the_401_points_at_the_contract_on_the_docs_host() {
    // By default the docs host is the public listener, which serves the contract.
    let app = spawn_app().await;
    let r = anonymous(&app, Method::GET, "/v1/agents").await;
    assert_unauthorized(&r);
    let message = r.body["error"]["message"].as_str().unwrap();
    let contract = format!("{}/openapi.yaml", app.public);
    assert!(
        message.ends_with(&format!("The API is described at {contract}")),
        "{message}"
    );
    let served = app.send(Method::GET, None, &contract, None, &[]).await;
    assert_eq!(served.status, 200);
    // `--docs-url` is what the message names, normalized like `--verdicts-url`.
    let app = spawn_app_with(|c| c.docs_url = Some("https://docs.example.com/".into())).await;
    let r = anonymous(&app, Method::POST, "/v1/authorizations").await;
    assert_unauthorized(&r);
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.ends_with("The API is described at https://docs.example.com/openapi.yaml"),
        "{message}"
    );
    let revoked = app
        .send(
            Method::GET,
            Some("sk_sandbox_0000000000000000000000000000"),
            "/v1/agents",
            None,
            &[],
        )
        .await;
    assert_eq!(revoked.body["error"]["message"], r.body["error"]["message"]);
}

async fn anonymous(app: &TestApp, method: Method, path: &str) -> Resp {
    app.send(method, None, path, None, &[]).await
}

#[mandate_test_macros::on_each_engine]
async fn anonymous_requests_get_the_401_envelope_on_known_and_unknown_paths() {
    let app = spawn_app().await;
    let cases = [
        (Method::GET, "/v1/agents"),
        (Method::POST, "/v1/authorizations"),
        (Method::GET, "/nope"),
        (Method::DELETE, "/v1/mandates/x"),
        (Method::PUT, "/v1/agents"),
        (Method::GET, "/v1/reviews"),
        (Method::GET, "/"),
    ];
    for (method, path) in cases {
        let r = anonymous(&app, method.clone(), path).await;
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
        assert_unauthorized(&r);
    }
    // A body does not change anything.
    let r = app
        .send(
            Method::POST,
            None,
            "/v1/agents",
            Some(json!({"name": "x"}).to_string()),
            &[],
        )
        .await;
    assert_unauthorized(&r);
}

#[mandate_test_macros::on_each_engine]
async fn a_repeated_authorization_header_is_400_naming_it() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let other = app.org.live.clone();
    for (second, method, path) in [
        (format!("Bearer {org}"), Method::GET, "/v1/agents"),
        (format!("Bearer {other}"), Method::GET, "/v1/agents"),
        (
            "Bearer sk_sandbox_nope".to_owned(),
            Method::GET,
            "/v1/agents",
        ),
        (format!("Bearer {other}"), Method::POST, "/v1/agents"),
        (format!("Bearer {org}"), Method::GET, "/nope"),
    ] {
        let r = app
            .send(
                method.clone(),
                Some(&org),
                path,
                (method == Method::POST).then(|| json!({"name": "dup"}).to_string()),
                &[("authorization", second.as_str())],
            )
            .await;
        assert_eq!(
            r.assert_error(400, "invalid_request"),
            "the Authorization header appears 2 times; send it once",
            "{method} {path}"
        );
    }
    // Nothing was created under either key.
    for key in [&org, &other] {
        assert_eq!(app.get(key, "/v1/agents").await.body["data"], json!([]));
    }
}

#[mandate_test_macros::on_each_engine]
async fn malformed_authorization_headers_are_401() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let headers = [
        org.clone(),
        "Bearer".to_owned(),
        "Bearer ".to_owned(),
        format!("Basic {org}"),
        "Basic x".to_owned(),
        format!("bearer{org}"),
        "Bearer sk_sandbox_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned(),
        "Bearer sk_live_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ".to_owned(),
        "Bearer ak_sandbox_QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ".to_owned(),
        format!("Bearer xx_{org}"),
        format!("Bearer {org}{}", "A".repeat(200)),
    ];
    for value in &headers {
        let r = app
            .send(
                Method::GET,
                None,
                "/v1/agents",
                None,
                &[("authorization", value)],
            )
            .await;
        assert_eq!(r.status, 401, "header {value:?}: {}", r.text);
        assert_unauthorized(&r);
    }
    // The genuine key still works, so the 401s above are about the header.
    assert_eq!(app.get(&org, "/v1/agents").await.status, 200);
}

#[mandate_test_macros::on_each_engine]
async fn a_revoked_key_is_401_like_a_missing_one() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "soon-gone").await;
    assert_eq!(app.get(&org, "/v1/agents").await.status, 200);
    assert_eq!(app.get(&agent, "/v1/decisions").await.status, 200);

    let db = &*app.running.as_ref().unwrap().state.store;
    operator::revoke_key(db, &agent, app.clock_now()).unwrap();
    app.until_refused(&agent).await;
    assert_unauthorized(&app.authorize(&agent, "1", "software").await);
    assert_unauthorized(&app.get(&agent, "/v1/decisions").await);
    // The organization key is untouched.
    assert_eq!(app.get(&org, "/v1/agents").await.status, 200);

    operator::revoke_key(db, &org, app.clock_now()).unwrap();
    app.until_refused(&org).await;
    let anonymous_message = anonymous(&app, Method::GET, "/v1/agents")
        .await
        .assert_error(401, "unauthorized");
    let revoked = app.get(&org, "/v1/agents").await;
    assert_unauthorized(&revoked);
    assert_eq!(
        revoked.body["error"]["message"].as_str().unwrap(),
        anonymous_message
    );
    // The live key of the same organization is a different key.
    assert_eq!(app.get(&app.org.live, "/v1/agents").await.status, 200);
}

#[mandate_test_macros::on_each_engine]
async fn a_valid_key_of_the_wrong_class_is_403() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "worker").await;
    let review = app.authorize(&agent, "60", "software").await;
    assert_eq!(review.body["verdict"], "review", "{}", review.text);
    let review_id = review.body["review"]["id"].as_str().unwrap().to_owned();

    let forbidden = [
        app.post(&agent, "/v1/agents", json!({"name": "other"}))
            .await,
        app.post_text(&agent, "/v1/mandates", &standard_mandate("worker"))
            .await,
        app.post(&agent, "/v1/enforcement", json!({"mode": "observe"}))
            .await,
        app.get(&agent, "/v1/enforcement").await,
        app.post_empty(&agent, &format!("/v1/reviews/{review_id}/approve"))
            .await,
        // (Denying with the agent key of the decision's agent is its withdrawal, which the
        // reviews' tests hold.)
    ];
    for r in &forbidden {
        let message = r.assert_error(403, "forbidden");
        assert!(message.contains("organization key"), "{message}");
    }
    let r = app.authorize(&org, "1", "software").await;
    let message = r.assert_error(403, "forbidden");
    assert!(message.contains("agent key"), "{message}");

    // Nothing was changed by the refused calls: the review is still pending and approvable,
    // and the agent still has one mandate.
    let approved = app
        .post_empty(&org, &format!("/v1/reviews/{review_id}/approve"))
        .await;
    assert_eq!(approved.status, 201, "{}", approved.text);
    let mandates = app.get(&org, "/v1/mandates").await;
    assert_eq!(mandates.body["data"].as_array().unwrap().len(), 1);
    let agents = app.get(&org, "/v1/agents").await;
    assert_eq!(agents.body["data"].as_array().unwrap().len(), 1);
}

/// Asserts `r` is the 404 a missing id gives: same status, code, envelope keys and message
/// with the id substituted.
#[track_caller]
fn assert_same_404(foreign: &Resp, foreign_id: &str, missing: &Resp, missing_id: &str) {
    let foreign_message = foreign.assert_error(404, "not_found");
    let missing_message = missing.assert_error(404, "not_found");
    assert!(foreign_message.contains(foreign_id), "{foreign_message}");
    assert_eq!(
        foreign_message.replace(foreign_id, missing_id),
        missing_message
    );
    assert_eq!(
        foreign.headers.get("content-type"),
        missing.headers.get("content-type")
    );
}

#[mandate_test_macros::on_each_engine]
async fn another_organizations_objects_are_404_exactly_like_missing_ones() {
    let app = spawn_app().await;
    let other = app.onboard("other").await;
    let agent = app.standard_agent(&other.sandbox, "theirs").await;
    let decision = app.authorize(&agent, "60", "software").await;
    let decision_id = decision.body["id"].as_str().unwrap().to_owned();
    let review_id = decision.body["review"]["id"].as_str().unwrap().to_owned();
    let mandates = app.get(&other.sandbox, "/v1/mandates").await;
    let mandate_id = mandates.body["data"][0]["id"].as_str().unwrap().to_owned();

    let mine = app.org.sandbox.clone();
    for (path, id, missing_id) in [
        (
            "/v1/agents/agt_theirs".to_owned(),
            "agt_theirs",
            "agt_nobody",
        ),
        (
            format!("/v1/mandates/{mandate_id}"),
            mandate_id.as_str(),
            "mnd_none",
        ),
        (
            format!("/v1/decisions/{decision_id}"),
            decision_id.as_str(),
            "dec_none",
        ),
    ] {
        let foreign = app.get(&mine, &path).await;
        let missing = app.get(&mine, &path.replace(id, missing_id)).await;
        assert_same_404(&foreign, id, &missing, missing_id);
    }
    for (path, id, missing_id) in [
        (
            format!("/v1/mandates/{mandate_id}/revoke"),
            mandate_id.as_str(),
            "mnd_none",
        ),
        (
            format!("/v1/reviews/{review_id}/approve"),
            review_id.as_str(),
            "rev_none",
        ),
        (
            format!("/v1/reviews/{review_id}/deny"),
            review_id.as_str(),
            "rev_none",
        ),
    ] {
        let foreign = app.post_empty(&mine, &path).await;
        let missing = app.post_empty(&mine, &path.replace(id, missing_id)).await;
        assert_same_404(&foreign, id, &missing, missing_id);
    }
    // A mandate for their agent is refused as if the agent did not exist.
    let foreign = app
        .post_text(&mine, "/v1/mandates", &standard_mandate("theirs"))
        .await;
    let missing = app
        .post_text(&mine, "/v1/mandates", &standard_mandate("nobody"))
        .await;
    assert_same_404(&foreign, "agt_theirs", &missing, "agt_nobody");

    // Their lists look empty from here, and nothing of theirs changed.
    for path in ["/v1/agents", "/v1/mandates", "/v1/decisions"] {
        let r = app.get(&mine, path).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body["data"], json!([]), "{path}");
    }
    let theirs = app
        .get(&other.sandbox, &format!("/v1/mandates/{mandate_id}"))
        .await;
    assert_eq!(theirs.body["status"], "active");
    let decision = app
        .get(&other.sandbox, &format!("/v1/decisions/{decision_id}"))
        .await;
    assert_eq!(decision.status, 200);
}

#[mandate_test_macros::on_each_engine]
async fn a_sandbox_key_never_sees_live_objects() {
    let app = spawn_app().await;
    let live = app.org.live.clone();
    let sandbox = app.org.sandbox.clone();
    let agent = app.standard_agent(&live, "prod").await;
    let decision = app.authorize(&agent, "1", "software").await;
    assert_eq!(decision.status, 201);
    assert!(agent.starts_with("ak_live_"));
    let mandate_id = app.get(&live, "/v1/mandates").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decision_id = decision.body["id"].as_str().unwrap().to_owned();

    for path in [
        "/v1/agents/agt_prod".to_owned(),
        format!("/v1/mandates/{mandate_id}"),
        format!("/v1/decisions/{decision_id}"),
    ] {
        app.get(&sandbox, &path)
            .await
            .assert_error(404, "not_found");
        assert_eq!(app.get(&live, &path).await.status, 200, "{path}");
    }
    for path in ["/v1/agents", "/v1/mandates", "/v1/decisions"] {
        let r = app.get(&sandbox, path).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body["data"], json!([]), "{path}");
        assert_eq!(r.body["has_more"], false);
        let r = app.get(&live, path).await;
        assert_eq!(r.body["data"].as_array().unwrap().len(), 1, "{path}");
    }
    // The same name is free in the sandbox, and it is a different agent.
    let sandbox_agent = app.agent(&sandbox, "prod").await;
    assert!(sandbox_agent.starts_with("ak_sandbox_"));
    let r = app.authorize(&sandbox_agent, "1", "software").await;
    assert_eq!(r.body["verdict"], "deny_no_mandate");
}

#[mandate_test_macros::on_each_engine]
async fn an_agent_key_sees_only_its_own_objects() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let alice = app.standard_agent(&org, "alice").await;
    let bob = app.standard_agent(&org, "bob").await;
    let bobs = app.authorize(&bob, "1", "software").await;
    let bobs_id = bobs.body["id"].as_str().unwrap().to_owned();
    let alices = app.authorize(&alice, "2", "software").await;
    let alices_id = alices.body["id"].as_str().unwrap().to_owned();
    let bobs_mandate = bobs.body["mandate"].as_str().unwrap().to_owned();
    let alices_mandate = alices.body["mandate"].as_str().unwrap().to_owned();

    // Own objects are readable.
    assert_eq!(app.get(&alice, "/v1/agents/agt_alice").await.status, 200);
    assert_eq!(
        app.get(&alice, &format!("/v1/decisions/{alices_id}"))
            .await
            .status,
        200
    );
    assert_eq!(
        app.get(&alice, &format!("/v1/mandates/{alices_mandate}"))
            .await
            .status,
        200
    );

    // Bob's are not, and read exactly like missing ones.
    let cases = [
        ("/v1/agents/agt_bob".to_owned(), "agt_bob".to_owned()),
        (format!("/v1/decisions/{bobs_id}"), bobs_id.clone()),
        (format!("/v1/mandates/{bobs_mandate}"), bobs_mandate.clone()),
    ];
    for (path, id) in &cases {
        let foreign = app.get(&alice, path).await;
        let missing = app.get(&alice, &path.replace(id.as_str(), "zz_none")).await;
        let message = foreign.assert_error(404, "not_found");
        assert_eq!(
            message.replace(id.as_str(), "zz_none"),
            missing.assert_error(404, "not_found")
        );
    }

    // Lists hold only Alice's objects, even when Bob's are asked for by filter.
    let agents = app.get(&alice, "/v1/agents").await;
    assert_eq!(agents.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(agents.body["data"][0]["id"], "agt_alice");
    let decisions = app.get(&alice, "/v1/decisions").await;
    let ids: Vec<_> = decisions.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [alices_id]);
    let mandates = app.get(&alice, "/v1/mandates").await;
    assert_eq!(mandates.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(mandates.body["data"][0]["agent"], "agt_alice");
    for path in ["/v1/decisions?agent=agt_bob", "/v1/mandates?agent=agt_bob"] {
        let r = app.get(&alice, path).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["data"], json!([]), "{path}");
    }
    // The organization sees both.
    let all = app.get(&org, "/v1/decisions").await;
    assert_eq!(all.body["data"].as_array().unwrap().len(), 2);
}

#[mandate_test_macros::on_each_engine]
async fn an_unsupported_method_on_a_known_path_is_400_without_allow() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let cases = [
        (Method::PUT, "/v1/agents"),
        (Method::DELETE, "/v1/agents"),
        (Method::PATCH, "/v1/mandates"),
        (Method::POST, "/v1/decisions"),
        (Method::PUT, "/v1/enforcement"),
        (Method::GET, "/v1/authorizations"),
        (Method::DELETE, "/v1/agents/agt_x"),
        (Method::GET, "/v1/mandates/mnd_x/revoke"),
        (Method::DELETE, "/v1/decisions/dec_x"),
    ];
    for (method, path) in cases {
        let r = app.send(method.clone(), Some(&org), path, None, &[]).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.contains("method"), "{method} {path}: {message}");
        assert!(r.header("allow").is_none(), "{method} {path}");
    }
    // DELETE on a mandate is its own 400, naming revoke as the way.
    let r = app
        .send(Method::DELETE, Some(&org), "/v1/mandates/mnd_x", None, &[])
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("revoke"), "{message}");
    assert!(r.header("allow").is_none());
    // The review read paths do not exist.
    app.get(&org, "/v1/reviews")
        .await
        .assert_error(404, "not_found");
    app.get(&org, "/v1/reviews/rev_x")
        .await
        .assert_error(404, "not_found");
}

#[mandate_test_macros::on_each_engine]
async fn every_response_carries_a_request_id() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "tagged").await;
    let responses = [
        app.get(&org, "/v1/agents").await,
        app.authorize(&agent, "1", "software").await,
        app.post(&org, "/v1/agents", json!({"name": "Bad Name"}))
            .await,
        app.get(&org, "/v1/nope").await,
        app.get(&org, "/nope").await,
        app.get(&org, "/v1/agents/agt_missing").await,
        app.send(Method::PUT, Some(&org), "/v1/agents", None, &[])
            .await,
        anonymous(&app, Method::GET, "/v1/agents").await,
        anonymous(&app, Method::GET, "/nope").await,
        app.authorize(&org, "1", "software").await,
    ];
    let expected = [200, 201, 400, 404, 404, 404, 400, 401, 401, 403];
    let mut seen = std::collections::HashSet::new();
    for (r, status) in responses.iter().zip(expected) {
        assert_eq!(r.status, status, "{}", r.text);
        let id = r.header("x-request-id").unwrap_or_default();
        assert!(id.starts_with("req_") && id.len() > 4, "{status}: {id:?}");
        assert!(seen.insert(id.to_owned()), "request id reused: {id}");
        if status >= 400 {
            r.assert_error(status, r.body["error"]["code"].as_str().unwrap());
        }
    }
    // The 404 fallback is the envelope too.
    app.get(&org, "/nope").await.assert_error(404, "not_found");
    // The redirect and the public host carry one as well.
    let redirect = anonymous(&app, Method::GET, "/.well-known/jwks.json").await;
    assert_eq!(redirect.status, 308);
    assert!(
        redirect
            .header("x-request-id")
            .is_some_and(|id| id.starts_with("req_"))
    );
    let public = app
        .send(
            Method::GET,
            None,
            &format!("{}/.well-known/jwks.json", app.public),
            None,
            &[],
        )
        .await;
    assert_eq!(public.status, 200);
    assert!(
        public
            .header("x-request-id")
            .is_some_and(|id| id.starts_with("req_"))
    );
}

#[mandate_test_macros::on_each_engine]
async fn the_per_key_rate_is_enforced_per_key_with_retry_after() {
    let app = spawn_app().await;
    let limited = app.org.sandbox.clone();
    let other = app.org.live.clone();
    let db = &*app.running.as_ref().unwrap().state.store;
    operator::set_rate(db, &limited, 3).unwrap();

    for i in 0..3 {
        let r = app.get(&limited, "/v1/agents").await;
        assert_eq!(r.status, 200, "request {}: {}", i + 1, r.text);
    }
    let r = app.get(&limited, "/v1/agents").await;
    let message = r.assert_error(429, "rate_limited");
    assert!(message.contains('3'), "{message}");
    let retry_after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry_after), "{retry_after}");
    // Any path counts against the same key, and the refusal comes before routing.
    app.get(&limited, "/nope")
        .await
        .assert_error(429, "rate_limited");
    app.post(&limited, "/v1/agents", json!({"name": "x"}))
        .await
        .assert_error(429, "rate_limited");
    // Another key is unaffected.
    for _ in 0..5 {
        assert_eq!(app.get(&other, "/v1/agents").await.status, 200);
    }
    // A client that waits as long as Retry-After says gets through.
    app.advance(i64::try_from(retry_after).unwrap());
    let r = app.get(&limited, "/v1/agents").await;
    assert_eq!(r.status, 200, "after {retry_after} s: {}", r.text);
    // Refused requests did not create anything.
    assert_eq!(r.body["data"], json!([]));
    // Two seconds after a burst, the window is empty again.
    app.get(&limited, "/v1/agents").await;
    app.get(&limited, "/v1/agents").await;
    app.get(&limited, "/v1/agents")
        .await
        .assert_error(429, "rate_limited");
    app.advance(2);
    for _ in 0..3 {
        assert_eq!(app.get(&limited, "/v1/agents").await.status, 200);
    }
}

#[mandate_test_macros::on_each_engine]
async fn the_key_class_is_checked_before_the_body() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.agent(&org, "early").await;
    for path in ["/v1/agents", "/v1/mandates", "/v1/enforcement"] {
        for body in [None, Some("{"), Some("[]"), Some("{}")] {
            let r = app
                .send(
                    Method::POST,
                    Some(&agent),
                    path,
                    body.map(str::to_owned),
                    &[],
                )
                .await;
            r.assert_error(403, "forbidden");
        }
    }
    // Either class of key may deny (an agent key withdraws its own review): a bad body is
    // the 400 that names it, whichever key sent it.
    for body in [Some("{"), Some("[]"), Some(r#"{"reason": 5}"#)] {
        let r = app
            .send(
                Method::POST,
                Some(&agent),
                "/v1/reviews/rev_x/deny",
                body.map(str::to_owned),
                &[],
            )
            .await;
        r.assert_error(400, "invalid_request");
    }
    for body in [None, Some("{"), Some("{}")] {
        let r = app
            .send(
                Method::POST,
                Some(&org),
                "/v1/authorizations",
                body.map(str::to_owned),
                &[],
            )
            .await;
        r.assert_error(403, "forbidden");
    }
}

#[mandate_test_macros::on_each_engine]
async fn operator_changes_reach_a_running_server_whose_caches_are_warm() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "cached").await;
    let before = app.authorize(&agent, "1", "software").await;
    assert!(
        before.body["policy_version"]
            .as_str()
            .unwrap()
            .starts_with("pol_2026-11-22.")
    );
    let db = &*app.running.as_ref().unwrap().state.store;
    operator::set_policy_version(db, "acme", "pol_2026-12-01.7").unwrap();
    let mut seen = None;
    for _ in 0..200 {
        app.advance(7); // stay clear of the velocity rule while polling
        let r = app.authorize(&agent, "1", "software").await;
        if r.body["policy_version"] == "pol_2026-12-01.7" {
            seen = Some(r);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(
        seen.is_some(),
        "the new policy version never reached the server"
    );
    // A cached key whose rate is lowered is limited once the change is seen.
    operator::set_rate(db, &org, 1).unwrap();
    let mut limited = false;
    for _ in 0..200 {
        let a = app.get(&org, "/v1/agents").await;
        let b = app.get(&org, "/v1/agents").await;
        if a.status == 429 || b.status == 429 {
            limited = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(limited, "the lowered rate never applied");
}
