//! Webhook endpoints: `POST/GET /v1/webhooks`, `GET/DELETE /v1/webhooks/{id}`,
//! `POST /v1/webhooks/{id}/ping`.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::id::{EventId, WebhookId};

/// A webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    /// When it was registered.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// The event types it receives.
    pub events: Vec<String>,
    /// `active` or `deleted`.
    pub status: String,
    /// Where events are POSTed.
    pub url: String,
    /// `whk_…`.
    pub webhook: WebhookId,
}

/// The body of `POST /v1/webhooks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateWebhook {
    /// The event types to receive.
    pub events: Vec<String>,
    /// Where to POST them.
    pub url: String,
}

/// The answer to `POST /v1/webhooks/{id}/ping`: the event queued for that endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingAnswer {
    /// The `ping` event's id.
    pub event: EventId,
}
