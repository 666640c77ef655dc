//! The database handle: one writer thread that commits in groups, a few readers, all on
//! one WAL file.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::StorageError;
use super::migrations::{check, migrate};
use super::writer::{
    Inbox, Pending, WriteJob, WriterMsg, checkpoint_loop, configure, lock, sync_loop, write_in,
    writer_loop,
};

/// The database: a writer thread that commits in groups, and a small pool of readers, all
/// on one WAL file.
///
/// [`Db::write`] hands its closure to the writer thread. The thread runs the jobs waiting
/// for it in one transaction and commits when the sync thread is free (or
/// [`MAX_GROUP`](super::MAX_GROUP) jobs are in): one fsync makes the whole group durable. A
/// job that fails leaves no trace (`writer::Group`); each caller gets its own result, and
/// only after the group's commit and sync, so nothing is answered before it is on disk.
/// If the commit fails, every job of the group gets the error.
#[derive(Clone)]
pub struct Db {
    pub(super) writer: Arc<Mutex<Connection>>,
    /// The WAL file, synced before a write is reported done (see [`sync_loop`]).
    pub(super) wal: Arc<std::fs::File>,
    pub(super) jobs: Arc<Inbox>,
    pub(super) readers: Arc<Vec<Mutex<Connection>>>,
    pub(super) next_reader: Arc<AtomicUsize>,
    /// Held by every clone: when the last is dropped, the checkpoint thread sees its
    /// channel closed and ends at once.
    _open: mpsc::Sender<()>,
    /// The checkpoint, sync and writer threads, so that [`Db::close`] can wait for them.
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Db {
    /// Opens (creating if needed) and migrates the database at `path`, and starts its
    /// writer thread (which ends when the last clone of this `Db` is dropped).
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        Self::open_syncing_with(path, true, std::fs::File::sync_data)
    }

    /// [`Db::open`]; without `migrate`, the schema must already be this server's (it is
    /// checked, not changed: `serve --no-migrate`). A schema newer than this server knows
    /// is refused either way.
    pub fn open_with(path: &Path, migrate: bool) -> Result<Self, StorageError> {
        Self::open_syncing_with(path, migrate, std::fs::File::sync_data)
    }

    /// [`Db::open`], making the WAL durable with `sync` (tests slow it down or fail it).
    fn open_syncing_with(
        path: &Path,
        run_migrations: bool,
        sync: impl Fn(&std::fs::File) -> std::io::Result<()> + Send + 'static,
    ) -> Result<Self, StorageError> {
        // Owner-only before SQLite sees it: its WAL and shared memory take its mode.
        super::owner_only::create_if_missing(path).map_err(|e| {
            StorageError::Task(format!(
                "cannot create the database {}: {e}",
                path.display()
            ))
        })?;
        let mut writer = Connection::open(path).map_err(crate::sqlite_error)?;
        writer
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(crate::sqlite_error)?;
        configure(&writer).map_err(crate::sqlite_error)?;
        if !run_migrations {
            check(&writer)?;
        } else if migrate(&mut writer)? {
            // A migration may have removed data that must not stay on disk (0008: agent
            // keys stored in plaintext): copy its pages into the file and empty the WAL,
            // so that no older frame keeps the bytes. Nothing else runs yet at start.
            writer
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .map_err(crate::sqlite_error)?;
        }
        let readers = open_readers(path)?;
        tune_writer(&mut writer).map_err(crate::sqlite_error)?;
        let checkpointer = Connection::open(path).map_err(crate::sqlite_error)?;
        configure(&checkpointer).map_err(crate::sqlite_error)?;
        let writer = Arc::new(Mutex::new(writer));
        let (open, closed) = mpsc::channel::<()>();
        let restart = Arc::new(AtomicBool::new(false));
        let asks_restart = restart.clone();
        let mut threads = Vec::with_capacity(3);
        threads.push(
            std::thread::Builder::new()
                .name("mandate-checkpoint".into())
                .spawn(move || checkpoint_loop(&checkpointer, &closed, &asks_restart))
                .map_err(|e| {
                    StorageError::Task(format!("cannot start the checkpoint thread: {e}"))
                })?,
        );
        // The WAL exists from here on (WAL mode, migrations run) and keeps its inode while
        // any connection is open: fsync on this descriptor flushes what the writer wrote.
        let mut wal_path = path.as_os_str().to_owned();
        wal_path.push("-wal");
        let wal = Arc::new(std::fs::File::open(&wal_path).map_err(|e| {
            StorageError::Task(format!(
                "cannot open the WAL {}: {e}",
                Path::new(&wal_path).display()
            ))
        })?);
        let (jobs, receiver) = mpsc::channel::<WriterMsg>();
        let (synced, to_sync) = mpsc::channel::<Vec<Box<dyn WriteJob>>>();
        let sync_wal = wal.clone();
        let (tell_writer, sync_done) = mpsc::channel::<()>();
        threads.push(
            std::thread::Builder::new()
                .name("mandate-sync".into())
                .spawn(move || {
                    sync_loop(
                        || sync(&sync_wal),
                        to_sync,
                        || {
                            let _ = tell_writer.send(());
                        },
                    )
                })
                .map_err(|e| StorageError::Task(format!("cannot start the sync thread: {e}")))?,
        );
        let thread_writer = writer.clone();
        threads.push(
            std::thread::Builder::new()
                .name("mandate-writer".into())
                .spawn(move || writer_loop(thread_writer, receiver, restart, synced, sync_done))
                .map_err(|e| StorageError::Task(format!("cannot start the writer thread: {e}")))?,
        );
        Ok(Self {
            writer,
            wal,
            jobs: Arc::new(Inbox(jobs)),
            readers: Arc::new(readers),
            next_reader: Arc::new(AtomicUsize::new(0)),
            _open: open,
            threads: Arc::new(Mutex::new(threads)),
        })
    }

    /// Runs `f` on the writer, in the open transaction of a group, and returns its result
    /// once the group is committed (durable). `f`'s changes are rolled back if it fails.
    ///
    /// `f` may run more than once: when another job of its group fails, the group's
    /// transaction is rolled back and `f` runs again in a new one (see `writer::Group`), and its
    /// last result is the one returned. So it should only read and write through the
    /// connection it is given.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StorageError> + Send + 'static,
        F: FnMut(&mut Connection) -> Result<T, E> + Send + 'static,
    {
        let (reply, receiver) = tokio::sync::oneshot::channel::<Result<T, E>>();
        let job = Box::new(Pending {
            f,
            result: None,
            reply,
        });
        self.jobs
            .0
            .send(WriterMsg::Job(job))
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
        F: FnOnce(&mut Connection) -> Result<T, E> + Send + 'static,
    {
        let readers = self.readers.clone();
        let index = self.next_reader.fetch_add(1, Ordering::Relaxed) % readers.len();
        tokio::task::spawn_blocking(move || {
            let mut conn = lock(&readers[index]);
            f(&mut conn)
        })
        .await
        .map_err(|e| E::from(StorageError::Task(e.to_string())))?
    }

    /// Runs `f` in its own transaction on the calling thread (operator commands, start-up).
    pub fn write_blocking<T, E, F>(&self, f: F) -> Result<T, E>
    where
        E: From<StorageError>,
        F: FnOnce(&mut Connection) -> Result<T, E>,
    {
        let mut conn = lock(&self.writer);
        let value = write_in(&mut conn, f)?;
        // The writer connection does not sync at commit (see `open`).
        self.wal
            .sync_data()
            .map_err(|e| E::from(StorageError::Task(format!("syncing the WAL failed: {e}"))))?;
        Ok(value)
    }

    /// Runs `f` on the writer's connection outside any transaction, on the calling thread,
    /// between the writer's groups (statements that may not run in a transaction).
    pub fn on_writer<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Connection) -> Result<T, E>,
    {
        let mut conn = lock(&self.writer);
        f(&mut conn)
    }

    /// Drops this handle and waits, at most `within`, until the database is closed: every
    /// other clone dropped, the jobs sent before committed, and the writer, sync and
    /// checkpoint threads ended with their connections. True if it closed in time.
    ///
    /// A stopped server calls it before it returns, so that nothing it started still
    /// writes to the files when its caller copies, restores or opens them again.
    pub fn close(self, within: Duration) -> bool {
        let threads = self.threads.clone();
        drop(self);
        let deadline = Instant::now() + within;
        loop {
            let ended = threads
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .all(JoinHandle::is_finished);
            if ended {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Copies the WAL into the database file and empties it, so that no older frame keeps
    /// bytes that a transaction replaced. Best effort: a checkpoint that readers hold back
    /// leaves the WAL as it is (and the regular checkpoints copy it later).
    pub fn checkpoint_truncate(&self) {
        let conn = lock(&self.writer);
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
            tracing::warn!("wal checkpoint: {e}");
        }
    }
}

/// The reader connections, read-only, each with a small page cache.
fn open_readers(path: &Path) -> Result<Vec<Mutex<Connection>>, StorageError> {
    let mut readers = Vec::new();
    for _ in 0..4 {
        let reader = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(crate::sqlite_error)?;
        configure(&reader).map_err(crate::sqlite_error)?;
        // 1 MB each (SQLite's default is 2): reads are lists and state rebuilds, which
        // the OS page cache serves as well; memory is better spent on the writer's.
        reader
            .pragma_update(None, "cache_size", -1_000)
            .map_err(crate::sqlite_error)?;
        readers.push(Mutex::new(reader));
    }
    Ok(readers)
}

/// The writer connection's settings: no automatic checkpoints, a larger page cache, commits
/// that leave the WAL's sync to the sync thread, savepoints in memory, every statement kept
/// prepared.
fn tune_writer(writer: &mut Connection) -> rusqlite::Result<()> {
    // Checkpoints run on their own thread and connection, not inside the writer's commits.
    writer.pragma_update(None, "wal_autocheckpoint", 0)?;
    // 16 MB of page cache for the writer. Since migration 0006 the pages that new
    // decisions change (the tails of the table and its indexes, the by-agent index's
    // latest bucket) fit in it whatever the history. A larger cache bought little and
    // took the resident set over the memory budget (docs/performance.md).
    writer.pragma_update(None, "cache_size", -16_000)?;
    // The writer's commits write the WAL without syncing it; the sync thread syncs it
    // before any job of the group is answered (so a reported write is as durable as
    // with synchronous=FULL), and the writer is free sooner. NORMAL,
    // not OFF: a checkpoint the writer runs still syncs the WAL before copying and the
    // database file after.
    writer.pragma_update(None, "synchronous", "NORMAL")?;
    // Each job's savepoint keeps copies of the pages it changes: in memory, not in a
    // temporary file.
    writer.pragma_update(None, "temp_store", "MEMORY")?;
    // Every statement the writer runs stays prepared (the default keeps only 16).
    writer.set_prepared_statement_cache_capacity(256);
    Ok(())
}

#[cfg(test)]
mod tests;
