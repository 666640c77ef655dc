//! The event log: `GET /v1/events`, `GET /v1/events/{id}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::id::{EventId, WebhookId};

/// An event: what happened, and the object it is about as it was then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// The object the event is about, in the shape the API returns it: a [`super::Mandate`]
    /// for `mandate.*`, a [`super::Decision`] or [`super::Review`] for `decision.*`, an
    /// [`super::Escrow`] for `escrow.*`, a [`super::Webhook`] for `ping`.
    pub data: Value,
    /// Its webhook deliveries, one per endpoint subscribed when it happened, in the order
    /// they were queued: only in `GET /v1/events/{id}` (absent from the list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<Vec<EventDelivery>>,
    /// `evt_…`, also the `jti` of its signed deliveries.
    pub id: EventId,
    /// The event type, for example `mandate.revoked`.
    #[serde(rename = "type")]
    pub event_type: String,
}

impl Event {
    /// The id of the object the event is about: `data.id`, else `data.webhook` (a ping).
    pub fn subject(&self) -> Option<&str> {
        ["id", "webhook"]
            .iter()
            .find_map(|name| self.data.get(name).and_then(Value::as_str))
    }
}

/// One webhook delivery of an event and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventDelivery {
    /// Attempts made so far (each one a signed POST to the endpoint).
    pub attempts: u32,
    /// When the last attempt started; `null` before the first.
    #[serde(with = "crate::timefmt::option")]
    pub last_attempt_at: Option<OffsetDateTime>,
    /// What went wrong last (`HTTP 500`, a timeout, a refused address, or why the delivery
    /// was given up); `null` once delivered or before any failure.
    pub last_error: Option<String>,
    /// The HTTP status of the last attempt; `null` when it got no answer or none was made.
    pub last_status: Option<u16>,
    /// When the next attempt is due, while `pending`; `null` otherwise.
    #[serde(with = "crate::timefmt::option")]
    pub next_attempt_at: Option<OffsetDateTime>,
    /// `pending` (an attempt is due or under way), `delivered` (a 2xx came back) or
    /// `failed` (given up: retries exhausted, the endpoint deleted, or its window passed).
    pub state: String,
    /// The endpoint, `whk_…`.
    pub webhook: WebhookId,
}
