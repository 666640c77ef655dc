//! Persistence behind one boundary. The rest of the server reaches stored data through
//! this module; each engine is a module of its own under it: [`sqlite`], the embedded
//! default (one file, group commit).
//!
//! Storage imports nothing above it: not the routes, not the decision service, not the
//! HTTP layers.

pub mod deciding;
pub mod sqlite;

pub use sqlite::Db;
pub use sqlite::MAX_GROUP;
// The SQLite engine's resource modules, until every caller goes through the boundary.
pub use sqlite::{
    agents, decisions, deliveries, escrows, events, idempotency, keys, mandates, orgs, reviews,
    settlement, signing, timers, webhooks,
};

/// A storage failure: the database could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An error from SQLite.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The blocking task running the query was lost (panic or shutdown).
    #[error("database task failed: {0}")]
    Task(String),
    /// Stored data that cannot be read back (a bug or a hand-edited database).
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

/// What an operation of the storage boundary returns: a future the handlers can await on
/// any runtime thread, boxed so that the boundary's traits can be used as `dyn` objects.
pub type StoreFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StorageError>> + Send + 'a>>;
