//! `mandate audit` and `mandate verify --log` against a real server, the attacks written
//! once with the engine as a parameter (the SQLite tests here, the PostgreSQL ones in
//! `audit_postgres.rs`): the first audit accepts and stores the log's checkpoint, later
//! runs accept its extensions, and a decision deleted, changed or moved in the stopped
//! server's database, or the database restored from a backup (two checkpoints of one size),
//! is refused (exit 8) with the decision or the sizes named, the state kept and the refused
//! checkpoint written beside it as evidence. `verify --log` refuses the moved and changed
//! decisions as the tampered server serves them, and a merchant's saved proof still proves
//! a deleted decision was logged.

use std::time::{Duration, Instant};

use crate::support::{Env, Out, start};

/// `mandate audit --state audit.json` with the organization key.
fn audit(env: &Env) -> Out {
    let state = env.path("audit.json").display().to_string();
    env.org(&["audit", "--state", &state])
}

/// `n` allowed decisions of `key`; their ids, oldest first.
fn decide(env: &Env, key: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let out = env.authorize(key, "1", "USD", "software");
            out.ok();
            out.json()["id"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Waits until the decision `id` is in a checkpoint readers are shown (its `log` is set).
fn wait_logged(env: &Env, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = env.org(&["decisions", "get", id, "--json"]);
        out.ok();
        if !out.json()["log"].is_null() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id} was not logged: {}",
            out.stdout
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A log audited at 6 decisions, then 3 more decisions logged but not audited (indexes 6
/// to 8); returns the agent's key and those 3 ids.
fn audited_then_three_more(env: &Env) -> (String, Vec<String>) {
    env.offline(&["jwks", "fetch", &env.public]).ok();
    let key = env.standard_agent("buyer");

    // Before any checkpoint covers them, or after: the first run takes what is signed.
    let first = decide(env, &key, 3);
    wait_logged(env, &first[2]);
    let run = audit(env);
    run.ok()
        .stdout_has("at 3 decisions (3 new), its first checkpoint in ")
        .stdout_has("later runs check that the log extends it")
        .stderr_has("first run: auditing the log ");
    // There was no checkpoint before it to extend.
    assert!(!run.stdout.contains("accepted before"), "{}", run.stdout);
    let state = std::fs::read_to_string(env.path("audit.json")).unwrap();
    let stored: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(stored["after"], first[2].as_str(), "{state}");
    assert!(
        stored["audit"]["checkpoint"]
            .as_str()
            .unwrap()
            .contains("/log/"),
        "{state}"
    );

    let second = decide(env, &key, 3);
    wait_logged(env, &second[2]);
    audit(env)
        .ok()
        .stdout_has("at 6 decisions (3 new) extends the checkpoint accepted before");
    // Nothing new: the same checkpoint is accepted again.
    audit(env).ok().stdout_has("at 6 decisions (0 new)");

    let third = decide(env, &key, 3);
    wait_logged(env, &third[2]);
    (key, third)
}

/// `mandate verify TOKEN --log FILE` for a sandbox verdict of 1 USD to vendor:acme, with
/// the cached key set (its log keys) of the server's issuer.
fn verify_logged(env: &Env, token: &str, log: &str) -> Out {
    env.verify_logged(token, "1", log, &[])
}

/// The decision `id` as the server reads it, written to a file named after `name`: its
/// token and the path of the file.
fn read_decision(env: &Env, id: &str, name: &str) -> (String, String) {
    let out = env.org(&["decisions", "get", id, "--json"]);
    out.ok();
    let token = out.json()["verdict_token"].as_str().unwrap().to_owned();
    (token, env.write(name, &out.stdout))
}

/// Runs `sql` on the stopped server's database, makes one more decision and waits for a
/// checkpoint that covers it; `mandate audit` then reads the tampered log.
fn tamper_and_audit(env: &mut Env, key: &str, sql: &str) -> Out {
    let before = std::fs::read_to_string(env.path("audit.json")).unwrap();
    env.tamper(sql);
    let newest = decide(env, key, 1);
    wait_logged(env, &newest[0]);
    let out = audit(env);
    out.code(8).stderr_has("log refused: ");
    // The state is kept; the refused checkpoint and lines are beside it.
    let after = std::fs::read_to_string(env.path("audit.json")).unwrap();
    assert_eq!(before, after);
    let evidence = std::fs::read_to_string(env.path("audit.json.refused-10")).unwrap();
    assert!(evidence.contains("\n10\n"), "{evidence}");
    assert!(
        out.stderr.contains("audit.json.refused-10"),
        "{}",
        out.stderr
    );
    out
}

/// A decision row deleted: `audit` names its index and the decision exported there; the
/// merchant's saved proof still shows the verdict was logged (the server answers 404).
pub fn a_deleted_decision_is_named(mut env: Env) {
    let (key, ids) = audited_then_three_more(&env);
    let (token, saved) = read_decision(&env, &ids[1], "deleted.json");
    let sql = format!("DELETE FROM decisions WHERE id = '{}';", ids[1]);
    tamper_and_audit(&mut env, &key, &sql).stderr_has(&format!(
        "decision {} (index 7) is in the log but the API no longer serves it: it was deleted",
        ids[1]
    ));
    env.org(&["decisions", "get", &ids[1]]).code(1);
    verify_logged(&env, &token, &saved)
        .ok()
        .stdout_has(", leaf 7 of 9");
}

/// A decision's amount changed: `audit` names it; its token as served no longer verifies.
pub fn a_changed_decision_is_named(mut env: Env) {
    let (key, ids) = audited_then_three_more(&env);
    let sql = format!("UPDATE decisions SET amount = '2' WHERE id = '{}';", ids[1]);
    tamper_and_audit(&mut env, &key, &sql)
        .stderr_has("index 7")
        .stderr_has(&ids[1]);
    let (token, served) = read_decision(&env, &ids[1], "changed.json");
    verify_logged(&env, &token, &served).code(6);
}

/// Two decisions swapped in seq order: `audit` names the first index; the first one as
/// served (its token, and the proof of the place it was moved to) is refused by
/// `verify --log`.
pub fn two_swapped_decisions_are_refused(mut env: Env) {
    let (key, ids) = audited_then_three_more(&env);
    // The decisions logged at indexes 6 and 7 trade places in seq order.
    let sql = format!(
        "CREATE TEMP TABLE place AS SELECT
             (SELECT seq FROM decisions WHERE id = '{x}') AS x,
             (SELECT seq FROM decisions WHERE id = '{y}') AS y;
         UPDATE decisions SET seq = -1 WHERE id = '{x}';
         UPDATE decisions SET seq = (SELECT x FROM place) WHERE id = '{y}';
         UPDATE decisions SET seq = (SELECT y FROM place) WHERE id = '{x}';",
        x = ids[0],
        y = ids[1],
    );
    tamper_and_audit(&mut env, &key, &sql).stderr_has("index 6");
    let (token, served) = read_decision(&env, &ids[0], "moved.json");
    verify_logged(&env, &token, &served)
        .code(6)
        .stderr_has("not proven to be in the log");
}

/// The database restored from a backup taken before more decisions were checkpointed: the
/// log shrank, then a second signed checkpoint of the accepted size with another root (a
/// fork), then history rewritten past it; a merchant's saved proof of a decision the
/// restore took away still verifies (the evidence outlives the database).
pub fn a_database_restored_from_a_backup_is_refused(mut env: Env) {
    env.offline(&["jwks", "fetch", &env.public]).ok();
    let key = env.standard_agent("buyer");
    let ids = decide(&env, &key, 3);
    wait_logged(&env, &ids[2]);
    audit(&env).ok().stdout_has("at 3 decisions (3 new)");
    env.back_up();
    let ids = decide(&env, &key, 3);
    wait_logged(&env, &ids[2]);
    audit(&env).ok().stdout_has("at 6 decisions (3 new)");
    let accepted = std::fs::read_to_string(env.path("audit.json")).unwrap();
    let (token, saved) = read_decision(&env, &ids[2], "taken-away.json");

    // The backup of 3 decisions restored, and one more decision: the log shrank.
    env.restore();
    let refused = |env: &Env, n: usize, size: u64, message: &str| {
        let ids = decide(env, &key, n);
        wait_logged(env, &ids[n - 1]);
        let out = audit(env);
        out.code(8)
            .stderr_has(message)
            .stderr_has(&format!("audit.json.refused-{size}"));
        assert!(env.path(&format!("audit.json.refused-{size}")).exists());
        assert_eq!(
            std::fs::read_to_string(env.path("audit.json")).unwrap(),
            accepted
        );
    };
    refused(&env, 1, 4, "the log shrank from 6 to 4 decisions");
    // Two more: a second checkpoint of 6 decisions, of another root.
    refused(
        &env,
        2,
        6,
        "two signed checkpoints of 6 decisions have different roots",
    );
    // Past the accepted size: its first 6 decisions are not the ones accepted.
    refused(&env, 1, 7, "history was rewritten");
    env.org(&["decisions", "get", &ids[2]]).code(1);
    verify_logged(&env, &token, &saved)
        .ok()
        .stdout_has(", leaf 5 of 6");
}

#[test]
fn audit_accepts_extensions_and_names_a_deleted_decision() {
    a_deleted_decision_is_named(start());
}

#[test]
fn audit_names_a_changed_decision() {
    a_changed_decision_is_named(start());
}

#[test]
fn audit_refuses_two_decisions_swapped() {
    two_swapped_decisions_are_refused(start());
}

#[test]
fn audit_refuses_a_database_restored_from_a_backup() {
    a_database_restored_from_a_backup_is_refused(start());
}
