//! `witness`: the real binary serving C2SP tlog-witness on port 0, fed checkpoints of a log
//! built with mandate-protocol's own tree code and signed with a log key, over real HTTP
//! (no Mandate server needed: the witness only sees the log's checkpoints); then, against
//! a real server, two witnesses cosigning the server's checkpoint and `verify --log` and
//! `audit` requiring k of them (`--witness`, `--witnesses-required`).

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use mandate_protocol::jws::P256Signer;
use mandate_protocol::tlog::{
    self, LogHash, LogKey, NodeId, ProofPlan, SignedNote, TreeEdge, WitnessKey, WitnessPolicy,
};

use serde_json::Value;

use crate::support::{Engine, Env, Out, command_in, run_in, start, start_on};

const ORIGIN: &str = "verdicts.example.com/log/org_4Fq2/live";

/// A log of a fixed list of leaves: its checkpoints signed with a log key, and the
/// consistency proofs between them, from the complete subtrees stored as the service does.
pub(crate) struct Log {
    key: P256Signer,
    origin: String,
    edges: Vec<TreeEdge>,
    stored: HashMap<NodeId, LogHash>,
}

impl Log {
    /// `n` leaves, each `tag` and its index.
    pub(crate) fn new(origin: &str, n: u64, tag: u8) -> Self {
        let mut edge = TreeEdge::new();
        let mut edges = vec![edge.clone()];
        let mut stored = HashMap::new();
        for i in 0..n {
            let mut leaf = i.to_be_bytes().to_vec();
            leaf.push(tag);
            stored.extend(edge.push(tlog::leaf_hash(&leaf)).unwrap());
            edges.push(edge.clone());
        }
        Self {
            key: P256Signer::from_secret_bytes("log-1", &[9; 32]).unwrap(),
            origin: origin.to_owned(),
            edges,
            stored,
        }
    }

    /// The signed checkpoint at `size` leaves.
    pub(crate) fn note(&self, size: u64) -> String {
        self.signed(size, self.edges[size as usize].root())
    }

    /// A checkpoint of `size` and `root` signed with the log's key, whatever the tree.
    pub(crate) fn signed(&self, size: u64, root: LogHash) -> String {
        let checkpoint = tlog::checkpoint(self.origin.as_str(), size, root).unwrap();
        tlog::sign_checkpoint(&checkpoint, &self.key).unwrap()
    }

    /// The consistency proof from `old` to `new` leaves.
    pub(crate) fn proof(&self, old: u64, new: u64) -> Vec<LogHash> {
        let plan = ProofPlan::consistency(old, new).unwrap();
        let hashes: Vec<LogHash> = plan.nodes().iter().map(|id| self.stored[id]).collect();
        plan.assemble(&hashes).unwrap()
    }

    /// The log's verifier key, what the witness is given with --log.
    pub(crate) fn vkey(&self) -> String {
        LogKey::of_signer(&self.key).verifier_key(&self.origin)
    }
}

/// The body of `POST /add-checkpoint`.
pub(crate) fn body(old: u64, proof: &[LogHash], note: &str) -> String {
    let mut body = format!("old {old}\n");
    for hash in proof {
        body.push_str(&format!("{hash}\n"));
    }
    body.push('\n');
    body.push_str(note);
    body
}

/// A running `mandate witness`, stopped when dropped.
pub(crate) struct Witness {
    child: Child,
    /// Where it listens, `http://127.0.0.1:port`.
    pub(crate) url: String,
    /// What it wrote on stderr so far.
    pub(crate) stderr: Arc<Mutex<String>>,
}

impl Witness {
    /// Starts `mandate witness --listen 127.0.0.1:0` with this key, state and logs.
    pub(crate) fn start(home: &Path, key: &Path, state: &Path, logs: &[String]) -> Self {
        let (key, state) = (key.to_str().unwrap(), state.to_str().unwrap());
        let mut args = vec!["witness", "--key-file", key, "--state", state];
        for log in logs {
            args.extend(["--log", log.as_str()]);
        }
        args.extend(["--listen", "127.0.0.1:0"]);
        let mut child = command_in(home, &args, &[])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let mut pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&chunk[..n]).into_owned();
                sink.lock().unwrap().push_str(&text);
            }
        });
        // The first line on stdout is the bound address; the read ends if the child exits.
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first
            .trim_end()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("no address: {first:?}; stderr:\n{}", stderr.lock().unwrap()))
            .to_owned();
        Self { child, url, stderr }
    }

    /// Posts a body to /add-checkpoint: the status, the content type and the body.
    pub(crate) fn add(&self, body: &str) -> (u16, String, String) {
        let response = reqwest::blocking::Client::new()
            .post(format!("{}/add-checkpoint", self.url))
            .body(body.to_owned())
            .send()
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, content_type, response.text().unwrap())
    }

    /// Whether it has written `text` on stderr, waited for a while (a thread reads its
    /// pipe, so a line written before an answer may come in after it): its stderr.
    pub(crate) fn said(&self, text: &str) -> (bool, String) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let stderr = self.stderr.lock().unwrap().clone();
            if stderr.contains(text) || std::time::Instant::now() >= deadline {
                return (stderr.contains(text), stderr);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// GETs `path`: the status and the body.
    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        let response = reqwest::blocking::get(format!("{}{path}", self.url)).unwrap();
        (response.status().as_u16(), response.text().unwrap())
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mandate witness init`: the key file and the verifier key printed.
pub(crate) fn init(home: &Path, name: &str) -> (PathBuf, WitnessKey) {
    let key = home.join(format!("{}.key", name.replace('/', "_")));
    let out = run_in(
        home,
        &[
            "witness",
            "init",
            "--name",
            name,
            "--key-file",
            key.to_str().unwrap(),
        ],
        &[],
        None,
    );
    out.ok();
    let vkey = WitnessKey::from_verifier_key(out.stdout.trim()).unwrap();
    assert_eq!(vkey.name(), name);
    (key, vkey)
}

#[test]
fn init_writes_a_key_only_its_owner_reads_and_never_prints_the_secret() {
    let home = tempfile::tempdir().unwrap();
    let (key, vkey) = init(home.path(), "witness.example.com/w1");
    let text = std::fs::read_to_string(&key).unwrap();
    assert!(
        text.starts_with("PRIVATE+KEY+witness.example.com/w1+"),
        "{text}"
    );
    // PRIVATE+KEY+<name>+<hash>+<base64 of the key>: the base64 may itself hold a '+'.
    let secret = text.trim_end().splitn(5, '+').nth(4).unwrap();
    assert!(secret.len() > 40, "{text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // An existing file is never overwritten.
    let again = run_in(
        home.path(),
        &[
            "witness",
            "init",
            "--name",
            "w2",
            "--key-file",
            key.to_str().unwrap(),
        ],
        &[],
        None,
    );
    again
        .code(2)
        .stderr_has("an existing key is never overwritten");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), text);
    // A bad name is refused with what a name may hold.
    run_in(
        home.path(),
        &["witness", "init", "--name", "a b", "--key-file", "x.key"],
        &[],
        None,
    )
    .code(2)
    .stderr_has("without spaces or '+'");

    // Serving with a key others can read is refused; the secret is printed nowhere.
    let log = Log::new(ORIGIN, 1, 0);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let state = home.path().join("state.json");
        let refused = run_in(
            home.path(),
            &[
                "witness",
                "--key-file",
                key.to_str().unwrap(),
                "--state",
                state.to_str().unwrap(),
                "--log",
                &log.vkey(),
            ],
            &[],
            None,
        );
        refused.code(2).stderr_has("chmod 600");
        assert!(!refused.stderr.contains(secret) && !refused.stdout.contains(secret));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let state = home.path().join("state.json");
    let witness = Witness::start(home.path(), &key, &state, &[log.vkey()]);
    let (status, _, line) = witness.add(&body(0, &[], &log.note(1)));
    assert_eq!(status, 200, "{line}");
    let (said, stderr) = witness.said(&format!("cosigning as {vkey}"));
    drop(witness);
    assert!(said, "{stderr}");
    assert!(!line.contains(secret) && !stderr.contains(secret));
}

#[test]
fn a_witness_cosigns_a_growing_log_and_refuses_what_does_not_extend_it() {
    let home = tempfile::tempdir().unwrap();
    let (key, vkey) = init(home.path(), "witness.example.com/w1");
    let state = home.path().join("state.json");
    let log = Log::new(ORIGIN, 8, 0);
    let witness = Witness::start(home.path(), &key, &state, &[log.vkey()]);
    let policy = WitnessPolicy::new(vec![vkey], 1).unwrap();

    // The first checkpoint (old 0, no proof): one cosignature line that verifies.
    let (status, _, line) = witness.add(&body(0, &[], &log.note(3)));
    assert_eq!(status, 200, "{line}");
    assert!(line.starts_with("— witness.example.com/w1 ") && line.ends_with('\n'));
    assert_eq!(line.lines().count(), 1);
    let cosigned = policy.check(&format!("{}{line}", log.note(3))).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(cosigned[0].timestamp().abs_diff(now) < 60);

    // An extension with a valid consistency proof.
    let (status, _, line) = witness.add(&body(3, &log.proof(3, 7), &log.note(7)));
    assert_eq!(status, 200, "{line}");
    assert!(policy.check(&format!("{}{line}", log.note(7))).is_ok());

    // `old` other than the size cosigned last: 409, the body that size.
    let (status, content_type, size) = witness.add(&body(3, &log.proof(3, 8), &log.note(8)));
    assert_eq!(
        (status, content_type.as_str(), size.as_str()),
        (409, "text/x.tlog.size", "7\n")
    );
    // A rollback: a smaller checkpoint, with `old` the size cosigned (400: old above the
    // size) or with its own size (409).
    let (status, _, message) = witness.add(&body(7, &[], &log.note(5)));
    assert_eq!(status, 400, "{message}");
    assert!(
        message.contains("old 7 is above the checkpoint's size 5"),
        "{message}"
    );
    assert_eq!(witness.add(&body(5, &[], &log.note(5))).0, 409);
    // A fork: another log under the same origin and key, at the same size.
    let fork = Log::new(ORIGIN, 7, 1);
    let (status, _, message) = witness.add(&body(7, &[], &fork.note(7)));
    assert_eq!(status, 422, "{message}");
    assert!(message.contains("the log forked"), "{message}");
    // A fork that grows: its proof from the size cosigned does not hold.
    let fork = Log::new(ORIGIN, 8, 1);
    let (status, _, message) = witness.add(&body(7, &fork.proof(7, 8), &fork.note(8)));
    assert_eq!(status, 422, "{message}");
    // A bad proof: one hash altered, or one too few.
    let mut proof = log.proof(7, 8);
    proof[0] = tlog::leaf_hash(b"other");
    let (status, _, message) = witness.add(&body(7, &proof, &log.note(8)));
    assert_eq!(status, 422, "{message}");
    assert!(
        message.contains("the consistency proof from size 7 to 8"),
        "{message}"
    );
    let short = &log.proof(7, 8)[1..];
    assert_eq!(witness.add(&body(7, short, &log.note(8))).0, 422);
    // Another log (404), a checkpoint not signed by the log's key (403), a malformed body
    // (400), each saying what to fix.
    let stranger = Log::new("other.example/log", 2, 0);
    let (status, _, message) = witness.add(&body(0, &[], &stranger.note(2)));
    assert_eq!(status, 404, "{message}");
    assert!(message.contains("--log"), "{message}");
    let forged = log.note(8).replace("\n8\n", "\n9\n");
    let (status, _, message) = witness.add(&body(7, &[], &forged));
    assert_eq!(status, 403, "{message}");
    let (status, _, message) = witness.add("old seven\n\n");
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("\"old <size>\""), "{message}");

    // Nothing refused moved the recorded size: 7 to 8 with its proof is cosigned.
    let (status, _, line) = witness.add(&body(7, &log.proof(7, 8), &log.note(8)));
    assert_eq!(status, 200, "{line}");
    let (said, stderr) = witness.said(&format!("cosigned {ORIGIN} at 8"));
    assert!(said, "{stderr}");
}

#[test]
fn the_witness_remembers_what_it_cosigned_across_a_restart() {
    let home = tempfile::tempdir().unwrap();
    let (key, vkey) = init(home.path(), "witness.example.com/w1");
    let state = home.path().join("state.json");
    let log = Log::new(ORIGIN, 6, 0);
    let witness = Witness::start(home.path(), &key, &state, &[log.vkey()]);
    assert_eq!(witness.add(&body(0, &[], &log.note(5))).0, 200);
    drop(witness);

    // Restarted on the same state: a rollback to 3 is refused, 409 naming 5.
    let witness = Witness::start(home.path(), &key, &state, &[log.vkey()]);
    let (status, _, size) = witness.add(&body(0, &[], &log.note(3)));
    assert_eq!((status, size.as_str()), (409, "5\n"));
    let (status, _, message) = witness.add(&body(5, &[], &Log::new(ORIGIN, 5, 1).note(5)));
    assert_eq!(status, 422, "{message}");
    // The log grows on from 5.
    let (status, _, line) = witness.add(&body(5, &log.proof(5, 6), &log.note(6)));
    assert_eq!(status, 200, "{line}");

    // Monitors read the last checkpoint cosigned, by the SHA-256 of the origin.
    let hash: String = {
        use sha2::Digest as _;
        sha2::Sha256::digest(ORIGIN.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let (status, note) = witness.get(&format!("/{hash}/checkpoint"));
    assert_eq!(status, 200, "{note}");
    assert!(note.starts_with(&format!("{ORIGIN}\n6\n")), "{note}");
    let policy = WitnessPolicy::new(vec![vkey], 1).unwrap();
    assert!(policy.check(&note).is_ok());
    let keys = tlog::log_keys(vec![LogKey::of_signer(&log.key)]);
    assert_eq!(keys.verify(&note).unwrap().size(), 6);
    assert_eq!(
        witness.get(&format!("/{}/checkpoint", "0".repeat(64))).0,
        404
    );
}

#[test]
fn verify_and_audit_require_k_of_n_witnesses_of_the_servers_checkpoint() {
    let env = start();
    let key = env.standard_agent("buyer");
    let first = env.authorize(&key, "42.50", "USD", "software");
    first.ok();
    env.authorize(&key, "1", "USD", "software").ok();
    let token = first.json()["verdict_token"].as_str().unwrap().to_owned();
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let decision: Value = loop {
        let out = env.org(&["decisions", "get", &id, "--json"]);
        out.ok();
        let decision = out.json();
        if decision["log"]["checkpoint"]
            .as_str()
            .is_some_and(|c| c.contains("\n2\n"))
        {
            break decision;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not logged: {}",
            out.stdout
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let note = decision["log"]["checkpoint"].as_str().unwrap().to_owned();
    let origin = note.lines().next().unwrap().to_owned();
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);

    // The log's verifier key (its environment's log key), from the key set; the other
    // environment's key is another one. Two witnesses are given it.
    let vkeys = |origin: &str| {
        let out = env.offline(&["witness", "log-keys", "--origin", origin, "--jwks", &jwks]);
        out.ok();
        out.stdout
            .lines()
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    let log_vkeys = vkeys(&origin);
    assert_eq!(log_vkeys.len(), 1, "{log_vkeys:?}");
    assert!(log_vkeys[0].starts_with(&format!("{origin}+")));
    let live = vkeys(&origin.replace("/sandbox", "/live"));
    assert_eq!(live.len(), 1);
    assert_ne!(
        live[0].rsplit('+').next(),
        log_vkeys[0].rsplit('+').next(),
        "{live:?}"
    );
    env.offline(&["witness", "log-keys", "--origin", "a b", "--jwks", &jwks])
        .code(2)
        .stderr_has("cannot name a log");
    let home = env.home.path();
    let (key1, w1) = init(home, "w1.example/witness");
    let (key2, w2) = init(home, "w2.example/witness");
    let witness1 = Witness::start(home, &key1, &home.join("w1.json"), &log_vkeys);
    let witness2 = Witness::start(home, &key2, &home.join("w2.json"), &log_vkeys);
    let (status, _, line1) = witness1.add(&body(0, &[], &note));
    assert_eq!(status, 200, "{line1}");
    let (status, _, line2) = witness2.add(&body(0, &[], &note));
    assert_eq!(status, 200, "{line2}");

    // The decision with the checkpoint cosigned by w1 only, and by both.
    let with_checkpoint = |name: &str, note: String| {
        let mut decision = decision.clone();
        decision["log"]["checkpoint"] = Value::from(note);
        env.write(name, &decision.to_string())
    };
    let by_one = with_checkpoint("by-one.json", format!("{note}{line1}"));
    let by_both = with_checkpoint("by-both.json", format!("{note}{line1}{line2}"));
    let (w1, w2) = (w1.to_string(), w2.to_string());
    let verify = |log: &str, extra: &[&str]| {
        let mut args = vec!["--jwks", &jwks, "--witness", &w1, "--witness", &w2];
        args.extend_from_slice(extra);
        env.verify_logged(&token, "42.5", log, &args)
    };
    verify(&by_both, &[])
        .ok()
        .stdout_has(&format!("in log {origin}, leaf 0 of 2"))
        .stdout_has(
            "cosigned by 2 of 2 witnesses (2 required): w1.example/witness, w2.example/witness",
        );
    verify(&by_one, &[])
        .code(6)
        .stderr_has("not witnessed as required: the checkpoint carries valid cosignatures of 1 of the 2 witnesses, 2 required; missing: w2.example/witness");
    verify(&by_one, &["--witnesses-required", "1"])
        .ok()
        .stdout_has("cosigned by 1 of 2 witnesses (1 required): w1.example/witness");
    // The server's checkpoint as served, with no cosignature: refused.
    let bare = with_checkpoint("bare.json", note.clone());
    verify(&bare, &["--witnesses-required", "1"])
        .code(6)
        .stderr_has("valid cosignatures of 0 of the 2 witnesses, 1 required");
    // A cosignature altered under w2's name and key id: the note is refused, whatever k.
    let mut altered = line2.clone();
    let at = altered.len() - 10;
    altered.replace_range(
        at..at + 1,
        if &altered[at..at + 1] == "A" {
            "B"
        } else {
            "A"
        },
    );
    let forged = with_checkpoint("forged.json", format!("{note}{line1}{altered}"));
    verify(&forged, &["--witnesses-required", "1"])
        .code(6)
        .stderr_has("the cosignature of witness \"w2.example/witness\" does not verify");
    // Usage: a key that is not a witness's, k out of range, --witness without --log.
    verify(&by_both, &["--witness", &log_vkeys[0]])
        .code(2)
        .stderr_has("not 0x04 (an ed25519 cosignature/v1 key)");
    verify(&by_both, &["--witnesses-required", "3"])
        .code(2)
        .stderr_has("needs 1 to 2 cosignatures required, not 3");
    for (transaction, says) in [
        (
            &[
                "--amount",
                "42.5",
                "--currency",
                "USD",
                "--recipient",
                "vendor:acme",
            ][..],
            "required arguments were not provided:\n  --log <FILE>",
        ),
        (
            &["--signature-only"],
            "'--signature-only' cannot be used with '--witness <VKEY>'",
        ),
    ] {
        let mut args = vec!["verify", &token, "--jwks", &jwks, "--issuer", &env.issuer];
        args.extend_from_slice(transaction);
        args.extend(["--sandbox", "--witness", &w1]);
        env.offline(&args).code(2).stderr_has(says);
    }

    // audit, offline: the export of both decisions and the cosigned checkpoint.
    let export = env.path("export.ndjson").display().to_string();
    env.org(&["export", "decisions", "--output", &export]).ok();
    let state = env.path("audit.json").display().to_string();
    let audit = |checkpoint: &str, extra: &[&str]| {
        let file = env.write("head.note", checkpoint);
        let mut args = vec![
            "audit",
            "--state",
            &state,
            "--export",
            &export,
            "--checkpoint",
            &file,
            "--jwks",
            &jwks,
            "--witness",
            &w1,
            "--witness",
            &w2,
        ];
        args.extend_from_slice(extra);
        env.offline(&args)
    };
    audit(&format!("{note}{line1}"), &[])
        .code(8)
        .stderr_has("not witnessed as required: the checkpoint carries valid cosignatures of 1 of the 2 witnesses, 2 required; missing: w2.example/witness; the state is kept");
    assert!(!std::path::Path::new(&state).exists());
    audit(&format!("{note}{line1}"), &["--witnesses-required", "1"])
        .ok()
        .stdout_has("at 2 decisions")
        .stdout_has("cosigned by 1 of 2 witnesses (1 required): w1.example/witness");
    audit(&format!("{note}{line1}{line2}"), &[])
        .ok()
        .stdout_has("cosigned by 2 of 2 witnesses (2 required)");
    drop((witness1, witness2));
}

/// The decision `id` as read, once `ready` holds of its `log.checkpoint` (polled, 20 s at
/// most).
pub(crate) fn read_when(env: &Env, id: &str, ready: impl Fn(&str) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = env.org(&["decisions", "get", id, "--json"]);
        out.ok();
        let decision = out.json();
        if decision["log"]["checkpoint"].as_str().is_some_and(&ready) {
            return decision;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not shown as awaited: {}",
            out.stdout
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Waits until `find` is in what the servers logged (polled, 20 s at most): the text.
pub(crate) fn logged(find: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let log = crate::support::server_log();
        if find(&log) {
            return log;
        }
        assert!(std::time::Instant::now() < deadline, "not logged:\n{log}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// One allowed decision of 1 USD by the agent `key`: its id and its verdict token.
pub(crate) fn decide(env: &Env, key: &str) -> (String, String) {
    let out = env.authorize(key, "1", "USD", "software");
    out.ok();
    let json = out.json();
    let field = |name: &str| json[name].as_str().unwrap().to_owned();
    (field("id"), field("verdict_token"))
}

/// Two real `mandate witness` processes following a server's sandbox log, named after the
/// test (`w1.<tag>.example/witness`), so that the lines and metrics of this process's
/// servers a test reads are its own.
pub(crate) struct Witnessed {
    /// The log's origin.
    pub(crate) origin: String,
    /// The key set fetched from the server (a file).
    pub(crate) jwks: String,
    /// The two witnesses' verifier keys.
    pub(crate) keys: [WitnessKey; 2],
    /// The running witnesses, stopped when this is dropped.
    pub(crate) witnesses: [Witness; 2],
}

impl Witnessed {
    /// Once the decision `first` is shown in a checkpoint (readers see the log), starts two
    /// witnesses given the log's verifier keys (from the key set, `mandate witness
    /// log-keys`) and restarts the server submitting to them, then to `more`.
    pub(crate) fn start(
        env: &mut Env,
        tag: &str,
        first: &str,
        more: Vec<mandate_server::workers::witness::WitnessTarget>,
    ) -> Self {
        let note = read_when(env, first, |c| c.contains("\n1\n"))["log"]["checkpoint"]
            .as_str()
            .unwrap()
            .to_owned();
        let origin = note.lines().next().unwrap().to_owned();
        let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
        jwks.ok();
        let jwks = env.write("jwks.json", &jwks.stdout);
        // The cache `verify` reads when not given --jwks.
        env.offline(&["jwks", "fetch", &env.public]).ok();
        let out = env.offline(&["witness", "log-keys", "--origin", &origin, "--jwks", &jwks]);
        out.ok();
        let log_vkeys: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
        let home = env.home.path().to_owned();
        let start = |n: u8| {
            let (key, vkey) = init(&home, &format!("w{n}.{tag}.example/witness"));
            let state = home.join(format!("w{n}.json"));
            (Witness::start(&home, &key, &state, &log_vkeys), vkey)
        };
        let ((witness1, w1), (witness2, w2)) = (start(1), start(2));
        let target = |w: &Witness, vkey: &WitnessKey| {
            mandate_server::workers::witness::WitnessTarget::parse(&format!("{}={vkey}", w.url))
                .unwrap()
        };
        let mut targets = vec![target(&witness1, &w1), target(&witness2, &w2)];
        targets.extend(more);
        env.set_witnesses(targets);
        Self {
            origin,
            jwks,
            keys: [w1, w2],
            witnesses: [witness1, witness2],
        }
    }

    /// Both witnesses required.
    pub(crate) fn policy(&self) -> WitnessPolicy {
        WitnessPolicy::new(self.keys.to_vec(), 2).unwrap()
    }

    /// The names of the two witnesses.
    pub(crate) fn names(&self) -> [String; 2] {
        self.keys.clone().map(|k| k.name().to_owned())
    }

    /// What `verify --log` is given to require both witnesses: the key set and their keys.
    pub(crate) fn flags(&self) -> Vec<String> {
        let mut flags = vec!["--jwks".to_owned(), self.jwks.clone()];
        for key in &self.keys {
            flags.extend(["--witness".to_owned(), key.to_string()]);
        }
        flags
    }

    /// `mandate verify --log FILE --witness W1 --witness W2` of the 1 USD verdict `token`.
    pub(crate) fn verify(&self, env: &Env, token: &str, file: &str) -> Out {
        let flags = self.flags();
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        env.verify_logged(token, "1", file, &flags)
    }

    /// Whether each witness says, in what it logged, that it cosigned the log at `size`
    /// (waited for a while).
    pub(crate) fn both_cosigned(&self, size: u64) -> bool {
        let line = format!("cosigned {} at {size}", self.origin);
        self.witnesses.iter().all(|w| w.said(&line).0)
    }

    /// Whether either witness has said so far that it cosigned the log at `size`.
    pub(crate) fn any_cosigned_yet(&self, size: u64) -> bool {
        let line = format!("cosigned {} at {size}", self.origin);
        self.witnesses
            .iter()
            .any(|w| w.stderr.lock().unwrap().contains(&line))
    }

    /// Waits until this server has logged, at error level, each witness refusing a
    /// checkpoint of its log as `says` (`"refused the checkpoint"` for any): the lines.
    pub(crate) fn refusals(&self, says: &str) -> Vec<String> {
        let names = self.names();
        let lines = |log: &str| -> Vec<String> {
            log.lines()
                .filter(|l| l.contains(&self.origin) && l.contains(says))
                .map(str::to_owned)
                .collect()
        };
        let log = logged(|log| {
            let lines = lines(log);
            names
                .iter()
                .all(|n| lines.iter().any(|l| l.contains(&format!("witness {n} ("))))
        });
        let lines = lines(&log);
        for line in &lines {
            assert!(line.contains("ERROR"), "{line}");
        }
        lines
    }
}

/// The server on `env` has each checkpoint cosigned by two real witnesses (a third, down,
/// never holds the log), and, its database rolled back to a backup (the SQLite file and
/// its WAL; a PostgreSQL database copied back whole; every Citus node's), has its next
/// checkpoints refused by both, which it says at error level and counts, and which
/// `verify --log --witness` refuses. `tag` names this test's witnesses.
pub(crate) fn witnesses_refuse_a_rolled_back_database(mut env: Env, tag: &str) {
    crate::support::server_log();
    // The process-wide metrics recorder, from here on.
    env.metrics();
    let key = env.standard_agent("buyer");
    // The log's first checkpoint, shown as signed: no witness is configured yet.
    let (first, _) = decide(&env, &key);
    // A third witness is down: it never holds the log.
    let home = env.home.path().to_owned();
    let w3_name = format!("w3.{tag}.example/witness");
    let (_, w3) = init(&home, &w3_name);
    let down = crate::support::closed_port_url();
    let down_target =
        mandate_server::workers::witness::WitnessTarget::parse(&format!("{down}={w3}")).unwrap();
    let witnessed = Witnessed::start(&mut env, tag, &first, vec![down_target]);
    let origin = witnessed.origin.clone();
    let [w1_name, w2_name] = witnessed.names();
    let policy = witnessed.policy();
    let both = &policy;
    let cosigned =
        |size: u64| move |c: &str| c.contains(&format!("\n{size}\n")) && both.check(c).is_ok();

    // Each new checkpoint carries both cosignatures: the first submitted from size 0, the
    // next with the consistency proof from the size each witness cosigned.
    let (second, _) = decide(&env, &key);
    read_when(&env, &second, cosigned(2));
    env.back_up();
    let (third, token) = decide(&env, &key);
    decide(&env, &key);
    let decision = read_when(&env, &third, cosigned(4));
    let file = env.write("decision.json", &decision.to_string());
    witnessed
        .verify(&env, &token, &file)
        .ok()
        .stdout_has(&format!("in log {origin}, leaf 2 of 4"))
        .stdout_has("cosigned by 2 of 2 witnesses (2 required)");
    // The export's checkpoint is the cosigned one: an audit requiring both accepts it.
    let state = env.path("audit.json").display().to_string();
    let [w1, w2] = witnessed.keys.clone().map(|k| k.to_string());
    env.org(&[
        "audit",
        "--state",
        &state,
        "--witness",
        &w1,
        "--witness",
        &w2,
    ])
    .ok()
    .stdout_has("at 4 decisions")
    .stdout_has("cosigned by 2 of 2 witnesses (2 required)");
    assert!(witnessed.both_cosigned(4));
    // Only the witness that is down was said, at warning level, once a server (left out
    // for a while after).
    let log = crate::support::server_log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(&origin)).collect();
    assert!(!lines.is_empty() && lines.len() <= 2, "{lines:?}");
    for line in &lines {
        assert!(
            line.contains("WARN")
                && line.contains(&format!(
                    "witness {w3_name} ({down}/) did not cosign the checkpoint of {origin} at size "
                ))
                && line.contains(": connection failed")
                && line.contains("it is left out for 30 s"),
            "{line}"
        );
    }
    assert!(lines[0].contains(" at size 2: "), "{}", lines[0]);

    // The database rolled back to 2 decisions: the next checkpoint (3) is smaller than what
    // the witnesses cosigned (4). Both refuse; the server says so at error level, counts it
    // and shows the checkpoint without their cosignatures, which verify then refuses.
    env.restore();
    let (rolled, token) = decide(&env, &key);
    let decision = read_when(&env, &rolled, |c| c.contains("\n3\n"));
    let note = decision["log"]["checkpoint"].as_str().unwrap();
    assert_eq!(
        SignedNote::parse(note).unwrap().signatures().len(),
        1,
        "{note}"
    );
    let refusals = witnessed.refusals("refused the checkpoint");
    for name in [&w1_name, &w2_name] {
        let line = refusals
            .iter()
            .find(|l| l.contains(&format!("witness {name} (")))
            .unwrap();
        assert!(
            line.contains(&format!(
                "refused the checkpoint of {origin} at size 3: it has cosigned the log at size 4"
            )),
            "{line}"
        );
        assert!(
            line.contains("this database may have been rolled back or forked"),
            "{line}"
        );
    }
    let file = env.write("rolled.json", &decision.to_string());
    witnessed
        .verify(&env, &token, &file)
        .code(6)
        .stderr_has("valid cosignatures of 0 of the 2 witnesses, 2 required");

    // Grown past what they cosigned: from their size the proof does not hold (a fork).
    let (forked, _) = decide(&env, &key);
    decide(&env, &key);
    read_when(&env, &forked, |c| {
        c.contains("\n5\n") && !c.contains(&format!("— {w1_name}"))
    });
    logged(|log| {
        log.lines().any(|l| {
            l.contains(&origin)
                && l.contains("as not extending the one it cosigned at size 4")
                && l.contains("The witness has cosigned a different log")
        })
    });
    // Each refusal counted, by witness and outcome.
    let metrics = env.metrics();
    for (name, outcome) in [
        (&w1_name, "rolled_back"),
        (&w2_name, "rolled_back"),
        (&w1_name, "forked"),
        (&w2_name, "cosigned"),
        (&w3_name, "failed"),
        (&w3_name, "skipped"),
    ] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("mandate_witness_submissions_total{")
                    && l.contains(&format!("witness=\"{name}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))),
            "{name} {outcome}: {metrics}"
        );
    }
    // The round trips of the witnesses that answered are measured; the one down has none.
    let round_trips = |name: &str| {
        metrics.lines().any(|l| {
            l.starts_with("mandate_witness_round_trip_seconds_count{")
                && l.contains(&format!("witness=\"{name}\""))
        })
    };
    assert!(round_trips(&w1_name) && round_trips(&w2_name), "{metrics}");
    assert!(!round_trips(&w3_name), "{metrics}");
    drop(witnessed);
}

#[test]
fn the_server_has_its_checkpoints_cosigned_and_says_when_witnesses_refuse_a_rollback() {
    witnesses_refuse_a_rolled_back_database(start(), "sqlite");
}

#[test]
fn on_postgres_witnesses_refuse_a_database_restored_from_a_dump() {
    if let Some(env) = start_on(Engine::Postgres) {
        witnesses_refuse_a_rolled_back_database(env, "postgres");
    }
}

#[test]
fn on_citus_witnesses_refuse_every_node_restored_from_a_backup() {
    if let Some(env) = start_on(Engine::Citus) {
        witnesses_refuse_a_rolled_back_database(env, "citus");
    }
}
