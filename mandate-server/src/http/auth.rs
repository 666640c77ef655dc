//! Authentication: every request on the API host is authenticated first, known path or
//! not (a repeated `Authorization` or `Idempotency-Key` header is a 400 before that); then
//! the key's request rate is applied. The resolved [`Caller`] goes into the
//! request's extensions for the handlers.

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::clock::ms;
use crate::http::error::ApiError;
use crate::http::request_log::{self, CallerOrg};
use crate::model::Caller;
use crate::signing::api_keys::{Binding, KeyAuthority};
use crate::state::AppState;
use crate::storage::keys::{self, CallerRow};

/// The earlier location of the key set on the API host, answered with a 308.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

fn bearer(parts: &Parts) -> Option<&str> {
    bearer_key(&parts.headers)
}

/// The well-formed API key of the `Authorization: Bearer` header, if any. The idempotency
/// layer derives the key that seals a stored response from it (see [`crate::http::seal`]); the
/// raw key is never kept, cached or logged.
pub fn bearer_key(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let key = value.strip_prefix("Bearer ")?.trim();
    let well_formed = ["sk_sandbox_", "sk_live_", "ak_sandbox_", "ak_live_"]
        .iter()
        .any(|p| key.starts_with(p))
        && key.len() <= 128;
    well_formed.then_some(key)
}

/// Headers a request may carry at most once, as the error message names them: with two
/// `Authorization` or `Idempotency-Key` headers, a gateway that reads one and this server
/// reading the other would act on different keys.
const SINGLE_HEADERS: [(&str, &str); 2] = [
    ("authorization", "Authorization"),
    ("idempotency-key", "Idempotency-Key"),
];

/// A 400 naming the first header of [`SINGLE_HEADERS`] that `parts` carries more than once.
fn repeated_header(parts: &Parts) -> Option<ApiError> {
    SINGLE_HEADERS.iter().find_map(|(name, shown)| {
        let count = parts.headers.get_all(*name).iter().count();
        (count > 1).then(|| {
            ApiError::InvalidRequest(format!(
                "the {shown} header appears {count} times; send it once"
            ))
        })
    })
}

/// The 401 of a missing or unknown key, pointing at the contract on `{docs_url}`.
fn unauthorized(state: &AppState) -> Response {
    ApiError::Unauthorized {
        docs: Some(state.docs_url.clone()),
    }
    .into_response()
}

/// Whether the row `row` may authenticate: with a key-encryption key, only if its binding
/// is one the KEK made for exactly this row (`signing::api_keys`); otherwise it is refused
/// as an unknown key, and a warning names its fingerprint (never the key).
fn bound(state: &AppState, row: &CallerRow) -> bool {
    let binding = state
        .api_keys
        .check(&KeyAuthority::of_caller(row), row.binding.as_deref());
    if !binding.admits() {
        tracing::warn!(
            "API key {} refused: its row is not bound to the key-encryption key ({}); bind rows an operator stored with `mandate-server bind-api-keys`, otherwise someone with write access to the database wrote it",
            keys::fingerprint(&row.caller.key_hash),
            if binding == Binding::Missing {
                "no binding"
            } else {
                "a binding made for another row or by another key-encryption key"
            }
        );
    }
    binding.admits()
}

/// Resolves the key, enforces its rate, or answers 401/429; then runs `next` with the
/// [`Caller`] in the request's extensions. Part of the API host's front layer
/// ([`crate::app::front`]).
pub async fn authenticate(state: &AppState, request: Request, next: Next) -> Response {
    if request.method() == Method::GET && request.uri().path() == JWKS_PATH {
        let location = format!("{}{JWKS_PATH}", state.verdicts_url);
        let mut response = StatusCode::PERMANENT_REDIRECT.into_response();
        if let Ok(value) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, value);
        }
        return response;
    }
    let (mut parts, body) = request.into_parts();
    if let Some(error) = repeated_header(&parts) {
        return error.into_response();
    }
    let Some(key) = bearer(&parts) else {
        return unauthorized(state);
    };
    let hash = keys::hash(key);
    let now_ms = ms(state.now());
    let admitted = match state.callers.admit(&hash, now_ms) {
        Ok(admitted) => admitted,
        Err(epoch) => match state.store.caller(hash).await {
            Ok(Some(row)) if !bound(state, &row) => return unauthorized(state),
            Ok(Some(row)) => {
                let caller = row.caller;
                // An agent key's agent slot is cached with it (see `KeyCache`).
                let slot = caller
                    .agent
                    .as_ref()
                    .map(|agent| state.agents.handle(&caller.org_id, caller.env, agent));
                state.callers.insert(epoch, caller, slot, now_ms)
            }
            Ok(None) => return unauthorized(state),
            Err(e) => return ApiError::from(e).into_response(),
        },
    };
    let (caller, agent_slot) = (admitted.caller, admitted.agent_slot);
    if let Err(retry_after) = admitted.rate {
        let mut response = ApiError::RateLimited {
            limit: caller.rate_per_sec,
            retry_after,
        }
        .into_response();
        if request_log::enabled() {
            response
                .extensions_mut()
                .insert(CallerOrg(caller.org_id.clone()));
        }
        return response;
    }
    // The organization, for the request line (only when it is logged).
    let org = request_log::enabled().then(|| CallerOrg(caller.org_id.clone()));
    parts.extensions.insert(caller);
    if let Some(slot) = agent_slot {
        parts.extensions.insert(slot);
    }
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if let Some(org) = org {
        response.extensions_mut().insert(org);
    }
    response
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthorized { docs: None })
    }
}
