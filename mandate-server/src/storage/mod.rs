//! SQLite persistence: one file, WAL, numbered migrations, one writer and a few readers.
//!
//! All SQL lives under this module, one file per resource. Blocking SQLite work never runs
//! on the async executor: writes go to one writer thread that commits them in groups
//! ([`Db::write`]), reads to tokio's blocking pool ([`Db::read`]).
//! Every multi-statement change runs in one `IMMEDIATE` transaction: a decision, its review
//! and its event are committed together or not at all.

pub mod agents;
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

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

/// The numbered migrations, applied in order. Never edit one that has landed: add another.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/0001_init.sql")),
    (2, include_str!("../../migrations/0002_webhooks.sql")),
    (3, include_str!("../../migrations/0003_escrows.sql")),
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

/// The database: a writer thread that commits in groups, and a small pool of readers, all
/// on one WAL file.
///
/// [`Db::write`] hands its closure to the writer thread. The thread takes every job that is
/// waiting (up to [`MAX_GROUP`]), runs each in its own savepoint inside one transaction, and
/// commits once: one fsync makes the whole group durable. A job that fails rolls back its
/// savepoint only; each caller gets its own result, and only after the commit, so nothing is
/// answered before it is on disk. If the commit fails, every job of the group gets the error.
#[derive(Clone)]
pub struct Db {
    writer: Arc<Mutex<Connection>>,
    jobs: mpsc::Sender<Job>,
    readers: Arc<Vec<Mutex<Connection>>>,
    next_reader: Arc<AtomicUsize>,
}

/// The most jobs one commit covers.
pub const MAX_GROUP: usize = 256;

/// What a job reports once its group's commit is known: `None` if it committed.
type Done = Box<dyn FnOnce(Option<String>) + Send>;
/// A write job: runs on the writer's connection (or learns why it cannot), returns how to
/// report its result once the commit is known.
type Job = Box<dyn FnOnce(Result<&Connection, String>) -> Done + Send>;

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    // Once a checkpoint has emptied the WAL, shrink its file back to 64 MiB at most.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    Ok(())
}

fn lock(mutex: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic while holding the lock leaves the connection usable (SQLite rolls back the
    // open transaction when the Transaction is dropped), so recover the guard.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs one job's closure inside a savepoint of the group's transaction.
fn in_savepoint<T, E, F>(conn: &Connection, f: F) -> Result<T, E>
where
    E: From<StorageError>,
    F: FnOnce(&Connection) -> Result<T, E>,
{
    let sqlite = |e: rusqlite::Error| E::from(StorageError::Sqlite(e));
    conn.execute_batch("SAVEPOINT job").map_err(sqlite)?;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
        .unwrap_or_else(|_| Err(E::from(StorageError::Task("a write panicked".into()))));
    let end = match &result {
        Ok(_) => conn.execute_batch("RELEASE job"),
        Err(_) => conn.execute_batch("ROLLBACK TO job; RELEASE job"),
    };
    end.map_err(sqlite)?;
    result
}

fn writer_loop(writer: Arc<Mutex<Connection>>, jobs: mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let conn = lock(&writer);
        let outcome = match conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {
                let done: Vec<Done> = group.into_iter().map(|job| job(Ok(&conn))).collect();
                match conn.execute_batch("COMMIT") {
                    Ok(()) => (done, None),
                    Err(e) => {
                        let _ = conn.execute_batch("ROLLBACK");
                        (done, Some(format!("commit failed: {e}")))
                    }
                }
            }
            Err(e) => {
                let message = format!("cannot begin a transaction: {e}");
                let done = group
                    .into_iter()
                    .map(|job| job(Err(message.clone())))
                    .collect();
                (done, None)
            }
        };
        drop(conn);
        let (done, error) = outcome;
        for report in done {
            report(error.clone());
        }
    }
}

/// Copies committed WAL frames into the database file every 100 ms (PASSIVE: it never
/// blocks the writer), until the database is closed.
fn checkpoint_loop(conn: &Connection, writer: &std::sync::Weak<Mutex<Connection>>) {
    while writer.strong_count() > 0 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!("wal checkpoint: {e}");
        }
    }
}

impl Db {
    /// Opens (creating if needed) and migrates the database at `path`, and starts its
    /// writer thread (which ends when the last clone of this `Db` is dropped).
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
        // Checkpoints run on their own thread and connection, not inside the writer's commits.
        writer.pragma_update(None, "wal_autocheckpoint", 0)?;
        writer.pragma_update(None, "cache_size", -32_000)?;
        // Every statement the writer runs stays prepared (the default keeps only 16).
        writer.set_prepared_statement_cache_capacity(256);
        let checkpointer = Connection::open(path)?;
        configure(&checkpointer)?;
        let writer = Arc::new(Mutex::new(writer));
        let weak = Arc::downgrade(&writer);
        std::thread::Builder::new()
            .name("mandate-checkpoint".into())
            .spawn(move || checkpoint_loop(&checkpointer, &weak))
            .map_err(|e| StorageError::Task(format!("cannot start the checkpoint thread: {e}")))?;
        let (jobs, receiver) = mpsc::channel::<Job>();
        let thread_writer = writer.clone();
        std::thread::Builder::new()
            .name("mandate-writer".into())
            .spawn(move || writer_loop(thread_writer, receiver))
            .map_err(|e| StorageError::Task(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            writer,
            jobs,
            readers: Arc::new(readers),
            next_reader: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Runs `f` on the writer, in a savepoint of a group transaction, and returns its result
    /// once the group is committed (durable). `f`'s changes are rolled back if it fails.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StorageError> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        let (sender, receiver) = tokio::sync::oneshot::channel::<Result<T, E>>();
        let job: Job = Box::new(move |conn: Result<&Connection, String>| {
            let result = match conn {
                Ok(conn) => in_savepoint(conn, f),
                Err(message) => Err(E::from(StorageError::Task(message))),
            };
            Box::new(move |commit_error: Option<String>| {
                let result = match commit_error {
                    None => result,
                    Some(message) => Err(E::from(StorageError::Task(message))),
                };
                let _ = sender.send(result);
            })
        });
        self.jobs
            .send(job)
            .map_err(|_| E::from(StorageError::Task("the writer thread has stopped".into())))?;
        receiver
            .await
            .map_err(|_| E::from(StorageError::Task("the writer dropped a job".into())))?
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

    /// Runs `f` in its own transaction on the calling thread (operator commands, start-up).
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_job_rolls_back_alone_within_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("t.db")).unwrap();
        db.write(|c| -> Result<(), StorageError> {
            c.execute_batch("CREATE TABLE t (n INTEGER)")?;
            Ok(())
        })
        .await
        .unwrap();
        let writes = (0..200).map(|n| {
            let db = db.clone();
            tokio::spawn(async move {
                db.write(move |c| -> Result<i64, StorageError> {
                    c.execute("INSERT INTO t (n) VALUES (?1)", [n])?;
                    if n % 2 == 1 {
                        return Err(StorageError::Corrupt(format!("job {n} fails")));
                    }
                    Ok(n)
                })
                .await
            })
        });
        let mut ok = 0;
        for (n, handle) in writes.enumerate() {
            match handle.await.unwrap() {
                Ok(v) => {
                    assert_eq!(v, n as i64);
                    ok += 1;
                }
                Err(StorageError::Corrupt(m)) => assert_eq!(m, format!("job {n} fails")),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(ok, 100);
        let (count, odd): (i64, i64) = db
            .read(|c| -> Result<_, StorageError> {
                Ok(
                    c.query_row("SELECT COUNT(*), COALESCE(SUM(n % 2), 0) FROM t", [], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?,
                )
            })
            .await
            .unwrap();
        assert_eq!((count, odd), (100, 0));
    }

    #[tokio::test]
    async fn a_panicking_job_is_an_error_and_the_writer_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("p.db")).unwrap();
        let failed = db
            .write(|_c| -> Result<(), StorageError> { panic!("boom") })
            .await;
        assert!(matches!(failed, Err(StorageError::Task(_))));
        let fine = db
            .write(|c| -> Result<i64, StorageError> {
                Ok(c.query_row("SELECT 41 + 1", [], |r| r.get(0))?)
            })
            .await
            .unwrap();
        assert_eq!(fine, 42);
    }
}
