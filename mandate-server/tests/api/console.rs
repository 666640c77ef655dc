//! The review console's server side: its files on the public host with their security
//! headers, its `config.json`, and CORS on the API host for exactly the console's origin.
//! (The page itself is driven in a real browser by `tests/console/`.)

use reqwest::Method;

use crate::helpers::{Resp, TestApp, spawn_app, spawn_app_with};

/// A request to `url` with extra headers, read whole.
async fn call(app: &TestApp, method: Method, url: &str, headers: &[(&str, &str)]) -> Resp {
    app.send(method, None, url, None, headers).await
}

/// The origin of a base URL such as `http://127.0.0.1:PORT`.
fn origin(url: &str) -> &str {
    url.trim_end_matches('/')
}

#[track_caller]
fn assert_console_headers(r: &Resp, api: &str) {
    assert_eq!(
        r.header("content-security-policy"),
        Some(
            format!(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                 connect-src 'self' {api}; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
            )
            .as_str()
        ),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert!(
        r.header("x-request-id")
            .is_some_and(|id| id.starts_with("req_"))
    );
}

#[mandate_test_macros::on_each_engine]
async fn the_public_host_serves_the_console_with_a_strict_policy() {
    let app = spawn_app().await;
    let page = call(&app, Method::GET, &format!("{}/console/", app.public), &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(
        page.text
            .contains("<script type=\"module\" src=\"app.js\"></script>")
    );
    // No inline script or style that the policy would have to allow.
    assert!(!page.text.contains("<script>") && !page.text.contains("style="));
    assert_console_headers(&page, &app.api);

    for (file, kind) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("api.js", "text/javascript; charset=utf-8"),
        ("verify.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
    ] {
        let r = call(
            &app,
            Method::GET,
            &format!("{}/console/{file}", app.public),
            &[],
        )
        .await;
        assert_eq!(r.status, 200, "{file}");
        assert_eq!(r.header("content-type"), Some(kind), "{file}");
        assert!(!r.text.trim().is_empty(), "{file}");
        assert_console_headers(&r, &app.api);
    }

    // The page learns the API host, the issuer and the allowed origins from the server.
    let config = call(
        &app,
        Method::GET,
        &format!("{}/console/config.json", app.public),
        &[],
    )
    .await;
    assert_eq!(config.status, 200);
    assert_eq!(config.body["api_url"], app.api.as_str());
    assert_eq!(config.body["issuer"], app.issuer().as_str());
    assert_eq!(config.body["jwks_url"], "/.well-known/jwks.json");
    assert_eq!(config.body["origins"], serde_json::json!([app.public]));
    assert_console_headers(&config, &app.api);

    // /console redirects to the page; an unknown file is the envelope, with the headers.
    let bare = call(&app, Method::GET, &format!("{}/console", app.public), &[]).await;
    assert_eq!(bare.status, 308);
    assert_eq!(bare.header("location"), Some("/console/"));
    for missing in ["nothing.js", "..%2Fopenapi.yaml", "index.html%00"] {
        let r = call(
            &app,
            Method::GET,
            &format!("{}/console/{missing}", app.public),
            &[],
        )
        .await;
        r.assert_error(404, "not_found");
        assert_console_headers(&r, &app.api);
    }
}

#[mandate_test_macros::on_each_engine]
async fn the_api_host_keeps_refusing_anonymous_requests_to_the_console_paths() {
    let app = spawn_app().await;
    for path in ["/console/", "/console/app.js", "/console/config.json"] {
        call(&app, Method::GET, &format!("{}{path}", app.api), &[])
            .await
            .assert_error(401, "unauthorized");
    }
}

/// The CORS headers of a response, sorted.
fn cors_headers(r: &Resp) -> Vec<(String, String)> {
    let mut found: Vec<_> = r
        .headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("access-control-"))
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect();
    found.sort();
    found
}

/// The preflight a browser sends before the console's POST with a key and a body.
async fn preflight(app: &TestApp, origin: &str) -> Resp {
    let url = format!("{}/v1/decisions", app.api);
    let headers = [
        ("origin", origin),
        ("access-control-request-method", "POST"),
        (
            "access-control-request-headers",
            "authorization,content-type,idempotency-key",
        ),
    ];
    call(app, Method::OPTIONS, &url, &headers).await
}

#[mandate_test_macros::on_each_engine]
async fn the_consoles_origin_and_no_other_may_call_the_api_from_a_browser() {
    let app = spawn_app().await;
    let console = origin(&app.public).to_owned();
    let decisions = format!("{}/v1/decisions", app.api);

    // The console's preflight: 204 with what it may send, never a 401, with a request id.
    let r = preflight(&app, &console).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(
        cors_headers(&r),
        [
            (
                "access-control-allow-headers",
                "authorization, content-type, idempotency-key"
            ),
            ("access-control-allow-methods", "GET, POST"),
            ("access-control-allow-origin", console.as_str()),
            ("access-control-max-age", "600"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
    );
    assert!(
        r.header("x-request-id")
            .is_some_and(|id| id.starts_with("req_"))
    );

    // Another origin's preflight gets no CORS header: it is an anonymous request (401).
    for other in [
        "http://evil.example",
        "null",
        &format!("{console}.evil.example"),
    ] {
        let r = preflight(&app, other).await;
        r.assert_error(401, "unauthorized");
        assert!(cors_headers(&r).is_empty(), "{other}: {:?}", r.headers);
    }

    // An answer to the console may be read, its request id too; to another origin not.
    let key = format!("Bearer {}", app.org.sandbox);
    let r = call(
        &app,
        Method::GET,
        &decisions,
        &[("origin", &console), ("authorization", &key)],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        cors_headers(&r),
        [
            ("access-control-allow-origin", console.as_str()),
            (
                "access-control-expose-headers",
                "x-request-id, retry-after, idempotency-replayed"
            ),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
    );
    assert_eq!(r.header("vary"), Some("origin"));
    assert!(r.header("access-control-allow-credentials").is_none());
    let other = call(
        &app,
        Method::GET,
        &decisions,
        &[("origin", "http://evil.example"), ("authorization", &key)],
    )
    .await;
    assert_eq!(other.status, 200);
    assert!(cors_headers(&other).is_empty(), "{:?}", other.headers);
    // The console can read an error's words and request id too.
    let anonymous = call(&app, Method::GET, &decisions, &[("origin", &console)]).await;
    anonymous.assert_error(401, "unauthorized");
    assert_eq!(
        anonymous.header("access-control-allow-origin"),
        Some(console.as_str())
    );
}

#[mandate_test_macros::on_each_engine]
async fn console_origins_are_configurable_and_none_turns_cors_off() {
    let app = spawn_app_with(|c| c.console_origins = Some(vec![])).await;
    let r = call(
        &app,
        Method::OPTIONS,
        &format!("{}/v1/decisions", app.api),
        &[
            ("origin", &app.public),
            ("access-control-request-method", "GET"),
        ],
    )
    .await;
    r.assert_error(401, "unauthorized");
    assert!(cors_headers(&r).is_empty());

    let app = spawn_app_with(|c| {
        c.console_origins = Some(vec!["HTTPS://Console.Example.com:443/".into()]);
        c.api_url = Some("https://api.example.com/".into());
    })
    .await;
    let r = call(
        &app,
        Method::OPTIONS,
        &format!("{}/v1/decisions", app.api),
        &[
            ("origin", "https://console.example.com"),
            ("access-control-request-method", "GET"),
        ],
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://console.example.com")
    );
    let config = call(
        &app,
        Method::GET,
        &format!("{}/console/config.json", app.public),
        &[],
    )
    .await;
    assert_eq!(config.body["api_url"], "https://api.example.com");
    assert_eq!(
        config.body["origins"],
        serde_json::json!(["https://console.example.com"])
    );
    assert_console_headers(&config, "https://api.example.com");
}

#[mandate_test_macros::on_each_engine]
async fn an_origin_that_is_not_one_stops_the_start() {
    for bad in [
        "*",
        "https://console.example.com/console/",
        "console.example.com",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::helpers::TestDatabase::new(dir.path(), "m.db").await;
        let config = mandate_server::serve::Config {
            console_origins: Some(vec![bad.into()]),
            log_checkpoint_interval: mandate_server::workers::checkpoint::DEFAULT_INTERVAL,
            log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
            // A manual clock: a log waits by wall time only when a test moves it.
            log_quiet_below: 0,
            public_logs: false,
            x402_assets: Default::default(),
            witnesses: Vec::new(),
            ..crate::helpers::config(&db)
        };
        let clock = std::sync::Arc::new(mandate_server::clock::ManualClock::new(
            crate::helpers::START,
        ));
        let error = match mandate_server::serve::start(config, clock).await {
            Ok(_) => panic!("{bad} was accepted as an origin"),
            Err(e) => e.to_string(),
        };
        assert!(error.starts_with("--console-origin"), "{error}");
    }
}

// What the console reads that the spec's operations did not give: pending reviews with
// their expiry, a mandate's spend to date, the organization and environment of the key.

/// The ids of a decision list's page.
fn ids(r: &Resp) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

#[mandate_test_macros::on_each_engine]
async fn decisions_filter_on_their_reviews_status_and_show_it_with_the_expiry() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let other = app.standard_agent(&org, "other").await;
    let allow = app.authorize(&agent, "20", "software").await;
    let mut reviews = Vec::new();
    for amount in ["60", "70", "80", "90"] {
        app.advance(1);
        let r = app.authorize(&agent, amount, "software").await;
        assert_eq!(r.body["verdict"], "review", "{}", r.text);
        reviews.push((
            r.body["id"].as_str().unwrap().to_owned(),
            r.body["review"]["id"].as_str().unwrap().to_owned(),
            r.body["review"]["expires_at"].as_str().unwrap().to_owned(),
        ));
    }
    let others = app.authorize(&other, "65", "software").await;
    let others_id = others.body["id"].as_str().unwrap().to_owned();
    let (approved, denied, expiring, pending) =
        (&reviews[0], &reviews[1], &reviews[2], &reviews[3]);
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{}/approve", approved.1))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let fresh = r.body["id"].as_str().unwrap().to_owned();
    let r = app
        .post(
            &org,
            &format!("/v1/reviews/{}/deny", denied.1),
            serde_json::json!({"reason": "no"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);

    // Pending: newest first, both agents; by agent; with other filters.
    let list = |query: &str| format!("/v1/decisions?{query}");
    assert_eq!(
        ids(&app.get(&org, &list("review_status=pending")).await),
        [others_id.as_str(), pending.0.as_str(), expiring.0.as_str()]
    );
    assert_eq!(
        ids(&app
            .get(&org, &list("review_status=pending&agent=agt_buyer"))
            .await),
        [pending.0.as_str(), expiring.0.as_str()]
    );
    assert!(
        ids(&app
            .get(&org, &list("review_status=pending&verdict=allow"))
            .await)
        .is_empty()
    );
    assert_eq!(
        ids(&app.get(&org, &list("review_status=approved")).await),
        [approved.0.as_str()]
    );
    assert_eq!(
        ids(&app
            .get(&org, &list("review_status=denied&verdict=review"))
            .await),
        [denied.0.as_str()]
    );
    // An agent key sees its own only.
    assert_eq!(
        ids(&app.get(&other, &list("review_status=pending")).await),
        [others_id.as_str()]
    );

    // Each decision read shows where its review stands and when it expires; one that opened
    // none has neither field, nor has the fresh decision of an approval.
    let page = app.get(&org, &list("limit=100")).await;
    for d in page.body["data"].as_array().unwrap() {
        let id = d["id"].as_str().unwrap();
        let want = reviews
            .iter()
            .find(|(decision, _, _)| decision == id)
            .map(|(_, _, expires)| expires.as_str());
        let status = match id {
            _ if id == approved.0 => Some("approved"),
            _ if id == denied.0 => Some("denied"),
            _ if id == expiring.0 || id == pending.0 || id == others_id => Some("pending"),
            _ => None,
        };
        assert_eq!(d["review_status"].as_str(), status, "{d}");
        if id == others_id {
            assert!(d["review_expires_at"].is_string());
        } else {
            assert_eq!(d["review_expires_at"].as_str(), want, "{d}");
        }
        assert_eq!(d.get("review_status").is_some(), !d["review"].is_null());
    }
    let one = app.get(&org, &format!("/v1/decisions/{}", pending.0)).await;
    assert_eq!(one.body["review_status"], "pending");
    assert_eq!(one.body["review_expires_at"], pending.2.as_str());
    for plain in [allow.body["id"].as_str().unwrap(), &fresh] {
        let one = app.get(&org, &format!("/v1/decisions/{plain}")).await;
        assert_eq!(one.status, 200);
        assert!(one.body.get("review_status").is_none(), "{}", one.text);
        assert!(one.body.get("review_expires_at").is_none(), "{}", one.text);
    }

    // Paging walks the filtered list; the filter is bound to the cursor.
    let first = app.get(&org, &list("review_status=pending&limit=2")).await;
    assert_eq!(ids(&first), [others_id.as_str(), pending.0.as_str()]);
    let cursor = first.body["next_cursor"].as_str().unwrap();
    let second = app
        .get(
            &org,
            &list(&format!("review_status=pending&limit=2&cursor={cursor}")),
        )
        .await;
    assert_eq!(ids(&second), [expiring.0.as_str()]);
    assert_eq!(second.body["has_more"], false);
    app.get(
        &org,
        &list(&format!("review_status=denied&limit=2&cursor={cursor}")),
    )
    .await
    .assert_error(400, "invalid_request");

    // The export takes the filter too, oldest first.
    let export = app
        .get(
            &org,
            "/v1/exports/decisions?review_status=pending&agent=agt_buyer",
        )
        .await;
    let lines: Vec<&str> = export.text.lines().collect();
    assert_eq!(lines.len(), 2, "{}", export.text);
    assert!(lines[0].contains(&expiring.0) && lines[1].contains(&pending.0));

    // Past its expiry a review is expired once touched (or swept); it leaves the pending list.
    app.advance(24 * 3600);
    app.post_empty(&org, &format!("/v1/reviews/{}/approve", expiring.1))
        .await
        .assert_error(400, "invalid_request");
    let expired = app.get(&org, &list("review_status=expired")).await;
    assert!(ids(&expired).contains(&expiring.0), "{}", expired.text);
    assert!(!ids(&app.get(&org, &list("review_status=pending")).await).contains(&expiring.0));

    let message = app
        .get(&org, &list("review_status=waiting"))
        .await
        .assert_error(400, "invalid_request");
    assert_eq!(
        message,
        "review_status must be one of pending, approved, denied, expired"
    );
}

#[mandate_test_macros::on_each_engine]
async fn a_mandate_read_alone_shows_what_it_has_spent_this_day_week_and_month() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let mandate = app.get(&org, "/v1/mandates?agent=agt_buyer").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/mandates/{mandate}");
    let spent = |r: &Resp| r.body["spent"].clone();
    let zero = serde_json::json!({"day": 0, "week": 0, "month": 0});
    assert_eq!(spent(&app.get(&org, &path).await), zero);

    for amount in ["20", "30.50"] {
        assert_eq!(
            app.authorize(&agent, amount, "software").await.body["verdict"],
            "allow"
        );
    }
    // A review and a denial spend nothing; an approval's fresh allow does.
    let review = app.authorize(&agent, "60", "software").await;
    assert_eq!(
        app.authorize(&agent, "10", "food").await.body["verdict"],
        "deny_category"
    );
    let shown = app.get(&org, &path).await;
    assert_eq!(
        shown.body["spent"]["month"].to_string(),
        "50.50",
        "{}",
        shown.text
    );
    assert_eq!(shown.body["spent"]["day"].to_string(), "50.50");
    assert_eq!(shown.body["spent"]["week"].to_string(), "50.50");
    let id = review.body["review"]["id"].as_str().unwrap();
    app.post_empty(&org, &format!("/v1/reviews/{id}/approve"))
        .await;
    assert_eq!(
        app.get(&org, &path).await.body["spent"]["month"].to_string(),
        "110.50"
    );

    // The clock starts on a Sunday: a day later is a new day and a new ISO week, same month.
    app.advance(24 * 3600);
    let next_day = app.get(&org, &path).await;
    assert_eq!(next_day.body["spent"]["day"].to_string(), "0");
    assert_eq!(next_day.body["spent"]["week"].to_string(), "0");
    assert_eq!(next_day.body["spent"]["month"].to_string(), "110.50");

    // Lists and the mandate's other answers do not carry it.
    let list = app.get(&org, "/v1/mandates").await;
    assert!(list.body["data"][0].get("spent").is_none(), "{}", list.text);
    let revoked = app.post_empty(&org, &format!("{path}/revoke")).await;
    assert!(revoked.body.get("spent").is_none(), "{}", revoked.text);
}

#[mandate_test_macros::on_each_engine]
async fn the_enforcement_answer_names_the_organization_and_the_environment() {
    let app = spawn_app().await;
    for (key, environment) in [(&app.org.sandbox, "sandbox"), (&app.org.live, "live")] {
        let shown = app.get(key, "/v1/enforcement").await;
        assert_eq!(shown.body["organization"], "acme", "{}", shown.text);
        assert_eq!(shown.body["environment"], environment);
        let set = app
            .post(
                key,
                "/v1/enforcement",
                serde_json::json!({"mode": "observe"}),
            )
            .await;
        assert_eq!(set.body["organization"], "acme", "{}", set.text);
        assert_eq!(set.body["environment"], environment);
    }
    let other = app.onboard("globex").await;
    let shown = app.get(&other.sandbox, "/v1/enforcement").await;
    assert_eq!(shown.body["organization"], "globex");
}
