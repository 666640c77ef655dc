//! The admin host (`--admin-addr`) has the API host's connection protections, and the
//! listeners share the process's file descriptors (issue #40, item 5): silent connections
//! to the admin host, more than the process may open files, leave the API, the public host
//! and `/metrics` answering.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::{binary, free_port, onboard};

/// Kills the server when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn silent_connections_to_the_admin_host_never_starve_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("admin.db");
    let org = onboard(&db, "acme");
    let admin_port = free_port();
    // 400 open files at most: 20,000 silent connections on a default limit, in small.
    let mut child = Command::new("sh")
        .args([
            "-c",
            "ulimit -n 400 && exec \"$@\"",
            "sh",
            binary(),
            "serve",
        ])
        .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{admin_port}"))
        .arg("--db")
        .arg(&db)
        .env_remove("MANDATE_KEY_ENCRYPTION_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Killed(child);
    let mut api = String::new();
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(url) = line.trim().strip_prefix("api:") {
            api = url.trim().to_owned();
        }
        if line.contains("admin:") {
            break;
        }
    }
    assert!(api.starts_with("http://"), "the server did not start");
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let metrics = format!("http://127.0.0.1:{admin_port}/metrics");
    assert_eq!(client.get(&metrics).send().await.unwrap().status(), 200);

    // Twice the process's open files in silent connections to the admin host.
    let mut silent = Vec::new();
    for _ in 0..800 {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", admin_port)).await {
            silent.push(s);
        }
    }
    // Let the server accept them all (and shed what is over the admin host's cap).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answered = client
        .get(format!("{api}/v1/decisions"))
        .header("authorization", format!("Bearer {org}"))
        .send()
        .await;
    let status = answered.map(|r| r.status().as_u16());
    assert!(
        matches!(status, Ok(200)),
        "the API does not answer while the admin host is flooded: {status:?}"
    );
    let scraped = client
        .get(&metrics)
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(
        matches!(scraped, Ok(200)),
        "the admin host does not answer a scrape while flooded: {scraped:?}"
    );
    drop(silent);
    drop(server);
}
