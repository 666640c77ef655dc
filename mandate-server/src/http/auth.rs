//! Authentication: every request on the API host is authenticated first, known path or
//! not (a repeated `Authorization` or `Idempotency-Key` header is a 400 before that); then
//! the key's request rate is applied. The resolved [`Caller`] goes into the
//! request's extensions for the handlers.

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use std::sync::Arc;

use mandate_core::AgentId;

use crate::clock::{Clock, ms};
use crate::http::cache::KeyCache;
use crate::http::error::ApiError;
use crate::http::request_log::{self, CallerOrg};
use crate::model::{Caller, Env};
use crate::signing::api_keys::{Binding, KeyAuthority, KeyBinder};
use crate::storage::KeyStore;
use crate::storage::keys::{self, CallerRow};

/// The earlier location of the key set on the API host, answered with a 308.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

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

/// Where an agent key's slot comes from: the decision service keeps a lock for each agent,
/// and an agent key's cached entry keeps its agent's (see [`KeyCache`]). The HTTP layers
/// know no decision service: the slot is a type of the implementer's.
pub trait AgentSlots {
    /// The slot cached beside an agent key.
    type Slot: Clone + Send + Sync + 'static;

    /// The slot of `agent` of (`org_id`, `env`).
    fn slot_of(&self, org_id: &Arc<str>, env: Env, agent: &AgentId) -> Self::Slot;
}

/// What authentication reads: the key rows and the clock, the callers cached by key hash,
/// the key binder, where the contract and the key set are published, and the agents'
/// slots.
pub struct Authenticator<'a, A: AgentSlots> {
    /// The key rows.
    pub store: &'a dyn KeyStore,
    /// The injected clock (rate windows).
    pub clock: &'a dyn Clock,
    /// Callers by key hash, each with its rate window (and an agent key's slot).
    pub callers: &'a KeyCache<A::Slot>,
    /// Checks a key row's binding to the key-encryption key.
    pub api_keys: &'a KeyBinder,
    /// Where the JWK Set is published (no trailing slash).
    pub verdicts_url: &'a str,
    /// Where the contract is published (no trailing slash); every 401 names it.
    pub docs_url: &'a str,
    /// The agents' slots.
    pub agents: &'a A,
}

/// The 401 of a missing or unknown key, pointing at the contract on `{docs_url}`.
fn unauthorized(docs_url: &str) -> Response {
    ApiError::Unauthorized {
        docs: Some(docs_url.to_owned()),
    }
    .into_response()
}

/// Whether the row `row` may authenticate: with a key-encryption key, only if its binding
/// is one the KEK made for exactly this row (`signing::api_keys`); otherwise it is refused
/// as an unknown key, and a warning names its fingerprint (never the key).
fn bound(api_keys: &KeyBinder, row: &CallerRow) -> bool {
    let binding = api_keys.check(&KeyAuthority::of_caller(row), row.binding.as_deref());
    if !binding.admits() {
        tracing::warn!(
            "API key {} refused: its row is not bound to the key-encryption key ({}); bind rows an operator stored with `mandate-server bind-api-keys`, otherwise someone with write access to the database wrote it",
            keys::fingerprint(&row.key_hash),
            if binding == Binding::Missing {
                "no binding"
            } else {
                "a binding made for another row or by another key-encryption key"
            }
        );
    }
    binding.admits()
}

/// The caller of the request's bearer key as the cache admits it (its rate not yet
/// applied), or the 401 of a missing, unknown or unbound key.
async fn admit<A: AgentSlots>(
    auth: &Authenticator<'_, A>,
    headers: &HeaderMap,
) -> Result<crate::http::cache::Admitted<A::Slot>, Response> {
    let Some(key) = bearer_key(headers) else {
        return Err(unauthorized(auth.docs_url));
    };
    let hash = keys::hash(key);
    let now_ms = ms(auth.clock.now());
    match auth.callers.admit(&hash, now_ms) {
        Ok(admitted) => Ok(admitted),
        Err(epoch) => match auth.store.caller(hash).await {
            Ok(Some(row)) if !bound(auth.api_keys, &row) => Err(unauthorized(auth.docs_url)),
            Ok(Some(row)) => {
                let caller = Caller::from(row);
                // An agent key's agent slot is cached with it (see `KeyCache`).
                let slot = caller
                    .agent
                    .as_ref()
                    .map(|agent| auth.agents.slot_of(&caller.org_id, caller.env, agent));
                Ok(auth.callers.insert(epoch, caller, slot, now_ms))
            }
            Ok(None) => Err(unauthorized(auth.docs_url)),
            Err(e) => Err(ApiError::from(e).into_response()),
        },
    }
}

/// The caller of a request's bearer key outside the API host's front layer (the public
/// host's decision logs): the key resolved as [`authenticate`] resolves it and its rate
/// applied, or the 401 or 429 to answer.
pub async fn key_caller<A: AgentSlots>(
    auth: &Authenticator<'_, A>,
    headers: &HeaderMap,
) -> Result<Caller, Response> {
    let admitted = admit(auth, headers).await?;
    if let Err(retry_after) = admitted.rate {
        return Err(ApiError::RateLimited {
            limit: admitted.caller.rate_per_sec,
            retry_after,
        }
        .into_response());
    }
    Ok(admitted.caller)
}

/// Resolves the key, enforces its rate, or answers 401/429; then runs `next` with the
/// [`Caller`] in the request's extensions. Part of the API host's front layer
/// ([`crate::app::front`]).
pub async fn authenticate<A: AgentSlots>(
    auth: &Authenticator<'_, A>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() == Method::GET && request.uri().path() == JWKS_PATH {
        let location = format!("{}{JWKS_PATH}", auth.verdicts_url);
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
    let admitted = match admit(auth, &parts.headers).await {
        Ok(admitted) => admitted,
        Err(response) => return response,
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
