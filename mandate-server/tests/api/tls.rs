//! Both listeners serve TLS from a certificate and key given on the command line.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[tokio::test]
async fn both_listeners_speak_tls_with_the_given_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert_pem = certified.cert.pem();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &cert_pem).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_mandate-server"))
        .args([
            "serve",
            "--api-addr",
            "127.0.0.1:0",
            "--public-addr",
            "127.0.0.1:0",
            "--db",
        ])
        .arg(dir.path().join("tls.db"))
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut api, mut public) = (String::new(), String::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(url) = line.trim().strip_prefix("api:") {
            api = url.trim().to_owned();
        }
        if let Some(url) = line.trim().strip_prefix("public:") {
            public = url.trim().to_owned();
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    assert!(api.starts_with("https://127.0.0.1:"), "{api}");
    assert!(public.starts_with("https://127.0.0.1:"), "{public}");

    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let jwks = client
        .get(format!("{public}/.well-known/jwks.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(jwks.status().as_u16(), 200);
    let set = mandate_core::jwk::JwkSet::from_json(&jwks.bytes().await.unwrap()).unwrap();
    assert!(set.find("sandbox-1").is_some());
    let anonymous = client.get(format!("{api}/v1/agents")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    // A client that does not trust the certificate is refused by its own TLS check.
    assert!(
        reqwest::get(format!("{public}/.well-known/jwks.json"))
            .await
            .is_err()
    );
    // Plain HTTP to a TLS listener gets no API answer.
    let plain = reqwest::get(format!("{}/v1/agents", api.replace("https://", "http://"))).await;
    assert!(plain.map(|r| r.status().as_u16() != 401).unwrap_or(true));

    child.kill().unwrap();
    child.wait().unwrap();
}
