//! `verify --log`: a verdict proven to be in its issuer's decision log, against a real
//! server's decision read and key set; a tampered proof, another log than `--log-origin`
//! or a missing log key is refused. `jwks fetch` lists the log keys with their use.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::start;

#[test]
fn verify_log_accepts_a_logged_verdict_and_refuses_a_tampered_proof() {
    let env = start();
    let key = env.standard_agent("buyer");
    // Two decisions, so that the first one's inclusion proof is not empty.
    let first = env.authorize(&key, "42.50", "USD", "software");
    first.ok();
    env.authorize(&key, "1", "USD", "software").ok();
    let token = first.json()["verdict_token"].as_str().unwrap().to_owned();
    let id = first.json()["id"].as_str().unwrap().to_owned();

    // The decision as read, once a checkpoint covers both decisions.
    let deadline = Instant::now() + Duration::from_secs(20);
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
        assert!(Instant::now() < deadline, "not logged: {}", out.stdout);
        std::thread::sleep(Duration::from_millis(100));
    };
    let decision_file = env.write("decision.json", &decision.to_string());
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);
    let verify = |log: &str, extra: &[&str]| {
        let mut args = vec!["--jwks", jwks.as_str()];
        args.extend_from_slice(extra);
        env.verify_logged(&token, "42.5", log, &args)
    };

    // Accepted: the log and the leaf are printed (the whole decision, or its log alone).
    let accepted = verify(&decision_file, &[]);
    accepted
        .ok()
        .stdout_has("valid allow verdict, matches the transaction")
        .stdout_has("in log ")
        .stdout_has("/sandbox, leaf 0 of 2");
    // --log-origin: the log printed is accepted; the organization's live log, or another
    // service's, is refused before anything else is checked.
    let origin = accepted
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("in log "))
        .and_then(|rest| rest.split_once(", leaf "))
        .map(|(origin, _)| origin.to_owned())
        .unwrap();
    assert!(origin.ends_with("/sandbox"), "{origin}");
    verify(&decision_file, &["--log-origin", &origin])
        .ok()
        .stdout_has(&format!("in log {origin}, leaf 0 of 2"));
    let live = origin.replace("/sandbox", "/live");
    verify(&decision_file, &["--log-origin", &live])
        .code(6)
        .stderr_has(&format!(
            "not proven to be in the log {live}: the checkpoint is of the log {origin}"
        ));
    verify(
        &decision_file,
        &["--log-origin", "verdicts.example.com/log/org_x/sandbox"],
    )
    .code(6);
    let entry_file = env.write("log.json", &decision["log"].to_string());
    verify(&entry_file, &["--json"])
        .ok()
        .stderr_has(", leaf 0 of 2");

    // A tampered proof: its first hash replaced by another's.
    let mut tampered = decision["log"].clone();
    let proof = tampered["inclusion_proof"].as_array_mut().unwrap();
    assert!(!proof.is_empty(), "{decision}");
    proof[0] = Value::from("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    let tampered_file = env.write("tampered.json", &tampered.to_string());
    verify(&tampered_file, &[])
        .code(6)
        .stderr_has("not proven to be in the log");
    // Another leaf index: refused too.
    let mut moved = decision["log"].clone();
    moved["index"] = Value::from(1);
    let moved_file = env.write("moved.json", &moved.to_string());
    verify(&moved_file, &[]).code(6);

    // A key set without the log keys: nothing to check the checkpoint with (exit 2).
    let mut set: Value = serde_json::from_str(&std::fs::read_to_string(&jwks).unwrap()).unwrap();
    set["keys"]
        .as_array_mut()
        .unwrap()
        .retain(|k| k["use"] != "tlog-checkpoint");
    let no_log_keys = env.write("verdict-keys.json", &set.to_string());
    env.verify_logged(&token, "42.5", &decision_file, &["--jwks", &no_log_keys])
        .code(2)
        .stderr_has("no log key");
    // Without --log, the same token is accepted as before, and nothing about a log is said.
    let plain = env.offline(&[
        "verify",
        &token,
        "--jwks",
        &no_log_keys,
        "--issuer",
        &env.issuer,
        "--sandbox",
        "--amount",
        "42.5",
        "--currency",
        "USD",
        "--recipient",
        "vendor:acme",
    ]);
    plain.ok();
    assert!(!plain.stdout.contains(", leaf "), "{}", plain.stdout);
}

#[test]
fn jwks_fetch_lists_each_key_with_its_use_and_counts_both_kinds() {
    let env = start();
    let out = env.offline(&["jwks", "fetch", &env.public]);
    out.ok();
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["KID", "USE", "ALG", "CRV"], "{}", out.stdout);
    for (kid, key_use, alg) in [
        ("live-1", "sig", "ES256"),
        ("sandbox-1", "sig", "ES256"),
        ("log-live-1", "tlog-checkpoint", "-"),
        ("log-sandbox-1", "tlog-checkpoint", "-"),
    ] {
        assert!(
            rows.contains(&vec![kid, key_use, alg, "P-256"]),
            "no row {kid} {key_use} {alg}:\n{}",
            out.stdout
        );
    }
    assert_eq!(out.field("keys"), "4 (2 verdict, 2 log)");
}
