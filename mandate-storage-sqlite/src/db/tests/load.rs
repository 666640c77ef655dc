//! Tests of the writer under constant load and of the sync thread's answers.

use super::*;

/// An operator command is another process with its own writer on the same file. While
/// the server's writer works without pause (it lets go of the write lock only during
/// each sync), the command still gets its turns quickly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_writer_gets_in_while_the_server_writes_without_pause() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.db");
    let db = Db::open(&path).unwrap();
    create_table(&db, "CREATE TABLE ticks (n INTEGER NOT NULL)").await;
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..256)
        .map(|_| {
            let (db, stop) = (db.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    db.write(|c| -> Result<(), StorageError> {
                        c.execute("INSERT INTO ticks (n) VALUES (1)", [])
                            .map_err(crate::sqlite_error)?;
                        Ok(())
                    })
                    .await
                    .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let other_path = path.clone();
    let other = tokio::task::spawn_blocking(move || {
        let other = Db::open(&other_path).unwrap();
        let started = std::time::Instant::now();
        let result = (0..5).try_for_each(|_| {
            other.write_blocking(|tx| -> Result<(), StorageError> {
                tx.execute("INSERT INTO ticks (n) VALUES (-1)", [])
                    .map_err(crate::sqlite_error)?;
                Ok(())
            })
        });
        (result, started.elapsed())
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    let mut written = 0;
    for w in writers {
        written += w.await.unwrap();
    }
    let (result, waited) = other;
    assert!(result.is_ok(), "the other writer failed: {result:?}");
    // Five turns: SQLite's default busy handler, which sleeps between retries, would not
    // hand them over this fast.
    assert!(
        waited < std::time::Duration::from_secs(1),
        "the other writer waited {waited:?} for five turns"
    );
    assert!(written > 100, "the server's writer did not keep writing");
    let operator_rows: i64 = db
        .read(|c| -> Result<i64, StorageError> {
            c.query_row("SELECT COUNT(*) FROM ticks WHERE n = -1", [], |r| r.get(0))
                .map_err(crate::sqlite_error)
        })
        .await
        .unwrap();
    assert_eq!(operator_rows, 5);
}

/// Under writes that never pause, the WAL still starts over: its file stays a few
/// tens of MiB however much is written (before, it grew by everything written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_small_under_constant_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let db = Db::open(&path).unwrap();
    create_table(&db, "CREATE TABLE blobs (b BLOB NOT NULL)").await;
    let wal = dir.path().join("w.db-wal");
    let largest = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (largest, done, wal) = (largest.clone(), done.clone(), wal.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                let len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
                largest.fetch_max(len, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    // 200 MiB in 16 KiB rows, from 16 writers that never wait for each other.
    const ROWS_PER_WRITER: usize = 800;
    let writers = (0..16).map(|_| {
        let db = db.clone();
        tokio::spawn(async move {
            for _ in 0..ROWS_PER_WRITER {
                db.write(|c| -> Result<(), StorageError> {
                    c.prepare_cached("INSERT INTO blobs (b) VALUES (zeroblob(16384))")
                        .map_err(crate::sqlite_error)?
                        .execute([])
                        .map_err(crate::sqlite_error)?;
                    Ok(())
                })
                .await
                .unwrap();
            }
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.unwrap();
    }
    done.store(true, Ordering::Release);
    sampler.join().unwrap();
    let rows: i64 = db
        .read(|c| -> Result<i64, StorageError> {
            c.query_row("SELECT COUNT(*) FROM blobs", [], |r| r.get(0))
                .map_err(crate::sqlite_error)
        })
        .await
        .unwrap();
    assert_eq!(rows, 16 * ROWS_PER_WRITER as i64);
    let largest = largest.load(Ordering::Relaxed);
    // Without the restart the WAL holds everything written. The bound leaves a wide
    // margin over the 16 MiB restart mark for a checkpoint thread starved of a core,
    // as in a debug build running beside this binary's other tests.
    assert!(
        largest < 128 * 1024 * 1024,
        "the WAL reached {} MiB while 200 MiB were written",
        largest / (1024 * 1024)
    );
}

/// Jobs are answered only after the sync that covers them, all groups waiting at once
/// share one sync, and a failed sync is an error for every job it covered.
/// An answer the sync thread gives, as a closure.
type Done = Box<dyn FnOnce(Option<String>) + Send>;

impl Answer for Done {
    fn answer(self, error: Option<String>) {
        self(error);
    }
}

#[test]
fn jobs_are_answered_after_their_sync_and_learn_when_it_fails() {
    use std::sync::atomic::AtomicU64;
    let syncs = Arc::new(AtomicU64::new(0));
    // (syncs done when answered, error)
    type Answers = Arc<Mutex<Vec<(u64, Option<String>)>>>;
    let answers: Answers = Arc::default();
    let (groups, to_sync) = mpsc::channel::<Vec<Done>>();
    let job = |answers: &Answers, syncs: &Arc<AtomicU64>| {
        let (answers, syncs) = (answers.clone(), syncs.clone());
        Box::new(move |error: Option<String>| {
            answers
                .lock()
                .unwrap()
                .push((syncs.load(Ordering::SeqCst), error));
        }) as Done
    };
    // Two groups queued before the thread looks: one sync covers both. It fails.
    groups
        .send(vec![job(&answers, &syncs), job(&answers, &syncs)])
        .unwrap();
    groups.send(vec![job(&answers, &syncs)]).unwrap();
    let failing = syncs.clone();
    let first = std::thread::spawn(move || {
        sync_loop(
            || {
                failing.fetch_add(1, Ordering::SeqCst);
                Err(std::io::Error::other("disk gone"))
            },
            to_sync,
            || {},
        )
    });
    drop(groups);
    first.join().unwrap();
    let got = answers.lock().unwrap().clone();
    assert_eq!(got.len(), 3);
    for (syncs_seen, error) in &got {
        assert_eq!(*syncs_seen, 1, "answered before its sync");
        assert_eq!(error.as_deref(), Some("syncing the WAL failed: disk gone"));
    }
    assert_eq!(syncs.load(Ordering::SeqCst), 1, "one sync for both groups");

    // A sync that succeeds answers without an error, after the sync.
    answers.lock().unwrap().clear();
    let idle = AtomicU64::new(0);
    let (groups, to_sync) = mpsc::channel::<Vec<Done>>();
    groups.send(vec![job(&answers, &syncs)]).unwrap();
    drop(groups);
    let counting = syncs.clone();
    sync_loop(
        || {
            counting.fetch_add(1, Ordering::SeqCst);
            Ok(())
        },
        to_sync,
        || {
            idle.fetch_add(1, Ordering::SeqCst);
        },
    );
    assert_eq!(answers.lock().unwrap().clone(), vec![(2, None)]);
    assert_eq!(
        idle.load(Ordering::SeqCst),
        1,
        "the writer hears of each sync"
    );
}
