//! # mandate-core
//!
//! The pure heart of Mandate: types parsed at the edge, mandates, the policy evaluator,
//! verdict and event claims, ES256 JWS signing and verification, JWK Sets, cursor tokens,
//! and the review and escrow state machines.
//!
//! This crate does **no I/O**: it reads no clock, draws no random numbers, opens no file or
//! socket and spawns nothing. The caller passes `now` and random bytes in. That makes every
//! rule a function that can be tested exhaustively and embedded in any service.
//!
//! # Example
//!
//! From a mandate to a verified verdict: parse a mandate draft, evaluate a request against
//! it, sign the verdict as an ES256 JWT, publish the public key in a JWK Set, and verify the
//! token the way a counterparty would, in one call ([`Counterparty::check`]). What an
//! embedder uses is re-exported here at the root; docs/embedding.md in the repository is
//! the guide.
//!
//! ```
//! use mandate_core::{
//!     AgentHistory, AgentId, Amount, AuthorizationRequest, Counterparty, DecisionId,
//!     ExpectedTransaction, Issuance, JwkSet, Mandate, MandateDraft, MandateId, MandateStatus,
//!     MemoryReplayGuard, Mode, Nonce, P256Signer, Signer, Verdict, VerdictClaims, evaluate,
//!     sign_token,
//! };
//! use time::OffsetDateTime;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The caller owns the clock: 2026-11-22T12:00:00Z.
//! let now = OffsetDateTime::from_unix_timestamp(1_795_348_800)?;
//!
//! // A mandate body as the API receives it. Amounts are read from the JSON number's text,
//! // so parse from a string (serde_json's `json!` macro would go through `f64`).
//! let body = serde_json::from_str(
//!     r#"{
//!         "agent": "agt_buyer",
//!         "limits": {"per_transaction": 100.00, "per_month": 1000, "currency": "USD"},
//!         "categories": ["software", "travel"],
//!         "review_above": 50,
//!         "expires": "2026-12-31"
//!     }"#,
//! )?;
//! let mandate = Mandate {
//!     // Random ids are made from bytes the caller draws; fixed here for the example.
//!     id: MandateId::from_random([1; 16]),
//!     terms: MandateDraft::from_json(&body)?,
//!     status: MandateStatus::Active,
//!     created_at: now,
//! };
//!
//! // The agent asks to spend 42.50 USD on software.
//! let agent = AgentId::parse("agt_buyer")?;
//! let request = AuthorizationRequest::from_json(
//!     agent,
//!     &serde_json::from_str(
//!         r#"{"amount": 42.50, "currency": "USD",
//!             "recipient": "vendor:acme", "category": "software"}"#,
//!     )?,
//! )?;
//! let mut history = AgentHistory::default();
//! let evaluation = evaluate(Some(&mandate), &request, &history, Mode::Enforce, now);
//! assert_eq!(evaluation.verdict, Verdict::Allow);
//! history.record(&evaluation, request.amount, now);
//! let (amount, currency, recipient) =
//!     (request.amount, request.currency.clone(), request.recipient.clone());
//!
//! // The claims that are signed: the request, the evaluation and the issuer's values.
//! let issuance = Issuance {
//!     issuer: "https://verdicts.example".to_owned(),
//!     jti: DecisionId::from_random([2; 16]),
//!     nonce: Nonce::from_random([3; 16]),
//!     policy_version: "pol_2026-11-01.1".to_owned(),
//!     issued_at: now,
//! };
//! let claims = VerdictClaims::new(request, &evaluation, Some(mandate.id.clone()), issuance);
//!
//! // Fixed secret bytes keep the example deterministic. In production the 32 bytes come
//! // from the operating system's RNG (for example `getrandom`) in the server, and are kept
//! // wherever secrets belong: this crate draws no random numbers itself.
//! let signer = P256Signer::from_secret_bytes("live-1", &[7; 32])?;
//! let token = sign_token(&signer, &claims)?;
//!
//! // The server publishes its public keys; a counterparty fetches and parses the set.
//! let published = serde_json::to_vec(&JwkSet { keys: vec![signer.public_jwk()] })?;
//! let jwks = JwkSet::from_json(&published)?;
//!
//! // The whole counterparty check, in one call: signature, issuer, expiry, a live key,
//! // `allow`, this transaction, and a nonce never accepted before.
//! let expected = ExpectedTransaction::new(amount, currency, recipient);
//! let mut accepted = MemoryReplayGuard::default();
//! let verified = Counterparty::new("https://verdicts.example").check(
//!     &token,
//!     &jwks,
//!     &expected,
//!     &mut accepted,
//!     now + time::Duration::seconds(10),
//! )?;
//! assert_eq!(verified.claims.verdict, Verdict::Allow);
//! assert_eq!(verified.claims.request.amount, Amount::parse("42.50")?);
//! assert_eq!(verified.claims.request.amount.to_string(), "42.50");
//! assert_eq!(verified.claims, claims);
//! # Ok(())
//! # }
//! ```
//!
//! # What is here
//!
//! Everything an embedder uses is at the crate root; the crate has no modules.
//!
//! - Money, names and identifiers, parsed at the edge: [`Amount`] (exact, from the JSON
//!   number's text), [`Currency`], [`Recipient`], [`Category`], [`AgentName`],
//!   [`Principal`], and the prefixed ids ([`AgentId`], [`MandateId`], [`DecisionId`],
//!   [`EventId`], [`Nonce`]).
//! - Mandates and the engine: [`MandateDraft::from_json`], [`Mandate`] and its status at a
//!   moment, [`AgentHistory`] (the velocity window and the spend to date), and
//!   [`evaluate`], from a mandate and an [`AuthorizationRequest`] to an [`Evaluation`]
//!   carrying its [`Verdict`] and [`Reason`].
//! - Request bodies read so that every error names the field: [`parse_body`],
//!   [`FieldError`].
//! - Verdicts and events as signed claims ([`VerdictClaims`], [`EventClaims`]), ES256
//!   signing ([`Signer`], [`P256Signer`], [`sign_token`]), JWK Sets ([`JwkSet`]), when to
//!   fetch them again ([`KeySetCache`]), verification ([`verify_verdict`],
//!   [`verify_event`]), and the whole check a counterparty runs before it settles, in one
//!   call ([`Counterparty::check`]), the signing key's [`Environment`] included.
//! - Pagination cursors bound to a list, its filters and a scope: [`CursorKey`].
//! - The payment protocols: ACP allowances ([`Allowance`]), AP2 open and closed payment
//!   mandates ([`verify_open_mandate`], [`verify_closed_mandate`]), x402 payment
//!   requirements ([`PaymentRequirements`]).
//! - The transparency log, as a counterparty checks that a verdict is in it: [`LogKeys`],
//!   [`LogEntry`], [`Checkpoint`].
//!
//! This crate is the face of `mandate-protocol`, which holds the implementation and what
//! Mandate's own server, CLI and benchmarks use besides (the HTTP API's wire types, the
//! review, escrow and delivery state machines, the issuer's side of the transparency log,
//! ...), with no stability promise.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

// Money, names and identifiers, parsed at the edge.
#[doc(inline)]
pub use mandate_protocol::amount::{Amount, AmountError};
#[doc(inline)]
pub use mandate_protocol::id::{AgentId, DecisionId, EventId, IdError, MandateId, Nonce};
#[doc(inline)]
pub use mandate_protocol::names::{AgentName, Category, Currency, NameError, Principal, Recipient};

// Mandates, the agent's history and the engine.
#[doc(inline)]
pub use mandate_protocol::history::AgentHistory;
#[doc(inline)]
pub use mandate_protocol::mandate::{
    CountLimits, EscrowTerms, Limits, Mandate, MandateDraft, MandateStatus, RecipientPattern,
    RecipientRefusal, Recipients,
};
#[doc(inline)]
pub use mandate_protocol::policy::{
    AuthorizationRequest, CountWindow, Evaluation, Mode, Reason, RequestBodyError, SpendWindow,
    Verdict, evaluate,
};

// Request bodies read so that every error names the field.
#[doc(inline)]
pub use mandate_protocol::field::{BodyError, FieldError, parse_body};

// Verdict and event claims, signing, and verification.
#[doc(inline)]
pub use mandate_protocol::claims::{
    Bindings, EventClaims, Issuance, VERDICT_LIFETIME_SECS, VerdictClaims,
};
#[doc(inline)]
pub use mandate_protocol::counterparty::{
    CheckError, Counterparty, EnvironmentPolicy, ExpectedTransaction, MemoryReplayGuard, Objection,
    ReplayGuard, ReplayGuardError, Seen, VerifiedVerdict,
};
#[doc(inline)]
pub use mandate_protocol::environment::{Environment, token_kid};
#[doc(inline)]
pub use mandate_protocol::jwk::{Jwk, JwkError, JwkSet};
#[doc(inline)]
pub use mandate_protocol::jwks_cache::{CachePolicy, KeySetCache, NextFetch};
#[doc(inline)]
pub use mandate_protocol::jws::{
    P256Signer, SignError, Signer, TokenError, TokenPart, VerifyOptions, sign_token, verify_event,
    verify_verdict,
};

// Pagination cursors.
#[doc(inline)]
pub use mandate_protocol::cursor::{CursorContext, CursorError, CursorKey};

// The payment protocols: ACP allowances, AP2 mandates, x402 requirements.
#[doc(inline)]
pub use mandate_protocol::acp::{Allowance, AllowanceMismatch};
#[doc(inline)]
pub use mandate_protocol::ap2::{
    Ap2Error, ClosedMandate, OpenMandate, verify_closed_mandate, verify_open_mandate,
};
#[doc(inline)]
pub use mandate_protocol::x402::{Inconsistency, PaymentRequirements};

// The transparency log, as a counterparty checks that a verdict is in it.
#[doc(inline)]
pub use mandate_protocol::tlog::{
    Checkpoint, CheckpointError, LogEntry, LogError, LogKeys, NoteError,
};
