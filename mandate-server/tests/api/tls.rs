//! Both listeners serve TLS from a certificate and key given on the command line.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[mandate_test_macros::on_each_engine]
async fn both_listeners_speak_tls_with_the_given_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert_pem = certified.cert.pem();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let db = crate::helpers::TestDatabase::new(dir.path(), "tls.db").await;
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
        .arg(db.arg())
        .envs(db.env())
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
    let set = mandate_core::JwkSet::from_json(&jwks.bytes().await.unwrap()).unwrap();
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

/// A server in this process serving TLS with a fresh self-signed certificate and a short
/// header timeout; returns it with the certificate (PEM).
async fn tls_server(
    dir: &std::path::Path,
) -> (
    mandate_server::serve::Running,
    String,
    crate::helpers::TestDatabase,
) {
    use mandate_server::http::limits::Limits;
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let db = crate::helpers::TestDatabase::new(dir, "tls.db").await;
    let running = mandate_server::serve::start(
        mandate_server::serve::Config {
            tls: Some((cert, key)),
            api_url: None,
            console_origins: None,
            log_checkpoint_interval: mandate_server::workers::checkpoint::DEFAULT_INTERVAL,
            log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
            // A manual clock: a log waits by wall time only when a test moves it.
            log_quiet_below: 0,
            public_logs: false,
            x402_assets: Default::default(),
            witnesses: Vec::new(),
            limits: Limits {
                header_read_timeout: std::time::Duration::from_millis(1500),
                ..Limits::default()
            },
            ..crate::helpers::config(&db)
        },
        std::sync::Arc::new(mandate_server::clock::ManualClock::new(
            crate::helpers::START,
        )),
    )
    .await
    .unwrap();
    (running, certified.cert.pem(), db)
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

/// A TLS connection that trusts `cert_pem` and offers `alpn`, handshake done.
fn tls_connect(
    addr: std::net::SocketAddr,
    cert_pem: &str,
    alpn: &[&[u8]],
) -> std::io::Result<TlsStream> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let mut sock = std::net::TcpStream::connect(addr)?;
    sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    Ok(rustls::StreamOwned::new(conn, sock))
}

/// Writes `request` and reads the answer until the server closes the connection.
fn exchange(stream: &mut TlsStream, request: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    stream.write_all(request).unwrap();
    stream.flush().unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return answer,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
}

#[mandate_test_macros::on_each_engine(flavor = "multi_thread", worker_threads = 2)]
async fn tls_offers_only_http1_and_is_guarded_like_plain_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let (running, cert_pem, _db) = tls_server(dir.path()).await;
    let addr = running.api_addr;
    tokio::task::spawn_blocking(move || {
        // A client offering h2 and HTTP/1.1 gets HTTP/1.1, and is served with it.
        let mut both = tls_connect(addr, &cert_pem, &[b"h2", b"http/1.1"]).unwrap();
        assert_eq!(both.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
        let answer = exchange(
            &mut both,
            b"GET /v1/agents HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        );
        assert!(
            answer.starts_with(b"HTTP/1.1 401"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        // A client offering only h2 is refused in the handshake (or gets no protocol).
        match tls_connect(addr, &cert_pem, &[b"h2"]) {
            Err(_) => {}
            Ok(s) => assert_ne!(s.conn.alpn_protocol(), Some(&b"h2"[..])),
        }
        // hyper's own refusal of a raw 0xFF in the path, under TLS, is the envelope too.
        let mut raw = tls_connect(addr, &cert_pem, &[b"http/1.1"]).unwrap();
        let answer = exchange(&mut raw, b"GET /v1/agents/\xFF HTTP/1.1\r\nhost: x\r\n\r\n");
        let (status, _, _) = crate::hostile::envelope_of(&answer);
        assert_eq!(status, 400);
        // A socket that never starts its handshake is closed after the header timeout.
        let started = std::time::Instant::now();
        let mut silent = std::net::TcpStream::connect(addr).unwrap();
        silent
            .set_read_timeout(Some(std::time::Duration::from_secs(6)))
            .unwrap();
        let mut buf = [0u8; 16];
        let read = std::io::Read::read(&mut silent, &mut buf);
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(3),
            "closed after {:?}",
            started.elapsed()
        );
    })
    .await
    .unwrap();
}
