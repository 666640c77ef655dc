//! `/readyz` while SQLite's file cannot grow (the process's file-size limit).

use std::process::Command;

use serde_json::json;

use crate::health::probe;
use crate::process::{Server, free_port, onboard};

/// Sets the process's soft file-size limit (see `disk.rs`): writes past it fail as on a
/// full disk.
fn set_file_size_limit(pid: u32, limit: &str) {
    let out = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--fsize={limit}:unlimited"))
        .output()
        .expect("prlimit (util-linux) is needed for the readiness test");
    assert!(
        out.status.success(),
        "prlimit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn readyz_is_503_while_storage_refuses_writes_and_200_once_it_takes_them_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ready.db");
    onboard(&db, "ready");
    let server = Server::start(&db, free_port(), &[]);
    let readyz = format!("{}/readyz", server.public);
    let (status, body, _) = probe(&readyz).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));

    set_file_size_limit(server.pid(), "4096");
    let (status, body, text) = probe(&readyz).await;
    assert_eq!(status, 503, "{text}");
    assert_eq!(
        body,
        json!({"status": "unavailable", "reason": "storage cannot be written"})
    );
    // The reason names no file.
    assert!(!text.contains(dir.path().to_str().unwrap()), "{text}");
    // The process still serves.
    let (status, _, _) = probe(&format!("{}/healthz", server.public)).await;
    assert_eq!(status, 200);

    set_file_size_limit(server.pid(), "unlimited");
    let (status, body, text) = probe(&readyz).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})), "{text}");
}
