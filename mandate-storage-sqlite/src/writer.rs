//! The threads behind [`Db`](super::Db): the writer runs jobs in groups and commits them,
//! the sync thread fsyncs the WAL before any job of a group is answered, and the
//! checkpoint thread copies the WAL into the file and has it start over.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

use rusqlite::Connection;
use rusqlite::config::DbConfig;

use super::StorageError;

/// The most jobs one commit covers.
pub const MAX_GROUP: usize = 256;

/// WAL frames (4 KiB pages) past which the writer lets the WAL start over (see
/// [`checkpoint_loop`]).
pub(super) const RESTART_FRAMES: i64 = 4096;

/// A write job as the writer thread holds it: run in the group's open transaction (again,
/// if the group has to be rolled back and redone), then answered once the group's commit
/// is known.
pub(super) trait WriteJob: Send {
    /// Runs the job's closure on `conn` and keeps its result (a panic is an error);
    /// whether it succeeded.
    fn run(&mut self, conn: &mut Connection) -> bool;
    /// Records why the job could not run or stay in the transaction.
    fn fail(&mut self, message: String);
    /// Answers the caller: its kept result, or `commit_error` if the group's commit or
    /// sync failed.
    fn answer(self: Box<Self>, commit_error: Option<String>);
}

/// What the sync thread answers once a group's sync is known.
pub(super) trait Answer: Send {
    /// Answers with `error` (`None`: durable).
    fn answer(self, error: Option<String>);
}

impl Answer for Box<dyn WriteJob> {
    fn answer(self, error: Option<String>) {
        WriteJob::answer(self, error);
    }
}

/// A job of [`Db::write`](super::Db::write): the caller's closure, its latest result, and
/// where to send it.
pub(super) struct Pending<F, T, E> {
    pub(super) f: F,
    pub(super) result: Option<Result<T, E>>,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<T, E>>,
}

impl<F, T, E> WriteJob for Pending<F, T, E>
where
    F: FnMut(&mut Connection) -> Result<T, E> + Send,
    T: Send,
    E: From<StorageError> + Send,
{
    fn run(&mut self, conn: &mut Connection) -> bool {
        let f = &mut self.f;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
            .unwrap_or_else(|_| Err(E::from(StorageError::Task("a write panicked".into()))));
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn fail(&mut self, message: String) {
        self.result = Some(Err(E::from(StorageError::Task(message))));
    }

    fn answer(self: Box<Self>, commit_error: Option<String>) {
        let result = match commit_error {
            Some(message) => Err(E::from(StorageError::Task(message))),
            None => self
                .result
                .unwrap_or_else(|| Err(E::from(StorageError::Task("the write never ran".into())))),
        };
        let _ = self.reply.send(result);
    }
}

/// How often a connection that finds the database locked tries again, and for how long.
pub(super) const BUSY_RETRY: std::time::Duration = std::time::Duration::from_micros(100);
pub(super) const BUSY_ATTEMPTS: i32 = 100_000; // 10 s

/// SQLite's own busy handler sleeps up to 100 ms between attempts. Under load the server's
/// writer holds the write lock from one group's first job to its commit, and lets go only
/// while that group's sync runs (well under a millisecond), so an operator command
/// (another process) that naps that long can wait seconds for its turn; one that looks
/// again every 100 µs gets in within milliseconds.
pub(super) fn retry_soon(attempts: i32) -> bool {
    std::thread::sleep(BUSY_RETRY);
    attempts < BUSY_ATTEMPTS
}

pub(super) fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_handler(Some(retry_soon))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    // Once a checkpoint has emptied the WAL, shrink its file back to 64 MiB at most.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    // Plans do not depend on bound values. Without this, SQLite (3.47 on) reads the value
    // bound to a `LIMIT ?` while planning, so binding it again re-prepares the statement
    // on every run: every page of a list and every rebuild of an agent's state parsed its
    // SQL anew (`storage::tests::statements_are_not_prepared_again_per_run`).
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

pub(super) fn lock(mutex: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic while holding the lock leaves the connection usable (SQLite rolls back the
    // open transaction when the Transaction is dropped), so recover the guard.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs a statement the writer runs often (prepared once and kept).
pub(super) fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(|_| ())
}

/// Runs `job` inside a savepoint of the open transaction, so that its changes are undone
/// alone if it fails; whether it succeeded.
pub(super) fn run_in_savepoint(conn: &mut Connection, job: &mut dyn WriteJob) -> bool {
    if let Err(e) = run_cached(conn, "SAVEPOINT job") {
        job.fail(format!("cannot open a savepoint: {e}"));
        return false;
    }
    let ok = job.run(conn);
    let end = if ok {
        run_cached(conn, "RELEASE job")
    } else {
        run_cached(conn, "ROLLBACK TO job").and_then(|_| run_cached(conn, "RELEASE job"))
    };
    match end {
        Ok(()) => ok,
        Err(e) => {
            job.fail(format!("cannot close a savepoint: {e}"));
            false
        }
    }
}

/// The jobs run in the writer's open transaction, waiting for its commit.
///
/// Jobs run without a savepoint of their own: a savepoint makes SQLite copy every page a
/// job changes before changing it (a sub-journal in memory), and the jobs of a group
/// change the same few pages (the tables' and indexes' last leaves) one after the other,
/// so each job copied them again, a large share of the writer's time (docs/performance.md). A
/// job that fails may leave part of its changes behind, so then the whole transaction is
/// rolled back and the group's other jobs are run again, each in a savepoint, as is every
/// later job of the group: a failure costs one replay of its group, never more.
pub(super) struct Group {
    /// Each job, and whether its changes are in the open transaction.
    jobs: Vec<(Box<dyn WriteJob>, bool)>,
    /// A job has failed: the rest of the group runs in savepoints.
    guarded: bool,
}

impl Group {
    fn new() -> Self {
        Group {
            jobs: Vec::new(),
            guarded: false,
        }
    }

    fn len(&self) -> usize {
        self.jobs.len()
    }

    fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Runs `job` in the open transaction on `conn` and adds it to the group. `Err` if the
    /// transaction was lost and could not begin again: every job of the group has been
    /// told why, and the caller answers them (`take`) without committing.
    fn run(&mut self, conn: &mut Connection, mut job: Box<dyn WriteJob>) -> Result<(), ()> {
        let ok = if self.guarded {
            run_in_savepoint(conn, job.as_mut())
        } else {
            job.run(conn)
        };
        if ok {
            self.jobs.push((job, true));
            return Ok(());
        }
        self.jobs.push((job, false));
        // Unguarded, the failed job may have left changes; guarded, SQLite may still
        // have ended the transaction on its own (a full disk, say). Either way the others
        // are redone in a fresh transaction.
        if !self.guarded || conn.is_autocommit() {
            self.guarded = true;
            return self.redo(conn);
        }
        Ok(())
    }

    /// Rolls back the open transaction and runs the group's successful jobs again, each in
    /// a savepoint, in a new one.
    fn redo(&mut self, conn: &mut Connection) -> Result<(), ()> {
        if !conn.is_autocommit()
            && let Err(e) = conn.execute_batch("ROLLBACK")
        {
            return self.fail_all(&format!("cannot roll back a failed write: {e}"));
        }
        if let Err(e) = run_cached(conn, "BEGIN IMMEDIATE") {
            return self.fail_all(&format!("cannot begin a transaction: {e}"));
        }
        for (job, in_tx) in &mut self.jobs {
            if *in_tx {
                *in_tx = run_in_savepoint(conn, job.as_mut());
                if conn.is_autocommit() {
                    // Lost again: nothing of the group can be kept.
                    return self.fail_all("the transaction ended while redoing a group");
                }
            }
        }
        Ok(())
    }

    fn fail_all(&mut self, message: &str) -> Result<(), ()> {
        for (job, in_tx) in &mut self.jobs {
            if *in_tx {
                job.fail(message.to_string());
                *in_tx = false;
            }
        }
        Err(())
    }

    /// The group's jobs, for answering; leaves the group empty and unguarded.
    fn take(&mut self) -> Vec<Box<dyn WriteJob>> {
        self.guarded = false;
        self.jobs.drain(..).map(|(job, _)| job).collect()
    }
}

/// What the writer thread receives.
pub(super) enum WriterMsg {
    /// A job to run.
    Job(Box<dyn WriteJob>),
    /// The last handle on the database is gone: commit what is open and stop.
    Shutdown,
}

/// The writer's side of the job channel, shared by every clone of [`Db`](super::Db): when the last
/// clone goes, the writer is told to finish.
pub(super) struct Inbox(pub(super) mpsc::Sender<WriterMsg>);

impl Drop for Inbox {
    fn drop(&mut self) {
        let _ = self.0.send(WriterMsg::Shutdown);
    }
}

/// The writer thread: runs jobs in an open transaction (see [`Group`] for what happens
/// when one fails) and commits when none is waiting (or the group is full), then hands the
/// commit to the sync thread. While that sync runs, the jobs that arrive wait in the inbox
/// and the thread sleeps; when it ends, they run as one group and are committed at once.
/// A job cannot be answered before the next sync anyway, and one commit of many jobs
/// writes each shared page (the tables' and indexes' last leaves) once instead of once
/// per small group. Running them as they came instead (overlapping the sync) would wake
/// this thread once a job, which costs more than it saves (docs/performance.md).
pub(super) fn writer_loop(
    writer: Arc<Mutex<Connection>>,
    inbox: mpsc::Receiver<WriterMsg>,
    restart: Arc<AtomicBool>,
    synced: mpsc::Sender<Vec<Box<dyn WriteJob>>>,
    sync_done: mpsc::Receiver<()>,
) {
    // The open transaction: the writer's connection, locked from BEGIN to COMMIT, and the
    // jobs run in it.
    let mut open: Option<MutexGuard<'_, Connection>> = None;
    let mut group = Group::new();
    // A commit has gone to the sync thread and is not synced yet.
    let mut syncing = false;
    let mut stopping = false;
    while !stopping {
        let message = if syncing {
            // The jobs that arrive meanwhile wait in the inbox until the sync is done:
            // waking this thread for each one as it came would cost a context switch here and
            // a futex call in the sender, per job. An error means the sync thread is
            // gone; the next commit finds that out and answers its jobs.
            let _ = sync_done.recv();
            syncing = false;
            continue;
        } else if group.is_empty() {
            match inbox.recv() {
                Ok(message) => Some(message),
                Err(_) => Some(WriterMsg::Shutdown),
            }
        } else {
            inbox.try_recv().ok()
        };
        match message {
            Some(WriterMsg::Job(mut job)) => {
                let mut conn = match open.take() {
                    Some(conn) => conn,
                    None => {
                        let conn = lock(&writer);
                        if let Err(e) = run_cached(&conn, "BEGIN IMMEDIATE") {
                            job.fail(format!("cannot begin a transaction: {e}"));
                            job.answer(None);
                            continue;
                        }
                        conn
                    }
                };
                if group.run(&mut conn, job).is_err() {
                    // The transaction is gone and nothing of the group was kept: each job
                    // has been told why.
                    if !conn.is_autocommit() {
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                    for job in group.take() {
                        job.answer(None);
                    }
                    continue;
                }
                open = Some(conn);
                if group.len() < MAX_GROUP {
                    continue;
                }
            }
            Some(WriterMsg::Shutdown) => stopping = true,
            // Nothing waiting: commit.
            None => {}
        }
        let Some(conn) = open.take() else { continue };
        syncing = commit(&conn, group.take(), &synced, &restart);
    }
}

/// Commits the open transaction of a group's jobs `done` and hands them to the sync
/// thread, or answers them with the commit's error; then, when the checkpoint thread asks,
/// lets the WAL start over. Whether a sync is now running.
fn commit(
    conn: &Connection,
    done: Vec<Box<dyn WriteJob>>,
    synced: &mpsc::Sender<Vec<Box<dyn WriteJob>>>,
    restart: &AtomicBool,
) -> bool {
    // Metrics (docs/operations.md): the group's size and its commit's time.
    metrics::histogram!(mandate_storage::WRITER_GROUP).record(done.len() as f64);
    let committing = std::time::Instant::now();
    let committed = run_cached(conn, "COMMIT");
    metrics::histogram!("mandate_writer_commit_seconds").record(committing.elapsed().as_secs_f64());
    let syncing = match committed {
        // Committed: answered once the sync thread has made the WAL durable; the jobs that
        // arrive meanwhile wait for the next commit.
        Ok(()) => {
            if let Err(mpsc::SendError(done)) = synced.send(done) {
                for job in done {
                    job.answer(Some("the WAL sync thread has stopped".into()));
                }
            }
            true
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            let error = format!("commit failed: {e}");
            for job in done {
                job.answer(Some(error.clone()));
            }
            false
        }
    };
    if restart.swap(false, Ordering::AcqRel) {
        // Copy the few frames the checkpoint thread has not reached yet, so that the next
        // commit writes the WAL from its start again. The sync running meanwhile is what
        // the next commit waits for anyway.
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!("wal checkpoint (writer): {e}");
        }
    }
    syncing
}

/// Makes committed groups durable: takes every group committed so far, syncs the WAL
/// file once for all of them, tells the writer (`idle`) that it may commit the next group,
/// then answers their jobs. Telling the writer first lets it run and commit the jobs that
/// arrived during the sync while this thread answers these.
///
/// A sync that fails answers every job it covered with an error: their rows may or may
/// not be on disk, and the caller is told nothing was confirmed.
pub(super) fn sync_loop<A: Answer>(
    sync: impl Fn() -> std::io::Result<()>,
    groups: mpsc::Receiver<Vec<A>>,
    idle: impl Fn(),
) {
    while let Ok(first) = groups.recv() {
        let mut batch = vec![first];
        while let Ok(more) = groups.try_recv() {
            batch.push(more);
        }
        let syncing = std::time::Instant::now();
        let error = sync().err().map(|e| format!("syncing the WAL failed: {e}"));
        metrics::histogram!("mandate_writer_sync_seconds").record(syncing.elapsed().as_secs_f64());
        if let Some(error) = &error {
            tracing::error!("{error}");
        }
        // The writer may commit what it gathered meanwhile (the next sync covers it).
        idle();
        for report in batch.into_iter().flatten() {
            report.answer(error.clone());
        }
    }
}

/// The pause between two passive checkpoints while the WAL is not behind.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Keeps the WAL small: copies committed frames into the database file (PASSIVE: it never
/// blocks the writer), every [`CHECKPOINT_EVERY`] or at once while it is behind, until
/// `closed` closes (the last handle of the database dropped).
///
/// Under constant load a passive checkpoint never catches up with the writer, and SQLite
/// only starts the WAL over once every frame has been copied: the file would grow without
/// bound (gigabytes a minute), and each frame written past its end costs the kernel a
/// fresh block. So once the WAL holds more than [`RESTART_FRAMES`], this thread asks the
/// writer (through `restart`) to run one more passive checkpoint between two groups: it
/// copies only what arrived since this thread's last pass, and the next commit writes from
/// the start of the file again.
pub(super) fn checkpoint_loop(
    conn: &Connection,
    closed: &mpsc::Receiver<()>,
    restart: &AtomicBool,
) {
    let mut behind = false;
    loop {
        // Nothing is ever sent: the channel only closes, when the last handle is dropped.
        let wait = if behind {
            closed
                .try_recv()
                .map_err(|e| e == mpsc::TryRecvError::Disconnected)
        } else {
            closed
                .recv_timeout(CHECKPOINT_EVERY)
                .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected)
        };
        if wait == Err(true) {
            return;
        }
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        }) {
            Ok((log, copied)) => {
                behind = log - copied > RESTART_FRAMES / 4;
                if log > RESTART_FRAMES {
                    restart.store(true, Ordering::Release);
                }
            }
            Err(e) => {
                behind = false;
                tracing::warn!("wal checkpoint: {e}");
            }
        }
    }
}

/// Runs `f` in an `IMMEDIATE` transaction of its own on `conn` and commits it; rolls it
/// back if `f` fails (or panics: the transaction is rolled back as the stack unwinds).
pub(super) fn write_in<T, E, F>(conn: &mut Connection, f: F) -> Result<T, E>
where
    E: From<StorageError>,
    F: FnOnce(&mut Connection) -> Result<T, E>,
{
    let sql = |e: rusqlite::Error| E::from(crate::sqlite_error(e));
    run_cached(conn, "BEGIN IMMEDIATE").map_err(sql)?;
    let open = Open(conn);
    let value = f(&mut *open.0)?;
    run_cached(&*open.0, "COMMIT").map_err(sql)?;
    Ok(value)
}

/// A transaction begun by [`write_in`], rolled back when dropped still open (after its
/// commit the connection is back in autocommit, and there is nothing to do).
struct Open<'a>(&'a mut Connection);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit()
            && let Err(e) = self.0.execute_batch("ROLLBACK")
        {
            tracing::warn!("rolling back a failed write: {e}");
        }
    }
}
