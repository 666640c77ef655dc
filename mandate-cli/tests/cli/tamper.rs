//! The seven tamperings of issue 64 (database write access, no key), and a row changed
//! before it is logged, each against the server's own log worker and two real `mandate
//! witness` processes, on SQLite, PostgreSQL and Citus (the schema distributed by
//! organization; the statements sent to the coordinator, as an attacker with the database
//! would send them).
//!
//! Each starts from a log cosigned by both witnesses at 30 decisions and again at 40, and
//! ends with the invariant the witnesses are there for: the checkpoint the server shows
//! either extends the one it showed at 40 (its root is the tree of the tokens answered, in
//! the order they were answered), cosigned by both, or it does not and both witnesses
//! refused it, which the server logged at error level. What the server does for each:
//!
//! | tampering | the log worker | the witnesses |
//! |---|---|---|
//! | a decision's amount changed before it is logged | logs up to it, refuses it (its token does not verify), waits; logs on once the row is restored | cosign what was logged |
//! | a logged decision's amount changed | nothing: the log holds the token answered | cosign the next checkpoint |
//! | a logged decision's verdict set to allow | the same | cosign |
//! | a logged decision deleted | the same | cosign |
//! | two logged decisions swapped | the same | cosign |
//! | two leaves swapped in a strip | stops the log (its tree no longer has its checkpoint's root): nothing signed | see nothing new |
//! | log tables rolled back to 30, a later decision altered | logs again up to the altered decision, refuses it, signs a smaller checkpoint | refuse it (rolled back) |
//! | the database restored from a copy at 30, grown back to 40 | logs the new decisions: another tree | refuse each checkpoint (rolled back, then forked) |

use mandate_protocol::tlog::{self, LogHash, TreeEdge};

use crate::support::{Engine, Env};
use crate::witness::{Witnessed, decide, read_when};

/// The decision at this index is denied (200 USD, over the mandate's 100): the one whose
/// verdict is set to allow.
const DENIED: usize = 35;
/// The decision at this index is the one changed, deleted or swapped with the next.
const TARGET: usize = 33;

/// Decisions an agent makes before the next one takes over.
const PER_AGENT: usize = 8;

/// A server whose sandbox log two witnesses cosigned at 30 and at 40 decisions.
struct Scene {
    env: Env,
    witnessed: Witnessed,
    /// The keys of the agents, `buyer`, then `buyer1`, ...
    keys: Vec<String>,
    /// Decisions made so far.
    decided: usize,
    /// The organization's id.
    org: String,
    /// The 40 decisions' ids, in log order.
    ids: Vec<String>,
    /// The tokens answered, in log order: the 40, then those answered since.
    tokens: Vec<String>,
    /// The checkpoint the server showed at 40, cosigned by both witnesses.
    shown: String,
}

impl Scene {
    /// 30 decisions logged and cosigned, `at_30` done (a backup, a copy of the log's
    /// tables), then 10 more, cosigned at 40.
    fn new(mut env: Env, tag: &str, at_30: impl FnOnce(&mut Env, &str)) -> Self {
        crate::support::server_log();
        env.metrics();
        let key = env.standard_agent("buyer");
        let (first, token) = decide(&env, &key);
        let witnessed = Witnessed::start(&mut env, tag, &first, Vec::new());
        let org = witnessed.origin.rsplit('/').nth(1).unwrap().to_owned();
        let mut scene = Self {
            env,
            witnessed,
            keys: vec![key],
            decided: 1,
            org,
            ids: vec![first],
            tokens: vec![token],
            shown: String::new(),
        };
        scene.decide_until(30);
        scene.wait_cosigned(30);
        at_30(&mut scene.env, &scene.org);
        scene.decide_until(40);
        scene.shown = scene.wait_cosigned(40);
        scene
    }

    /// The key of an agent that may decide now: a new one every [`PER_AGENT`] decisions
    /// (an agent is denied past 10 requests a minute).
    fn agent(&mut self) -> String {
        self.decided += 1;
        let n = self.decided / PER_AGENT;
        if self.decided.is_multiple_of(PER_AGENT) {
            let key = self.env.standard_agent(&format!("buyer{n}"));
            self.keys.truncate(n);
            self.keys.push(key);
        }
        self.keys[n].clone()
    }

    /// Decisions until there are `n`; the one at [`DENIED`] is a denial.
    fn decide_until(&mut self, n: usize) {
        while self.ids.len() < n {
            let denied = self.ids.len() == DENIED;
            let key = self.agent();
            let amount = if denied { "200" } else { "1" };
            let out = self.env.authorize(&key, amount, "USD", "software");
            // A denial exits 4.
            out.code(if denied { 4 } else { 0 });
            let json = out.json();
            self.ids.push(json["id"].as_str().unwrap().to_owned());
            self.tokens
                .push(json["verdict_token"].as_str().unwrap().to_owned());
        }
    }

    /// `n` more decisions after a tampering, their tokens kept as answered: their ids.
    fn decide_more(&mut self, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| {
                let key = self.agent();
                let (id, token) = decide(&self.env, &key);
                self.tokens.push(token);
                id
            })
            .collect()
    }

    /// Waits until the checkpoint readers are shown is of `size` and cosigned by both
    /// witnesses (polled, 20 s at most): that note.
    fn wait_cosigned(&self, size: u64) -> String {
        let policy = self.witnessed.policy();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let (status, note) = self.read("checkpoint");
            let note = String::from_utf8(note).unwrap();
            if status == 200
                && note.lines().nth(1) == Some(size.to_string().as_str())
                && policy.check(&note).is_ok()
            {
                return note;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint of {size} cosigned by both: {status} {note}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// GETs `path` under the sandbox log on the public host, with the organization's key.
    fn read(&self, path: &str) -> (u16, Vec<u8>) {
        let url = format!("{}/log/{}/sandbox/{path}", self.env.public, self.org);
        let response = reqwest::blocking::Client::new()
            .get(url)
            .bearer_auth(&self.env.org_key)
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, response.bytes().unwrap().to_vec())
    }

    /// The checkpoint the server shows now.
    fn shown_now(&self) -> String {
        let (status, note) = self.read("checkpoint");
        assert_eq!(status, 200);
        String::from_utf8(note).unwrap()
    }

    /// The entries of the log's first bundle as served, up to `size`.
    fn entries(&self, size: u64) -> Vec<String> {
        let (status, bundle) = self.read(&format!("tile/entries/000.p/{size}"));
        assert_eq!(status, 200);
        let mut out = Vec::new();
        let mut rest = bundle.as_slice();
        while !rest.is_empty() {
            let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
            out.push(String::from_utf8(rest[2..2 + len].to_vec()).unwrap());
            rest = &rest[2 + len..];
        }
        out
    }

    /// The root of the tree of the first `size` tokens answered.
    fn answered_root(&self, size: u64) -> LogHash {
        let leaves: Vec<LogHash> = self.tokens[..size as usize]
            .iter()
            .map(|t| tlog::leaf_hash(t.as_bytes()))
            .collect();
        TreeEdge::from_leaves(&leaves).unwrap().root()
    }

    /// The invariant: the checkpoint shown now either extends the one shown at 40 (at
    /// least 40 leaves, its root the tree of the tokens answered) and carries both
    /// cosignatures, or it does not, carries neither, and each witness's refusal of it
    /// was logged at error level (the witnesses still hold the log at 40). Whether it
    /// extends.
    fn shown_extends_or_is_refused(&self) -> bool {
        let note = self.shown_now();
        let size: u64 = note.lines().nth(1).unwrap().parse().unwrap();
        let root = note.lines().nth(2).unwrap();
        let extends = size >= 40
            && size <= self.tokens.len() as u64
            && root == self.answered_root(size).to_string();
        let cosigned = |w: usize| {
            mandate_protocol::tlog::WitnessPolicy::new(vec![self.witnessed.keys[w].clone()], 1)
                .unwrap()
                .check(&note)
                .is_ok()
        };
        if extends {
            assert!(cosigned(0) && cosigned(1), "not cosigned:\n{note}");
            return true;
        }
        assert!(!cosigned(0) && !cosigned(1), "cosigned:\n{note}");
        let origin = &self.witnessed.origin;
        self.witnessed.refusals(&format!(
            "refused the checkpoint of {origin} at size {size}"
        ));
        // Each witness still serves the checkpoint it cosigned at 40 to monitors.
        let at_40 = self.shown.lines().take(3).collect::<Vec<_>>().join("\n");
        for witness in &self.witnessed.witnesses {
            let (status, kept) = witness.get(&format!("/{}/checkpoint", sha256_hex(origin)));
            assert_eq!(status, 200);
            assert!(kept.starts_with(&at_40), "{kept}");
        }
        false
    }

    /// Runs `sql` on the stopped server's database, the organization's id for `{org}`.
    fn tamper(&mut self, sql: &str) {
        self.env.tamper(&sql.replace("{org}", &self.org));
    }
}

/// The hex SHA-256 of `text` (a witness names a log by its origin's).
fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A decision's amount changed before it is logged (its worker behind: it runs every hour
/// meanwhile): the worker logs the decision before it, refuses it (its token does not
/// verify), at error level each round, and logs nothing after it; both witnesses cosign
/// what it logged. Its row restored, the log moves on past it, cosigned.
fn a_row_changed_before_logging(env: Env, tag: &str) {
    let mut scene = Scene::new(env, tag, |_, _| {});
    scene.env.log_every(std::time::Duration::from_secs(3600));
    scene.env.restart();
    let more = scene.decide_more(3);
    scene.ids.extend(more);
    let changed = scene.ids[41].clone();
    let refused = |line: &&str| {
        line.contains("ERROR")
            && line.contains(&format!("decision {changed} (seq "))
            && line.contains("refused, not appended")
            && line.contains("does not verify")
    };
    scene.env.log_every(std::time::Duration::from_millis(100));
    scene.tamper(&format!(
        "UPDATE decisions SET amount = amount || '0' WHERE id = '{changed}';"
    ));
    // Refused in two rounds or more: the log waits before it, cosigned at 41.
    crate::witness::logged(|log| log.lines().filter(refused).count() >= 2);
    scene.wait_cosigned(41);
    crate::witness::logged(|log| log.lines().filter(refused).count() >= 4);
    assert_eq!(scene.shown_now().lines().nth(1), Some("41"));
    assert!(scene.shown_extends_or_is_refused());
    assert_eq!(scene.entries(41), scene.tokens[..41]);
    // Restored, its token verifies again: the log moves on.
    scene.tamper(&format!(
        "UPDATE decisions SET amount = substr(amount, 1, length(amount) - 1) WHERE id = '{changed}';"
    ));
    scene.wait_cosigned(43);
    assert!(scene.shown_extends_or_is_refused());
    assert_eq!(scene.entries(43), scene.tokens);
}

/// A decision logged and then changed, deleted or moved in its table: the log worker does
/// nothing (the log holds the tokens answered, in their order); the next checkpoint
/// extends the last one and both witnesses cosign it; the entry of each decision touched
/// is still the token answered.
fn a_logged_row_changed_leaves_the_log(scene: &mut Scene, sql: &str, touched: &[usize]) {
    scene.tamper(sql);
    let more = scene.decide_more(2);
    scene.ids.extend(more);
    scene.wait_cosigned(42);
    assert!(scene.shown_extends_or_is_refused());
    let entries = scene.entries(42);
    assert_eq!(entries, scene.tokens);
    for &i in touched {
        assert_eq!(entries[i], scene.tokens[i], "entry {i}");
    }
}

/// A decision's amount changed after it was logged.
fn a_changed_amount(env: Env, tag: &str) {
    let mut scene = Scene::new(env, tag, |_, _| {});
    let sql = format!(
        "UPDATE decisions SET amount = '2' WHERE id = '{}';",
        scene.ids[TARGET]
    );
    a_logged_row_changed_leaves_the_log(&mut scene, &sql, &[TARGET]);
    // As the server now serves it, the token does not verify; the token answered, with the
    // proof served (from the log's tables), does, cosigned by both witnesses.
    let out = scene
        .env
        .org(&["decisions", "get", &scene.ids[TARGET], "--json"]);
    out.ok();
    let token = out.json()["verdict_token"].as_str().unwrap().to_owned();
    assert_ne!(token, scene.tokens[TARGET]);
    let file = scene.env.write("served.json", &out.stdout);
    scene.witnessed.verify(&scene.env, &token, &file).code(6);
    scene
        .witnessed
        .verify(&scene.env, &scene.tokens[TARGET], &file)
        .ok()
        .stdout_has(&format!(", leaf {TARGET} of 42"))
        .stdout_has("cosigned by 2 of 2 witnesses (2 required)");
}

/// A denied decision's verdict set to allow after it was logged.
fn a_verdict_set_to_allow(env: Env, tag: &str) {
    let mut scene = Scene::new(env, tag, |_, _| {});
    let sql = format!(
        "UPDATE decisions SET verdict = 'allow', policy_verdict = 'allow' WHERE id = '{}';",
        scene.ids[DENIED]
    );
    a_logged_row_changed_leaves_the_log(&mut scene, &sql, &[DENIED]);
    // The entry is the denial answered.
    assert!(
        scene.tokens[DENIED]
            .split('.')
            .nth(1)
            .is_some_and(|claims| {
                use base64::Engine as _;
                let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(claims)
                    .unwrap();
                String::from_utf8(claims)
                    .unwrap()
                    .contains("\"verdict\":\"deny_limit\"")
            })
    );
}

/// A decision deleted after it was logged.
fn a_deleted_decision(env: Env, tag: &str) {
    let mut scene = Scene::new(env, tag, |_, _| {});
    let sql = format!("DELETE FROM decisions WHERE id = '{}';", scene.ids[TARGET]);
    a_logged_row_changed_leaves_the_log(&mut scene, &sql, &[TARGET]);
    scene
        .env
        .org(&["decisions", "get", &scene.ids[TARGET]])
        .code(1);
}

/// Two decisions trading places in seq order after they were logged.
fn two_swapped_decisions(env: Env, tag: &str) {
    let mut scene = Scene::new(env, tag, |_, _| {});
    let sql = format!(
        "CREATE TEMP TABLE place AS SELECT
             (SELECT seq FROM decisions WHERE id = '{x}') AS x,
             (SELECT seq FROM decisions WHERE id = '{y}') AS y;
         UPDATE decisions SET seq = -1 WHERE id = '{x}';
         UPDATE decisions SET seq = (SELECT x FROM place) WHERE id = '{y}';
         UPDATE decisions SET seq = (SELECT y FROM place) WHERE id = '{x}';",
        x = scene.ids[TARGET],
        y = scene.ids[TARGET + 1],
    );
    a_logged_row_changed_leaves_the_log(&mut scene, &sql, &[TARGET, TARGET + 1]);
}

/// Two leaf hashes swapped in the log's newest strip of two or more: the worker finds its
/// tree no longer has its checkpoint's root and stops logging, saying so each round; it
/// signs nothing, so the witnesses are shown nothing, and the checkpoint shown stays the
/// one cosigned at 40. The level-0 tile served no longer hashes to it.
fn two_leaves_swapped_in_a_strip(env: Env, tag: &str) {
    let mut scene = Scene::new(env, tag, |_, _| {});
    let origin = scene.witnessed.origin.clone();
    let stops = |line: &&str| {
        line.contains("ERROR")
            && line.contains(&format!(
                "the log {origin} was changed under the worker, which stops logging it"
            ))
    };
    let before = crate::support::server_log().lines().filter(stops).count();
    let sql = swap_two_leaves(scene.env.engine(), &scene.org, "TRUE");
    scene.env.tamper(&sql);
    scene.decide_more(2);
    // Two rounds with news stopped on it.
    crate::witness::logged(|log| log.lines().filter(stops).count() >= before + 2);
    assert_eq!(scene.shown_now(), scene.shown);
    assert!(scene.shown_extends_or_is_refused());
    assert!(!scene.witnessed.any_cosigned_yet(41) && !scene.witnessed.any_cosigned_yet(42));
    let (status, tile) = scene.read("tile/0/000.p/40");
    assert_eq!(status, 200);
    let leaves: Vec<LogHash> = tile
        .chunks(32)
        .map(|c| LogHash::from_bytes(c.try_into().unwrap()))
        .collect();
    assert_ne!(
        TreeEdge::from_leaves(&leaves).unwrap().root(),
        scene.answered_root(40)
    );
}

/// SQL swapping the first two leaf hashes of a strip of `org`'s sandbox log: of the strips
/// of two leaves or more that `pick` (a condition on `log_strips`) keeps, the newest.
pub(crate) fn swap_two_leaves(engine: Engine, org: &str, pick: &str) -> String {
    let swapped = "substr(hashes, 33, 32) || substr(hashes, 1, 32) || substr(hashes, 65)";
    let swapped = match engine {
        // SQLite's || makes text of blobs.
        Engine::Sqlite => format!("CAST({swapped} AS BLOB)"),
        Engine::Postgres | Engine::Citus => swapped.to_owned(),
    };
    format!(
        "UPDATE log_strips SET hashes = {swapped}
         WHERE org_id = '{org}' AND env = 'sandbox' AND start = (
             SELECT MAX(start) FROM log_strips
             WHERE org_id = '{org}' AND env = 'sandbox' AND length(hashes) >= 64 AND {pick});"
    )
}

/// The log's tables of the organization, as a statement copies them aside or back.
const LOG_TABLES: [&str; 4] = ["log_strips", "log_tiles", "log_entries", "log_heads"];

/// The log's tables rolled back to what they held at 30 decisions, and a decision after
/// them altered: the worker logs again up to the altered decision, refuses it (its token
/// does not verify; said at error level) and signs a checkpoint of 33, smaller than the
/// 40 the witnesses cosigned: both refuse it, and the server says so.
fn log_tables_rolled_back_and_a_decision_altered(env: Env, tag: &str) {
    let copy = |env: &mut Env, org: &str| {
        let sql: String = LOG_TABLES
            .iter()
            .map(|t| format!("CREATE TABLE saved_{t} AS SELECT * FROM {t} WHERE org_id = '{org}';"))
            .collect();
        env.tamper(&sql);
    };
    let mut scene = Scene::new(env, tag, copy);
    let mut sql: String = LOG_TABLES
        .iter()
        .map(|t| {
            format!(
                "DELETE FROM {t} WHERE org_id = '{{org}}'; INSERT INTO {t} SELECT * FROM saved_{t};"
            )
        })
        .collect();
    sql.push_str(&format!(
        "UPDATE decisions SET amount = '2' WHERE id = '{}';",
        scene.ids[TARGET]
    ));
    scene.tamper(&sql);
    let altered = &scene.ids[TARGET];
    crate::witness::logged(|log| {
        log.lines().any(|l| {
            l.contains("ERROR")
                && l.contains(&format!("decision {altered} (seq "))
                && l.contains("refused, not appended")
        })
    });
    scene.decide_more(1);
    let note = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let note = scene.shown_now();
            if note.lines().nth(1) == Some("33") {
                break note;
            }
            assert!(std::time::Instant::now() < deadline, "{note}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    // What it logged again is what was answered: a prefix, and still refused.
    assert_eq!(
        note.lines().nth(2).unwrap(),
        scene.answered_root(33).to_string()
    );
    assert!(!scene.shown_extends_or_is_refused());
    for line in scene.witnessed.refusals("refused the checkpoint") {
        assert!(
            line.contains("at size 33: it has cosigned the log at size 40"),
            "{line}"
        );
    }
}

/// The whole database restored from a copy taken at 30 decisions, then 10 new decisions:
/// the worker logs them (another tree of 40); both witnesses refuse each checkpoint (a
/// smaller log, then one of 40 with another root), the server says so, and `verify
/// --witness` refuses what it shows.
fn a_database_restored_and_grown_back(env: Env, tag: &str) {
    let mut scene = Scene::new(env, tag, |env, _| env.back_up());
    scene.env.restore();
    // The agents made after the backup are gone with it.
    scene.decided = 30;
    scene.ids.truncate(30);
    let tokens = scene.tokens.clone();
    scene.tokens.truncate(30);
    scene.decide_until(40);
    let decision = read_when(&scene.env, &scene.ids[39], |c| c.contains("\n40\n"));
    // The answered history is the first one: the 40 cosigned, then the 10 new ones.
    let new: Vec<String> = scene.tokens.drain(30..).collect();
    scene.tokens = tokens;
    scene.tokens.extend(new);
    assert!(!scene.shown_extends_or_is_refused());
    scene
        .witnessed
        .refusals("as not extending the one it cosigned at size 40");
    let file = scene.env.write("restored.json", &decision.to_string());
    let token = scene.tokens[49].clone();
    scene
        .witnessed
        .verify(&scene.env, &token, &file)
        .code(6)
        .stderr_has("valid cosignatures of 0 of the 2 witnesses, 2 required");
}

/// One test a tampering an engine, `tamper::<name>::{sqlite, postgres, citus}`; the
/// PostgreSQL and Citus ones say they skip without their engine, unless
/// MANDATE_REQUIRE_POSTGRES=1 or MANDATE_REQUIRE_CITUS=1.
macro_rules! on_each_engine {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use crate::support::{Engine, start_on};

            fn tag(engine: &str) -> String {
                format!("{}-{engine}", stringify!($name).replace('_', "-"))
            }

            #[test]
            fn sqlite() {
                super::$name(start_on(Engine::Sqlite).unwrap(), &tag("sqlite"));
            }

            #[test]
            fn postgres() {
                if let Some(env) = start_on(Engine::Postgres) {
                    super::$name(env, &tag("postgres"));
                }
            }

            #[test]
            fn citus() {
                if let Some(env) = start_on(Engine::Citus) {
                    super::$name(env, &tag("citus"));
                }
            }
        }
    )*};
}

on_each_engine!(
    a_row_changed_before_logging,
    a_changed_amount,
    a_verdict_set_to_allow,
    a_deleted_decision,
    two_swapped_decisions,
    two_leaves_swapped_in_a_strip,
    log_tables_rolled_back_and_a_decision_altered,
    a_database_restored_and_grown_back,
);
