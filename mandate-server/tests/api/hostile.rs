//! Hostile input is bounded and answered: huge bodies, deep JSON nesting, long strings in
//! every field, many query parameters, long and many headers, bytes that are not ASCII in
//! the request line, path segments that are not UTF-8, HTTP/2 spoken to an HTTP/1.1
//! server. Each gets a 4xx in the envelope with a request id, including the ones hyper
//! refuses itself before any routing (400, 414, 431), and the server keeps answering
//! afterwards.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{TestApp, spawn_app};

async fn still_answers(app: &TestApp) {
    let r = app.get(&app.org.sandbox, "/v1/agents").await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[mandate_test_macros::on_each_engine]
async fn bodies_over_64_kib_are_400_with_or_without_an_idempotency_key() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "big").await;
    let padding = "x".repeat(65 * 1024);
    let huge = format!(r#"{{"name": "n", "pad": "{padding}"}}"#);
    for (key, path) in [
        (&org, "/v1/agents"),
        (&org, "/v1/mandates"),
        (&agent, "/v1/authorizations"),
        (&org, "/v1/webhooks"),
        (&org, "/v1/escrows"),
        (&org, "/v1/enforcement"),
    ] {
        for idem in [None, Some("big-1")] {
            let headers: Vec<(&str, &str)> = idem
                .map(|k| vec![("idempotency-key", k)])
                .unwrap_or_default();
            let r = app
                .send(Method::POST, Some(key), path, Some(huge.clone()), &headers)
                .await;
            let message = r.assert_error(400, "invalid_request");
            assert!(message.contains("64 KiB"), "{path}: {message}");
        }
    }
    // Far larger: answered the same, without reading it all.
    let r = app
        .client
        .post(format!("{}/v1/agents", app.api))
        .header("authorization", format!("Bearer {org}"))
        .header("content-type", "application/json")
        .body(vec![b' '; 8 * 1024 * 1024])
        .send()
        .await;
    if let Ok(r) = r {
        assert_eq!(r.status().as_u16(), 400);
    }
    still_answers(&app).await;
}

#[mandate_test_macros::on_each_engine]
async fn deep_nesting_is_400_not_a_stack_overflow() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "deep").await;
    let arrays = "[".repeat(10_000);
    let objects = r#"{"a":"#.repeat(10_000);
    let inside = format!(
        r#"{{"agent": "agt_deep", "limits": {{"per_transaction": 1, "currency": "USD"}}, "categories": {}1{}, "expires": "2099-01-01"}}"#,
        "[".repeat(5_000),
        "]".repeat(5_000)
    );
    for (key, path, body) in [
        (&org, "/v1/agents", arrays.clone()),
        (&org, "/v1/agents", objects.clone()),
        (&agent, "/v1/authorizations", arrays.clone()),
        (&org, "/v1/mandates", inside),
        (&org, "/v1/reviews/rev_x/deny", objects.clone()),
    ] {
        let r = app.post_text(key, path, &body).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(
            message.starts_with("malformed JSON body"),
            "{path}: {message}"
        );
    }
    still_answers(&app).await;
}

/// (key is the agent's?, path, body template with `@` where the long value goes, the field
/// the error must name, whether the value is a string).
const FIELDS: &[(bool, &str, &str, &str, bool)] = &[
    (false, "/v1/agents", r#"{"name": @}"#, "name", true),
    (
        false,
        "/v1/mandates",
        r#"{"agent": @, "limits": {"per_transaction": 1, "currency": "USD"}, "categories": ["a"], "expires": "2099-01-01"}"#,
        "agent",
        true,
    ),
    (
        false,
        "/v1/mandates",
        r#"{"agent": "agt_long", "principal": @, "limits": {"per_transaction": 1, "currency": "USD"}, "categories": ["a"], "expires": "2099-01-01"}"#,
        "principal",
        true,
    ),
    (
        false,
        "/v1/mandates",
        r#"{"agent": "agt_long", "limits": {"per_transaction": @, "currency": "USD"}, "categories": ["a"], "expires": "2099-01-01"}"#,
        "limits.per_transaction",
        false,
    ),
    (
        false,
        "/v1/mandates",
        r#"{"agent": "agt_long", "limits": {"per_transaction": 1, "per_month": @, "currency": "USD"}, "categories": ["a"], "expires": "2099-01-01"}"#,
        "limits.per_month",
        false,
    ),
    (
        false,
        "/v1/mandates",
        r#"{"agent": "agt_long", "limits": {"per_transaction": 1, "currency": @}, "categories": ["a"], "expires": "2099-01-01"}"#,
        "limits.currency",
        true,
    ),
    (
        false,
        "/v1/mandates",
        r#"{"agent": "agt_long", "limits": {"per_transaction": 1, "currency": "USD"}, "categories": [@], "expires": "2099-01-01"}"#,
        "categories[0]",
        true,
    ),
    (
        false,
        "/v1/mandates",
        r#"{"agent": "agt_long", "limits": {"per_transaction": 1, "currency": "USD"}, "categories": ["a"], "review_above": @, "expires": "2099-01-01"}"#,
        "review_above",
        false,
    ),
    (
        false,
        "/v1/mandates",
        r#"{"agent": "agt_long", "limits": {"per_transaction": 1, "currency": "USD"}, "categories": ["a"], "expires": @}"#,
        "expires",
        true,
    ),
    (
        false,
        "/v1/mandates",
        r#"{"agent": "agt_long", "limits": {"per_transaction": 1, "currency": "USD"}, "categories": ["a"], "expires": "2099-01-01", "escrow": {"required_above": @}}"#,
        "escrow.required_above",
        false,
    ),
    (
        true,
        "/v1/authorizations",
        r#"{"amount": @, "currency": "USD", "recipient": "vendor:a", "category": "a"}"#,
        "amount",
        false,
    ),
    (
        true,
        "/v1/authorizations",
        r#"{"amount": 1, "currency": @, "recipient": "vendor:a", "category": "a"}"#,
        "currency",
        true,
    ),
    (
        true,
        "/v1/authorizations",
        r#"{"amount": 1, "currency": "USD", "recipient": @, "category": "a"}"#,
        "recipient",
        true,
    ),
    (
        true,
        "/v1/authorizations",
        r#"{"amount": 1, "currency": "USD", "recipient": "vendor:a", "category": @}"#,
        "category",
        true,
    ),
    (
        false,
        "/v1/webhooks",
        r#"{"url": @, "events": ["ping"]}"#,
        "url",
        true,
    ),
    (
        false,
        "/v1/webhooks",
        r#"{"url": "http://127.0.0.1:9/x", "events": [@]}"#,
        "events",
        true,
    ),
    (
        false,
        "/v1/escrows",
        r#"{"amount": @, "currency": "USD", "buyer": "agt_long", "seller": "vendor:a", "decision": "dec_x"}"#,
        "amount",
        false,
    ),
    (
        false,
        "/v1/escrows",
        r#"{"amount": 1, "currency": @, "buyer": "agt_long", "seller": "vendor:a", "decision": "dec_x"}"#,
        "currency",
        true,
    ),
    (
        false,
        "/v1/escrows",
        r#"{"amount": 1, "currency": "USD", "buyer": @, "seller": "vendor:a", "decision": "dec_x"}"#,
        "buyer",
        true,
    ),
    (
        false,
        "/v1/escrows",
        r#"{"amount": 1, "currency": "USD", "buyer": "agt_long", "seller": @, "decision": "dec_x"}"#,
        "seller",
        true,
    ),
    (
        false,
        "/v1/escrows",
        r#"{"amount": 1, "currency": "USD", "buyer": "agt_long", "seller": "vendor:a", "decision": @}"#,
        "decision",
        true,
    ),
    (
        false,
        "/v1/escrows",
        r#"{"amount": 1, "currency": "USD", "buyer": "agt_long", "seller": "vendor:a", "decision": "dec_x", "arbiter": @}"#,
        "arbiter",
        true,
    ),
    (false, "/v1/enforcement", r#"{"mode": @}"#, "mode", true),
    (
        false,
        "/v1/reviews/rev_x/deny",
        r#"{"reason": @}"#,
        "reason",
        true,
    ),
];

#[mandate_test_macros::on_each_engine]
async fn a_long_value_in_any_field_is_400_naming_the_field() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "long").await;
    let long_text = format!("\"{}\"", "x".repeat(60_000));
    let long_number = "9".repeat(60_000);
    let long_decimal = format!("1.{}", "1".repeat(60_000));
    for (as_agent, path, template, field, is_string) in FIELDS {
        let key = if *as_agent { &agent } else { &org };
        let values = if *is_string {
            vec![long_text.clone()]
        } else {
            vec![long_number.clone(), long_decimal.clone()]
        };
        for value in values {
            let body = template.replace('@', &value);
            let r = app.post_text(key, path, &body).await;
            let message = r.assert_error(400, "invalid_request");
            assert!(message.starts_with(field), "{path} {field}: {message}");
            assert!(
                message.len() < 400,
                "{path} {field}: the message echoes the value"
            );
        }
    }
    // Nothing was created.
    for (path, n) in [
        ("/v1/agents", 1),
        ("/v1/mandates", 1),
        ("/v1/webhooks", 0),
        ("/v1/decisions", 0),
    ] {
        let r = app.get(&org, path).await;
        assert_eq!(r.body["data"].as_array().unwrap().len(), n, "{path}");
    }
    still_answers(&app).await;
}

#[mandate_test_macros::on_each_engine]
async fn many_query_parameters_are_400_and_an_over_long_uri_is_refused() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let base36 = |mut i: u32| {
        let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut name = Vec::new();
        loop {
            name.push(digits[(i % 36) as usize]);
            i /= 36;
            if i == 0 {
                return String::from_utf8(name).unwrap();
            }
        }
    };
    let distinct: String = (0..10_000).map(|i| format!("{}=&", base36(i))).collect();
    let repeated = "limit=1&".repeat(7_000);
    for query in [&distinct, &repeated] {
        assert!(query.len() < 65_000);
        for path in [
            "/v1/decisions",
            "/v1/agents",
            "/v1/mandates",
            "/v1/events",
            "/v1/exports/decisions",
        ] {
            let r = app.get(&org, &format!("{path}?{query}")).await;
            let message = r.assert_error(400, "invalid_request");
            assert!(message.len() < 400, "{message}");
        }
    }
    // Past 64 KiB the URI is refused by hyper itself (414), before any routing. (No HTTP
    // client library builds such a URI, so it is written by hand.)
    let addr = app.api.trim_start_matches("http://").to_owned();
    let request = format!(
        "GET /v1/decisions?{} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {org}\r\n\r\n",
        "q=1&".repeat(20_000)
    );
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(request.as_bytes());
        let mut head = [0u8; 12];
        let n = stream.read(&mut head).unwrap_or(0);
        String::from_utf8_lossy(&head[..n]).into_owned()
    })
    .await
    .unwrap();
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 414"),
        "{answer}"
    );

    still_answers(&app).await;
}

#[mandate_test_macros::on_each_engine]
async fn long_and_many_headers_are_bounded() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let long = "k".repeat(100_000);
    // A key no key can be: 401 like any unknown key.
    let r = app
        .send(
            Method::GET,
            None,
            "/v1/agents",
            None,
            &[("authorization", &format!("Bearer sk_sandbox_{long}"))],
        )
        .await;
    r.assert_error(401, "unauthorized");
    // An over-long Idempotency-Key: 400 naming it.
    let r = app
        .send(
            Method::POST,
            Some(&org),
            "/v1/agents",
            Some(json!({"name": "h"}).to_string()),
            &[("idempotency-key", &long)],
        )
        .await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("Idempotency-Key"), "{message}");
    // A long header the API does not read changes nothing.
    let r = app
        .send(
            Method::GET,
            Some(&org),
            "/v1/agents",
            None,
            &[("x-padding", &long)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Headers past hyper's buffer (about 400 KB), or more than 100 of them, are refused
    // before any routing; the connection is closed or answered 431.
    let huge = "h".repeat(600_000);
    let r = app
        .client
        .get(format!("{}/v1/agents", app.api))
        .header("authorization", format!("Bearer {org}"))
        .header("x-huge", huge)
        .send()
        .await;
    if let Ok(r) = r {
        assert_eq!(r.status().as_u16(), 431);
    }
    let mut request = app
        .client
        .get(format!("{}/v1/agents", app.api))
        .header("authorization", format!("Bearer {org}"));
    for i in 0..200 {
        request = request.header(format!("x-h{i}"), "v");
    }
    if let Ok(r) = request.send().await {
        assert_eq!(r.status().as_u16(), 431);
    }
    still_answers(&app).await;
}

/// A GET whose query makes the request line about `n` bytes long.
fn full_request_of_length(n: usize) -> Vec<u8> {
    format!(
        "GET /v1/decisions?{} HTTP/1.1\r\nhost: x\r\n\r\n",
        "q=1&".repeat(n / 4)
    )
    .into_bytes()
}

/// Sends `request` on a fresh connection and reads until the server closes it; returns
/// the status (0 if nothing came), the head, and the body. When anything came, asserts it
/// is the envelope (JSON, a `req_` id in the header and the body, `invalid_request`).
async fn raw_exchange(app: &TestApp, request: Vec<u8>) -> (u16, String, serde_json::Value) {
    let addr = app.api.trim_start_matches("http://").to_owned();
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(&request);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        answer
    })
    .await
    .unwrap();
    if answer.is_empty() {
        return (0, String::new(), serde_json::Value::Null);
    }
    envelope_of(&answer)
}

/// The status, head and body of a raw answer, asserted to be the envelope.
#[track_caller]
pub fn envelope_of(answer: &[u8]) -> (u16, String, serde_json::Value) {
    let text = String::from_utf8_lossy(answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect(&text);
    let status: u16 = head[9..12].parse().expect(&text);
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains("\r\ncontent-type: application/json\r\n"),
        "{text}"
    );
    let id = lower
        .lines()
        .find_map(|l| l.strip_prefix("x-request-id: "))
        .expect(&text)
        .to_owned();
    assert!(id.starts_with("req_"), "{text}");
    let body: serde_json::Value = serde_json::from_str(body).expect(&text);
    assert_eq!(body["error"]["code"], "invalid_request", "{text}");
    assert_eq!(
        body["error"]["request_id"].as_str(),
        Some(id.as_str()),
        "{text}"
    );
    (status, head.to_owned(), body)
}

#[mandate_test_macros::on_each_engine]
async fn bytes_hyper_refuses_in_the_request_head_are_answered_with_the_envelope() {
    let app = spawn_app().await;
    // A raw 0xFF in the path, a header line without a colon, an unknown HTTP version.
    for request in [
        b"GET /v1/agents/\xFF HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(),
        b"GET /v1/agents HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n".to_vec(),
        b"GET /v1/agents HTTP/7.1\r\nhost: x\r\n\r\n".to_vec(),
    ] {
        let (status, _, body) = raw_exchange(&app, request.clone()).await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(&request));
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("HTTP/1.1"), "{message}");
    }
    // More than 100 headers: 431 in the envelope.
    let mut many = b"GET /v1/agents HTTP/1.1\r\nhost: x\r\n".to_vec();
    for i in 0..150 {
        many.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let (status, _, _) = raw_exchange(&app, many).await;
    assert_eq!(status, 431);
    // An over-long URI: 414 in the envelope (or, if the server's close overtakes the
    // answer on a request this long, nothing).
    let (status, _, _) = raw_exchange(&app, full_request_of_length(80_000)).await;
    assert!(status == 0 || status == 414, "{status}");
    still_answers(&app).await;
}

#[mandate_test_macros::on_each_engine]
async fn a_path_segment_that_is_not_utf8_is_the_envelope_and_replays_as_first_answered() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    for path in [
        "/v1/agents/%FF",
        "/v1/decisions/%C3%28",
        "/v1/mandates/%FF",
        "/v1/webhooks/%80",
    ] {
        let r = app.get(&org, path).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.contains("UTF-8"), "{path}: {message}");
        assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
    }
    // Under an Idempotency-Key, what is stored, and replayed, is that envelope: the same
    // status, body and content type.
    let send = || {
        app.send(
            Method::POST,
            Some(&org),
            "/v1/mandates/%FF/revoke",
            Some("{}".into()),
            &[("idempotency-key", "not-utf8-1")],
        )
    };
    let first = send().await;
    first.assert_error(400, "invalid_request");
    let again = send().await;
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(again.status, first.status);
    assert_eq!(again.text, first.text);
    assert_eq!(again.header("content-type"), first.header("content-type"));
    again.assert_error(400, "invalid_request");
    still_answers(&app).await;
}

#[mandate_test_macros::on_each_engine]
async fn http2_is_not_spoken_a_prior_knowledge_preface_is_refused() {
    let app = spawn_app().await;
    let addr = app.api.trim_start_matches("http://").to_owned();
    let (answer, elapsed) = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let started = std::time::Instant::now();
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(3)))
            .unwrap();
        // The HTTP/2 connection preface, then an empty SETTINGS frame.
        let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        stream.write_all(&preface).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        (answer, started.elapsed())
    })
    .await
    .unwrap();
    // No SETTINGS frame back (an HTTP/2 server's first bytes): the connection is closed.
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 "),
        "answered {answer:?}"
    );
    assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
    still_answers(&app).await;
}

#[mandate_test_macros::on_each_engine]
async fn a_repeated_member_in_any_body_is_400_naming_it_and_changes_nothing() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "dup").await;
    let pending = app.authorize(&agent, "60", "software").await;
    let review = pending.body["review"]["id"].as_str().unwrap().to_owned();
    let decision = app.authorize(&agent, "10", "software").await.body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mandate = r#"{"agent": "agt_dup", "limits": {"per_transaction": 100, "currency": "USD", "per_transaction": 100000},
        "categories": ["software"], "expires": "2026-12-31"}"#;
    let escrow = format!(
        r#"{{"amount": 10, "currency": "USD", "buyer": "agt_dup", "seller": "vendor:acme", "decision": "{decision}", "seller": "vendor:evil"}}"#
    );
    let deny = format!("/v1/reviews/{review}/deny");
    let cases: [(&str, &str, &str, &str); 8] = [
        (
            &agent,
            "/v1/authorizations",
            r#"{"amount": 10, "currency": "USD", "recipient": "vendor:acme", "category": "software", "amount": 99999}"#,
            "amount",
        ),
        (
            &agent,
            "/v1/authorizations",
            r#"{"amount": 10, "currency": "USD", "recipient": "vendor:acme", "category": "software", "recipient": "vendor:evil"}"#,
            "recipient",
        ),
        (
            &org,
            "/v1/agents",
            r#"{"name": "first", "name": "second"}"#,
            "name",
        ),
        (&org, "/v1/mandates", mandate, "limits.per_transaction"),
        (
            &org,
            "/v1/webhooks",
            r#"{"url": "https://hooks.example.com/", "events": ["ping"], "\u0075rl": "https://evil.example.com/"}"#,
            "url",
        ),
        (
            &org,
            "/v1/enforcement",
            r#"{"mode": "enforce", "mode": "observe"}"#,
            "mode",
        ),
        (&org, "/v1/escrows", &escrow, "seller"),
        (&org, &deny, r#"{"reason": "a", "reason": "b"}"#, "reason"),
    ];
    let decisions_before = app.get(&org, "/v1/decisions?limit=100").await.body["data"]
        .as_array()
        .unwrap()
        .len();
    for (key, path, body, member) in cases {
        let r = app.post_text(key, path, body).await;
        assert_eq!(
            r.assert_error(400, "invalid_request"),
            format!("duplicate member \"{member}\": send each member once"),
            "{path} {body}"
        );
    }
    // Nothing was decided, created, switched, funded or resolved.
    let decisions = app.get(&org, "/v1/decisions?limit=100").await;
    assert_eq!(
        decisions.body["data"].as_array().unwrap().len(),
        decisions_before
    );
    let agents = app.get(&org, "/v1/agents").await;
    assert_eq!(agents.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(app.get(&org, "/v1/webhooks").await.body["data"], json!([]));
    assert_eq!(
        app.get(&org, "/v1/enforcement").await.body["mode"],
        "enforce"
    );
    let r = app
        .post_empty(&org, &format!("/v1/reviews/{review}/deny"))
        .await;
    assert_eq!(r.body["status"], "denied", "{}", r.text);
    // The same bodies once each are accepted.
    let r = app
        .post_text(&agent, "/v1/authorizations", r#"{"amount": 10, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#)
        .await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    // A request body that is a JSON array is not read by position.
    let r = app
        .post_text(
            &agent,
            "/v1/authorizations",
            r#"[10, "USD", "vendor:acme", "software"]"#,
        )
        .await;
    assert_eq!(
        r.assert_error(400, "invalid_request"),
        "body must be a JSON object"
    );
    still_answers(&app).await;
}

/// The body limit holds the same on every route, with or without an Idempotency-Key (the
/// idempotency layer reads the body before the handler does): one message, one status,
/// nothing stored or replayed, and a body of exactly the limit still gets through.
#[mandate_test_macros::on_each_engine]
async fn the_body_limit_is_the_same_with_or_without_an_idempotency_key() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let big = format!(r#"{{"name": "a", "pad": "{}"}}"#, "x".repeat(70 * 1024));
    for headers in [&[][..], &[("idempotency-key", "big-1")][..]] {
        for path in ["/v1/agents", "/v1/webhooks", "/v1/enforcement"] {
            let r = app
                .send(Method::POST, Some(&org), path, Some(big.clone()), headers)
                .await;
            assert_eq!(
                r.assert_error(400, "invalid_request"),
                "request body exceeds 64 KiB",
                "{path} {headers:?}"
            );
            assert_eq!(r.header("idempotency-replayed"), None, "{path}");
        }
    }
    // 64 KiB exactly is within the limit: refused for its content, not its size.
    let name = "n".repeat(64 * 1024 - r#"{"name": ""}"#.len());
    let exact = format!(r#"{{"name": "{name}"}}"#);
    assert_eq!(exact.len(), 64 * 1024);
    for headers in [&[][..], &[("idempotency-key", "exact-1")][..]] {
        let r = app
            .send(
                Method::POST,
                Some(&org),
                "/v1/agents",
                Some(exact.clone()),
                headers,
            )
            .await;
        let message = r.assert_error(400, "invalid_request");
        assert!(!message.contains("exceeds"), "{message}");
    }
    still_answers(&app).await;
}
