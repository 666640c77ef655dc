//! The Idempotency-Key middleware: replays a stored result, refuses a reused key with
//! another body or while the first request is in flight, and stores 2xx and 4xx results
//! for 24 hours. What to do is decided by `mandate_core::idempotency::next_action`.
//!
//! A handler that commits its own change may store its response in the same transaction
//! (see [`IdempotencySlot`]); a crash can then never separate the change from its record.
//!
//! Stored bodies are sealed with a key derived from the caller's raw API key and the
//! Idempotency-Key ([`crate::http::seal`]), so the answer to `POST /v1/agents`, which holds the
//! new agent's key, is never at rest in plaintext; a replay opens it and answers the same
//! bytes.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mandate_core::idempotency::{NextAction, is_kept, request_digest};

use crate::http::body;
use crate::http::error::ApiError;
use crate::http::limits::BodyDeadline;
use crate::http::request_id;
use crate::http::seal::{SealKey, Sealed};
use crate::model::Caller;
use crate::state::AppState;
use crate::storage::Store;
use crate::storage::idempotency::IdempotencyRecord;

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// The header on a replayed response.
pub const REPLAYED: &str = "idempotency-replayed";

/// Put into the request's extensions when a key was claimed: a handler may complete it in
/// its own transaction with [`IdempotencySlot::complete`].
#[derive(Debug, Clone)]
pub struct IdempotencySlot {
    key_hash: [u8; 32],
    idem_key: String,
    /// The id of the request that claimed the key, replayed with its response.
    request_id: String,
    /// Seals the response before it is stored.
    seal: SealKey,
}

/// Put into a response's extensions when the handler stored it itself.
#[derive(Debug, Clone, Copy)]
pub struct AlreadyStored;

impl IdempotencySlot {
    /// Seals the response `body` answered with `status`, for [`IdempotencySlot::complete`].
    /// Done before the transaction, so the writer thread does no cryptography.
    pub fn seal(&self, status: u16, body: &[u8]) -> Result<Sealed, ApiError> {
        self.seal
            .seal(status, body)
            .map_err(|e| ApiError::Server(e.to_string()))
    }

    /// The record of the sealed `body` answered with `status` under this slot, for a store
    /// method that writes it in the transaction of the change it answers.
    pub fn record(&self, status: u16, body: Sealed) -> IdempotencyRecord {
        IdempotencyRecord {
            key_hash: self.key_hash,
            idem_key: self.idem_key.clone(),
            status,
            body,
            request_id: self.request_id.clone(),
        }
    }
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 255 && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Middleware for every POST that carries an Idempotency-Key.
pub async fn layer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST || !request.headers().contains_key(HEADER) {
        return next.run(request).await;
    }
    match run(state, request, next).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn run(state: AppState, request: Request, next: Next) -> Result<Response, ApiError> {
    let idem_key = request
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|k| valid_key(k))
        .ok_or_else(|| {
            ApiError::InvalidRequest(
                "Idempotency-Key must be 1 to 255 visible ASCII characters".into(),
            )
        })?
        .to_owned();
    let caller = request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or(ApiError::Unauthorized { docs: None })?;
    // The raw key authenticated this request (it is in its header); only the key derived
    // from it is kept, for as long as the request runs.
    let seal = crate::http::auth::bearer_key(request.headers())
        .map(|api_key| SealKey::derive(api_key, &idem_key))
        .ok_or(ApiError::Unauthorized { docs: None })?;
    let deadline = BodyDeadline::of(&request);
    let (mut parts, body) = request.into_parts();
    let bytes = body::collect(body, deadline).await?;
    let digest = request_digest(parts.method.as_str(), parts.uri.path(), &bytes);
    let now = state.now();
    let (action, original_id) = state
        .store
        .claim_idempotency_key(caller.key_hash, &idem_key, digest, now)
        .await?;
    match action {
        NextAction::ReturnSavedResponse(saved) => {
            let body = seal
                .open(saved.status, &saved.body)
                .map_err(|e| ApiError::Server(e.to_string()))?;
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = StatusCode::from_u16(saved.status).unwrap_or(StatusCode::OK);
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(REPLAYED, HeaderValue::from_static("true"));
            if let Some(value) = original_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
                headers.insert(request_id::HEADER, value);
            }
            Ok(response)
        }
        NextAction::ConflictDifferentRequest => Err(ApiError::IdempotencyConflict(
            "this Idempotency-Key was used with a different request in the last 24 hours; use a new key".into(),
        )),
        NextAction::ConflictInFlight => Err(ApiError::IdempotencyConflict(
            "a request with this Idempotency-Key is still being processed; retry after it completes".into(),
        )),
        NextAction::StartProcessing => {
            let slot = IdempotencySlot {
                key_hash: caller.key_hash,
                idem_key: idem_key.clone(),
                request_id: request_id::current(),
                seal: seal.clone(),
            };
            parts.extensions.insert(slot);
            let mut guard = ClaimGuard {
                store: state.store.clone(),
                key_hash: caller.key_hash,
                idem_key: Some(idem_key.clone()),
            };
            let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
            let finished = finish(&state, caller.key_hash, idem_key, &seal, response).await;
            if finished.is_ok() {
                guard.idem_key = None;
            }
            finished
        }
    }
}

/// Releases a claim whose request ended without storing an outcome: dropped when the
/// client went away or a timeout cancelled it, or failed while storing its outcome. Without
/// this, a retry would get 409 "still being processed" until the next restart.
///
/// The release is queued on the writer after any write the request already sent (the
/// writer runs jobs in order), and removes only a claim that no response completed, so a
/// decision committed together with its response stays replayable.
struct ClaimGuard {
    store: Arc<dyn Store>,
    key_hash: [u8; 32],
    /// `None` once the outcome is stored.
    idem_key: Option<String>,
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let Some(idem_key) = self.idem_key.take() else {
            return;
        };
        let (store, key_hash) = (self.store.clone(), self.key_hash);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let released = store.finish_idempotency(key_hash, &idem_key, None).await;
                if let Err(e) = released {
                    tracing::error!("releasing an abandoned idempotency claim: {e}");
                }
            });
        }
    }
}

async fn finish(
    state: &AppState,
    key_hash: [u8; 32],
    idem_key: String,
    seal: &SealKey,
    response: Response,
) -> Result<Response, ApiError> {
    if response.extensions().get::<AlreadyStored>().is_some() {
        return Ok(response);
    }
    // What is stored is replayed as JSON: a framework's own answer is made the envelope.
    let response = crate::http::error::enveloped(response).await;
    let status = response.status().as_u16();
    let (parts, body) = response.into_parts();
    let bytes = to_bytes(body, usize::MAX)
        .await
        .map_err(|e| ApiError::Server(format!("reading response body: {e}")))?;
    let sealed = is_kept(status)
        .then(|| seal.seal(status, &bytes))
        .transpose()
        .map_err(|e| ApiError::Server(e.to_string()))?;
    let record = sealed.map(|body| IdempotencyRecord {
        key_hash,
        idem_key: idem_key.clone(),
        status,
        body,
        request_id: request_id::current(),
    });
    state
        .store
        .finish_idempotency(key_hash, &idem_key, record)
        .await?;
    Ok(Response::from_parts(parts, Body::from(bytes)))
}
