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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
async fn an_origin_that_is_not_one_stops_the_start() {
    for bad in [
        "*",
        "https://console.example.com/console/",
        "console.example.com",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = mandate_server::serve::Config {
            db: dir.path().join("m.db"),
            api_addr: "127.0.0.1:0".into(),
            public_addr: "127.0.0.1:0".into(),
            verdicts_url: None,
            docs_url: None,
            tls: None,
            limits: Default::default(),
            api_url: None,
            console_origins: Some(vec![bad.into()]),
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
