//! Durability: what a client was told survives a restart (and a `kill -9`:
//! sqlite_only/durability.rs); in-memory state (velocity, month-to-date) is rebuilt from
//! stored decisions; signing keys persist.

use mandate_core::VerifyOptions;

use crate::helpers::spawn_app;

#[mandate_test_macros::on_each_engine]
async fn velocity_month_to_date_and_keys_survive_a_restart() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let fast = app.standard_agent(&org, "fast").await;
    for _ in 0..10 {
        app.authorize(&fast, "1", "software").await;
    }
    let spender = app.standard_agent(&org, "spender").await;
    let mut token = String::new();
    for _ in 0..8 {
        let r = app.authorize(&spender, "50", "software").await;
        assert_eq!(r.body["verdict"], "allow");
        token = r.body["verdict_token"].as_str().unwrap().to_owned();
    }
    let kids_before: Vec<String> = app
        .jwks()
        .await
        .keys
        .iter()
        .map(|k| k.kid().to_owned())
        .collect();

    app.restart().await;

    // The velocity window was rebuilt: the 11th request is still over.
    assert_eq!(
        app.authorize(&fast, "1", "software").await.body["verdict"],
        "deny_velocity"
    );
    // Month-to-date was rebuilt: 400 spent, 50 fits exactly, then nothing more.
    assert_eq!(
        app.authorize(&spender, "50", "software").await.body["verdict"],
        "allow"
    );
    let over = app.authorize(&spender, "0.01", "software").await;
    assert_eq!(
        over.body["reason"],
        "month-to-date spend 450 plus amount 0.01 exceeds per_month limit 450"
    );
    // The same keys sign and verify: a token from before the restart verifies.
    let kids_after: Vec<String> = app
        .jwks()
        .await
        .keys
        .iter()
        .map(|k| k.kid().to_owned())
        .collect();
    assert_eq!(kids_before, kids_after);
    let options = VerifyOptions {
        issuer: app.issuer(),
        now: app.clock_now(),
        leeway_secs: 0,
    };
    // The issuer is the public listener's URL, which moved with the restart (port 0).
    let claims = mandate_core::verify_verdict(
        &token,
        &app.jwks().await,
        &VerifyOptions {
            issuer: String::new(),
            ..options
        },
    );
    assert!(matches!(
        claims,
        Err(mandate_core::TokenError::WrongIssuer(_))
    ));
}
