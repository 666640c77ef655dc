//! The SQLite engine, the embedded default: one file, WAL, numbered migrations, one writer
//! and a few readers.
//!
//! All of its SQL lives under this module, one file per resource. Blocking SQLite work
//! never runs on the async executor: writes go to one writer thread that commits them in
//! groups ([`Db::write`]), reads to tokio's blocking pool ([`Db::read`]). Every
//! multi-statement change runs in one `IMMEDIATE` transaction: a decision, its review and
//! its event are committed together or not at all.
//!
//! [`Db`] is the handle; `writer` holds the threads behind it (group commit, sync,
//! checkpoint) and `migrations` the numbered schema changes (`migrations/sqlite/`).

pub mod agents;
pub mod ap2;
pub mod backup;
mod deciding;
pub mod decisions;
pub mod deliveries;
pub mod escrows;
pub mod events;
pub mod idempotency;
pub mod keys;
pub mod mandates;
pub mod orgs;
pub mod reviews;
pub mod settlement;
pub mod signing;
pub mod timers;
pub mod webhooks;

mod db;
mod health;
mod migrations;
mod store;
mod writer;

pub use db::Db;
pub use store::SqliteStore;
pub use writer::MAX_GROUP;

use super::StorageError;
use crate::model::{Env, KeyClass};
use crate::storage::deliveries::DeliveryState;

/// SQLite's errors as the boundary's: busy or locked past the timeout is
/// [`StorageError::Unavailable`], a damaged file or a value that does not read back
/// [`StorageError::Corrupt`], anything else [`StorageError::Backend`] (with the result
/// code in the text).
impl From<rusqlite::Error> for StorageError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        let text = format!("sqlite: {e}");
        match &e {
            rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                    StorageError::Unavailable(text)
                }
                ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => StorageError::Corrupt(text),
                _ => StorageError::Backend(text),
            },
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => StorageError::Corrupt(text),
            _ => StorageError::Backend(text),
        }
    }
}

/// An environment is stored as its name (`sandbox`, `live`).
impl rusqlite::ToSql for Env {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl rusqlite::types::FromSql for Env {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        Env::parse(text).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(format!("environment {text:?}").into())
        })
    }
}

/// A key class is stored as its name (`org`, `agent`).
impl rusqlite::types::FromSql for KeyClass {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        crate::storage::keys::class_from(text)
            .map_err(|e| rusqlite::types::FromSqlError::Other(e.to_string().into()))
    }
}

/// A delivery's state is stored as its name.
impl rusqlite::ToSql for DeliveryState {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl rusqlite::types::FromSql for DeliveryState {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        DeliveryState::parse(text).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(format!("delivery state {text:?}").into())
        })
    }
}

/// Reads a stored verdict column.
pub(crate) fn verdict_from(text: &str) -> Result<mandate_core::policy::Verdict, StorageError> {
    mandate_core::policy::Verdict::parse(text)
        .ok_or_else(|| StorageError::Corrupt(format!("verdict {text:?}")))
}
