//! Tests of the writer, the sync thread and the checkpoints, through [`Db`].

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::decisions;
use crate::writer::{Answer, sync_loop};
use crate::{SqliteTx, ready};
use mandate_storage::engine::Tx;
use mandate_storage::model::Env;
use mandate_storage::standard::CALLER as CALLER_SQL;
use mandate_storage::statements::KeySql;

/// A statement with a `LIMIT ?` runs again without being parsed again, whatever the
/// limit (lists and agent-state rebuilds prepare theirs once per connection).
#[test]
fn statements_are_not_prepared_again_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("qpsg.db")).unwrap();
    let reprepared = db
        .write_blocking(|tx| -> Result<i32, StorageError> {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT seq FROM decisions WHERE scope = ?1 ORDER BY seq DESC LIMIT ?2",
                )
                .map_err(crate::sqlite_error)?;
            for limit in 1..=5 {
                let rows: Vec<i64> = stmt
                    .query_map(rusqlite::params![1, limit], |r| r.get(0))
                    .map_err(crate::sqlite_error)?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(crate::sqlite_error)?;
                assert!(rows.is_empty());
            }
            Ok(stmt.get_status(rusqlite::StatementStatus::RePrepare))
        })
        .unwrap();
    assert_eq!(reprepared, 0);
}

/// The lookups every agent's and every key's first request makes (loading its state,
/// filling the key cache) reuse their prepared statements: preparing costs more than
/// the query, and the first pass over the agents runs them once per agent.
#[tokio::test]
async fn first_use_lookups_keep_their_statements_prepared() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("cached.db")).unwrap();
    let runs = db
        .read(|conn| -> Result<Vec<i32>, StorageError> {
            for _ in 0..3 {
                let hash = [7u8; 32];
                let mut tx = SqliteTx::new(conn);
                let keys = ready(tx.query(KeySql::Caller.into(), &[hash[..].into()], |_| Ok(())))?;
                assert!(keys.is_empty());
                assert!(decisions::current(conn, "org_1", Env::Sandbox, "agt_1")?.is_none());
            }
            // The cache hands back the statement the calls ran, with their run count.
            let run = |sql: &str| -> Result<i32, StorageError> {
                Ok(conn
                    .prepare_cached(sql)
                    .map_err(crate::sqlite_error)?
                    .get_status(rusqlite::StatementStatus::Run))
            };
            Ok(vec![run(CALLER_SQL)?, run(&decisions::current_sql())?])
        })
        .await
        .unwrap();
    assert_eq!(runs, vec![3, 3]);
}

/// Creates a scratch table through the writer.
async fn create_table(db: &Db, sql: &'static str) {
    db.write(move |c| -> Result<(), StorageError> {
        c.execute_batch(sql).map_err(crate::sqlite_error)?;
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_rolls_back_alone_within_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("t.db")).unwrap();
    create_table(&db, "CREATE TABLE t (n INTEGER)").await;
    let writes = (0..200).map(|n| {
        let db = db.clone();
        tokio::spawn(async move {
            db.write(move |c| -> Result<i64, StorageError> {
                c.execute("INSERT INTO t (n) VALUES (?1)", [n])
                    .map_err(crate::sqlite_error)?;
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
            c.query_row("SELECT COUNT(*), COALESCE(SUM(n % 2), 0) FROM t", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(crate::sqlite_error)
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
            c.query_row("SELECT 41 + 1", [], |r| r.get(0))
                .map_err(crate::sqlite_error)
        })
        .await
        .unwrap();
    assert_eq!(fine, 42);
}

/// While a sync runs, the jobs that arrive wait in the writer's inbox (not run, so not
/// visible to readers) and the next commit takes them all at once; each is answered
/// only after the sync that covers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_arrive_during_a_sync_share_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let slow = Arc::new(AtomicBool::new(false));
    let syncs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let db = {
        let (slow, syncs) = (slow.clone(), syncs.clone());
        Db::open_syncing_with(&path, true, move |file| {
            if slow.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(400));
            }
            syncs.fetch_add(1, Ordering::SeqCst);
            file.sync_data()
        })
        .unwrap()
    };
    let insert = |db: &Db, n: i64| {
        let db = db.clone();
        tokio::spawn(async move {
            db.write(move |c| -> Result<(), StorageError> {
                c.execute("INSERT INTO t (n) VALUES (?1)", [n])
                    .map_err(crate::sqlite_error)?;
                Ok(())
            })
            .await
            .unwrap();
        })
    };
    create_table(&db, "CREATE TABLE t (n INTEGER NOT NULL)").await;
    let count = |db: &Db| {
        let db = db.clone();
        async move {
            db.read(|c| -> Result<i64, StorageError> {
                c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
                    .map_err(crate::sqlite_error)
            })
            .await
            .unwrap()
        }
    };
    slow.store(true, Ordering::Release);
    let first = insert(&db, 0);
    // The first job is committed and its (slow) sync under way.
    while count(&db).await == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let before = syncs.load(Ordering::SeqCst);
    let rest: Vec<_> = (1..=20).map(|n| insert(&db, n)).collect();
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert_eq!(
        count(&db).await,
        1,
        "jobs that arrived during the sync were committed before it ended"
    );
    assert!(!first.is_finished(), "answered before its sync ended");
    first.await.unwrap();
    for job in rest {
        job.await.unwrap();
    }
    assert_eq!(count(&db).await, 21);
    // The first job's sync (still running when `before` was read) and one for all
    // twenty.
    assert_eq!(
        syncs.load(Ordering::SeqCst) - before,
        2,
        "the twenty jobs took more than one commit and sync"
    );
}

/// A database whose WAL syncs take 300 ms while the flag is set, with a table `t` of
/// names: a slow sync holds the jobs sent meanwhile in the writer's inbox, so that they
/// run as one group.
async fn names_db_with_slow_sync(path: &Path) -> (Db, Arc<AtomicBool>) {
    let slow = Arc::new(AtomicBool::new(false));
    let db = {
        let slow = slow.clone();
        Db::open_syncing_with(path, true, move |file| {
            if slow.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            file.sync_data()
        })
        .unwrap()
    };
    create_table(&db, "CREATE TABLE t (name TEXT NOT NULL)").await;
    (db, slow)
}

/// `write` polled once: by then its job is in the writer's inbox, so jobs sent one
/// after the other reach the writer in that order. When nothing slows the writer it
/// may already have answered by the end of that first poll; the answer is kept.
fn sent<F: Future>(write: F) -> Sent<F> {
    let mut write = Box::pin(write);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match write.as_mut().poll(&mut cx) {
        std::task::Poll::Pending => Sent::Waiting(write),
        std::task::Poll::Ready(answer) => Sent::Answered(Some(answer)),
    }
}

/// A write sent by [`sent`]: still waiting for its answer, or answered already.
enum Sent<F: Future> {
    Waiting(std::pin::Pin<Box<F>>),
    Answered(Option<F::Output>),
}

impl<F: Future> Future for Sent<F>
where
    F::Output: Unpin,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        match self.get_mut() {
            Sent::Waiting(write) => write.as_mut().poll(cx),
            Sent::Answered(answer) => {
                std::task::Poll::Ready(answer.take().expect("a write is awaited once"))
            }
        }
    }
}

/// The names in `t`, in the order they were inserted.
async fn names(db: &Db) -> Vec<String> {
    db.read(|c| -> Result<Vec<String>, StorageError> {
        let mut stmt = c
            .prepare("SELECT name FROM t ORDER BY rowid")
            .map_err(crate::sqlite_error)?;
        let rows = stmt
            .query_map([], |r| r.get(0))
            .map_err(crate::sqlite_error)?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(crate::sqlite_error)
    })
    .await
    .unwrap()
}

/// Jobs run without savepoints; when one fails, its group's transaction is rolled back
/// and the jobs before it run again, each in a savepoint, as do the jobs after it in
/// the same group. A job that ends the transaction itself has the group redone again.
/// Each caller gets its job's last result, and only what succeeded is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_has_its_group_redone_and_only_the_others_are_kept() {
    use std::sync::atomic::AtomicUsize;
    let dir = tempfile::tempdir().unwrap();
    let (db, slow) = names_db_with_slow_sync(&dir.path().join("redo.db")).await;
    // What a job does after inserting its name.
    #[derive(Clone, Copy)]
    enum Then {
        Succeed,
        Fail,
        EndTheTransactionAndFail,
    }
    let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..7).map(|_| AtomicUsize::new(0)).collect());
    let job = |n: usize, name: &'static str, then: Then| {
        let runs = runs.clone();
        sent(db.write(move |c| -> Result<usize, StorageError> {
            let run = runs[n].fetch_add(1, Ordering::SeqCst) + 1;
            c.execute("INSERT INTO t (name) VALUES (?1)", [name])
                .map_err(crate::sqlite_error)?;
            match then {
                Then::Succeed => Ok(run),
                Then::Fail => Err(StorageError::Corrupt(format!("{name} fails"))),
                Then::EndTheTransactionAndFail => {
                    c.execute_batch("ROLLBACK").map_err(crate::sqlite_error)?;
                    Err(StorageError::Corrupt(format!("{name} fails")))
                }
            }
        }))
    };
    slow.store(true, Ordering::Release);
    // Job 0 is committed alone; while its slow sync runs, the next jobs wait in the
    // inbox and then run as one group.
    let j0 = job(0, "zero", Then::Succeed);
    while runs[0].load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let plan = [
        ("a", Then::Succeed),
        ("b", Then::Fail),
        ("c", Then::Succeed),
        ("d", Then::Fail),
        ("e", Then::EndTheTransactionAndFail),
    ];
    let handles: Vec<_> = plan
        .into_iter()
        .enumerate()
        .map(|(i, (name, then))| job(i + 1, name, then))
        .collect();
    assert_eq!(
        (1..6)
            .map(|n| runs[n].load(Ordering::SeqCst))
            .sum::<usize>(),
        0,
        "a job ran while the sync before it was under way"
    );
    assert_eq!(j0.await.unwrap(), 1);
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.map_err(|e| e.to_string()));
    }
    let count = |n: usize| runs[n].load(Ordering::SeqCst);
    // a: first run, again after b failed, again after e ended the transaction.
    assert_eq!(results[0], Ok(3));
    assert_eq!(count(1), 3);
    assert_eq!(results[1], Err("corrupt row: b fails".into()));
    assert_eq!(count(2), 1, "a failed job is not run again");
    // c ran in a savepoint after b's failure, and again after e's.
    assert_eq!(results[2], Ok(2));
    assert_eq!(count(3), 2);
    // d failed in its savepoint: nothing else was redone for it.
    assert_eq!(results[3], Err("corrupt row: d fails".into()));
    assert_eq!(count(4), 1);
    assert!(results[4].is_err(), "{:?}", results[4]);
    assert_eq!(count(5), 1);
    let names = names(&db).await;
    assert_eq!(names, ["zero", "a", "c"]);

    // The next group runs without savepoints again: a failure redoes the job before it.
    slow.store(false, Ordering::Release);
    let f = job(6, "f", Then::Succeed);
    assert_eq!(f.await.unwrap(), 1);
}

/// When the redo itself loses the transaction (a job that ends it on its second run),
/// nothing of the group can be kept: every job is answered with an error, none is
/// committed, and the writer carries on with the next group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_redo_loses_the_transaction_is_answered_with_errors() {
    use std::sync::atomic::AtomicUsize;
    let dir = tempfile::tempdir().unwrap();
    let (db, slow) = names_db_with_slow_sync(&dir.path().join("lost.db")).await;
    slow.store(true, Ordering::Release);
    // A first job, committed alone: its slow sync gathers the next two into a group.
    let first = sent(db.write(|c| -> Result<(), StorageError> {
        c.execute("INSERT INTO t (name) VALUES ('first')", [])
            .map_err(crate::sqlite_error)?;
        Ok(())
    }));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // `x` succeeds, then ends the transaction when it is redone.
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let x = sent(db.write(move |c| -> Result<(), StorageError> {
        c.execute("INSERT INTO t (name) VALUES ('x')", [])
            .map_err(crate::sqlite_error)?;
        if counted.fetch_add(1, Ordering::SeqCst) > 0 {
            c.execute_batch("ROLLBACK").map_err(crate::sqlite_error)?;
        }
        Ok(())
    }));
    // `z` succeeds each time it runs.
    let z = sent(db.write(|c| -> Result<(), StorageError> {
        c.execute("INSERT INTO t (name) VALUES ('z')", [])
            .map_err(crate::sqlite_error)?;
        Ok(())
    }));
    // `y` fails, so the group is redone.
    let y = sent(db.write(|c| -> Result<(), StorageError> {
        c.execute("INSERT INTO t (name) VALUES ('y')", [])
            .map_err(crate::sqlite_error)?;
        Err(StorageError::Corrupt("y fails".into()))
    }));
    first.await.unwrap();
    let x = x.await.map_err(|e| e.to_string());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "x ran, then again in the redo"
    );
    // x's own savepoint went with the transaction.
    assert!(x.as_ref().is_err_and(|e| e.contains("savepoint")), "{x:?}");
    // z, not yet redone when x ended the transaction, is not committed either.
    let z = z.await.map_err(|e| e.to_string());
    assert!(
        z.as_ref()
            .is_err_and(|e| e.contains("the transaction ended while redoing a group")),
        "{z:?}"
    );
    assert_eq!(
        y.await.map_err(|e| e.to_string()),
        Err("corrupt row: y fails".into())
    );
    // The writer carries on.
    slow.store(false, Ordering::Release);
    db.write(|c| -> Result<(), StorageError> {
        c.execute("INSERT INTO t (name) VALUES ('after')", [])
            .map_err(crate::sqlite_error)?;
        Ok(())
    })
    .await
    .unwrap();
    let names = names(&db).await;
    assert_eq!(names, ["first", "after"]);
}

/// The writer under constant load: other writers get in, the WAL starts over, and answers
/// wait for their sync.
mod load;

/// `close` answers false while another handle is held past `within`, and true once the
/// last is dropped and the threads have ended: a job sent before, whose caller stopped
/// waiting (as an aborted task does), is committed by then.
#[test]
fn close_waits_for_the_last_handle_and_the_jobs_sent_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("close.db");
    let db = Db::open(&path).unwrap();
    db.write_blocking(|conn| {
        conn.execute_batch("CREATE TABLE t (n INTEGER)")
            .map_err(crate::sqlite_error)
    })
    .unwrap();
    let held = db.clone();
    assert!(!db.close(std::time::Duration::from_millis(50)));
    {
        let mut job = std::pin::pin!(held.write(|conn| {
            conn.execute("INSERT INTO t VALUES (1)", [])
                .map_err(crate::sqlite_error)
        }));
        // Polled once, the job is in the writer's inbox; then its caller goes away.
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = job.as_mut().poll(&mut context);
    }
    assert!(held.close(std::time::Duration::from_secs(10)));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
}
