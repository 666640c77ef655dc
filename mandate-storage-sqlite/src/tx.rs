//! [`SqliteTx`]: the SQLite engine's transaction. The statements of the boundary run on a
//! connection the engine hands it: the writer's, in the open transaction of its group, or
//! a reader's. Nothing here waits: every step is done by the time it is called, so a use
//! case's future is done after one poll ([`ready`]).

use std::future::Future;
use std::task::{Context, Poll, Waker};

use rusqlite::types::{ToSqlOutput, Value};
use rusqlite::{Connection, ToSql};

use mandate_core::{AgentId, Amount, MandateId, Mode};

use super::decisions::{self, Order};
use super::row::SqliteRow;
use super::statements::sql;
use mandate_storage::StorageError;
use mandate_storage::deciding::{AgentHint, AgentRecord};
use mandate_storage::decisions::Filters;
use mandate_storage::engine::{Columns, Param, Result, Scope, Stmt, Tx};
use mandate_storage::model::decision::Decision;

/// A transaction of the SQLite engine on one connection.
pub struct SqliteTx<'c> {
    pub(super) conn: &'c mut Connection,
}

impl<'c> SqliteTx<'c> {
    /// The statements of the boundary on `conn` (in whatever transaction it has open).
    pub fn new(conn: &'c mut Connection) -> Self {
        Self { conn }
    }
}

/// Drives `work` (a use case on a [`SqliteTx`]) to its end in one poll. Its steps never
/// wait, so it is always ready; one that is not is a bug, answered as an error rather
/// than a hang of the writer thread.
pub fn ready<T>(work: impl Future<Output = Result<T>>) -> Result<T> {
    let mut work = std::pin::pin!(work);
    match work.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(done) => done,
        Poll::Pending => Err(StorageError::Task(
            "an SQLite job waited, which its steps never do (a bug)".into(),
        )),
    }
}

/// A boundary's value as SQLite binds it.
struct Bound<'a, 'p>(&'a Param<'p>);

impl ToSql for Bound<'_, '_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.0 {
            Param::Null => ToSqlOutput::Owned(Value::Null),
            Param::Int(v) => ToSqlOutput::Owned(Value::Integer(*v)),
            Param::Text(text) => ToSqlOutput::from(text.as_ref()),
            Param::Bytes(bytes) => ToSqlOutput::from(*bytes),
            Param::Flag(flag) => ToSqlOutput::Owned(Value::Integer(i64::from(*flag))),
            // Lists as JSON text, which the SQL reads with `json_each`.
            Param::Texts(list) => ToSqlOutput::Owned(Value::Text(json_list(list))),
            Param::Ints(list) => ToSqlOutput::Owned(Value::Text(json_list(list))),
            Param::Blobs(list) => {
                let hex: Vec<String> = list.iter().map(|b| hex_of(b)).collect();
                ToSqlOutput::Owned(Value::Text(json_list(&hex)))
            }
        })
    }
}

fn hex_of(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

fn json_list<T: serde::Serialize>(list: &[T]) -> String {
    serde_json::to_string(list).unwrap_or_else(|_| "[]".into())
}

/// Prepares `text` (kept prepared on the connection) with the first of `params` bound, as
/// many as it takes.
fn prepare<'c>(
    conn: &'c Connection,
    text: &str,
    params: &[Param<'_>],
) -> Result<rusqlite::CachedStatement<'c>> {
    let mut stmt = conn.prepare_cached(text).map_err(crate::sqlite_error)?;
    let count = stmt.parameter_count();
    if params.len() < count {
        return Err(StorageError::Backend(format!(
            "a statement takes {count} values and was given {}: {text}",
            params.len()
        )));
    }
    for (i, param) in params.iter().take(count).enumerate() {
        stmt.raw_bind_parameter(i + 1, Bound(param))
            .map_err(crate::sqlite_error)?;
    }
    Ok(stmt)
}

/// Runs `text`, stepping through any rows it returns; how many rows it changed.
fn run(conn: &Connection, text: &str, params: &[Param<'_>]) -> Result<u64> {
    let mut stmt = prepare(conn, text, params)?;
    let mut rows = stmt.raw_query();
    while rows.next().map_err(crate::sqlite_error)?.is_some() {}
    Ok(conn.changes())
}

impl Tx for SqliteTx<'_> {
    async fn execute(&mut self, stmt: Stmt, params: &[Param<'_>]) -> Result<u64> {
        let mut changed = 0;
        for text in sql(stmt)? {
            changed = run(self.conn, &text, params)?;
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
            run(self.conn, text, params)?;
        }
        let mut stmt = prepare(self.conn, last, params)?;
        let mut rows = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(crate::sqlite_error)? {
            out.push(read(&SqliteRow(row))?);
        }
        Ok(out)
    }

    async fn agent_record(
        &mut self,
        scope: Scope<'_>,
        agent: &AgentId,
        limit: usize,
        allowed_since_ms: i64,
    ) -> Result<AgentRecord> {
        // One read transaction: one snapshot, and the WAL's read lock taken once rather
        // than by each statement.
        let snapshot = self.conn.transaction().map_err(crate::sqlite_error)?;
        let record = decisions::agent_record(&snapshot, scope, agent, limit, allowed_since_ms)?;
        snapshot.finish().map_err(crate::sqlite_error)?;
        Ok(record)
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
        let order = if newest_first {
            Order::NewestFirst
        } else {
            Order::OldestFirst
        };
        let (org, env) = (scope.org, scope.env);
        decisions::filtered(self.conn, org, env, filters, above, below, order, limit)
    }

    async fn allowed_since(
        &mut self,
        scope: Scope<'_>,
        agent: &AgentId,
        mandate: &MandateId,
        since_ms: i64,
    ) -> Result<Vec<(Amount, i64)>> {
        let (agent, mandate) = (agent.as_str(), mandate.as_str());
        decisions::allowed_since(self.conn, scope.org, scope.env, agent, mandate, since_ms)
    }

    async fn insert_decision(
        &mut self,
        scope: Scope<'_>,
        hint: AgentHint,
        decision: &Decision,
    ) -> Result<AgentHint> {
        decisions::insert_with(self.conn, scope.org, scope.env, decision, hint)
            .map_err(crate::sqlite_error)?;
        // Committed with it: the agent's row for this month.
        Ok(AgentHint {
            month_marked: Some(decisions::month_index(decision.created_ms)),
            ..hint
        })
    }

    /// One process serializes an agent's changes (its lock): nothing to check.
    async fn claim_agent(
        &mut self,
        _scope: Scope<'_>,
        hint: AgentHint,
        _mode: Mode,
    ) -> Result<Option<AgentHint>> {
        Ok(Some(hint))
    }

    /// The highest seq of the whole log (one sequence for every organization here): the
    /// one writer commits decisions in seq order.
    async fn watermark(&mut self, _org: &str) -> Result<i64> {
        decisions::last_seq(self.conn).map_err(crate::sqlite_error)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{Db, SqliteStore};
    use mandate_storage::engine::{Access, Engine};

    /// A use case whose future waits is answered with an error, on the writer and on a
    /// reader alike, and the writer goes on with the next job: a bug, never a hang.
    #[tokio::test]
    async fn a_job_that_waits_is_an_error_and_the_writer_goes_on() {
        assert!(matches!(
            ready(std::future::pending::<Result<()>>()),
            Err(StorageError::Task(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::new(Db::open(&dir.path().join("ready.db")).unwrap());
        for access in [Access::Write, Access::Read] {
            let waited = store
                .run(access, (), |_, ()| {
                    Box::pin(std::future::pending::<Result<()>>())
                })
                .await;
            assert!(matches!(waited, Err(StorageError::Task(_))), "{waited:?}");
        }
        let counted = store
            .run(Access::Write, (), |tx, ()| {
                Box::pin(async move {
                    let read = |r: &dyn Columns| r.int(0);
                    tx.query(
                        mandate_storage::statements::ProcessSql::Applied.into(),
                        &[],
                        read,
                    )
                    .await
                })
            })
            .await
            .unwrap();
        assert_eq!(counted, vec![store.latest_migration()]);
    }

    /// Every statement of the boundary has SQL on SQLite that it prepares on a migrated
    /// database (but `VACUUM`-like ones that run outside a transaction: prepared as well).
    #[test]
    fn every_statement_prepares() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("every.db")).unwrap();
        let failed = db
            .on_writer(|conn| -> Result<Vec<String>> {
                let mut failed = Vec::new();
                for stmt in mandate_storage::every::every() {
                    for text in sql(stmt)? {
                        if let Err(e) = conn.prepare(&text) {
                            failed.push(format!("{stmt:?}: {e}"));
                        }
                    }
                }
                Ok(failed)
            })
            .unwrap();
        assert!(failed.is_empty(), "{failed:#?}");
    }
}
