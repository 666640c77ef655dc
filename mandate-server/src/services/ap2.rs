//! AP2 on the API (issue #36; docs/protocols.md): the `ap2` member of `POST /v1/mandates`
//! (an open payment mandate imported in place of the plain terms), the `source` of a
//! mandate read, and the `ap2` member of `POST /v1/authorizations` (the agent's closed
//! payment mandate for this payment). What a mandate means is `mandate_core::ap2`'s; this
//! module loads what it needs, compares, and names every refusal for the caller.

use mandate_core::ap2::{
    ClosedMandate, OpenMandate, read_stored_open_mandate, verify_closed_mandate,
    verify_open_mandate,
};
use mandate_core::id::{AgentId, MandateId};
use mandate_core::jwk::{Jwk, JwkSet};
use mandate_core::policy::AuthorizationRequest;
use mandate_core::wire::MandateSource;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::decision::service::Credential;
use crate::http::error::ApiError;
use crate::model::Caller;
use crate::state::AppState;
use crate::storage::StorageError;
use crate::storage::ap2::Ap2Source;

/// The members of a mandate body that an imported open mandate sets: giving one beside
/// `ap2` is refused rather than one of the two silently winning.
pub const SET_BY_OPEN_MANDATE: [&str; 4] = ["limits", "recipients", "expires", "not_before"];

/// The only member of `ap2` in `POST /v1/mandates`.
const OPEN_MEMBER: &str = "open_mandate";
/// The only member of `ap2` in `POST /v1/authorizations`.
const CLOSED_MEMBER: &str = "closed_mandate";

/// The SD-JWT text of the body's `ap2` member, which must be an object holding exactly
/// `member`, a non-empty string; `None` when the body has no `ap2`.
fn ap2_member(body: &mut Map<String, Value>, member: &str) -> Result<Option<String>, ApiError> {
    let Some(ap2) = body.remove("ap2") else {
        return Ok(None);
    };
    let bad = || {
        ApiError::InvalidRequest(format!(
            "ap2 must be an object with one member, {member}: the AP2 SD-JWT as a string"
        ))
    };
    let Value::Object(mut ap2) = ap2 else {
        return Err(bad());
    };
    let text = match ap2.remove(member) {
        Some(Value::String(text)) if !text.trim().is_empty() => text,
        _ => return Err(bad()),
    };
    if let Some(other) = ap2.keys().next() {
        return Err(ApiError::InvalidRequest(format!(
            "ap2.{other} is not a member of ap2; only ap2.{member} is"
        )));
    }
    Ok(Some(text))
}

fn refused(member: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::InvalidRequest(format!("ap2.{member}: {e}"))
}

/// The organization's trusted AP2 issuer keys as a JWK Set (a stored key that no longer
/// parses is the server's fault, never the caller's).
async fn trusted_issuers(state: &AppState, caller: &Caller) -> Result<JwkSet, ApiError> {
    let stored = state.store.ap2_issuers(&caller.org_id).await?;
    if stored.is_empty() {
        return Err(ApiError::InvalidRequest(
            "ap2.open_mandate: the organization trusts no AP2 issuer key; an operator adds the issuer's key with `mandate-server ap2-issuer add`".into(),
        ));
    }
    let mut keys = Vec::with_capacity(stored.len());
    for issuer in stored {
        let value: Value = serde_json::from_str(&issuer.jwk)
            .map_err(|e| ApiError::Server(format!("stored AP2 issuer key {}: {e}", issuer.kid)))?;
        keys.push(
            Jwk::from_value(&value).map_err(|e| {
                ApiError::Server(format!("stored AP2 issuer key {}: {e}", issuer.kid))
            })?,
        );
    }
    Ok(JwkSet { keys })
}

/// For a `POST /v1/mandates` body with `ap2`: the open mandate verified against the
/// organization's trusted issuer keys at `now`, and the body made into plain terms (the
/// open mandate's terms with what the caller gave beside it: `agent`, `categories`, and
/// optionally `principal`, `review_above`, `escrow`), with the source to store. `None`
/// for a body without `ap2` (plain terms).
pub async fn import(
    state: &AppState,
    caller: &Caller,
    body: &Value,
    now: OffsetDateTime,
) -> Result<Option<(Value, Ap2Source)>, ApiError> {
    let Some(object) = body.as_object() else {
        return Ok(None);
    };
    if !object.contains_key("ap2") {
        return Ok(None);
    }
    let mut terms = object.clone();
    let Some(sd_jwt) = ap2_member(&mut terms, OPEN_MEMBER)? else {
        return Ok(None);
    };
    if let Some(given) = SET_BY_OPEN_MANDATE.iter().find(|m| terms.contains_key(**m)) {
        return Err(ApiError::InvalidRequest(format!(
            "{given} is set by the AP2 open mandate in ap2.open_mandate; remove {given}, or send plain terms without ap2"
        )));
    }
    let issuers = trusted_issuers(state, caller).await?;
    let open = verify_open_mandate(&sd_jwt, &issuers, now).map_err(|e| refused(OPEN_MEMBER, e))?;
    terms.extend(open.terms());
    let source = Ap2Source {
        open_mandate: open.sd_jwt().to_owned(),
        digest: open.digest().to_owned(),
    };
    Ok(Some((Value::Object(terms), source)))
}

/// The `source` member of a mandate imported from AP2: the SD-JWT, its digest and the
/// values bound into the verdicts rather than enforced as terms.
pub fn source_of(source: &Ap2Source) -> MandateSource {
    // Verified at import: read again for the bound values (structure only).
    let open = read_stored_open_mandate(&source.open_mandate).ok();
    MandateSource {
        allowed_payment_instruments: open
            .as_ref()
            .and_then(|o| o.allowed_payment_instruments().map(<[Value]>::to_vec)),
        allowed_pisps: open
            .as_ref()
            .and_then(|o| o.allowed_pisps().map(<[Value]>::to_vec)),
        digest: source.digest.clone(),
        open_mandate: source.open_mandate.clone(),
        payment_reference: open
            .as_ref()
            .and_then(|o| o.payment_reference().map(str::to_owned)),
        kind: "ap2".to_owned(),
    }
}

/// [`source_of`] as the JSON value a mandate's answer carries.
pub fn source_json(source: &Ap2Source) -> Result<Value, ApiError> {
    super::wire_json(&source_of(source))
}

/// Adds `source` to those of the mandates (`(id, its JSON)`) imported from AP2.
pub async fn add_sources(
    state: &AppState,
    caller: &Caller,
    mandates: &mut [(MandateId, &mut Value)],
) -> Result<(), ApiError> {
    let ids: Vec<MandateId> = mandates.iter().map(|(id, _)| id.clone()).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let sources = state
        .store
        .ap2_sources(&caller.org_id, caller.env, &ids)
        .await?;
    for (id, source) in sources {
        if let Some((_, value)) = mandates.iter_mut().find(|(m, _)| *m == id)
            && let Value::Object(object) = &mut **value
        {
            object.insert("source".into(), source_json(&source)?);
        }
    }
    Ok(())
}

/// A closed mandate verified for a request: what the decision carries.
#[derive(Debug)]
pub struct Presented {
    /// The single-use credential ([`ClosedMandate::credential_id`]) and the mandate it
    /// was checked against (the decision is made only under that one).
    pub credential: Credential,
    /// The open mandate's digest: the verdict's `ap2_mandate`.
    pub open_digest: String,
    /// The closed mandate's transaction id: the verdict's `ap2_transaction`.
    pub transaction_id: String,
}

/// Splits a `POST /v1/authorizations` body with `ap2` into the request body without it
/// and the closed mandate's presentation; `None` when the body names no `ap2` (the plain
/// request, read on the fast path).
pub fn split_authorization(bytes: &[u8]) -> Result<Option<(Value, String)>, ApiError> {
    // The fast path reads plain bodies without building a tree: only a body that holds
    // the text "ap2" at all is read here.
    if !bytes.windows(5).any(|w| w == b"\"ap2\"") {
        return Ok(None);
    }
    let mut body: Value = match serde_json::from_slice(bytes) {
        Ok(body) => body,
        // Not JSON: the plain path names the problem.
        Err(_) => return Ok(None),
    };
    let Some(object) = body.as_object_mut() else {
        return Ok(None);
    };
    match ap2_member(object, CLOSED_MEMBER)? {
        Some(presentation) => Ok(Some((body, presentation))),
        None => Ok(None),
    }
}

/// Verifies `presentation` (the agent's AP2 closed payment mandate) against the open
/// mandate the agent's current mandate was imported from, and checks that it pays exactly
/// what `request` asks: amount, currency and recipient (each mismatch named).
pub async fn closed_mandate(
    state: &AppState,
    caller: &Caller,
    agent: &AgentId,
    request: &AuthorizationRequest,
    presentation: &str,
    now: OffsetDateTime,
) -> Result<Presented, ApiError> {
    let current = state
        .store
        .current_ap2_source(&caller.org_id, caller.env, agent)
        .await?;
    let (mandate_id, source) = match current {
        Some((id, Some(source))) => (id, source),
        Some((id, None)) => {
            return Err(ApiError::InvalidRequest(format!(
                "ap2.closed_mandate: agent {agent}'s mandate {id} was not imported from an AP2 open mandate; a closed mandate is presented only under one (POST /v1/mandates with ap2.open_mandate), otherwise leave out ap2"
            )));
        }
        None => {
            return Err(ApiError::InvalidRequest(format!(
                "ap2.closed_mandate: agent {agent} has no mandate; import its AP2 open mandate first (POST /v1/mandates with ap2.open_mandate)"
            )));
        }
    };
    let open: OpenMandate = read_stored_open_mandate(&source.open_mandate).map_err(|e| {
        ApiError::from(StorageError::Corrupt(format!(
            "stored AP2 open mandate: {e}"
        )))
    })?;
    let closed: ClosedMandate =
        verify_closed_mandate(presentation, &open, now).map_err(|e| refused(CLOSED_MEMBER, e))?;
    if closed.amount != request.amount.value() {
        return Err(ApiError::InvalidRequest(format!(
            "ap2.closed_mandate pays {} and the request asks amount {}: a closed mandate authorizes exactly the payment it names; send its amount",
            closed.amount, request.amount
        )));
    }
    if closed.currency != request.currency {
        return Err(ApiError::InvalidRequest(format!(
            "ap2.closed_mandate pays in {} and the request's currency is {}; send its currency",
            closed.currency, request.currency
        )));
    }
    if !closed
        .payee
        .eq_ignore_ascii_case(request.recipient.as_str())
    {
        return Err(ApiError::InvalidRequest(format!(
            "ap2.closed_mandate pays {} and the request's recipient is {}; send its payee as the recipient",
            closed.payee, request.recipient
        )));
    }
    Ok(Presented {
        credential: Credential {
            id: closed.credential_id(),
            mandate: mandate_id,
        },
        open_digest: open.digest().to_owned(),
        transaction_id: closed.transaction_id,
    })
}
