//! Backup and restore with the operator commands of the real binary: a backup taken while
//! authorizations keep coming restores to a database holding every decision answered
//! before the backup began, and a server starts on it; a truncated or damaged backup is
//! refused, by `verify-backup` and by `restore`, with nothing written.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::process::{Client, Server, binary, free_port, onboard};

fn run(args: &[&str], paths: &[&Path]) -> Output {
    let mut command = Command::new(binary());
    command.args(args);
    for path in paths {
        command.arg(path);
    }
    command.output().unwrap()
}

fn backup(db: &Path, to: &Path) -> Output {
    Command::new(binary())
        .arg("backup")
        .arg("--db")
        .arg(db)
        .arg("--to")
        .arg(to)
        .output()
        .unwrap()
}

fn restore(from: &Path, db: &Path, force: bool) -> Output {
    let mut command = Command::new(binary());
    command
        .arg("restore")
        .arg("--from")
        .arg(from)
        .arg("--db")
        .arg(db);
    if force {
        command.arg("--force");
    }
    command.output().unwrap()
}

#[track_caller]
fn assert_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[track_caller]
fn assert_refused(out: &Output, says: &str) {
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: ") && stderr.contains(says),
        "{stderr}"
    );
}

fn authorization(amount: u32) -> String {
    format!(
        r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "software"}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_under_load_restores_every_decision_answered_before_it_began() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.db");
    let org = onboard(&db, "backed");
    // The organization key reads every decision back after the restore, faster than the
    // default rate allows.
    assert_ok(&run(
        &["set-rate", &org, "--per-second", "100000", "--db"],
        &[&db],
    ));
    let server = Server::start(&db, free_port(), &[]);
    let client = Client::new(&server.api);
    let mut agents = Vec::new();
    for name in ["one", "two", "three"] {
        let r = client
            .post(&org, "/v1/agents", &format!(r#"{{"name": "{name}"}}"#))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        agents.push(r.body["agent_key"].as_str().unwrap().to_owned());
        let mandate = crate::helpers::standard_mandate(name).replace("2026-12-31", "2099-12-31");
        let r = client.post(&org, "/v1/mandates", &mandate).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }

    // Authorizations keep coming, from each agent, until told to stop; every decision
    // answered 201 is recorded as it is answered.
    let answered = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for agent in agents {
        let (client, answered, stop) = (client.clone(), answered.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut amount = 1;
            while !stop.load(Ordering::Relaxed) {
                let r = client
                    .post(&agent, "/v1/authorizations", &authorization(amount % 7 + 1))
                    .await;
                amount += 1;
                if r.status == 201 {
                    let id = r.body["id"].as_str().unwrap().to_owned();
                    answered.lock().unwrap().push(id);
                }
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    // Every decision answered before the backup command starts.
    let before: Vec<String> = answered.lock().unwrap().clone();
    assert!(
        before.len() > 10,
        "the load made {} decisions",
        before.len()
    );
    let file = dir.path().join("snapshot.bak");
    let (db_arg, file_arg) = (db.clone(), file.clone());
    let out = tokio::task::spawn_blocking(move || backup(&db_arg, &file_arg))
        .await
        .unwrap();
    let said = assert_ok(&out);
    assert!(said.starts_with("backup written to "), "{said}");
    // The load went on during the backup and after it.
    let during = answered.lock().unwrap().len();
    // Wait (up to 10 s, for a loaded machine) until the load has been answered again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while answered.lock().unwrap().len() <= during && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    assert!(
        answered.lock().unwrap().len() > during,
        "the server kept serving"
    );
    // A database a server has open is not replaced, even with --force.
    assert_refused(&restore(&file, &db, true), "is in use");
    server.kill();

    let said = assert_ok(&run(&["verify-backup"], &[&file]));
    assert!(said.contains("is a sound backup"), "{said}");
    // An existing database is not replaced without --force.
    assert_refused(&restore(&file, &db, false), "pass --force");
    let restored = dir.path().join("restored.db");
    let said = assert_ok(&restore(&file, &restored, false));
    assert!(said.starts_with("restored "), "{said}");

    let server = Server::start(&restored, free_port(), &[]);
    let ready = reqwest::get(format!("{}/readyz", server.public))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let client = Client::new(&server.api);
    for id in &before {
        let r = client.get(&org, &format!("/v1/decisions/{id}")).await;
        assert_eq!(
            r.status, 200,
            "{id} is missing after the restore: {}",
            r.text
        );
        assert_eq!(r.body["id"].as_str(), Some(id.as_str()), "{}", r.text);
    }
    // Replacing a database with --force drops its WAL and brings the backup back.
    server.kill();
    assert_ok(&restore(&file, &db, true));
    let server = Server::start(&db, free_port(), &[]);
    let client = Client::new(&server.api);
    let r = client
        .get(&org, &format!("/v1/decisions/{}", before[0]))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn a_truncated_or_damaged_backup_is_refused_and_nothing_is_restored() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("small.db");
    onboard(&db, "small");
    let file = dir.path().join("whole.bak");
    assert_ok(&backup(&db, &file));
    let bytes = std::fs::read(&file).unwrap();

    let truncated = dir.path().join("truncated.bak");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let damaged = dir.path().join("damaged.bak");
    let mut flipped = bytes.clone();
    let middle = flipped.len() / 2;
    for byte in &mut flipped[middle..middle + 8] {
        *byte ^= 0xff;
    }
    std::fs::write(&damaged, &flipped).unwrap();
    let missing = dir.path().join("missing.bak");

    for (file, says) in [
        (&truncated, "it is truncated, or not a backup"),
        (&damaged, "it was damaged or changed since"),
        (&missing, "opening the backup"),
        (&db, "it is truncated, or not a backup"),
    ] {
        assert_refused(&run(&["verify-backup"], &[file]), says);
        let target = dir.path().join("target.db");
        assert_refused(&restore(file, &target, false), says);
        assert!(!target.exists());
        // Nothing is left beside it either.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.contains("target") || name.contains("restoring"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
    // The whole one still passes.
    assert_ok(&run(&["verify-backup"], &[&file]));
}

#[test]
fn a_resealed_backup_of_a_broken_database_is_refused_by_sqlites_integrity_check() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("small.db");
    onboard(&db, "small");
    let file = dir.path().join("whole.bak");
    assert_ok(&backup(&db, &file));
    // The database's bytes damaged where a b-tree page starts, then a trailer written for
    // them as `backup` writes it: the checksum matches, the database does not hold.
    let bytes = std::fs::read(&file).unwrap();
    let mut database = bytes[..bytes.len() - 56].to_vec();
    for page in 1..database.len() / 4096 {
        database[page * 4096..page * 4096 + 16].fill(0xff);
    }
    let mut resealed = database.clone();
    resealed.extend_from_slice(&Sha256::digest(&database));
    resealed.extend_from_slice(&(database.len() as u64).to_be_bytes());
    resealed.extend_from_slice(b"MANDATE-BACKUP-1");
    let broken = dir.path().join("broken.bak");
    std::fs::write(&broken, &resealed).unwrap();

    assert_refused(&run(&["verify-backup"], &[&broken]), "SQLite");
    let target = dir.path().join("target.db");
    assert_refused(&restore(&broken, &target, false), "SQLite");
    assert!(!target.exists());
}

/// With a key-encryption key a backup is authenticated under a key derived from it, which
/// the file does not carry: a backup edited by someone without the KEK (here a row changed
/// inside it) is refused by `verify-backup` and `restore`, whether its trailer was left as
/// it was or rewritten as an unkeyed one with the SHA-256 of the edited bytes.
#[test]
fn with_a_kek_an_edited_backup_is_refused_even_with_its_sha256_recomputed() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keyed.db");
    let kek = dir.path().join("kek");
    std::fs::write(&kek, "bWFuZGF0ZS10ZXN0cy1rZXktZW5jcnlwdGlvbi1rZXk=\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&kek, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let kek_args = ["--key-encryption-key-file", kek.to_str().unwrap()];
    let with_kek = |args: &[&str], paths: &[&Path]| {
        let mut command = Command::new(binary());
        command.args(args);
        for path in paths {
            command.arg(path);
        }
        command.args(kek_args).output().unwrap()
    };
    assert_ok(&with_kek(&["onboard", "--org", "keyed", "--db"], &[&db]));
    let file = dir.path().join("keyed.backup");
    assert_ok(&with_kek(
        &["backup", "--to"],
        &[&file, Path::new("--db"), &db],
    ));
    assert_ok(&with_kek(&["verify-backup"], &[&file]));
    assert_refused(
        &run(&["verify-backup"], &[&file]),
        "authenticated under a key-encryption key and none is given",
    );

    // The database's bytes, edited as someone with the file but not the KEK would.
    let bytes = std::fs::read(&file).unwrap();
    let len = bytes.len() - 56;
    let extracted = dir.path().join("extracted.db");
    std::fs::write(&extracted, &bytes[..len]).unwrap();
    {
        let conn = rusqlite::Connection::open(&extracted).unwrap();
        conn.execute("UPDATE orgs SET name = 'planted'", [])
            .unwrap();
    }
    let edited = std::fs::read(&extracted).unwrap();
    // Its keyed trailer kept: the code does not match.
    let kept = dir.path().join("kept.backup");
    let mut with_kept = edited.clone();
    with_kept.extend_from_slice(&bytes[len..len + 32]);
    with_kept.extend_from_slice(&(edited.len() as u64).to_be_bytes());
    with_kept.extend_from_slice(b"MANDATE-BACKUP-2");
    std::fs::write(&kept, &with_kept).unwrap();
    assert_refused(&with_kek(&["verify-backup"], &[&kept]), "does not match");
    // Rewritten as an unkeyed backup, its SHA-256 recomputed: not authenticated.
    let unkeyed = dir.path().join("unkeyed.backup");
    let mut with_sha = edited.clone();
    with_sha.extend_from_slice(&Sha256::digest(&edited));
    with_sha.extend_from_slice(&(edited.len() as u64).to_be_bytes());
    with_sha.extend_from_slice(b"MANDATE-BACKUP-1");
    std::fs::write(&unkeyed, &with_sha).unwrap();
    assert_refused(
        &with_kek(&["verify-backup"], &[&unkeyed]),
        "not authenticated",
    );
    let target = dir.path().join("target.db");
    for forged in [&kept, &unkeyed] {
        let out = with_kek(
            &["restore", "--from"],
            &[forged, Path::new("--db"), &target],
        );
        assert_refused(&out, "it cannot be restored");
        assert!(!target.exists());
    }
    // The genuine backup restores.
    assert_ok(&with_kek(
        &["restore", "--from"],
        &[&file, Path::new("--db"), &target],
    ));
}
