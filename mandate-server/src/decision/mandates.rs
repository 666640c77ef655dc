//! Changes to an agent's mandate, each made under the agent's lock (the one every decision
//! takes), so that no authorization is judged against a mandate already replaced or
//! revoked; the agent's cached state follows the change once it is stored.

use std::sync::Arc;

use mandate_core::history::SpendToDate;
use mandate_core::mandate::{Mandate, MandateStatus};
use time::OffsetDateTime;

use super::agents::AgentStates;
use crate::clock::ms;
use crate::model::Env;
use crate::storage::ap2::Ap2Source;
use crate::storage::events::NewEvent;
use crate::storage::mandates::{MandateRevoked, Revocation};
use crate::storage::{StorageError, Store};

/// Stores `mandate` as its agent's current one. The agent's month-to-date starts from zero
/// under it; velocity is the agent's own and carries over.
pub async fn put(
    store: &dyn Store,
    agents: &AgentStates,
    org: &Arc<str>,
    env: Env,
    mandate: &Mandate,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    put_from(store, agents, org, env, mandate, None, now).await
}

/// [`put`], with the AP2 open mandate it was imported from, stored with it.
pub async fn put_from(
    store: &dyn Store,
    agents: &AgentStates,
    org: &Arc<str>,
    env: Env,
    mandate: &Mandate,
    source: Option<&Ap2Source>,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    let mut slot = agents
        .lock(store, org, env, &mandate.terms.agent, now)
        .await?;
    // Taken out while the write runs: if it fails, the next request rebuilds the state.
    let taken = slot.take();
    match source {
        Some(source) => store.insert_ap2_mandate(org, env, mandate, source).await?,
        None => store.insert_mandate(org, env, mandate).await?,
    }
    if let Some(mut state) = taken {
        state.mandate = Some(mandate.clone());
        state.history.spend = SpendToDate::default();
        *slot = Some(state);
    }
    Ok(())
}

/// What revoking `mandate` at `now` writes: only an active mandate is revoked (an expired
/// one stays expired; otherwise its status refuses it), with its `mandate.revoked` event,
/// whose data is the revoked mandate as the API shows it at `now`.
pub fn revocation(mandate: &Mandate, now: OffsetDateTime) -> Result<MandateRevoked, MandateStatus> {
    let status = mandate.status_at(now);
    if status != MandateStatus::Active {
        return Err(status);
    }
    let mut revoked = mandate.clone();
    revoked.status = MandateStatus::Revoked;
    Ok(MandateRevoked {
        event: NewEvent {
            event_type: "mandate.revoked",
            data: revoked.to_json(now),
        },
        mandate: revoked,
        at_ms: ms(now),
    })
}

/// Revokes `mandate` (as read by the caller); what the store found decides the answer.
pub async fn revoke(
    store: &dyn Store,
    agents: &AgentStates,
    org: &Arc<str>,
    env: Env,
    mandate: &Mandate,
    now: OffsetDateTime,
) -> Result<Revocation, StorageError> {
    let mut slot = agents
        .lock(store, org, env, &mandate.terms.agent, now)
        .await?;
    let taken = slot.take();
    let revocation = store
        .revoke_mandate(org, env, &mandate.id, now, revocation)
        .await;
    match (&revocation, taken) {
        (Ok(Revocation::Revoked(revoked)), Some(mut state)) => {
            if state.mandate.as_ref().is_some_and(|m| m.id == revoked.id) {
                state.mandate = Some(revoked.as_ref().clone());
            }
            *slot = Some(state);
        }
        // Nothing changed: the state stays as it was.
        (_, taken) => *slot = taken,
    }
    revocation
}
