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
//! # Modules
//!
//! - [`amount`]: exact, non-negative money amounts read from JSON number text.
//! - [`ap2`]: AP2 open payment mandates (SD-JWT VCs) verified and mapped onto Mandate
//!   terms, closed payment mandates verified against them.
//! - [`budget`]: what a mandate still allows at a moment, limit by limit (`remaining`).
//! - [`claims`]: the claims of signed verdicts and webhook events.
//! - [`counterparty`]: the whole check a counterparty runs before it settles, in one call.
//! - [`cursor`]: HMAC-signed, expiring pagination cursors bound to a list, filters and scope.
//! - [`delivery`]: event types and the webhook retry schedule as pure decisions.
//! - [`environment`]: which environment, sandbox or live, signed a token (by its `kid`).
//! - [`escrow`]: the escrow state machine as one pure transition function.
//! - [`field`]: reading JSON bodies field by field, with errors that name the field.
//! - [`funding`]: which decision may fund which escrow (an unexpired `allow` of the buyer
//!   for the same amount, currency and recipient).
//! - [`history`]: an agent's velocity window and month-to-date spend.
//! - [`id`]: prefixed object identifiers (`dec_`, `mnd_`, `agt_`, ...).
//! - [`idempotency`]: what to do with a request given what is stored under its key.
//! - [`jwk`]: ES256 public JWKs, and JWK Sets that skip keys of other kinds.
//! - [`jwks_cache`]: when to fetch a JWK Set again (`Cache-Control`, unknown kids).
//! - [`jws`]: ES256 compact JWS signing and verification of verdicts and events.
//! - [`mandate`]: mandate drafts, stored mandates and their status at a given time.
//! - [`names`]: agent names, recipients, principals, categories and currencies.
//! - [`policy`]: the policy engine, from a mandate and a request to a verdict.
//! - [`review`]: the human-review state machine.
//! - [`timefmt`]: the one timestamp format on the wire (RFC 3339 in UTC, whole seconds).
//! - [`wire`]: the error and list envelopes shared by the server and its clients.
//! - [`x402`]: x402 v2 payment requirements, their digest (the `x402_payment` claim) and
//!   how they compare with a request.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod amount;
pub mod ap2;
pub mod budget;
pub mod claims;
pub mod counterparty;
pub mod cursor;
pub mod delivery;
pub mod environment;
pub mod escrow;
pub mod field;
pub mod funding;
pub mod history;
pub mod id;
pub mod idempotency;
pub mod jwk;
pub mod jwks_cache;
pub mod jws;
pub mod mandate;
pub mod names;
pub mod policy;
pub mod review;
pub mod timefmt;
pub mod wire;
pub mod x402;

// What an embedder uses, at the root. The modules stay public for the rest.
pub use amount::{Amount, AmountError};
pub use ap2::{
    Ap2Error, ClosedMandate, OpenMandate, read_stored_open_mandate, verify_closed_mandate,
    verify_open_mandate,
};
pub use claims::{
    Bindings, EVENT_LIFETIME_SECS, EventClaims, Issuance, RequestClaims, VERDICT_LIFETIME_SECS,
    VerdictClaims,
};
pub use counterparty::{
    CheckError, Counterparty, EnvironmentPolicy, ExpectedTransaction, ExpectedX402,
    MemoryReplayGuard, Objection, ReplayGuard, ReplayGuardError, Seen, VerifiedVerdict,
};
pub use environment::Environment;
pub use history::AgentHistory;
pub use id::{AgentId, DecisionId, EventId, MandateId, Nonce};
pub use jwk::{Jwk, JwkError, JwkSet};
pub use jwks_cache::{CachePolicy, KeySetCache, NextFetch};
pub use jws::{
    P256Signer, SignError, Signer, TokenError, VerifyOptions, sign_token, verify_event,
    verify_verdict,
};
pub use mandate::{Mandate, MandateDraft, MandateStatus};
pub use names::{Category, Currency, Recipient};
pub use policy::{AuthorizationRequest, Evaluation, Mode, Reason, Verdict, evaluate};
