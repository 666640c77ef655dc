//! The cron auditor against the seven tamperings of a database: `mandate audit --state`
//! runs at 40 decisions (and keeps its mirror of the log's leaves), the stopped server's
//! database is changed with SQL as an attacker with write access and no key would change
//! it, the server starts again, and the next run must refuse (exit 8) naming the decision
//! or the leaf and what differs. Written once with the engine as a parameter: SQLite
//! here, PostgreSQL and Citus at the end of the file.
//!
//! An auditor that read only the decisions after its last one accepted the first five
//! (nothing new to read), and refused the last two without naming any decision.

use std::time::{Duration, Instant};

use crate::support::{Engine, Env, Out, run_in, start, start_on};

/// `mandate audit --state audit.json` with the organization key, and `extra` flags.
fn audit(env: &Env, extra: &[&str]) -> Out {
    let state = env.path("audit.json").display().to_string();
    let mut args = vec!["audit", "--state", &state];
    args.extend_from_slice(extra);
    env.org(&args)
}

/// `n` decisions of `amount` USD made four at a time (so that the log's rounds write
/// strips of several leaves).
fn decide(env: &Env, key: &str, n: usize, amount: &str) {
    let (home, api) = (env.home.path(), env.api.as_str());
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                scope.spawn(move || {
                    for _ in (w..n).step_by(4) {
                        let out = run_in(
                            home,
                            &[
                                "authorize",
                                "--amount",
                                amount,
                                "--currency",
                                "USD",
                                "--recipient",
                                "vendor:acme",
                                "--category",
                                "software",
                                "--json",
                            ],
                            &[("MANDATE_BASE_URL", api), ("MANDATE_API_KEY", key)],
                            None,
                        );
                        assert!(out.code == 0 || out.code == 4, "{out:?}");
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
    });
}

/// The sandbox log's URL on the public host and the organization's id.
fn log_url(env: &Env) -> (String, String) {
    let out = env.org(&["export", "decisions", "--output", "-"]);
    out.ok();
    let first = out.stdout.lines().next().unwrap();
    let decision: serde_json::Value = serde_json::from_str(first).unwrap();
    let id = decision["id"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let note = loop {
        let read = env.org(&["decisions", "get", id, "--json"]);
        if let Some(note) = read.json()["log"]["checkpoint"].as_str() {
            break note.to_owned();
        }
        assert!(Instant::now() < deadline, "{id} was never logged");
        std::thread::sleep(Duration::from_millis(100));
    };
    let origin = note.lines().next().unwrap();
    let path = origin.split_once("/log/").unwrap().1;
    let org = path.split('/').next().unwrap().to_owned();
    (format!("{}/log/{path}", env.public), org)
}

/// The size of the checkpoint the log shows, read as a tiles client does.
fn shown_size(env: &Env, url: &str) -> u64 {
    let response = reqwest::blocking::Client::new()
        .get(format!("{url}/checkpoint"))
        .bearer_auth(&env.org_key)
        .send()
        .unwrap();
    if !response.status().is_success() {
        return 0;
    }
    let text = response.text().unwrap();
    text.lines().nth(1).unwrap().parse().unwrap()
}

/// Waits until the log shows a checkpoint of `size` decisions.
fn wait_size(env: &Env, url: &str, size: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while shown_size(env, url) != size {
        assert!(Instant::now() < deadline, "the log never showed {size}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The ids of the log's decisions, in the log's order.
fn ids_in_order(env: &Env) -> Vec<String> {
    let out = env.org(&["export", "decisions", "--output", "-"]);
    out.ok();
    out.stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|d| d["verdict_token"].is_string())
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A log of 40 decisions (index 5 a deny: 120 USD, over the mandate's 100), audited at 40;
/// the log's URL and org id, and the ids in log order. `at_30` runs when the log shows 30.
fn audited_at_40(env: &mut Env, extra: &[&str], at_30: impl FnOnce(&mut Env)) -> Audited {
    env.offline(&["jwks", "fetch", &env.public]).ok();
    let key = env.standard_agent("buyer");
    decide(env, &key, 5, "1");
    let (url, org) = log_url(env);
    wait_size(env, &url, 5);
    decide(env, &key, 1, "120");
    decide(env, &key, 24, "1");
    wait_size(env, &url, 30);
    at_30(env);
    decide(env, &key, 10, "1");
    wait_size(env, &url, 40);
    audit(env, extra)
        .ok()
        .stdout_has("at 40 decisions (40 new)");
    audit(env, extra).ok().stdout_has("at 40 decisions (0 new)");
    let ids = ids_in_order(env);
    assert_eq!(ids.len(), 40);
    Audited { key, url, org, ids }
}

struct Audited {
    key: String,
    url: String,
    org: String,
    ids: Vec<String>,
}

/// The next run after a tampering: refused, the state kept, the evidence beside it.
fn refused(env: &Env, extra: &[&str]) -> Out {
    let before = std::fs::read_to_string(env.path("audit.json")).unwrap();
    let out = audit(env, extra);
    out.code(8).stderr_has("log refused: ");
    assert_eq!(
        std::fs::read_to_string(env.path("audit.json")).unwrap(),
        before
    );
    assert!(out.stderr.contains("audit.json.refused-"), "{}", out.stderr);
    out
}

/// The amount of an audited decision changed.
pub fn an_amount_changed(mut env: Env) {
    let a = audited_at_40(&mut env, &[], |_| {});
    let id = &a.ids[12];
    env.tamper(&format!(
        "UPDATE decisions SET amount = '2' WHERE id = '{id}';"
    ));
    refused(&env, &[])
        .stderr_has(&format!("decision {id} (index 12) was changed: "))
        .stderr_has("request.amount: the API serves 2, the log holds 1")
        .stderr_has("the decision was changed after it was signed");
    // The state: the mirror of 32 bytes a decision (the leaves' hashes), as accepted.
    let mirror = std::fs::metadata(env.path("audit.json.leaves")).unwrap();
    assert_eq!(mirror.len(), 40 * 32);
    assert!(!env.path("audit.json.entries").exists());
}

/// The verdict of an audited deny set to allow.
pub fn a_verdict_set_to_allow(mut env: Env) {
    let a = audited_at_40(&mut env, &[], |_| {});
    let id = &a.ids[5];
    env.tamper(&format!(
        "UPDATE decisions SET verdict = 'allow' WHERE id = '{id}';"
    ));
    refused(&env, &[])
        .stderr_has(&format!("decision {id} (index 5) was changed: "))
        .stderr_has("verdict: the API serves \"allow\", the log holds \"deny_limit\"");
}

/// An audited decision deleted.
pub fn a_decision_deleted(mut env: Env) {
    let a = audited_at_40(&mut env, &[], |_| {});
    let id = &a.ids[20];
    env.tamper(&format!("DELETE FROM decisions WHERE id = '{id}';"));
    refused(&env, &[]).stderr_has(&format!(
        "decision {id} (index 20) is in the log but the API no longer serves it: it was deleted"
    ));
}

/// Two audited decisions swapped in seq order.
pub fn two_decisions_swapped(mut env: Env) {
    let a = audited_at_40(&mut env, &[], |_| {});
    let (x, y) = (&a.ids[8], &a.ids[9]);
    env.tamper(&format!(
        "CREATE TEMP TABLE place AS SELECT
             (SELECT seq FROM decisions WHERE id = '{x}') AS x,
             (SELECT seq FROM decisions WHERE id = '{y}') AS y;
         UPDATE decisions SET seq = -1 WHERE id = '{x}';
         UPDATE decisions SET seq = (SELECT x FROM place) WHERE id = '{y}';
         UPDATE decisions SET seq = (SELECT y FROM place) WHERE id = '{x}';"
    ));
    refused(&env, &[])
        .stderr_has(&format!(
            "decision {x} (logged at index 8) is served after decision {y} (logged at index 9)"
        ))
        .stderr_has(&format!(
            "decision {x} is logged at index 8, the API gives it index 9"
        ));
}

/// Two leaves swapped in a strip of the log's tables (the first two of the widest strip).
pub fn two_leaves_swapped_in_a_strip(mut env: Env, engine: Engine) {
    let a = audited_at_40(&mut env, &[], |_| {});
    let org = &a.org;
    let strip = format!(
        "(SELECT start FROM log_strips WHERE org_id = '{org}' AND env = 'sandbox'
          ORDER BY length(hashes) DESC, start LIMIT 1)"
    );
    let swapped = match engine {
        Engine::Sqlite => {
            "unhex(substr(hex(hashes), 65, 64) || substr(hex(hashes), 1, 64) || substr(hex(hashes), 129))"
        }
        Engine::Postgres | Engine::Citus => {
            "substring(hashes from 33 for 32) || substring(hashes from 1 for 32) || substring(hashes from 65)"
        }
    };
    env.tamper(&format!(
        "UPDATE log_strips SET hashes = {swapped}
         WHERE org_id = '{org}' AND env = 'sandbox' AND start = {strip};"
    ));
    let out = refused(&env, &[]);
    out.stderr_has("history was rewritten (leaves were moved in the service's log tables): ");
    // The two leaves, each named by its decision.
    let named = a
        .ids
        .iter()
        .enumerate()
        .filter(|(i, id)| {
            out.stderr.contains(&format!(
                "leaf {i} (decision {id}) is served with the hash accepted at leaf "
            ))
        })
        .count();
    assert_eq!(named, 2, "{}", out.stderr);
}

/// The log's tables rolled back to their copy at 30 decisions, and a later decision's
/// amount changed: the service logs again up to that decision (which no longer verifies).
pub fn log_tables_rolled_back_and_a_later_decision_altered(mut env: Env) {
    const TABLES: [&str; 4] = ["log_strips", "log_tiles", "log_heads", "log_entries"];
    let a = audited_at_40(&mut env, &[], |env| {
        let copy: String = TABLES
            .iter()
            .map(|t| format!("CREATE TABLE copy_{t} AS SELECT * FROM {t};"))
            .collect();
        env.tamper(&copy);
    });
    let id = &a.ids[35];
    let mut sql: String = TABLES
        .iter()
        .map(|t| format!("DELETE FROM {t}; INSERT INTO {t} SELECT * FROM copy_{t};"))
        .collect();
    sql.push_str(&format!(
        "UPDATE decisions SET amount = '2' WHERE id = '{id}';"
    ));
    env.tamper(&sql);
    // The service logs 30 to 34 again, then refuses the changed decision.
    wait_size(&env, &a.url, 35);
    refused(&env, &[])
        .stderr_has("the log shrank from 40 to 35 decisions")
        .stderr_has(&format!(
            "decision {id} (index 35): the API serves a verdict token that is not the one the log holds at index 35"
        ))
        .stderr_has("the decision was changed after it was signed");
    let _ = a.key;
}

/// The database restored from a copy taken at 30 decisions and grown back to 40 with other
/// decisions. Audited with `--keep-entries` (`keep`), the mirror holds the verdict tokens
/// too, so the decisions the restore took away are named by their ids.
pub fn a_database_restored_at_30_and_grown_back_to_40(mut env: Env, keep: bool) {
    let flags: &[&str] = if keep { &["--keep-entries"] } else { &[] };
    let a = audited_at_40(&mut env, flags, Env::back_up);
    assert_eq!(env.path("audit.json.entries/0").exists(), keep);
    env.restore();
    decide(&env, &a.key, 10, "1");
    wait_size(&env, &a.url, 40);
    let now = ids_in_order(&env);
    assert_eq!(now[..30], a.ids[..30]);
    let out = refused(&env, flags);
    out.stderr_has("two signed checkpoints of 40 decisions have different roots")
        .stderr_has(&format!(
            "leaf 30 is now decision {}'s verdict, not the one accepted",
            now[30]
        ));
    if keep {
        out.stderr_has(&format!(
            "decision {} (index 30) is in the log but the API no longer serves it: it was deleted",
            a.ids[30]
        ));
    } else {
        out.stderr_has("the decision logged at index 30 is not served by the API: it was deleted");
    }
}

/// The entries of audited leaves deleted from the log's tables: a bundle the log served
/// before is refused when it is no longer served (only a prefix of leaves logged before the
/// service kept entries may lack them, as the first run found).
pub fn the_entries_of_audited_leaves_deleted(mut env: Env) {
    let a = audited_at_40(&mut env, &[], |_| {});
    env.tamper(&format!(
        "DELETE FROM log_entries WHERE org_id = '{}';",
        a.org
    ));
    refused(&env, &[])
        .stderr_has("/tile/entries/000.p/40 is not served (404) though the checkpoint covers it");
}

#[test]
fn cron_audit_refuses_entries_no_longer_served() {
    the_entries_of_audited_leaves_deleted(start());
}

#[test]
fn cron_audit_names_an_amount_changed() {
    an_amount_changed(start());
}

#[test]
fn cron_audit_names_a_verdict_set_to_allow() {
    a_verdict_set_to_allow(start());
}

#[test]
fn cron_audit_names_a_decision_deleted() {
    a_decision_deleted(start());
}

#[test]
fn cron_audit_names_two_decisions_swapped() {
    two_decisions_swapped(start());
}

#[test]
fn cron_audit_names_two_leaves_swapped_in_a_strip() {
    two_leaves_swapped_in_a_strip(start(), Engine::Sqlite);
}

#[test]
fn cron_audit_names_a_rolled_back_log_and_an_altered_decision() {
    log_tables_rolled_back_and_a_later_decision_altered(start());
}

#[test]
fn cron_audit_names_a_database_restored_and_grown_back() {
    a_database_restored_at_30_and_grown_back_to_40(start(), false);
}

#[test]
fn cron_audit_keeping_entries_names_the_decisions_a_restore_took_away() {
    a_database_restored_at_30_and_grown_back_to_40(start(), true);
}

/// Each attack on PostgreSQL and on Citus (a coordinator and two workers, the schema
/// distributed by organization); without them they say so and pass, unless
/// MANDATE_REQUIRE_POSTGRES=1 or MANDATE_REQUIRE_CITUS=1.
macro_rules! on_engine {
    ($engine:ident, $($name:ident => $attack:expr),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                if let Some(env) = start_on(Engine::$engine) {
                    let attack: fn(Env, Engine) = $attack;
                    attack(env, Engine::$engine);
                }
            }
        )*
    };
}

on_engine!(Postgres,
    on_postgres_cron_audit_names_an_amount_changed => |env, _| an_amount_changed(env),
    on_postgres_cron_audit_names_a_verdict_set_to_allow => |env, _| a_verdict_set_to_allow(env),
    on_postgres_cron_audit_names_a_decision_deleted => |env, _| a_decision_deleted(env),
    on_postgres_cron_audit_names_two_decisions_swapped => |env, _| two_decisions_swapped(env),
    on_postgres_cron_audit_names_two_leaves_swapped_in_a_strip => two_leaves_swapped_in_a_strip,
    on_postgres_cron_audit_names_a_rolled_back_log_and_an_altered_decision =>
        |env, _| log_tables_rolled_back_and_a_later_decision_altered(env),
    on_postgres_cron_audit_names_a_database_restored_and_grown_back =>
        |env, _| a_database_restored_at_30_and_grown_back_to_40(env, false),
);

on_engine!(Citus,
    on_citus_cron_audit_names_an_amount_changed => |env, _| an_amount_changed(env),
    on_citus_cron_audit_names_a_verdict_set_to_allow => |env, _| a_verdict_set_to_allow(env),
    on_citus_cron_audit_names_a_decision_deleted => |env, _| a_decision_deleted(env),
    on_citus_cron_audit_names_two_decisions_swapped => |env, _| two_decisions_swapped(env),
    on_citus_cron_audit_names_two_leaves_swapped_in_a_strip => two_leaves_swapped_in_a_strip,
    on_citus_cron_audit_names_a_rolled_back_log_and_an_altered_decision =>
        |env, _| log_tables_rolled_back_and_a_later_decision_altered(env),
    on_citus_cron_audit_names_a_database_restored_and_grown_back =>
        |env, _| a_database_restored_at_30_and_grown_back_to_40(env, false),
);
