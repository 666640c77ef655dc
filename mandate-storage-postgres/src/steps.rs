//! The PostgreSQL engine's steps of a transaction (`engine::Tx`): any statement of the
//! boundary in its SQL (`statements.rs`), and the decision path's own reads and writes
//! (`deciding.rs`, `decisions.rs`, `claims.rs`).

use mandate_core::{AgentId, Amount, MandateId, Mode};

use super::statements::sql;
use super::tx::PgTx;
use super::{claims, deciding, decisions};
use mandate_storage::engine::{Columns, Param, Result, Scope, Stmt, Tx};
use mandate_storage::model::decision::Decision;
use mandate_storage::records::{AgentHint, AgentRecord, Filters};

impl Tx for PgTx<'_> {
    async fn execute(&mut self, stmt: Stmt, params: &[Param<'_>]) -> Result<u64> {
        let mut changed = 0;
        for text in sql(stmt)? {
            changed = self.run(&text, params).await?;
        }
        Ok(changed)
    }

    async fn query<T, F>(&mut self, stmt: Stmt, params: &[Param<'_>], mut read: F) -> Result<Vec<T>>
    where
        T: Send,
        F: FnMut(&dyn Columns) -> Result<T> + Send,
    {
        let texts = sql(stmt)?;
        let Some((last, before)) = texts.split_last() else {
            return Ok(Vec::new());
        };
        for text in before {
            self.run(text, params).await?;
        }
        let rows = self.rows(last, params).await?;
        rows.iter()
            .map(|row| read(&crate::tx::PgRow(row)))
            .collect()
    }

    async fn agent_record(
        &mut self,
        scope: Scope<'_>,
        agent: &AgentId,
        limit: usize,
        allowed_since_ms: i64,
    ) -> Result<AgentRecord> {
        let (org, env) = (scope.org, scope.env);
        deciding::read_agent_record(self, org, env, agent, limit, allowed_since_ms).await
    }

    async fn decisions(
        &mut self,
        scope: Scope<'_>,
        filters: &Filters,
        above: i64,
        below: i64,
        newest_first: bool,
        limit: i64,
    ) -> Result<Vec<(i64, Decision)>> {
        let (org, env) = (scope.org, scope.env);
        decisions::filtered(self, org, env, filters, above, below, newest_first, limit).await
    }

    async fn allowed_since(
        &mut self,
        scope: Scope<'_>,
        agent: &AgentId,
        mandate: &MandateId,
        since_ms: i64,
    ) -> Result<Vec<(Amount, i64)>> {
        let (org, env) = (scope.org, scope.env);
        decisions::allowed_since(self, org, env, agent, mandate, since_ms).await
    }

    /// Outside the writers' groups (an approval): with a seq taken from the counter row,
    /// held until this transaction commits (`decisions::insert`).
    async fn insert_decision(
        &mut self,
        scope: Scope<'_>,
        hint: AgentHint,
        decision: &Decision,
    ) -> Result<AgentHint> {
        let seq = hint.seq.unwrap_or_default();
        decisions::insert(self, scope.org, scope.env, seq, decision).await?;
        Ok(hint)
    }

    /// Moves the agent's version from the hint's, if it is still that and the
    /// environment's mode still `mode`.
    async fn claim_agent(
        &mut self,
        scope: Scope<'_>,
        hint: AgentHint,
        mode: Mode,
    ) -> Result<Option<AgentHint>> {
        let (org, env) = (scope.org, scope.env);
        let version = deciding::bump_if(self, org, env, hint, mode.as_str()).await?;
        Ok(version.map(|version| AgentHint {
            seq: hint.seq,
            month_marked: None,
            version,
        }))
    }

    async fn watermark(&mut self, org: &str) -> Result<i64> {
        claims::watermark(self.client(), org).await
    }

    async fn watermarks(&mut self, orgs: &[String]) -> Result<Vec<i64>> {
        claims::watermarks(self.client(), orgs).await
    }
}
