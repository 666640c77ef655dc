//! `POST /v1/authorizations`: the hot path. The decision service locks the agent,
//! evaluates, signs and stores (with the review it opens, its event and its idempotency
//! record, in one transaction); the 201 is sent only after the commit.

use axum::Router;
use axum::extract::{Extension, State};
use axum::response::Response;
use axum::routing::post;
use mandate_core::unstable::policy::AuthorizationBody;
use mandate_core::{
    AuthorizationRequest, Bindings, FieldError, Inconsistency, PaymentRequirements,
};

use crate::decision::agents::AgentSlotHandle;
use crate::decision::service::{DecisionError, Input};
use crate::http::body::JsonBytes;
use crate::http::error::ApiError;
use crate::http::idempotency::{AlreadyStored, IdempotencySlot};
use crate::model::Caller;
use crate::services::acp::{self, AcpError};
use crate::services::ap2;
use crate::state::AppState;
use mandate_core::unstable::fields::invalid;
use mandate_core::unstable::x402::ListedAssets;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/v1/authorizations", post(authorize))
}

async fn authorize(
    State(state): State<AppState>,
    caller: Caller,
    slot: Option<Extension<AgentSlotHandle>>,
    idempotency: Option<Extension<IdempotencySlot>>,
    body: Result<JsonBytes, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    let agent = caller.require_agent()?.clone();
    let JsonBytes(body) = body?;
    let now = state.now();
    // The body is parsed once: the protocol members taken out, the request read from the
    // rest (malformed JSON and a member repeated anywhere are refused here). With `acp`:
    // the ACP allowance the request is made under (services/acp.rs); with `ap2`: the
    // agent's AP2 closed payment mandate for exactly this payment (services/ap2.rs).
    // Either is a single-use credential. Their shapes are judged before the request.
    let AuthorizationBody {
        request,
        acp,
        ap2,
        x402,
    } = AuthorizationBody::from_json_bytes(agent.clone(), &body)?;
    let allowance = acp.map(acp::allowance_member).transpose()?;
    let presentation = ap2.map(ap2::presentation).transpose()?;
    let request = request?;
    let mut bindings = Bindings {
        x402_payment: match &x402 {
            Some(x402) => x402_payment(x402, &request, &state.x402_assets)?,
            None => None,
        },
        ..Bindings::default()
    };
    let credential = match (presentation, allowance) {
        (Some(_), Some(_)) => return Err(AcpError::WithAp2.into()),
        (Some(presentation), None) => {
            let presented =
                ap2::closed_mandate(&*state.store, &caller, &agent, &request, &presentation, now)
                    .await?;
            bindings.ap2_mandate = Some(presented.open_digest);
            bindings.ap2_transaction = Some(presented.transaction_id);
            Some(presented.credential)
        }
        (None, Some(allowance)) => {
            let presented =
                acp::allowance(&*state.store, &caller, &agent, &request, &allowance, now).await?;
            bindings.acp_allowance = presented.bindings.acp_allowance;
            bindings.acp_checkout_session = presented.bindings.acp_checkout_session;
            presented.credential
        }
        (None, None) => None,
    };
    let mode = state.mode(&caller.org_id, caller.env).await?;
    let slot = slot.map(|Extension(AgentSlotHandle(slot))| slot);
    // The answer is sealed for its idempotency record before it is stored (again if the
    // decision is made again on fresh state).
    let seal = |body: &[u8]| match &idempotency {
        Some(Extension(slot)) => slot
            .seal(201, body)
            .map(|sealed| Some(slot.record(201, sealed)))
            .map_err(|e| DecisionError::Encoding(e.to_string())),
        None => Ok(None),
    };
    let decider = state.decider(&caller, mode, now)?;
    // Boxed: the decision's future is large, and this one is moved whole when made.
    let answer = Box::pin(decider.run(
        Input::Request {
            request,
            slot,
            credential,
            bindings,
        },
        seal,
    ))
    .await?;
    let mut response = crate::routes::created_encoded(answer);
    if idempotency.is_some() {
        response.extensions_mut().insert(AlreadyStored);
    }
    Ok(response)
}

/// The `x402_payment` claim for the `x402` member taken from a request's body (`None` for
/// a null one), or the 400 naming what in it is malformed or not the request's payment.
///
/// The member is an x402 v2 PaymentRequirements, or a PaymentPayload whose `accepted`
/// requirements are read; the claim is given once it is consistent with the request
/// (recipient `vendor:<payTo>`, a fiat asset the currency, and, where the asset's decimals
/// are known, an ISO 4217 currency's minor units or those the operator lists in `listed`,
/// the atomic amount the request's amount: for `upto`, the maximum, which is what is
/// decided; elsewhere the verifier, who knows its asset, compares it: docs/protocols.md).
fn x402_payment(
    x402: &serde_json::Value,
    request: &AuthorizationRequest,
    listed: &ListedAssets,
) -> Result<Option<String>, ApiError> {
    if x402.is_null() {
        return Ok(None);
    }
    let payment = PaymentRequirements::from_json(x402, "x402")?;
    let refused = mandate_core::unstable::x402::consistency(
        &payment,
        request.amount,
        &request.currency,
        &request.recipient,
        mandate_core::unstable::x402::known_decimals(listed, &payment),
    );
    if let Some(first) = refused.first() {
        return Err(inconsistent(x402, first).into());
    }
    Ok(Some(mandate_core::unstable::x402::digest(&payment)))
}

/// The 400 for an x402 payment that is not the request's, naming the x402 member.
fn inconsistent(x402: &serde_json::Value, problem: &Inconsistency) -> FieldError {
    let base = if x402.get("accepted").is_some() {
        "x402.accepted"
    } else {
        "x402"
    };
    let member = match problem {
        Inconsistency::PayTo { .. } => "payTo",
        Inconsistency::Asset { .. } | Inconsistency::Spelling { .. } => "asset",
        _ => "amount",
    };
    invalid(
        &format!("{base}.{member}"),
        format!("does not match the request: {problem}"),
    )
}
