//! Starting and stopping: graceful shutdown lets in-flight requests finish, SIGTERM stops
//! the binary cleanly, and `serve --demo` gives a new user a working session.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{TestDatabase, spawn_app};
use crate::process::{Server, binary, free_port};

#[mandate_test_macros::on_each_engine]
async fn graceful_shutdown_finishes_the_request_in_flight() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "inflight").await;
    // Hold the agent's lock so that its next request stays in flight.
    let guard = app.hold_agent_lock("inflight").await;
    let in_flight = tokio::spawn({
        let (api, key) = (app.api.clone(), agent.clone());
        async move {
            reqwest::Client::new()
                .post(format!("{api}/v1/authorizations"))
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(r#"{"amount": 1, "currency": "USD", "recipient": "vendor:a", "category": "software"}"#)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!in_flight.is_finished());

    let running = app.running.take().unwrap();
    let stopping = tokio::spawn(running.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The server does not stop under the request, and takes no new connection.
    assert!(
        !stopping.is_finished(),
        "shutdown must wait for the request in flight"
    );
    let fresh = reqwest::Client::new()
        .get(format!("{}/v1/agents", app.api))
        .send()
        .await;
    assert!(
        fresh.is_err(),
        "a stopping server must not accept new connections"
    );

    drop(guard);
    let body = tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body["verdict"], "allow");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // What it answered was committed.
    let stored: i64 = app.db.query_i64(
        "SELECT COUNT(*) FROM decisions WHERE id = $1",
        &[body["id"].as_str().unwrap()],
    );
    assert_eq!(stored, 1);
}

#[mandate_test_macros::on_each_engine]
async fn sigterm_stops_the_binary_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "term.db").await;
    let server = Server::start(db.arg(), free_port(), &[]);
    let anonymous = reqwest::get(format!("{}/v1/agents", server.api))
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let status = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut server = server;
    let mut exited = None;
    for _ in 0..200 {
        if let Some(code) = server.child.try_wait().unwrap() {
            exited = Some(code);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let code = exited.expect("the server did not stop within 10 s of SIGTERM");
    assert!(code.success(), "exit status {code:?}");
}

/// A `serve --demo` process on `db`, in `dir`, and what it printed up to the end of its
/// session (stdout) and on stderr until then.
struct Demo {
    child: std::process::Child,
    printed: Vec<String>,
}

impl Demo {
    fn start(dir: &std::path::Path, db: &TestDatabase) -> Demo {
        let mut child = Command::new(binary())
            .args([
                "serve",
                "--demo",
                "--api-addr",
                "127.0.0.1:0",
                "--public-addr",
                "127.0.0.1:0",
                "--db",
            ])
            .arg(db.arg())
            .envs(db.env())
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Signing keys are unencrypted on SQLite only (PostgreSQL requires a
        // key-encryption key): only there does advice follow the session.
        let advised = db.location().sqlite_path().is_some();
        let mut printed = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let end = line.starts_with("Advice:")
                || (!advised && line.contains("mandate authorize"))
                || line.contains("mandate agents create NAME");
            printed.push(line);
            if end {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Demo { child, printed }
    }

    /// The value printed after `prefix` on a line of its own.
    fn value(&self, prefix: &str) -> String {
        self.printed
            .iter()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {:#?}", self.printed))
            .trim()
            .to_owned()
    }

    /// Stops it and returns what it wrote on stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let mut said = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut said);
        }
        let _ = self.child.wait();
        said
    }
}

/// A test that fails before `stop` leaves no server running.
impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[mandate_test_macros::on_each_engine]
async fn demo_mode_prints_a_session_that_shows_allow_review_and_a_denial() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "demo.db").await;
    let demo = Demo::start(dir.path(), &db);
    let api = demo.value("api:");
    let public = demo.value("public:");
    let console = demo
        .value("review console:")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    // The session sets what the mandate CLI reads: MANDATE_BASE_URL and MANDATE_API_KEY.
    assert_eq!(demo.value("export MANDATE_BASE_URL="), format!("{api}/v1"));
    let org = demo.value("export MANDATE_API_KEY=");
    let agent = demo.value("export AGENT_KEY=");
    assert!(
        org.starts_with("sk_sandbox_") && agent.starts_with("ak_sandbox_"),
        "{org} {agent}"
    );
    let client = reqwest::Client::new();
    let mut verdicts = Vec::new();
    for body in [
        r#"{"amount": 49.99, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#,
        r#"{"amount": 350, "currency": "USD", "recipient": "vendor:airline", "category": "travel"}"#,
        r#"{"amount": 12, "currency": "USD", "recipient": "vendor:deli", "category": "food"}"#,
    ] {
        let r: Value = client
            .post(format!("{api}/v1/authorizations"))
            .header("authorization", format!("Bearer {agent}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        verdicts.push(r["verdict"].as_str().unwrap().to_owned());
    }
    assert_eq!(verdicts, ["allow", "review", "deny_category"]);
    let decisions: Value = client
        .get(format!("{api}/v1/decisions"))
        .header("authorization", format!("Bearer {org}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(decisions["data"].as_array().unwrap().len(), 3);
    // The review console is printed next to the keys, on the public host.
    assert_eq!(console, format!("{public}/console/"));
    let page = client.get(&console).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("app.js"));
    // Unencrypted signing keys are mentioned once, after the session, as advice: not as a
    // warning before it.
    if db.location().sqlite_path().is_some() {
        let advice = demo.printed.last().unwrap().clone();
        assert!(
            advice.starts_with("Advice: signing keys are stored unencrypted"),
            "{advice}"
        );
        // It names who can read them (the file's mode, owner-only as created) and the fix.
        assert!(
            advice.contains("demo.db, mode 0600: readable by its owner only")
                && advice.contains("MANDATE_KEY_ENCRYPTION_KEY"),
            "{advice}"
        );
    }
    let said = demo.stop();
    assert!(!said.contains("unencrypted"), "{said}");
}

/// The id of the demo's mandate as the session prints it (`mandate mnd_…: …` or
/// `mandate mnd_…, reused …`).
fn printed_mandate(demo: &Demo) -> String {
    let line = demo.value("mandate mnd_");
    let rest = line.split([',', ':']).next().unwrap();
    format!("mnd_{rest}")
}

/// `agt_shopper`'s mandates, newest first, as `(id, status)`.
async fn shopper_mandates(api: &str, org: &str) -> Vec<(String, String)> {
    let page: Value = reqwest::Client::new()
        .get(format!("{api}/v1/mandates?agent=agt_shopper"))
        .header("authorization", format!("Bearer {org}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let field = |name: &str| m[name].as_str().unwrap().to_owned();
            (field("id"), field("status"))
        })
        .collect()
}

async fn post(api: &str, key: &str, path: &str, body: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{api}{path}"))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

#[mandate_test_macros::on_each_engine]
async fn demo_mode_run_again_reuses_the_demo_organization_agent_and_mandate() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "demo.db").await;
    let first = Demo::start(dir.path(), &db);
    let org = first.value("export MANDATE_API_KEY=");
    let agent = first.value("export AGENT_KEY=");
    let mandate = printed_mandate(&first);
    let spend = r#"{"amount": 49.99, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#;
    let r = post(&first.value("api:"), &agent, "/v1/authorizations", spend).await;
    assert_eq!(r.status(), 201);
    first.stop();
    // The session is in a file beside the database, readable by its owner only.
    let file = dir.path().join("mandate-demo.env");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(&format!("export MANDATE_API_KEY={org}\n")),
        "{text}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // Again on the same database: the same organization, keys and mandate (with what it
    // spent), and the session says so.
    let second = Demo::start(dir.path(), &db);
    let said = second.printed.join("\n");
    assert!(
        said.contains("from an earlier run in this database, reused with its agent agt_shopper"),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "mandate {mandate}, reused (49.99 USD spent this month)"
        )),
        "{said}"
    );
    assert_eq!(second.value("export MANDATE_API_KEY="), org);
    assert_eq!(second.value("export AGENT_KEY="), agent);
    let api = second.value("api:");
    assert_eq!(
        shopper_mandates(&api, &org).await,
        [(mandate.clone(), "active".to_owned())],
        "the demo's mandate was written again"
    );
    // Revoked, it cannot serve the session: the next run writes the demo's again, saying why.
    let r = post(&api, &org, &format!("/v1/mandates/{mandate}/revoke"), "").await;
    assert_eq!(r.status(), 200);
    second.stop();
    let third = Demo::start(dir.path(), &db);
    let fresh = printed_mandate(&third);
    let said = third.printed.join("\n");
    assert!(
        said.contains(&format!(
            "mandate {fresh}, made again because its mandate {mandate} is revoked"
        )),
        "{said}"
    );
    let r = post(&third.value("api:"), &agent, "/v1/authorizations", spend).await;
    assert_eq!(r.status(), 201);
    third.stop();
    assert_eq!(
        db.query_i64("SELECT COUNT(*) FROM orgs", &[]),
        1,
        "a second demo organization was made"
    );

    // Without the file, the keys cannot be shown again: it says so and how to get new ones.
    std::fs::remove_file(&file).unwrap();
    let fourth = Demo::start(dir.path(), &db);
    let said = fourth.printed.join("\n");
    assert!(said.contains("stored only as SHA-256 hashes"), "{said}");
    assert!(
        said.contains("mandate-server issue-key --org demo --env sandbox"),
        "{said}"
    );
    assert!(!said.contains(&org), "{said}");
    fourth.stop();
    assert_eq!(db.query_i64("SELECT COUNT(*) FROM orgs", &[]), 1);
}

/// A mandate changed from the demo's terms (a new one for the agent) is replaced by the
/// demo's on the next run, which says so; an unchanged one stays.
#[mandate_test_macros::on_each_engine]
async fn demo_mode_writes_its_mandate_again_only_when_it_was_changed() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "demo.db").await;
    let first = Demo::start(dir.path(), &db);
    let org = first.value("export MANDATE_API_KEY=");
    let api = first.value("api:");
    let changed = r#"{"agent": "agt_shopper", "principal": "role:finance",
        "limits": {"per_transaction": 50, "per_month": 2000, "currency": "USD"},
        "categories": ["software", "travel"], "review_above": 200, "expires": "2099-12-31"}"#;
    let r = post(&api, &org, "/v1/mandates", changed).await;
    assert_eq!(r.status(), 201);
    let theirs = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    first.stop();
    let second = Demo::start(dir.path(), &db);
    let fresh = printed_mandate(&second);
    let said = second.printed.join("\n");
    assert!(
        said.contains(&format!(
            "made again because its mandate {theirs} was changed from the demo's terms"
        )),
        "{said}"
    );
    let api = second.value("api:");
    assert_eq!(
        shopper_mandates(&api, &org).await[0],
        (fresh, "active".into())
    );
    second.stop();
}

#[test]
fn the_server_help_names_both_engines() {
    let out = Command::new(binary()).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("on SQLite or PostgreSQL"), "{help}");
    assert!(!help.contains("over SQLite"), "{help}");
}
