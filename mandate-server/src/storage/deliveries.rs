//! Webhook deliveries at the boundary: what the delivery worker picks and records. What a
//! delivery's row becomes after an attempt (or without one) is decided by the worker
//! (`workers::delivery`) as a [`DeliveryChange`]; the engine stores it as told.

use mandate_core::id::{EventId, WebhookId};
use serde_json::Value;

use super::{StorageError, StoreFuture};
use crate::model::Env;

/// A delivery that is due, with what the worker needs to make the attempt.
#[derive(Debug, Clone)]
pub struct Due {
    /// The delivery's row id.
    pub id: i64,
    /// Attempts made so far.
    pub attempts: u32,
    /// The endpoint.
    pub webhook_id: WebhookId,
    /// Where to POST.
    pub url: String,
    /// The endpoint's environment: picks the signer and the URL rules.
    pub env: Env,
    /// The event: the token's `jti`.
    pub event_id: EventId,
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

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Waiting for its next attempt.
    Pending,
    /// An attempt was answered with a 2xx.
    Delivered,
    /// Given up: no attempt will be made.
    Failed,
}

impl DeliveryState {
    /// As stored and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }

    /// A stored state.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(Self::Pending),
            "delivered" => Some(Self::Delivered),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }

    /// A state as read from the database.
    pub fn stored(text: &str) -> Result<Self, StorageError> {
        Self::parse(text).ok_or_else(|| StorageError::Corrupt(format!("delivery state {text:?}")))
    }
}

/// What is written of a delivery after an attempt (or when it is given up without one),
/// in one transaction, only while it is still pending (a delivery whose endpoint was
/// deleted meanwhile keeps its state; its attempt is recorded all the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryChange {
    /// The attempt made, if one was.
    pub attempt: Option<Attempt>,
    /// Attempts made, this one included.
    pub attempts: u32,
    /// Where the delivery stands after it.
    pub state: DeliveryState,
    /// When the next attempt is due, while pending.
    pub next_attempt_ms: Option<i64>,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// When it ended (delivered or given up), unix ms.
    pub finished_ms: Option<i64>,
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
    /// Where it stands.
    pub state: DeliveryState,
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

    /// Writes `change` to delivery `id` (its attempt, if any, and its new state), in one
    /// transaction; an engine that claimed the delivery ends the claim with it.
    fn record_delivery(&self, id: i64, change: DeliveryChange) -> StoreFuture<'_, ()>;

    /// How many deliveries and reviews are pending, in every organization (for the
    /// metrics: two counts on their indexes).
    fn backlog(&self) -> StoreFuture<'_, Backlog>;

    /// The deliveries of an event with their attempts, in the order they were queued
    /// (`GET /v1/events/{id}`, diagnostics and tests).
    fn deliveries_of(&self, event_id: &str) -> StoreFuture<'_, Vec<DeliveryRow>>;
}
