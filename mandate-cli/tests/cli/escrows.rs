//! `escrows`: funding from a real allow decision, reading, every transition, and errors.

use crate::support::{Env, Out, start};

/// An allow decision of the agent `key` for `amount` USD to vendor:acme; its id.
fn allow(env: &Env, key: &str, amount: &str) -> String {
    let out = env.authorize(key, amount, "USD", "software");
    out.ok();
    out.json()["id"].as_str().unwrap().to_owned()
}

/// `mandate escrows create` for agt_buyer and vendor:acme, with the organization key.
fn fund(env: &Env, amount: &str, decision: &str, extra: &[&str]) -> Out {
    let mut args = vec![
        "escrows",
        "create",
        "--amount",
        amount,
        "--currency",
        "USD",
        "--buyer",
        "agt_buyer",
        "--seller",
        "vendor:acme",
        "--decision",
        decision,
    ];
    args.extend_from_slice(extra);
    env.org(&args)
}

/// The states of an escrow's history, oldest first.
fn states(escrow: &serde_json::Value) -> Vec<String> {
    escrow["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["state"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn escrows_fund_from_an_allow_read_and_walk_every_transition() {
    let env = start();
    let key = env.standard_agent("buyer");

    // Funded from a real allow decision; the amount keeps its digits.
    let decision = allow(&env, &key, "42.50");
    let created = fund(
        &env,
        "42.50",
        &decision,
        &[
            "--arbiter",
            "role:legal",
            "--idempotency-key",
            "test-fund-1",
        ],
    );
    created.ok();
    let id = created.field("id");
    assert!(id.starts_with("esc_"), "{id}");
    assert_eq!(created.field("environment"), "sandbox");
    assert_eq!(created.field("state"), "funded");
    assert_eq!(created.field("disputed"), "false");
    assert_eq!(created.field("amount"), "42.50");
    assert_eq!(created.field("buyer"), "agt_buyer");
    assert_eq!(created.field("seller"), "vendor:acme");
    assert_eq!(created.field("decision"), decision);
    assert_eq!(created.field("arbiter"), "role:legal");
    // The history is a small table under the fields; `escrow` (a repeat of id) is not shown.
    created
        .stdout_has("\n\nSTATE   DISPUTED  AT")
        .stdout_has("ACTOR\nfunded  false     ")
        .stdout_has("  funder\n");
    // The environment comes right after the id; no organization id is printed.
    assert!(
        created
            .stdout
            .starts_with(&format!("id           {id}\nenvironment  sandbox\n")),
        "{}",
        created.stdout
    );
    assert!(!created.stdout.contains("org_"), "{}", created.stdout);
    assert!(!created.stdout.contains("\nescrow "), "{}", created.stdout);

    // The same Idempotency-Key again: the stored escrow, not a second one (nor a refusal).
    let again = fund(
        &env,
        "42.50",
        &decision,
        &[
            "--arbiter",
            "role:legal",
            "--idempotency-key",
            "test-fund-1",
            "--json",
        ],
    );
    again.ok().stderr_has("replayed");
    let escrow = again.json();
    assert_eq!(escrow["id"], id.as_str());
    assert_eq!(escrow["amount"].to_string(), "42.50");

    // Read: as a table and as the server's JSON; any key that holds the id reads it.
    let got = env.org(&["escrows", "get", &id]);
    got.ok().stdout_has("STATE").stdout_has("funded");
    assert_eq!(got.field("state"), "funded");
    let got = env.with_key(&key, &["escrows", "get", &id, "--json"]);
    got.ok();
    assert_eq!(got.json()["amount"].to_string(), "42.50");
    assert_eq!(states(&got.json()), ["funded"]);

    // funded -> delivered -> released.
    let delivered = env.org(&["escrows", "deliver", &id]);
    delivered.ok();
    assert_eq!(delivered.field("state"), "delivered");
    assert!(
        delivered.stdout.contains("\ndelivered  false"),
        "{}",
        delivered.stdout
    );
    let released = env.org(&["escrows", "release", &id, "--json"]);
    released.ok();
    let released = released.json();
    assert_eq!(released["state"], "released");
    assert_eq!(states(&released), ["funded", "delivered", "released"]);

    // funded -> refunded; 10 funds a decision of 10.00 (exact decimal comparison).
    let decision = allow(&env, &key, "10.00");
    let second = fund(&env, "10", &decision, &[]);
    second.ok();
    let second = second.field("id");
    let refunded = env.org(&["escrows", "refund", &second]);
    refunded.ok();
    assert_eq!(refunded.field("state"), "refunded");
    assert_eq!(refunded.field("arbiter"), "-");

    // funded -> disputed (the state stays) -> released (a dispute can end by release).
    let decision = allow(&env, &key, "5");
    let third = fund(&env, "5", &decision, &["--json"]);
    third.ok();
    let third = third.json()["id"].as_str().unwrap().to_owned();
    let disputed = env.org(&["escrows", "dispute", &third]);
    disputed.ok();
    assert_eq!(disputed.field("state"), "funded");
    assert_eq!(disputed.field("disputed"), "true");
    let ended = env.org(&["escrows", "release", &third, "--json"]);
    ended.ok();
    let ended = ended.json();
    assert_eq!(
        (ended["state"].as_str(), ended["disputed"].as_bool()),
        (Some("released"), Some(true))
    );
    assert_eq!(states(&ended), ["funded", "funded", "released"]);

    // Each step fired its event.
    let events = env.org(&["events", "list", "--all", "--json"]);
    events.ok();
    let types: Vec<String> = events.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .filter(|t| t.starts_with("escrow."))
        .collect();
    assert_eq!(types.len(), 8, "{types:?}");
}

#[test]
fn escrow_errors_print_the_servers_message_and_exit_1() {
    let env = start();
    let key = env.standard_agent("buyer");
    let decision = allow(&env, &key, "42.50");
    let id = {
        let out = fund(&env, "42.50", &decision, &["--json"]);
        out.ok();
        out.json()["id"].as_str().unwrap().to_owned()
    };

    // A second escrow from the same decision: its nonce is spent.
    fund(&env, "42.50", &decision, &[])
        .code(1)
        .stderr_has("invalid_request (HTTP 400)")
        .stderr_has("has already funded an escrow (its nonce is spent)")
        .stderr_has("request id: req_");
    // With --json the envelope comes on stdout as well.
    let refused = fund(&env, "42.50", &decision, &["--json"]);
    refused.code(1);
    assert_eq!(refused.json()["error"]["code"], "invalid_request");

    // Release before deliver.
    env.org(&["escrows", "release", &id])
        .code(1)
        .stderr_has("escrow is funded but not delivered; deliver it first");
    // After the end, every action is refused.
    env.org(&["escrows", "refund", &id]).ok();
    env.org(&["escrows", "deliver", &id])
        .code(1)
        .stderr_has("escrow is refunded, which is final");

    // Funding that does not match the decision, from an agent key, an unknown escrow.
    let other = allow(&env, &key, "20");
    fund(&env, "20.01", &other, &[])
        .code(1)
        .stderr_has("amount 20.01 does not match decision");
    env.with_key(
        &key,
        &[
            "escrows",
            "create",
            "--amount",
            "20",
            "--currency",
            "USD",
            "--buyer",
            "agt_buyer",
            "--seller",
            "vendor:acme",
            "--decision",
            &other,
        ],
    )
    .code(1)
    .stderr_has("forbidden (HTTP 403)");
    env.org(&["escrows", "get", "esc_nosuchescrow"])
        .code(1)
        .stderr_has("not_found (HTTP 404)");

    // Usage errors never reach the server.
    fund(&env, "1e3", &other, &[])
        .code(2)
        .stderr_has("plain decimal");
    fund(&env, "20", "rev_notadecision", &[]).code(2);
    env.org(&["escrows", "get", "nope"]).code(2);
    env.org(&["escrows", "create", "--amount", "20"])
        .code(2)
        .stderr_has("--currency");
}
