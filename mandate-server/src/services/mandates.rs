//! Mandates below their routes: creating one (plain terms, or imported from an AP2 open
//! mandate: [`super::ap2`]), reading one with what its allows add up to this day, week and
//! month (`spent`, from the decision log) and what each limit still allows (`remaining`,
//! `mandate_protocol::budget`), a page of a list, and revoking one.
//!
//! Every change to an agent's mandate is made under that agent's lock
//! (`decision::mandates`), so that no authorization is judged against a mandate that has
//! already been replaced or revoked.

use std::sync::Arc;

use mandate_core::{AgentId, FieldError, Mandate, MandateDraft, MandateId, MandateStatus};
use mandate_protocol::{
    budget::remaining, history::SpendToDate, mandate::format_date, wire::Spent,
};
use serde_json::Value;
use time::OffsetDateTime;

use super::ap2::{self, Ap2Error};
use super::{EncodingError, wire_json};
use crate::clock::{from_ms, ms, random16};
use crate::decision::agents::{AgentStates, spend_since};
use crate::decision::mandates;
use crate::model::Caller;
use crate::storage::ap2::Ap2Import;
use crate::storage::deciding::allows_from;
use crate::storage::mandates::{Filters, Revocation};
use crate::storage::{StorageError, Store};

/// Why a mandate request was not done.
#[derive(Debug, thiserror::Error)]
pub enum MandateError {
    /// The terms are malformed, or already expired; the message names the field.
    #[error(transparent)]
    Terms(#[from] FieldError),
    /// The mandate's agent does not exist (in the caller's organization and environment).
    #[error("no agent with id {0}; register it with POST /v1/agents first")]
    NoAgent(AgentId),
    /// No such mandate that the caller may read.
    #[error("no mandate with id {0}")]
    NoMandate(String),
    /// Only an active mandate can be revoked.
    #[error("mandate {id} is {status}; only an active mandate can be revoked")]
    NotActive {
        /// The mandate, as the caller named it.
        id: String,
        /// Its status.
        status: &'static str,
    },
    /// A list's `status` filter names no status.
    #[error("status must be one of active, revoked, superseded, expired")]
    UnknownStatus,
    /// The AP2 open mandate (or a stored one) was refused or could not be read.
    #[error(transparent)]
    Ap2(#[from] Ap2Error),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The answer could not be encoded.
    #[error(transparent)]
    Encoding(#[from] EncodingError),
}

/// What the mandate service works with: the store, and the agents' locks, under which
/// every change to an agent's mandate is made.
#[derive(Clone, Copy)]
pub struct Mandates<'a> {
    /// Where mandates are read and written.
    pub store: &'a dyn Store,
    /// The agents' locks and cached states (which follow each change).
    pub agents: &'a AgentStates,
}

impl Mandates<'_> {
    /// Creates the mandate `body` gives (plain terms, or `ap2.open_mandate` with what the
    /// caller gives beside it) as its agent's current one; the answer's JSON.
    pub async fn create(
        self,
        caller: &Caller,
        body: Value,
        now: OffsetDateTime,
    ) -> Result<Value, MandateError> {
        // An AP2 open mandate in place of the plain terms (services/ap2.rs).
        let (body, source) = match ap2::import(self.store, caller, &body, now).await? {
            Some((terms, imported)) => (terms, Some(imported)),
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
        let exists = self
            .store
            .agent(&caller.org_id, caller.env, &agent)
            .await?
            .is_some();
        if !exists {
            return Err(MandateError::NoAgent(agent));
        }
        let (org, env) = (&caller.org_id, caller.env);
        let Some(imported) = source else {
            mandates::put(self.store, self.agents, org, env, &mandate, now).await?;
            return Ok(mandate_protocol::wire::mandate_json(&mandate, now));
        };
        let import = imported.of(&mandate);
        let mut source = import.source.clone();
        match mandates::import(self.store, self.agents, org, env, import, now).await? {
            Ap2Import::Stored { spent_before, .. } => source.spent_before = spent_before,
            _ => return Err(Ap2Error::InForceElsewhere.into()),
        }
        let mut shown = mandate_protocol::wire::mandate_json(&mandate, now);
        if let Value::Object(object) = &mut shown {
            object.insert("source".into(), ap2::source_json(&source)?);
        }
        Ok(shown)
    }

    /// One page of the mandates `filters` select, before the seq `before`, at most `limit`,
    /// as `(seq, the answer's JSON)`, imported ones with their `source`.
    pub async fn page(
        self,
        caller: &Caller,
        filters: &Filters,
        before: i64,
        limit: i64,
        now: OffsetDateTime,
    ) -> Result<Vec<(i64, Value)>, MandateError> {
        let today = format_date(now.date());
        let rows = self
            .store
            .mandates_page(&caller.org_id, caller.env, filters, &today, before, limit)
            .await?;
        let mut rows: Vec<(i64, MandateId, Value)> = rows
            .into_iter()
            .map(|(seq, m)| {
                (
                    seq,
                    m.id.clone(),
                    mandate_protocol::wire::mandate_json(&m, now),
                )
            })
            .collect();
        let mut shown: Vec<(MandateId, &mut Value)> = rows
            .iter_mut()
            .map(|(_, id, value)| (id.clone(), value))
            .collect();
        ap2::add_sources(self.store, caller, &mut shown).await?;
        Ok(rows
            .into_iter()
            .map(|(seq, _, value)| (seq, value))
            .collect())
    }

    /// The mandate `id` as the caller may read it (an agent key: its own agent's only).
    pub async fn find(self, caller: &Caller, id: &str) -> Result<Mandate, MandateError> {
        let mandate = match MandateId::parse(id) {
            Ok(wanted) => {
                self.store
                    .mandate(&caller.org_id, caller.env, &wanted)
                    .await?
            }
            Err(_) => None,
        };
        match (mandate, &caller.agent) {
            (Some(m), Some(own)) if &m.terms.agent != own => {
                Err(MandateError::NoMandate(id.to_owned()))
            }
            (Some(m), _) => Ok(m),
            (None, _) => Err(MandateError::NoMandate(id.to_owned())),
        }
    }

    /// The mandate `id` with `spent` and `remaining` at `now`, and its `source` if imported.
    pub async fn show(
        self,
        caller: &Caller,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Value, MandateError> {
        let mandate = self.find(caller, id).await?;
        let mut shown = mandate_protocol::wire::Mandate::of(&mandate, now);
        let spend = self.spend_to_date(caller, &mandate, now).await?;
        shown.spent = Some(Spent {
            day: spend.day_total_at(now),
            month: spend.total_at(now),
            week: spend.week_total_at(now),
        });
        shown.remaining = Some(remaining(&mandate.terms.limits, &spend, now));
        let mut shown = wire_json(&shown)?;
        ap2::add_sources(self.store, caller, &mut [(mandate.id.clone(), &mut shown)]).await?;
        Ok(shown)
    }

    /// The mandate's allows this day, week and month (and over its life, when a limit
    /// counts it), summed as the engine sums them
    /// (`mandate_protocol::history::SpendToDate`), from the committed decision log: a
    /// decision answered before this read is in it. A mandate imported from an AP2 open
    /// mandate starts from what the mandates that carried it before spent, as its agent's
    /// state does (`decision::agents::state_from`).
    async fn spend_to_date(
        self,
        caller: &Caller,
        mandate: &Mandate,
        now: OffsetDateTime,
    ) -> Result<SpendToDate, MandateError> {
        let since = allows_from(mandate, ms(spend_since(now)));
        let allows = self
            .store
            .mandate_allows_since(
                &caller.org_id,
                caller.env,
                &mandate.terms.agent,
                &mandate.id,
                since,
            )
            .await?;
        let spent_before = self
            .store
            .spent_before(Arc::clone(&caller.org_id), caller.env, mandate.id.clone())
            .await?;
        let mut spend = spent_before.unwrap_or_default();
        for (amount, at) in allows {
            spend.add(amount, from_ms(at));
        }
        Ok(spend)
    }

    /// Revokes the mandate `id`, which must be active; the revoked mandate's JSON.
    pub async fn revoke(
        self,
        caller: &Caller,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Value, MandateError> {
        let found = self.find(caller, id).await?;
        let revocation = mandates::revoke(
            self.store,
            self.agents,
            &caller.org_id,
            caller.env,
            &found,
            now,
        )
        .await?;
        let revoked = match revocation {
            Revocation::Revoked(mandate) => *mandate,
            Revocation::Missing => return Err(MandateError::NoMandate(id.to_owned())),
            Revocation::NotActive(status) => {
                return Err(MandateError::NotActive {
                    id: id.to_owned(),
                    status: status.as_str(),
                });
            }
        };
        let mut shown = mandate_protocol::wire::mandate_json(&revoked, now);
        ap2::add_sources(self.store, caller, &mut [(revoked.id.clone(), &mut shown)]).await?;
        Ok(shown)
    }
}

/// The `status` filter of a mandates list, if given.
pub fn status_filter(given: Option<&String>) -> Result<Option<MandateStatus>, MandateError> {
    given
        .map(|s| MandateStatus::parse(s).ok_or(MandateError::UnknownStatus))
        .transpose()
}
