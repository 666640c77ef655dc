//! The public key set: served on the public host without a key, redirected from the API
//! host, and kept through a rotation until the outgoing key's tokens have expired.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::{TokenError, VerifyOptions, verify_verdict};
use mandate_server::clock::ms;
use mandate_server::model::Env;
use mandate_server::{operator, signing};
use reqwest::Method;
use serde_json::Value;

use crate::helpers::{TestApp, spawn_app, spawn_app_with};

/// The `kid` in a token's JOSE header.
fn kid(token: &str) -> String {
    let header = token.split('.').next().unwrap();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["typ"], "JWT");
    header["kid"].as_str().unwrap().to_owned()
}

async fn kids(app: &TestApp) -> Vec<String> {
    let mut kids: Vec<String> = app
        .jwks()
        .await
        .keys
        .iter()
        .map(|k| k.kid().to_owned())
        .collect();
    kids.sort();
    kids
}

/// Polls the public key set until `done` holds, for up to 5 seconds: the server reloads its
/// keys on its refresher's next tick once they changed or the clock moved on.
async fn wait_for_kids(app: &TestApp, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let kids = kids(app).await;
        if done(&kids) || tokio::time::Instant::now() > deadline {
            return kids;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn options(app: &TestApp) -> VerifyOptions {
    VerifyOptions {
        issuer: app.issuer(),
        now: app.clock_now(),
        leeway_secs: 0,
    }
}

#[mandate_test_macros::on_each_engine]
async fn the_public_host_serves_the_key_set_without_a_key() {
    let app = spawn_app().await;
    let url = format!("{}/.well-known/jwks.json", app.public);
    let r = app.send(Method::GET, None, &url, None, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("cache-control"), Some("public, max-age=300"));
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("application/json"))
    );
    let keys = r.body["keys"].as_array().unwrap();
    let mut kids: Vec<_> = keys.iter().map(|k| k["kid"].as_str().unwrap()).collect();
    kids.sort_unstable();
    assert_eq!(kids, ["live-1", "log-live-1", "log-sandbox-1", "sandbox-1"]);
    // The log keys (docs/audit.md) are checked in decision_log.rs; the verdict keys here.
    for key in keys.iter().filter(|k| k["use"] != "tlog-checkpoint") {
        let key = key.as_object().unwrap();
        assert!(!key.contains_key("d"), "private part published: {key:?}");
        assert_eq!(key["kty"], "EC");
        assert_eq!(key["crv"], "P-256");
        assert_eq!(key["alg"], "ES256");
        assert_eq!(key["use"], "sig");
    }
    // The strict parser accepts it.
    assert_eq!(app.jwks().await.keys.len(), 2);
    // A key, even a bad one, changes nothing there.
    let with_key = app
        .send(
            Method::GET,
            None,
            &url,
            None,
            &[("authorization", "Bearer nonsense")],
        )
        .await;
    assert_eq!(with_key.status, 200);
    assert_eq!(with_key.body, r.body);
    // Anything else on the public host is a 404 envelope.
    let other = app
        .send(
            Method::GET,
            None,
            &format!("{}/v1/agents", app.public),
            None,
            &[],
        )
        .await;
    other.assert_error(404, "not_found");
}

#[mandate_test_macros::on_each_engine]
async fn the_api_host_redirects_the_earlier_location_permanently() {
    let app = spawn_app().await;
    let expected = format!("{}/.well-known/jwks.json", app.issuer());
    assert_eq!(expected, format!("{}/.well-known/jwks.json", app.public));
    for key in [None, Some(app.org.sandbox.as_str())] {
        let r = app
            .send(Method::GET, key, "/.well-known/jwks.json", None, &[])
            .await;
        assert_eq!(r.status, 308, "{}", r.text);
        assert_eq!(r.header("location"), Some(expected.as_str()));
    }
    // Only GET on that exact path is public on the API host.
    let r = app
        .send(Method::POST, None, "/.well-known/jwks.json", None, &[])
        .await;
    r.assert_error(401, "unauthorized");
    let r = app
        .send(Method::GET, None, "/.well-known/jwks.json/x", None, &[])
        .await;
    r.assert_error(401, "unauthorized");
    // Following the redirect by hand lands on the key set.
    let followed = app.send(Method::GET, None, &expected, None, &[]).await;
    assert_eq!(followed.status, 200);
    assert!(followed.body["keys"].is_array());
}

#[mandate_test_macros::on_each_engine]
async fn a_verdicts_url_with_trailing_slashes_is_normalized_for_iss_and_the_redirect() {
    let app = spawn_app_with(|c| {
        c.verdicts_url = Some("https://verdicts.example.com/mandate//".into());
    })
    .await;
    assert_eq!(app.issuer(), "https://verdicts.example.com/mandate");
    let r = app
        .send(Method::GET, None, "/.well-known/jwks.json", None, &[])
        .await;
    assert_eq!(r.status, 308, "{}", r.text);
    assert_eq!(
        r.header("location"),
        Some("https://verdicts.example.com/mandate/.well-known/jwks.json")
    );
    // The token's `iss` is the normalized URL, and a verifier pinned to it accepts it.
    let agent = app.standard_agent(&app.org.sandbox.clone(), "n").await;
    let token = app.authorize(&agent, "1", "software").await.body["verdict_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let claims = verify_verdict(&token, &app.jwks().await, &options(&app)).unwrap();
    assert_eq!(claims.iss, "https://verdicts.example.com/mandate");
    // A bare host with a slash becomes the bare host.
    let app = spawn_app_with(|c| c.verdicts_url = Some("https://v.example.com/".into())).await;
    assert_eq!(app.issuer(), "https://v.example.com");
}

#[mandate_test_macros::on_each_engine]
async fn a_verdicts_or_docs_url_that_is_not_an_absolute_http_url_stops_the_start() {
    for (verdicts, docs, flag) in [
        (Some("/"), None, "--verdicts-url"),
        (Some("verdicts.example.com"), None, "--verdicts-url"),
        (Some("ftp://verdicts.example.com"), None, "--verdicts-url"),
        (Some("https://v.example.com/?x=1"), None, "--verdicts-url"),
        (None, Some("https://"), "--docs-url"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = mandate_server::serve::Config {
            db: dir.path().join("m.db").into(),
            migrate: true,
            api_addr: "127.0.0.1:0".into(),
            public_addr: "127.0.0.1:0".into(),
            verdicts_url: verdicts.map(Into::into),
            docs_url: docs.map(Into::into),
            tls: None,
            api_url: None,
            console_origins: None,
            log_checkpoint_interval: mandate_server::workers::checkpoint::DEFAULT_INTERVAL,
            log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
            // A manual clock: a log waits by wall time only when a test moves it.
            log_quiet_below: 0,
            public_logs: false,
            x402_assets: Default::default(),
            witnesses: Vec::new(),
            limits: Default::default(),
            key_encryption: Default::default(),
        };
        let clock = std::sync::Arc::new(mandate_server::clock::ManualClock::new(
            crate::helpers::START,
        ));
        let error = match mandate_server::serve::start(config, clock).await {
            Ok(_) => panic!("{verdicts:?} {docs:?} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(error.starts_with(flag), "{error}");
    }
}

#[mandate_test_macros::on_each_engine]
async fn tokens_name_their_environments_key() {
    let app = spawn_app().await;
    let sandbox = app.standard_agent(&app.org.sandbox.clone(), "s").await;
    let live = app.standard_agent(&app.org.live.clone(), "l").await;
    let s = app.authorize(&sandbox, "1", "software").await;
    let l = app.authorize(&live, "1", "software").await;
    let s_token = s.body["verdict_token"].as_str().unwrap();
    let l_token = l.body["verdict_token"].as_str().unwrap();
    assert!(kid(s_token).starts_with("sandbox-"), "{}", kid(s_token));
    assert!(kid(l_token).starts_with("live-"), "{}", kid(l_token));
    assert_eq!(kid(l_token), "live-1");
    let jwks = app.jwks().await;
    for token in [s_token, l_token] {
        verify_verdict(token, &jwks, &options(&app)).unwrap();
    }
}

#[mandate_test_macros::on_each_engine]
async fn a_rotation_keeps_the_outgoing_key_until_its_tokens_have_expired() {
    let app = spawn_app().await;
    let agent = app.standard_agent(&app.org.sandbox.clone(), "rot").await;
    let old = app.authorize(&agent, "1", "software").await;
    let old_token = old.body["verdict_token"].as_str().unwrap().to_owned();
    assert_eq!(kid(&old_token), "sandbox-1");

    let db = app.running.as_ref().unwrap().state.store.clone();
    app.advance(10);
    let rotated_at = app.clock_now();
    let new_kid =
        operator::rotate_signing_key(&*db, &app.db.key_encryption(), Env::Sandbox, rotated_at)
            .unwrap();
    assert_eq!(new_kid, "sandbox-2");
    let now_kids = wait_for_kids(&app, |k| k.iter().any(|k| k == "sandbox-2")).await;
    assert_eq!(now_kids, ["live-1", "sandbox-1", "sandbox-2"]);

    // The old token still verifies against the published set, and new tokens use the
    // new key. Live is untouched.
    let jwks = app.jwks().await;
    verify_verdict(&old_token, &jwks, &options(&app)).unwrap();
    let new = app.authorize(&agent, "2", "software").await;
    let new_token = new.body["verdict_token"].as_str().unwrap().to_owned();
    assert_eq!(kid(&new_token), "sandbox-2");
    verify_verdict(&new_token, &jwks, &options(&app)).unwrap();
    let live_agent = app.standard_agent(&app.org.live.clone(), "l").await;
    let live = app.authorize(&live_agent, "1", "software").await;
    assert_eq!(kid(live.body["verdict_token"].as_str().unwrap()), "live-1");

    // Ten minutes after the rotation the outgoing key is still listed (checked on the
    // loader directly, without waiting for the timer), and gone just after.
    let ten_minutes = time::Duration::seconds(600);
    let at_edge = signing::load(
        &*db,
        &app.db.key_encryption(),
        ms(rotated_at + ten_minutes - time::Duration::seconds(1)),
    )
    .unwrap();
    assert!(at_edge.jwks.find("sandbox-1").is_some());
    let past = signing::load(&*db, &app.db.key_encryption(), ms(rotated_at + ten_minutes)).unwrap();
    assert!(past.jwks.find("sandbox-1").is_none());

    // The running server drops it too, on its own timer and the server's clock.
    app.advance(600 + 1);
    let later_kids = wait_for_kids(&app, |k| !k.iter().any(|k| k == "sandbox-1")).await;
    assert_eq!(later_kids, ["live-1", "sandbox-2"]);
    let jwks = app.jwks().await;
    // The old token is refused for its kid now (it had expired anyway).
    let error = verify_verdict(&old_token, &jwks, &options(&app)).unwrap_err();
    assert_eq!(error, TokenError::UnknownKid("sandbox-1".into()));
    assert!(jwks.find("sandbox-2").is_some());
}
