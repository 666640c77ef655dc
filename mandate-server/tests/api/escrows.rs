//! Escrows: funding from an allow decision (and every way it is refused), one escrow per
//! decision also under a race, every transition and refusal, public reads across
//! organizations, events in the transaction of the change, and idempotent settlement.

use futures_util::future::join_all;
use mandate_server::storage::escrows::MovementRow;
use serde_json::Value;

use crate::helpers::{Resp, TestApp, spawn_app};

/// An allow decision of `agent_key` for `amount` USD to vendor:acme; returns its id.
pub(crate) async fn allow(app: &TestApp, agent_key: &str, amount: &str) -> String {
    let r = app.authorize(agent_key, amount, "software").await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    r.body["id"].as_str().unwrap().to_owned()
}

fn body(amount: &str, currency: &str, buyer: &str, seller: &str, decision: &str) -> String {
    format!(
        r#"{{"amount": {amount}, "currency": "{currency}", "buyer": "{buyer}", "seller": "{seller}", "decision": "{decision}"}}"#
    )
}

/// Funds an escrow from `decision` (42.50 USD from agt_buyer to vendor:acme).
pub(crate) async fn fund(app: &TestApp, key: &str, decision: &str) -> Resp {
    app.post_text(
        key,
        "/v1/escrows",
        &body("42.50", "USD", "agt_buyer", "vendor:acme", decision),
    )
    .await
}

/// A funded escrow of the standard buyer; returns its id.
pub(crate) async fn funded(app: &TestApp, agent_key: &str) -> String {
    let decision = allow(app, agent_key, "42.50").await;
    let r = fund(app, &app.org.sandbox, &decision).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body["id"].as_str().unwrap().to_owned()
}

pub(crate) async fn movements(app: &TestApp, escrow: &str) -> Vec<MovementRow> {
    let escrow = mandate_protocol::id::EscrowId::parse(escrow).unwrap();
    let store = &app.running.as_ref().unwrap().state.store;
    let org = store.escrow(&escrow, None).await.unwrap().unwrap().org_id;
    store.escrow_movements(&org, &escrow).await.unwrap()
}

/// The escrow events of the sandbox, oldest first, as (type, data).
pub(crate) async fn escrow_events(app: &TestApp) -> Vec<(String, Value)> {
    let r = app.get(&app.org.sandbox, "/v1/events?limit=100").await;
    let mut events: Vec<(String, Value)> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("escrow."))
        .map(|e| (e["type"].as_str().unwrap().to_owned(), e["data"].clone()))
        .collect();
    events.reverse();
    events
}

#[mandate_test_macros::on_each_engine]
async fn funding_locks_the_money_and_answers_the_public_contract() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let decision = allow(&app, &agent, "42.50").await;
    let r = app
        .post_text(
            &org,
            "/v1/escrows",
            &format!(
                r#"{{"amount": 42.5, "currency": "USD", "buyer": "agt_buyer", "seller": "vendor:acme", "decision": "{decision}", "arbiter": "role:legal"}}"#
            ),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let e = &r.body;
    let id = e["id"].as_str().unwrap();
    assert!(id.starts_with("esc_"), "{id}");
    assert_eq!(e["escrow"], id);
    // The amount is exactly the one sent (12.5 and 12.50 are the same amount).
    assert!(r.text.contains(r#""amount":42.5,"#), "{}", r.text);
    assert_eq!(e["currency"], "USD");
    assert_eq!(e["buyer"], "agt_buyer");
    assert_eq!(e["seller"], "vendor:acme");
    assert_eq!(e["decision"], decision.as_str());
    assert_eq!(e["arbiter"], "role:legal");
    assert_eq!(e["state"], "funded");
    assert_eq!(e["disputed"], false);
    assert_eq!(e["created_at"], "2026-11-22T12:00:00Z");
    let history = e["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["state"], "funded");
    assert_eq!(history[0]["disputed"], false);
    assert_eq!(history[0]["at"], "2026-11-22T12:00:00Z");
    assert_eq!(history[0]["actor"], "funder");
    assert_eq!(e["environment"], "sandbox");
    // The funding organization's id is in no field.
    assert!(!r.text.contains("org_"), "{}", r.text);
    let mut keys: Vec<_> = e.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "amount",
            "arbiter",
            "buyer",
            "created_at",
            "currency",
            "decision",
            "disputed",
            "environment",
            "escrow",
            "history",
            "id",
            "seller",
            "state"
        ]
    );

    // The read answers the same object.
    let read = app.get(&org, &format!("/v1/escrows/{id}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body, r.body);

    // The buyer's funds are locked through the settlement adapter, once.
    let moved = movements(&app, id).await;
    assert_eq!(moved.len(), 1);
    assert_eq!(
        (moved[0].kind.as_str(), moved[0].amount.to_string()),
        ("lock", "42.5".to_owned())
    );
    assert_eq!(
        (moved[0].from_party.as_str(), moved[0].to_party.as_str()),
        ("agt_buyer", id)
    );

    // escrow.funded carries the escrow, in its API shape.
    let events = escrow_events(&app).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "escrow.funded");
    assert_eq!(events[0].1, r.body);
}

#[mandate_test_macros::on_each_engine]
async fn funding_needs_an_unexpired_allow_of_the_buyer_for_the_same_terms() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let other_agent = app.standard_agent(&org, "other").await;
    let decision = allow(&app, &agent, "42.50").await;
    let others = allow(&app, &other_agent, "42.50").await;
    let review = app.authorize(&agent, "75", "software").await;
    assert_eq!(review.body["verdict"], "review");
    let review = review.body["id"].as_str().unwrap().to_owned();
    let deny = app.authorize(&agent, "10", "food").await;
    assert_eq!(deny.body["verdict"], "deny_category");
    let deny = deny.body["id"].as_str().unwrap().to_owned();

    let cases = [
        (
            body("42.51", "USD", "agt_buyer", "vendor:acme", &decision),
            format!("amount 42.51 does not match decision {decision}, which allows 42.50"),
        ),
        (
            body("42.50", "EUR", "agt_buyer", "vendor:acme", &decision),
            format!("currency EUR does not match decision {decision}, which is in USD"),
        ),
        (
            body("42.50", "USD", "agt_buyer", "vendor:globex", &decision),
            format!(
                "seller vendor:globex does not match decision {decision}, whose recipient is vendor:acme"
            ),
        ),
        (
            body("42.50", "USD", "agt_buyer", "vendor:acme", &others),
            format!("decision {others} was made for agt_other, not for the buyer agt_buyer"),
        ),
        (
            body("75", "USD", "agt_buyer", "vendor:acme", &review),
            format!("decision {review} has verdict review; only an allow decision funds an escrow"),
        ),
        (
            body("10", "USD", "agt_buyer", "vendor:acme", &deny),
            format!(
                "decision {deny} has verdict deny_category; only an allow decision funds an escrow"
            ),
        ),
        (
            r#"{"amount": 1, "currency": "USD", "buyer": "agt_buyer", "seller": "vendor:acme"}"#
                .to_owned(),
            "decision is required".to_owned(),
        ),
        (
            format!(
                r#"{{"amount": 42.50, "currency": "USD", "buyer": "agt_buyer", "seller": "vendor:acme", "decision": "{decision}", "state": "released"}}"#
            ),
            "state is read-only and cannot be set".to_owned(),
        ),
    ];
    for (sent, message) in cases {
        let r = app.post_text(&org, "/v1/escrows", &sent).await;
        assert_eq!(r.assert_error(400, "invalid_request"), message, "{sent}");
    }

    // Unknown decisions and another organization's decisions are 404 alike.
    let r = fund(&app, &org, "dec_nope").await;
    assert_eq!(
        r.assert_error(404, "not_found"),
        "no decision with id dec_nope"
    );
    let globex = app.onboard("globex").await;
    let r = fund(&app, &globex.sandbox, &decision).await;
    r.assert_error(404, "not_found");
    // The live environment of the same organization does not see sandbox decisions.
    let r = fund(&app, &app.org.live, &decision).await;
    r.assert_error(404, "not_found");
    // An agent key may not fund, whatever it sends.
    let r = fund(&app, &agent, &decision).await;
    r.assert_error(403, "forbidden");

    // Nothing was funded, locked or announced.
    assert!(escrow_events(&app).await.is_empty());

    // A verdict lives 300 seconds: at 299 s it still funds, at 300 s it no longer does.
    let late = allow(&app, &agent, "42.50").await;
    app.advance(300);
    let r = fund(&app, &org, &late).await;
    let message = r.assert_error(400, "invalid_request");
    assert_eq!(
        message,
        format!(
            "decision {late} expired at 2026-11-22T12:05:00Z; a verdict funds an escrow only within 300 seconds of issue"
        )
    );
    let in_time = allow(&app, &agent, "42.50").await;
    app.advance(299);
    let r = fund(&app, &org, &in_time).await;
    assert_eq!(r.status, 201, "{}", r.text);
    app.advance(2);
    let after_301 = fund(&app, &org, &decision).await;
    after_301.assert_error(400, "invalid_request");
}

#[mandate_test_macros::on_each_engine]
async fn a_decision_funds_one_escrow_even_when_eight_requests_race() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let decision = allow(&app, &agent, "42.50").await;
    let responses = join_all((0..8).map(|_| fund(&app, &org, &decision))).await;
    let created: Vec<&Resp> = responses.iter().filter(|r| r.status == 201).collect();
    assert_eq!(created.len(), 1, "{responses:?}");
    let spent = format!(
        "decision {decision} has already funded an escrow (its nonce is spent); each decision funds at most one escrow"
    );
    for r in responses.iter().filter(|r| r.status != 201) {
        assert_eq!(r.assert_error(400, "invalid_request"), spent);
    }
    let id = created[0].body["id"].as_str().unwrap();
    assert_eq!(movements(&app, id).await.len(), 1);
    assert_eq!(escrow_events(&app).await.len(), 1);
    // Later, too.
    let again = fund(&app, &org, &decision).await;
    assert_eq!(again.assert_error(400, "invalid_request"), spent);
}

/// Actions racing on one escrow apply one after the other: one moves it, each of the others
/// is judged against where it then stands (400, never a 500), and the money moves once.
#[mandate_test_macros::on_each_engine]
async fn actions_racing_on_one_escrow_apply_one_after_the_other() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let id = funded(&app, &agent).await;
    assert_eq!(act(&app, &org, &id, "deliver").await.status, 200);
    let actions = (0..8).map(|i| if i % 2 == 0 { "release" } else { "refund" });
    let responses = join_all(actions.map(|action| act(&app, &org, &id, action))).await;
    let moved: Vec<&Resp> = responses.iter().filter(|r| r.status == 200).collect();
    assert_eq!(moved.len(), 1, "{responses:?}");
    for r in responses.iter().filter(|r| r.status != 200) {
        r.assert_error(400, "invalid_request");
    }
    let kinds: Vec<_> = movements(&app, &id)
        .await
        .iter()
        .map(|m| m.kind.as_str())
        .collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert_eq!(kinds[0], "lock");
    assert_eq!(escrow_events(&app).await.len(), 3);
    let history = moved[0].body["history"].as_array().unwrap();
    assert_eq!(history.len(), 3, "{}", moved[0].text);
}

/// Applies `action` to `id` and returns the response.
pub(crate) async fn act(app: &TestApp, key: &str, id: &str, action: &str) -> Resp {
    app.post_empty(key, &format!("/v1/escrows/{id}/{action}"))
        .await
}

#[mandate_test_macros::on_each_engine]
async fn every_transition_and_every_refusal() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    // (actions in order, each with the expected outcome: Ok((state, disputed)) or the error)
    type Step = (&'static str, Result<(&'static str, bool), &'static str>);
    let scripts: Vec<Vec<Step>> = vec![
        vec![
            (
                "release",
                Err(
                    "escrow is funded but not delivered; deliver it first, or refund or dispute it",
                ),
            ),
            ("deliver", Ok(("delivered", false))),
            (
                "deliver",
                Err("escrow is already delivered; release, refund or dispute it"),
            ),
            ("release", Ok(("released", false))),
            ("refund", Err("escrow is released, which is final")),
            ("release", Err("escrow is released, which is final")),
            ("dispute", Err("escrow is released, which is final")),
        ],
        vec![
            ("refund", Ok(("refunded", false))),
            ("deliver", Err("escrow is refunded, which is final")),
            ("refund", Err("escrow is refunded, which is final")),
        ],
        vec![
            ("dispute", Ok(("funded", true))),
            (
                "deliver",
                Err("escrow is disputed, so it cannot deliver; only release or refund can end it"),
            ),
            (
                "dispute",
                Err("escrow is disputed, so it cannot dispute; only release or refund can end it"),
            ),
            ("release", Ok(("released", true))),
        ],
        vec![
            ("deliver", Ok(("delivered", false))),
            ("dispute", Ok(("delivered", true))),
            ("refund", Ok(("refunded", true))),
            ("release", Err("escrow is refunded, which is final")),
        ],
    ];
    for script in scripts {
        let id = funded(&app, &agent).await;
        let mut expected_history = vec![("funded".to_owned(), false)];
        for (action, outcome) in script {
            let before = escrow_events(&app).await.len();
            let r = act(&app, &org, &id, action).await;
            match outcome {
                Ok((state, disputed)) => {
                    assert_eq!(r.status, 200, "{action}: {}", r.text);
                    assert_eq!(r.body["state"], state, "{action}");
                    assert_eq!(r.body["disputed"], disputed, "{action}");
                    expected_history.push((state.to_owned(), disputed));
                    // One event, of the action's type, carrying the escrow as answered.
                    let events = escrow_events(&app).await;
                    assert_eq!(events.len(), before + 1, "{action}");
                    let (kind, data) = events.last().unwrap();
                    let fired = match action {
                        "deliver" => "escrow.delivered",
                        "release" => "escrow.released",
                        "refund" => "escrow.refunded",
                        _ => "escrow.disputed",
                    };
                    assert_eq!(kind, fired);
                    assert_eq!(data, &r.body);
                    assert_eq!(data["escrow"], id.as_str());
                }
                Err(message) => {
                    assert_eq!(r.assert_error(400, "invalid_request"), message, "{action}");
                    // A refused action writes nothing: no event, no history step.
                    assert_eq!(escrow_events(&app).await.len(), before, "{action}");
                }
            }
            let read = app.get(&org, &format!("/v1/escrows/{id}")).await;
            let history: Vec<(String, bool)> = read.body["history"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    (
                        h["state"].as_str().unwrap().to_owned(),
                        h["disputed"].as_bool().unwrap(),
                    )
                })
                .collect();
            assert_eq!(history, expected_history, "{action}");
        }
    }
}

#[mandate_test_macros::on_each_engine]
async fn escrow_disputed_data_holds_the_escrow_id_state_and_flag() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let id = funded(&app, &agent).await;
    app.advance(60);
    let r = act(&app, &org, &id, "dispute").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = app.get(&org, "/v1/events?type=escrow.disputed").await.body;
    let data = &events["data"][0]["data"];
    assert_eq!(data["escrow"], id.as_str());
    assert_eq!(data["state"], "funded");
    assert_eq!(data["disputed"], true);
    assert_eq!(data["history"][1]["at"], "2026-11-22T12:01:00Z");
}

#[mandate_test_macros::on_each_engine]
async fn escrows_are_read_across_organizations_and_moved_only_by_their_own() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let id = funded(&app, &agent).await;
    let decision_id = app.get(&org, &format!("/v1/escrows/{id}")).await.body["decision"]
        .as_str()
        .unwrap()
        .to_owned();
    let mine = app.get(&org, &format!("/v1/escrows/{id}")).await;

    let globex = app.onboard("globex").await;
    let stranger_agent = app.agent(&globex.sandbox, "nosy").await;
    // Any valid key that holds the id reads the escrow and its history: a public contract.
    for key in [
        globex.sandbox.as_str(),
        globex.live.as_str(),
        stranger_agent.as_str(),
        app.org.live.as_str(),
        agent.as_str(),
    ] {
        let r = app.get(key, &format!("/v1/escrows/{id}")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body, mine.body);
    }
    // Everything else stays 404 across organizations, the escrow's decision included.
    let r = app
        .get(&globex.sandbox, &format!("/v1/decisions/{decision_id}"))
        .await;
    r.assert_error(404, "not_found");
    // Only the funding organization's environment moves it; others get 404, agents 403.
    for action in ["deliver", "release", "refund", "dispute"] {
        let r = act(&app, &globex.sandbox, &id, action).await;
        assert_eq!(
            r.assert_error(404, "not_found"),
            format!("no escrow with id {id}")
        );
        act(&app, &app.org.live, &id, action)
            .await
            .assert_error(404, "not_found");
        act(&app, &agent, &id, action)
            .await
            .assert_error(403, "forbidden");
    }
    let after = app.get(&org, &format!("/v1/escrows/{id}")).await;
    assert_eq!(after.body, mine.body);
    // No key reads an escrow that does not exist; no key at all reads nothing.
    app.get(&globex.sandbox, "/v1/escrows/esc_nope")
        .await
        .assert_error(404, "not_found");
    let anonymous = app
        .send(
            reqwest::Method::GET,
            None,
            &format!("/v1/escrows/{id}"),
            None,
            &[],
        )
        .await;
    anonymous.assert_error(401, "unauthorized");
}

#[mandate_test_macros::on_each_engine]
async fn an_escrow_says_its_environment_to_every_reader_and_never_the_funders_org_id() {
    let app = spawn_app().await;
    let sandbox_agent = app.standard_agent(&app.org.sandbox, "buyer").await;
    let sandbox_escrow = funded(&app, &sandbox_agent).await;
    let live_agent = app.standard_agent(&app.org.live, "buyer").await;
    let decision = allow(&app, &live_agent, "42.50").await;
    let r = fund(&app, &app.org.live, &decision).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let live_escrow = r.body["id"].as_str().unwrap().to_owned();
    assert_eq!(
        act(&app, &app.org.live, &live_escrow, "deliver")
            .await
            .status,
        200
    );
    let org_id = app.org_id("acme");
    let stranger = app.onboard("globex").await;
    for (id, environment) in [(&sandbox_escrow, "sandbox"), (&live_escrow, "live")] {
        for key in [&stranger.sandbox, &stranger.live, &app.org.sandbox] {
            let r = app.get(key, &format!("/v1/escrows/{id}")).await;
            assert_eq!(r.status, 200, "{}", r.text);
            assert_eq!(r.body["environment"], environment, "{}", r.text);
            assert!(!r.text.contains(&org_id), "{}", r.text);
            for step in r.body["history"].as_array().unwrap() {
                assert_eq!(step["actor"], "funder", "{}", r.text);
            }
        }
    }
    // The events carry the same object.
    let events = app.get(&app.org.live, "/v1/events?limit=100").await;
    let data: Vec<&Value> = events.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["data"])
        .collect();
    assert_eq!(data.len(), 2, "{}", events.text);
    for d in data {
        assert_eq!(d["environment"], "live");
        assert!(!d.to_string().contains(&org_id), "{d}");
    }
}

#[mandate_test_macros::on_each_engine]
async fn the_settlement_adapter_is_named_in_no_response() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let id = funded(&app, &agent).await;
    let mut texts = vec![app.get(&org, &format!("/v1/escrows/{id}")).await.text];
    for action in ["deliver", "dispute", "release", "refund"] {
        texts.push(act(&app, &org, &id, action).await.text);
    }
    texts.push(app.get(&org, "/v1/events?limit=100").await.text);
    for text in texts {
        assert!(!text.to_lowercase().contains("ledger"), "{text}");
        assert!(!text.to_lowercase().contains("settlement"), "{text}");
    }
}

#[mandate_test_macros::on_each_engine]
async fn the_fresh_decision_of_an_approved_review_funds_an_escrow() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let review = app.authorize(&agent, "75", "software").await;
    assert_eq!(review.body["verdict"], "review");
    let review_id = review.body["review"]["id"].as_str().unwrap();
    let approved = app
        .post_empty(&org, &format!("/v1/reviews/{review_id}/approve"))
        .await;
    assert_eq!(approved.body["verdict"], "allow", "{}", approved.text);
    let fresh = approved.body["id"].as_str().unwrap();
    let r = app
        .post_text(
            &org,
            "/v1/escrows",
            &body("75", "USD", "agt_buyer", "vendor:acme", fresh),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["decision"], fresh);
}

#[mandate_test_macros::on_each_engine]
async fn an_escrow_and_its_history_survive_a_restart() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let id = funded(&app, &agent).await;
    assert_eq!(act(&app, &org, &id, "deliver").await.status, 200);
    let before = app.get(&org, &format!("/v1/escrows/{id}")).await;
    app.restart().await;
    let after = app.get(&org, &format!("/v1/escrows/{id}")).await;
    assert_eq!(after.status, 200);
    assert_eq!(after.body, before.body);
    assert_eq!(
        act(&app, &org, &id, "release").await.body["state"],
        "released"
    );
    let kinds: Vec<_> = movements(&app, &id)
        .await
        .iter()
        .map(|m| m.kind.as_str())
        .collect();
    assert_eq!(kinds, ["lock", "release"]);
}
