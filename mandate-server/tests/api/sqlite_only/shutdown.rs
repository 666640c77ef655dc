//! A stopped server has closed its SQLite file: an operator who copies, restores or opens
//! it next finds no connection of the server still open on it, and no late commit of the
//! server's lands in what they put in its place.

use std::path::{Path, PathBuf};

use crate::helpers::spawn_app;

/// The files of this process's open descriptors that are `db` or its WAL or shared memory.
fn open_files_of(db: &Path) -> Vec<PathBuf> {
    let names: Vec<PathBuf> = ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        })
        .collect();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| names.contains(target))
        .collect()
}

#[tokio::test]
async fn shutdown_returns_once_the_sqlite_file_is_closed() {
    let mut app = spawn_app().await;
    let agent = app.standard_agent(&app.org.sandbox, "closing").await;
    for _ in 0..4 {
        let r = app.authorize(&agent, "1", "software").await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let db = std::fs::canonicalize(&app.db_path).unwrap();
    assert!(
        !open_files_of(&db).is_empty(),
        "the running server has its file open"
    );
    app.running.take().unwrap().shutdown().await.unwrap();
    assert_eq!(open_files_of(&db), Vec::<PathBuf>::new());
}
