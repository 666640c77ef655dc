//! The real `mandate-server` binary as a child process: started on a database, its API
//! address read from its output, killed with SIGKILL, its memory read from /proc.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_mandate-server")
}

/// A free port on 127.0.0.1 (so that the issuer stays the same across restarts), never
/// one handed out before in this test process: two tests given the same port would race
/// to bind it, and the loser's server would exit.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The variables a command on database `db` (what `--db` is given) needs besides it: a
/// key-encryption key for PostgreSQL.
pub fn db_env(db: &OsStr) -> Vec<(&'static str, &'static str)> {
    if db.to_string_lossy().starts_with("postgres") {
        vec![("MANDATE_KEY_ENCRYPTION_KEY", crate::helpers::TEST_KEK)]
    } else {
        Vec::new()
    }
}

/// Onboards `org` with the operator command on `db` (a file, or a `postgres://` URL);
/// returns its sandbox key.
pub fn onboard(db: impl AsRef<OsStr>, org: &str) -> String {
    let db = db.as_ref();
    let out = Command::new(binary())
        .args(["onboard", "--org", org, "--db"])
        .arg(db)
        .envs(db_env(db))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("sandbox key: "))
        .unwrap()
        .trim()
        .to_owned()
}

/// A running server process.
pub struct Server {
    pub child: Child,
    pub api: String,
    pub public: String,
    /// What it printed on stdout after its addresses.
    pub output: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `serve` on `db` with the public host on `public_port` and `extra` arguments;
    /// returns once it has printed its address.
    pub fn start(db: impl AsRef<OsStr>, public_port: u16, extra: &[&str]) -> Server {
        Self::start_logging(db, public_port, extra, None)
    }

    /// [`Server::start`], with its log (stderr) written to `log` at `level`.
    pub fn start_logging(
        db: impl AsRef<OsStr>,
        public_port: u16,
        extra: &[&str],
        log: Option<(&Path, &str)>,
    ) -> Server {
        let (stderr, level) = match log {
            Some((path, level)) => (Stdio::from(std::fs::File::create(path).unwrap()), level),
            None => (Stdio::null(), "off"),
        };
        Self::start_with_stderr(db, public_port, extra, stderr, level)
    }

    /// [`Server::start`], with stderr (its log) going to `stderr`, at `level`.
    pub fn start_with_stderr(
        db: impl AsRef<OsStr>,
        public_port: u16,
        extra: &[&str],
        stderr: Stdio,
        level: &str,
    ) -> Server {
        Self::start_with_env(db, public_port, extra, stderr, &[("RUST_LOG", level)])
    }

    /// [`Server::start`], with stderr going to `stderr` and the variables `env` set.
    pub fn start_with_env(
        db: impl AsRef<OsStr>,
        public_port: u16,
        extra: &[&str],
        stderr: Stdio,
        env: &[(&str, &str)],
    ) -> Server {
        let db = db.as_ref();
        let mut child = Command::new(binary())
            .args(["serve", "--api-addr", "127.0.0.1:0", "--public-addr"])
            .arg(format!("127.0.0.1:{public_port}"))
            .arg("--db")
            .arg(db)
            .args(extra)
            .envs(db_env(db))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut api = String::new();
        for line in lines.by_ref() {
            if let Some(url) = line.unwrap().trim().strip_prefix("api:") {
                api = url.trim().to_owned();
                break;
            }
        }
        if !api.starts_with("http://127.0.0.1:") {
            let _ = child.kill();
            let status = child.wait();
            panic!(
                "the server did not print its address: it ended with {status:?} (its log is \
                 its stderr, off unless the test asks for it)"
            );
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        let output = Arc::new(Mutex::new(Vec::new()));
        let kept = output.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Server {
            child,
            api,
            public: format!("http://127.0.0.1:{public_port}"),
            output,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9`, and reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Resident memory in KiB (VmRSS), and its high-water mark (VmHWM).
    pub fn memory_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small HTTP client for a server process.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub api: String,
}

/// A response read whole, or how the request failed.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub body: Value,
    pub text: String,
}

impl Client {
    pub fn new(api: &str) -> Client {
        Client {
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(20))
                .build()
                .unwrap(),
            api: api.to_owned(),
        }
    }

    /// Sends a request; `Err` when the connection failed or was cut.
    pub async fn send(
        &self,
        method: reqwest::Method,
        key: &str,
        path: &str,
        body: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<Answer, reqwest::Error> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.api))
            .header("authorization", format!("Bearer {key}"));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        if let Some(k) = idempotency_key {
            request = request.header("idempotency-key", k);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let replayed = response.headers().get("idempotency-replayed").is_some();
        let text = response.text().await?;
        Ok(Answer {
            status,
            replayed,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        })
    }

    pub async fn post(&self, key: &str, path: &str, body: &str) -> Answer {
        self.send(reqwest::Method::POST, key, path, Some(body), None)
            .await
            .unwrap()
    }

    pub async fn get(&self, key: &str, path: &str) -> Answer {
        self.send(reqwest::Method::GET, key, path, None, None)
            .await
            .unwrap()
    }

    /// Every object of a list, walking the cursor.
    pub async fn walk(&self, key: &str, path: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let sep = if path.contains('?') { '&' } else { '?' };
            let url = match &cursor {
                Some(c) => format!("{path}{sep}limit=100&cursor={c}"),
                None => format!("{path}{sep}limit=100"),
            };
            let page = self.get(key, &url).await;
            assert_eq!(page.status, 200, "{}", page.text);
            all.extend(page.body["data"].as_array().unwrap().iter().cloned());
            if page.body["has_more"] != true {
                return all;
            }
            cursor = Some(page.body["next_cursor"].as_str().unwrap().to_owned());
        }
    }
}

/// Asserts an error envelope with `status` and `code` whose request id is a `req_` id.
#[track_caller]
pub fn assert_envelope(answer: &Answer, status: u16, code: &str) -> String {
    assert_eq!(answer.status, status, "{}", answer.text);
    assert_eq!(answer.body["error"]["code"], code, "{}", answer.text);
    assert!(
        answer.body["error"]["request_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("req_")),
        "{}",
        answer.text
    );
    answer.body["error"]["message"].as_str().unwrap().to_owned()
}
