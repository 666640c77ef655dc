//! Mandates below their routes: creating one (plain terms, or imported from an AP2 open
//! mandate: [`super::ap2`]), reading one with what its allows add up to this day, week and
//! month (`spent`, from the decision log) and what each limit still allows (`remaining`,
//! `mandate_core::budget`), a page of a list, and revoking one.
//!
//! Every change to an agent's mandate is made under that agent's lock
//! (`decision::mandates`), so that no authorization is judged against a mandate that has
//! already been replaced or revoked.

use mandate_core::budget::remaining;
use mandate_core::history::SpendToDate;
use mandate_core::id::MandateId;
use mandate_core::mandate::{Mandate, MandateDraft, MandateStatus, format_date};
use mandate_core::wire::Spent;
use serde_json::Value;
use time::OffsetDateTime;

use super::{ap2, wire_json};
use crate::clock::{from_ms, ms, random16};
use crate::decision::agents::spend_since;
use crate::decision::mandates;
use crate::http::error::ApiError;
use crate::model::Caller;
use crate::state::AppState;
use crate::storage::mandates::{Filters, Revocation};

/// Creates the mandate `body` gives (plain terms, or `ap2.open_mandate` with what the
/// caller gives beside it) as its agent's current one; the answer's JSON.
pub async fn create(
    state: &AppState,
    caller: &Caller,
    body: Value,
    now: OffsetDateTime,
) -> Result<Value, ApiError> {
    // An AP2 open mandate in place of the plain terms (services/ap2.rs).
    let (body, source) = match ap2::import(state, caller, &body, now).await? {
        Some((terms, source)) => (terms, Some(source)),
        None => (body, None),
    };
    let terms = MandateDraft::from_json(&body)?;
    terms.check_not_expired_at(now)?;
    let agent = terms.agent.clone();
    let mandate = Mandate {
        id: MandateId::from_random(random16()),
        terms,
        status: MandateStatus::Active,
        created_at: now,
    };
    // The agent must exist before its slot is taken: a slot (and its rebuild) for every
    // name an org key can invent would grow the server without bound. Agents are never
    // deleted, so the check stays true under the lock.
    let exists = state
        .store
        .agent(&caller.org_id, caller.env, &agent)
        .await?
        .is_some();
    if !exists {
        return Err(ApiError::NotFound(format!(
            "no agent with id {agent}; register it with POST /v1/agents first"
        )));
    }
    mandates::put_from(
        state.store.as_ref(),
        &state.agents,
        &caller.org_id,
        caller.env,
        &mandate,
        source.as_ref(),
        now,
    )
    .await?;
    let mut shown = mandate.to_json(now);
    if let (Some(source), Value::Object(object)) = (&source, &mut shown) {
        object.insert("source".into(), ap2::source_json(source)?);
    }
    Ok(shown)
}

/// One page of the mandates `filters` select, before the seq `before`, at most `limit`,
/// as `(seq, the answer's JSON)`, imported ones with their `source`.
pub async fn page(
    state: &AppState,
    caller: &Caller,
    filters: &Filters,
    before: i64,
    limit: i64,
    now: OffsetDateTime,
) -> Result<Vec<(i64, Value)>, ApiError> {
    let today = format_date(now.date());
    let rows = state
        .store
        .mandates_page(&caller.org_id, caller.env, filters, &today, before, limit)
        .await?;
    let mut rows: Vec<(i64, MandateId, Value)> = rows
        .into_iter()
        .map(|(seq, m)| (seq, m.id.clone(), m.to_json(now)))
        .collect();
    let mut shown: Vec<(MandateId, &mut Value)> = rows
        .iter_mut()
        .map(|(_, id, value)| (id.clone(), value))
        .collect();
    ap2::add_sources(state, caller, &mut shown).await?;
    Ok(rows
        .into_iter()
        .map(|(seq, _, value)| (seq, value))
        .collect())
}

/// The mandate `id` as the caller may read it (an agent key: its own agent's only).
pub async fn find(state: &AppState, caller: &Caller, id: &str) -> Result<Mandate, ApiError> {
    let mandate = match MandateId::parse(id) {
        Ok(wanted) => {
            state
                .store
                .mandate(&caller.org_id, caller.env, &wanted)
                .await?
        }
        Err(_) => None,
    };
    match (mandate, &caller.agent) {
        (Some(m), Some(own)) if &m.terms.agent != own => Err(ApiError::not_found("mandate", id)),
        (Some(m), _) => Ok(m),
        (None, _) => Err(ApiError::not_found("mandate", id)),
    }
}

/// The mandate `id` with `spent` and `remaining` at `now`, and its `source` if imported.
pub async fn show(
    state: &AppState,
    caller: &Caller,
    id: &str,
    now: OffsetDateTime,
) -> Result<Value, ApiError> {
    let mandate = find(state, caller, id).await?;
    let mut shown = mandate.to_wire(now);
    let spend = spend_to_date(state, caller, &mandate, now).await?;
    shown.spent = Some(Spent {
        day: spend.day_total_at(now),
        month: spend.total_at(now),
        week: spend.week_total_at(now),
    });
    shown.remaining = Some(remaining(&mandate.terms.limits, &spend, now));
    let mut shown = wire_json(&shown)?;
    ap2::add_sources(state, caller, &mut [(mandate.id.clone(), &mut shown)]).await?;
    Ok(shown)
}

/// The mandate's allows this day, week and month, summed as the engine sums them
/// (`mandate_core::history::SpendToDate`), from the committed decision log: a decision
/// answered before this read is in it.
async fn spend_to_date(
    state: &AppState,
    caller: &Caller,
    mandate: &Mandate,
    now: OffsetDateTime,
) -> Result<SpendToDate, ApiError> {
    let allows = state
        .store
        .mandate_allows_since(
            &caller.org_id,
            caller.env,
            &mandate.terms.agent,
            &mandate.id,
            ms(spend_since(now)),
        )
        .await?;
    let mut spend = SpendToDate::default();
    for (amount, at) in allows {
        spend.add(amount, from_ms(at));
    }
    Ok(spend)
}

/// Revokes the mandate `id`, which must be active; the revoked mandate's JSON.
pub async fn revoke(
    state: &AppState,
    caller: &Caller,
    id: &str,
    now: OffsetDateTime,
) -> Result<Value, ApiError> {
    let found = find(state, caller, id).await?;
    let revocation = mandates::revoke(
        state.store.as_ref(),
        &state.agents,
        &caller.org_id,
        caller.env,
        &found,
        now,
    )
    .await?;
    let revoked = match revocation {
        Revocation::Revoked(mandate) => *mandate,
        Revocation::Missing => return Err(ApiError::not_found("mandate", id)),
        Revocation::NotActive(status) => {
            return Err(ApiError::InvalidRequest(format!(
                "mandate {id} is {}; only an active mandate can be revoked",
                status.as_str()
            )));
        }
    };
    let mut shown = revoked.to_json(now);
    ap2::add_sources(state, caller, &mut [(revoked.id.clone(), &mut shown)]).await?;
    Ok(shown)
}

/// The `status` filter of a mandates list, if given.
pub fn status_filter(given: Option<&String>) -> Result<Option<MandateStatus>, ApiError> {
    given
        .map(|s| {
            MandateStatus::parse(s).ok_or_else(|| {
                ApiError::InvalidRequest(
                    "status must be one of active, revoked, superseded, expired".into(),
                )
            })
        })
        .transpose()
}
