//! What an engine is: SQL and a transaction (SpiceDB's datastore shape).
//!
//! Every use case of the boundary (create an agent, revoke a mandate, record a decision
//! with its review, event and idempotency record, advance an escrow, ...) is written once,
//! engine-neutral, beside its trait (`agents.rs`, `mandates.rs`, ...), as an async function
//! over a transaction [`Tx`]. A use case names each statement it runs ([`Stmt`]), binds its
//! values ([`Param`]) and reads the rows it gets back ([`Columns`]); what the statement *is*
//! in SQL is the engine's: each engine maps every [`Stmt`] to its own SQL text
//! (`sqlite/statements.rs`, `postgres/statements.rs`). The values a statement takes
//! (`$1`, `$2`, ...) and the columns it returns are documented on its variant: that is the
//! contract between a use case and the engines' SQL, and the conformance suite (this
//! crate's `tests/conformance/`) checks that an engine keeps it.
//!
//! An engine ([`Engine`]) runs a use case in a transaction of the kind it asks for
//! ([`Access`]): SQLite hands it to its writer thread (or a reader connection), where its
//! steps never wait, so the writer drives the use case's future to completion in one poll;
//! PostgreSQL runs it on a pooled connection, in `BEGIN ... COMMIT` when it writes.
//!
//! What stays an engine's own is what is truly engine-specific: the few reads and writes
//! of the decision path that each engine does its fastest way (the `Tx` methods after
//! `query`), the group commits, PostgreSQL's claims and its decision statement, connection
//! handling, migrations and backup. Adding an engine means implementing [`Engine`] and
//! [`Tx`] (SQL for each statement) and passing the conformance suite (a file of
//! `tests/conformance/` that makes a fresh store of the engine).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use mandate_core::{AgentId, Amount, MandateId, Mode};

use super::StorageError;
use super::records::{AgentHint, AgentRecord, Filters, NewDecision, Recorded};
use crate::model::Env;
use crate::model::decision::Decision;

pub use super::statements::{Lock, Sql, Stmt, built, each, none, one};

/// What the storage functions return.
pub type Result<T> = std::result::Result<T, StorageError>;

/// What a step of a transaction hands back: a future of its result, `Send` so that a use
/// case runs on any thread of the runtime (PostgreSQL's steps wait on the network).
pub trait Io<T>: Future<Output = Result<T>> + Send {}

impl<T, F: Future<Output = Result<T>> + Send> Io<T> for F {}

/// A use case's future as an engine runs it, boxed so that a job can name its type.
pub type Boxed<'t, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 't>>;

/// What kind of transaction a use case needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only, no promise of one snapshot across statements (SQLite: a reader
    /// connection off the executor; PostgreSQL: a pooled connection, no `BEGIN`).
    Read,
    /// One transaction: everything or nothing, and what it reads stays as read until it
    /// commits (SQLite: a job of the writer's group commit; PostgreSQL: `BEGIN ... COMMIT`).
    Write,
    /// Writes whose statements each stand alone (PostgreSQL: no `BEGIN`, one commit a
    /// statement; SQLite: the writer's group commit all the same).
    Each,
    /// Rows this process takes for a while (due deliveries, its heartbeat): an engine
    /// shared by processes writes the claim, each statement on its own (PostgreSQL); one
    /// that a single process opens has nothing to claim and reads (SQLite).
    Claim,
}

/// The organization and environment a statement's rows belong to: every statement on an
/// organization's rows takes them, first (`$1`, `$2`), so that an engine that keys its
/// tables by organization (Citus) finds them in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope<'a> {
    /// The organization's id.
    pub org: &'a str,
    /// The environment.
    pub env: Env,
}

impl<'a> Scope<'a> {
    /// The scope of `org` and `env`.
    pub fn new(org: &'a str, env: Env) -> Self {
        Self { org, env }
    }
}

/// One value bound to a statement. Each engine binds it as its column wants (an integer
/// as the width of its column on PostgreSQL, a list as an array there and as JSON text on
/// SQLite).
#[derive(Debug, Clone, PartialEq)]
pub enum Param<'a> {
    /// SQL `NULL`.
    Null,
    /// An integer.
    Int(i64),
    /// Text.
    Text(Cow<'a, str>),
    /// Bytes.
    Bytes(&'a [u8]),
    /// A boolean.
    Flag(bool),
    /// A list of texts (`= ANY($n)` on PostgreSQL; `IN (SELECT value FROM json_each(?n))` on
    /// SQLite).
    Texts(&'a [String]),
    /// A list of integers, as [`Param::Texts`].
    Ints(&'a [i64]),
    /// A list of byte strings (`BYTEA[]` on PostgreSQL; JSON text of hex strings on
    /// SQLite).
    Blobs(&'a [Vec<u8>]),
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(value: &'a str) -> Self {
        Param::Text(Cow::Borrowed(value))
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(value: &'a String) -> Self {
        Param::Text(Cow::Borrowed(value))
    }
}

impl From<String> for Param<'_> {
    fn from(value: String) -> Self {
        Param::Text(Cow::Owned(value))
    }
}

impl From<i64> for Param<'_> {
    fn from(value: i64) -> Self {
        Param::Int(value)
    }
}

impl From<u32> for Param<'_> {
    fn from(value: u32) -> Self {
        Param::Int(i64::from(value))
    }
}

impl From<bool> for Param<'_> {
    fn from(value: bool) -> Self {
        Param::Flag(value)
    }
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(value: &'a [u8]) -> Self {
        Param::Bytes(value)
    }
}

impl From<Env> for Param<'_> {
    fn from(value: Env) -> Self {
        Param::Text(Cow::Borrowed(value.as_str()))
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Param::Null, Into::into)
    }
}

/// A row a statement returned, read column by column (from 0, in the order its variant of
/// [`Stmt`] documents). `NULL` reads as `None`.
pub trait Columns {
    /// An integer column.
    fn opt_int(&self, i: usize) -> Result<Option<i64>>;
    /// A text column.
    fn opt_text(&self, i: usize) -> Result<Option<String>>;
    /// A bytes column.
    fn opt_bytes(&self, i: usize) -> Result<Option<Vec<u8>>>;
    /// A boolean column (SQLite stores it as an integer).
    fn opt_flag(&self, i: usize) -> Result<Option<bool>>;

    /// An integer column that is never `NULL`.
    fn int(&self, i: usize) -> Result<i64> {
        self.opt_int(i)?.ok_or_else(|| null(i))
    }
    /// A text column that is never `NULL`.
    fn text(&self, i: usize) -> Result<String> {
        self.opt_text(i)?.ok_or_else(|| null(i))
    }
    /// A bytes column that is never `NULL`.
    fn bytes(&self, i: usize) -> Result<Vec<u8>> {
        self.opt_bytes(i)?.ok_or_else(|| null(i))
    }
    /// A boolean column that is never `NULL`.
    fn flag(&self, i: usize) -> Result<bool> {
        self.opt_flag(i)?.ok_or_else(|| null(i))
    }
}

fn null(i: usize) -> StorageError {
    StorageError::Corrupt(format!("column {i} is NULL"))
}

/// A transaction of an engine: the statements of [`Stmt`] in its SQL, and the few steps of
/// the decision path each engine does its own way.
pub trait Tx: Send {
    /// Runs `stmt` with `params` (as many as its SQL takes, from the first); how many rows
    /// its last statement changed. A statement an engine has no SQL for (nothing to do on
    /// it) changes none.
    fn execute(&mut self, stmt: Stmt, params: &[Param<'_>]) -> impl Io<u64>;

    /// Runs the query of `stmt` with `params`, each row read by `read`.
    fn query<T, F>(&mut self, stmt: Stmt, params: &[Param<'_>], read: F) -> impl Io<Vec<T>>
    where
        T: Send,
        F: FnMut(&dyn Columns) -> Result<T> + Send;

    /// What `agent`'s next decision depends on, read as one snapshot
    /// ([`super::DecidingStore::agent_record`]).
    fn agent_record(
        &mut self,
        scope: Scope<'_>,
        agent: &AgentId,
        limit: usize,
        allowed_since_ms: i64,
    ) -> impl Io<AgentRecord>;

    /// Decisions matching `filters` with seq strictly between `above` and `below`, at most
    /// `limit`, newest first or oldest first: the one read behind lists and exports.
    #[allow(clippy::too_many_arguments)]
    fn decisions(
        &mut self,
        scope: Scope<'_>,
        filters: &Filters,
        above: i64,
        below: i64,
        newest_first: bool,
        limit: i64,
    ) -> impl Io<Vec<(i64, Decision)>>;

    /// The amounts and times of `agent`'s `allow` decisions under `mandate` since
    /// `since_ms`, oldest first.
    fn allowed_since(
        &mut self,
        scope: Scope<'_>,
        agent: &AgentId,
        mandate: &MandateId,
        since_ms: i64,
    ) -> impl Io<Vec<(Amount, i64)>>;

    /// Appends a decision of the agent `hint` describes, with the log's next seq; the
    /// hint for the agent's next decision.
    fn insert_decision(
        &mut self,
        scope: Scope<'_>,
        hint: AgentHint,
        decision: &Decision,
    ) -> impl Io<AgentHint>;

    /// Takes the agent for a change made on the state `hint` was read with, in an
    /// environment in `mode`: its hint after the change, or `None` if the agent or the
    /// mode changed since (another process went first). An engine that one process uses,
    /// which serializes an agent's changes itself, has nothing to check.
    fn claim_agent(
        &mut self,
        scope: Scope<'_>,
        hint: AgentHint,
        mode: Mode,
    ) -> impl Io<Option<AgentHint>>;

    /// The organization's decision log's watermark
    /// ([`super::DecisionStore::settled_decision_seq`]).
    fn watermark(&mut self, org: &str) -> impl Io<i64>;

    /// The watermark of each of `orgs`, in order ([`Tx::watermark`] of each, which an
    /// engine may read at once).
    fn watermarks(&mut self, orgs: &[String]) -> impl Io<Vec<i64>> {
        async move {
            let mut out = Vec::with_capacity(orgs.len());
            for org in orgs {
                out.push(self.watermark(org).await?);
            }
            Ok(out)
        }
    }
}

/// An engine: runs the use cases, each in a transaction of its own.
pub trait Engine: Send + Sync + 'static {
    /// Its transaction.
    type Tx<'c>: Tx;

    /// Runs `job` with `args` in a transaction of the kind `access` names, and returns its
    /// result once that transaction is committed (durable, for a write). A job that
    /// returns an error leaves nothing written; one that refuses a change must refuse it
    /// before it writes (its transaction commits when it returns `Ok`). A job may run
    /// again (SQLite redoes a group when another of its jobs failed): it reads and writes
    /// only through its transaction.
    fn run<A, T, F>(
        &self,
        access: Access,
        args: A,
        job: F,
    ) -> impl Future<Output = Result<T>> + Send + '_
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
        F: for<'t, 'c> Fn(&'t mut Self::Tx<'c>, &'t A) -> Boxed<'t, T> + Send + Sync + 'static;

    /// [`Engine::run`] where `org`'s rows are, for a job that reads and writes only that
    /// organization's: on Citus, on a connection to the worker that holds its shard, so
    /// that none of the job's statements is sent on to another node (each written out as
    /// text there). Any other engine, or one that cannot reach that worker now, runs it as
    /// [`Engine::run`] does.
    fn run_at<A, T, F>(
        &self,
        org: String,
        access: Access,
        args: A,
        job: F,
    ) -> impl Future<Output = Result<T>> + Send + '_
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
        F: for<'t, 'c> Fn(&'t mut Self::Tx<'c>, &'t A) -> Boxed<'t, T> + Send + Sync + 'static,
    {
        drop(org);
        self.run(access, args, job)
    }

    /// [`Engine::run`] on the calling thread, blocking until it is done (operator commands
    /// and start-up, from any thread, a runtime's included).
    fn run_blocking<A, T, F>(&self, access: Access, args: A, job: F) -> Result<T>
    where
        A: Send + Sync,
        T: Send,
        F: for<'t, 'c> Fn(&'t mut Self::Tx<'c>, &'t A) -> Boxed<'t, T> + Send + Sync;

    /// The highest schema migration this build of the engine knows.
    fn latest_migration(&self) -> i64;

    /// Whether the engine serves the decision logs of many organizations in one
    /// transaction, each step of a round one statement for all of them (the log's
    /// `…Of` statements, [`crate::log::LogStore::log_tails`]): PostgreSQL on one node.
    /// Not Citus, where such a transaction would span workers, nor SQLite, whose
    /// statements cost no round trip: those serve one log at a time.
    fn logs_at_once(&self) -> bool {
        false
    }

    /// Stores a decision with everything it implies, in one transaction
    /// ([`super::DecidingStore::record_decision`]): the engine-neutral `deciding::record` in
    /// a write transaction (SQLite), or the engine's own faster way with the same rows
    /// (PostgreSQL: one statement, in its group writer).
    fn store_decision(
        &self,
        new: NewDecision,
    ) -> impl Future<Output = Result<Recorded>> + Send + '_;
}

/// The rows of a query, at most one expected.
pub fn first<T>(rows: Vec<T>) -> Option<T> {
    rows.into_iter().next()
}

/// A stored environment.
pub fn env_of(text: &str) -> Result<Env> {
    Env::parse(text).ok_or_else(|| StorageError::Corrupt(format!("environment {text:?}")))
}

/// A stored id of type `I`, parsed by `parse` (`what` names it in the error).
pub fn id_of<I, E: std::fmt::Display>(
    text: &str,
    what: &str,
    parse: impl FnOnce(&str) -> std::result::Result<I, E>,
) -> Result<I> {
    parse(text).map_err(|e| StorageError::Corrupt(format!("{what} {text:?}: {e}")))
}

/// A stored count or position as the `usize`/`u32` the boundary wants.
pub fn non_negative<T: TryFrom<i64>>(value: i64, what: &str) -> Result<T> {
    T::try_from(value).map_err(|_| StorageError::Corrupt(format!("{what} {value}")))
}
