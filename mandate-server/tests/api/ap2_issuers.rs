//! The AP2 issuer keys an organization trusts (issue #36): the operator command
//! `mandate-server ap2-issuer add|list|remove` run as its own process on the test's
//! database (SQLite file or PostgreSQL), and what the running server then reads.

use std::process::{Command, Output};

use serde_json::Value;

use crate::helpers::spawn_app;
use crate::process::{binary, db_env};

fn run(db: &std::ffi::OsStr, args: &[&str]) -> Output {
    Command::new(binary())
        .arg("ap2-issuer")
        .args(args)
        .arg("--db")
        .arg(db)
        .envs(db_env(db))
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn refused(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr.clone()).unwrap()
}

#[mandate_test_macros::on_each_engine]
async fn operator_adds_lists_and_removes_trusted_issuer_keys() {
    let app = spawn_app().await;
    let db = app.db.arg();
    let dir = tempfile::tempdir().unwrap();

    // A JWK file, as an issuer publishes it.
    let signing = p256::ecdsa::SigningKey::from_bytes(&[7u8; 32].into()).unwrap();
    let jwk = mandate_core::Jwk::from_verifying_key("issuer-1", signing.verifying_key());
    let jwk_file = dir.path().join("issuer.jwk");
    std::fs::write(&jwk_file, serde_json::to_string(&jwk).unwrap()).unwrap();
    let jwk_path = jwk_file.to_str().unwrap();
    let said = ok(&run(&db, &["add", "--org", "acme", "--key", jwk_path]));
    assert!(said.contains("issuer-1"), "{said}");

    // A PEM made by another library (rcgen), with its kid given on the command line.
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let pem_file = dir.path().join("issuer.pem");
    std::fs::write(&pem_file, pair.public_key_pem()).unwrap();
    let pem_path = pem_file.to_str().unwrap();
    let said = refused(&run(&db, &["add", "--org", "acme", "--key", pem_path]));
    assert!(said.contains("--kid"), "{said}");
    ok(&run(
        &db,
        &[
            "add", "--org", "acme", "--key", pem_path, "--kid", "issuer-2",
        ],
    ));

    // The same kid twice is refused, naming it; the stored key is unchanged.
    let said = refused(&run(
        &db,
        &[
            "add", "--org", "acme", "--key", pem_path, "--kid", "issuer-1",
        ],
    ));
    assert!(
        said.contains("issuer-1") && said.contains("already"),
        "{said}"
    );

    // What list prints, and what the server reads: both keys, the PEM's point exactly.
    let listed = ok(&run(&db, &["list", "--org", "acme"]));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(lines[0].starts_with("issuer-1  "), "{listed}");
    assert!(lines[1].starts_with("issuer-2  "), "{listed}");
    let store = &app.running.as_ref().unwrap().state.store;
    let org_id = app.org_id("acme");
    let stored = store.ap2_issuers(&org_id).await.unwrap();
    assert_eq!(stored.len(), 2);
    let first: Value = serde_json::from_str(&stored[0].jwk).unwrap();
    assert_eq!(first, serde_json::to_value(&jwk).unwrap());
    let second =
        mandate_core::Jwk::from_value(&serde_json::from_str(&stored[1].jwk).unwrap()).unwrap();
    assert_eq!(second.kid(), "issuer-2");
    assert_eq!(
        second.verifying_key().to_sec1_point(false).as_bytes(),
        pair.public_key_raw()
    );

    // Another organization trusts none of them.
    app.onboard("globex").await;
    assert!(ok(&run(&db, &["list", "--org", "globex"])).is_empty());
    let said = refused(&run(&db, &["list", "--org", "nobody"]));
    assert!(said.contains("nobody"), "{said}");

    // Remove: once, then it is unknown.
    ok(&run(&db, &["remove", "--org", "acme", "--kid", "issuer-1"]));
    let said = refused(&run(&db, &["remove", "--org", "acme", "--kid", "issuer-1"]));
    assert!(said.contains("issuer-1"), "{said}");
    let stored = store.ap2_issuers(&org_id).await.unwrap();
    assert_eq!(
        stored.iter().map(|i| i.kid.as_str()).collect::<Vec<_>>(),
        ["issuer-2"]
    );
}

#[mandate_test_macros::on_each_engine]
async fn operator_refuses_keys_that_are_not_p256_public_keys() {
    let app = spawn_app().await;
    let db = app.db.arg();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key");
    let path = file.to_str().unwrap();
    let signing = p256::ecdsa::SigningKey::from_bytes(&[9u8; 32].into()).unwrap();
    let public = serde_json::to_value(mandate_core::Jwk::from_verifying_key(
        "k",
        signing.verifying_key(),
    ))
    .unwrap();
    let mut with_private = public.clone();
    with_private["d"] = Value::String("AAAA".into());
    let mut hs256 = public.clone();
    hs256["alg"] = Value::String("HS256".into());
    let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let cases: Vec<(String, &str)> = vec![
        (with_private.to_string(), "d"),
        (hs256.to_string(), "alg"),
        (p384.public_key_pem(), "P-256"),
        ("not a key".into(), "neither"),
    ];
    for (text, named) in cases {
        std::fs::write(&file, &text).unwrap();
        let said = refused(&run(
            &db,
            &["add", "--org", "acme", "--key", path, "--kid", "k"],
        ));
        assert!(said.contains(named), "{text}: {said}");
    }
    // A JWK whose kid differs from --kid.
    std::fs::write(&file, public.to_string()).unwrap();
    let said = refused(&run(
        &db,
        &["add", "--org", "acme", "--key", path, "--kid", "other"],
    ));
    assert!(said.contains("kid"), "{said}");
    assert!(ok(&run(&db, &["list", "--org", "acme"])).is_empty());
}
