//! Reviews: approve gives a fresh decision, deny resolves, each only once.

use futures_util::future::join_all;
use mandate_core::{VerifyOptions, verify_verdict};
use serde_json::json;

use crate::helpers::{TestApp, spawn_app};

/// A pending review; returns (agent key, original decision, review id).
async fn pending(app: &TestApp, name: &str, amount: &str) -> (String, serde_json::Value, String) {
    let agent = app.standard_agent(&app.org.sandbox, name).await;
    let r = app.authorize(&agent, amount, "software").await;
    assert_eq!(r.body["verdict"], "review", "{}", r.text);
    let review = r.body["review"]["id"].as_str().unwrap().to_owned();
    (agent, r.body, review)
}

#[mandate_test_macros::on_each_engine]
async fn approving_makes_a_fresh_signed_decision_that_supersedes() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let (_agent, original, review) = pending(&app, "buyer", "75.25").await;
    app.advance(30);
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "allow");
    assert_eq!(r.body["supersedes"], original["id"]);
    assert_ne!(r.body["id"], original["id"]);
    assert_ne!(r.body["nonce"], original["nonce"]);
    assert_eq!(
        r.body["iat"].as_i64().unwrap(),
        original["iat"].as_i64().unwrap() + 30
    );
    assert_eq!(
        r.body["exp"].as_i64().unwrap(),
        r.body["iat"].as_i64().unwrap() + 300
    );
    assert_eq!(r.body["request"], original["request"]);
    let claims = verify_verdict(
        r.body["verdict_token"].as_str().unwrap(),
        &app.jwks().await,
        &VerifyOptions {
            issuer: app.issuer(),
            now: app.clock_now(),
            leeway_secs: 0,
        },
    )
    .unwrap();
    assert_eq!(claims.request.amount.to_string(), "75.25");
    // The original stays in the log as it was.
    let stored = app
        .get(
            &org,
            &format!("/v1/decisions/{}", original["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(stored.body["verdict"], "review");
    assert_eq!(stored.body["review"], review.as_str());
    // Resolving again is 400, either way.
    app.post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await
        .assert_error(400, "invalid_request");
    app.post_empty(&org, &format!("/v1/reviews/{review}/deny"))
        .await
        .assert_error(400, "invalid_request");
    // The approved amount counts for the month: 450 - 75.25 = 374.75 remain.
    let agent = app.agent(&org, "other").await;
    let _ = agent;
}

#[mandate_test_macros::on_each_engine]
async fn deny_resolves_without_a_new_decision() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let (agent, original, review) = pending(&app, "denied", "60").await;
    app.advance(45);
    let r = app
        .post(
            &org,
            &format!("/v1/reviews/{review}/deny"),
            json!({"reason": "not this quarter"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["status"], "denied");
    assert_eq!(r.body["reason"], "not this quarter");
    assert_eq!(r.body["id"], review.as_str());
    assert!(r.body["resolved_at"].is_string());
    let decisions = app.get(&org, "/v1/decisions").await;
    assert_eq!(decisions.body["data"].as_array().unwrap().len(), 1);
    // Every read of the decision that opened the review says why and when: the agent's
    // own read, the list and the export.
    let path = format!("/v1/decisions/{}", original["id"].as_str().unwrap());
    let read = app.get(&agent, &path).await;
    let export = app.get(&org, "/v1/exports/decisions").await;
    let exported: serde_json::Value =
        serde_json::from_str(export.text.lines().next().unwrap()).unwrap();
    for decision in [&read.body, &decisions.body["data"][0], &exported] {
        assert_eq!(decision["review_status"], "denied", "{decision}");
        assert_eq!(decision["review_reason"], "not this quarter", "{decision}");
        assert_eq!(
            decision["review_resolved_at"], r.body["resolved_at"],
            "{decision}"
        );
        assert!(decision.get("review_resolution").is_none(), "{decision}");
    }
    app.post_empty(&org, &format!("/v1/reviews/{review}/deny"))
        .await
        .assert_error(400, "invalid_request");
    // A body with other fields is refused.
    let (_a, _o, second) = pending(&app, "denied2", "60").await;
    let bad = app
        .post(
            &org,
            &format!("/v1/reviews/{second}/deny"),
            json!({"why": "x"}),
        )
        .await;
    assert_eq!(
        bad.assert_error(400, "invalid_request"),
        "unknown field why"
    );
    // Without a body it works too, and the decision then carries no reason.
    assert_eq!(
        app.post_empty(&org, &format!("/v1/reviews/{second}/deny"))
            .await
            .status,
        200
    );
    let silent = app.get(&org, "/v1/decisions?review_status=denied").await;
    let without: Vec<_> = silent.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d.get("review_reason").is_none())
        .collect();
    assert_eq!(without.len(), 1, "{}", silent.text);
    assert!(without[0]["review_resolved_at"].is_string());
}

#[mandate_test_macros::on_each_engine]
async fn approval_rechecks_the_mandate_as_it_is_now() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    // Revoked since the review opened: the fresh decision is deny_revoked.
    let (_agent, original, review) = pending(&app, "revokedlater", "60").await;
    let mandate = original["mandate"].as_str().unwrap();
    assert_eq!(
        app.post_empty(&org, &format!("/v1/mandates/{mandate}/revoke"))
            .await
            .status,
        200
    );
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["verdict"], "deny_revoked");

    // Over per_month by the time it is approved: deny_limit.
    let (agent, _original, review) = pending(&app, "spender", "90").await;
    for _ in 0..9 {
        assert_eq!(
            app.authorize(&agent, "45", "software").await.body["verdict"],
            "allow"
        );
    }
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    assert_eq!(r.body["verdict"], "deny_limit");

    // Velocity and the review threshold are not applied again.
    let (agent, _original, review) = pending(&app, "busy", "99").await;
    for _ in 0..12 {
        app.authorize(&agent, "1", "food").await;
    }
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    assert_eq!(r.body["verdict"], "allow");
}

#[mandate_test_macros::on_each_engine]
async fn a_review_expires_after_24_hours() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let (_agent, _original, review) = pending(&app, "slowpoke", "60").await;
    app.advance(24 * 3600);
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("expired"), "{message}");
    let again = app
        .post_empty(&org, &format!("/v1/reviews/{review}/deny"))
        .await;
    assert!(
        again
            .assert_error(400, "invalid_request")
            .contains("expired")
    );
}

#[mandate_test_macros::on_each_engine]
async fn one_resolution_per_review_under_races() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let (_agent, _original, review) = pending(&app, "contested", "60").await;
    let path = format!("/v1/reviews/{review}/approve");
    let responses = join_all((0..8).map(|_| app.post_empty(&org, &path))).await;
    assert_eq!(responses.iter().filter(|r| r.status == 201).count(), 1);
    assert_eq!(responses.iter().filter(|r| r.status == 400).count(), 7);
    let fresh = app.get(&org, "/v1/decisions?verdict=allow").await;
    assert_eq!(fresh.body["data"].as_array().unwrap().len(), 1);
}

#[mandate_test_macros::on_each_engine]
async fn review_paths_and_keys() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let (agent, _original, review) = pending(&app, "keys", "60").await;
    app.get(&org, "/v1/reviews")
        .await
        .assert_error(404, "not_found");
    app.get(&org, &format!("/v1/reviews/{review}"))
        .await
        .assert_error(404, "not_found");
    app.post_empty(&agent, &format!("/v1/reviews/{review}/approve"))
        .await
        .assert_error(403, "forbidden");
    let other = app.onboard("other").await;
    let foreign = app
        .post_empty(&other.sandbox, &format!("/v1/reviews/{review}/approve"))
        .await;
    let missing = app
        .post_empty(&other.sandbox, "/v1/reviews/rev_doesnotexist/approve")
        .await;
    assert_eq!(
        foreign
            .assert_error(404, "not_found")
            .replace(&review, "ID"),
        missing
            .assert_error(404, "not_found")
            .replace("rev_doesnotexist", "ID")
    );
    app.post_empty(&app.org.live, &format!("/v1/reviews/{review}/approve"))
        .await
        .assert_error(404, "not_found");
}

#[mandate_test_macros::on_each_engine]
async fn approving_after_a_switch_to_observe_allows_and_keeps_the_rechecks_finding() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let mode = |m: &str| json!({ "mode": m });
    // A review opened in enforce (the sandbox's mode), then the mandate revoked and the
    // environment switched to observe.
    let (_agent, original, revoked_review) = pending(&app, "gone", "60").await;
    let mandate = original["mandate"].as_str().unwrap().to_owned();
    let r = app
        .post_empty(&org, &format!("/v1/mandates/{mandate}/revoke"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let (agent, _, over_review) = pending(&app, "spender", "60").await;
    let r = app.post(&org, "/v1/enforcement", mode("observe")).await;
    assert_eq!(r.body["mode"], "observe", "{}", r.text);

    // Nothing blocks in observe: the fresh decision is an allow, signed as one, and
    // policy_verdict says what enforcement would have said.
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{revoked_review}/approve"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    assert_eq!(r.body["policy_verdict"], "deny_revoked");
    assert_eq!(r.body["mode"], "observe");
    assert!(
        r.body["reason"].as_str().unwrap().contains("revoked"),
        "{}",
        r.text
    );
    let options = VerifyOptions {
        issuer: app.issuer(),
        now: app.clock_now(),
        leeway_secs: 0,
    };
    let jwks = app.jwks().await;
    let claims =
        verify_verdict(r.body["verdict_token"].as_str().unwrap(), &jwks, &options).unwrap();
    assert_eq!(claims.verdict.as_str(), "allow");
    assert_eq!(claims.policy_verdict.as_str(), "deny_revoked");

    // Over per_month at approval: 4 × 100 allowed in observe (400 of 450), then the
    // approved 60 is over; it is allowed and counts in month-to-date like any observe allow.
    for _ in 0..4 {
        let r = app.authorize(&agent, "100", "software").await;
        assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    }
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{over_review}/approve"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    assert_eq!(r.body["policy_verdict"], "deny_limit");
    assert!(
        r.body["reason"].as_str().unwrap().contains("per_month"),
        "{}",
        r.text
    );
    // Back in enforce, 460 are spent: 1 more is over 450 (it would be allowed at 401),
    // in memory and after a restart alike (rebuilt from the stored decisions).
    app.post(&org, "/v1/enforcement", mode("enforce")).await;
    app.advance(61);
    let r = app.authorize(&agent, "1", "software").await;
    assert_eq!(r.body["verdict"], "deny_limit", "{}", r.text);
    app.restart().await;
    let r = app.authorize(&agent, "1", "software").await;
    assert_eq!(r.body["verdict"], "deny_limit", "{}", r.text);
    assert!(
        r.body["reason"].as_str().unwrap().contains("460"),
        "{}",
        r.text
    );
}

#[mandate_test_macros::on_each_engine]
async fn approving_in_enforce_after_a_revoke_is_still_the_denial() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let (_agent, original, review) = pending(&app, "gone", "60").await;
    let mandate = original["mandate"].as_str().unwrap().to_owned();
    app.post_empty(&org, &format!("/v1/mandates/{mandate}/revoke"))
        .await;
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "deny_revoked", "{}", r.text);
    assert_eq!(r.body["policy_verdict"], "deny_revoked");
    assert_eq!(r.body["mode"], "enforce");
}

/// The agent whose decision opened a review withdraws it with its own key: the review is
/// denied and says it was withdrawn (the answer, every read of the decision, the event),
/// and nothing can resolve it afterwards: an approval is 409 `review_withdrawn`, and so is
/// a person's denial. Another agent's key cannot touch it (404, as for a missing review),
/// and a person's denial is no withdrawal.
#[mandate_test_macros::on_each_engine]
async fn the_agent_withdraws_its_own_review_and_no_approval_follows() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let (agent, original, review) = pending(&app, "withdrawer", "60").await;
    let other = app.standard_agent(&org, "bystander").await;
    let deny = format!("/v1/reviews/{review}/deny");
    let approve = format!("/v1/reviews/{review}/approve");

    // Another agent of the same organization: 404, the same as a missing review, and the
    // review stays pending.
    let foreign = app.post_empty(&other, &deny).await;
    let missing = app
        .post_empty(&other, "/v1/reviews/rev_doesnotexist/deny")
        .await;
    assert_eq!(
        foreign
            .assert_error(404, "not_found")
            .replace(&review, "ID"),
        missing
            .assert_error(404, "not_found")
            .replace("rev_doesnotexist", "ID")
    );
    let path = format!("/v1/decisions/{}", original["id"].as_str().unwrap());
    assert_eq!(app.get(&org, &path).await.body["review_status"], "pending");

    app.advance(20);
    let r = app
        .post(
            &agent,
            &deny,
            json!({"reason": "the client cancelled the task"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["status"], "denied");
    assert_eq!(r.body["withdrawn"], true);
    assert_eq!(r.body["reason"], "the client cancelled the task");
    assert!(r.body["resolved_at"].is_string());

    // Every read of the decision says it was withdrawn: the agent's, the list, the export.
    let read = app.get(&agent, &path).await;
    let listed = app.get(&org, "/v1/decisions?review_status=denied").await;
    let export = app.get(&org, "/v1/exports/decisions").await;
    let exported: serde_json::Value =
        serde_json::from_str(export.text.lines().next().unwrap()).unwrap();
    for decision in [&read.body, &listed.body["data"][0], &exported] {
        assert_eq!(decision["review_status"], "denied", "{decision}");
        assert_eq!(decision["review_withdrawn"], true, "{decision}");
        assert_eq!(decision["review_resolved_at"], r.body["resolved_at"]);
        assert!(decision.get("review_resolution").is_none(), "{decision}");
    }
    let events = app.get(&org, "/v1/events").await;
    let resolved = events.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "decision.resolved")
        .unwrap_or_else(|| panic!("no decision.resolved in {}", events.text));
    assert_eq!(resolved["data"]["withdrawn"], true, "{resolved}");
    assert_eq!(resolved["data"]["status"], "denied", "{resolved}");

    // Nothing resolves it any more: an approval is 409, a person's denial too, and so is
    // withdrawing it again; no decision was made.
    for (key, path) in [(&org, &approve), (&org, &deny), (&agent, &deny)] {
        let message = app
            .post_empty(key, path)
            .await
            .assert_error(409, "review_withdrawn");
        assert!(message.contains("withdrawn by its agent"), "{message}");
    }
    let decisions = app.get(&org, "/v1/decisions").await;
    assert_eq!(decisions.body["data"].as_array().unwrap().len(), 1);

    // A person's denial is no withdrawal; an approved review cannot be withdrawn (400, as
    // any resolved review); an agent key still cannot approve.
    let (_agent, original, second) = pending(&app, "denied", "60").await;
    let denied = app
        .post_empty(&org, &format!("/v1/reviews/{second}/deny"))
        .await;
    assert_eq!(denied.status, 200, "{}", denied.text);
    assert!(denied.body.get("withdrawn").is_none(), "{}", denied.text);
    let read = app
        .get(
            &org,
            &format!("/v1/decisions/{}", original["id"].as_str().unwrap()),
        )
        .await;
    assert!(read.body.get("review_withdrawn").is_none(), "{}", read.text);
    let (agent, _original, third) = pending(&app, "approved", "60").await;
    app.post_empty(&agent, &format!("/v1/reviews/{third}/approve"))
        .await
        .assert_error(403, "forbidden");
    let approved = app
        .post_empty(&org, &format!("/v1/reviews/{third}/approve"))
        .await;
    assert_eq!(approved.status, 201, "{}", approved.text);
    app.post_empty(&agent, &format!("/v1/reviews/{third}/deny"))
        .await
        .assert_error(400, "invalid_request");
}

/// An approval and the agent's withdrawal racing for one review: exactly one of them
/// resolves it, and the other is refused (the approval with 409 when the withdrawal won);
/// an allow exists only if the approval won.
#[mandate_test_macros::on_each_engine]
async fn an_approval_racing_a_withdrawal_never_both_resolve() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let mut outcomes = Vec::new();
    for round in 0..6 {
        let (agent, _original, review) = pending(&app, &format!("racer{round}"), "60").await;
        let approve = format!("/v1/reviews/{review}/approve");
        let withdraw = format!("/v1/reviews/{review}/deny");
        let (approved, withdrawn) = tokio::join!(
            app.post_empty(&org, &approve),
            app.post_empty(&agent, &withdraw)
        );
        match (approved.status, withdrawn.status) {
            (201, 400) => outcomes.push("approved"),
            (409, 200) => {
                approved.assert_error(409, "review_withdrawn");
                outcomes.push("withdrawn");
            }
            other => panic!(
                "round {round}: {other:?}\n{}\n{}",
                approved.text, withdrawn.text
            ),
        }
    }
    let allows = app.get(&org, "/v1/decisions?verdict=allow").await;
    let approvals = outcomes.iter().filter(|o| **o == "approved").count();
    assert_eq!(
        allows.body["data"].as_array().unwrap().len(),
        approvals,
        "{outcomes:?}"
    );
}
