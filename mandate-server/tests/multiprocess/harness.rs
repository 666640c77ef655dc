//! The throwaway-cluster harness itself (mandate-test-kit/src/postgres.rs): a database per test on
//! one cluster, and the cluster gone with its directory when the test process ends, however
//! it ends.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::postgres::{self, Durability};

/// Set in the child process of [`the_cluster_goes_when_the_test_process_dies`].
const CHILD: &str = "MANDATE_TEST_HARNESS_CHILD";

#[tokio::test]
async fn each_test_gets_a_database_of_its_own_on_one_durable_cluster() {
    let Some(first) = postgres::database(Durability::Durable).await else {
        return;
    };
    let second = postgres::database(Durability::Durable).await.unwrap();
    assert_ne!(first.name, second.name);
    let a = first.connect().await;
    let b = second.connect().await;
    a.batch_execute("CREATE TABLE only_here (x int); INSERT INTO only_here VALUES (7)")
        .await
        .unwrap();
    let seen: i32 = a
        .query_one("SELECT x FROM only_here", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(seen, 7);
    let elsewhere = b
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(elsewhere, 0, "databases of two tests are apart");
    // This target's cluster keeps PostgreSQL's durability (the kill tests rely on commits).
    let fsync: String = a.query_one("SHOW fsync", &[]).await.unwrap().get(0);
    let synchronous_commit: String = a
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    if postgres::local_cluster().is_some() {
        assert_eq!(fsync, "on");
    }
    assert_eq!(synchronous_commit, "on");
    // A database is dropped with its connections when the test is done with it.
    let name = first.name.clone();
    drop(first);
    let left = b
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(left, 0);
}

/// Run as a child process by the tests below: starts the cluster, says where it is, then
/// dies the way it is told (`abort`, or waits to be killed with SIGKILL); or, told
/// `absent`, asks twice for a database where there is no PostgreSQL.
#[tokio::test]
async fn child_that_starts_a_cluster_and_dies() {
    let Ok(how) = std::env::var(CHILD) else {
        return;
    };
    if how == "absent" {
        assert!(postgres::database(Durability::Durable).await.is_none());
        assert!(postgres::database(Durability::Durable).await.is_none());
        return;
    }
    let _db = postgres::database(Durability::Durable).await.unwrap();
    let (dir, port) = postgres::local_cluster().unwrap();
    println!("cluster: {port} {}", dir.display());
    if how == "abort" {
        std::process::abort();
    }
    tokio::time::sleep(Duration::from_secs(120)).await;
}

/// The test process dies without running any destructor (abort, SIGKILL): its cluster
/// stops and its directory is removed all the same.
#[tokio::test]
async fn the_cluster_goes_when_the_test_process_dies() {
    if postgres::available(Durability::Durable).is_err() || postgres::local_cluster().is_none() {
        // No PostgreSQL, or one given by MANDATE_TEST_POSTGRES_URL: nothing is started.
        return;
    }
    for how in ["abort", "kill"] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "harness::child_that_starts_a_cluster_and_dies",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD, how)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut where_ = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest writes "test NAME ... " before the child's own output, on one line.
            if let Some((_, rest)) = line.split_once("cluster: ") {
                let (port, dir) = rest.split_once(' ').unwrap();
                where_ = Some((port.parse::<u16>().unwrap(), PathBuf::from(dir)));
                break;
            }
        }
        let (port, dir) = where_.expect("the child started a cluster");
        assert!(dir.join("data").is_dir(), "{}", dir.display());
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        if how == "kill" {
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        assert!(!status.success(), "{how}: {status}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while dir.exists() || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(
                Instant::now() < deadline,
                "{how}: the cluster of a dead test process is still there after 20 s ({})",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Without PostgreSQL a test passes and says, once, that PostgreSQL tests were skipped and
/// how to run them; with MANDATE_REQUIRE_POSTGRES=1 it fails saying why.
#[test]
fn without_postgresql_tests_say_they_were_skipped_unless_it_is_required() {
    let run = |require: bool| {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                "harness::child_that_starts_a_cluster_and_dies",
                "--test-threads",
                "1",
            ])
            .env(CHILD, "absent")
            .env("MANDATE_TEST_POSTGRES_BIN", "/nonexistent/postgresql/bin")
            .env_remove("MANDATE_TEST_POSTGRES_URL")
            .env_remove("MANDATE_REQUIRE_POSTGRES");
        if require {
            command.env("MANDATE_REQUIRE_POSTGRES", "1");
        }
        let out = command.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (passed, text) = run(false);
    assert!(passed, "{text}");
    assert_eq!(
        text.matches("PostgreSQL tests skipped: ").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("install postgresql or set MANDATE_TEST_POSTGRES_URL"),
        "{text}"
    );
    let (passed, text) = run(true);
    assert!(!passed, "{text}");
    assert!(
        text.contains("PostgreSQL is required (MANDATE_REQUIRE_POSTGRES=1)"),
        "{text}"
    );
}
