//! Health checks on the public host: `/healthz` answers while the process serves,
//! `/readyz` only while storage takes writes and the schema is the server's own; neither
//! needs a key, and the API host keeps answering 401 to requests without one.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::spawn_app;

/// GET `url` with no key: status and JSON body.
pub(crate) async fn probe(url: &str) -> (u16, Value, String) {
    let r = reqwest::get(url).await.unwrap();
    let status = r.status().as_u16();
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    assert_eq!(
        r.headers()
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    assert!(r.headers().contains_key("x-request-id"));
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap(), text)
}

#[mandate_test_macros::on_each_engine]
async fn healthz_and_readyz_answer_200_without_a_key_on_the_public_host_only() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz"] {
        let (status, body, _) = probe(&format!("{}{path}", app.public)).await;
        assert_eq!((status, body), (200, json!({"status": "ok"})), "{path}");
        // Not on the API host: there, no key is the 401 envelope as on every path.
        app.send(Method::GET, None, path, None, &[])
            .await
            .assert_error(401, "unauthorized");
    }
}

#[mandate_test_macros::on_each_engine]
async fn readyz_is_503_while_the_database_schema_is_newer_than_the_server() {
    let app = spawn_app().await;
    app.db.execute(
        "INSERT INTO schema_migrations (version, applied_ms) VALUES (9999, 0)",
        &[],
    );
    let (status, body, text) = probe(&format!("{}/readyz", app.public)).await;
    assert_eq!(status, 503, "{text}");
    assert_eq!(body["status"], "unavailable");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains("migration 9999"), "{reason}");
    let (status, _, _) = probe(&format!("{}/healthz", app.public)).await;
    assert_eq!(status, 200);

    app.db
        .execute("DELETE FROM schema_migrations WHERE version = 9999", &[]);
    let (status, body, _) = probe(&format!("{}/readyz", app.public)).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));
}

#[mandate_test_macros::on_each_engine]
async fn readyz_is_503_once_an_environment_has_no_signing_key_loaded() {
    let app = spawn_app().await;
    app.db
        .execute("DELETE FROM signing_keys WHERE env = 'live'", &[]);
    // The key ring is reloaded from storage when the injected clock has moved 2 s.
    app.clock.advance(time::Duration::seconds(3));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (status, body, text) = loop {
        let answer = probe(&format!("{}/readyz", app.public)).await;
        if answer.0 != 200 || std::time::Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(status, 503, "{text}");
    assert_eq!(
        body,
        json!({"status": "unavailable", "reason": "no signing key is loaded for live"})
    );
}
