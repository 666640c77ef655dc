//! `verify` and `jwks fetch`: a counterparty's offline checks.

use serde_json::Value;

use crate::support::{Out, closed_port_url, run_in, start};

struct Verdict {
    token: String,
    iat: i64,
}

fn verdict(out: &Out) -> Verdict {
    let body = out.json();
    Verdict {
        token: body["verdict_token"].as_str().unwrap().to_owned(),
        iat: body["iat"].as_i64().unwrap(),
    }
}

#[test]
fn verify_accepts_a_real_verdict_and_rejects_bad_ones() {
    let env = start();
    let key = env.standard_agent("buyer");
    let allow = env.authorize(&key, "42.50", "USD", "software");
    allow.ok();
    let allow = verdict(&allow);
    let other = env.authorize(&key, "49.99", "USD", "software");
    other.ok();
    let other = verdict(&other);

    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);
    let store = env.path("nonces").display().to_string();
    let check = |token: &str, extra: &[&str]| {
        let mut args = vec!["verify", token, "--jwks", &jwks, "--issuer", &env.issuer];
        args.extend_from_slice(extra);
        env.offline(&args)
    };
    let matching = [
        "--amount",
        "42.5",
        "--currency",
        "USD",
        "--recipient",
        "vendor:acme",
    ];

    // Valid, matching, first use: exit 0, the claims printed.
    let mut first = matching.to_vec();
    first.extend(["--replay-store", &store]);
    let accepted = check(&allow.token, &first);
    accepted
        .ok()
        .stdout_has("valid allow verdict, matches the transaction");
    assert_eq!(accepted.field("request.amount"), "42.50");
    // The same nonce again: a replay.
    check(&allow.token, &first).code(6).stderr_has("replay");
    // JSON output is the claims.
    let claims = check(&allow.token, &["--json"]);
    claims.ok().stderr_has("not compared");
    assert_eq!(claims.json()["request"]["amount"].to_string(), "42.50");
    assert_eq!(claims.json()["iss"], env.issuer.as_str());

    // Tampered: the claims of one verdict under the signature of another.
    let a: Vec<&str> = allow.token.split('.').collect();
    let b: Vec<&str> = other.token.split('.').collect();
    let tampered = format!("{}.{}.{}", a[0], b[1], a[2]);
    check(&tampered, &[])
        .code(6)
        .stderr_has("signature does not verify");
    check("not-a-token", &[]).code(6).stderr_has("malformed");

    // Expired: five minutes after issue.
    let later = (allow.iat + 301).to_string();
    check(&allow.token, &["--now", &later])
        .code(6)
        .stderr_has("expired");
    let just_before = (allow.iat + 299).to_string();
    check(&allow.token, &["--now", &just_before]).ok();

    // Wrong amount, currency, recipient.
    check(&allow.token, &["--amount", "42.51"])
        .code(6)
        .stderr_has("amount 42.51 does not match the signed amount 42.50");
    check(
        &allow.token,
        &["--currency", "EUR", "--recipient", "vendor:other"],
    )
    .code(6)
    .stderr_has("currency EUR")
    .stderr_has("recipient vendor:other");

    // Wrong issuer.
    env.offline(&[
        "verify",
        &allow.token,
        "--jwks",
        &jwks,
        "--issuer",
        "https://verdicts.evil.example",
    ])
    .code(6)
    .stderr_has("wrong issuer");

    // A valid token whose verdict is not allow.
    let review = env.authorize(&key, "55", "USD", "software");
    review.code(5);
    let refused = check(&verdict(&review).token, &[]);
    refused.code(6).stderr_has("not allow");
    assert_eq!(refused.field("verdict"), "review");

    // The key set must come from somewhere (a fresh home has no cache), and --jwks needs
    // --issuer.
    let fresh = tempfile::tempdir().unwrap();
    run_in(fresh.path(), &["verify", &allow.token], &[], None)
        .code(2)
        .stderr_has("jwks fetch");
    env.offline(&["verify", &allow.token, "--jwks", &jwks])
        .code(2)
        .stderr_has("--issuer");
    // The token may come on stdin.
    env.run_stdin(
        &["verify", "--jwks", &jwks, "--issuer", &env.issuer],
        &[],
        &format!("{}\n", allow.token),
    )
    .ok();
}

#[test]
fn verify_checks_webhook_events_with_event() {
    let env = start();
    let key = env.standard_agent("buyer");
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    let jwks = env.write("jwks.json", &jwks.stdout);
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let event = env.sign_event("ping", now);
    let store = env.path("events").display().to_string();
    let args = |token: &str| {
        vec![
            "verify".to_owned(),
            token.to_owned(),
            "--event".into(),
            "--jwks".into(),
            jwks.clone(),
            "--issuer".into(),
            env.issuer.clone(),
            "--replay-store".into(),
            store.clone(),
        ]
    };
    let run = |token: &str| {
        let args = args(token);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.offline(&args)
    };
    run(&event)
        .ok()
        .stdout_has("valid event")
        .stdout_has("type")
        .stdout_has("ping");
    // Delivered twice (a retry): the event id is a duplicate.
    run(&event).code(6).stderr_has("replay");
    // A verdict is not an event.
    let allow = env.authorize(&key, "1", "USD", "software");
    run(&verdict(&allow).token)
        .code(6)
        .stderr_has("expected a event token, found a verdict token");
    // Transaction flags make no sense for an event.
    env.offline(&["verify", &event, "--event", "--amount", "1"])
        .code(2);
}

#[test]
fn jwks_fetch_caches_the_set_for_verify_for_five_minutes() {
    let env = start();
    let key = env.standard_agent("buyer");
    let allow = env.authorize(&key, "42.50", "USD", "software");
    let allow = verdict(&allow);

    let fetched = env.offline(&["jwks", "fetch", &env.public]);
    fetched.ok().stdout_has("sandbox-1");
    assert_eq!(fetched.field("issuer"), env.issuer);
    let cache: Value = serde_json::from_str(
        &std::fs::read_to_string(env.path("cache/mandate/jwks.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cache["issuer"], env.issuer.as_str());
    let fetched_at = cache["fetched_at"].as_i64().unwrap();

    // From the cache: no --jwks, no --issuer (taken from the cache).
    env.offline(&[
        "verify",
        &allow.token,
        "--amount",
        "42.50",
        "--currency",
        "USD",
        "--recipient",
        "vendor:acme",
    ])
    .ok()
    .stdout_has("matches the transaction");
    // An explicit issuer still wins over the cache's.
    env.offline(&["verify", &allow.token, "--issuer", "https://other.example"])
        .code(6)
        .stderr_has("wrong issuer");
    // A cache older than five minutes is refused with a hint to fetch again.
    let stale = (fetched_at + 300).to_string();
    env.offline(&["verify", &allow.token, "--now", &stale])
        .code(2)
        .stderr_has("fetch it again with `mandate jwks fetch");

    // No key set at that URL: the server's 404, exit 1.
    env.offline(&["jwks", "fetch", &format!("{}/nowhere", env.public)])
        .code(1)
        .stderr_has("not_found");
    // Nothing listening: exit 3.
    env.offline(&["jwks", "fetch", &closed_port_url(), "--retries", "0"])
        .code(3);
}
