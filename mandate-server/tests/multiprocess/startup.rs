//! Starting many processes on one database, and the operator commands beside them: started
//! at once on an empty database they all come up and the schema is migrated once (`serve
//! --no-migrate` refuses an empty one, `migrate` then has nothing to do); the operator
//! commands work on the URL while processes serve.

use crate::deploy::{Http, mandate};
use crate::deployment;

/// Three processes started at the same moment on an empty database: each comes up (one
/// migrates, the others wait or find it done), each migration is recorded once, and all
/// three serve the organization onboarded afterwards.
#[tokio::test]
async fn three_processes_started_at_once_on_an_empty_database_migrate_it_once() {
    let deployment = deployment!();
    // Told not to migrate, a process refuses the empty database and says what to run.
    let refused = std::process::Command::new(crate::deploy::binary())
        .args(["serve", "--no-migrate", "--db", &deployment.db.url])
        .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
        .env("MANDATE_KEY_ENCRYPTION_KEY", &deployment.kek)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("migrate"), "{said}");
    let procs = deployment.serve_n(3);
    let db = deployment.db.connect().await;
    let versions: Vec<i64> = db
        .query(
            "SELECT version::BIGINT FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!versions.is_empty());
    // The numbers of the migration files (they may leave gaps), each recorded once.
    let mut expected: Vec<i64> = std::fs::read_dir(format!(
        "{}/../mandate-storage-postgres/migrations",
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
    ))
    .unwrap()
    .filter_map(|entry| {
        let name = entry.unwrap().file_name().into_string().unwrap();
        name.split('_').next()?.parse().ok()
    })
    .collect();
    expected.sort_unstable();
    assert_eq!(versions, expected, "each migration recorded once");
    // `migrate` on the migrated database has nothing to do, and says so.
    let out = deployment.operator(&["migrate"]);
    assert!(out.contains("(this server's)"), "{out}");

    let org = deployment.onboard("acme");
    let http = Http::default();
    for (n, p) in procs.iter().enumerate() {
        let name = format!("start{n}");
        let key = http.agent(&p.api, &org.sandbox, &name).await;
        http.mandate(&p.api, &org.sandbox, &mandate(&name, "100", "1000", None))
            .await;
        let r = http
            .authorize(&procs[(n + 1) % 3].api, &key, "5", "software")
            .await;
        assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    }
}

/// The operator commands on a PostgreSQL URL while two processes serve: a key issued and
/// listed, its rate set and the key revoked by fingerprint (as listed), a policy version
/// stamped on the next decision of every process within a second; the SQLite-file commands
/// (backup, restore) refuse the URL and name PostgreSQL's own tools.
#[tokio::test]
async fn the_operator_commands_work_on_postgresql_while_processes_serve() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let procs = deployment.serve_n(2);
    let http = Http::default();
    let issued = deployment.operator(&["issue-key", "--org", "acme", "--env", "live"]);
    let key = issued.lines().next().unwrap().trim().to_owned();
    assert!(key.starts_with("sk_live_"), "{issued}");
    let fingerprint = issued
        .split_whitespace()
        .find(|w| w.starts_with("key_"))
        .unwrap()
        .trim_end_matches(';')
        .to_owned();
    let listed = deployment.operator(&["list-keys", "--org", "acme"]);
    let line = |listed: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(&fingerprint))
            .unwrap_or_else(|| panic!("{fingerprint} not in {listed}"))
            .to_owned()
    };
    assert!(
        line(&listed).contains("live") && line(&listed).contains("active"),
        "{listed}"
    );
    assert_eq!(listed.lines().count(), 3, "{listed}");
    deployment.operator(&["set-rate", &fingerprint, "--per-second", "7"]);
    assert!(line(&deployment.operator(&["list-keys", "--org", "acme"])).contains("7/s"));
    deployment.operator(&["revoke-key", &fingerprint]);
    assert!(line(&deployment.operator(&["list-keys", "--org", "acme"])).contains("revoked"));

    let name = "stamped";
    let agent = http.agent(&procs[0].api, &org.sandbox, name).await;
    http.mandate(
        &procs[0].api,
        &org.sandbox,
        &mandate(name, "100", "100000", None),
    )
    .await;
    deployment.operator(&[
        "set-policy-version",
        "--org",
        "acme",
        "--version",
        "pol_2027-01-01.7",
    ]);
    let since = std::time::Instant::now();
    for p in &procs {
        loop {
            let sent = since.elapsed();
            let r = http.authorize(&p.api, &agent, "1", "software").await;
            if r.body["policy_version"] == "pol_2027-01-01.7" {
                break;
            }
            assert!(
                sent <= std::time::Duration::from_secs(1),
                "{} still stamps {} a second after the command",
                p.api,
                r.body["policy_version"]
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    let to = deployment.dir.path().join("backup.db");
    let refused = deployment.operator_fails(&["backup", "--to", to.to_str().unwrap()]);
    assert!(refused.contains("pg_dump"), "{refused}");
    assert!(!to.exists());
    let refused = deployment.operator_fails(&["restore", "--from", to.to_str().unwrap()]);
    assert!(refused.contains("pg_dump"), "{refused}");
}
