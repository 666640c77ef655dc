//! Webhook endpoints: registering one (its URL judged by [`crate::ssrf`] before it
//! is stored, and again before every delivery), reading, deleting (its pending deliveries
//! end) and pinging one (an event like any other, delivered to that one endpoint).

use mandate_core::{EventId, FieldError};
use mandate_protocol::{delivery::EVENT_TYPES, delivery::is_event_type, id::WebhookId, wire};
use serde_json::Value;

use crate::clock::{from_ms, random16};
use crate::model::Env;
use crate::ssrf::{self, Host, UrlError};
use crate::storage::webhooks::WebhookRow;
use crate::storage::{StorageError, Store};

/// Why a webhook request was not done.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// No active endpoint of that id in the caller's organization and environment.
    #[error("no webhook with id {0}")]
    NoWebhook(String),
    /// The URL breaks a rule of [`ssrf`]; the message starts with `url`.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The endpoint could not be encoded as the ping's data.
    #[error("encoding the webhook: {0}")]
    Encoding(String),
}

/// A webhook in its API shape, also the `data` of its ping.
pub fn webhook_wire(row: &WebhookRow) -> wire::Webhook {
    wire::Webhook {
        created_at: from_ms(row.created_ms),
        events: row.events.clone(),
        status: row.status.as_str().to_owned(),
        url: row.url.clone(),
        webhook: row.id.clone(),
    }
}

/// The event types a registration subscribes to, from its `events`: a non-empty array of
/// known event types; repeats are dropped.
pub fn subscribed(value: &Value) -> Result<Vec<String>, FieldError> {
    let invalid = |field: &str, problem: String| FieldError::Invalid {
        field: field.to_owned(),
        problem,
    };
    let items = value
        .as_array()
        .ok_or_else(|| invalid("events", "must be an array of event types".into()))?;
    if items.is_empty() {
        return Err(invalid(
            "events",
            "must name at least one event type".into(),
        ));
    }
    let mut events: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("events[{i}]");
        let name = item
            .as_str()
            .ok_or_else(|| invalid(&path, "must be a string".into()))?;
        if !is_event_type(name) {
            let shown: String = name.chars().take(64).collect();
            let types = EVENT_TYPES.join(", ");
            let problem = format!("{shown:?} is not an event type; the types are {types}");
            return Err(invalid(&path, problem));
        }
        if !events.iter().any(|e| e == name) {
            events.push(name.to_owned());
        }
    }
    Ok(events)
}

/// Registers an endpoint of `owner` (organization, environment) at `url` for `events`
/// (known types, without repeats) at `now_ms`: the URL is judged first, its name resolved
/// and the addresses judged when it resolves (a name that does not resolve yet is
/// accepted: every delivery resolves and judges it again).
pub async fn create(
    store: &dyn Store,
    owner: (&str, Env),
    url: &str,
    events: &[String],
    now_ms: i64,
) -> Result<WebhookRow, WebhookError> {
    let (org, env) = owner;
    let url = ssrf::check_url(url, env)?;
    if let Host::Name(name) = &url.host
        && let Some(ips) = ssrf::resolve(name, url.port).await
    {
        ssrf::check_resolved(name, &ips, env)?;
    }
    let id = WebhookId::from_random(random16());
    let row = store
        .create_webhook(org, env, &id, url.url.as_str(), events, now_ms)
        .await?;
    Ok(row)
}

/// An active endpoint of `owner` by its id.
pub async fn show(
    store: &dyn Store,
    owner: (&str, Env),
    id: &str,
) -> Result<WebhookRow, WebhookError> {
    let row = match WebhookId::parse(id) {
        Ok(wanted) => store.webhook(owner.0, owner.1, &wanted).await?,
        Err(_) => None,
    };
    row.ok_or_else(|| WebhookError::NoWebhook(id.to_owned()))
}

/// Deletes an active endpoint of `owner` at `now_ms`, its pending deliveries ended; the
/// endpoint as it is now.
pub async fn delete(
    store: &dyn Store,
    owner: (&str, Env),
    id: &str,
    now_ms: i64,
) -> Result<WebhookRow, WebhookError> {
    let row = match WebhookId::parse(id) {
        Ok(wanted) => {
            store
                .delete_webhook(owner.0, owner.1, &wanted, now_ms)
                .await?
        }
        Err(_) => None,
    };
    row.ok_or_else(|| WebhookError::NoWebhook(id.to_owned()))
}

/// Pings an active endpoint of `owner` at `now_ms`: an event whose data is the endpoint,
/// delivered to it alone. An endpoint deleted between the read and the write finds none.
pub async fn ping(
    store: &dyn Store,
    owner: (&str, Env),
    id: &str,
    now_ms: i64,
) -> Result<EventId, WebhookError> {
    let missing = || WebhookError::NoWebhook(id.to_owned());
    let webhook = show(store, owner, id).await?;
    let data: Value = wire::to_value(&webhook_wire(&webhook))
        .map_err(|e| WebhookError::Encoding(e.to_string()))?;
    store
        .ping_webhook(owner.0, owner.1, &webhook.id, data, now_ms)
        .await?
        .ok_or_else(missing)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn subscriptions_are_known_types_named_by_field_without_repeats() {
        let events = subscribed(&json!(["ping", "escrow.funded", "ping"])).unwrap();
        assert_eq!(events, ["ping", "escrow.funded"]);
        let refused = |value: Value| subscribed(&value).unwrap_err().to_string();
        assert!(
            refused(json!("ping")).contains("events"),
            "{}",
            refused(json!("ping"))
        );
        assert!(refused(json!([])).contains("at least one event type"));
        assert!(refused(json!(["ping", 7])).contains("events[1]"));
        let unknown = refused(json!(["ping", "escrow.stolen"]));
        assert!(
            unknown.contains("events[1]") && unknown.contains("escrow.stolen"),
            "{unknown}"
        );
    }
}
