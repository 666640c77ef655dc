//! Per-agent state in memory: the current mandate and the engine's history, behind one
//! async lock per agent.
//!
//! Requests of one agent are serialized by its lock, so month-to-date and the velocity
//! window are exact under concurrency; requests of different agents never wait on each
//! other. State is loaded from the database on first use (after a restart, it is rebuilt
//! from stored decisions) and every change to an agent's mandate goes through the lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mandate_core::history::{AgentHistory, VELOCITY_LIMIT};
use mandate_core::id::AgentId;
use mandate_core::mandate::Mandate;
use time::{Date, OffsetDateTime, Time, UtcOffset};
use tokio::sync::OwnedMutexGuard;

use crate::clock::{from_ms, ms};
use crate::http::error::ApiError;
use crate::model::Env;
use crate::storage::{Db, StorageError, decisions, mandates};

/// What the engine needs about one agent.
#[derive(Debug, Clone, Default)]
pub struct AgentState {
    /// The agent's current mandate (its newest, whatever its status).
    pub mandate: Option<Mandate>,
    /// Velocity window and month-to-date spend.
    pub history: AgentHistory,
    /// What storing its next decision need not look up again.
    pub stored: decisions::AgentHint,
}

/// A slot: `None` until loaded from the database.
pub type Slot = Option<AgentState>;

/// The organization id is the caller's shared copy (`cache::KeyCache`), not one per agent.
type Key = (Arc<str>, Env, AgentId);

/// One agent's lock and state.
pub type AgentSlot = Arc<tokio::sync::Mutex<Slot>>;

/// The locks and cached states of all agents seen since start.
#[derive(Default, Clone)]
pub struct AgentStates {
    slots: Arc<Mutex<HashMap<Key, AgentSlot>>>,
}

/// The first instant of the UTC month that contains `now`.
pub fn month_start(now: OffsetDateTime) -> OffsetDateTime {
    let now = now.to_offset(UtcOffset::UTC);
    Date::from_calendar_date(now.year(), now.month(), 1)
        .map(|d| d.with_time(Time::MIDNIGHT).assume_utc())
        .unwrap_or(now)
}

/// Rebuilds an agent's state from stored mandates and decisions.
pub fn rebuild(
    conn: &rusqlite::Connection,
    org_id: &str,
    env: Env,
    agent: &AgentId,
    now: OffsetDateTime,
) -> Result<AgentState, StorageError> {
    let mandate = mandates::current(conn, org_id, env.as_str(), agent.as_str())?;
    let mut history = AgentHistory::default();
    let limit = i64::try_from(VELOCITY_LIMIT).unwrap_or(10);
    for at in decisions::recent_request_times(conn, org_id, env.as_str(), agent.as_str(), limit)? {
        history.velocity.record(at);
    }
    if let Some(m) = &mandate {
        let since = ms(month_start(now));
        let allowed = decisions::allowed_since(
            conn,
            org_id,
            env.as_str(),
            agent.as_str(),
            m.id.as_str(),
            since,
        )?;
        for (amount, at) in allowed {
            history.spend.add(amount, from_ms(at));
        }
    }
    let stored = decisions::AgentHint {
        seq: decisions::agent_seq(conn, org_id, env.as_str(), agent.as_str())?,
        month_marked: None,
    };
    Ok(AgentState {
        mandate,
        history,
        stored,
    })
}

impl AgentStates {
    /// The agent's slot, created empty on its first use. The map never removes a slot, so
    /// the one returned stays the agent's only one for the life of the process: it may be
    /// kept elsewhere (the key cache keeps an agent key's) and locked later.
    pub fn slot(&self, org_id: &Arc<str>, env: Env, agent: &AgentId) -> AgentSlot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .entry((Arc::clone(org_id), env, agent.clone()))
            .or_default()
            .clone()
    }

    /// Locks the agent's slot and loads it if needed. Hold the guard across the whole
    /// read-evaluate-persist-update sequence.
    pub async fn lock(
        &self,
        db: &Db,
        org_id: &Arc<str>,
        env: Env,
        agent: &AgentId,
        now: OffsetDateTime,
    ) -> Result<OwnedMutexGuard<Slot>, ApiError> {
        let slot = self.slot(org_id, env, agent);
        Self::lock_slot(slot, db, org_id, env, agent, now).await
    }

    /// [`AgentStates::lock`] with the agent's slot already in hand (from
    /// [`AgentStates::slot`] for the same agent).
    pub async fn lock_slot(
        slot: AgentSlot,
        db: &Db,
        org_id: &Arc<str>,
        env: Env,
        agent: &AgentId,
        now: OffsetDateTime,
    ) -> Result<OwnedMutexGuard<Slot>, ApiError> {
        let mut guard = slot.lock_owned().await;
        if guard.is_none() {
            let (org, agent) = (org_id.to_owned(), agent.clone());
            let state = db
                .read(move |conn| -> Result<_, ApiError> {
                    // One read transaction: one snapshot, and the WAL's read lock taken
                    // once rather than by each of the rebuild's statements.
                    let snapshot = conn.unchecked_transaction().map_err(StorageError::from)?;
                    let state = rebuild(&snapshot, &org, env, &agent, now)?;
                    snapshot.finish().map_err(StorageError::from)?;
                    Ok(state)
                })
                .await?;
            *guard = Some(state);
        }
        Ok(guard)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The key cache keeps an agent key's slot and locks it without the map; the slot it
    /// keeps must be the one every other path (mandate changes, reviews) locks through
    /// the map, or two requests could evaluate the same agent at once.
    #[test]
    fn a_slot_handed_out_is_the_agents_only_one() {
        let states = AgentStates::default();
        let agent = AgentId::parse("agt_alpha").unwrap();
        let kept = states.slot(&Arc::from("org_1"), Env::Live, &agent);
        // Later lookups with copies of their own of the same names find the same slot...
        let again = states.slot(
            &Arc::from(String::from("org_1")),
            Env::Live,
            &AgentId::parse("agt_alpha").unwrap(),
        );
        assert!(Arc::ptr_eq(&kept, &again));
        // ...held while the kept one is locked.
        let guard = kept.clone().try_lock_owned().unwrap();
        assert!(again.try_lock().is_err());
        drop(guard);
        assert!(again.try_lock().is_ok());
        // Another environment or agent is another slot.
        let org: Arc<str> = Arc::from("org_1");
        let sandbox = states.slot(&org, Env::Sandbox, &agent);
        let beta = states.slot(&org, Env::Live, &AgentId::parse("agt_beta").unwrap());
        assert!(!Arc::ptr_eq(&kept, &sandbox));
        assert!(!Arc::ptr_eq(&kept, &beta));
    }
}
