//! ACP on the API (issue #51; docs/protocols.md): the `acp` member of
//! `POST /v1/authorizations`, the Agentic Commerce Protocol's delegated payment allowance
//! the request is made under. What an allowance allows is mandate-core's (`Allowance`); this
//! module takes the member out of the body, checks the request is the allowance, and
//! names every refusal for the caller.

use mandate_core::{
    AgentId, Allowance, AllowanceMismatch, AuthorizationRequest, Bindings, FieldError,
};
use serde_json::Value;
use time::OffsetDateTime;

use crate::decision::service::Credential;
use crate::model::Caller;
use crate::storage::{StorageError, Store};

/// Why an `acp` member was refused (each message names the member and what to send), or
/// could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    /// `acp` is not an object holding exactly `allowance`.
    #[error(
        "acp must be an object with one member, allowance: the ACP delegated payment allowance"
    )]
    Shape,
    /// `acp` holds a member other than `allowance`.
    #[error("acp.{0} is not a member of acp; only acp.allowance is")]
    UnknownMember(String),
    /// The allowance is malformed (names the member).
    #[error(transparent)]
    Allowance(#[from] FieldError),
    /// The request is not the allowance (names the allowance's member).
    #[error(
        "acp.allowance.{} does not match the request: {}; a request under an allowance is for its max_amount, in its currency, to vendor:<merchant_id>, before expires_at",
        .0.member(),
        .0
    )]
    Mismatch(AllowanceMismatch),
    /// Both `acp` and `ap2`: one single-use credential a request.
    #[error(
        "acp and ap2 cannot be sent together: a request presents one single-use credential, an ACP allowance or an AP2 closed mandate"
    )]
    WithAp2,
    /// The store could not be read.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The allowance in the `acp` member taken from a `POST /v1/authorizations` body
/// (`{"allowance": {...}}`), or the 400 naming what is wrong with its shape.
pub fn allowance_member(acp: Value) -> Result<Value, AcpError> {
    let Value::Object(mut acp) = acp else {
        return Err(AcpError::Shape);
    };
    let allowance = acp.remove("allowance").ok_or(AcpError::Shape)?;
    if let Some(other) = acp.keys().next() {
        return Err(AcpError::UnknownMember(other.clone()));
    }
    Ok(allowance)
}

/// An allowance checked for a request: what the decision carries.
#[derive(Debug)]
pub struct Presented {
    /// The single-use credential ([`Allowance::credential_id`]: one per checkout
    /// session) and the agent's mandate it was checked under; `None` when the agent has
    /// no mandate (the decision is `deny_no_mandate` and accepts nothing).
    pub credential: Option<Credential>,
    /// The verdict's `acp_allowance` and `acp_checkout_session`.
    pub bindings: Bindings,
}

/// Reads `allowance` and checks that `request` is exactly it at `now` (its maximum, its
/// currency, `vendor:<merchant_id>`, before `expires_at`): the credential and the
/// bindings for the decision.
pub async fn allowance(
    store: &dyn Store,
    caller: &Caller,
    agent: &AgentId,
    request: &AuthorizationRequest,
    allowance: &Value,
    now: OffsetDateTime,
) -> Result<Presented, AcpError> {
    let allowance = Allowance::from_json(allowance, "acp.allowance")?;
    mandate_protocol::acp::check_request(
        &allowance,
        request.amount,
        &request.currency,
        &request.recipient,
        now,
    )
    .map_err(AcpError::Mismatch)?;
    // The mandate the agent has now: the decision is made only if it is still the one.
    let current = store
        .current_ap2_source(&caller.org_id, caller.env, agent)
        .await?;
    Ok(Presented {
        credential: current.map(|(mandate, _)| Credential {
            id: mandate_protocol::acp::credential_id(&allowance),
            mandate,
        }),
        bindings: Bindings {
            acp_allowance: Some(mandate_protocol::acp::digest(&allowance)),
            acp_checkout_session: Some(
                mandate_protocol::acp::checkout_session_id(&allowance).to_owned(),
            ),
            ..Bindings::default()
        },
    })
}
