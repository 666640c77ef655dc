//! Changes to an agent's mandate, each made under the agent's lock (the one every decision
//! takes), so that no authorization is judged against a mandate already replaced or
//! revoked; the agent's cached state follows the change once it is stored.

use std::sync::Arc;

use mandate_core::{Mandate, MandateStatus};
use time::OffsetDateTime;

use mandate_protocol::history::spend_mut;

use super::agents::{AgentStates, Slot};
use crate::clock::ms;
use crate::model::Env;
use crate::storage::ap2::{Ap2Import, NewImport};
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
    let mut slot = agents
        .lock(store, org, env, &mandate.terms.agent, now)
        .await?;
    // Taken out while the write runs: if it fails, the next request rebuilds the state.
    let taken = slot.take();
    store.insert_mandate(org, env, mandate).await?;
    if let Some(mut state) = taken {
        state.mandate = Some(mandate.clone());
        state.history.start_mandate();
        *slot = Some(state);
    }
    Ok(())
}

/// How often an import locks more agents before it gives up: each round follows an import
/// that stored a carrier on another agent meanwhile.
const IMPORT_ROUNDS: usize = 8;

/// Stores `import.mandate`, imported from an AP2 open mandate, as its agent's current one
/// if that open mandate is in force here ([`Ap2Import`]; otherwise nothing changes),
/// under the locks of its agent and of every agent whose mandate carrying the open mandate
/// is in force (taken in the order of their ids, so that two imports never wait on each
/// other): those are superseded, and the new mandate's spend starts from what every
/// mandate that carried it allowed. The agents whose mandate was superseded have their
/// state rebuilt by their next request.
pub async fn import(
    store: &dyn Store,
    agents: &AgentStates,
    org: &Arc<str>,
    env: Env,
    mut import: NewImport,
    now: OffsetDateTime,
) -> Result<Ap2Import, StorageError> {
    let agent = import.mandate.terms.agent.clone();
    import.locked = vec![agent.clone()];
    for _ in 0..IMPORT_ROUNDS {
        import.locked.sort();
        import.locked.dedup();
        let mut held = Vec::with_capacity(import.locked.len());
        for each in &import.locked {
            held.push(agents.lock(store, org, env, each, now).await?);
        }
        // Taken out while the write runs: if it fails, their next requests rebuild them.
        let mut taken: Vec<Slot> = held.iter_mut().map(|slot| slot.take()).collect();
        let stored = store.insert_ap2_mandate(org, env, &import).await?;
        let superseded = match &stored {
            Ap2Import::Stored { superseded, .. } => superseded.as_slice(),
            _ => &[],
        };
        for ((each, slot), state) in import.locked.iter().zip(&mut held).zip(&mut taken) {
            match (state.take(), &stored) {
                (Some(mut state), Ap2Import::Stored { spent_before, .. }) if *each == agent => {
                    state.mandate = Some(import.mandate.clone());
                    *spend_mut(&mut state.history) = spent_before.unwrap_or_default();
                    **slot = Some(state);
                }
                // Its mandate was superseded: rebuilt from the store on its next request.
                (_, Ap2Import::Stored { .. }) if superseded.contains(each) || *each == agent => {}
                // Nothing changed for it: its state stays as it was.
                (state, _) => **slot = state,
            }
        }
        match stored {
            Ap2Import::Lock(more) => import.locked.extend(more),
            done => return Ok(done),
        }
    }
    Err(StorageError::Conflict)
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
            data: mandate_protocol::wire::mandate_json(&revoked, now),
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
