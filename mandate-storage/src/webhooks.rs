//! Webhook endpoints at the boundary: the typed row, what every engine writes the same
//! way (the ping's event type, the error a deleted endpoint's pending deliveries end
//! with, the stored form of the subscribed types) and the decoding of stored columns.

use mandate_core::EventId;
use mandate_protocol::id::WebhookId;
use serde_json::Value;

use super::engine::{Access, Columns, Engine, Lock, Result, Scope, Tx, first};
use super::events;
use super::statements::WebhookSql;
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
    pub fn decode(self) -> Result<WebhookRow> {
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

/// The columns of an endpoint's reads, in [`StoredWebhook`]'s order (`events` as JSON
/// text).
pub const COLUMNS: &str = "seq, id, url, events, status, created_ms";

fn read(r: &dyn Columns) -> Result<WebhookRow> {
    StoredWebhook {
        seq: r.int(0)?,
        id: r.text(1)?,
        url: r.text(2)?,
        events: r.text(3)?,
        status: r.text(4)?,
        created_ms: r.int(5)?,
    }
    .decode()
}

/// An active endpoint of `scope`.
async fn get<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &WebhookId,
    lock: Lock,
) -> Result<Option<WebhookRow>> {
    let params = [s.org.into(), s.env.into(), id.as_str().into()];
    Ok(first(
        tx.query(WebhookSql::Get { lock }.into(), &params, read)
            .await?,
    ))
}

/// Stores a new active endpoint and reads it back.
async fn create<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &WebhookId,
    url: &str,
    events: &[String],
    now_ms: i64,
) -> Result<WebhookRow> {
    let params = [
        s.org.into(),
        s.env.into(),
        id.as_str().into(),
        url.into(),
        stored_events(events).into(),
        now_ms.into(),
    ];
    tx.execute(WebhookSql::Insert.into(), &params).await?;
    get(tx, s, id, Lock::No)
        .await?
        .ok_or_else(|| StorageError::Corrupt(format!("webhook {id} vanished after insert")))
}

/// Marks an active endpoint deleted and ends its pending deliveries (failed, with
/// [`DELETED_ERROR`]); the endpoint as it is now, or `None` if there was none.
async fn delete<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &WebhookId,
    now_ms: i64,
) -> Result<Option<WebhookRow>> {
    let Some(mut webhook) = get(tx, s, id, Lock::Wait).await? else {
        return Ok(None);
    };
    let params = [
        s.org.into(),
        s.env.into(),
        id.as_str().into(),
        now_ms.into(),
    ];
    tx.execute(WebhookSql::Delete.into(), &params).await?;
    let params = [
        s.org.into(),
        id.as_str().into(),
        now_ms.into(),
        DELETED_ERROR.into(),
    ];
    tx.execute(WebhookSql::FailDeliveries.into(), &params)
        .await?;
    webhook.status = WebhookStatus::Deleted;
    Ok(Some(webhook))
}

/// Appends a ping to an active endpoint, delivered to it alone; `None` if there is none.
async fn ping<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &WebhookId,
    data: &Value,
    now_ms: i64,
) -> Result<Option<EventId>> {
    if get(tx, s, id, Lock::No).await?.is_none() {
        return Ok(None);
    }
    let data = data.to_string();
    let event = events::append_json(tx, s, PING_EVENT, &data, now_ms, Some(id)).await?;
    Ok(Some(event))
}

impl<E: Engine> WebhookStore for E {
    fn create_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        url: &str,
        events: &[String],
        now_ms: i64,
    ) -> StoreFuture<'_, WebhookRow> {
        let args = (
            org_id.to_owned(),
            env,
            id.clone(),
            url.to_owned(),
            events.to_vec(),
        );
        Box::pin(self.run(
            Access::Write,
            args,
            move |tx, (org, env, id, url, events)| {
                Box::pin(create(tx, Scope::new(org, *env), id, url, events, now_ms))
            },
        ))
    }

    fn webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
    ) -> StoreFuture<'_, Option<WebhookRow>> {
        let args = (org_id.to_owned(), env, id.clone());
        Box::pin(self.run(Access::Read, args, |tx, (org, env, id)| {
            Box::pin(get(tx, Scope::new(org, *env), id, Lock::No))
        }))
    }

    fn webhooks_page(
        &self,
        org_id: &str,
        env: Env,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<WebhookRow>> {
        Box::pin(self.run(
            Access::Read,
            (org_id.to_owned(), env),
            move |tx, (org, env)| {
                Box::pin(async move {
                    let params = [org.into(), (*env).into(), before.into(), limit.into()];
                    tx.query(WebhookSql::Page.into(), &params, read).await
                })
            },
        ))
    }

    fn delete_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<WebhookRow>> {
        let args = (org_id.to_owned(), env, id.clone());
        Box::pin(self.run(Access::Write, args, move |tx, (org, env, id)| {
            Box::pin(delete(tx, Scope::new(org, *env), id, now_ms))
        }))
    }

    fn ping_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        data: Value,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<EventId>> {
        let args = (org_id.to_owned(), env, id.clone(), data);
        Box::pin(
            self.run(Access::Write, args, move |tx, (org, env, id, data)| {
                Box::pin(ping(tx, Scope::new(org, *env), id, data, now_ms))
            }),
        )
    }
}
