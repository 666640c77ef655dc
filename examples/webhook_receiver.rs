//! A webhook receiver for Mandate events that verifies each one with `mandate-core`.
//!
//! ```text
//! cargo run -p mandate-server --example webhook_receiver -- \
//!     --listen 127.0.0.1:9000 --verdicts-url http://127.0.0.1:8081
//! ```
//!
//! Then register `http://127.0.0.1:9000/` as a sandbox webhook (live webhooks need a public
//! `https://` URL) and ping it:
//!
//! ```text
//! curl -s -X POST $API/v1/webhooks -H "Authorization: Bearer $SK_SANDBOX" \
//!      -H 'Content-Type: application/json' \
//!      -d '{"url": "http://127.0.0.1:9000/", "events": ["ping", "mandate.revoked"]}'
//! curl -s -X POST $API/v1/webhooks/whk_…/ping -H "Authorization: Bearer $SK_SANDBOX"
//! ```
//!
//! Each request body is a compact JWT. The receiver checks it exactly as a verdict is
//! checked (signature against the JWK Set, `ES256` only, the key by `kid`, `iss`), then
//! drops any `jti` it has already processed: a retry carries the same `jti`. It answers
//! 2xx only once the event is handled; anything else makes Mandate retry.

use std::collections::HashSet;
use std::error::Error;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use clap::Parser;
use mandate_core::{EventClaims, JwkSet, TokenError, VerifyOptions, verify_event};
use time::OffsetDateTime;

/// Receive, verify and print Mandate webhook events.
#[derive(Parser)]
struct Args {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: String,
    /// The service's verdicts URL: the expected `iss`, and where the JWK Set is published.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    verdicts_url: String,
}

struct Receiver {
    verdicts_url: String,
    http: reqwest::Client,
    /// The cached key set; fetched again when a token names a kid it doesn't have.
    jwks: Mutex<JwkSet>,
    /// Event ids already handled. A real receiver keeps these durably for longer than the
    /// 24-hour retry period (a database table with a unique key on `jti`).
    seen: Mutex<HashSet<String>>,
}

impl Receiver {
    async fn fetch_jwks(&self) -> Result<JwkSet, Box<dyn Error + Send + Sync>> {
        let url = format!("{}/.well-known/jwks.json", self.verdicts_url);
        let bytes = self
            .http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        Ok(JwkSet::from_json(&bytes)?)
    }

    fn verify(&self, token: &str) -> Result<EventClaims, TokenError> {
        let options = VerifyOptions {
            issuer: self.verdicts_url.clone(),
            now: OffsetDateTime::now_utc(),
            leeway_secs: 60,
        };
        let jwks = self.jwks.lock().unwrap_or_else(|p| p.into_inner());
        verify_event(token, &jwks, &options)
    }

    /// Verifies, refreshing the key set once if the signing key is new (a rotation).
    async fn verify_fresh(&self, token: &str) -> Result<EventClaims, TokenError> {
        match self.verify(token) {
            Err(TokenError::UnknownKid(_)) => {
                if let Ok(fresh) = self.fetch_jwks().await {
                    *self.jwks.lock().unwrap_or_else(|p| p.into_inner()) = fresh;
                }
                self.verify(token)
            }
            other => other,
        }
    }
}

async fn receive(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, &'static str) {
    let is_jwt = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("application/jwt"));
    if !is_jwt {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected application/jwt\n",
        );
    }
    let claims = match receiver.verify_fresh(body.trim()).await {
        Ok(claims) => claims,
        Err(e) => {
            eprintln!("refused an event: {e}");
            return (StatusCode::BAD_REQUEST, "event does not verify\n");
        }
    };
    let first_time = receiver
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(claims.jti.to_string());
    if !first_time {
        println!("{} {} (duplicate, ignored)", claims.jti, claims.event_type);
        return (StatusCode::OK, "duplicate\n");
    }
    // Handle the event here. `data` is the object in the shape the API returns it.
    println!("{} {} {}", claims.jti, claims.event_type, claims.data);
    (StatusCode::NO_CONTENT, "")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let args = Args::parse();
    let receiver = Arc::new(Receiver {
        verdicts_url: args.verdicts_url.trim_end_matches('/').to_owned(),
        http: reqwest::Client::new(),
        jwks: Mutex::new(JwkSet::default()),
        seen: Mutex::new(HashSet::new()),
    });
    let jwks = receiver.fetch_jwks().await?;
    *receiver.jwks.lock().unwrap_or_else(|p| p.into_inner()) = jwks;
    let app = Router::new()
        .route("/", post(receive))
        .route("/{*path}", post(receive))
        .with_state(receiver);
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!(
        "receiving Mandate events on http://{}/",
        listener.local_addr()?
    );
    axum::serve(listener, app).await?;
    Ok(())
}
