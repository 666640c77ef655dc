//! Starting many processes on one database: started at once on an empty database they all
//! come up and the schema is migrated once; `migrate` and `serve --no-migrate` agree.

use crate::deploy::{Http, mandate};
use crate::deployment;

/// Three processes started at the same moment on an empty database: each comes up (one
/// migrates, the others wait or find it done), each migration is recorded once, and all
/// three serve the organization onboarded afterwards.
#[tokio::test]
async fn three_processes_started_at_once_on_an_empty_database_migrate_it_once() {
    let deployment = deployment!();
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
    let expected: Vec<i64> = (1..=versions.len() as i64).collect();
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
