//! The Idempotency-Key middleware: replays a stored result, refuses a reused key with
//! another body or while the first request is in flight, and stores 2xx and 4xx results
//! for 24 hours. What to do is decided by `mandate_protocol::idempotency::next_action`.
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
use mandate_protocol::{
    idempotency::NextAction, idempotency::is_kept, idempotency::request_digest,
};

use crate::clock::{Clock, fill_random};
use crate::http::body;
use crate::http::error::ApiError;
use crate::http::limits::BodyDeadline;
use crate::http::request_id;
use crate::http::seal::{SealKey, Sealed};
use crate::model::Caller;
use crate::services::authorizations::IdempotencyClaim;
use crate::storage::Store;
use crate::storage::idempotency::{CLAIM_MS, ClaimToken, IdempotencyRecord};

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// The header on a replayed response.
pub const REPLAYED: &str = "idempotency-replayed";

/// Put into the request's extensions when a key was claimed: a handler may store its answer
/// in the transaction of the change it answers, with [`IdempotencySlot::seal`] and
/// [`IdempotencySlot::record`].
#[derive(Debug, Clone)]
pub struct IdempotencySlot {
    /// The caller's organization: its records are kept with its other rows.
    org_id: Arc<str>,
    key_hash: [u8; 32],
    idem_key: String,
    /// The id of the request that claimed the key, replayed with its response.
    request_id: String,
    /// Seals the response before it is stored.
    seal: SealKey,
    /// The request's token on its claim.
    claim: ClaimToken,
}

/// Put into a response's extensions when the handler stored it itself.
#[derive(Debug, Clone, Copy)]
pub struct AlreadyStored;

impl IdempotencySlot {
    /// Seals the response `body` answered with `status`, for [`IdempotencySlot::record`].
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
            org_id: self.org_id.clone(),
            key_hash: self.key_hash,
            idem_key: self.idem_key.clone(),
            status,
            body,
            request_id: self.request_id.clone(),
            claim: self.claim,
        }
    }
}

/// The claim as the authorization use case takes it: the answer sealed into its record.
impl IdempotencyClaim for IdempotencySlot {
    fn record(&self, status: u16, body: &[u8]) -> Result<IdempotencyRecord, String> {
        let sealed = self.seal(status, body).map_err(|e| e.to_string())?;
        Ok(IdempotencySlot::record(self, status, sealed))
    }
}

/// What the layer reads and writes: the store its claims and outcomes are kept in, and the
/// clock. Shared by every request (the layer's state is cloned for each: one reference
/// count).
pub struct Idempotency {
    /// Where claims and outcomes are kept.
    pub store: Arc<dyn Store>,
    /// The injected clock.
    pub clock: Arc<dyn Clock>,
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 255 && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Middleware for every POST that carries an Idempotency-Key.
pub async fn layer(
    State(state): State<Arc<Idempotency>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST || !request.headers().contains_key(HEADER) {
        return next.run(request).await;
    }
    match run(state, request, next).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn run(state: Arc<Idempotency>, request: Request, next: Next) -> Result<Response, ApiError> {
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
    let (parts, body) = request.into_parts();
    let bytes = body::collect(body, deadline).await?;
    let mut claim: ClaimToken = [0u8; 16];
    fill_random(&mut claim);
    let claimed = Claimed {
        org_id: caller.org_id.clone(),
        key_hash: caller.key_hash,
        idem_key,
        claim,
        seal,
    };
    // From its claim to its outcome the request runs in a task of its own: a client that
    // goes away, or the request's deadline, ends the wait for its answer but never cuts
    // the request short between its claim and its outcome (a decision committed after its
    // claim was released, or a claim written after the request was dropped). The outcome
    // is stored and a retry replays it.
    let task = tokio::spawn(request_id::carry(claimed.run(state, parts, bytes, next)));
    task.await
        .unwrap_or_else(|e| Err(ApiError::Server(format!("the request's task failed: {e}"))))
}

/// A request with an Idempotency-Key, to claim the key for and run.
struct Claimed {
    org_id: Arc<str>,
    key_hash: [u8; 32],
    idem_key: String,
    /// This request's token on its claim.
    claim: ClaimToken,
    seal: SealKey,
}

impl Claimed {
    async fn run(
        self,
        state: Arc<Idempotency>,
        mut parts: axum::http::request::Parts,
        bytes: axum::body::Bytes,
        next: Next,
    ) -> Result<Response, ApiError> {
        let Self {
            org_id,
            key_hash,
            idem_key,
            claim,
            seal,
        } = self;
        // Armed before the claim is written: a claim written but not answered (the
        // database failed midway) is released too.
        let mut guard = ClaimGuard {
            store: state.store.clone(),
            org_id: org_id.clone(),
            key_hash,
            idem_key: Some(idem_key.clone()),
            claim,
        };
        let digest = request_digest(parts.method.as_str(), parts.uri.path(), &bytes);
        let now = state.clock.now();
        let (action, original_id) = state
            .store
            .claim_idempotency_key(&org_id, key_hash, &idem_key, digest, claim, now)
            .await?;
        if action != NextAction::StartProcessing {
            // Nothing of this request's own was claimed.
            guard.idem_key = None;
        }
        match action {
            NextAction::ReturnSavedResponse(saved) => {
                let body = seal
                    .open(saved.status, &saved.body)
                    .map_err(|e| ApiError::Server(e.to_string()))?;
                let mut response = Response::new(Body::from(body));
                *response.status_mut() =
                    StatusCode::from_u16(saved.status).unwrap_or(StatusCode::OK);
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
                    org_id: org_id.clone(),
                    key_hash,
                    idem_key: idem_key.clone(),
                    request_id: request_id::current(),
                    seal: seal.clone(),
                    claim,
                };
                parts.extensions.insert(slot);
                let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
                let finished = finish(&state, org_id, key_hash, idem_key, claim, &seal, response).await;
                if finished.as_ref().is_ok_and(|(_, released)| *released) {
                    guard.idem_key = None;
                }
                finished.map(|(response, _)| response)
            }
        }
    }
}

/// Releases a claim whose request ended without storing an outcome: failed with a 5xx, or
/// failed while claiming or storing its outcome. Without this, a retry would get 409 "still
/// being processed" until the claim runs out.
///
/// The release removes only this request's own claim, and only while no outcome completed
/// it, so a decision committed together with its response stays replayable. It is tried
/// again until it succeeds (the database may be restarting: the retry that follows a 503
/// must not find the key claimed), for as long as the claim lasts.
///
/// At most [`RELEASES_AT_ONCE`] releases of a process run at once: while a database node
/// is lost, every request of its organizations leaves a claim to release, and when the node
/// comes back behind a lock (Citus locks a worker's shards while a failover moves it), each
/// release would hold a connection of the pool until the lock goes, and the requests of
/// every other organization would wait for a connection.
struct ClaimGuard {
    store: Arc<dyn Store>,
    org_id: Arc<str>,
    key_hash: [u8; 32],
    /// `None` once the outcome is stored or the claim released.
    idem_key: Option<String>,
    claim: ClaimToken,
}

/// Claim releases a process runs at once, each on a connection of its pool.
const RELEASES_AT_ONCE: usize = 2;

/// The permits of the releases running ([`RELEASES_AT_ONCE`]).
static RELEASES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(RELEASES_AT_ONCE);

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let Some(idem_key) = self.idem_key.take() else {
            return;
        };
        let (store, key_hash, claim) = (self.store.clone(), self.key_hash, self.claim);
        let org_id = self.org_id.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let until = std::time::Instant::now()
                    + std::time::Duration::from_millis(CLAIM_MS.unsigned_abs());
                let mut wait = std::time::Duration::from_millis(20);
                loop {
                    let released = match RELEASES.acquire().await {
                        Ok(_permit) => {
                            store
                                .finish_idempotency(&org_id, key_hash, &idem_key, claim, None)
                                .await
                        }
                        // Never closed.
                        Err(_) => return,
                    };
                    match released {
                        Ok(()) => return,
                        Err(e) if std::time::Instant::now() + wait >= until => {
                            tracing::error!("releasing an abandoned idempotency claim: {e}");
                            return;
                        }
                        Err(_) => {
                            tokio::time::sleep(wait).await;
                            wait = (wait * 2).min(std::time::Duration::from_millis(500));
                        }
                    }
                }
            });
        }
    }
}

/// Stores the response's outcome under the claim (a 2xx or 4xx), or releases the claim (a
/// 5xx). Returns the response, and whether the claim is done with (stored or released).
async fn finish(
    state: &Idempotency,
    org_id: Arc<str>,
    key_hash: [u8; 32],
    idem_key: String,
    claim: ClaimToken,
    seal: &SealKey,
    response: Response,
) -> Result<(Response, bool), ApiError> {
    if response.extensions().get::<AlreadyStored>().is_some() {
        return Ok((response, true));
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
        org_id: org_id.clone(),
        key_hash,
        idem_key: idem_key.clone(),
        status,
        body,
        request_id: request_id::current(),
        claim,
    });
    let kept = record.is_some();
    let done = state
        .store
        .finish_idempotency(&org_id, key_hash, &idem_key, claim, record)
        .await;
    match done {
        Ok(()) => Ok((Response::from_parts(parts, Body::from(bytes)), true)),
        Err(e) if kept => Err(e.into()),
        // A 5xx whose claim could not be released now: the answer stands, and the claim's
        // guard releases it as soon as the database lets it.
        Err(_) => Ok((Response::from_parts(parts, Body::from(bytes)), false)),
    }
}
