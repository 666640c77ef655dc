//! Changes to an agent's mandate, each made under the agent's lock (the one every decision
//! takes), so that no authorization is judged against a mandate already replaced or
//! revoked; the agent's cached state follows the change once it is stored.

use std::sync::Arc;

use mandate_core::{Mandate, MandateStatus};
use time::OffsetDateTime;

use super::agents::AgentStates;
use crate::clock::ms;
use crate::model::Env;
use crate::storage::ap2::{Ap2Import, Ap2Source};
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
    put_from(store, agents, org, env, mandate, None, now)
        .await
        .map(|_| ())
}

/// [`put`], with the AP2 open mandate it was imported from (and its consent key), stored
/// with it if that open mandate is in force here ([`Ap2Import`]; otherwise nothing
/// changes).
pub async fn put_from(
    store: &dyn Store,
    agents: &AgentStates,
    org: &Arc<str>,
    env: Env,
    mandate: &Mandate,
    source: Option<(&Ap2Source, &str)>,
    now: OffsetDateTime,
) -> Result<Ap2Import, StorageError> {
    let mut slot = agents
        .lock(store, org, env, &mandate.terms.agent, now)
        .await?;
    // Taken out while the write runs: if it fails, the next request rebuilds the state.
    let taken = slot.take();
    let stored = match source {
        Some((source, consent_key)) => {
            store
                .insert_ap2_mandate(org, env, mandate, source, consent_key)
                .await?
        }
        None => {
            store.insert_mandate(org, env, mandate).await?;
            Ap2Import::Stored
        }
    };
    match (taken, &stored) {
        (Some(mut state), Ap2Import::Stored) => {
            state.mandate = Some(mandate.clone());
            state.history.start_mandate();
            *slot = Some(state);
        }
        // Nothing changed: the state stays as it was.
        (taken, _) => *slot = taken,
    }
    Ok(stored)
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
            data: mandate_core::unstable::wire::mandate_json(&revoked, now),
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
