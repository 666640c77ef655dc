//! Webhook deliveries at the boundary: what the delivery worker picks and records.

use mandate_core::delivery::NextStep;
use serde_json::Value;

use super::StoreFuture;

/// A delivery that is due, with what the worker needs to make the attempt.
#[derive(Debug, Clone)]
pub struct Due {
    /// The delivery's row id.
    pub id: i64,
    /// Attempts made so far.
    pub attempts: u32,
    /// The endpoint, `whk_…`.
    pub webhook_id: String,
    /// Where to POST.
    pub url: String,
    /// The endpoint's environment (`sandbox`, `live`): picks the signer and the URL rules.
    pub env: String,
    /// The event, `evt_…`: the token's `jti`.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// The event's data as stored.
    pub data: Value,
    /// When the event was created, unix ms: the token's `iat` and the start of its window.
    pub event_created_ms: i64,
}

/// One attempt as it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// When it started, unix ms (the injected clock).
    pub at_ms: i64,
    /// The HTTP status, or `None` when no answer came (timeout, refused connection or
    /// address).
    pub status: Option<u16>,
    /// How long it took, real milliseconds.
    pub latency_ms: i64,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

/// A delivery as stored (diagnostics and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    /// The row id.
    pub id: i64,
    /// The endpoint.
    pub webhook_id: String,
    /// Attempts made.
    pub attempts: u32,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// When the next attempt is due, while pending.
    pub next_attempt_ms: Option<i64>,
    /// The last failure.
    pub last_error: Option<String>,
    /// Its attempts, first first.
    pub tried: Vec<Attempt>,
}

/// Work waiting, in every organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// Webhook deliveries not yet delivered or given up.
    pub deliveries: i64,
    /// Reviews not yet approved, denied or expired.
    pub reviews: i64,
}

/// Webhook deliveries.
pub trait DeliveryStore {
    /// Up to `limit` deliveries due at `now_ms`, oldest first, at most `per_webhook` of
    /// each endpoint. An engine shared by several processes claims them for this process
    /// until the attempt is recorded (or released), so that no other attempts them
    /// meanwhile.
    fn due_deliveries(
        &self,
        now_ms: i64,
        per_webhook: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<Due>>;

    /// Lets go of deliveries that [`DeliveryStore::due_deliveries`] returned but that will
    /// not be attempted now (the worker had no room for them), so that any process may pick
    /// them up at once. Engines that do not claim deliveries have nothing to do.
    fn release_deliveries(&self, ids: Vec<i64>) -> StoreFuture<'_, ()> {
        let _ = ids;
        Box::pin(async { Ok(()) })
    }

    /// Records an attempt of delivery `id` and what follows it.
    fn record_attempt(
        &self,
        id: i64,
        attempt: Attempt,
        next: NextStep,
        now_ms: i64,
    ) -> StoreFuture<'_, ()>;

    /// Ends delivery `id` without another attempt, for `reason`.
    fn give_up_delivery(&self, id: i64, reason: &str, at_ms: i64) -> StoreFuture<'_, ()>;

    /// How many deliveries and reviews are pending, in every organization (for the
    /// metrics: two counts on their indexes).
    fn backlog(&self) -> StoreFuture<'_, Backlog>;

    /// The deliveries of an event with their attempts, in the order they were queued
    /// (`GET /v1/events/{id}`, diagnostics and tests).
    fn deliveries_of(&self, event_id: &str) -> StoreFuture<'_, Vec<DeliveryRow>>;
}
