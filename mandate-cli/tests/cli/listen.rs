//! `listen`: the local webhook receiver, fed by the real server's delivery worker and by
//! requests posted directly. Every wait is bounded.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Env, closed_port_url, command_in, start};

/// How long anything in these tests may take: deliveries arrive within a second or so.
const WAIT: Duration = Duration::from_secs(20);

/// A running `mandate listen`.
struct Listener {
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// The thread that reads stderr: it ends at the pipe's end, once the listener exited.
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    /// The printed address, `http://127.0.0.1:PORT/`.
    url: String,
}

impl Listener {
    /// Starts `mandate listen --port 0 ARGS` and reads the bound address.
    fn start(env: &Env, args: &[&str]) -> Self {
        let mut all = vec!["listen", "--port", "0"];
        all.extend_from_slice(args);
        let mut child = command_in(env.home.path(), &all, &[])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (send, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let mut pipe = child.stderr.take().unwrap();
        let stderr_reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let mut listener = Self {
            child,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
            url: String::new(),
        };
        let first = listener.line();
        listener.url = if let Ok(value) = serde_json::from_str::<Value>(&first) {
            value["listening"].as_str().unwrap().to_owned()
        } else {
            first
                .strip_prefix("listening on ")
                .unwrap_or_else(|| panic!("not the address: {first}"))
                .to_owned()
        };
        assert!(
            listener.url.starts_with("http://127.0.0.1:"),
            "{}",
            listener.url
        );
        listener
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next line of stdout, within [`WAIT`].
    #[track_caller]
    fn line(&self) -> String {
        self.lines.recv_timeout(WAIT).unwrap_or_else(|e| {
            panic!(
                "no line from the listener ({e}); stderr:\n{}",
                self.stderr()
            )
        })
    }

    /// The next line as JSON.
    #[track_caller]
    fn json_line(&self) -> Value {
        let line = self.line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Waits for the exit, within [`WAIT`]; the exit code. Once it returns, [`Self::stderr`]
    /// holds all the listener wrote: the reader has read to the pipe's end.
    #[track_caller]
    fn exit_code(&mut self) -> i32 {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The exit closed the pipe's only writer, so the reader ends: without the
                // join, the last lines (the summary) could still be in the pipe.
                if let Some(reader) = self.stderr_reader.take() {
                    reader.join().unwrap();
                }
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "the listener did not exit; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn jwks_url(env: &Env) -> String {
    format!("{}/.well-known/jwks.json", env.public)
}

/// Registers a sandbox webhook for pings at `url` and pings it; the event id.
fn register_and_ping(env: &Env, url: &str) -> String {
    let created = env.org(&[
        "webhooks", "create", "--url", url, "--event", "ping", "--json",
    ]);
    created.ok();
    let id = created.json()["webhook"].as_str().unwrap().to_owned();
    let ping = env.org(&["webhooks", "ping", &id, "--json"]);
    ping.ok();
    ping.json()["event"].as_str().unwrap().to_owned()
}

/// POSTs `body` to `url`; the status and the answer's body.
fn post(url: &str, content_type: &str, body: &str) -> (u16, String) {
    let client = reqwest::blocking::Client::builder()
        .timeout(WAIT)
        .build()
        .unwrap();
    let response = client
        .post(url)
        .header("Content-Type", content_type)
        .body(body.to_owned())
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().unwrap())
}

#[test]
fn listen_verifies_a_delivered_ping_and_exits_after_max_events() {
    let env = start();
    let jwks = jwks_url(&env);
    let mut listener = Listener::start(
        &env,
        &[
            "--max-events",
            "1",
            "--jwks-url",
            &jwks,
            "--issuer",
            &env.issuer,
        ],
    );
    let event = register_and_ping(&env, &listener.url);

    let line = listener.line();
    assert!(
        line.contains(&format!("  {event}  ping  verified")),
        "{line}"
    );
    assert_eq!(listener.exit_code(), 0, "stderr:\n{}", listener.stderr());
    let stderr = listener.stderr();
    assert!(
        stderr.contains("stopped: 1 verified, 0 duplicate, 0 rejected"),
        "{stderr}"
    );
    // The key set and issuer came from the URL.
    assert!(
        stderr.contains(&format!("verifying events from {}", env.issuer)),
        "{stderr}"
    );
}

#[test]
fn listen_rejects_forged_events_with_400_and_drops_repeats() {
    let env = start();
    // The issuer is derived from the JWK Set URL (here the verdicts URL itself).
    let mut listener = Listener::start(
        &env,
        &["--max-events", "4", "--jwks-url", &env.public, "--json"],
    );
    let token = env.sign_event("ping", time::OffsetDateTime::now_utc().unix_timestamp());

    // A GET is not an event: 405, not counted.
    let got = reqwest::blocking::get(&listener.url).unwrap();
    assert_eq!(got.status().as_u16(), 405);

    let (status, body) = post(&listener.url, "application/jwt", &token);
    assert_eq!((status, body.as_str()), (200, "verified\n"));
    let first = listener.json_line();
    assert_eq!(first["result"], "verified");
    assert_eq!(first["status"], 200);
    assert_eq!(first["claims"]["type"], "ping");
    assert_eq!(first["claims"]["iss"], env.issuer.as_str());
    let jti = first["claims"]["jti"].as_str().unwrap().to_owned();

    // The same event again (a retry): acknowledged, marked duplicate.
    let (status, body) = post(&listener.url, "application/jwt", &token);
    assert_eq!((status, body.as_str()), (200, "duplicate\n"));
    let repeat = listener.json_line();
    assert_eq!(repeat["result"], "duplicate");
    assert_eq!(repeat["claims"]["jti"], jti.as_str());

    // Tampered: the claims of another event under this one's signature.
    let other = env.sign_event(
        "mandate.revoked",
        time::OffsetDateTime::now_utc().unix_timestamp(),
    );
    let a: Vec<&str> = token.split('.').collect();
    let b: Vec<&str> = other.split('.').collect();
    let forged = format!("{}.{}.{}", a[0], b[1], a[2]);
    let (status, body) = post(&listener.url, "application/jwt", &forged);
    assert_eq!(status, 400);
    assert_eq!(body, "rejected: signature does not verify\n");
    let rejected = listener.json_line();
    assert_eq!(rejected["result"], "rejected");
    assert_eq!(rejected["status"], 400);
    assert_eq!(rejected["reason"], "signature does not verify");
    assert!(rejected.get("claims").is_none());

    // Not a JWT at all.
    let (status, _) = post(&listener.url, "application/json", "{}");
    assert_eq!(status, 415);
    assert_eq!(listener.json_line()["result"], "rejected");

    assert_eq!(listener.exit_code(), 0, "stderr:\n{}", listener.stderr());
    assert!(
        listener
            .stderr()
            .contains("stopped: 1 verified, 1 duplicate, 2 rejected")
    );
}

#[test]
fn listen_forwards_to_a_second_listener_and_answers_with_its_status() {
    let env = start();
    let jwks = env.write(
        "jwks.json",
        &env.offline(&["jwks", "fetch", &env.public, "--json"])
            .stdout,
    );
    // The consumer being developed: here, a second listener verifying from a file.
    let mut consumer = Listener::start(
        &env,
        &[
            "--max-events",
            "1",
            "--jwks",
            &jwks,
            "--issuer",
            &env.issuer,
        ],
    );
    let mut front = Listener::start(
        &env,
        &[
            "--max-events",
            "1",
            "--jwks-url",
            &env.public,
            "--forward-to",
            &consumer.url,
        ],
    );
    let event = register_and_ping(&env, &front.url);

    let line = front.line();
    assert!(
        line.contains(&format!("  {event}  ping  verified  forwarded: 200")),
        "{line}"
    );
    let line = consumer.line();
    assert!(
        line.contains(&format!("  {event}  ping  verified")),
        "{line}"
    );
    assert!(!line.contains("forwarded"), "{line}");
    assert_eq!(front.exit_code(), 0, "stderr:\n{}", front.stderr());
    assert_eq!(consumer.exit_code(), 0, "stderr:\n{}", consumer.stderr());

    // A consumer that cannot be reached: 502, and the event is not acknowledged, so the
    // sender's retry is processed (and forwarded) again rather than dropped as a repeat.
    let dead = closed_port_url();
    let mut front = Listener::start(
        &env,
        &[
            "--max-events",
            "2",
            "--jwks-url",
            &env.public,
            "--forward-to",
            &dead,
            "--retries",
            "0",
        ],
    );
    let token = env.sign_event("ping", time::OffsetDateTime::now_utc().unix_timestamp());
    for _ in 0..2 {
        let (status, _) = post(&front.url, "application/jwt", &token);
        assert_eq!(status, 502);
        let line = front.line();
        assert!(line.contains("ping  verified  forward failed: "), "{line}");
    }
    assert_eq!(front.exit_code(), 0);
}

#[cfg(unix)]
#[test]
fn listen_stops_cleanly_on_ctrl_c_and_refuses_bad_setups() {
    let env = start();
    let mut listener = Listener::start(&env, &["--jwks-url", &env.public]);
    let killed = std::process::Command::new("kill")
        .args(["-INT", &listener.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(listener.exit_code(), 0, "stderr:\n{}", listener.stderr());
    assert!(listener.stderr().contains("stopped: 0 verified"));

    // No key set, a file without its issuer, both sources: usage errors.
    env.offline(&["listen", "--port", "0"])
        .code(2)
        .stderr_has("--jwks-url");
    env.offline(&["listen", "--port", "0", "--jwks", "keys.json"])
        .code(2)
        .stderr_has("--issuer");
    // A key set that cannot be fetched: a network error before anything listens.
    env.offline(&[
        "--retries",
        "0",
        "listen",
        "--port",
        "0",
        "--jwks-url",
        &closed_port_url(),
    ])
    .code(3)
    .stderr_has("cannot reach");
    // A port already taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    env.offline(&["listen", "--port", &port, "--jwks-url", &env.public])
        .code(2)
        .stderr_has("cannot listen on 127.0.0.1:");
    // Forwarding in plain http to another machine is refused.
    env.offline(&[
        "listen",
        "--port",
        "0",
        "--jwks-url",
        &env.public,
        "--forward-to",
        "http://consumer.example.com/",
    ])
    .code(2)
    .stderr_has("refusing plain http");
}

#[test]
fn listen_rejects_an_event_past_its_exp() {
    let env = start();
    let mut listener = Listener::start(
        &env,
        &["--max-events", "2", "--jwks-url", &env.public, "--json"],
    );
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // Signed 400 s ago: expired 100 s ago, beyond the minute of skew.
    let stale = env.sign_event("ping", now - 400);
    let (status, body) = post(&listener.url, "application/jwt", &stale);
    assert_eq!(status, 400);
    // The expiry is said as a UTC time, not as seconds since the epoch.
    let expired_at = time::OffsetDateTime::from_unix_timestamp(now - 100).unwrap();
    assert_eq!(
        body,
        format!(
            "rejected: token expired at {}\n",
            mandate_protocol::timefmt::format(expired_at)
        )
    );
    let rejected = listener.json_line();
    assert_eq!(rejected["result"], "rejected");
    assert!(rejected.get("claims").is_none());
    // Signed a minute ago, it is still valid.
    let fresh = env.sign_event("ping", now - 60);
    let (status, _) = post(&listener.url, "application/jwt", &fresh);
    assert_eq!(status, 200);
    let verified = listener.json_line();
    assert_eq!(verified["claims"]["exp"], now + 240);
    assert_eq!(listener.exit_code(), 0, "stderr:\n{}", listener.stderr());
}

#[test]
fn listen_prints_events_in_the_order_they_were_made() {
    let env = start();
    let jwks = jwks_url(&env);
    let mut listener = Listener::start(
        &env,
        &[
            "--max-events",
            "2",
            "--jwks-url",
            &jwks,
            "--issuer",
            &env.issuer,
        ],
    );
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // The resolution, made later, arrives before the review it resolves (deliveries are
    // concurrent): the review is printed first.
    let resolved = env.sign_event_as("decision.resolved", now, [2; 16]);
    let pending = env.sign_event_as("decision.review_pending", now, [1; 16]);
    assert_eq!(post(&listener.url, "application/jwt", &resolved).0, 200);
    assert_eq!(post(&listener.url, "application/jwt", &pending).0, 200);
    let first = listener.line();
    let second = listener.line();
    assert!(
        first.contains("decision.review_pending  verified"),
        "{first}"
    );
    assert!(second.contains("decision.resolved  verified"), "{second}");
    assert_eq!(listener.exit_code(), 0, "stderr:\n{}", listener.stderr());
}
