//! The event log at the boundary. Events are written by the change they report, in its
//! transaction; this trait reads them.

use mandate_core::EventId;
use mandate_protocol::id::WebhookId;
use serde_json::Value;

use super::engine::{Access, Columns, Engine, Result, Scope, Tx, first};
use super::statements::EventSql;
use super::{StorageError, StoreFuture};
use crate::clock::{from_ms, ordered16};
use crate::model::Env;

/// A stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    /// List position.
    pub seq: i64,
    /// `evt_…`.
    pub id: String,
    /// The event type.
    pub event_type: String,
    /// The object the event is about, as it was when the event happened.
    pub data: Value,
    /// When it happened, unix ms.
    pub created_ms: i64,
}

/// An event to append in the transaction of the change it reports.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Its type (`mandate.revoked`, `escrow.funded`, ...).
    pub event_type: &'static str,
    /// The object it is about, as it is after the change.
    pub data: Value,
}

/// Reads the event log.
pub trait EventStore {
    /// One event of this organization and environment.
    fn event(&self, org_id: &str, env: Env, id: &str) -> StoreFuture<'_, Option<EventRow>>;

    /// A page of events, newest first, strictly before seq `before`, optionally of one type.
    fn events_page(
        &self,
        org_id: &str,
        env: Env,
        event_type: Option<&str>,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<EventRow>>;
}

/// The columns of an event's reads.
pub const COLUMNS: &str = "seq, id, type, data, created_ms";

fn read(r: &dyn Columns) -> Result<EventRow> {
    let id = r.text(1)?;
    let data = serde_json::from_str(&r.text(3)?)
        .map_err(|e| StorageError::Corrupt(format!("event {id} data: {e}")))?;
    Ok(EventRow {
        seq: r.int(0)?,
        id,
        event_type: r.text(2)?,
        data,
        created_ms: r.int(4)?,
    })
}

/// Appends `event` at `at_ms` with its deliveries; returns its id.
pub(super) async fn append<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    event: &NewEvent,
    at_ms: i64,
) -> Result<EventId> {
    append_json(
        tx,
        s,
        event.event_type,
        &event.data.to_string(),
        at_ms,
        None,
    )
    .await
}

/// Appends an event of `event_type` whose data is the JSON text `data`, with its
/// deliveries, or with one delivery to `only` (a ping); returns its id.
pub(super) async fn append_json<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    event_type: &str,
    data: &str,
    at_ms: i64,
    only: Option<&WebhookId>,
) -> Result<EventId> {
    let id = EventId::from_random(ordered16(from_ms(at_ms)));
    let params = [
        s.org.into(),
        s.env.into(),
        id.as_str().into(),
        event_type.into(),
        data.into(),
        at_ms.into(),
        only.map(WebhookId::as_str).into(),
    ];
    let stmt = if only.is_some() {
        EventSql::AppendFor
    } else {
        EventSql::Append
    };
    tx.execute(stmt.into(), &params).await?;
    Ok(id)
}

impl<E: Engine> EventStore for E {
    fn event(&self, org_id: &str, env: Env, id: &str) -> StoreFuture<'_, Option<EventRow>> {
        let args = (org_id.to_owned(), env, id.to_owned());
        Box::pin(self.run(Access::Read, args, |tx, (org, env, id)| {
            Box::pin(async move {
                let params = [org.into(), (*env).into(), id.into()];
                Ok(first(tx.query(EventSql::Get.into(), &params, read).await?))
            })
        }))
    }

    fn events_page(
        &self,
        org_id: &str,
        env: Env,
        event_type: Option<&str>,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<EventRow>> {
        let args = (org_id.to_owned(), env, event_type.map(str::to_owned));
        Box::pin(
            self.run(Access::Read, args, move |tx, (org, env, event_type)| {
                Box::pin(async move {
                    let page = EventSql::Page {
                        by_type: event_type.is_some(),
                    };
                    let params = [
                        org.into(),
                        (*env).into(),
                        event_type.as_ref().into(),
                        before.into(),
                        limit.into(),
                    ];
                    tx.query(page.into(), &params, read).await
                })
            }),
        )
    }
}
