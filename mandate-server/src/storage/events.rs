//! The event log at the boundary. Events are written by the change they report, in its
//! transaction; this trait reads them.

use serde_json::Value;

use super::StoreFuture;
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
