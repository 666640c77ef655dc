//! The authorization use case, `POST /v1/authorizations`: one call from the route. The
//! command ([`Authorize`]) carries the agent key that asks, the body as sent, the agent's
//! slot when the authentication layer had it, and the request's claim on its
//! Idempotency-Key as a value. [`Authorizations::authorize`] reads the body once, binds the
//! protocols it presents (an ACP allowance, an AP2 closed mandate, an x402 payment), and
//! hands the request to the decision service, which reads the mode, locks the agent,
//! evaluates, signs and stores the decision with its idempotency record in one
//! transaction. The outcome ([`Authorized`]) is the answer as committed.

use mandate_core::{AgentId, AuthorizationRequest, Bindings, FieldError, RequestBodyError};
use mandate_protocol::policy::AuthorizationBody;
use mandate_protocol::x402::ListedAssets;
use time::OffsetDateTime;

use super::acp::{self, AcpError};
use super::ap2::{self, Ap2Error};
use super::x402;
use crate::decision::agents::AgentSlot;
use crate::decision::service::{Credential, Deciding, DecisionError, Input};
use crate::model::{Caller, WrongKeyClass};
use crate::storage::Store;
use crate::storage::idempotency::IdempotencyRecord;

/// An authorization could not be given: what the caller sent is refused (each variant's
/// message names what to fix), or the decision could not be made or stored.
#[derive(Debug, thiserror::Error)]
pub enum AuthorizeError {
    /// The body is not JSON, or repeats a member.
    #[error(transparent)]
    Body(#[from] RequestBodyError),
    /// A field of the request, or the `x402` member, is malformed or not the request's.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// The `acp` member is refused.
    #[error(transparent)]
    Acp(#[from] AcpError),
    /// The `ap2` member is refused.
    #[error(transparent)]
    Ap2(#[from] Ap2Error),
    /// The decision could not be made or stored.
    #[error(transparent)]
    Decision(#[from] DecisionError),
}

/// The one credential that may ask for an authorization: an agent key.
#[derive(Debug, Clone, Copy)]
pub struct AgentCaller<'a> {
    /// The caller the key authenticated.
    pub caller: &'a Caller,
    /// The key's agent.
    pub agent: &'a AgentId,
}

impl<'a> AgentCaller<'a> {
    /// `caller` as an agent key, or the 403 for an organization key.
    pub fn of(caller: &'a Caller) -> Result<Self, WrongKeyClass> {
        Ok(Self {
            agent: caller.require_agent()?,
            caller,
        })
    }
}

/// A request's claim on its Idempotency-Key, as the use case is given it: it seals an
/// answer into the record stored in the decision's own transaction, so that a crash never
/// separates a decision from its record.
pub trait IdempotencyClaim: Sync {
    /// The record of `body` answered with `status`, sealed.
    fn record(&self, status: u16, body: &[u8]) -> Result<IdempotencyRecord, String>;
}

/// What an agent asks: the command of `POST /v1/authorizations`.
pub struct Authorize<'a> {
    /// Who asks.
    pub agent: AgentCaller<'a>,
    /// The body as sent (JSON, not yet parsed).
    pub body: &'a [u8],
    /// The agent's slot, when the authentication layer had it at hand.
    pub slot: Option<AgentSlot>,
    /// The request's claim on its Idempotency-Key, if it sent one.
    pub idempotency: Option<&'a dyn IdempotencyClaim>,
}

/// An authorization given: the decision, committed.
#[derive(Debug)]
pub struct Authorized {
    /// The answer's JSON (the decision with its token and the review it opened).
    pub answer: Vec<u8>,
    /// Whether the answer's idempotency record was stored with the decision.
    pub recorded: bool,
}

/// What the use case reads and writes.
pub struct Authorizations<'a> {
    /// Where presented credentials are looked up.
    pub store: &'a dyn Store,
    /// What the decision is made with.
    pub deciding: Deciding<'a>,
    /// The decimals of the x402 assets the operator lists.
    pub x402_assets: &'a ListedAssets,
    /// Now.
    pub now: OffsetDateTime,
}

/// A request with the protocols it presents bound: what the decision is made from.
struct Bound {
    request: AuthorizationRequest,
    credential: Option<Credential>,
    bindings: Bindings,
}

impl Authorizations<'_> {
    /// Decides `command`'s request and stores the decision: the answer as committed.
    pub async fn authorize(&self, command: Authorize<'_>) -> Result<Authorized, AuthorizeError> {
        let Authorize {
            agent,
            body,
            slot,
            idempotency,
        } = command;
        let Bound {
            request,
            credential,
            bindings,
        } = self.bind(agent, body).await?;
        let decider = self.deciding.decider(agent.caller, self.now).await?;
        // The answer is sealed for its idempotency record before it is stored (again if the
        // decision is made again on fresh state).
        let seal = |answer: &[u8]| {
            idempotency
                .map(|claim| claim.record(201, answer))
                .transpose()
                .map_err(DecisionError::Encoding)
        };
        let input = Input::Request {
            request,
            slot,
            credential,
            bindings,
        };
        // Boxed: the decision's future is large, and this one is moved whole when made.
        let answer = Box::pin(decider.run(input, seal)).await?;
        Ok(Authorized {
            answer,
            recorded: idempotency.is_some(),
        })
    }

    /// Reads `body` once (the protocol members taken out, the request read from the rest;
    /// malformed JSON and a member repeated anywhere refused) and binds what it presents.
    /// With `acp`: the ACP allowance the request is made under (services/acp.rs); with
    /// `ap2`: the agent's AP2 closed payment mandate for exactly this payment
    /// (services/ap2.rs); either is a single-use credential. With `x402`: the payment the
    /// request is for. The members' shapes are judged before the request.
    async fn bind(&self, agent: AgentCaller<'_>, body: &[u8]) -> Result<Bound, AuthorizeError> {
        let AgentCaller { caller, agent } = agent;
        let AuthorizationBody {
            request,
            acp,
            ap2,
            x402,
        } = AuthorizationBody::from_json_bytes(agent.clone(), body)?;
        let allowance = acp.map(acp::allowance_member).transpose()?;
        let presentation = ap2.map(ap2::presentation).transpose()?;
        let request = request?;
        let mut bindings = Bindings {
            x402_payment: match &x402 {
                Some(x402) => x402::payment(x402, &request, self.x402_assets)?,
                None => None,
            },
            ..Bindings::default()
        };
        let credential = match (presentation, allowance) {
            (Some(_), Some(_)) => return Err(AcpError::WithAp2.into()),
            (Some(presentation), None) => {
                let presented = ap2::closed_mandate(
                    self.store,
                    caller,
                    agent,
                    &request,
                    &presentation,
                    self.now,
                )
                .await?;
                bindings.ap2_mandate = Some(presented.open_digest);
                bindings.ap2_transaction = Some(presented.transaction_id);
                Some(presented.credential)
            }
            (None, Some(allowance)) => {
                let presented =
                    acp::allowance(self.store, caller, agent, &request, &allowance, self.now)
                        .await?;
                bindings.acp_allowance = presented.bindings.acp_allowance;
                bindings.acp_checkout_session = presented.bindings.acp_checkout_session;
                presented.credential
            }
            (None, None) => None,
        };
        Ok(Bound {
            request,
            credential,
            bindings,
        })
    }
}
