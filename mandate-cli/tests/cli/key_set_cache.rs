//! The CLI keeps a fetched JWK Set by the core's cache policy (`mandate_core::KeySetCache`):
//! for the response's `Cache-Control: max-age` from the fetch time, and for a token naming a
//! `kid` the set lacks, one fetch at most per interval. A small HTTP server here publishes
//! a real key set with a `Cache-Control` header and counts the fetches; `mandate listen`,
//! `mandate jwks fetch` and `mandate verify` are the real binary.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::process::{Child, ChildStdout, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mandate_core::{EventClaims, EventId, JwkSet, P256Signer, Signer as _, sign_token};

use crate::support::{command_in, run_in};

/// A key set published over HTTP on 127.0.0.1, counting the requests for it.
struct KeyServer {
    /// `http://127.0.0.1:PORT/.well-known/jwks.json`.
    url: String,
    fetches: Arc<AtomicUsize>,
}

impl KeyServer {
    /// Serves `set` with `cache_control` (when given) on a port of its own; the thread
    /// ends with the test process.
    fn start(set: &JwkSet, cache_control: Option<&'static str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://{}/.well-known/jwks.json",
            listener.local_addr().unwrap()
        );
        let body = serde_json::to_string(set).unwrap();
        let fetches = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&fetches);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                // The request head, to its blank line.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                if !head.starts_with(b"GET /.well-known/jwks.json ") {
                    let _ = stream.write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                    continue;
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let header = cache_control
                    .map(|value| format!("cache-control: {value}\r\n"))
                    .unwrap_or_default();
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{header}\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            }
        });
        Self { url, fetches }
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// A webhook event from `issuer`, signed now by `signer`.
fn event(signer: &P256Signer, issuer: &str, id: u8) -> String {
    let iat = now_unix();
    let claims = EventClaims {
        iss: issuer.to_owned(),
        jti: EventId::from_random([id; 16]),
        iat,
        exp: iat + 300,
        event_type: "ping".to_owned(),
        data: serde_json::json!({"webhook": "whk_test"}),
    };
    sign_token(signer, &claims).unwrap()
}

/// A running `mandate listen`, killed when dropped.
struct Listening {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    url: String,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn listen(home: &std::path::Path, jwks_url: &str, issuer: &str) -> Listening {
    let mut child = command_in(
        home,
        &[
            "listen",
            "--port",
            "0",
            "--jwks-url",
            jwks_url,
            "--issuer",
            issuer,
            "--json",
        ],
        &[],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let line: serde_json::Value =
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("not the address ({e}): {first:?}"));
    let url = line["listening"].as_str().unwrap().to_owned();
    Listening {
        child,
        _stdout: stdout,
        url,
    }
}

/// POSTs an event token; the status.
fn deliver(url: &str, token: &str) -> u16 {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
        .post(url)
        .header("Content-Type", "application/jwt")
        .body(token.to_owned())
        .send()
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn listen_fetches_the_set_again_after_its_max_age_and_once_per_interval_for_unknown_kids() {
    let home = tempfile::tempdir().unwrap();
    let ours = P256Signer::from_secret_bytes("live-1", &[7; 32]).unwrap();
    let stranger = P256Signer::from_secret_bytes("live-9", &[9; 32]).unwrap();
    let server = KeyServer::start(
        &JwkSet {
            keys: vec![ours.public_jwk()],
        },
        Some("public, max-age=3"),
    );
    let issuer = "https://verdicts.test";
    let listening = listen(home.path(), &server.url, issuer);
    assert_eq!(server.fetches(), 1, "the set is fetched once at start");
    assert_eq!(deliver(&listening.url, &event(&ours, issuer, 1)), 200);
    assert_eq!(server.fetches(), 1, "a fresh set is used as it is");

    // Tokens naming a kid the set lacks: one fetch, then none within the interval (1 s).
    let burst = Instant::now();
    for id in 10..16 {
        assert_eq!(deliver(&listening.url, &event(&stranger, issuer, id)), 400);
    }
    let most = 2 + usize::try_from(burst.elapsed().as_secs()).unwrap();
    let after_burst = server.fetches();
    assert!(
        (2..=most).contains(&after_burst),
        "{after_burst} fetches for six unknown-kid tokens in {:?}",
        burst.elapsed()
    );

    // Past max-age (3 s from the last fetch): fetched again before the next token, once.
    std::thread::sleep(Duration::from_millis(3_500));
    assert_eq!(deliver(&listening.url, &event(&ours, issuer, 2)), 200);
    assert_eq!(server.fetches(), after_burst + 1);
    assert_eq!(deliver(&listening.url, &event(&ours, issuer, 3)), 200);
    assert_eq!(server.fetches(), after_burst + 1);
}

#[test]
fn verify_uses_a_fetched_set_for_its_max_age() {
    let home = tempfile::tempdir().unwrap();
    let ours = P256Signer::from_secret_bytes("live-1", &[7; 32]).unwrap();
    let server = KeyServer::start(
        &JwkSet {
            keys: vec![ours.public_jwk()],
        },
        Some("max-age=20"),
    );
    let run = |args: &[&str]| run_in(home.path(), args, &[], None);
    let before = now_unix();
    run(&["jwks", "fetch", &server.url]).ok();
    assert_eq!(server.fetches(), 1);
    let cached: serde_json::Value = serde_json::from_slice(
        &std::fs::read(home.path().join("cache/mandate/jwks.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cached["cache_control"], "max-age=20", "{cached}");

    // The issuer is the set's URL without /.well-known/jwks.json.
    let issuer = server.url.trim_end_matches("/.well-known/jwks.json");
    let token = event(&ours, issuer, 1);
    let within = (before + 15).to_string();
    run(&["verify", &token, "--event", "--now", &within]).ok();
    // Twenty seconds, not the five minutes of a response without max-age.
    let past = (before + 60).to_string();
    run(&["verify", &token, "--event", "--now", &past])
        .code(2)
        .stderr_has("past the 20 s it may be kept");
    assert_eq!(server.fetches(), 1, "verify reads the cache, never the URL");
}

/// Each issuer's set has a cache of its own: fetching a second issuer's set leaves the
/// first one's, which `verify --issuer` uses; without `--issuer`, the last set fetched.
/// Both sets here have a key `live-1`, so a set taken for the other's fails the signature.
#[test]
fn jwks_fetch_keeps_a_set_per_issuer() {
    let home = tempfile::tempdir().unwrap();
    let first_key = P256Signer::from_secret_bytes("live-1", &[7; 32]).unwrap();
    let second_key = P256Signer::from_secret_bytes("live-1", &[9; 32]).unwrap();
    let publish = |signer: &P256Signer| {
        KeyServer::start(
            &JwkSet {
                keys: vec![signer.public_jwk()],
            },
            None,
        )
    };
    let (first, second) = (publish(&first_key), publish(&second_key));
    let issuer = |server: &KeyServer| {
        server
            .url
            .trim_end_matches("/.well-known/jwks.json")
            .to_owned()
    };
    let (first_issuer, second_issuer) = (issuer(&first), issuer(&second));
    let run = |args: &[&str]| run_in(home.path(), args, &[], None);
    run(&["jwks", "fetch", &first_issuer]).ok();
    run(&["jwks", "fetch", &second_issuer]).ok();

    let from_first = event(&first_key, &first_issuer, 1);
    let from_second = event(&second_key, &second_issuer, 2);
    run(&["verify", &from_first, "--event", "--issuer", &first_issuer])
        .ok()
        .stdout_has("valid event");
    run(&[
        "verify",
        &from_second,
        "--event",
        "--issuer",
        &second_issuer,
    ])
    .ok();
    // Without --issuer: the last set fetched, the second issuer's.
    run(&["verify", &from_second, "--event"]).ok();
    run(&["verify", &from_first, "--event"]).code(6);
    // An issuer never fetched: no set, and the command to get one.
    let third_issuer = "http://127.0.0.1:9";
    run(&["verify", &from_first, "--event", "--issuer", third_issuer])
        .code(2)
        .stderr_has("no key set cached for the issuer http://127.0.0.1:9")
        .stderr_has("mandate jwks fetch http://127.0.0.1:9");
    assert_eq!((first.fetches(), second.fetches()), (1, 1));
}
