//! Idempotency records at the boundary. What to do with a record is
//! `mandate_core::idempotency::next_action`; the store keeps the records.

use mandate_core::idempotency::NextAction;
use time::OffsetDateTime;

use super::StoreFuture;

/// A response body sealed with a key derived from the caller's API key and the
/// Idempotency-Key (by the HTTP layer): the only form the store keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed(pub Vec<u8>);

/// The token of one request's claim on its Idempotency-Key: random, so that a claim is
/// known as this request's own and no other's (another request may take a claim over once
/// it runs out, [`CLAIM_MS`]). Whatever a request stores under its key (its outcome, or its
/// decision with its outcome) is stored only while the claim still carries its token, in
/// the transaction that stores it; its release removes only a claim with its token.
pub type ClaimToken = [u8; 16];

/// How long a claim lasts, in ms: far longer than a request runs (its deadline is shorter).
/// A claim whose request never finished it (its process died) is taken over after this.
pub const CLAIM_MS: i64 = 60_000;

/// A completed request's record: its sealed response, under (key hash, Idempotency-Key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// SHA-256 of the caller's API key.
    pub key_hash: [u8; 32],
    /// The Idempotency-Key.
    pub idem_key: String,
    /// The response's HTTP status.
    pub status: u16,
    /// The response's body, sealed.
    pub body: Sealed,
    /// The id of the request that claimed the key, replayed with its response.
    pub request_id: String,
    /// The claim it completes: stored only while the claim is still this one.
    pub claim: ClaimToken,
}

/// Idempotency records, scoped to the API key.
pub trait IdempotencyStore {
    /// Reads the record under (`key_hash`, `idem_key`), decides with `next_action`, and
    /// claims the key for this request (with its `claim` token, for [`CLAIM_MS`]) when it is
    /// to be processed, in one transaction. An unfinished claim past its time counts as
    /// absent. Returns the action and, for a stored response, the id of the request it
    /// answered.
    fn claim_idempotency_key(
        &self,
        key_hash: [u8; 32],
        idem_key: &str,
        digest: [u8; 32],
        claim: ClaimToken,
        now: OffsetDateTime,
    ) -> StoreFuture<'_, (NextAction, Option<String>)>;

    /// Stores `record` for the request that claimed its key, or, with `None`, releases the
    /// claim of (`key_hash`, `idem_key`) so that a retry may run the request again; either
    /// only while the claim is still `claim` (otherwise nothing changes).
    fn finish_idempotency(
        &self,
        key_hash: [u8; 32],
        idem_key: &str,
        claim: ClaimToken,
        record: Option<IdempotencyRecord>,
    ) -> StoreFuture<'_, ()>;

    /// At start: releases every unfinished claim and drops records created before
    /// `older_than_ms`; returns how many went.
    fn sweep_idempotency(&self, older_than_ms: i64) -> StoreFuture<'_, usize>;
}
