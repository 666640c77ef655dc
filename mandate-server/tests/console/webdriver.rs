//! A small WebDriver client: headless Chromium through chromedriver, both started here on
//! a free loopback port with a fresh profile, driven with the W3C WebDriver commands the
//! tests need (JSON over HTTP, sent with reqwest).
//!
//! Written here rather than taken from a crate: the dozen commands below are all the tests
//! use, and fantoccini would add two dozen crates (a WebDriver protocol crate with ICU
//! segmentation data) to the lock file for them.
//!
//! When Chromium or chromedriver is missing, [`Browser::start`] says the browser tests were
//! skipped and how to run them, and the tests pass, unless `MANDATE_REQUIRE_BROWSER=1`
//! (set by `.ci/run`), where a missing browser fails them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// The W3C name of an element reference in JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The WebDriver code of a key.
pub const ENTER: &str = "\u{E007}";
/// The WebDriver code of Tab.
pub const TAB: &str = "\u{E004}";

/// How long a wait for the page lasts before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(15);

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Chromium's binary itself: Debian's `/usr/bin/chromium` is a shell wrapper around it.
fn chromium() -> Option<PathBuf> {
    if let Some(given) = std::env::var_os("MANDATE_CHROMIUM") {
        return Some(PathBuf::from(given));
    }
    let debian = Path::new("/usr/lib/chromium/chromium");
    if debian.is_file() {
        return Some(debian.to_path_buf());
    }
    on_path(&["chromium", "chromium-browser", "google-chrome"])
}

fn chromedriver() -> Option<PathBuf> {
    if let Some(given) = std::env::var_os("MANDATE_CHROMEDRIVER") {
        return Some(PathBuf::from(given));
    }
    on_path(&["chromedriver"])
}

/// Writes straight to stderr: the test harness captures `eprintln!` of passing tests, and
/// a skip must be seen.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A headless Chromium session.
pub struct Browser {
    driver: Child,
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
    port: u16,
    session_id: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a Chromium session of 1280x800, or `None` (after saying so)
    /// when the browser is not installed and not required.
    pub async fn start(test: &str) -> Option<Browser> {
        let required = std::env::var("MANDATE_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
        let (chromium, driver) = match (chromium(), chromedriver()) {
            (Some(c), Some(d)) => (c, d),
            (c, d) => {
                let missing = [
                    c.is_none().then_some("chromium"),
                    d.is_none().then_some("chromedriver"),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" and ");
                let how = "install Debian's packages (apt-get install chromium chromium-driver) \
                           or set MANDATE_CHROMIUM and MANDATE_CHROMEDRIVER";
                assert!(
                    !required,
                    "{test}: MANDATE_REQUIRE_BROWSER=1 but {missing} is not installed: {how}"
                );
                say(&format!(
                    "SKIPPED browser test {test}: {missing} not found. To run the review \
                     console's browser tests, {how}."
                ));
                return None;
            }
        };
        let port = free_port();
        let log = tempfile::NamedTempFile::new().unwrap();
        let driver = Command::new(&driver)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.path().display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", driver.display()));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            let ready = http.get(format!("{base}/status")).send().await;
            if let Ok(r) = ready
                && let Ok(body) = r.json::<Value>().await
                && body["value"]["ready"] == true
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not answer on port {port} within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--disable-extensions".to_owned(),
            "--window-size=1280,800".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            // An alert stays open, so that a test can see that none was opened.
            "unhandledPromptBehavior": "ignore",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let Some(id) = answer["value"]["sessionId"].as_str() else {
            panic!(
                "chromedriver could not start Chromium: {answer}\n{}",
                std::fs::read_to_string(log.path()).unwrap_or_default()
            );
        };
        Some(Browser {
            driver,
            http,
            session: format!("{base}/session/{id}"),
            port,
            session_id: id.to_owned(),
            _profile: profile,
        })
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.session);
        let mut request = self.http.request(method.clone(), &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        answer["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let value = self.command(reqwest::Method::POST, path, Some(body)).await;
        if let Some(error) = value.get("error") {
            panic!("WebDriver {path}: {error}: {}", value["message"]);
        }
        value
    }

    async fn get(&self, path: &str) -> Value {
        self.command(reqwest::Method::GET, path, None).await
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": args}))
            .await
    }

    /// The element matching `css` now, if any.
    pub async fn find(&self, css: &str) -> Option<String> {
        let value = self
            .command(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        value[ELEMENT].as_str().map(str::to_owned)
    }

    /// Waits (bounded) until `css` matches a displayed element, and returns it.
    pub async fn wait_for(&self, css: &str) -> String {
        let started = Instant::now();
        loop {
            if let Some(element) = self.find(css).await {
                let shown = self.get(&format!("/element/{element}/displayed")).await;
                if shown == true {
                    return element;
                }
            }
            if started.elapsed() > PATIENCE {
                panic!(
                    "no visible element {css} after {PATIENCE:?}; the page says: {}\nbrowser log: {}",
                    self.body_text().await,
                    self.log_text().await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (bounded) until the text of `css` contains `wanted`; returns the text.
    pub async fn wait_text(&self, css: &str, wanted: &str) -> String {
        let started = Instant::now();
        loop {
            if let Some(element) = self.find(css).await {
                let text = self.text_of(&element).await;
                if text.contains(wanted) {
                    return text;
                }
                if started.elapsed() > PATIENCE {
                    panic!(
                        "{css} says {text:?}, not {wanted:?}, after {PATIENCE:?}\nbrowser log: {}",
                        self.log_text().await
                    );
                }
            } else if started.elapsed() > PATIENCE {
                panic!(
                    "no element {css} after {PATIENCE:?}; the page says: {}\nbrowser log: {}",
                    self.body_text().await,
                    self.log_text().await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The visible text of an element.
    pub async fn text_of(&self, element: &str) -> String {
        self.get(&format!("/element/{element}/text"))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The text of the first element matching `css` (waited for).
    pub async fn text(&self, css: &str) -> String {
        let element = self.wait_for(css).await;
        self.text_of(&element).await
    }

    /// The page's visible text.
    pub async fn body_text(&self) -> String {
        self.js("return document.body.innerText;", vec![])
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Clicks the element matching `css` (waited for).
    pub async fn click(&self, css: &str) {
        let element = self.wait_for(css).await;
        self.post(&format!("/element/{element}/click"), json!({}))
            .await;
    }

    /// Types `text` into the element matching `css` (waited for), after clearing it.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.wait_for(css).await;
        self.post(&format!("/element/{element}/clear"), json!({}))
            .await;
        self.post(
            &format!("/element/{element}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    /// Sends keys to whatever has the focus, as a person at a keyboard would.
    pub async fn keys(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|c| {
                [
                    json!({"type": "keyDown", "value": c.to_string()}),
                    json!({"type": "keyUp", "value": c.to_string()}),
                ]
            })
            .collect();
        self.post(
            "/actions",
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]}),
        )
        .await;
    }

    /// The `id` of the focused element ("" if it has none).
    pub async fn focused_id(&self) -> String {
        self.js(
            "return document.activeElement ? document.activeElement.id : '';",
            vec![],
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// The text of an open alert, prompt or confirm, if one is open.
    pub async fn alert_text(&self) -> Option<String> {
        let value = self.get("/alert/text").await;
        value.as_str().map(str::to_owned)
    }

    /// Resizes the window so that the page's viewport is `width` x `height`.
    pub async fn viewport(&self, width: i64, height: i64) {
        let frame = self
            .js(
                "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight];",
                vec![],
            )
            .await;
        let (dw, dh) = (
            frame[0].as_i64().unwrap_or(0),
            frame[1].as_i64().unwrap_or(0),
        );
        self.post(
            "/window/rect",
            json!({"width": width + dw, "height": height + dh}),
        )
        .await;
    }

    /// Scrolls the element matching `css` into the middle of the viewport.
    pub async fn scroll_to(&self, css: &str) {
        self.wait_for(css).await;
        self.js(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
            vec![json!(css)],
        )
        .await;
    }

    /// A PNG of the viewport, saved as `<dir>/<name>.png` when MANDATE_CONSOLE_SCREENSHOTS
    /// names a directory.
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("MANDATE_CONSOLE_SCREENSHOTS") else {
            return;
        };
        let data = self.get("/screenshot").await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }

    /// The browser's console messages since the last call.
    pub async fn log(&self) -> Vec<Value> {
        let value = self
            .command(
                reqwest::Method::POST,
                "/se/log",
                Some(json!({"type": "browser"})),
            )
            .await;
        value.as_array().cloned().unwrap_or_default()
    }

    async fn log_text(&self) -> String {
        self.log()
            .await
            .iter()
            .map(|m| m["message"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Ends the session (Chromium quits) and chromedriver.
    pub async fn quit(mut self) {
        let _ = self
            .http
            .delete(&self.session)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        self.session_id.clear();
    }
}

impl Drop for Browser {
    /// After a failed test too: the session is ended (so that chromedriver ends Chromium)
    /// with a plain request, then chromedriver, the process this test started, is killed.
    fn drop(&mut self) {
        if !self.session_id.is_empty()
            && let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port))
        {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let request = format!(
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session_id, self.port
            );
            if stream.write_all(request.as_bytes()).is_ok() {
                let mut answer = Vec::new();
                let _ = std::io::Read::read_to_end(&mut stream, &mut answer);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
