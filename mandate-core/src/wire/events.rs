//! The event log: `GET /v1/events`, `GET /v1/events/{id}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::id::EventId;

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
