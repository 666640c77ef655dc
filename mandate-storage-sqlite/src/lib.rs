//! The SQLite engine, the embedded default: one file, WAL, numbered migrations, one writer
//! and a few readers.
//!
//! The engine is SQL and a transaction (`storage::engine`): the SQL of every statement of
//! the boundary (`statements.rs`), the reads of the decision log that walk its index by
//! buckets ([`decisions`]), and [`SqliteTx`], which runs them on a connection; the use
//! cases are the boundary's, written once. Blocking SQLite work never runs on the async
//! executor: writes go to one writer thread that commits them in groups ([`Db::write`]),
//! reads to tokio's blocking pool ([`Db::read`]). Every write is one `IMMEDIATE`
//! transaction (a job of a group): a decision, its review and its event are committed
//! together or not at all.
//!
//! [`Db`] is the handle; `writer` holds the threads behind it (group commit, sync,
//! checkpoint), `migrations` the numbered schema changes (`migrations/sqlite/`), `backup`
//! the online backups.

pub mod backup;
pub mod decisions;
pub mod owner_only;

mod db;
mod migrations;
mod row;
mod statements;
mod store;
mod tx;
mod writer;

pub use db::Db;
pub use store::SqliteStore;
pub use tx::{SqliteTx, ready};
pub use writer::MAX_GROUP;

use mandate_storage::StorageError;

/// SQLite's errors as the boundary's: busy or locked past the timeout is
/// [`StorageError::Unavailable`], a damaged file or a value that does not read back
/// [`StorageError::Corrupt`], anything else [`StorageError::Backend`] (with the result
/// code in the text).
/// (A function, not a `From`: neither type is this crate's.)
pub fn sqlite_error(e: rusqlite::Error) -> StorageError {
    use rusqlite::ErrorCode;
    let text = format!("sqlite: {e}");
    match &e {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => StorageError::Unavailable(text),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => StorageError::Corrupt(text),
            _ => StorageError::Backend(text),
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => StorageError::Corrupt(text),
        _ => StorageError::Backend(text),
    }
}
