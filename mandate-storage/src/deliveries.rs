//! Webhook deliveries at the boundary: what the delivery worker picks and records. What a
//! delivery's row becomes after an attempt (or without one) is decided by the worker
//! (`workers::delivery`) as a [`DeliveryChange`]; the engine stores it as told.

use mandate_core::EventId;
use mandate_protocol::id::WebhookId;
use serde_json::Value;

use super::engine::{
    Access, Columns, Engine, Param, Result, Tx, env_of, first, id_of, non_negative,
};
use super::statements::DeliverySql;
use super::{StorageError, StoreFuture};
use crate::model::Env;

/// What names a delivery: its organization, its event and its endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryKey {
    /// The organization.
    pub org_id: String,
    /// The event delivered.
    pub event_id: String,
    /// The endpoint it goes to.
    pub webhook_id: String,
}

impl DeliveryKey {
    /// Its values, `$1..$3` of the statements on one delivery.
    fn params(&self) -> [Param<'_>; 3] {
        [
            self.org_id.as_str().into(),
            self.event_id.as_str().into(),
            self.webhook_id.as_str().into(),
        ]
    }
}

/// A delivery that is due, with what the worker needs to make the attempt.
#[derive(Debug, Clone)]
pub struct Due {
    /// The delivery.
    pub id: DeliveryKey,
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
    pub fn stored(text: &str) -> Result<Self> {
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
    /// The delivery.
    pub id: DeliveryKey,
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

    /// [`DeliveryStore::due_deliveries`] of organization `org` only (on Citus, a read of
    /// one shard, where the other reads every shard).
    fn due_deliveries_of(
        &self,
        org: &str,
        now_ms: i64,
        per_webhook: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<Due>>;

    /// Lets go of deliveries that [`DeliveryStore::due_deliveries`] returned but that will
    /// not be attempted now (the worker had no room for them), so that any process may pick
    /// them up at once. Engines that do not claim deliveries have nothing to do.
    fn release_deliveries(&self, ids: Vec<DeliveryKey>) -> StoreFuture<'_, ()> {
        let _ = ids;
        Box::pin(async { Ok(()) })
    }

    /// Writes `change` to delivery `id` (its attempt, if any, and its new state), in one
    /// transaction; an engine that claimed the delivery ends the claim with it.
    fn record_delivery(&self, id: DeliveryKey, change: DeliveryChange) -> StoreFuture<'_, ()>;

    /// How many deliveries and reviews are pending, in every organization (for the
    /// metrics: two counts on their indexes).
    fn backlog(&self) -> StoreFuture<'_, Backlog>;

    /// The deliveries of an event of the organization with their attempts, in the order
    /// they were queued (`GET /v1/events/{id}`, diagnostics and tests).
    fn deliveries_of(&self, org_id: &str, event_id: &str) -> StoreFuture<'_, Vec<DeliveryRow>>;
}

/// How long a claim on a delivery lasts, in ms (engines shared by processes): longer than
/// an attempt may take (its timeout is 5 s), short enough that a dead process's deliveries
/// are soon taken over.
pub const CLAIM_MS: i64 = 15_000;

fn read_due(r: &dyn Columns) -> Result<Due> {
    let id = DeliveryKey {
        org_id: r.text(0)?,
        event_id: r.text(1)?,
        webhook_id: r.text(2)?,
    };
    let data = serde_json::from_str(&r.text(7)?)
        .map_err(|e| StorageError::Corrupt(format!("event {} data: {e}", id.event_id)))?;
    Ok(Due {
        attempts: non_negative(r.int(3)?, "delivery attempts")?,
        webhook_id: id_of(&id.webhook_id, "webhook id", WebhookId::parse)?,
        url: r.text(4)?,
        env: env_of(&r.text(5)?)?,
        event_id: id_of(&id.event_id, "event id", EventId::parse)?,
        event_type: r.text(6)?,
        data,
        event_created_ms: r.int(8)?,
        id,
    })
}

fn read_attempt(r: &dyn Columns) -> Result<Attempt> {
    Ok(Attempt {
        attempt: non_negative(r.int(0)?, "attempt")?,
        at_ms: r.int(1)?,
        status: r
            .opt_int(2)?
            .map(|s| non_negative(s, "status"))
            .transpose()?,
        latency_ms: r.int(3)?,
        error: r.opt_text(4)?,
    })
}

/// Writes what the worker decided of a delivery: its attempt, if one was made, and its
/// new state, only while it is pending.
async fn record<T: Tx>(tx: &mut T, id: &DeliveryKey, change: &DeliveryChange) -> Result<()> {
    let [org, event, webhook] = id.params();
    if let Some(attempt) = &change.attempt {
        let params = [
            org.clone(),
            event.clone(),
            webhook.clone(),
            attempt.attempt.into(),
            attempt.at_ms.into(),
            attempt.status.map(u32::from).into(),
            attempt.latency_ms.into(),
            attempt.error.as_ref().into(),
        ];
        tx.execute(DeliverySql::InsertAttempt.into(), &params)
            .await?;
    }
    let params = [
        org,
        event,
        webhook,
        change.attempts.into(),
        change.state.as_str().into(),
        change.next_attempt_ms.into(),
        change.last_error.as_ref().into(),
        change.finished_ms.into(),
    ];
    tx.execute(DeliverySql::Update.into(), &params).await?;
    Ok(())
}

/// The deliveries of an event, with their attempts.
async fn of_event<T: Tx>(tx: &mut T, org: &str, event_id: &str) -> Result<Vec<DeliveryRow>> {
    let read = |r: &dyn Columns| {
        let webhook_id = r.text(0)?;
        Ok(DeliveryRow {
            id: DeliveryKey {
                org_id: org.to_owned(),
                event_id: event_id.to_owned(),
                webhook_id: webhook_id.clone(),
            },
            webhook_id,
            attempts: non_negative(r.int(1)?, "delivery attempts")?,
            state: DeliveryState::stored(&r.text(2)?)?,
            next_attempt_ms: r.opt_int(3)?,
            last_error: r.opt_text(4)?,
            tried: Vec::new(),
        })
    };
    let params = [org.into(), event_id.into()];
    let mut rows = tx.query(DeliverySql::OfEvent.into(), &params, read).await?;
    for row in &mut rows {
        let params = row.id.params();
        row.tried = tx
            .query(DeliverySql::Attempts.into(), &params, read_attempt)
            .await?;
    }
    Ok(rows)
}

/// The deliveries due at `now_ms`, read across organizations without a lock, then each
/// claimed by a statement of its own organization's (a claim spans no organizations: on
/// Citus a locking read runs on one shard only); those another process claimed meanwhile
/// are left out.
/// The due deliveries (of organization `org` only, when given), each claimed.
async fn due<T: Tx>(
    tx: &mut T,
    org: Option<&str>,
    now_ms: i64,
    per_webhook: i64,
    limit: i64,
) -> Result<Vec<Due>> {
    let until = now_ms.saturating_add(CLAIM_MS);
    let candidates = match org {
        Some(org) => {
            let params = [now_ms.into(), per_webhook.into(), limit.into(), org.into()];
            tx.query(DeliverySql::DueOf.into(), &params, read_due)
                .await?
        }
        None => {
            let params = [now_ms.into(), per_webhook.into(), limit.into()];
            tx.query(DeliverySql::Due.into(), &params, read_due).await?
        }
    };
    let mut claimed = Vec::with_capacity(candidates.len());
    for due in candidates {
        let [org, event, webhook] = due.id.params();
        let params = [org, event, webhook, now_ms.into(), until.into()];
        if !tx
            .query(DeliverySql::Claim.into(), &params, |_| Ok(()))
            .await?
            .is_empty()
        {
            claimed.push(due);
        }
    }
    Ok(claimed)
}

impl<E: Engine> DeliveryStore for E {
    fn due_deliveries(
        &self,
        now_ms: i64,
        per_webhook: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<Due>> {
        Box::pin(self.run(Access::Claim, (), move |tx, ()| {
            Box::pin(due(tx, None, now_ms, per_webhook, limit))
        }))
    }

    fn due_deliveries_of(
        &self,
        org: &str,
        now_ms: i64,
        per_webhook: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<Due>> {
        Box::pin(self.run(Access::Claim, org.to_owned(), move |tx, org| {
            Box::pin(due(tx, Some(org), now_ms, per_webhook, limit))
        }))
    }

    fn release_deliveries(&self, ids: Vec<DeliveryKey>) -> StoreFuture<'_, ()> {
        Box::pin(self.run(Access::Claim, ids, |tx, ids| {
            Box::pin(async move {
                // One statement a delivery: each names its organization.
                for id in ids {
                    tx.execute(DeliverySql::Release.into(), &id.params())
                        .await?;
                }
                Ok(())
            })
        }))
    }

    fn record_delivery(&self, id: DeliveryKey, change: DeliveryChange) -> StoreFuture<'_, ()> {
        Box::pin(
            self.run(Access::Write, (id, change), move |tx, (id, change)| {
                Box::pin(record(tx, id, change))
            }),
        )
    }

    fn backlog(&self) -> StoreFuture<'_, Backlog> {
        Box::pin(self.run(Access::Read, (), |tx, ()| {
            Box::pin(async move {
                let read = |r: &dyn Columns| {
                    Ok(Backlog {
                        deliveries: r.int(0)?,
                        reviews: r.int(1)?,
                    })
                };
                let rows = tx.query(DeliverySql::Backlog.into(), &[], read).await?;
                first(rows).ok_or_else(|| StorageError::Corrupt("no backlog counts".into()))
            })
        }))
    }

    fn deliveries_of(&self, org_id: &str, event_id: &str) -> StoreFuture<'_, Vec<DeliveryRow>> {
        let args = (org_id.to_owned(), event_id.to_owned());
        Box::pin(self.run(Access::Read, args, |tx, (org, event_id)| {
            Box::pin(of_event(tx, org, event_id))
        }))
    }
}
