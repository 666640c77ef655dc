//! [`SqliteStore`]: the SQLite engine behind the storage boundary. Each method is one
//! closure on [`Db::write`] (one transaction, committed in a group with others) or
//! [`Db::read`] (a reader connection off the executor), calling this module's SQL.
//!
//! Longer than most files on purpose: it is the engine's whole surface, every trait of the
//! boundary implemented in one place, each method a few lines; the SQL itself is in the
//! per-resource files beside it.

use mandate_core::amount::Amount;
use mandate_core::id::{AgentId, DecisionId, EscrowId, EventId, MandateId, ReviewId, WebhookId};
use mandate_core::idempotency::{NextAction, next_action};
use mandate_core::mandate::Mandate;
use mandate_core::policy::Mode;
use serde_json::Value;
use time::OffsetDateTime;

use super::{
    Db, agents, ap2, decisions, deliveries, escrows, events, idempotency, keys, mandates, orgs,
    reviews, settlement, signing, timers, webhooks,
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
use crate::storage::idempotency::{ClaimToken, IdempotencyRecord, IdempotencyStore};
use crate::storage::keys::{
    ApiKeyRow, BindingChange, KeyInfo, KeyStore, SealNew, StoredApiKey, StoredKey,
};
use crate::storage::mandates::{
    DecideRevocation, Filters as MandateFilters, MandateStore, Revocation,
};
use crate::storage::orgs::OrgStore;
use crate::storage::peers::PeerStore;
use crate::storage::timers::{DecideExpiring, DecideExpiry, DueItem, ExpiringEvent, TimerStore};
use crate::storage::webhooks::{PING_EVENT, WebhookRow, WebhookStore};
use crate::storage::{StorageError, StoreFuture};

/// The SQLite engine: the embedded default, one file with group commit.
#[derive(Clone)]
pub struct SqliteStore {
    db: Db,
}

impl SqliteStore {
    /// The engine over an open database.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The database handle.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

type Result<T> = std::result::Result<T, StorageError>;

impl AgentStore for SqliteStore {
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
        Box::pin(self.db.write(move |tx| -> Result<_> {
            if !agents::insert(tx, &id, &org, env, now_ms)? {
                return Ok(None);
            }
            keys::insert(
                tx,
                keys::NewKey {
                    hash: &key_hash,
                    binding: key_binding.as_deref(),
                },
                &org,
                env,
                KeyClass::Agent,
                Some(id.as_str()),
                now_ms,
            )?;
            let row = agents::get(tx, &org, env, &id)?;
            row.map(Some)
                .ok_or_else(|| StorageError::Corrupt(format!("agent {id} vanished after insert")))
        }))
    }

    fn agent(&self, org_id: &str, env: Env, id: &AgentId) -> StoreFuture<'_, Option<AgentRow>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(
            self.db
                .read(move |conn| -> Result<_> { Ok(agents::get(conn, &org, env, &id)?) }),
        )
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
        Box::pin(self.db.read(move |conn| -> Result<_> {
            Ok(agents::page(conn, &org, env, only.as_ref(), before, limit)?)
        }))
    }
}

impl DecisionStore for SqliteStore {
    fn decision(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<Decision>> {
        let (org, only, id) = (org_id.to_owned(), only.cloned(), id.clone());
        Box::pin(
            self.db
                .read(move |conn| decisions::get(conn, &org, env, only.as_ref(), &id)),
        )
    }

    fn decision_seq(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<i64>> {
        let (org, only, id) = (org_id.to_owned(), only.cloned(), id.clone());
        Box::pin(
            self.db
                .read(move |conn| decisions::seq_of(conn, &org, env, only.as_ref(), &id)),
        )
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
        Box::pin(
            self.db
                .read(move |conn| decisions::page(conn, &org, env, &filters, before, limit)),
        )
    }

    fn settled_decision_seq(&self) -> StoreFuture<'_, i64> {
        Box::pin(
            self.db
                .read(|conn| -> Result<_> { Ok(decisions::last_seq(conn)?) }),
        )
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
        Box::pin(self.db.read(move |conn| {
            decisions::export_page(conn, &org, env, &filters, after, upto, limit)
        }))
    }
}

impl DeliveryStore for SqliteStore {
    fn due_deliveries(
        &self,
        now_ms: i64,
        per_webhook: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<Due>> {
        Box::pin(
            self.db
                .read(move |conn| deliveries::due(conn, now_ms, per_webhook, limit)),
        )
    }

    fn record_delivery(&self, id: i64, change: DeliveryChange) -> StoreFuture<'_, ()> {
        Box::pin(
            self.db
                .write(move |tx| -> Result<()> { Ok(deliveries::record(tx, id, &change)?) }),
        )
    }

    fn backlog(&self) -> StoreFuture<'_, Backlog> {
        Box::pin(self.db.read(|conn| -> Result<Backlog> {
            Ok(conn
                .prepare_cached(
                    "SELECT (SELECT COUNT(*) FROM deliveries WHERE state = 'pending'),
                            (SELECT COUNT(*) FROM reviews WHERE status = 'pending')",
                )?
                .query_row([], |r| {
                    Ok(Backlog {
                        deliveries: r.get(0)?,
                        reviews: r.get(1)?,
                    })
                })?)
        }))
    }

    fn deliveries_of(&self, event_id: &str) -> StoreFuture<'_, Vec<DeliveryRow>> {
        let event_id = event_id.to_owned();
        Box::pin(
            self.db
                .read(move |conn| -> Result<_> { Ok(deliveries::for_event(conn, &event_id)?) }),
        )
    }
}

impl EscrowStore for SqliteStore {
    fn fund_escrow(&self, funding: EscrowFunding) -> StoreFuture<'_, bool> {
        Box::pin(self.db.write(move |tx| -> Result<bool> {
            let EscrowFunding {
                escrow,
                nonce,
                movement,
                event,
            } = &funding;
            if !escrows::insert(tx, escrow, nonce)? {
                return Ok(false);
            }
            settlement::record(tx, movement)?;
            let (org, env) = (&escrow.org_id, escrow.env);
            events::append(
                tx,
                org,
                env,
                event.event_type,
                &event.data,
                escrow.created_ms,
            )?;
            Ok(true)
        }))
    }

    fn escrow(
        &self,
        id: &EscrowId,
        owner: Option<(&str, Env)>,
    ) -> StoreFuture<'_, Option<EscrowRow>> {
        let (id, owner) = (id.clone(), owner.map(|(org, env)| (org.to_owned(), env)));
        Box::pin(self.db.read(move |conn| {
            let owner = owner.as_ref().map(|(org, env)| (org.as_str(), *env));
            escrows::get(conn, &id, owner)
        }))
    }

    fn advance_escrow(
        &self,
        org_id: &str,
        env: Env,
        id: &EscrowId,
        change: EscrowChange,
    ) -> StoreFuture<'_, bool> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(self.db.write(move |tx| -> Result<bool> {
            let EscrowChange {
                from,
                entry,
                step,
                movement,
                event,
            } = &change;
            if !escrows::advance(tx, (&org, env), &id, *from, entry, *step)? {
                return Ok(false);
            }
            if let Some(movement) = movement {
                settlement::record(tx, movement)?;
            }
            let at = ms(entry.at);
            events::append(tx, &org, env, event.event_type, &event.data, at)?;
            Ok(true)
        }))
    }

    fn escrow_movements(&self, id: &EscrowId) -> StoreFuture<'_, Vec<MovementRow>> {
        let id = id.clone();
        Box::pin(
            self.db
                .read(move |conn| settlement::of_escrow(conn, id.as_str())),
        )
    }
}

impl EventStore for SqliteStore {
    fn event(&self, org_id: &str, env: Env, id: &str) -> StoreFuture<'_, Option<EventRow>> {
        let (org, id) = (org_id.to_owned(), id.to_owned());
        Box::pin(self.db.read(move |conn| events::get(conn, &org, env, &id)))
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
        Box::pin(
            self.db.read(move |conn| {
                events::page(conn, &org, env, event_type.as_deref(), before, limit)
            }),
        )
    }
}

impl IdempotencyStore for SqliteStore {
    fn claim_idempotency_key(
        &self,
        key_hash: [u8; 32],
        idem_key: &str,
        digest: [u8; 32],
        claim: ClaimToken,
        now: OffsetDateTime,
    ) -> StoreFuture<'_, (NextAction, Option<String>)> {
        let idem_key = idem_key.to_owned();
        Box::pin(self.db.write(move |tx| -> Result<_> {
            let stored = idempotency::get(tx, &key_hash, &idem_key, ms(now))?;
            let action = next_action(stored.as_ref().map(|s| &s.0), &digest, now);
            if action == NextAction::StartProcessing {
                idempotency::claim(tx, &key_hash, &idem_key, &digest, &claim, ms(now))?;
            }
            Ok((action, stored.and_then(|s| s.1)))
        }))
    }

    fn finish_idempotency(
        &self,
        key_hash: [u8; 32],
        idem_key: &str,
        claim: ClaimToken,
        record: Option<IdempotencyRecord>,
    ) -> StoreFuture<'_, ()> {
        let idem_key = idem_key.to_owned();
        Box::pin(self.db.write(move |tx| -> Result<()> {
            match &record {
                Some(r) => idempotency::complete(tx, r)?,
                None => idempotency::release(tx, &key_hash, &idem_key, &claim)?,
            }
            Ok(())
        }))
    }

    fn sweep_idempotency(&self, older_than_ms: i64) -> StoreFuture<'_, usize> {
        Box::pin(
            self.db
                .write(move |tx| -> Result<usize> { Ok(idempotency::sweep(tx, older_than_ms)?) }),
        )
    }
}

impl MandateStore for SqliteStore {
    fn mandate_allows_since(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
        mandate: &MandateId,
        since_ms: i64,
    ) -> StoreFuture<'_, Vec<(Amount, i64)>> {
        let (org, agent, mandate) = (org_id.to_owned(), agent.clone(), mandate.clone());
        Box::pin(self.db.read(move |conn| {
            decisions::allowed_since(conn, &org, env, agent.as_str(), mandate.as_str(), since_ms)
        }))
    }

    fn insert_mandate(&self, org_id: &str, env: Env, mandate: &Mandate) -> StoreFuture<'_, ()> {
        let (org, mandate) = (org_id.to_owned(), mandate.clone());
        Box::pin(
            self.db
                .write(move |tx| -> Result<()> { Ok(mandates::insert(tx, &org, env, &mandate)?) }),
        )
    }

    fn mandate(&self, org_id: &str, env: Env, id: &MandateId) -> StoreFuture<'_, Option<Mandate>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(
            self.db
                .read(move |conn| mandates::get(conn, &org, env, &id)),
        )
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
        Box::pin(
            self.db
                .read(move |conn| mandates::page(conn, &org, env, &filters, &today, before, limit)),
        )
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
        Box::pin(self.db.write(move |tx| -> Result<Revocation> {
            let Some(mandate) = mandates::get(tx, &org, env, &id)? else {
                return Ok(Revocation::Missing);
            };
            let change = match decide(&mandate, now) {
                Ok(change) => change,
                Err(status) => return Ok(Revocation::NotActive(status)),
            };
            if !mandates::revoke(tx, &id, change.at_ms)? {
                return Ok(Revocation::NotActive(mandate.status));
            }
            let event = &change.event;
            events::append(tx, &org, env, event.event_type, &event.data, change.at_ms)?;
            Ok(Revocation::Revoked(Box::new(change.mandate)))
        }))
    }
}

impl Ap2Store for SqliteStore {
    fn ap2_issuers(&self, org_id: &str) -> StoreFuture<'_, Vec<Ap2Issuer>> {
        let org = org_id.to_owned();
        Box::pin(
            self.db
                .read(move |conn| -> Result<_> { Ok(ap2::issuers(conn, &org)?) }),
        )
    }

    fn insert_ap2_mandate(
        &self,
        org_id: &str,
        env: Env,
        mandate: &Mandate,
        source: &Ap2Source,
    ) -> StoreFuture<'_, ()> {
        let (org, mandate, source) = (org_id.to_owned(), mandate.clone(), source.clone());
        Box::pin(self.db.write(move |tx| -> Result<()> {
            mandates::insert(tx, &org, env, &mandate)?;
            Ok(ap2::set_source(tx, &mandate.id, &source)?)
        }))
    }

    fn ap2_sources(
        &self,
        org_id: &str,
        env: Env,
        ids: &[MandateId],
    ) -> StoreFuture<'_, Vec<(MandateId, Ap2Source)>> {
        let (org, ids) = (org_id.to_owned(), ids.to_vec());
        Box::pin(
            self.db
                .read(move |conn| -> Result<_> { Ok(ap2::sources(conn, &org, env, &ids)?) }),
        )
    }

    fn current_ap2_source(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
    ) -> StoreFuture<'_, Option<(MandateId, Option<Ap2Source>)>> {
        let (org, agent) = (org_id.to_owned(), agent.clone());
        Box::pin(
            self.db
                .read(move |conn| ap2::current_source(conn, &org, env, agent.as_str())),
        )
    }
}

impl OrgStore for SqliteStore {
    fn org_name(&self, org_id: &str) -> StoreFuture<'_, String> {
        let org = org_id.to_owned();
        Box::pin(self.db.read(move |conn| orgs::name(conn, &org)))
    }

    fn mode(&self, org_id: &str, env: Env) -> StoreFuture<'_, (Mode, i64)> {
        let org = org_id.to_owned();
        Box::pin(self.db.read(move |conn| orgs::mode(conn, &org, env)))
    }

    fn set_mode(
        &self,
        org_id: &str,
        env: Env,
        mode: Mode,
        now_ms: i64,
    ) -> StoreFuture<'_, (Mode, i64)> {
        let org = org_id.to_owned();
        Box::pin(
            self.db
                .write(move |tx| orgs::set_mode(tx, &org, env, mode, now_ms)),
        )
    }
}

/// One process has the file: the one alive is this one.
impl PeerStore for SqliteStore {
    fn heartbeat(&self, _id: &str) -> StoreFuture<'_, u32> {
        Box::pin(async { Ok(1) })
    }

    fn leave(&self, _id: &str) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

impl TimerStore for SqliteStore {
    fn due_timers(
        &self,
        now_ms: i64,
        today: &str,
        horizon: &str,
        limit: i64,
    ) -> StoreFuture<'_, (Vec<DueItem>, Vec<DueItem>)> {
        let (today, horizon) = (today.to_owned(), horizon.to_owned());
        Box::pin(self.db.read(move |conn| -> Result<_> {
            Ok((
                timers::due_reviews(conn, now_ms, limit)?,
                timers::due_expiring(conn, &today, &horizon, limit)?,
            ))
        }))
    }

    fn expire_review(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        decide: DecideExpiry,
    ) -> StoreFuture<'_, ()> {
        let item = item.clone();
        Box::pin(self.db.write(move |tx| -> Result<()> {
            let id = ReviewId::parse(&item.id)
                .map_err(|_| StorageError::Corrupt(format!("review id {:?}", item.id)))?;
            let Some((review, _agent)) = reviews::get(tx, &item.org_id, item.env, &id)? else {
                return Ok(());
            };
            let Some(change) = decide(&review, now)? else {
                return Ok(());
            };
            if reviews::resolve(tx, &change.review)? {
                let event = &change.event;
                events::append(
                    tx,
                    &item.org_id,
                    item.env,
                    event.event_type,
                    &event.data,
                    change.at_ms,
                )?;
            }
            Ok(())
        }))
    }

    fn fire_expiring(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        decide: DecideExpiring,
    ) -> StoreFuture<'_, ()> {
        let item = item.clone();
        Box::pin(self.db.write(move |tx| -> Result<()> {
            let id = MandateId::parse(&item.id)
                .map_err(|_| StorageError::Corrupt(format!("mandate id {:?}", item.id)))?;
            let Some(mandate) = mandates::get(tx, &item.org_id, item.env, &id)? else {
                return Ok(());
            };
            let fired = timers::expiring_fired(tx, &item.id)?;
            let Some(ExpiringEvent { event, at_ms }) = decide(&mandate, fired, now) else {
                return Ok(());
            };
            let event_id = events::append(
                tx,
                &item.org_id,
                item.env,
                event.event_type,
                &event.data,
                at_ms,
            )?;
            timers::mark_expiring_fired(tx, &item.id, event_id.as_str(), at_ms)?;
            Ok(())
        }))
    }
}

impl WebhookStore for SqliteStore {
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
        Box::pin(self.db.write(move |tx| -> Result<WebhookRow> {
            webhooks::insert(tx, &org, env, &id, &url, &events, now_ms)?;
            webhooks::get(tx, &org, env, &id)?
                .ok_or_else(|| StorageError::Corrupt(format!("webhook {id} vanished after insert")))
        }))
    }

    fn webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
    ) -> StoreFuture<'_, Option<WebhookRow>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(
            self.db
                .read(move |conn| webhooks::get(conn, &org, env, &id)),
        )
    }

    fn webhooks_page(
        &self,
        org_id: &str,
        env: Env,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<WebhookRow>> {
        let org = org_id.to_owned();
        Box::pin(
            self.db
                .read(move |conn| webhooks::page(conn, &org, env, before, limit)),
        )
    }

    fn delete_webhook(
        &self,
        org_id: &str,
        env: Env,
        id: &WebhookId,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<WebhookRow>> {
        let (org, id) = (org_id.to_owned(), id.clone());
        Box::pin(
            self.db
                .write(move |tx| webhooks::delete(tx, &org, env, &id, now_ms)),
        )
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
        Box::pin(self.db.write(move |tx| -> Result<Option<EventId>> {
            if webhooks::get(tx, &org, env, &id)?.is_none() {
                return Ok(None);
            }
            let event = events::append_for_webhook(tx, &org, env, PING_EVENT, &data, now_ms, &id)?;
            Ok(Some(event))
        }))
    }
}

impl KeyStore for SqliteStore {
    fn key_generation(&self) -> StoreFuture<'_, i64> {
        Box::pin(
            self.db
                .read(|conn| -> Result<i64> { Ok(keys::generation(conn)?) }),
        )
    }

    fn signing_keys(&self, published_after_ms: i64) -> StoreFuture<'_, Vec<StoredKey>> {
        Box::pin(
            self.db.read(move |conn| -> Result<_> {
                Ok(signing::published(conn, published_after_ms)?)
            }),
        )
    }

    fn api_key(&self, hash: [u8; 32]) -> StoreFuture<'_, Option<ApiKeyRow>> {
        Box::pin(
            self.db
                .read(move |conn| -> Result<_> { keys::api_key(conn, &hash) }),
        )
    }
}

impl AdminStore for SqliteStore {
    fn create_org(&self, org: &NewOrg) -> Result<Option<String>> {
        self.db.write_blocking(|tx| -> Result<_> {
            if orgs::id_by_name(tx, &org.name)?.is_some() {
                return Ok(None);
            }
            let n = orgs::count_policy_versions_on(tx, &org.policy_prefix)? + 1;
            let version = format!("{}{n}", org.policy_prefix);
            orgs::create(tx, &org.id, &org.name, &version, org.now_ms)?;
            for (hash, env, binding) in &org.keys {
                let key = keys::NewKey {
                    hash,
                    binding: binding.as_deref(),
                };
                keys::insert(tx, key, &org.id, *env, KeyClass::Org, None, org.now_ms)?;
            }
            Ok(Some(version))
        })
    }

    fn org_id_by_name(&self, name: &str) -> Result<Option<String>> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(orgs::id_by_name(tx, name)?) })
    }

    fn insert_org_key(
        &self,
        org_id: &str,
        env: Env,
        hash: &[u8; 32],
        binding: Option<Vec<u8>>,
        now_ms: i64,
    ) -> Result<String> {
        self.db.write_blocking(|tx| -> Result<_> {
            Ok(keys::insert(
                tx,
                keys::NewKey {
                    hash,
                    binding: binding.as_deref(),
                },
                org_id,
                env,
                KeyClass::Org,
                None,
                now_ms,
            )?)
        })
    }

    fn all_api_keys(&self) -> Result<Vec<StoredApiKey>> {
        self.db
            .write_blocking(|tx| -> Result<_> { keys::all_unrevoked(tx) })
    }

    fn replace_api_key_bindings(&self, changes: &[BindingChange]) -> Result<bool> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(keys::replace_bindings(tx, changes)?) })
    }

    fn key_hash_by_fingerprint(&self, fingerprint: &str) -> Result<Option<Vec<u8>>> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(keys::hash_by_fingerprint(tx, fingerprint)?) })
    }

    fn revoke_key(&self, hash: &[u8], now_ms: i64) -> Result<bool> {
        self.db.write_blocking(|tx| -> Result<_> {
            let revoked = keys::revoke(tx, hash, now_ms)?;
            if revoked {
                keys::bump_generation(tx)?;
            }
            Ok(revoked)
        })
    }

    fn set_key_rate(&self, hash: &[u8], per_sec: u32) -> Result<bool> {
        self.db.write_blocking(|tx| -> Result<_> {
            let set = keys::set_rate(tx, hash, per_sec)?;
            if set {
                keys::bump_generation(tx)?;
            }
            Ok(set)
        })
    }

    fn set_policy_version(&self, org_id: &str, version: &str) -> Result<()> {
        self.db.write_blocking(|tx| -> Result<_> {
            orgs::set_policy_version(tx, org_id, version)?;
            keys::bump_generation(tx)?;
            Ok(())
        })
    }

    fn list_keys(&self, org_id: &str) -> Result<Vec<KeyInfo>> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(keys::list(tx, org_id)?) })
    }

    fn add_ap2_issuer(&self, org_id: &str, kid: &str, jwk: &str, now_ms: i64) -> Result<bool> {
        self.db.write_blocking(|tx| -> Result<_> {
            Ok(ap2::add_issuer(tx, org_id, kid, jwk, now_ms)?)
        })
    }

    fn list_ap2_issuers(&self, org_id: &str) -> Result<Vec<Ap2Issuer>> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(ap2::issuers(tx, org_id)?) })
    }

    fn remove_ap2_issuer(&self, org_id: &str, kid: &str) -> Result<bool> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(ap2::remove_issuer(tx, org_id, kid)?) })
    }

    fn rotate_signing_key(&self, env: Env, seal: &SealNew<'_>, now_ms: i64) -> Result<String> {
        self.db.write_blocking(|tx| {
            let kid = signing::rotate(tx, env, seal, now_ms)?;
            // Running servers reload their signing keys when they see it move.
            keys::bump_generation(tx)?;
            Ok(kid)
        })
    }

    fn ensure_signing_key(&self, env: Env, seal: &SealNew<'_>, now_ms: i64) -> Result<()> {
        self.db.write_blocking(|tx| -> Result<()> {
            if !signing::has_current(tx, env)? {
                signing::rotate(tx, env, seal, now_ms)?;
            }
            Ok(())
        })
    }

    fn signing_keys_now(&self, published_after_ms: i64) -> Result<Vec<StoredKey>> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(signing::published(tx, published_after_ms)?) })
    }

    fn all_signing_keys(&self) -> Result<Vec<StoredKey>> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(signing::all(tx)?) })
    }

    fn replace_signing_key_secrets(&self, changes: &[SecretChange]) -> Result<bool> {
        let replaced = self
            .db
            .write_blocking(|tx| -> Result<_> { Ok(signing::replace(tx, changes)?) })?;
        if replaced {
            // The replaced bytes are still in older WAL frames: copy the pages into the
            // file and empty the WAL (best effort: readers may hold it back).
            self.db.checkpoint_truncate();
        }
        Ok(replaced)
    }

    fn key_generation_now(&self) -> Result<i64> {
        self.db
            .write_blocking(|tx| -> Result<_> { Ok(keys::generation(tx)?) })
    }

    fn prepare_start(&self, older_than_ms: i64, fresh_cursor_secret: &[u8]) -> Result<Vec<u8>> {
        self.db.write_blocking(|tx| -> Result<_> {
            idempotency::sweep(tx, older_than_ms)?;
            Ok(signing::setting_or_insert(
                tx,
                "cursor_secret",
                fresh_cursor_secret,
            )?)
        })
    }
}
