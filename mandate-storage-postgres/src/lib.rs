//! The PostgreSQL engine: any number of server processes on one database, each decision
//! as exact as on SQLite.
//!
//! The engine is SQL and a transaction (`storage::engine`): the SQL of every statement of
//! the boundary (`statements.rs`), the decision path's own reads and writes (`deciding.rs`,
//! [`decisions`], `record.rs`, `writer.rs`, `claims.rs`), and [`PgTx`], which runs them on
//! a connection; the use cases are the boundary's, written once. It talks to the database
//! through tokio-postgres on a deadpool pool ([`connect`]), TLS through rustls ([`tls`]),
//! and keeps its schema in numbered files under `migrations/postgres/` ([`migrations`]).
//!
//! What makes many processes one service:
//! - **Exact decisions** (`deciding.rs`, `record.rs`): each agent's row carries a
//!   `version` that moves with every change its next decision depends on. A decision is
//!   stored by one statement that first moves the version from the one its state was
//!   read at (and checks that the environment's enforcement mode is still the one it was
//!   made in); if another process got there first nothing is stored and the store
//!   answers [`StorageError::Conflict`]: the decision service reloads the agent and
//!   decides again.
//! - **Row claims with an expiry** for webhook deliveries and idempotency keys
//!   (`FOR UPDATE SKIP LOCKED`, `claimed_until`): work of a process that died is taken
//!   over once its claim runs out, and never done by two at once meanwhile.
//! - Only SQL that CockroachDB also accepts: row locks and single statements, no advisory
//!   locks, no LISTEN/NOTIFY.
//!
//! Every answer is sent after its statement committed, with `synchronous_commit` as the
//! server has it (on by default): durable when answered.

mod claims;
pub mod connect;
mod deciding;
pub mod decisions;
mod direct;
pub mod gather;
pub mod migrations;
mod near;
mod record;
mod statements;
mod steps;
pub mod store;
pub mod tls;
mod tx;
mod writer;

#[cfg(test)]
use mandate_test_kit::test_db;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

pub use store::PostgresStore;
pub use tx::PgTx;

use tokio_postgres::error::SqlState;

use mandate_storage::StorageError;

/// Log directives that hold whatever the operator's filter says: at debug, tokio-postgres
/// logs every statement with its parameters (request fields, sealed answers, key hashes),
/// which never go to the log.
pub const DRIVER_LOG_CAPS: [&str; 2] = ["tokio_postgres=info", "deadpool_postgres=info"];

/// What the engine's functions return.
pub type Result<T> = std::result::Result<T, StorageError>;

/// SQLSTATEs that mean the database cannot be used right now rather than that a statement
/// is wrong: connection failures, shutdowns, too many connections.
fn unavailable(code: &SqlState) -> bool {
    let text = code.code();
    text.starts_with("08")
        || text.starts_with("57P")
        || *code == SqlState::TOO_MANY_CONNECTIONS
        || *code == SqlState::CANNOT_CONNECT_NOW
}

/// PostgreSQL's errors as the boundary's: a serialization failure or deadlock is
/// [`StorageError::Conflict`] (retried), a lost or refused connection
/// [`StorageError::Unavailable`], anything else [`StorageError::Backend`]. (A function,
/// not a `From`: neither type is this crate's.)
pub fn pg_error(e: tokio_postgres::Error) -> StorageError {
    {
        if let Some(db) = e.as_db_error() {
            let code = db.code();
            if *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
            {
                return StorageError::Conflict;
            }
            let text = format!("{} (SQLSTATE {})", db.message(), code.code());
            return if unavailable(code) {
                StorageError::Unavailable(text)
            } else {
                StorageError::Backend(text)
            };
        }
        if e.is_closed() {
            return StorageError::Unavailable("the connection to the database closed".into());
        }
        // No SQLSTATE: an I/O error, a timeout, or a value that did not convert.
        let text = e.to_string();
        if std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) {
            StorageError::Unavailable(text)
        } else {
            StorageError::Backend(text)
        }
    }
}

/// The pool's errors as the boundary's: no connection is [`StorageError::Unavailable`].
pub fn pool_error(e: deadpool_postgres::PoolError) -> StorageError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_error(e),
        other => StorageError::Unavailable(format!("no database connection: {other}")),
    }
}
