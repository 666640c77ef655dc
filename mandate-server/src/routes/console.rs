//! The review console on the public host, under `/console/`: plain HTML, CSS and
//! JavaScript modules from `mandate-server/console/`, compiled into the binary (no build
//! step, nothing fetched at run time), and `config.json`, which tells the page where the
//! API host is.
//!
//! The page holds no secret of the server's: a person pastes an organization key, which
//! stays in the tab's `sessionStorage`, and the page calls the API host with it (which
//! allows the console's origin by CORS, `crate::http::cors`). Every answer carries a strict
//! Content-Security-Policy: scripts and styles only from this host, connections only to
//! this host (the JWK Set) and the API host, never framed.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::http::error::envelope;
use crate::http::extract::Path;
use crate::state::AppState;

/// The console's files: name, content type, content.
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../console/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../console/style.css"),
    ),
    ("app.js", JS, include_str!("../../console/app.js")),
    ("api.js", JS, include_str!("../../console/api.js")),
    ("dom.js", JS, include_str!("../../console/dom.js")),
    ("reviews.js", JS, include_str!("../../console/reviews.js")),
    (
        "decisions.js",
        JS,
        include_str!("../../console/decisions.js"),
    ),
    ("verify.js", JS, include_str!("../../console/verify.js")),
    (
        "directory.js",
        JS,
        include_str!("../../console/directory.js"),
    ),
    (
        "enforcement.js",
        JS,
        include_str!("../../console/enforcement.js"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";

/// The routes of the console.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(index))
        .route("/console/config.json", get(config))
        .route("/console/{file}", get(file))
}

async fn index(State(state): State<AppState>) -> Response {
    serve(&state, "index.html")
}

async fn file(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    serve(&state, &name)
}

/// One of [`FILES`], or the 404 envelope.
fn serve(state: &AppState, name: &str) -> Response {
    match FILES.iter().find(|(file, _, _)| *file == name) {
        Some((_, kind, body)) => guarded(state, kind, *body),
        None => {
            let message = format!("the console has no file {name:?}; open /console/");
            with_headers(
                state,
                envelope(StatusCode::NOT_FOUND, "not_found", &message),
            )
        }
    }
}

/// What the page needs to know and cannot be told by a person: the API host, the issuer
/// its tokens must name, where the JWK Set is, and the origins the API host allows.
async fn config(State(state): State<AppState>) -> Response {
    let body = serde_json::json!({
        "api_url": state.api_url,
        "issuer": state.verdicts_url,
        "jwks_url": "/.well-known/jwks.json",
        "origins": state.cors.origins().collect::<Vec<_>>(),
    });
    guarded(&state, "application/json", body.to_string())
}

/// A console answer: its content with the console's headers.
fn guarded(state: &AppState, kind: &'static str, body: impl IntoResponse) -> Response {
    let response = ([(header::CONTENT_TYPE, kind)], body).into_response();
    with_headers(state, response)
}

/// The policy every console answer carries.
pub fn content_security_policy(api_url: &str) -> String {
    let api = url::Url::parse(api_url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default();
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self' {api}; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
}

fn with_headers(state: &AppState, mut response: Response) -> Response {
    let headers = response.headers_mut();
    if let Ok(csp) = HeaderValue::from_str(&content_security_policy(&state.api_url)) {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-cache"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
