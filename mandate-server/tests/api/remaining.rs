//! `remaining` on `GET /v1/mandates/{id}` (issue #35): for each limit the mandate has, what
//! it still allows, from the spend the engine decides with; exact under concurrent
//! decisions (a read after an answered decision shows it), for the org key and the agent's
//! own key.

use std::sync::atomic::{AtomicI64, Ordering};

use mandate_core::Amount;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app};

/// A mandate with every window: 100 a transaction, 200 a day, 300 a week, 450 a month.
async fn windowed_agent(app: &TestApp, name: &str) -> (String, String) {
    let key = app.agent(&app.org.sandbox, name).await;
    let mandate = app
        .mandate(
            &app.org.sandbox,
            &format!(
                r#"{{"agent": "agt_{name}", "limits": {{"per_transaction": 100, "per_day": 200,
                    "per_week": 300, "per_month": 450, "currency": "USD"}},
                    "categories": ["software"], "expires": "2026-12-31"}}"#
            ),
        )
        .await;
    (key, mandate["id"].as_str().unwrap().to_owned())
}

/// An amount of the answer in cents, read exactly from the JSON number's text.
fn amount(v: &Value) -> i64 {
    let text = Amount::parse(&v.to_string()).unwrap().to_string();
    let (units, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let fraction = format!("{fraction:0<2}");
    assert_eq!(fraction.len(), 2, "{text}");
    units.parse::<i64>().unwrap() * 100 + fraction.parse::<i64>().unwrap()
}

async fn remaining(app: &TestApp, key: &str, id: &str) -> Value {
    let r = app.get(key, &format!("/v1/mandates/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["remaining"].clone()
}

#[mandate_test_macros::on_each_engine]
async fn remaining_is_each_limit_minus_its_spend_for_the_org_and_the_agent() {
    let app = spawn_app().await;
    // From Sunday to Monday: the next day below is in the same ISO week.
    app.advance(86_400);
    let org = app.org.sandbox.clone();
    let (agent, id) = windowed_agent(&app, "buyer").await;
    let fresh = remaining(&app, &org, &id).await;
    assert_eq!(
        fresh,
        json!({"per_transaction": 100, "per_day": 200, "per_week": 300, "per_month": 450})
    );
    assert_eq!(
        app.authorize(&agent, "60.25", "software").await.body["verdict"],
        "allow"
    );
    // A denial spends nothing.
    assert_eq!(
        app.authorize(&agent, "10", "food").await.body["verdict"],
        "deny_category"
    );
    for key in [&org, &agent] {
        let left = remaining(&app, key, &id).await;
        assert_eq!(amount(&left["per_transaction"]), 10_000);
        assert_eq!(amount(&left["per_day"]), 13975);
        assert_eq!(amount(&left["per_week"]), 23975);
        assert_eq!(amount(&left["per_month"]), 38975);
    }
    // Tomorrow the day starts full; the week and the month go on.
    app.advance(86_400);
    let left = remaining(&app, &agent, &id).await;
    assert_eq!(amount(&left["per_day"]), 20_000);
    assert_eq!(amount(&left["per_week"]), 23975);
    // A limit the mandate does not have is absent.
    let plain = app.standard_agent(&org, "plain").await;
    let list = app.get(&plain, "/v1/mandates").await;
    let plain_id = list.body["data"][0]["id"].as_str().unwrap().to_owned();
    let left = remaining(&app, &plain, &plain_id).await;
    assert_eq!(left, json!({"per_transaction": 100, "per_month": 450}));
    // Another agent's mandate is not found for this agent's key.
    app.get(&plain, &format!("/v1/mandates/{id}"))
        .await
        .assert_error(404, "not_found");
}

/// Ten requests of 25 at once (the most a minute allows) against 200 a day: exactly eight
/// are allowed, and every read made while they run shows a remaining amount that the
/// answers already given account for; at the end it is 0 for the day, and each window's remaining is its limit
/// minus the sum of the allows.
#[mandate_test_macros::on_each_engine]
async fn remaining_is_exact_under_concurrent_decisions() {
    let app = spawn_app().await;
    // From Sunday to Monday: the next day below is in the same ISO week.
    app.advance(86_400);
    let org = app.org.sandbox.clone();
    let (agent, id) = windowed_agent(&app, "racer").await;
    let answered = AtomicI64::new(0);
    let asks = (0..10).map(|_| {
        let (app, agent, answered) = (&app, agent.clone(), &answered);
        async move {
            let r = app.authorize(&agent, "25", "software").await;
            assert_eq!(r.status, 201, "{}", r.text);
            if r.body["verdict"] == "allow" {
                answered.fetch_add(1, Ordering::SeqCst);
            }
            r.body["verdict"].as_str().unwrap().to_owned()
        }
    });
    // Each read notes how many allows had been answered before it was sent.
    let reads = (0..12u64).map(|i| {
        let (app, org, id, answered) = (&app, &org, &id, &answered);
        async move {
            tokio::time::sleep(std::time::Duration::from_millis(i * 3)).await;
            let before = answered.load(Ordering::SeqCst);
            (before, remaining(app, org, id).await)
        }
    });
    let (verdicts, seen) = tokio::join!(
        futures_util::future::join_all(asks),
        futures_util::future::join_all(reads)
    );
    let allowed = verdicts.iter().filter(|v| *v == "allow").count();
    assert_eq!(allowed, 8, "{verdicts:?}");
    assert!(verdicts.iter().all(|v| v == "allow" || v == "deny_limit"));
    // Each read saw a whole number of committed allows, at least those answered before it
    // was sent (an answer is sent only once its decision is committed), never below 0.
    for (before, left) in &seen {
        let day = amount(&left["per_day"]);
        assert!(
            (0..=20_000 - 2500 * before).contains(&day),
            "{before} {left}"
        );
        assert_eq!(day % 2500, 0, "{left}");
        assert_eq!(
            amount(&left["per_month"]) - day,
            25_000,
            "the windows moved together: {left}"
        );
    }
    for key in [&org, &agent] {
        let left = remaining(&app, key, &id).await;
        assert_eq!(amount(&left["per_day"]), 0, "{left}");
        assert_eq!(amount(&left["per_week"]), 10_000, "{left}");
        assert_eq!(amount(&left["per_month"]), 25_000, "{left}");
    }
    // Read after each answered decision: the answer is in the next read.
    app.advance(86_400);
    for n in 1..=4 {
        let r = app.authorize(&agent, "25", "software").await;
        assert_eq!(r.body["verdict"], "allow", "{}", r.text);
        let left = remaining(&app, &agent, &id).await;
        assert_eq!(amount(&left["per_week"]), (100 - 25 * n) * 100, "{left}");
    }
    // The week is spent: 0, and the engine agrees (a cent is denied).
    let left = remaining(&app, &agent, &id).await;
    assert_eq!(amount(&left["per_week"]), 0);
    let r = app.authorize(&agent, "0.01", "software").await;
    assert_eq!(r.body["verdict"], "deny_limit", "{}", r.text);
}
