//! Webhook registration: reads, deletion, field errors and the URL rules (SSRF) of live webhooks.

use super::*;

#[mandate_test_macros::on_each_engine]
async fn registration_reads_and_deletion() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let r = app
        .post(
            &org,
            "/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/hook", "events": ["mandate.revoked", "ping", "ping"]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.body["webhook"].as_str().unwrap().to_owned();
    assert!(id.starts_with("whk_"));
    assert_eq!(
        r.body,
        json!({"webhook": id, "url": "http://127.0.0.1:9/hook",
               "events": ["mandate.revoked", "ping"], "status": "active",
               "created_at": "2026-11-22T12:00:00Z"})
    );
    let read = app.get(&org, &format!("/v1/webhooks/{id}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body, r.body);
    let other = register(&app, &org, "https://hooks.example.com/mandate", &["ping"]).await;
    let list = app.get(&org, "/v1/webhooks").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["data"][0]["webhook"], other.as_str());
    assert_eq!(list.body["data"][1], r.body);
    assert_eq!(list.body["has_more"], false);
    let page = app.get(&org, "/v1/webhooks?limit=1").await;
    assert_eq!(page.body["has_more"], true);
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let next = app
        .get(&org, &format!("/v1/webhooks?limit=1&cursor={cursor}"))
        .await;
    assert_eq!(next.body["data"][0]["webhook"], id.as_str());

    // Another organization and the other environment see nothing of it.
    let rival = app.onboard("rival").await;
    for key in [&rival.sandbox, &app.org.live] {
        app.get(key, &format!("/v1/webhooks/{id}"))
            .await
            .assert_error(404, "not_found");
        app.post_empty(key, &format!("/v1/webhooks/{id}/ping"))
            .await
            .assert_error(404, "not_found");
        assert_eq!(app.get(key, "/v1/webhooks").await.body["data"], json!([]));
    }

    app.advance(5);
    let deleted = app
        .send(
            Method::DELETE,
            Some(&org),
            &format!("/v1/webhooks/{id}"),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.body["status"], "deleted");
    assert_eq!(deleted.body["webhook"], id.as_str());
    app.get(&org, &format!("/v1/webhooks/{id}"))
        .await
        .assert_error(404, "not_found");
    app.send(
        Method::DELETE,
        Some(&org),
        &format!("/v1/webhooks/{id}"),
        None,
        &[],
    )
    .await
    .assert_error(404, "not_found");
    app.post_empty(&org, &format!("/v1/webhooks/{id}/ping"))
        .await
        .assert_error(404, "not_found");
    let list = app.get(&org, "/v1/webhooks").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    // PUT is not an operation of this path.
    let put = app
        .send(
            Method::PUT,
            Some(&org),
            &format!("/v1/webhooks/{other}"),
            None,
            &[],
        )
        .await;
    put.assert_error(400, "invalid_request");
    assert!(put.header("allow").is_none());
}

#[mandate_test_macros::on_each_engine]
async fn registration_errors_name_the_field_and_agent_keys_get_403() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let cases = [
        (json!({"events": ["ping"]}), "url is required"),
        (json!({"url": "https://a.example"}), "events is required"),
        (
            json!({"url": 5, "events": ["ping"]}),
            "url must be a string",
        ),
        (
            json!({"url": "https://a.example", "events": []}),
            "events must name at least one event type",
        ),
        (
            json!({"url": "https://a.example", "events": "ping"}),
            "events must be an array of event types",
        ),
        (
            json!({"url": "https://a.example", "events": ["ping", 3]}),
            "events[1] must be a string",
        ),
        (
            json!({"url": "https://a.example", "events": ["mandate.*"]}),
            "events[0] \"mandate.*\" is not an event type",
        ),
        (
            json!({"url": "https://a.example", "events": ["ping"], "secret": "x"}),
            "unknown field secret",
        ),
        (
            json!({"url": "https://a.example", "events": ["ping"], "status": "active"}),
            "status is read-only",
        ),
        (
            json!({"url": "http://hooks.example.com/", "events": ["ping"]}),
            "url must use https://",
        ),
        (
            json!({"url": "http://10.0.0.1/", "events": ["ping"]}),
            "url must use https://",
        ),
        (
            json!({"url": "https://169.254.169.254/", "events": ["ping"]}),
            "url host 169.254.169.254 points at a cloud metadata address",
        ),
        (
            json!({"url": "https://10.1.2.3/", "events": ["ping"]}),
            "url host 10.1.2.3 points at a private address",
        ),
        (json!({"url": "not a url", "events": ["ping"]}), "url "),
    ];
    for (body, expected) in cases {
        let r = app.post(&org, "/v1/webhooks", body.clone()).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.starts_with(expected), "{body}: {message}");
    }
    // Live: http is refused even to loopback.
    let r = app
        .post(
            &app.org.live,
            "/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/hook", "events": ["ping"]}),
        )
        .await;
    assert!(
        r.assert_error(400, "invalid_request")
            .starts_with("url must use https://")
    );

    let agent = app.agent(&org, "buyer").await;
    let id = register(&app, &org, "http://localhost:9/hook", &["ping"]).await;
    let attempts = [
        (
            Method::POST,
            "/v1/webhooks".to_owned(),
            Some(json!({"url": "https://a.example", "events": ["ping"]})),
        ),
        (Method::GET, "/v1/webhooks".to_owned(), None),
        (Method::GET, format!("/v1/webhooks/{id}"), None),
        (Method::DELETE, format!("/v1/webhooks/{id}"), None),
        (Method::POST, format!("/v1/webhooks/{id}/ping"), None),
        (Method::GET, "/v1/events".to_owned(), None),
        (Method::GET, "/v1/events/evt_x".to_owned(), None),
    ];
    for (method, path, body) in attempts {
        let r = app
            .send(
                method.clone(),
                Some(&agent),
                &path,
                body.map(|b| b.to_string()),
                &[],
            )
            .await;
        r.assert_error(403, "forbidden");
    }
    // Nothing happened under the agent key.
    assert_eq!(
        app.get(&org, &format!("/v1/webhooks/{id}")).await.status,
        200
    );
    assert_eq!(app.get(&org, "/v1/events").await.body["data"], json!([]));
}

#[mandate_test_macros::on_each_engine]
async fn ssrf_forms_are_refused_for_live_webhooks() {
    let app = spawn_app().await;
    let live = app.org.live.clone();
    for url in [
        "https://127.0.0.1/hook",
        "https://127.0.0.2:8443/hook",
        "https://[::1]/hook",
        "https://10.0.0.1/hook",
        "https://172.16.5.4/",
        "https://192.168.1.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://[fd00:ec2::254]/",
        "https://[fe80::1]/",
        "https://[fc00::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:a9fe:a9fe]/",
        "https://100.64.0.1/",
        "https://0.0.0.0/",
        "http://2130706433/",
        "https://2130706433/",
        "https://0x7f000001/",
        "https://0177.0.0.1/",
        "https://127.1/",
        "https://localhost/",
        "https://localhost:8443/hook",
        "https://app.localhost/",
        "http://127.0.0.1:9/hook",
    ] {
        let r = app
            .post(
                &live,
                "/v1/webhooks",
                json!({"url": url, "events": ["ping"]}),
            )
            .await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.starts_with("url "), "{url}: {message}");
    }
    assert_eq!(app.get(&live, "/v1/webhooks").await.body["data"], json!([]));
    // A public address or name is accepted (a name that does not resolve yet is judged
    // again at every delivery).
    register(&app, &live, "https://93.184.216.34/hook", &["ping"]).await;
    register(&app, &live, "https://hooks.example.com/mandate", &["ping"]).await;
    // The sandbox may use loopback, and nothing else internal.
    let sandbox = app.org.sandbox.clone();
    register(&app, &sandbox, "http://localhost:9/hook", &["ping"]).await;
    register(&app, &sandbox, "http://[::1]:9/hook", &["ping"]).await;
    for url in [
        "https://10.0.0.1/",
        "https://169.254.169.254/",
        "http://2130706433/",
    ] {
        let r = app
            .post(
                &sandbox,
                "/v1/webhooks",
                json!({"url": url, "events": ["ping"]}),
            )
            .await;
        assert!(
            r.assert_error(400, "invalid_request").starts_with("url "),
            "{url}"
        );
    }
}

#[mandate_test_macros::on_each_engine]
async fn documentation_nat64_local_use_and_teredo_addresses_are_refused() {
    let app = spawn_app().await;
    for (url, kind) in [
        ("https://192.0.2.10/hook", "documentation"),
        ("https://198.51.100.1/", "documentation"),
        ("https://203.0.113.9:8443/", "documentation"),
        ("https://[2001:db8::1]/", "documentation"),
        ("https://[64:ff9b:1::a00:1]/", "reserved"),
        (
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "reserved",
        ),
    ] {
        for key in [&app.org.live, &app.org.sandbox] {
            let r = app
                .post(key, "/v1/webhooks", json!({"url": url, "events": ["ping"]}))
                .await;
            let message = r.assert_error(400, "invalid_request");
            assert!(
                message.starts_with("url host ")
                    && message.contains(&format!("points at a {kind} address"))
                    && message.ends_with("webhooks may not target it"),
                "{url}: {message}"
            );
        }
    }
    assert_eq!(
        app.get(&app.org.live, "/v1/webhooks").await.body["data"],
        json!([])
    );
    // Neighbours of those ranges stay usable.
    register(&app, &app.org.live, "https://203.0.114.9/hook", &["ping"]).await;
    register(&app, &app.org.live, "https://[2001:4860::8888]/", &["ping"]).await;
}
