//! [`SqliteStore`]: the SQLite engine behind the storage boundary. It runs each use case
//! of the boundary (written once, `storage::engine`) on [`Db`]: a write as one job of the
//! writer's group commit, a read on a reader connection off the executor, on a
//! [`SqliteTx`] whose steps never wait, so the use case is done in one poll ([`ready`]).

use std::future::Future;

use rusqlite::Connection;

use super::Db;
use super::tx::{SqliteTx, ready};
use mandate_storage::StorageError;
use mandate_storage::deciding::{self, NewDecision, Recorded};
use mandate_storage::engine::{Access, Boxed, Engine};

/// The SQLite engine: the embedded default, one file with group commit.
#[derive(Clone)]
pub struct SqliteStore {
    db: Db,
}

impl SqliteStore {
    /// The engine over an open database.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The database handle.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

type Result<T> = std::result::Result<T, StorageError>;

impl Engine for SqliteStore {
    type Tx<'c> = SqliteTx<'c>;

    fn run<A, T, F>(
        &self,
        access: Access,
        args: A,
        job: F,
    ) -> impl Future<Output = Result<T>> + Send + '_
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
        F: for<'t, 'c> Fn(&'t mut SqliteTx<'c>, &'t A) -> Boxed<'t, T> + Send + Sync + 'static,
    {
        let work = move |conn: &mut Connection| ready(job(&mut SqliteTx::new(conn), &args));
        async move {
            match access {
                // One process: nothing to claim, so a claim reads.
                Access::Read | Access::Claim => self.db.read(work).await,
                Access::Write | Access::Each => self.db.write(work).await,
            }
        }
    }

    fn run_blocking<A, T, F>(&self, access: Access, args: A, job: F) -> Result<T>
    where
        A: Send + Sync,
        T: Send,
        F: for<'t, 'c> Fn(&'t mut SqliteTx<'c>, &'t A) -> Boxed<'t, T> + Send + Sync,
    {
        let work = |conn: &mut Connection| ready(job(&mut SqliteTx::new(conn), &args));
        match access {
            // Statements that may not run in a transaction (a checkpoint).
            Access::Each => self.db.on_writer(work),
            Access::Read | Access::Write | Access::Claim => self.db.write_blocking(work),
        }
    }

    fn latest_migration(&self) -> i64 {
        super::migrations::latest()
    }

    /// The engine-neutral script, as one job of the writer's group commit.
    fn store_decision(
        &self,
        new: NewDecision,
    ) -> impl Future<Output = Result<Recorded>> + Send + '_ {
        self.run(Access::Write, new, |tx, new| {
            Box::pin(deciding::record(tx, new))
        })
    }
}
