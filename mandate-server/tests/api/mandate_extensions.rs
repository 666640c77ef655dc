//! The mandate extensions of issue #30 end to end: `limits.per_day`, `limits.per_week` and
//! `recipients` through the API, exact under races, rebuilt after restarts across the UTC
//! midnight, the ISO week's Monday and a week that starts in the previous month; approval
//! re-checks them; events and exports carry them.

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::helpers::{Resp, TestApp, spawn_app};

/// Authorizes `amount` of software for `recipient`, then moves the clock a minute on so
/// that no test here meets the velocity rule.
async fn pay(app: &TestApp, key: &str, amount: &str, recipient: &str) -> Resp {
    let r = app
        .post_text(
            key,
            "/v1/authorizations",
            &format!(r#"{{"amount": {amount}, "currency": "USD", "recipient": "{recipient}", "category": "software"}}"#),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    app.advance(61);
    r
}

async fn verdict(app: &TestApp, key: &str, amount: &str) -> (String, Value) {
    let r = pay(app, key, amount, "vendor:acme").await;
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

#[mandate_test_macros::on_each_engine]
async fn the_new_fields_are_stored_echoed_and_named_in_errors() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    app.agent(&org, "buyer").await;
    let created = app
        .mandate(
            &org,
            r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "per_day": 200.50, "per_week": 500, "currency": "USD"},
                "categories": ["software"], "expires": "2026-12-31",
                "recipients": {"allow": ["vendor:acme", "vendor:aws*", "vendor:acme"], "deny": ["vendor:aws-gov*"]},
                "escrow": {"required_above": 1000}}"#,
        )
        .await;
    assert_eq!(created["limits"]["per_day"].to_string(), "200.50");
    assert_eq!(created["limits"]["per_week"], json!(500));
    assert_eq!(
        created["recipients"],
        json!({"allow": ["vendor:acme", "vendor:aws*"], "deny": ["vendor:aws-gov*"]})
    );
    let id = created["id"].as_str().unwrap();
    let shown = app.get(&org, &format!("/v1/mandates/{id}")).await;
    let mut expected = created.clone();
    expected["spent"] = json!({"day": 0, "week": 0, "month": 0});
    expected["remaining"] =
        serde_json::from_str(r#"{"per_transaction": 100, "per_day": 200.50, "per_week": 500}"#)
            .unwrap();
    assert_eq!(shown.body, expected);
    // A mandate without them answers without them.
    app.agent(&org, "plain").await;
    let plain = app
        .mandate(
            &org,
            r#"{"agent": "agt_plain", "limits": {"per_transaction": 100, "currency": "USD"},
                "categories": ["software"], "expires": "2026-12-31"}"#,
        )
        .await;
    assert_eq!(
        plain["limits"],
        json!({"per_transaction": 100, "currency": "USD"})
    );
    assert!(plain.get("recipients").is_none());

    let refused = |limits: &str, recipients: &str| {
        format!(
            r#"{{"agent": "agt_buyer", "limits": {{"per_transaction": 100, "currency": "USD"{limits}}},
                "categories": ["software"], "expires": "2026-12-31"{recipients}}}"#
        )
    };
    let many: Vec<String> = (0..101).map(|i| format!("vendor:v{i}")).collect();
    let many = serde_json::to_string(&many).unwrap();
    for (body, message) in [
        (
            refused(r#", "per_day": "200""#, ""),
            "limits.per_day must be a plain decimal number such as 12.50",
        ),
        (
            refused(r#", "per_week": -5"#, ""),
            "limits.per_week must be >= 0",
        ),
        (
            refused("", r#", "recipients": {"allow": ["acme"]}"#),
            "recipients.allow[0] must be a recipient, vendor:<name>, or a prefix ending in *, such as vendor:aws*",
        ),
        (
            refused("", r#", "recipients": {"deny": ["vendor:a*b"]}"#),
            "recipients.deny[0] must be a recipient, vendor:<name>, or a prefix ending in *, such as vendor:aws*",
        ),
        (
            refused("", &format!(r#", "recipients": {{"deny": {many}}}"#)),
            "recipients.deny must have at most 100 entries",
        ),
        (
            refused("", r#", "recipients": {"block": []}"#),
            "unknown field recipients.block",
        ),
    ] {
        let r = app.post_text(&org, "/v1/mandates", &body).await;
        assert_eq!(r.assert_error(400, "invalid_request"), message);
    }
}

#[mandate_test_macros::on_each_engine]
async fn a_recipient_outside_the_lists_is_deny_recipient_and_can_be_filtered() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    let mandate = app
        .mandate(
            &org,
            r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "currency": "USD"},
                "categories": ["software"], "expires": "2026-12-31",
                "recipients": {"allow": ["vendor:aws*"], "deny": ["vendor:aws-gov*"]}}"#,
        )
        .await;
    let id = mandate["id"].as_str().unwrap();
    assert_eq!(
        pay(&app, &key, "10", "vendor:aws-eu").await.body["verdict"],
        "allow"
    );
    let denied = pay(&app, &key, "10", "vendor:aws-gov-1").await;
    assert_eq!(denied.body["verdict"], "deny_recipient");
    assert_eq!(
        denied.body["reason"],
        format!("recipient vendor:aws-gov-1 is denied by mandate {id}'s recipients.deny")
    );
    let outside = pay(&app, &key, "10", "vendor:acme").await;
    assert_eq!(outside.body["verdict"], "deny_recipient");
    assert_eq!(
        outside.body["reason"],
        format!("recipient vendor:acme is not in mandate {id}'s recipients.allow")
    );
    // The decisions filter and the export know the new verdict.
    let listed = app.get(&org, "/v1/decisions?verdict=deny_recipient").await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 2);
    let listed = app
        .get(&org, "/v1/decisions?policy_verdict=deny_recipient")
        .await;
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 2);
    let exported = app
        .get(&org, "/v1/exports/decisions?verdict=deny_recipient")
        .await;
    assert_eq!(exported.status, 200, "{}", exported.text);
    let lines: Vec<Value> = exported
        .text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["policy_verdict"], "deny_recipient");
    // A bad verdict filter lists the new one among the allowed.
    let bad = app.get(&org, "/v1/decisions?verdict=deny_payee").await;
    assert!(
        bad.assert_error(400, "invalid_request")
            .contains("deny_category, deny_recipient, deny_limit")
    );
}

const WINDOWS: &str = r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "per_day": 200, "per_week": 300, "currency": "USD"},
    "categories": ["software"], "expires": "2026-12-31"}"#;

/// The test clock starts on Sunday 2026-11-22 12:00 UTC.
#[mandate_test_macros::on_each_engine]
async fn windows_roll_over_at_midnight_and_monday_and_survive_restarts() {
    use time::macros::datetime;
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    app.mandate(&org, WINDOWS).await;
    // Sunday: 200 of the day.
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    assert_eq!(
        verdict(&app, &key, "1").await,
        (
            "deny_limit".into(),
            json!("amount 1 would bring today's spend to 201, over the per_day limit 200")
        )
    );
    // The rebuilt state still knows today's spend.
    app.restart().await;
    assert_eq!(verdict(&app, &key, "0.01").await.0, "deny_limit");
    // Sunday 23:59:59 is still Sunday.
    go_to(&app, datetime!(2026-11-22 23:59:59 UTC));
    let r = app.authorize(&key, "1", "software").await;
    assert_eq!(r.body["verdict"], "deny_limit", "{}", r.text);
    // Monday 00:00 UTC: a new day and a new ISO week (Sunday's 200 no longer counts).
    go_to(&app, datetime!(2026-11-23 0:00 UTC));
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    // Tuesday: a new day, but the week has 200 of 300.
    go_to(&app, datetime!(2026-11-24 9:00 UTC));
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    app.restart().await;
    assert_eq!(
        verdict(&app, &key, "5").await,
        (
            "deny_limit".into(),
            json!("amount 5 would bring this week's spend to 305, over the per_week limit 300")
        )
    );
    // A week that starts in November and runs into December: Monday 2026-11-30's allows
    // count on Tuesday 2026-12-01 after a restart, the first day of a new month.
    go_to(&app, datetime!(2026-11-30 10:00 UTC));
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    go_to(&app, datetime!(2026-12-01 0:00 UTC));
    app.restart().await;
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    assert_eq!(
        verdict(&app, &key, "1").await,
        (
            "deny_limit".into(),
            json!("amount 1 would bring this week's spend to 301, over the per_week limit 300")
        )
    );
}

/// Observe-mode allows count for the windows, denials never.
#[mandate_test_macros::on_each_engine]
async fn observe_allows_count_for_the_day_and_denials_do_not() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    app.mandate(&org, WINDOWS).await;
    // Denials (another currency) count nothing.
    for _ in 0..3 {
        let r = app
            .post_text(
                &key,
                "/v1/authorizations",
                r#"{"amount": 100, "currency": "EUR", "recipient": "vendor:acme", "category": "software"}"#,
            )
            .await;
        assert_eq!(r.body["verdict"], "deny_limit");
        app.advance(61);
    }
    assert_eq!(verdict(&app, &key, "100").await.0, "allow");
    let r = app
        .post(&org, "/v1/enforcement", json!({"mode": "observe"}))
        .await;
    assert!(r.status < 300, "{}", r.text);
    // In observe the over-the-day request is allowed, and counts.
    let (v, _) = verdict(&app, &key, "100").await;
    assert_eq!(v, "allow");
    let r = pay(&app, &key, "50", "vendor:acme").await;
    assert_eq!(r.body["verdict"], "allow");
    assert_eq!(r.body["policy_verdict"], "deny_limit");
    assert_eq!(
        r.body["reason"],
        "amount 50 would bring today's spend to 250, over the per_day limit 200"
    );
}

#[mandate_test_macros::on_each_engine]
async fn concurrent_requests_never_overspend_a_day_or_a_week() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let day = app.agent(&org, "day").await;
    app.mandate(
        &org,
        r#"{"agent": "agt_day", "limits": {"per_transaction": 100, "per_day": 250, "currency": "USD"},
            "categories": ["software"], "expires": "2026-12-31"}"#,
    )
    .await;
    let week = app.agent(&org, "week").await;
    app.mandate(
        &org,
        r#"{"agent": "agt_week", "limits": {"per_transaction": 100, "per_week": 150, "currency": "USD"},
            "categories": ["software"], "expires": "2026-12-31"}"#,
    )
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
    let both = join_all(
        (0..10)
            .map(|_| app.authorize(&day, "50", "software"))
            .chain((0..10).map(|_| app.authorize(&week, "30", "software"))),
    )
    .await;
    let (days, weeks) = both.split_at(10);
    assert_eq!((count(days, "allow"), count(days, "deny_limit")), (5, 5));
    assert_eq!((count(weeks, "allow"), count(weeks, "deny_limit")), (5, 5));
}

#[mandate_test_macros::on_each_engine]
async fn approval_rechecks_the_windows_and_the_lists_as_they_are_now() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    let reviewed = r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "per_day": 200, "currency": "USD"},
        "categories": ["software"], "review_above": 50, "expires": "2026-12-31"}"#;
    app.mandate(&org, reviewed).await;
    let first = pay(&app, &key, "80", "vendor:acme").await;
    assert_eq!(first.body["verdict"], "review");
    let review = first.body["review"]["id"].as_str().unwrap().to_owned();
    // Two allows fill 100 of the day; approving 80 more would bring it to 180: allowed.
    assert_eq!(verdict(&app, &key, "50").await.0, "allow");
    assert_eq!(verdict(&app, &key, "50").await.0, "allow");
    let second = pay(&app, &key, "90", "vendor:acme").await;
    let second_review = second.body["review"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", second.text))
        .to_owned();
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    // The approved 80 counted: 180 of 200, so 90 more is over the day.
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{second_review}/approve"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "deny_limit");
    assert_eq!(
        r.body["reason"],
        "amount 90 would bring today's spend to 270, over the per_day limit 200"
    );
    // A review approved after the mandate started denying its recipient is refused (the
    // next day, when the day's limit leaves room).
    app.advance(86_400);
    let third = pay(&app, &key, "60", "vendor:acme").await;
    let third_review = third.body["review"]["id"].as_str().unwrap().to_owned();
    app.mandate(
        &org,
        r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "currency": "USD"},
            "categories": ["software"], "review_above": 50, "expires": "2026-12-31",
            "recipients": {"deny": ["vendor:ac*"]}}"#,
    )
    .await;
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{third_review}/approve"))
        .await;
    assert_eq!(r.body["verdict"], "deny_recipient", "{}", r.text);
}

#[mandate_test_macros::on_each_engine]
async fn mandate_events_carry_the_new_fields() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    app.agent(&org, "buyer").await;
    let created = app
        .mandate(
            &org,
            r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "per_day": 200, "per_week": 300, "currency": "USD"},
                "categories": ["software"], "expires": "2026-12-31",
                "recipients": {"allow": ["vendor:aws*"], "deny": []}}"#,
        )
        .await;
    let id = created["id"].as_str().unwrap();
    let r = app
        .post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;
    assert!(r.status < 300, "{}", r.text);
    let events = app.get(&org, "/v1/events?type=mandate.revoked").await;
    assert_eq!(events.status, 200, "{}", events.text);
    let data = &events.body["data"][0]["data"];
    assert_eq!(data["id"], id, "{}", events.text);
    assert_eq!(data["limits"]["per_day"], json!(200));
    assert_eq!(data["limits"]["per_week"], json!(300));
    assert_eq!(
        data["recipients"],
        json!({"allow": ["vendor:aws*"], "deny": []})
    );
}

/// Issue #40 item 8: payee lists match without regard to ASCII case, on both engines; the
/// request's recipient is signed as sent, and a counterparty settling with that recipient
/// accepts the verdict in one call.
#[mandate_test_macros::on_each_engine]
async fn recipient_lists_ignore_ascii_case_and_the_recipient_is_signed_as_sent() {
    use mandate_core::{
        Counterparty, EnvironmentPolicy, ExpectedTransaction, MemoryReplayGuard, Recipient,
    };
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    app.mandate(
        &org,
        r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "currency": "USD"},
            "categories": ["software"], "expires": "2026-12-31",
            "recipients": {"allow": ["vendor:Acme", "vendor:aws*", "vendor:evil"], "deny": ["vendor:evil", "vendor:AWS-gov*"]}}"#,
    )
    .await;
    for recipient in [
        "vendor:EVIL",
        "vendor:Evil",
        "vendor:aws-GOV-1",
        "vendor:Aws-gov",
    ] {
        let denied = pay(&app, &key, "10", recipient).await;
        assert_eq!(denied.body["verdict"], "deny_recipient", "{recipient}");
        assert_eq!(denied.body["request"]["recipient"], recipient);
    }
    let allowed = pay(&app, &key, "10", "vendor:ACME").await;
    assert_eq!(allowed.body["verdict"], "allow", "{}", allowed.text);
    assert_eq!(allowed.body["request"]["recipient"], "vendor:ACME");
    let token = allowed.body["verdict_token"].as_str().unwrap();
    let counterparty =
        Counterparty::new(app.issuer()).environments(EnvironmentPolicy::LiveOrSandbox);
    let expected = ExpectedTransaction::new(
        "10".parse().unwrap(),
        "USD".parse().unwrap(),
        Recipient::parse("vendor:ACME").unwrap(),
    );
    let mut guard = MemoryReplayGuard::default();
    let now = app.clock_now() - time::Duration::seconds(61);
    let verified = counterparty
        .check(token, &app.jwks().await, &expected, &mut guard, now)
        .unwrap();
    assert_eq!(verified.claims.request.recipient.as_str(), "vendor:ACME");
    // Live only, as a production counterparty: a sandbox verdict is refused.
    let live_only = Counterparty::new(app.issuer()).check(
        token,
        &app.jwks().await,
        &expected,
        &mut MemoryReplayGuard::default(),
        now,
    );
    assert!(live_only.unwrap_err().to_string().contains("sandbox"));
}

/// Issue #40 item 7: with every limit at 28 digits, the sum of that amount and 0.4 must
/// not round back under the limit: the second and third requests are denied.
#[mandate_test_macros::on_each_engine]
async fn sums_past_the_digits_of_a_decimal_are_never_rounded_under_a_limit() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let key = app.agent(&org, "buyer").await;
    let big = "9999999999999999999999999999";
    app.mandate(
        &org,
        &format!(
            r#"{{"agent": "agt_buyer", "limits": {{"per_transaction": {big}, "per_day": {big}, "per_week": {big}, "per_month": {big}, "currency": "USD"}},
                "categories": ["software"], "expires": "2026-12-31"}}"#
        ),
    )
    .await;
    assert_eq!(
        pay(&app, &key, big, "vendor:acme").await.body["verdict"],
        "allow"
    );
    for amount in ["0.4", "0.4", "0.49", "1"] {
        let r = pay(&app, &key, amount, "vendor:acme").await;
        assert_eq!(r.body["verdict"], "deny_limit", "{amount}: {}", r.text);
    }
    // After a restart the history is rebuilt from the log and still denies.
    app.restart().await;
    let r = pay(&app, &key, "0.4", "vendor:acme").await;
    assert_eq!(r.body["verdict"], "deny_limit", "{}", r.text);
}
