//! The mandate model of the third round (issue #36) end to end: `limits.total` over the
//! mandate's life, `limits.count` per window, `not_before`; stored and echoed, enforced in
//! the decided order, exact under races, and rebuilt after restarts across months (the
//! rebuilt state reads every allow since the mandate's creation).

use futures_util::future::join_all;
use serde_json::{Value, json};
use time::macros::datetime;

use crate::helpers::{Resp, TestApp, spawn_app};

/// Authorizes `amount` of software, then moves the clock a minute on so that no test here
/// meets the velocity rule; the verdict and the reason.
async fn pay(app: &TestApp, key: &str, amount: &str) -> (String, Value) {
    let r = app.authorize(key, amount, "software").await;
    assert_eq!(r.status, 201, "{}", r.text);
    app.advance(61);
    (
        r.body["verdict"].as_str().unwrap().to_owned(),
        r.body["reason"].clone(),
    )
}

/// Moves the clock to `at` (later than now).
fn go_to(app: &TestApp, at: time::OffsetDateTime) {
    let now = app.clock_now();
    assert!(at >= now, "{now} is past {at}");
    app.advance((at - now).whole_seconds());
}

fn body(agent: &str, limits: &str, extra: &str) -> String {
    format!(
        r#"{{"agent": "agt_{agent}", "limits": {{"per_transaction": 100, "currency": "USD"{limits}}},
            "categories": ["software"], "expires": "2027-12-31"{extra}}}"#
    )
}

#[mandate_test_macros::on_each_engine]
async fn the_new_fields_are_stored_echoed_and_named_in_errors() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    app.agent(&org, "buyer").await;
    let created = app
        .mandate(
            &org,
            &body(
                "buyer",
                r#", "total": 1000.50, "count": {"per_day": 2, "per_week": 5, "per_month": 9, "total": 20}"#,
                r#", "not_before": "2026-11-23""#,
            ),
        )
        .await;
    assert_eq!(created["limits"]["total"].to_string(), "1000.50");
    assert_eq!(
        created["limits"]["count"],
        json!({"per_day": 2, "per_week": 5, "per_month": 9, "total": 20})
    );
    assert_eq!(created["not_before"], "2026-11-23");
    let id = created["id"].as_str().unwrap();
    let shown = app.get(&org, &format!("/v1/mandates/{id}")).await;
    assert_eq!(shown.body["limits"], created["limits"]);
    assert_eq!(shown.body["not_before"], created["not_before"]);
    for (limits, extra, message) in [
        (
            r#", "count": {"per_day": 0}"#,
            "",
            "limits.count.per_day must be a whole number from 1 to 1000000000",
        ),
        (
            r#", "count": {}"#,
            "",
            "limits.count must set at least one of per_day, per_week, per_month and total",
        ),
        (r#", "total": -1"#, "", "limits.total must be >= 0"),
        (
            "",
            r#", "not_before": "2028-01-01""#,
            "not_before must be on or before expires (2027-12-31)",
        ),
    ] {
        let r = app
            .post_text(&org, "/v1/mandates", &body("buyer", limits, extra))
            .await;
        assert_eq!(r.assert_error(400, "invalid_request"), message);
    }
}

/// The test clock starts on Sunday 2026-11-22 12:00 UTC.
#[mandate_test_macros::on_each_engine]
async fn before_not_before_it_is_deny_no_mandate_naming_the_start() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    let created = app
        .mandate(&org, &body("buyer", "", r#", "not_before": "2026-11-23""#))
        .await;
    let id = created["id"].as_str().unwrap();
    assert_eq!(
        pay(&app, &key, "10").await,
        (
            "deny_no_mandate".into(),
            json!(format!(
                "mandate {id} is not in force before 2026-11-23 (not_before)"
            ))
        )
    );
    // The last minute before the start, after a restart (pay moves the clock a minute on).
    go_to(&app, datetime!(2026-11-22 23:58:59 UTC));
    app.restart().await;
    assert_eq!(pay(&app, &key, "10").await.0, "deny_no_mandate");
    go_to(&app, datetime!(2026-11-23 0:00 UTC));
    assert_eq!(pay(&app, &key, "10").await.0, "allow");
}

/// `total` counts every allow of the mandate, over months and restarts (the state rebuilt
/// from stored decisions reads them all), and allows nothing past it.
#[mandate_test_macros::on_each_engine]
async fn total_holds_over_months_and_restarts() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    app.mandate(
        &org,
        &body("buyer", r#", "per_month": 150, "total": 250.50"#, ""),
    )
    .await;
    assert_eq!(pay(&app, &key, "100").await.0, "allow");
    go_to(&app, datetime!(2026-12-05 10:00 UTC));
    app.restart().await;
    assert_eq!(pay(&app, &key, "100").await.0, "allow");
    go_to(&app, datetime!(2027-01-10 10:00 UTC));
    app.restart().await;
    assert_eq!(
        pay(&app, &key, "60").await,
        (
            "deny_limit".into(),
            json!("amount 60 would bring the mandate's spend to 260, over the total limit 250.50")
        )
    );
    assert_eq!(pay(&app, &key, "50.50").await.0, "allow");
    app.restart().await;
    assert_eq!(pay(&app, &key, "0.01").await.0, "deny_limit");
}

/// Count limits per day and over the mandate's life, across a restart and a new day.
#[mandate_test_macros::on_each_engine]
async fn count_limits_hold_per_day_and_in_total_across_restarts() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    app.mandate(
        &org,
        &body("buyer", r#", "count": {"per_day": 2, "total": 3}"#, ""),
    )
    .await;
    assert_eq!(pay(&app, &key, "1").await.0, "allow");
    assert_eq!(pay(&app, &key, "1").await.0, "allow");
    assert_eq!(
        pay(&app, &key, "1").await,
        (
            "deny_limit".into(),
            json!("2 allows today already, one more would be over the count.per_day limit 2")
        )
    );
    app.restart().await;
    assert_eq!(pay(&app, &key, "1").await.0, "deny_limit");
    // A new month: the day is free, the mandate has one allow left.
    go_to(&app, datetime!(2026-12-01 9:00 UTC));
    app.restart().await;
    assert_eq!(pay(&app, &key, "1").await.0, "allow");
    go_to(&app, datetime!(2026-12-02 9:00 UTC));
    app.restart().await;
    assert_eq!(
        pay(&app, &key, "1").await,
        (
            "deny_limit".into(),
            json!(
                "3 allows under the mandate already, one more would be over the count.total limit 3"
            )
        )
    );
}

/// Ten requests at once for each of three agents: the total (150, requests of 40) allows
/// exactly three, the count limit (4 a day) exactly four, the lifetime count (2) exactly
/// two; none more.
#[mandate_test_macros::on_each_engine]
async fn concurrent_requests_never_pass_the_total_or_a_count() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let total = app.agent(&org, "total").await;
    app.mandate(&org, &body("total", r#", "total": 150"#, ""))
        .await;
    let day = app.agent(&org, "day").await;
    app.mandate(&org, &body("day", r#", "count": {"per_day": 4}"#, ""))
        .await;
    let life = app.agent(&org, "life").await;
    app.mandate(&org, &body("life", r#", "count": {"total": 2}"#, ""))
        .await;
    let count = |responses: &[Resp], verdict: &str| {
        responses
            .iter()
            .filter(|r| {
                assert_eq!(r.status, 201, "{}", r.text);
                r.body["verdict"] == verdict
            })
            .count()
    };
    let all = join_all(
        (0..10)
            .map(|_| app.authorize(&total, "40", "software"))
            .chain((0..10).map(|_| app.authorize(&day, "1", "software")))
            .chain((0..10).map(|_| app.authorize(&life, "1", "software"))),
    )
    .await;
    let (totals, rest) = all.split_at(10);
    let (days, lives) = rest.split_at(10);
    assert_eq!(
        (count(totals, "allow"), count(totals, "deny_limit")),
        (3, 7)
    );
    assert_eq!((count(days, "allow"), count(days, "deny_limit")), (4, 6));
    assert_eq!((count(lives, "allow"), count(lives, "deny_limit")), (2, 8));
}

/// `limits.min_per_transaction` (AP2's `payment.amount_range.min`): stored, read back,
/// refused above `per_transaction`, and enforced as `deny_limit` naming the minimum and
/// the amount; `remaining` does not list it.
#[mandate_test_macros::on_each_engine]
async fn the_minimum_per_transaction_is_stored_read_back_and_enforced() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    let created = app
        .mandate(&org, &body("buyer", r#", "min_per_transaction": 5.00"#, ""))
        .await;
    assert_eq!(created["limits"]["min_per_transaction"].to_string(), "5.00");
    let id = created["id"].as_str().unwrap();
    let shown = app.get(&org, &format!("/v1/mandates/{id}")).await;
    assert_eq!(
        shown.body["limits"]["min_per_transaction"].to_string(),
        "5.00"
    );
    assert_eq!(shown.body["limits"], created["limits"]);
    assert!(shown.body["remaining"].get("min_per_transaction").is_none());
    assert_eq!(
        shown.body["remaining"]["per_transaction"].to_string(),
        "100"
    );

    let (verdict, reason) = pay(&app, &key, "4.99").await;
    assert_eq!(verdict, "deny_limit");
    assert_eq!(
        reason,
        "amount 4.99 is below the min_per_transaction minimum 5.00"
    );
    assert_eq!(pay(&app, &key, "5.00").await.0, "allow");
    assert_eq!(pay(&app, &key, "100").await.0, "allow");

    let r = app
        .post_text(
            &org,
            "/v1/mandates",
            &body("buyer", r#", "min_per_transaction": 100.01"#, ""),
        )
        .await;
    assert_eq!(
        r.assert_error(400, "invalid_request"),
        "limits.min_per_transaction must be <= limits.per_transaction (100)"
    );
}
