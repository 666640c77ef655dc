//! Webhook endpoints at the boundary: the typed row, what every engine writes the same
//! way (the ping's event type, the error a deleted endpoint's pending deliveries end
//! with, the stored form of the subscribed types) and the decoding of stored columns.

use mandate_core::id::{EventId, WebhookId};
use serde_json::Value;

use super::{StorageError, StoreFuture};
use crate::model::Env;

/// The type of the event a ping appends.
pub const PING_EVENT: &str = "ping";

/// The error a deleted endpoint's pending deliveries end with (failed).
pub const DELETED_ERROR: &str = "webhook deleted";

/// Whether an endpoint still receives events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookStatus {
    /// Receives the events it subscribed to.
    Active,
    /// Deleted: reads as absent; its row stays for its deliveries.
    Deleted,
}

impl WebhookStatus {
    /// The stored and answered form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Deleted => "deleted",
        }
    }

    /// Parses the stored form.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Active, Self::Deleted]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// A stored webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRow {
    /// List position.
    pub seq: i64,
    /// `whk_…`.
    pub id: WebhookId,
    /// The URL events are POSTed to.
    pub url: String,
    /// The subscribed event types.
    pub events: Vec<String>,
    /// Whether it still receives events.
    pub status: WebhookStatus,
    /// Creation time, unix ms.
    pub created_ms: i64,
}

/// An endpoint's columns as an engine reads them, decoded the same way by every engine.
#[derive(Debug)]
pub struct StoredWebhook {
    /// `seq`.
    pub seq: i64,
    /// `id`.
    pub id: String,
    /// `url`.
    pub url: String,
    /// `events`: a JSON array of event types, as text.
    pub events: String,
    /// `status`.
    pub status: String,
    /// `created_ms`.
    pub created_ms: i64,
}

impl StoredWebhook {
    /// The endpoint.
    pub fn decode(self) -> Result<WebhookRow, StorageError> {
        let bad = |what: &str| StorageError::Corrupt(format!("webhook {} column {what}", self.id));
        Ok(WebhookRow {
            seq: self.seq,
            id: WebhookId::parse(&self.id).map_err(|_| bad("id"))?,
            events: serde_json::from_str(&self.events).map_err(|_| bad("events"))?,
            status: WebhookStatus::parse(&self.status).ok_or_else(|| bad("status"))?,
            url: self.url,
            created_ms: self.created_ms,
        })
    }
}

/// The stored form of the subscribed event types: a JSON array.
pub fn stored_events(events: &[String]) -> String {
    Value::from(events.to_vec()).to_string()
}

/// Webhook endpoints.
pub trait WebhookStore {
    /// Stores a new active endpoint subscribed to `events` and returns it.
    fn create_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        url: &str,
        events: &[String],
        now_ms: i64,
    ) -> StoreFuture<'_, WebhookRow>;

    /// An active endpoint of this organization and environment.
    fn webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
    ) -> StoreFuture<'_, Option<WebhookRow>>;

    /// A page of active endpoints, newest first, strictly before seq `before`.
    fn webhooks_page(
        &self,
        org_id: &str,
        env: Env,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<WebhookRow>>;

    /// Marks an active endpoint deleted and ends its pending deliveries (failed, with
    /// [`DELETED_ERROR`]); returns it as it is now, or `None` if there was none.
    fn delete_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<WebhookRow>>;

    /// Appends a [`PING_EVENT`] about `data` delivered to this endpoint only, if it is
    /// still active (`None` otherwise).
    fn ping_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        data: Value,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<EventId>>;
}
