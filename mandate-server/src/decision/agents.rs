//! Per-agent state in memory: the current mandate and the engine's history, behind one
//! async lock per agent.
//!
//! Requests of one agent are serialized by its lock, so month-to-date and the velocity
//! window are exact under concurrency; requests of different agents never wait on each
//! other. State is loaded from the database on first use (after a restart, it is rebuilt
//! from stored decisions) and every change to an agent's mandate goes through the lock.
//!
//! Slots are made only for agents that exist (callers check first), and the map is
//! bounded: past [`MAX_IDLE_SLOTS`] it drops every idle slot, one that only the map holds
//! (`Arc::strong_count == 1`: no request holds or waits on its lock, no cached key keeps
//! it). Nothing else can reach such a slot, so the agent's next request makes a new one
//! that is again its only lock, and rebuilds the state from the database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mandate_core::{AgentHistory, AgentId, Mandate, Mode};
use mandate_protocol::{history::SpendToDate, history::VELOCITY_LIMIT};
use time::{Date, OffsetDateTime, Time, UtcOffset};
use tokio::sync::OwnedMutexGuard;

use crate::clock::{from_ms, ms};
use crate::model::Env;
use crate::storage::StorageError;
use crate::storage::deciding::{AgentHint, AgentRecord, DecidingStore};

/// What the engine needs about one agent.
#[derive(Debug, Clone, Default)]
pub struct AgentState {
    /// The agent's current mandate (its newest, whatever its status).
    pub mandate: Option<Mandate>,
    /// Velocity window and month-to-date spend.
    pub history: AgentHistory,
    /// What storing its next decision need not look up again.
    pub stored: AgentHint,
    /// The enforcement mode read with this state (an engine shared by several processes
    /// reads it), for the next decision only: fresher than the cached one.
    pub mode: Option<Mode>,
}

/// A slot: `None` until loaded from the database.
pub type Slot = Option<AgentState>;

/// The organization id is the caller's shared copy (`cache::KeyCache`), not one per agent.
type Key = (Arc<str>, Env, AgentId);

/// One agent's lock and state.
pub type AgentSlot = Arc<tokio::sync::Mutex<Slot>>;

/// An agent key's agent slot, cached with its key (`http::cache`) and put beside the
/// `Caller` in the request's extensions, so that an authorization locks it without a
/// lookup.
#[derive(Clone, Debug)]
pub struct AgentSlotHandle(pub AgentSlot);

/// How many slots the map holds before it drops the idle ones.
pub const MAX_IDLE_SLOTS: usize = 65_536;

/// The locks and cached states of the agents in use.
#[derive(Clone)]
pub struct AgentStates {
    slots: Arc<Mutex<Slots>>,
}

struct Slots {
    map: HashMap<Key, AgentSlot>,
    /// The size at which the next new slot first drops the idle ones.
    sweep_at: usize,
    /// [`MAX_IDLE_SLOTS`], or a test's smaller bound.
    bound: usize,
}

impl Default for AgentStates {
    fn default() -> Self {
        Self::with_bound(MAX_IDLE_SLOTS)
    }
}

/// The first instant of the UTC month that contains `now`.
pub fn month_start(now: OffsetDateTime) -> OffsetDateTime {
    let now = now.to_offset(UtcOffset::UTC);
    Date::from_calendar_date(now.year(), now.month(), 1)
        .map(|d| d.with_time(Time::MIDNIGHT).assume_utc())
        .unwrap_or(now)
}

/// The first instant of the ISO week (Monday 00:00 UTC) that contains `now`.
pub fn week_start(now: OffsetDateTime) -> OffsetDateTime {
    let now = now.to_offset(UtcOffset::UTC);
    let back = i64::from(now.weekday().number_days_from_monday());
    (now.date() - time::Duration::days(back))
        .with_time(Time::MIDNIGHT)
        .assume_utc()
}

/// Since when an agent's allows count for the windows at `now`: the earlier of the month's
/// start and the week's (a week can start in the previous month).
pub fn spend_since(now: OffsetDateTime) -> OffsetDateTime {
    month_start(now).min(week_start(now))
}

/// An agent's state as its stored record says: the velocity window from its latest
/// requests, the day's, week's and month's spend (and the life's, when a limit counts it)
/// from its current mandate's allows since [`spend_since`], added to `spent_before`, what
/// the AP2 open mandate it was imported from had spent under the mandates that carried it
/// before (all earlier than its own allows, so that each window rolls over as it would
/// have).
pub fn state_from(record: AgentRecord, spent_before: Option<SpendToDate>) -> AgentState {
    let mut history = AgentHistory::default();
    for at in record.recent_requests {
        mandate_protocol::history::velocity_mut(&mut history).record(from_ms(at));
    }
    let spend = mandate_protocol::history::spend_mut(&mut history);
    *spend = spent_before.unwrap_or_default();
    for (amount, at) in record.allowed_since {
        spend.add(amount, from_ms(at));
    }
    AgentState {
        mandate: record.mandate,
        history,
        stored: record.hint,
        mode: record.mode,
    }
}

/// Whether what an AP2 open mandate spent before `mandate` can matter to a decision under
/// it: the mandate has a lifetime total or a count limit (an open mandate's budget and its
/// recurrence). Others skip the read.
pub fn counts_carried(mandate: &Mandate) -> bool {
    let limits = &mandate.terms.limits;
    limits.total.is_some() || limits.count.is_some()
}

impl AgentStates {
    /// An empty map that drops its idle slots once it holds `bound`.
    pub fn with_bound(bound: usize) -> Self {
        Self {
            slots: Arc::new(Mutex::new(Slots {
                map: HashMap::new(),
                sweep_at: bound,
                bound,
            })),
        }
    }

    /// [`AgentStates::slot`] as the handle an agent key caches.
    pub fn handle(&self, org_id: &Arc<str>, env: Env, agent: &AgentId) -> AgentSlotHandle {
        AgentSlotHandle(self.slot(org_id, env, agent))
    }

    /// The slot of an agent that exists (the caller has checked), created empty on its
    /// first use. The map removes a slot only while no one else holds it, so the one
    /// returned stays the agent's only one as long as it is kept: elsewhere (the key cache
    /// keeps an agent key's) or by a request that locks it later.
    pub fn slot(&self, org_id: &Arc<str>, env: Env, agent: &AgentId) -> AgentSlot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let key = (Arc::clone(org_id), env, agent.clone());
        if let Some(slot) = slots.map.get(&key) {
            return slot.clone();
        }
        if slots.map.len() >= slots.sweep_at {
            // Under the map's lock no one can take a new reference to a slot only the map
            // holds, so dropping it can't leave two locks for one agent.
            slots.map.retain(|_, slot| Arc::strong_count(slot) > 1);
            // Slots still held stay; sweeping again only after the map has doubled keeps
            // the cost per new slot constant when many are held.
            slots.sweep_at = slots.bound.max(slots.map.len().saturating_mul(2));
        }
        slots.map.entry(key).or_default().clone()
    }

    /// How many slots the map holds now.
    pub fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }

    /// Whether the map holds no slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Locks the slot of an agent that exists and loads it if needed. Hold the guard
    /// across the whole read-evaluate-persist-update sequence.
    pub async fn lock(
        &self,
        store: &dyn DecidingStore,
        org_id: &Arc<str>,
        env: Env,
        agent: &AgentId,
        now: OffsetDateTime,
    ) -> Result<OwnedMutexGuard<Slot>, StorageError> {
        let slot = self.slot(org_id, env, agent);
        Self::lock_slot(slot, store, org_id, env, agent, now).await
    }

    /// [`AgentStates::lock`] with the agent's slot already in hand (from
    /// [`AgentStates::slot`] for the same agent).
    pub async fn lock_slot(
        slot: AgentSlot,
        store: &dyn DecidingStore,
        org_id: &Arc<str>,
        env: Env,
        agent: &AgentId,
        now: OffsetDateTime,
    ) -> Result<OwnedMutexGuard<Slot>, StorageError> {
        let mut guard = slot.lock_owned().await;
        if guard.is_none() {
            let record = store
                .agent_record(
                    Arc::clone(org_id),
                    env,
                    agent.clone(),
                    VELOCITY_LIMIT,
                    ms(spend_since(now)),
                )
                .await?;
            // An AP2 open mandate's budget and occurrence count run on from the mandates
            // that carried it before: read where a limit counts them.
            let spent_before = match &record.mandate {
                Some(m) if counts_carried(m) => {
                    store
                        .spent_before(Arc::clone(org_id), env, m.id.clone())
                        .await?
                }
                _ => None,
            };
            *guard = Some(state_from(record, spent_before));
        }
        Ok(guard)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn the_spend_is_read_from_the_earlier_of_the_month_and_the_week() {
        // Tuesday 2026-12-01: the week began on Monday 2026-11-30.
        let now = datetime!(2026-12-01 10:00 UTC);
        assert_eq!(week_start(now), datetime!(2026-11-30 0:00 UTC));
        assert_eq!(spend_since(now), datetime!(2026-11-30 0:00 UTC));
        // Thursday 2026-12-10: the month began before the week.
        let now = datetime!(2026-12-10 23:59:59 UTC);
        assert_eq!(week_start(now), datetime!(2026-12-07 0:00 UTC));
        assert_eq!(spend_since(now), datetime!(2026-12-01 0:00 UTC));
        // A Monday is its own week's start, read in UTC.
        let monday = datetime!(2026-12-07 0:30 +01:00);
        assert_eq!(week_start(monday), datetime!(2026-11-30 0:00 UTC));
    }

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

    fn agent(n: usize) -> AgentId {
        AgentId::parse(&format!("agt_a{n}")).unwrap()
    }

    /// Past the bound, idle slots go and held ones stay: a slot kept by the key cache, one
    /// locked by a request and one a request waits on are each still the agent's only
    /// lock afterwards.
    #[tokio::test]
    async fn past_the_bound_only_slots_nobody_holds_are_dropped() {
        let states = AgentStates::with_bound(8);
        let org: Arc<str> = Arc::from("org_1");
        let kept = states.slot(&org, Env::Live, &agent(0));
        let locked = states.slot(&org, Env::Live, &agent(1)).lock_owned().await;
        let waited = states.slot(&org, Env::Live, &agent(2));
        let holder = waited.clone().lock_owned().await;
        let waiter = tokio::spawn({
            let slot = waited.clone();
            async move {
                let mut guard = slot.lock_owned().await;
                *guard = Some(AgentState::default());
            }
        });
        drop(waited);
        tokio::task::yield_now().await;
        for n in 3..8 {
            states.slot(&org, Env::Live, &agent(n));
        }
        assert_eq!(states.len(), 8);
        // The ninth new slot sweeps: five idle ones go, three held ones and it stay.
        states.slot(&org, Env::Live, &agent(8));
        assert_eq!(states.len(), 4);
        assert!(Arc::ptr_eq(&kept, &states.slot(&org, Env::Live, &agent(0))));
        assert!(states.slot(&org, Env::Live, &agent(1)).try_lock().is_err());
        drop(locked);
        assert!(states.slot(&org, Env::Live, &agent(1)).try_lock().is_ok());
        // The waiter still gets the same lock as everyone who asks the map now.
        let again = states.slot(&org, Env::Live, &agent(2));
        drop(holder);
        waiter.await.unwrap();
        assert!(again.lock().await.is_some());
        // Far past the bound with every slot held, the map grows (it can't drop them)
        // and sweeps only after doubling.
        let held: Vec<_> = (100..140)
            .map(|n| states.slot(&org, Env::Live, &agent(n)))
            .collect();
        // Slots 1 and 8 went at the first of those sweeps; 0, 2 and the 40 are held.
        assert_eq!(states.len(), 42);
        drop(held);
        for n in 200..250 {
            states.slot(&org, Env::Live, &agent(n));
        }
        // Once released they are idle again, and the bound holds.
        assert!(states.len() <= 8, "{}", states.len());
    }
}
