//! The new build's real `mandate-server` binary on the converted database: `migrate`, then
//! `serve` on ports of its own, called over HTTP as a client would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The binary under test.
fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_mandate-server")
}

/// Runs `mandate-server migrate --db url` with the fixture's key-encryption key; panics
/// with its output when it fails.
pub fn migrate(url: &str, kek: &str) {
    let out = Command::new(binary())
        .args(["migrate", "--db", url])
        .env("MANDATE_KEY_ENCRYPTION_KEY", kek)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("mandate-server runs");
    assert!(
        out.status.success(),
        "mandate-server migrate failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `serve`, stopped (killed and reaped) when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT` of its API host.
    pub api: String,
    /// `http://127.0.0.1:PORT` of its public host.
    pub public: String,
    log: tempfile::NamedTempFile,
    http: reqwest::Client,
}

/// A response, read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub replayed: bool,
    pub text: String,
    pub body: Value,
}

impl Server {
    /// Starts `serve --no-migrate` on `url` (the schema must be this build's already:
    /// `migrate` did it all), both listeners on ports of their own; returns once it printed
    /// its addresses, or panics with its log.
    pub fn start(url: &str, kek: &str) -> Server {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(binary())
            .args(["serve", "--no-migrate", "--db", url])
            .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
            .env("MANDATE_KEY_ENCRYPTION_KEY", kek)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log.reopen().unwrap()))
            .spawn()
            .expect("mandate-server serve starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut api, mut public) = (String::new(), String::new());
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(url) = line.trim().strip_prefix("api:") {
                api = url.trim().to_owned();
            } else if let Some(url) = line.trim().strip_prefix("public:") {
                public = url.trim().to_owned();
                break;
            }
        }
        // Drained so that the server never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        let mut server = Server {
            child,
            api,
            public,
            log,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        };
        if server.api.is_empty() || server.public.is_empty() {
            server.stop();
            panic!("serve did not start: {}", server.log());
        }
        server
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `method path` on the API host with `key`, the body sent as given.
    pub async fn call(
        &self,
        method: reqwest::Method,
        key: &str,
        path: &str,
        body: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Resp {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.api))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        if let Some(k) = idempotency_key {
            request = request.header("idempotency-key", k);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}; server log:\n{}", self.log()));
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotency-replayed")
            .is_some_and(|v| v == "true");
        let text = response.text().await.unwrap();
        Resp {
            status,
            replayed,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    }

    pub async fn get(&self, key: &str, path: &str) -> Resp {
        self.call(reqwest::Method::GET, key, path, None, None).await
    }

    pub async fn post(&self, key: &str, path: &str, body: &str) -> Resp {
        self.call(reqwest::Method::POST, key, path, Some(body), None)
            .await
    }

    /// Every object of a list, walking its cursor.
    pub async fn walk(&self, key: &str, path: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        let sep = if path.contains('?') { '&' } else { '?' };
        loop {
            let url = match &cursor {
                Some(c) => format!("{path}{sep}limit=100&cursor={c}"),
                None => format!("{path}{sep}limit=100"),
            };
            let page = self.get(key, &url).await;
            assert_eq!(page.status, 200, "GET {url}: {}", page.text);
            all.extend(page.body["data"].as_array().unwrap().iter().cloned());
            if page.body["has_more"] != true {
                return all;
            }
            cursor = Some(page.body["next_cursor"].as_str().unwrap().to_owned());
        }
    }

    /// The JWK Set the public host publishes.
    pub async fn jwks(&self) -> Value {
        let url = format!("{}/.well-known/jwks.json", self.public);
        let r = self.http.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "GET {url}");
        r.json().await.unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
