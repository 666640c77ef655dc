//! The verdict subcommands: authorize (exit codes, idempotency), reviews, enforcement.

use crate::support::start;

// Authorize

#[test]
fn authorize_exit_codes_say_what_the_verdict_was() {
    let env = start();
    let key = env.standard_agent("buyer");

    let allow = env.authorize(&key, "42.50", "USD", "software");
    allow.ok();
    assert_eq!(allow.json()["verdict"], "allow");
    assert_eq!(allow.json()["request"]["amount"].to_string(), "42.50");
    assert!(
        allow.json()["verdict_token"]
            .as_str()
            .unwrap()
            .contains('.')
    );

    let review = env.authorize(&key, "60", "USD", "software");
    review.code(5);
    assert!(
        review.json()["review"]["id"]
            .as_str()
            .unwrap()
            .starts_with("rev_")
    );
    env.authorize(&key, "10", "USD", "food").code(4);
    env.authorize(&key, "100.01", "USD", "software").code(4);

    // Table output names the verdict and the token.
    let table = env.with_key(
        &key,
        &[
            "authorize",
            "--amount",
            "1",
            "--currency",
            "USD",
            "--recipient",
            "vendor:acme",
            "--category",
            "travel",
        ],
    );
    assert_eq!(table.ok().field("verdict"), "allow");
    assert!(table.field("verdict_token").starts_with("ey"));

    // An organization key cannot authorize: 403, exit 1.
    env.org(&[
        "authorize",
        "--amount",
        "1",
        "--currency",
        "USD",
        "--recipient",
        "vendor:acme",
        "--category",
        "software",
    ])
    .code(1)
    .stderr_has("forbidden (HTTP 403)");
}

#[test]
fn a_retried_post_with_the_same_idempotency_key_never_acts_twice() {
    let env = start();
    let key = env.standard_agent("buyer");
    let args = [
        "authorize",
        "--amount",
        "5",
        "--currency",
        "USD",
        "--recipient",
        "vendor:acme",
        "--category",
        "software",
        "--idempotency-key",
        "order-1234",
        "--json",
    ];
    let first = env.with_key(&key, &args);
    first.ok();
    let again = env.with_key(&key, &args);
    again.ok().stderr_has("replayed");
    assert_eq!(first.json()["id"], again.json()["id"]);
    let decisions = env.org(&["decisions", "list", "--json"]).json();
    assert_eq!(decisions["data"].as_array().unwrap().len(), 1);

    // The same key with another body is a conflict.
    let mut other = args.to_vec();
    other[2] = "6";
    env.with_key(&key, &other)
        .code(1)
        .stderr_has("idempotency_conflict");
}

// Reviews

#[test]
fn reviews_approve_and_deny() {
    let env = start();
    let key = env.standard_agent("buyer");
    let review_of = |amount: &str| {
        let out = env.authorize(&key, amount, "USD", "software");
        out.code(5);
        out.json()["review"]["id"].as_str().unwrap().to_owned()
    };

    let first = review_of("60");
    let approved = env.org(&["reviews", "approve", &first, "--json"]);
    approved.ok();
    let fresh = approved.json();
    assert_eq!(fresh["verdict"], "allow");
    assert!(fresh["supersedes"].as_str().unwrap().starts_with("dec_"));
    assert!(fresh["verdict_token"].is_string());

    let second = review_of("70");
    env.org(&["reviews", "deny", &second, "--reason", "not in budget"])
        .ok()
        .stdout_has("denied")
        .stdout_has("not in budget");

    // A resolved review cannot be resolved again.
    env.org(&["reviews", "approve", &first])
        .code(1)
        .stderr_has("invalid_request")
        .stderr_has("not pending");
    env.org(&["reviews", "deny", "rev_nosuchreview"])
        .code(1)
        .stderr_has("not_found");
}

// Enforcement

#[test]
fn enforcement_get_and_set_switch_what_authorize_returns() {
    let env = start();
    let key = env.standard_agent("buyer");

    assert_eq!(
        env.org(&["enforcement", "get"]).ok().field("mode"),
        "enforce"
    );
    let observe = env.org(&["enforcement", "set", "observe", "--json"]);
    observe.ok();
    assert_eq!(observe.json()["mode"], "observe");

    // Over the limit in observe: allow (exit 0), the policy verdict kept.
    let over = env.authorize(&key, "500", "USD", "software");
    over.ok();
    assert_eq!(over.json()["verdict"], "allow");
    assert_eq!(over.json()["policy_verdict"], "deny_limit");
    assert_eq!(over.json()["mode"], "observe");

    env.org(&["enforcement", "set", "enforce"])
        .ok()
        .stdout_has("enforce");
    env.authorize(&key, "500", "USD", "software").code(4);

    // An agent key cannot read the switch.
    env.with_key(&key, &["enforcement", "get"])
        .code(1)
        .stderr_has("forbidden");
}
