//! SQLite persistence: one file, WAL, numbered migrations, one writer and a few readers.
//!
//! All SQL lives under this module, one file per resource. Blocking SQLite work runs on
//! tokio's blocking pool ([`Db::write`], [`Db::read`]) so it never stalls the executor.
//! Every multi-statement change runs in one `IMMEDIATE` transaction: a decision, its review
//! and its event are committed together or not at all.

pub mod agents;
pub mod decisions;
pub mod deliveries;
pub mod events;
pub mod idempotency;
pub mod keys;
pub mod mandates;
pub mod orgs;
pub mod reviews;
pub mod signing;
pub mod timers;
pub mod webhooks;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

/// The numbered migrations, applied in order. Never edit one that has landed: add another.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/0001_init.sql")),
    (2, include_str!("../../migrations/0002_webhooks.sql")),
];

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

/// The database: a writer connection and a small pool of readers, all on one WAL file.
#[derive(Clone)]
pub struct Db {
    writer: Arc<Mutex<Connection>>,
    readers: Arc<Vec<Mutex<Connection>>>,
    next_reader: Arc<AtomicUsize>,
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(())
}

fn lock(mutex: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic while holding the lock leaves the connection usable (SQLite rolls back the
    // open transaction when the Transaction is dropped), so recover the guard.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Db {
    /// Opens (creating if needed) and migrates the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        let mut writer = Connection::open(path)?;
        writer.pragma_update(None, "journal_mode", "WAL")?;
        configure(&writer)?;
        migrate(&mut writer)?;
        let mut readers = Vec::new();
        for _ in 0..4 {
            let reader = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            configure(&reader)?;
            readers.push(Mutex::new(reader));
        }
        Ok(Self {
            writer: Arc::new(Mutex::new(writer)),
            readers: Arc::new(readers),
            next_reader: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Runs `f` in one IMMEDIATE transaction on the writer, off the async executor.
    /// The transaction commits when `f` returns `Ok`, and rolls back otherwise.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StorageError> + Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T, E> + Send + 'static,
    {
        let writer = self.writer.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = lock(&writer);
            write_in(&mut conn, f)
        })
        .await
        .map_err(|e| E::from(StorageError::Task(e.to_string())))?
    }

    /// Runs `f` on a reader connection, off the async executor.
    pub async fn read<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StorageError> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        let readers = self.readers.clone();
        let index = self.next_reader.fetch_add(1, Ordering::Relaxed) % readers.len();
        tokio::task::spawn_blocking(move || {
            let conn = lock(&readers[index]);
            f(&conn)
        })
        .await
        .map_err(|e| E::from(StorageError::Task(e.to_string())))?
    }

    /// Runs `f` in a transaction on the calling thread (operator commands, start-up).
    pub fn write_blocking<T, E, F>(&self, f: F) -> Result<T, E>
    where
        E: From<StorageError>,
        F: FnOnce(&Transaction<'_>) -> Result<T, E>,
    {
        let mut conn = lock(&self.writer);
        write_in(&mut conn, f)
    }
}

fn write_in<T, E, F>(conn: &mut Connection, f: F) -> Result<T, E>
where
    E: From<StorageError>,
    F: FnOnce(&Transaction<'_>) -> Result<T, E>,
{
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| E::from(StorageError::Sqlite(e)))?;
    let value = f(&tx)?;
    tx.commit().map_err(|e| E::from(StorageError::Sqlite(e)))?;
    Ok(value)
}

fn migrate(conn: &mut Connection) -> Result<(), StorageError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)",
    )?;
    for (version, sql) in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let applied: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?1)",
            [version],
            |row| row.get(0),
        )?;
        if !applied {
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_ms) VALUES (?1, ?2)",
                rusqlite::params![version, 0],
            )?;
        }
        tx.commit()?;
    }
    Ok(())
}

/// Reads a stored verdict column.
pub(crate) fn verdict_from(text: &str) -> Result<mandate_core::policy::Verdict, StorageError> {
    mandate_core::policy::Verdict::parse(text)
        .ok_or_else(|| StorageError::Corrupt(format!("verdict {text:?}")))
}
