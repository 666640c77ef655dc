//! `mandate mcp --http`: streamable HTTP at `/mcp`, hardened for a listener that anything
//! on the machine (or a page in its browser) can reach.
//!
//! - `Host` and `Origin` are validated by the SDK: loopback hosts and origins (DNS
//!   rebinding, and pages of other sites), plus the origins given with `--allow-origin`.
//!   A request without `Origin` (not from a browser) passes.
//! - With `--http-token` (or `MANDATE_MCP_HTTP_TOKEN`) every request must carry
//!   `Authorization: Bearer <token>`; 401 otherwise.
//! - Connections are capped (`--max-connections`) and a request's head and body must
//!   arrive within `--read-timeout` seconds (`listener.rs`); a body is at most [`MAX_BODY`]
//!   bytes. Stateless calls (2026-07-28) travel on the same connections, within the same
//!   bounds.
//! - Sessions (protocol 2025-11-25; 2026-07-28 has none) are capped (`--max-sessions`:
//!   a new one past the cap is a 503 with `Retry-After`) and closed after
//!   `--session-idle` seconds without a request, so what sessions hold is bounded. The
//!   check of the cap and the session's creation are one step (one `initialize` at a
//!   time), so a burst of them cannot pass the cap.
//! - A body that is not JSON is a JSON-RPC parse error (-32700), one that is JSON but no
//!   JSON-RPC message an invalid request (-32600), each as a 400 with the error object.
//!   Every other refusal is a JSON-RPC error too: the SDK's plain-text ones (`400 Bad
//!   Request: Session ID is required`, `403 Forbidden: Origin header is not allowed`, ...)
//!   are rewritten as `-32000` (`-32001` for a session not found, `-32603` for its 500s),
//!   with what to do.
//! - `DELETE` of a session answers 204 once it is closed, 404 for a session it does not
//!   know (the SDK answers 202 to both).
//! - A `tools/call`'s `task` member (MCP 2025-11-25) is moved into its `_meta` before the
//!   SDK reads the body, and each session's transport carries 2025-11-25 tasks
//!   (`edges.rs`, `sessions.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use super::edges::lift_task_request;
use super::sessions::Sessions;
use super::tools::MandateTools;
use crate::error::CliError;
use crate::listener::{self, Bounds};

/// The largest request body read: a tool call is a few kilobytes (an x402 payload or an
/// AP2 mandate included), and every connection may hold this much while its body arrives.
pub const MAX_BODY: usize = 256 * 1024;
/// The session id header.
const SESSION: &str = "mcp-session-id";

/// How the HTTP transport is guarded.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Origins allowed besides loopback ones (`scheme://host[:port]`).
    pub origins: Vec<String>,
    /// The bearer token every request must carry, if any.
    pub token: Option<String>,
    /// Live sessions at most.
    pub max_sessions: usize,
    /// A session is closed after this long without a request.
    pub idle: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Time a request's head, and then its body, may take to arrive.
    pub read_timeout: Duration,
}

/// What the guard layer needs.
#[derive(Clone)]
struct Guard {
    token: Option<Arc<str>>,
    sessions: Arc<Sessions>,
    max_sessions: usize,
    /// Held while an `initialize` checks the cap and creates its session.
    creating: Arc<tokio::sync::Mutex<()>>,
    read_timeout: Duration,
}

/// Serves `tools` on `addr` until the process is stopped.
pub async fn serve(
    tools: MandateTools,
    addr: SocketAddr,
    options: HttpOptions,
) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::usage(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::usage(format!("cannot read the bound address: {e}")))?;
    if !bound.ip().is_loopback() && options.token.is_none() {
        eprintln!(
            "mandate mcp: warning: serving on {bound}, not loopback, without --http-token: anyone who reaches it acts as this agent"
        );
    }
    let bounds = Bounds {
        max_connections: options.max_connections,
        read_timeout: options.read_timeout,
    };
    let router = router(tools, bound, options);
    eprintln!("mandate mcp: listening on http://{bound}/mcp");
    listener::serve(listener, router, bounds).await;
    Ok(())
}

/// The `/mcp` route: the SDK's service behind the guard layer.
fn router(tools: MandateTools, bound: SocketAddr, options: HttpOptions) -> axum::Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_origins(allowed_origins(&options.origins))
        .enforce_origin_validation();
    if !bound.ip().is_loopback() {
        // The SDK accepts loopback Host headers only (DNS rebinding); the chosen address too.
        config.allowed_hosts.push(bound.ip().to_string());
        config.allowed_hosts.push(bound.to_string());
    }
    let mut sessions = Sessions::default();
    sessions.0.session_config.keep_alive = Some(options.idle);
    sessions.0.session_config.init_timeout = Some(options.idle.min(Duration::from_secs(30)));
    let sessions = Arc::new(sessions);
    let guard = Guard {
        token: options.token.map(Arc::from),
        sessions: sessions.clone(),
        max_sessions: options.max_sessions,
        creating: Arc::new(tokio::sync::Mutex::new(())),
        read_timeout: options.read_timeout,
    };
    let service = StreamableHttpService::new(move || Ok(tools.clone()), sessions, config);
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(guard, guarded))
}

/// Loopback origins on any port, over http and https, and the configured ones.
fn allowed_origins(configured: &[String]) -> Vec<String> {
    let mut origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|host| [format!("http://{host}:*"), format!("https://{host}:*")])
        .collect();
    origins.extend(configured.iter().cloned());
    origins
}

/// The guard in front of the SDK's service: token, body, session cap, `DELETE`, and every
/// refusal a JSON-RPC error.
async fn guarded(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    if let Some(token) = &guard.token
        && !bearer_matches(request.headers(), token)
    {
        return unauthorized();
    }
    let (answer, id) = match *request.method() {
        Method::POST => post(guard, request, next).await,
        Method::DELETE => (delete(guard, request, next).await, Value::Null),
        _ => (next.run(request).await, Value::Null),
    };
    as_jsonrpc(answer, id).await
}

/// Whether reading a body failed because it was longer than the limit, not because its
/// connection failed before its end.
fn over_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// A POST: its body read as JSON-RPC (within the read timeout), and a new session refused
/// past the cap; the answer, and the request's JSON-RPC id.
async fn post(guard: Guard, request: Request, next: Next) -> (Response, Value) {
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(guard.read_timeout, axum::body::to_bytes(body, MAX_BODY));
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) if over_limit(&e) => {
            let answer = jsonrpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                -32600,
                &format!("the request body is over {MAX_BODY} bytes"),
            );
            return (answer, Value::Null);
        }
        // Late, or cut off before its end (the listener closes a connection whose body
        // stops arriving): either way it did not arrive whole in time.
        Ok(Err(_)) | Err(_) => {
            let mut answer = jsonrpc_error(
                StatusCode::REQUEST_TIMEOUT,
                Value::Null,
                -32600,
                &format!(
                    "the request body did not arrive within {} s of its head: send it whole at once",
                    guard.read_timeout.as_secs()
                ),
            );
            // What is left of the body is not read: the connection cannot carry another
            // request.
            answer
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return (answer, Value::Null);
        }
    };
    let mut value: Value = match serde_json::from_slice(&bytes) {
        Ok(value) => value,
        Err(e) => {
            let answer = jsonrpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                &format!("parse error: the body is not JSON ({e})"),
            );
            return (answer, Value::Null);
        }
    };
    // A 2025-11-25 tools/call's `task`, which rmcp's types drop, moved into its _meta.
    let bytes = if lift_task_request(&mut value) {
        match serde_json::to_vec(&value) {
            Ok(lifted) => axum::body::Bytes::from(lifted),
            Err(_) => bytes,
        }
    } else {
        bytes
    };
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let message = match serde_json::from_value::<ClientJsonRpcMessage>(value) {
        Ok(message) => message,
        Err(e) => {
            let answer = jsonrpc_error(
                StatusCode::BAD_REQUEST,
                id.clone(),
                -32600,
                &format!("invalid request: not a JSON-RPC message this server takes ({e})"),
            );
            return (answer, id);
        }
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    if !opens_session(&message, request.headers()) {
        return (next.run(request).await, id);
    }
    // The cap's check and the session's creation in one step: one initialize at a time
    // (the SDK inserts the session before it answers), so a burst cannot pass the cap.
    let _creating = guard.creating.lock().await;
    if guard.at_cap().await {
        let mut answer = jsonrpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id.clone(),
            -32000,
            &format!(
                "too many sessions: {} are open; try again when one closes",
                guard.max_sessions
            ),
        );
        answer
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return (answer, id);
    }
    (next.run(request).await, id)
}

/// Whether `message` opens a session: an `initialize` without a session id.
fn opens_session(message: &ClientJsonRpcMessage, headers: &HeaderMap) -> bool {
    matches!(message, JsonRpcMessage::Request(r) if matches!(r.request, ClientRequest::InitializeRequest(_)))
        && !headers.contains_key(SESSION)
}

/// A `DELETE`: 404 for a session not known, 204 once closed.
async fn delete(guard: Guard, request: Request, next: Next) -> Response {
    let session = request
        .headers()
        .get(SESSION)
        .and_then(|v| v.to_str().ok())
        .map(|s| Arc::<str>::from(s.to_owned()));
    if let Some(session) = session
        && !guard.sessions.has_session(&session).await.unwrap_or(false)
    {
        // Written as the SDK writes it; `as_jsonrpc` makes it a JSON-RPC error.
        return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
    }
    let mut answer = next.run(request).await;
    if answer.status() == StatusCode::ACCEPTED {
        *answer.status_mut() = StatusCode::NO_CONTENT;
    }
    answer
}

impl Guard {
    /// Whether the live sessions reached the cap.
    async fn at_cap(&self) -> bool {
        self.sessions.0.sessions.read().await.len() >= self.max_sessions
    }
}

/// Whether the headers carry `Bearer <token>`, compared in constant time.
fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (given, token) = (given.trim().as_bytes(), token.as_bytes());
    given.len() == token.len()
        && given
            .iter()
            .zip(token)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

fn unauthorized() -> Response {
    let mut answer = jsonrpc_error(
        StatusCode::UNAUTHORIZED,
        Value::Null,
        -32001,
        "unauthorized: this server requires Authorization: Bearer <token> (the token mandate mcp was started with)",
    );
    answer
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    answer
}

/// An error answer the SDK wrote as plain text (`400 Bad Request: Session ID is
/// required`, `403 Forbidden: Origin header is not allowed`, `404 Not Found: Session not
/// found`, `405`, `406`, `415`, its 500s) as a JSON-RPC error naming the request's `id`,
/// its status and headers kept, with what to do; successes and JSON answers pass as they
/// are.
async fn as_jsonrpc(answer: Response, id: Value) -> Response {
    let status = answer.status();
    let json = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json || !(status.is_client_error() || status.is_server_error()) {
        return answer;
    }
    let (mut parts, body) = answer.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let code = match status {
        StatusCode::NOT_FOUND => -32001,
        s if s.is_server_error() => -32603,
        _ => -32000,
    };
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": explained(status, &text)}});
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body.to_string()))
}

/// The SDK's refusal `text` (of `status`), with what to do about it where it says nothing.
fn explained(status: StatusCode, text: &str) -> String {
    let text = if text.is_empty() {
        status.canonical_reason().unwrap_or("refused")
    } else {
        text
    };
    let hint = [
        (
            "Session ID is required",
            "a request of protocol 2025-11-25 belongs to a session: send the Mcp-Session-Id header that the answer to initialize carried (or initialize first); protocol 2026-07-28 has no sessions",
        ),
        (
            "Session not found",
            "the session is closed (idle longer than --session-idle, or deleted): initialize a new one",
        ),
        (
            "Origin header",
            "this server answers pages of loopback origins (http(s)://localhost, 127.0.0.1, [::1]) and of the origins mandate mcp was given with --allow-origin",
        ),
        (
            "Host header",
            "this server answers loopback Host names and the address it is bound to",
        ),
    ]
    .into_iter()
    .find(|(found, _)| text.contains(found));
    match hint {
        Some((_, hint)) => format!("{text}: {hint}"),
        None => text.to_owned(),
    }
}

/// A JSON-RPC error object as the body of an HTTP answer of `status`.
fn jsonrpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_token_must_match_exactly() {
        let mut headers = HeaderMap::new();
        assert!(!bearer_matches(&headers, "s3cret"));
        for (given, ok) in [
            ("Bearer s3cret", true),
            ("Bearer s3cre", false),
            ("Bearer s3cret2", false),
            ("Basic s3cret", false),
        ] {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_static(given));
            assert_eq!(bearer_matches(&headers, "s3cret"), ok, "{given}");
        }
    }

    /// The cap's check and the session's creation are one step: 50 initializes at once
    /// against a cap of 5, through a service that yields before it creates the session
    /// (as the SDK's may, on a busy runtime), open exactly 5 sessions; the others are the
    /// 503 of the cap. Checked apart from the creation, all 50 would pass the check.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cap_is_checked_and_the_session_made_in_one_step() {
        use tower::ServiceExt as _;
        let sessions = Arc::new(Sessions::default());
        let guard = Guard {
            token: None,
            sessions: sessions.clone(),
            max_sessions: 5,
            creating: Arc::new(tokio::sync::Mutex::new(())),
            read_timeout: Duration::from_secs(10),
        };
        let transports = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (creator, kept) = (sessions.clone(), transports.clone());
        let create = move || {
            let (sessions, kept) = (creator.clone(), kept.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let (id, transport) = sessions.create_session().await.unwrap();
                kept.lock().unwrap().push(transport);
                ([(SESSION, id.to_string())], "{}")
            }
        };
        let service = axum::Router::new()
            .route("/mcp", axum::routing::post(create))
            .layer(middleware::from_fn_with_state(guard, guarded));
        let initialize = || {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "burst", "version": "1"}}});
            Request::post("/mcp")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_string()))
                .unwrap()
        };
        let calls = (0..50).map(|_| service.clone().oneshot(initialize()));
        let answers = futures_util::future::join_all(calls).await;
        let count = |status: StatusCode| {
            answers
                .iter()
                .filter(|a| a.as_ref().unwrap().status() == status)
                .count()
        };
        assert_eq!(
            (
                count(StatusCode::OK),
                count(StatusCode::SERVICE_UNAVAILABLE)
            ),
            (5, 45)
        );
        assert_eq!(sessions.0.sessions.read().await.len(), 5);
    }

    #[test]
    fn loopback_origins_are_allowed_on_any_port_with_the_configured_ones() {
        let origins = allowed_origins(&["https://host.example.com".into()]);
        assert!(origins.contains(&"http://127.0.0.1:*".to_owned()));
        assert!(origins.contains(&"https://[::1]:*".to_owned()));
        assert_eq!(origins.last().unwrap(), "https://host.example.com");
    }
}
