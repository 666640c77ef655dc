//! The decision service: `POST /v1/authorizations` and the approval of a review both come
//! here to lock the agent, evaluate with the core, sign, store and update the agent's state.
//!
//! It runs in two steps so that the caller can seal the answer for its idempotency record
//! between them without this module knowing HTTP: [`Decider::decide`] locks the agent,
//! evaluates, signs and encodes the answer ([`Decided`], which holds the agent's lock);
//! `Decided::store` stores the decision with everything it implies in one transaction,
//! then updates the agent's state and lets go of the lock. The agent's state is taken out
//! of its slot meanwhile: a request cancelled or failed midway leaves the slot empty, and
//! the next one rebuilds the state from what was actually committed.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use mandate_core::{
    AuthorizationRequest, Bindings, DecisionId, Evaluation, Issuance, MandateId, Mode, Nonce,
    Signer, VerdictClaims,
};
use mandate_protocol::{
    history, id::ReviewId, jws::sign_payload, policy, policy::SingleUse, policy::evaluate_approval,
    policy::evaluate_presenting, review::Review,
};
use time::OffsetDateTime;
use tokio::sync::OwnedMutexGuard;

use super::agents::{AgentSlot, AgentState, AgentStates, Slot};
use super::modes::ModeCache;
use crate::clock::{fill_random, ms, ordered16};
use crate::model::decision::{Decision, TokenSignature};
use crate::model::leaves::Answered;
use crate::model::news::News;
use crate::model::{Caller, Env};
use crate::signing::KeyRing;
use crate::signing::leaf_tags::LeafTagKey;
use crate::storage::deciding::{DecidingStore, NewDecision, Recorded, Resolution};
use crate::storage::idempotency::IdempotencyRecord;
use crate::storage::{StorageError, Store};

/// Deciding failed.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    /// Storage could not be read or written.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The claims or the answer could not be encoded.
    #[error("encoding the decision: {0}")]
    Encoding(String),
    /// The claims could not be signed.
    #[error("signing: {0}")]
    Signing(String),
    /// The review was resolved by another request meanwhile.
    #[error("review {0} cannot be resolved: it was resolved by another request")]
    AlreadyResolved(ReviewId),
    /// Other server processes kept changing the agent while this decision was made, every
    /// time it was made for [`RETRY_BUDGET`]: nothing was stored.
    #[error(
        "agent {0} is being decided by other server processes right now; nothing was stored: retry after 1 s (a POST with the same Idempotency-Key)"
    )]
    Contended(mandate_core::AgentId),
    /// The request's claim on its Idempotency-Key ran out while it was being decided and
    /// another request with the key took it over: nothing was stored for this one.
    #[error(
        "this request took longer than its claim on its Idempotency-Key lasts, and another request with the key took over; nothing was stored for this one: retry with the same Idempotency-Key to get that request's answer"
    )]
    ClaimLost,
    /// The single-use credential was checked against one mandate of the agent, and by the
    /// time the decision held the agent's lock another mandate was in force: nothing was
    /// stored and the credential was not accepted.
    #[error(
        "agent {agent}'s mandate was replaced while its credential was being checked against {checked}; nothing was stored and the credential is unused: send the request again (with the same Idempotency-Key)"
    )]
    MandateReplaced {
        /// The agent.
        agent: mandate_core::AgentId,
        /// The mandate the credential was checked against.
        checked: MandateId,
    },
}

/// A single-use credential presented with a request (an AP2 closed payment mandate), as
/// the route checked it: its id, and the mandate it was checked against. The decision is
/// made only if that mandate is still the agent's under the agent's lock, so that a
/// credential is never accepted, nor its bindings signed, under a mandate that replaced it.
#[derive(Debug, Clone)]
pub struct Credential {
    /// The credential's single-use id.
    pub id: String,
    /// The mandate it was checked against.
    pub mandate: MandateId,
}

/// How long, from its first refusal, a decision is made again when the store keeps
/// refusing it because the agent changed meanwhile (on a database shared by several
/// processes). A budget of time, not a number of attempts: on a loaded machine each attempt
/// waits longer for its commit while the odds of losing one stay the same, so a fixed count
/// gave up on ordinary contention (three processes deciding for one agent at once).
pub const RETRY_BUDGET: Duration = Duration::from_secs(5);

/// What a decision is about.
#[derive(Debug)]
pub enum Input {
    /// An agent's request. `slot`: its agent's slot, when the caller already holds it (an
    /// agent key's cached entry keeps it), saving a lookup in the map of every agent.
    Request {
        /// The request, parsed.
        request: AuthorizationRequest,
        /// The agent's slot, if at hand.
        slot: Option<AgentSlot>,
        /// The single-use credential presented with it (an AP2 closed payment mandate), if
        /// any, with the mandate it was checked against: `deny_replay` if a decision accepted it before;
        /// accepted (stored with the decision) by an `allow` or `review`.
        credential: Option<Credential>,
        /// What the verdict is bound to besides the request (an AP2 mandate's digest and
        /// transaction id, an x402 payment's digest): signed as claims, stored with it.
        bindings: Bindings,
    },
    /// The approval of a review: the review in its approved state (naming the fresh
    /// decision's id) and the decision that opened it.
    Approval {
        /// The review, approved.
        approved: Review,
        /// The decision that opened it (boxed: a request is the common case).
        original: Box<Decision>,
    },
}

/// An [`Input`] taken apart: what every decision is made from, and the approval when it is
/// one.
struct Parts {
    request: AuthorizationRequest,
    slot: Option<AgentSlot>,
    credential: Option<Credential>,
    bindings: Bindings,
    approval: Option<(Review, Box<Decision>)>,
}

impl Input {
    /// The request decided (an approval's is its original decision's, bound to what that
    /// one was), with the rest of the input.
    fn into_parts(self) -> Parts {
        match self {
            Self::Request {
                request,
                slot,
                credential,
                bindings,
            } => Parts {
                request,
                slot,
                credential,
                bindings,
                approval: None,
            },
            Self::Approval { approved, original } => Parts {
                request: original.claims.request.clone(),
                slot: None,
                credential: None,
                // The fresh decision is bound to what the original was.
                bindings: original.claims.bindings.clone(),
                approval: Some((approved, original)),
            },
        }
    }
}

/// Whether `credential` was checked against the mandate the agent's `state` has now: if
/// another replaced it meanwhile, nothing may be decided under the credential.
fn still_under(
    credential: &Credential,
    state: &AgentState,
    agent: &mandate_core::AgentId,
) -> Result<(), DecisionError> {
    if state.mandate.as_ref().map(|m| &m.id) == Some(&credential.mandate) {
        Ok(())
    } else {
        Err(DecisionError::MandateReplaced {
            agent: agent.clone(),
            checked: credential.mandate.clone(),
        })
    }
}

/// A review a decision opens, with its event's data (the decision as JSON).
type Opened = (Review, String);

/// Claims as signed: the claims, the token and the claims' JSON exactly as signed.
struct Signed {
    claims: VerdictClaims,
    token: String,
    claims_json: Vec<u8>,
}

/// What every decision is made with, whoever asks: where it is stored, the agents' locks,
/// where committed decisions go for the workers, the enforcement modes, the signing keys and
/// the issuer. [`Deciding::decider`] adds who asks and when.
#[derive(Clone, Copy)]
pub struct Deciding<'a> {
    /// Where decisions are read from and stored, and the modes loaded.
    pub store: &'a dyn Store,
    /// The agents' locks and cached states.
    pub agents: &'a AgentStates,
    /// Where a committed decision's leaf hash waits for the decision log's worker.
    pub leaves: &'a Answered,
    /// What this process stored that its workers act on at once.
    pub news: &'a News,
    /// The enforcement modes in memory.
    pub modes: &'a ModeCache,
    /// The signing keys: each environment's current signer.
    pub keys: &'a RwLock<KeyRing>,
    /// `iss` of every token.
    pub issuer: &'a str,
}

impl<'a> Deciding<'a> {
    /// The decider for `caller`'s organization and environment at `now`: with the
    /// environment's current signer, in the mode in force ([`ModeCache::in_force`], the one
    /// place a decision's mode comes from; a fresher one read with the agent's state wins
    /// when the decision is made).
    pub async fn decider(
        &self,
        caller: &'a Caller,
        now: OffsetDateTime,
    ) -> Result<Decider<'a>, DecisionError> {
        let (signer, leaf_tag) = {
            let ring = self.keys.read().unwrap_or_else(|p| p.into_inner());
            let signer = ring.signer(caller.env).ok_or_else(|| {
                DecisionError::Signing(format!("no signing key for {}", caller.env.as_str()))
            })?;
            (signer, ring.leaf_tag_key(caller.env))
        };
        let mode = self
            .modes
            .in_force(self.store, &caller.org_id, caller.env)
            .await?;
        Ok(Decider {
            store: self.store,
            agents: self.agents,
            leaves: self.leaves,
            news: self.news,
            modes: self.modes,
            signer,
            leaf_tag,
            issuer: self.issuer,
            org: &caller.org_id,
            env: caller.env,
            policy_version: &caller.policy_version,
            mode,
            now,
        })
    }
}

/// Everything a decision is made with: where it is stored, the agents' locks, the signer,
/// and who decides in which mode and when.
pub struct Decider<'a> {
    /// Where decisions are read from and stored.
    pub store: &'a dyn DecidingStore,
    /// The agents' locks and cached states.
    pub agents: &'a AgentStates,
    /// Where a committed decision's leaf hash waits for the decision log's worker.
    pub leaves: &'a Answered,
    /// Where a committed decision names its log, and a review it opens or resolves its
    /// organization's events, for the workers.
    pub news: &'a News,
    /// The enforcement modes in memory: a mode read with an agent's fresh state goes there.
    pub modes: &'a ModeCache,
    /// The environment's current signer.
    pub signer: Arc<dyn Signer>,
    /// Its leaf tag key: the stored decision carries its token's leaf tag
    /// (`signing::leaf_tags`), which the log's worker of another process checks.
    pub leaf_tag: Option<LeafTagKey>,
    /// `iss` of the token.
    pub issuer: &'a str,
    /// The organization.
    pub org: &'a Arc<str>,
    /// The environment.
    pub env: Env,
    /// The organization's policy version, stamped on the decision.
    pub policy_version: &'a str,
    /// The mode in force.
    pub mode: Mode,
    /// Now.
    pub now: OffsetDateTime,
}

/// A decision made and signed, not yet stored: it holds its agent's lock until
/// it is stored (or until dropped, which leaves the agent's state to be rebuilt).
#[must_use = "a decision is answered only once committed"]
pub struct Decided<'a> {
    store: &'a dyn DecidingStore,
    leaves: &'a Answered,
    news: &'a News,
    org: Arc<str>,
    env: Env,
    now: OffsetDateTime,
    guard: OwnedMutexGuard<Slot>,
    state: AgentState,
    evaluation: Evaluation,
    decision: Decision,
    /// The review this decision opens, with its event's data.
    opened: Option<Opened>,
    /// On an approval, the review approved and the decision that opened it.
    approved: Option<(Review, Box<Decision>)>,
    /// The single-use credential presented with the request, if any, and the mandate it
    /// was checked against.
    presented: Option<(SingleUse, MandateId)>,
    /// The token answered, handed to the log's worker once the decision is committed.
    token: String,
    body: Vec<u8>,
}

/// What storing a decision came to.
enum Stored {
    /// Committed: the answer.
    Answer(Vec<u8>),
    /// Refused: the request's Idempotency-Key claim is no longer its own.
    ClaimLost,
    /// Refused because the agent changed meanwhile: the input, to decide again.
    Changed(Box<Input>),
}

impl<'a> Decider<'a> {
    /// Decides ([`Decider::decide`]), seals the answer for its idempotency record
    /// (`seal`: `None` when the request has none), and stores it; made
    /// again on the agent's state reloaded from the database, sealed and signed anew, when
    /// the store says the agent changed meanwhile. Returns the answer.
    pub async fn run<F>(&self, input: Input, mut seal: F) -> Result<Vec<u8>, DecisionError>
    where
        F: FnMut(&[u8]) -> Result<Option<IdempotencyRecord>, DecisionError>,
    {
        let mut input = input;
        // Started at the first refusal: a decision stored at once never reads the clock.
        let mut retries: Option<Retries> = None;
        loop {
            // Deciding and storing are boxed: their futures are large, and this one is moved
            // whole each time a future around it is made.
            let decided = Box::pin(self.decide(input)).await?;
            let record = seal(decided.body())?;
            match Box::pin(decided.store(record)).await? {
                Stored::Answer(body) => return Ok(body),
                Stored::ClaimLost => return Err(DecisionError::ClaimLost),
                Stored::Changed(again) => {
                    let mut random = [0u8; 2];
                    fill_random(&mut random);
                    let now = Instant::now();
                    let retries = retries.get_or_insert_with(|| Retries::new(now));
                    match retries.next(now, u16::from_le_bytes(random)) {
                        Some(wait) => {
                            if !wait.is_zero() {
                                tokio::time::sleep(wait).await;
                            }
                            input = *again;
                        }
                        None => {
                            let agent = match *again {
                                Input::Request { request, .. } => request.agent,
                                Input::Approval { original, .. } => original.claims.request.agent,
                            };
                            return Err(DecisionError::Contended(agent));
                        }
                    }
                }
            }
        }
    }

    /// Locks the input's agent, evaluates it against the agent's current mandate and
    /// history, signs the claims and encodes the answer.
    pub async fn decide(&self, input: Input) -> Result<Decided<'a>, DecisionError> {
        let Parts {
            request,
            slot,
            credential,
            bindings,
            approval,
        } = input.into_parts();
        let agent = request.agent.clone();
        let slot = slot.unwrap_or_else(|| self.agents.slot(self.org, self.env, &agent));
        let mut guard =
            AgentStates::lock_slot(slot, self.store, self.org, self.env, &agent, self.now).await?;
        let mut state = guard
            .take()
            .ok_or_else(|| StorageError::Task("agent state not loaded".into()))?;
        let mode = self.mode_with(&mut state);
        // Read under the agent's lock: an earlier acceptance by this agent is committed.
        let presented = match credential {
            Some(credential) => {
                if let Err(replaced) = still_under(&credential, &state, &agent) {
                    // The state is still the agent's: it goes back into the slot.
                    *guard = Some(state);
                    return Err(replaced);
                }
                // Failing here leaves the slot empty: the next decision rebuilds the state.
                Some(self.single_use(credential).await?)
            }
            None => None,
        };
        let mandate = state.mandate.as_ref();
        let evaluation = match &approval {
            None => evaluate_presenting(
                mandate,
                &request,
                &state.history,
                presented.as_ref().map(|(single_use, _)| single_use),
                mode,
                self.now,
            ),
            // The mode in force at approval decides whether the re-check's finding blocks.
            Some(_) => evaluate_approval(mandate, &request, &state.history, mode, self.now),
        };
        let (jti, supersedes) = self.ids(approval.as_ref())?;
        // The request itself is not needed after this: its fields move into the claims.
        let claims = request;
        let (claims, token, claims_json) =
            self.sign(jti, &evaluation, mandate, claims, bindings)?;
        let signed = Signed {
            claims,
            token,
            claims_json,
        };
        let (decision, token, body, opened) =
            self.answer(signed, &evaluation, mode, supersedes, approval.is_none())?;
        Ok(Decided {
            store: self.store,
            leaves: self.leaves,
            news: self.news,
            org: Arc::clone(self.org),
            env: self.env,
            now: self.now,
            guard,
            state,
            evaluation,
            decision,
            opened,
            approved: approval,
            presented,
            token,
            body,
        })
    }

    /// The mode a decision is made in: one read with the agent's state just now (an engine
    /// shared by processes) is fresher than the cached one, so it decides and the cache
    /// takes it; otherwise the mode in force.
    fn mode_with(&self, state: &mut AgentState) -> Mode {
        match state.mode.take() {
            Some(read) => {
                if read != self.mode {
                    self.modes.set(self.org, self.env, read);
                }
                read
            }
            None => self.mode,
        }
    }

    /// The single-use credential presented, with whether a decision accepted it before
    /// (read under the agent's lock), and the mandate it was checked against.
    async fn single_use(
        &self,
        credential: Credential,
    ) -> Result<(SingleUse, MandateId), DecisionError> {
        let Credential { id, mandate } = credential;
        let already_accepted = self
            .store
            .credential_accepted(Arc::clone(self.org), self.env, id.clone())
            .await?;
        Ok((
            SingleUse {
                id,
                already_accepted,
            },
            mandate,
        ))
    }

    /// The new decision's id, and the decision it supersedes: a request's is fresh; an
    /// approval's is the one its review names, superseding the decision that opened it.
    fn ids(
        &self,
        approval: Option<&(Review, Box<Decision>)>,
    ) -> Result<(DecisionId, Option<DecisionId>), DecisionError> {
        match approval {
            None => Ok((DecisionId::from_random(ordered16(self.now)), None)),
            Some((approved, original)) => {
                let fresh = approved.resolution.clone().ok_or_else(|| {
                    DecisionError::Encoding(format!("review {} names no decision", approved.id))
                })?;
                Ok((fresh, Some(original.claims.jti.clone())))
            }
        }
    }

    /// The decision of the `signed` claims as stored, its token, its answer's body, and the
    /// review it opens (a request's `review` verdict) with its event's data.
    fn answer(
        &self,
        signed: Signed,
        evaluation: &Evaluation,
        mode: Mode,
        supersedes: Option<DecisionId>,
        is_request: bool,
    ) -> Result<(Decision, String, Vec<u8>, Option<Opened>), DecisionError> {
        let Signed {
            claims,
            token,
            claims_json,
        } = signed;
        let opens_review = is_request && policy::opens_review(evaluation);
        let review = opens_review.then(|| {
            Review::open(
                ReviewId::from_random(ordered16(self.now)),
                claims.jti.clone(),
                self.now,
            )
        });
        let decision = Decision {
            claims,
            reason: evaluation.reason.as_ref().map(ToString::to_string),
            mode,
            supersedes,
            review: review.as_ref().map(|r| r.id.clone()),
            created_ms: ms(self.now),
            is_request,
            review_state: None,
            signature: TokenSignature::of(self.signer.kid(), &token).map(|mut s| {
                s.tag = s.leaf.zip(self.leaf_tag.as_ref()).map(|(l, k)| k.tag(&l));
                s
            }),
        };
        let encoding = |e: serde_json::Error| DecisionError::Encoding(e.to_string());
        let body = decision
            .answer_json(&token, review.as_ref(), Some(&claims_json))
            .map_err(encoding)?;
        // The event's data, encoded here rather than on the writer thread that all share.
        let opened = match review {
            Some(review) => {
                let json = decision.view_json(Some(&claims_json)).map_err(encoding)?;
                let json =
                    String::from_utf8(json).map_err(|e| DecisionError::Encoding(e.to_string()))?;
                Some((review, json))
            }
            None => None,
        };
        Ok((decision, token, body, opened))
    }

    /// Builds and signs the claims of a new decision: issuer, `exp = iat + 300`, a fresh
    /// nonce, the policy version, the mandate it was judged under and what it is bound to
    /// (`bindings`). Returns the claims,
    /// the token and the claims' JSON exactly as signed.
    fn sign(
        &self,
        jti: DecisionId,
        evaluation: &Evaluation,
        mandate: Option<&mandate_core::Mandate>,
        request: AuthorizationRequest,
        bindings: Bindings,
    ) -> Result<(VerdictClaims, String, Vec<u8>), DecisionError> {
        let issuance = Issuance {
            issuer: self.issuer.to_owned(),
            jti,
            nonce: Nonce::from_random(ordered16(self.now)),
            policy_version: self.policy_version.to_owned(),
            issued_at: self.now,
        };
        let claims =
            VerdictClaims::new(request, evaluation, mandate.map(|m| m.id.clone()), issuance)
                .with_bindings(bindings);
        let claims_json =
            serde_json::to_vec(&claims).map_err(|e| DecisionError::Encoding(e.to_string()))?;
        let token = sign_payload(self.signer.as_ref(), &claims_json)
            .map_err(|e| DecisionError::Signing(e.to_string()))?;
        Ok((claims, token, claims_json))
    }
}

impl Decided<'_> {
    /// The answer: the decision object with its token (and the review it opened).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Stores the decision, and what it implies, in one transaction (with `idempotency`,
    /// the answer kept under the request's Idempotency-Key); then counts it in the agent's
    /// history and lets go of the agent's lock. When the store refused the decision because
    /// the agent changed (another process decided first), the input is given back, the
    /// agent's state is dropped from its slot (the next decision reloads it) and nothing
    /// was stored.
    async fn store(self, idempotency: Option<IdempotencyRecord>) -> Result<Stored, DecisionError> {
        let Self {
            store,
            leaves,
            news,
            org,
            env,
            now,
            mut guard,
            mut state,
            evaluation,
            decision,
            opened,
            approved,
            presented,
            token,
            body,
        } = self;
        let amount = decision.claims.request.amount;
        // The token answered and its decision log leaf (made with its signature), for the
        // log's worker.
        let answered = decision
            .signature
            .as_ref()
            .and_then(|s| s.leaf)
            .map(|leaf| (leaf, token.into_boxed_str()));
        let id = decision.claims.jti.clone();
        let told = Told::of(&org, env, opened.is_some() || approved.is_some());
        let labels = (
            env.as_str(),
            evaluation.verdict.as_str(),
            evaluation.policy_verdict.as_str(),
        );
        // What to decide again with, if the agent changed meanwhile.
        let slot = || Some(Arc::clone(OwnedMutexGuard::mutex(&guard)));
        match approved {
            None => {
                let recorded = store
                    .record_decision(NewDecision {
                        org,
                        env,
                        decision,
                        review: opened,
                        idempotency,
                        hint: state.stored,
                        accepts: presented
                            .as_ref()
                            .filter(|(single_use, _)| {
                                policy::accepts(&evaluation, Some(single_use))
                            })
                            .map(|(single_use, _)| single_use.id.clone()),
                    })
                    .await?;
                match recorded {
                    Recorded::Stored(hint) => state.stored = hint,
                    Recorded::ClaimLost => {
                        // Nothing was stored: the state is still the agent's.
                        *guard = Some(state);
                        return Ok(Stored::ClaimLost);
                    }
                    Recorded::Changed(new) => {
                        // The slot stays empty: the next decision reloads the agent.
                        return Ok(decide_again(*new, slot(), presented));
                    }
                }
                state.history.record(&evaluation, amount, now);
            }
            Some((review, original)) => {
                let id = review.id.clone();
                let at_ms = decision.created_ms;
                let resolution = Resolution {
                    org,
                    env,
                    review: review.clone(),
                    decision: Some(decision),
                    at_ms,
                    hint: state.stored,
                };
                match store.resolve_review(resolution).await {
                    Ok(Some(hint)) => state.stored = hint,
                    Ok(None) => {
                        *guard = Some(state);
                        return Err(DecisionError::AlreadyResolved(id));
                    }
                    Err(StorageError::Conflict) => {
                        return Ok(Stored::Changed(Box::new(Input::Approval {
                            approved: review,
                            original,
                        })));
                    }
                    Err(e) => return Err(e.into()),
                }
                // An approval is no request (velocity): only its allow counts, as spend.
                if evaluation.verdict == mandate_core::Verdict::Allow {
                    history::spend_mut(&mut state.history).add(amount, now);
                }
            }
        }
        *guard = Some(state);
        told.tell(leaves, news, id, answered);
        crate::telemetry::record_decision(labels.0, labels.1, labels.2);
        Ok(Stored::Answer(body))
    }
}

/// What the workers are told of a stored decision: its log has news, and, when it opened a
/// review or resolved one, so have its organization's events.
struct Told {
    org: Arc<str>,
    env: Env,
    evented: bool,
}

impl Told {
    /// What the workers are told of a decision of `org` in `env` (`evented`: it opened or
    /// resolved a review).
    fn of(org: &Arc<str>, env: Env, evented: bool) -> Self {
        Self {
            org: Arc::clone(org),
            env,
            evented,
        }
    }

    /// Leaves the decision `id`'s token as answered for the log's worker and tells the
    /// workers.
    fn tell(
        self,
        leaves: &Answered,
        news: &News,
        id: DecisionId,
        answered: Option<crate::model::leaves::Token>,
    ) {
        if let Some(answered) = answered {
            leaves.keep(id, answered);
        }
        news.decided(&self.org, self.env);
        if self.evented {
            news.evented(&self.org);
        }
    }
}

/// A request whose decision the store refused because its agent changed meanwhile, to be
/// decided again: its request, bindings and single-use credential, and the agent's slot.
fn decide_again(
    new: NewDecision,
    slot: Option<AgentSlot>,
    presented: Option<(SingleUse, MandateId)>,
) -> Stored {
    let bindings = new.decision.claims.bindings.clone();
    Stored::Changed(Box::new(Input::Request {
        request: new.decision.claims.request,
        slot,
        credential: presented.map(|(single_use, mandate)| Credential {
            id: single_use.id,
            mandate,
        }),
        bindings,
    }))
}

/// The retries of one decision that the store refused because its agent changed meanwhile.
#[derive(Debug)]
struct Retries {
    /// When the decision was first refused.
    started: Instant,
    /// How many times it was refused.
    refused: u32,
}

impl Retries {
    fn new(started: Instant) -> Self {
        Retries {
            started,
            refused: 0,
        }
    }

    /// After a refusal at `now`: the wait before deciding again, or `None` once
    /// [`RETRY_BUDGET`] is spent. No wait the first time (the usual cause is a state cached
    /// before another process decided), then up to 1, 2, 4, ... 32 ms, the fraction
    /// `random / u16::MAX` of it, so that processes deciding for one agent at once stop
    /// colliding.
    fn next(&mut self, now: Instant, random: u16) -> Option<Duration> {
        self.refused += 1;
        if now.saturating_duration_since(self.started) >= RETRY_BUDGET {
            return None;
        }
        if self.refused < 2 {
            return Some(Duration::ZERO);
        }
        let ceiling_us = 1000u64 << (self.refused - 2).min(5);
        let wait_us = ceiling_us * u64::from(random) / u64::from(u16::MAX);
        Some(Duration::from_micros(wait_us))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    /// A decision refused again and again is made again for the whole budget, however long
    /// each attempt takes: slow attempts (a loaded machine) still get many more retries
    /// than a fixed count would allow; then it gives up.
    #[test]
    fn a_refused_decision_is_retried_for_the_budget_not_a_number_of_times() {
        let started = Instant::now();
        let mut retries = Retries::new(started);
        let mut now = started;
        let mut attempts = 1;
        while let Some(wait) = retries.next(now, u16::MAX) {
            assert!(wait <= Duration::from_millis(32), "{wait:?}");
            now += wait + Duration::from_millis(50);
            attempts += 1;
            assert!(attempts < 1000, "never gives up");
        }
        assert!(now.duration_since(started) >= RETRY_BUDGET);
        assert!((60..=100).contains(&attempts), "{attempts} attempts");
    }

    /// The first retry is at once; later waits are the random fraction of a ceiling that
    /// doubles from 1 ms up to 32 ms.
    #[test]
    fn waits_grow_to_a_ceiling_and_scale_with_the_random_draw() {
        let started = Instant::now();
        let mut retries = Retries::new(started);
        let ceilings: Vec<Duration> = (0..9)
            .map(|_| retries.next(started, u16::MAX).unwrap())
            .collect();
        let ms = Duration::from_millis;
        assert_eq!(
            ceilings,
            [
                ms(0),
                ms(1),
                ms(2),
                ms(4),
                ms(8),
                ms(16),
                ms(32),
                ms(32),
                ms(32)
            ]
        );
        assert_eq!(retries.next(started, 0), Some(Duration::ZERO));
        assert_eq!(
            retries.next(started, u16::MAX / 2),
            Some(Duration::from_micros(15_999))
        );
        assert_eq!(retries.next(started + RETRY_BUDGET, u16::MAX), None);
    }
}
