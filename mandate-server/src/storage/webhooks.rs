//! Webhook endpoints at the boundary.

use mandate_core::id::{EventId, WebhookId};
use serde_json::Value;

use super::StoreFuture;
use crate::model::Env;

/// A stored webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRow {
    /// List position.
    pub seq: i64,
    /// `whk_…`.
    pub id: String,
    /// The URL events are POSTed to.
    pub url: String,
    /// The subscribed event types.
    pub events: Vec<String>,
    /// `active` or `deleted`.
    pub status: String,
    /// Creation time, unix ms.
    pub created_ms: i64,
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

    /// Marks an active endpoint deleted and ends its pending deliveries; returns it as it
    /// is now, or `None` if there was none.
    fn delete_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<WebhookRow>>;

    /// Appends a `ping` event about `data` delivered to this endpoint only, if it is still
    /// active (`None` otherwise).
    fn ping_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        data: Value,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<EventId>>;
}
