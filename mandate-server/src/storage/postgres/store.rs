//! [`PostgresStore`]: the PostgreSQL engine behind the storage boundary. Each async method
//! takes a connection from the pool and runs one statement or one transaction of this
//! module's SQL; the blocking [`AdminStore`] methods (operator commands, start-up) run on a
//! thread of their own with a connection of their own, so they never wait on the caller's
//! runtime.
//!
//! Longer than most files on purpose, like the SQLite engine's: the engine's whole
//! surface, every trait of the boundary, each method a few lines.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use deadpool_postgres::{Object, Pool};
use mandate_core::amount::Amount;
use mandate_core::id::{AgentId, DecisionId, EscrowId, EventId, MandateId, ReviewId, WebhookId};
use mandate_core::idempotency::NextAction;
use mandate_core::mandate::Mandate;
use mandate_core::policy::Mode;
use serde_json::Value;
use time::OffsetDateTime;

use super::connect::Target;
use super::{
    Result, agents, ap2, decisions, deliveries, escrows, events, idempotency, keys, mandates,
    migrations, orgs, reviews, settlement, signing, timers, webhooks,
};
use crate::clock::ms;
use crate::model::decision::Decision;
use crate::model::{Env, KeyClass};
use crate::storage::admin::{AdminStore, NewOrg, SecretChange};
use crate::storage::agents::{AgentRow, AgentStore};
use crate::storage::ap2::{Ap2Issuer, Ap2Source, Ap2Store};
use crate::storage::decisions::{DecisionStore, Filters as DecisionFilters};
use crate::storage::deliveries::{Backlog, DeliveryChange, DeliveryRow, DeliveryStore, Due};
use crate::storage::escrows::{EscrowChange, EscrowFunding, EscrowRow, EscrowStore, MovementRow};
use crate::storage::events::{EventRow, EventStore};
use crate::storage::health::{HealthStore, Schema};
use crate::storage::idempotency::{ClaimToken, IdempotencyRecord, IdempotencyStore};
use crate::storage::keys::{
    ApiKeyRow, BindingChange, KeyInfo, KeyStore, SealNew, StoredApiKey, StoredKey,
};
use crate::storage::location::PostgresUrl;
use crate::storage::mandates::{
    DecideRevocation, Filters as MandateFilters, MandateStore, Revocation,
};
use crate::storage::orgs::OrgStore;
use crate::storage::peers::{PEER_LEASE_MS, PeerStore};
use crate::storage::timers::{DecideExpiring, DecideExpiry, DueItem, ExpiringEvent, TimerStore};
use crate::storage::webhooks::{PING_EVENT, WebhookRow, WebhookStore};
use crate::storage::{StorageError, StoreFuture};

/// The PostgreSQL engine: a pool of connections to one database that any number of
/// server processes share.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    target: Target,
    /// Decisions are stored in groups (see `writer`).
    pub(super) writers: super::writer::Writers,
}

/// What a blocking method runs on its own connection (it may borrow the caller's data:
/// the caller waits for it).
type AdminJob<'a, T> =
    Box<dyn FnOnce(Object) -> Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>> + Send + 'a>;

impl PostgresStore {
    /// Connects to the database at `url` and brings its schema up to date (with
    /// `migrate`), or checks that it is this server's (without: a schema older than this
    /// server needs is refused). A schema newer than this server knows is refused either
    /// way.
    pub async fn open(url: &PostgresUrl, migrate: bool) -> Result<Self> {
        let target = Target::parse(url)?;
        let pool = target.pool()?;
        let writers = super::writer::Writers::start(&pool, target.writers);
        let store = Self {
            inner: Arc::new(Inner {
                pool,
                target,
                writers,
            }),
        };
        let mut c = store.client().await?;
        if migrate {
            migrations::migrate(&mut c).await?;
        } else {
            let applied = migrations::applied(&c).await?;
            migrations::refuse_newer(applied)?;
            migrations::refuse_older(applied)?;
        }
        Ok(store)
    }

    /// A pool of connections to this store's database, for tests of its parts.
    #[cfg(test)]
    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The database's URL (shown without its password).
    pub fn url(&self) -> &PostgresUrl {
        &self.inner.target.url
    }

    /// Stores a decision in the next group commit.
    pub(crate) async fn record_in_group(
        &self,
        new: crate::storage::deciding::NewDecision,
    ) -> Result<crate::storage::deciding::Recorded> {
        self.inner.writers.record(new).await
    }

    /// A connection from the pool.
    pub(crate) async fn client(&self) -> Result<Object> {
        self.inner.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => self.inner.target.connect_error(e),
            other => StorageError::from(other),
        })
    }

    /// Runs `job` on a connection of its own, on a thread of its own with a runtime of its
    /// own, and waits for it: the blocking methods of [`AdminStore`] may be called from
    /// any thread, a runtime's included, without waiting on that runtime.
    fn blocking<'a, T: Send + 'a>(&self, job: AdminJob<'a, T>) -> Result<T> {
        let target = &self.inner.target;
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name("mandate-pg-admin".into())
                .spawn_scoped(scope, move || -> Result<T> {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            StorageError::Task(format!("a runtime for the database: {e}"))
                        })?;
                    runtime.block_on(async move {
                        let pool = target.pool_of(1)?;
                        let c = pool.get().await.map_err(|e| match e {
                            deadpool_postgres::PoolError::Backend(e) => target.connect_error(e),
                            other => StorageError::from(other),
                        })?;
                        job(c).await
                    })
                })
                .map_err(|e| StorageError::Task(format!("a thread for the database: {e}")))?;
            thread
                .join()
                .map_err(|_| StorageError::Task("the database thread panicked".into()))?
        })
    }
}

/// Boxes an admin job.
fn job<'a, T, F, Fut>(f: F) -> AdminJob<'a, T>
where
    F: FnOnce(Object) -> Fut + Send + 'a,
    Fut: Future<Output = Result<T>> + Send + 'a,
{
    Box::new(move |c| Box::pin(f(c)))
}

impl AgentStore for PostgresStore {
    fn create_agent(
        &self,
        org_id: &str,
        env: Env,
        id: &AgentId,
        key_hash: [u8; 32],
        key_binding: Option<Vec<u8>>,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<AgentRow>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            if !agents::insert(&tx, &id, &org, env, now_ms).await? {
                tx.rollback().await?;
                return Ok(None);
            }
            keys::insert(
                &tx,
                (&key_hash, key_binding.as_deref()),
                &org,
                env,
                KeyClass::Agent,
                Some(id.as_str()),
                now_ms,
            )
            .await?;
            let row = agents::get(&tx, &org, env, &id).await?;
            tx.commit().await?;
            row.map(Some)
                .ok_or_else(|| StorageError::Corrupt(format!("agent {id} vanished after insert")))
        })
    }

    fn agent(&self, org_id: &str, env: Env, id: &AgentId) -> StoreFuture<'_, Option<AgentRow>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(async move { agents::get(&self.client().await?, &org, env, &id).await })
    }

    fn agents_page(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<AgentRow>> {
        let (org, only) = (org_id.to_owned(), only.cloned());
        Box::pin(async move {
            let c = self.client().await?;
            agents::page(&c, &org, env, only.as_ref(), before, limit).await
        })
    }
}

impl DecisionStore for PostgresStore {
    fn decision(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<Decision>> {
        let (org, only, id) = (org_id.to_owned(), only.cloned(), id.clone());
        Box::pin(async move {
            let c = self.client().await?;
            decisions::get(&c, &org, env, only.as_ref(), &id).await
        })
    }

    fn decision_seq(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<i64>> {
        let (org, only, id) = (org_id.to_owned(), only.cloned(), id.clone());
        Box::pin(async move {
            let c = self.client().await?;
            decisions::seq_of(&c, &org, env, only.as_ref(), &id).await
        })
    }

    fn decisions_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &DecisionFilters,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Decision)>> {
        let (org, filters) = (org_id.to_owned(), filters.clone());
        Box::pin(async move {
            let c = self.client().await?;
            decisions::page(&c, &org, env, &filters, before, limit).await
        })
    }

    fn settled_decision_seq(&self) -> StoreFuture<'_, i64> {
        Box::pin(async move { super::claims::watermark(&self.client().await?).await })
    }

    fn decisions_export_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &DecisionFilters,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Decision)>> {
        let (org, filters) = (org_id.to_owned(), filters.clone());
        Box::pin(async move {
            let c = self.client().await?;
            decisions::export_page(&c, &org, env, &filters, after, upto, limit).await
        })
    }
}

impl DeliveryStore for PostgresStore {
    fn due_deliveries(
        &self,
        now_ms: i64,
        per_webhook: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<Due>> {
        Box::pin(async move {
            let c = self.client().await?;
            deliveries::claim_due(&c, now_ms, per_webhook, limit).await
        })
    }

    fn release_deliveries(&self, ids: Vec<i64>) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(());
            }
            deliveries::release(&self.client().await?, &ids).await
        })
    }

    fn record_delivery(&self, id: i64, change: DeliveryChange) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            deliveries::record(&tx, id, &change).await?;
            Ok(tx.commit().await?)
        })
    }

    fn backlog(&self) -> StoreFuture<'_, Backlog> {
        Box::pin(async move {
            let (deliveries, reviews) = deliveries::backlog(&self.client().await?).await?;
            Ok(Backlog {
                deliveries,
                reviews,
            })
        })
    }

    fn deliveries_of(&self, event_id: &str) -> StoreFuture<'_, Vec<DeliveryRow>> {
        let event_id = event_id.to_owned();
        Box::pin(async move { deliveries::for_event(&self.client().await?, &event_id).await })
    }
}

impl EscrowStore for PostgresStore {
    fn fund_escrow(&self, funding: EscrowFunding) -> StoreFuture<'_, bool> {
        Box::pin(async move {
            let EscrowFunding {
                escrow,
                nonce,
                movement,
                event,
            } = &funding;
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            if !escrows::insert(&tx, escrow, nonce).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            settlement::record(&tx, movement).await?;
            let (org, env) = (&escrow.org_id, escrow.env);
            events::append(
                &tx,
                org,
                env,
                event.event_type,
                &event.data,
                escrow.created_ms,
            )
            .await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    fn escrow(
        &self,
        id: &EscrowId,
        owner: Option<(&str, Env)>,
    ) -> StoreFuture<'_, Option<EscrowRow>> {
        let (id, owner) = (id.clone(), owner.map(|(org, env)| (org.to_owned(), env)));
        Box::pin(async move {
            let c = self.client().await?;
            let owner = owner.as_ref().map(|(org, env)| (org.as_str(), *env));
            escrows::get(&c, &id, owner).await
        })
    }

    fn advance_escrow(
        &self,
        org_id: &str,
        env: Env,
        id: &EscrowId,
        change: EscrowChange,
    ) -> StoreFuture<'_, bool> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(async move {
            let EscrowChange {
                from,
                entry,
                step,
                movement,
                event,
            } = &change;
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            if !escrows::advance(&tx, (&org, env), &id, *from, entry, *step).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            if let Some(movement) = movement {
                settlement::record(&tx, movement).await?;
            }
            events::append(&tx, &org, env, event.event_type, &event.data, ms(entry.at)).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    fn escrow_movements(&self, id: &EscrowId) -> StoreFuture<'_, Vec<MovementRow>> {
        let id = id.clone();
        Box::pin(async move { settlement::of_escrow(&self.client().await?, id.as_str()).await })
    }
}

impl EventStore for PostgresStore {
    fn event(&self, org_id: &str, env: Env, id: &str) -> StoreFuture<'_, Option<EventRow>> {
        let (org, id) = (org_id.to_owned(), id.to_owned());
        Box::pin(async move { events::get(&self.client().await?, &org, env, &id).await })
    }

    fn events_page(
        &self,
        org_id: &str,
        env: Env,
        event_type: Option<&str>,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<EventRow>> {
        let (org, event_type) = (org_id.to_owned(), event_type.map(str::to_owned));
        Box::pin(async move {
            let c = self.client().await?;
            events::page(&c, &org, env, event_type.as_deref(), before, limit).await
        })
    }
}

impl IdempotencyStore for PostgresStore {
    fn claim_idempotency_key(
        &self,
        key_hash: [u8; 32],
        idem_key: &str,
        digest: [u8; 32],
        claim: ClaimToken,
        now: OffsetDateTime,
    ) -> StoreFuture<'_, (NextAction, Option<String>)> {
        let idem_key = idem_key.to_owned();
        Box::pin(async move {
            let mut c = self.client().await?;
            let now_ms = ms(now);
            if idempotency::claim_fresh(&c, &key_hash, &idem_key, &digest, &claim, now_ms).await? {
                return Ok((NextAction::StartProcessing, None));
            }
            let tx = c.transaction().await?;
            let claimed =
                idempotency::claim_existing(&tx, &key_hash, &idem_key, &digest, &claim, now_ms)
                    .await?;
            tx.commit().await?;
            Ok(claimed)
        })
    }

    fn finish_idempotency(
        &self,
        key_hash: [u8; 32],
        idem_key: &str,
        claim: ClaimToken,
        record: Option<IdempotencyRecord>,
    ) -> StoreFuture<'_, ()> {
        let idem_key = idem_key.to_owned();
        Box::pin(async move {
            let c = self.client().await?;
            match &record {
                Some(r) => idempotency::complete(&c, r).await,
                None => idempotency::release(&c, &key_hash, &idem_key, &claim).await,
            }
        })
    }

    fn sweep_idempotency(&self, older_than_ms: i64) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let now_ms = older_than_ms.saturating_add(WINDOW_MS);
            idempotency::sweep(&self.client().await?, older_than_ms, now_ms).await
        })
    }
}

/// How long idempotency records are kept: the start-up sweep is given `now` minus this.
const WINDOW_MS: i64 = mandate_core::idempotency::IDEMPOTENCY_WINDOW_SECS * 1000;

impl MandateStore for PostgresStore {
    fn insert_mandate(&self, org_id: &str, env: Env, mandate: &Mandate) -> StoreFuture<'_, ()> {
        let (org, mandate) = (org_id.to_owned(), mandate.clone());
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            mandates::insert(&tx, &org, env, &mandate).await?;
            Ok(tx.commit().await?)
        })
    }

    fn mandate(&self, org_id: &str, env: Env, id: &MandateId) -> StoreFuture<'_, Option<Mandate>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(async move { mandates::get(&self.client().await?, &org, env, &id).await })
    }

    fn mandates_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &MandateFilters,
        today: &str,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Mandate)>> {
        let (org, filters, today) = (org_id.to_owned(), filters.clone(), today.to_owned());
        Box::pin(async move {
            let c = self.client().await?;
            mandates::page(&c, &org, env, &filters, &today, before, limit).await
        })
    }

    fn revoke_mandate(
        &self,
        org_id: &str,
        env: Env,
        id: &MandateId,
        now: OffsetDateTime,
        decide: DecideRevocation,
    ) -> StoreFuture<'_, Revocation> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            let Some(mandate) = mandates::get_locked(&tx, &org, env, &id, false).await? else {
                tx.rollback().await?;
                return Ok(Revocation::Missing);
            };
            let change = match decide(&mandate, now) {
                Ok(change) => change,
                Err(status) => {
                    tx.rollback().await?;
                    return Ok(Revocation::NotActive(status));
                }
            };
            if !mandates::revoke(&tx, &id, change.at_ms).await? {
                tx.rollback().await?;
                return Ok(Revocation::NotActive(mandate.status));
            }
            agents::bump_version(&tx, &org, env, mandate.terms.agent.as_str()).await?;
            let event = &change.event;
            events::append(&tx, &org, env, event.event_type, &event.data, change.at_ms).await?;
            tx.commit().await?;
            Ok(Revocation::Revoked(Box::new(change.mandate)))
        })
    }

    fn mandate_allows_since(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
        mandate: &MandateId,
        since_ms: i64,
    ) -> StoreFuture<'_, Vec<(Amount, i64)>> {
        let (org, agent, mandate) = (org_id.to_owned(), agent.clone(), mandate.clone());
        Box::pin(async move {
            let c = self.client().await?;
            decisions::allowed_since(&c, &org, env, &agent, &mandate, since_ms).await
        })
    }
}

impl Ap2Store for PostgresStore {
    fn ap2_issuers(&self, org_id: &str) -> StoreFuture<'_, Vec<Ap2Issuer>> {
        let org = org_id.to_owned();
        Box::pin(async move { ap2::issuers(&self.client().await?, &org).await })
    }

    fn insert_ap2_mandate(
        &self,
        org_id: &str,
        env: Env,
        mandate: &Mandate,
        source: &Ap2Source,
    ) -> StoreFuture<'_, ()> {
        let (org, mandate, source) = (org_id.to_owned(), mandate.clone(), source.clone());
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            mandates::insert(&tx, &org, env, &mandate).await?;
            tx.execute(
                "UPDATE mandates SET ap2_open_mandate = $2, ap2_digest = $3 WHERE id = $1",
                &[&mandate.id.as_str(), &source.open_mandate, &source.digest],
            )
            .await?;
            Ok(tx.commit().await?)
        })
    }

    fn ap2_sources(
        &self,
        org_id: &str,
        env: Env,
        ids: &[MandateId],
    ) -> StoreFuture<'_, Vec<(MandateId, Ap2Source)>> {
        let org = org_id.to_owned();
        let ids: Vec<String> = ids.iter().map(|id| id.as_str().to_owned()).collect();
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let c = self.client().await?;
            let stmt = c
                .prepare_cached(
                    "SELECT id, ap2_open_mandate, ap2_digest FROM mandates
                     WHERE org_id = $1 AND env = $2 AND id = ANY($3) AND ap2_digest IS NOT NULL",
                )
                .await?;
            let mut out = Vec::new();
            for r in c.query(&stmt, &[&org, &env.as_str(), &ids]).await? {
                if let Some(source) = ap2::source_of(r.get(1), r.get(2)) {
                    out.push((ap2::mandate_id(r.get(0))?, source));
                }
            }
            Ok(out)
        })
    }

    fn current_ap2_source(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
    ) -> StoreFuture<'_, Option<(MandateId, Option<Ap2Source>)>> {
        let (org, agent) = (org_id.to_owned(), agent.clone());
        Box::pin(async move {
            let c = self.client().await?;
            let stmt = c
                .prepare_cached(
                    "SELECT id, ap2_open_mandate, ap2_digest FROM mandates
                     WHERE org_id = $1 AND env = $2 AND agent_id = $3 ORDER BY seq DESC LIMIT 1",
                )
                .await?;
            let row = c
                .query_opt(&stmt, &[&org, &env.as_str(), &agent.as_str()])
                .await?;
            row.map(|r| {
                Ok((
                    ap2::mandate_id(r.get(0))?,
                    ap2::source_of(r.get(1), r.get(2)),
                ))
            })
            .transpose()
        })
    }
}

impl OrgStore for PostgresStore {
    fn org_name(&self, org_id: &str) -> StoreFuture<'_, String> {
        let org = org_id.to_owned();
        Box::pin(async move { orgs::name(&self.client().await?, &org).await })
    }

    fn mode(&self, org_id: &str, env: Env) -> StoreFuture<'_, (Mode, i64)> {
        let org = org_id.to_owned();
        Box::pin(async move { orgs::mode(&self.client().await?, &org, env).await })
    }

    fn set_mode(
        &self,
        org_id: &str,
        env: Env,
        mode: Mode,
        now_ms: i64,
    ) -> StoreFuture<'_, (Mode, i64)> {
        let org = org_id.to_owned();
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            let set = orgs::set_mode(&tx, &org, env, mode, now_ms).await?;
            tx.commit().await?;
            Ok(set)
        })
    }
}

impl PeerStore for PostgresStore {
    fn heartbeat(&self, id: &str) -> StoreFuture<'_, u32> {
        let id = id.to_owned();
        Box::pin(async move {
            let c = self.client().await?;
            let stmt = c
                .prepare_cached(&format!(
                    "WITH beat AS (
                        INSERT INTO processes (id, expires_at)
                        VALUES ($1, now() + INTERVAL '{PEER_LEASE_MS} milliseconds')
                        ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at
                        RETURNING 1),
                     gone AS (
                        DELETE FROM processes WHERE expires_at < now() - INTERVAL '1 minute')
                     SELECT ((SELECT COUNT(*) FROM processes WHERE expires_at > now() AND id <> $1)
                             + (SELECT COUNT(*) FROM beat))::BIGINT"
                ))
                .await?;
            let live: i64 = c.query_one(&stmt, &[&id]).await?.get(0);
            Ok(u32::try_from(live.max(1)).unwrap_or(u32::MAX))
        })
    }

    fn leave(&self, id: &str) -> StoreFuture<'_, ()> {
        let id = id.to_owned();
        Box::pin(async move {
            let c = self.client().await?;
            c.execute("DELETE FROM processes WHERE id = $1", &[&id])
                .await?;
            Ok(())
        })
    }
}

impl HealthStore for PostgresStore {
    fn readiness(&self) -> StoreFuture<'_, Schema> {
        Box::pin(async move {
            let c = self.client().await?;
            // A write committed like any other (a new row version, its WAL flushed), that
            // leaves the value as it was.
            c.execute(
                "INSERT INTO counters (name, value) VALUES ('readiness_probe', 0)
                 ON CONFLICT (name) DO UPDATE SET value = counters.value",
                &[],
            )
            .await?;
            Ok(Schema {
                applied: migrations::applied(&c).await?,
                latest: migrations::latest(),
            })
        })
    }
}

impl TimerStore for PostgresStore {
    fn due_timers(
        &self,
        now_ms: i64,
        today: &str,
        horizon: &str,
        limit: i64,
    ) -> StoreFuture<'_, (Vec<DueItem>, Vec<DueItem>)> {
        let (today, horizon) = (today.to_owned(), horizon.to_owned());
        Box::pin(async move {
            let c = self.client().await?;
            Ok((
                timers::due_reviews(&c, now_ms, limit).await?,
                timers::due_expiring(&c, &today, &horizon, limit).await?,
            ))
        })
    }

    fn expire_review(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        decide: DecideExpiry,
    ) -> StoreFuture<'_, ()> {
        let item = item.clone();
        Box::pin(async move {
            let id = ReviewId::parse(&item.id)
                .map_err(|_| StorageError::Corrupt(format!("review id {:?}", item.id)))?;
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            // Locked, or left to the process that holds it.
            let Some((review, _agent)) =
                reviews::get(&tx, &item.org_id, item.env, &id, true).await?
            else {
                return Ok(tx.rollback().await?);
            };
            let Some(change) = decide(&review, now)? else {
                return Ok(tx.rollback().await?);
            };
            if reviews::resolve(&tx, &change.review).await? {
                let event = &change.event;
                events::append(
                    &tx,
                    &item.org_id,
                    item.env,
                    event.event_type,
                    &event.data,
                    change.at_ms,
                )
                .await?;
            }
            Ok(tx.commit().await?)
        })
    }

    fn fire_expiring(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        decide: DecideExpiring,
    ) -> StoreFuture<'_, ()> {
        let item = item.clone();
        Box::pin(async move {
            let id = MandateId::parse(&item.id)
                .map_err(|_| StorageError::Corrupt(format!("mandate id {:?}", item.id)))?;
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            // The mandate's row, locked: a process firing it meanwhile holds it, and this
            // one leaves it (it finds the mark on a later tick).
            let Some(mandate) =
                mandates::get_locked(&tx, &item.org_id, item.env, &id, true).await?
            else {
                return Ok(tx.rollback().await?);
            };
            let fired = timers::expiring_fired(&tx, &item.id).await?;
            let Some(ExpiringEvent { event, at_ms }) = decide(&mandate, fired, now) else {
                return Ok(tx.rollback().await?);
            };
            let event_id = events::append(
                &tx,
                &item.org_id,
                item.env,
                event.event_type,
                &event.data,
                at_ms,
            )
            .await?;
            timers::mark_expiring_fired(&tx, &item.id, event_id.as_str(), at_ms).await?;
            Ok(tx.commit().await?)
        })
    }
}

impl WebhookStore for PostgresStore {
    fn create_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        url: &str,
        events: &[String],
        now_ms: i64,
    ) -> StoreFuture<'_, WebhookRow> {
        let (org, id, url, events) = (
            org_id.to_owned(),
            id.clone(),
            url.to_owned(),
            events.to_vec(),
        );
        Box::pin(async move {
            let c = self.client().await?;
            webhooks::insert(&c, &org, env, &id, &url, &events, now_ms).await?;
            webhooks::get(&c, &org, env, &id)
                .await?
                .ok_or_else(|| StorageError::Corrupt(format!("webhook {id} vanished after insert")))
        })
    }

    fn webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
    ) -> StoreFuture<'_, Option<WebhookRow>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(async move { webhooks::get(&self.client().await?, &org, env, &id).await })
    }

    fn webhooks_page(
        &self,
        org_id: &str,
        env: Env,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<WebhookRow>> {
        let org = org_id.to_owned();
        Box::pin(async move {
            let c = self.client().await?;
            webhooks::page(&c, &org, env, before, limit).await
        })
    }

    fn delete_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<WebhookRow>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            let deleted = webhooks::delete(&tx, &org, env, &id, now_ms).await?;
            tx.commit().await?;
            Ok(deleted)
        })
    }

    fn ping_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        data: Value,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<EventId>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            if webhooks::get(&tx, &org, env, &id).await?.is_none() {
                tx.rollback().await?;
                return Ok(None);
            }
            let event =
                events::append_for_webhook(&tx, &org, env, PING_EVENT, &data, now_ms, &id).await?;
            tx.commit().await?;
            Ok(Some(event))
        })
    }
}

impl KeyStore for PostgresStore {
    fn key_generation(&self) -> StoreFuture<'_, i64> {
        Box::pin(async move { keys::generation(&self.client().await?).await })
    }

    fn signing_keys(&self, published_after_ms: i64) -> StoreFuture<'_, Vec<StoredKey>> {
        Box::pin(async move { signing::published(&self.client().await?, published_after_ms).await })
    }

    fn api_key(&self, hash: [u8; 32]) -> StoreFuture<'_, Option<ApiKeyRow>> {
        Box::pin(async move { keys::api_key(&self.client().await?, &hash).await })
    }
}

impl AdminStore for PostgresStore {
    fn create_org(&self, org: &NewOrg) -> Result<Option<String>> {
        let org = org.clone();
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            if orgs::id_by_name(&tx, &org.name).await?.is_some() {
                tx.rollback().await?;
                return Ok(None);
            }
            let n = orgs::count_policy_versions_on(&tx, &org.policy_prefix).await? + 1;
            let version = format!("{}{n}", org.policy_prefix);
            orgs::create(&tx, &org.id, &org.name, &version, org.now_ms).await?;
            for (hash, env, binding) in &org.keys {
                let key = (hash, binding.as_deref());
                keys::insert(&tx, key, &org.id, *env, KeyClass::Org, None, org.now_ms).await?;
            }
            tx.commit().await?;
            Ok(Some(version))
        }))
    }

    fn org_id_by_name(&self, name: &str) -> Result<Option<String>> {
        let name = name.to_owned();
        self.blocking(job(
            move |c| async move { orgs::id_by_name(&c, &name).await },
        ))
    }

    fn insert_org_key(
        &self,
        org_id: &str,
        env: Env,
        hash: &[u8; 32],
        binding: Option<Vec<u8>>,
        now_ms: i64,
    ) -> Result<String> {
        let (org, hash) = (org_id.to_owned(), *hash);
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            let key = (&hash, binding.as_deref());
            let fp = keys::insert(&tx, key, &org, env, KeyClass::Org, None, now_ms).await?;
            tx.commit().await?;
            Ok(fp)
        }))
    }

    fn all_api_keys(&self) -> Result<Vec<StoredApiKey>> {
        self.blocking(job(move |c| async move { keys::all_unrevoked(&c).await }))
    }

    fn replace_api_key_bindings(&self, changes: &[BindingChange]) -> Result<bool> {
        let changes = changes.to_vec();
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            if !keys::replace_bindings(&tx, &changes).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            tx.commit().await?;
            Ok(true)
        }))
    }

    fn key_hash_by_fingerprint(&self, fingerprint: &str) -> Result<Option<Vec<u8>>> {
        let fp = fingerprint.to_owned();
        self.blocking(job(move |c| async move {
            keys::hash_by_fingerprint(&c, &fp).await
        }))
    }

    fn revoke_key(&self, hash: &[u8], now_ms: i64) -> Result<bool> {
        let hash = hash.to_vec();
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            let revoked = keys::revoke(&tx, &hash, now_ms).await?;
            if revoked {
                keys::bump_generation(&tx).await?;
            }
            tx.commit().await?;
            Ok(revoked)
        }))
    }

    fn set_key_rate(&self, hash: &[u8], per_sec: u32) -> Result<bool> {
        let hash = hash.to_vec();
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            let set = keys::set_rate(&tx, &hash, per_sec).await?;
            if set {
                keys::bump_generation(&tx).await?;
            }
            tx.commit().await?;
            Ok(set)
        }))
    }

    fn set_policy_version(&self, org_id: &str, version: &str) -> Result<()> {
        let (org, version) = (org_id.to_owned(), version.to_owned());
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            orgs::set_policy_version(&tx, &org, &version).await?;
            keys::bump_generation(&tx).await?;
            Ok(tx.commit().await?)
        }))
    }

    fn list_keys(&self, org_id: &str) -> Result<Vec<KeyInfo>> {
        let org = org_id.to_owned();
        self.blocking(job(move |c| async move { keys::list(&c, &org).await }))
    }

    fn add_ap2_issuer(&self, org_id: &str, kid: &str, jwk: &str, now_ms: i64) -> Result<bool> {
        let (org, kid, jwk) = (org_id.to_owned(), kid.to_owned(), jwk.to_owned());
        self.blocking(job(move |c| async move {
            ap2::add_issuer(&c, &org, &kid, &jwk, now_ms).await
        }))
    }

    fn list_ap2_issuers(&self, org_id: &str) -> Result<Vec<Ap2Issuer>> {
        let org = org_id.to_owned();
        self.blocking(job(move |c| async move { ap2::issuers(&c, &org).await }))
    }

    fn remove_ap2_issuer(&self, org_id: &str, kid: &str) -> Result<bool> {
        let (org, kid) = (org_id.to_owned(), kid.to_owned());
        self.blocking(job(move |c| async move {
            ap2::remove_issuer(&c, &org, &kid).await
        }))
    }

    fn rotate_signing_key(&self, env: Env, seal: &SealNew<'_>, now_ms: i64) -> Result<String> {
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            let kid = signing::rotate(&tx, env, seal, now_ms).await?;
            // Every process reloads its signing keys when it sees it move.
            keys::bump_generation(&tx).await?;
            tx.commit().await?;
            Ok(kid)
        }))
    }

    fn ensure_signing_key(&self, env: Env, seal: &SealNew<'_>, now_ms: i64) -> Result<()> {
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            signing::ensure(&tx, env, seal, now_ms).await?;
            Ok(tx.commit().await?)
        }))
    }

    fn all_signing_keys(&self) -> Result<Vec<StoredKey>> {
        self.blocking(job(move |c| async move {
            signing::published(&c, i64::MIN).await
        }))
    }

    fn replace_signing_key_secrets(&self, changes: &[SecretChange]) -> Result<bool> {
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            if !signing::replace(&tx, changes).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            tx.commit().await?;
            signing::compact(&c).await;
            Ok(true)
        }))
    }

    fn signing_keys_now(&self, published_after_ms: i64) -> Result<Vec<StoredKey>> {
        self.blocking(job(move |c| async move {
            signing::published(&c, published_after_ms).await
        }))
    }

    fn key_generation_now(&self) -> Result<i64> {
        self.blocking(job(move |c| async move { keys::generation(&c).await }))
    }

    fn prepare_start(&self, older_than_ms: i64, fresh_cursor_secret: &[u8]) -> Result<Vec<u8>> {
        let fresh = fresh_cursor_secret.to_vec();
        self.blocking(job(move |mut c| async move {
            let tx = c.transaction().await?;
            // Only claims that ran out: other processes may be serving with theirs.
            let now_ms = older_than_ms.saturating_add(WINDOW_MS);
            idempotency::sweep(&tx, older_than_ms, now_ms).await?;
            let secret = signing::setting_or_insert(&tx, "cursor_secret", &fresh).await?;
            tx.commit().await?;
            Ok(secret)
        }))
    }
}
