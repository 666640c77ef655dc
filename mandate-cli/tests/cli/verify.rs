//! `verify` and `jwks fetch`: a counterparty's offline checks.

use mandate_core::{JwkSet, P256Signer, Signer as _, VerdictClaims, sign_token};
use serde_json::Value;

use crate::support::{Env, Out, closed_port_url, run_in, start};

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

/// The whole transaction of the tests' verdicts: 42.50 USD to vendor:acme.
const MATCHING: [&str; 6] = [
    "--amount",
    "42.50",
    "--currency",
    "USD",
    "--recipient",
    "vendor:acme",
];

/// `a` then `b`.
fn plus<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<&'a str> {
    [a, b].concat()
}

/// The key set fetched from the test server, written to a file; its path.
fn jwks_file(env: &Env) -> String {
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    env.write("jwks.json", &jwks.stdout)
}

/// `mandate verify TOKEN --jwks FILE --issuer URL` and `extra`.
fn verify_with(env: &Env, jwks: &str, token: &str, extra: &[&str]) -> Out {
    let args = plus(
        &["verify", token, "--jwks", jwks, "--issuer", &env.issuer],
        extra,
    );
    env.offline(&args)
}

#[test]
fn verify_accepts_a_real_verdict_and_rejects_bad_ones() {
    let env = start();
    let key = env.live_standard_agent("buyer");
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

    // Valid, matching, first use: exit 0, the claims and the environment printed.
    let mut first = matching.to_vec();
    first.extend(["--replay-store", &store]);
    let accepted = check(&allow.token, &first);
    accepted
        .ok()
        .stdout_has("valid allow verdict, matches the transaction");
    assert_eq!(accepted.field("request.amount"), "42.50");
    assert_eq!(accepted.field("environment"), "live (kid live-1)");
    // The same nonce again: a replay, with the claims printed as for any refusal.
    let replay = check(&allow.token, &first);
    replay.code(6).stderr_has("replay");
    assert_eq!(replay.field("status"), "refused");
    assert_eq!(replay.field("request.amount"), "42.50");
    // JSON output is the claims; the environment is a note on stderr.
    let claims = check(&allow.token, &plus(&["--json"], &matching));
    claims.ok().stderr_has("environment live (kid live-1)");
    assert_eq!(claims.json()["request"]["amount"].to_string(), "42.50");
    assert_eq!(claims.json()["iss"], env.issuer.as_str());
    // Without the transaction it is only a signature check: exit 7, never 0.
    let unchecked = check(&allow.token, &["--json", "--signature-only"]);
    unchecked.code(7).stderr_has("not compared");
    assert_eq!(unchecked.json()["request"]["amount"].to_string(), "42.50");

    // Tampered: the claims of one verdict under the signature of another.
    let a: Vec<&str> = allow.token.split('.').collect();
    let b: Vec<&str> = other.token.split('.').collect();
    let tampered = format!("{}.{}.{}", a[0], b[1], a[2]);
    check(&tampered, &["--signature-only"])
        .code(6)
        .stderr_has("signature does not verify");
    check("not-a-token", &matching)
        .code(6)
        .stderr_has("malformed");

    // Expired: five minutes after issue.
    let later = (allow.iat + 301).to_string();
    check(&allow.token, &plus(&["--now", &later], &matching))
        .code(6)
        .stderr_has("expired");
    let just_before = (allow.iat + 299).to_string();
    check(&allow.token, &plus(&["--now", &just_before], &matching)).ok();

    // Wrong amount, currency, recipient.
    check(
        &allow.token,
        &[
            "--amount",
            "42.51",
            "--currency",
            "USD",
            "--recipient",
            "vendor:acme",
        ],
    )
    .code(6)
    .stderr_has("amount 42.51 does not match the signed amount 42.50");
    check(
        &allow.token,
        &[
            "--amount",
            "42.50",
            "--currency",
            "EUR",
            "--recipient",
            "vendor:other",
        ],
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
        "--signature-only",
    ])
    .code(6)
    .stderr_has("wrong issuer");

    // A valid token whose verdict is not allow.
    let review = env.authorize(&key, "55", "USD", "software");
    review.code(5);
    let refused = check(&verdict(&review).token, &["--signature-only"]);
    refused.code(6).stderr_has("not allow");
    assert_eq!(refused.field("verdict"), "review");

    // The key set must come from somewhere (a fresh home has no cache), and --jwks needs
    // --issuer.
    let fresh = tempfile::tempdir().unwrap();
    run_in(
        fresh.path(),
        &["verify", &allow.token, "--signature-only"],
        &[],
        None,
    )
    .code(2)
    .stderr_has("jwks fetch");
    env.offline(&["verify", &allow.token, "--jwks", &jwks, "--signature-only"])
        .code(2)
        .stderr_has("--issuer");
    // The token may come on stdin.
    env.run_stdin(
        &plus(
            &["verify", "--jwks", &jwks, "--issuer", &env.issuer],
            &matching,
        ),
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
            "--sandbox".into(),
        ]
    };
    let run = |token: &str| {
        let args = args(token);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.offline(&args)
    };
    // The test server's events are the sandbox's: refused without --sandbox (and not
    // recorded), accepted with it.
    env.offline(&[
        "verify",
        &event,
        "--event",
        "--jwks",
        &jwks,
        "--issuer",
        &env.issuer,
        "--replay-store",
        &store,
    ])
    .code(6)
    .stderr_has("signed with the sandbox key sandbox-1: a sandbox event reports only what happened in the sandbox")
    .stdout_has("ping");
    let first = run(&event);
    first
        .ok()
        .stdout_has("valid event")
        .stdout_has("type")
        .stdout_has("ping");
    assert_eq!(first.field("environment"), "sandbox (kid sandbox-1)");
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
        "--sandbox",
    ])
    .ok()
    .stdout_has("matches the transaction");
    // An explicit issuer wins over the cache's: its own set is used, and there is none.
    env.offline(&[
        "verify",
        &allow.token,
        "--issuer",
        "https://other.example",
        "--signature-only",
    ])
    .code(2)
    .stderr_has("no key set cached for the issuer https://other.example");
    // A cache older than five minutes is refused with a hint to fetch again.
    let stale = (fetched_at + 300).to_string();
    env.offline(&["verify", &allow.token, "--now", &stale, "--signature-only"])
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

#[test]
fn verify_exits_0_only_when_the_transaction_matched() {
    let env = start();
    let key = env.live_standard_agent("buyer");
    let allow = env.authorize(&key, "42.50", "USD", "software");
    allow.ok();
    let allow = verdict(&allow);
    let jwks = jwks_file(&env);
    let store = env.path("nonces").display().to_string();
    let check = |extra: &[&str]| verify_with(&env, &jwks, &allow.token, extra);

    // No transaction to compare: a usage error that says what to pass, before the token
    // is looked at (it used to exit 0 with a note).
    check(&[])
        .code(2)
        .stderr_has("--amount, --currency, --recipient missing")
        .stderr_has("--signature-only");
    check(&["--amount", "42.50", "--currency", "USD"])
        .code(2)
        .stderr_has("--recipient missing");

    // --signature-only: every check but the transaction; a valid allow exits 7, not 0.
    let unchecked = check(&["--signature-only"]);
    unchecked
        .code(7)
        .stderr_has("the transaction was not compared");
    assert_eq!(
        unchecked.field("status"),
        "valid allow verdict, transaction not compared (--signature-only)"
    );
    assert_eq!(unchecked.field("request.amount"), "42.50");
    // It compares no part of the transaction and consumes no nonce.
    check(&["--signature-only", "--amount", "42.50"]).code(2);
    check(&["--signature-only", "--replay-store", &store]).code(2);

    // The whole transaction, matching: exit 0, once; the replay prints the claims too.
    let with_store = plus(&MATCHING, &["--replay-store", &store]);
    check(&with_store)
        .ok()
        .stdout_has("matches the transaction");
    let replay = check(&with_store);
    replay.code(6).stderr_has("this is a replay");
    assert_eq!(replay.field("status"), "refused");
    assert_eq!(replay.field("environment"), "live (kid live-1)");
    assert_eq!(replay.field("request.recipient"), "vendor:acme");
    let replay_json = check(&plus(&with_store, &["--json"]));
    replay_json.code(6).stderr_has("this is a replay");
    assert_eq!(replay_json.json()["request"]["amount"].to_string(), "42.50");
}

#[test]
fn verify_refuses_sandbox_tokens_unless_sandbox_is_given() {
    let env = start();
    let sandbox_agent = env.standard_agent("buyer");
    let sandbox = env.authorize(&sandbox_agent, "42.50", "USD", "software");
    sandbox.ok();
    let sandbox = verdict(&sandbox);
    let live_agent = env.live_standard_agent("buyer");
    let live = env.authorize(&live_agent, "42.50", "USD", "software");
    live.ok();
    let live = verdict(&live);
    let jwks = jwks_file(&env);
    let check = |token: &str, extra: &[&str]| verify_with(&env, &jwks, token, extra);

    // A sandbox allow for exactly this transaction shares the issuer and the key set with
    // live ones, yet authorizes no real payment: refused, its claims and environment shown.
    let refused = check(&sandbox.token, &MATCHING);
    refused
        .code(6)
        .stderr_has("signed with the sandbox key sandbox-1")
        .stderr_has("pass --sandbox");
    assert_eq!(refused.field("status"), "refused");
    assert_eq!(refused.field("environment"), "sandbox (kid sandbox-1)");
    assert_eq!(refused.field("request.amount"), "42.50");
    check(&sandbox.token, &plus(&MATCHING, &["--json"]))
        .code(6)
        .stderr_has("environment sandbox (kid sandbox-1)");
    check(&sandbox.token, &["--signature-only"])
        .code(6)
        .stderr_has("sandbox key");

    // With --sandbox (testing), accepted, and said to be the sandbox's.
    let accepted = check(&sandbox.token, &plus(&MATCHING, &["--sandbox"]));
    accepted.ok();
    assert_eq!(accepted.field("environment"), "sandbox (kid sandbox-1)");
    check(&sandbox.token, &["--signature-only", "--sandbox"]).code(7);
    // A live token needs no flag, and --sandbox does not turn it away.
    let accepted = check(&live.token, &MATCHING);
    accepted.ok();
    assert_eq!(accepted.field("environment"), "live (kid live-1)");
    check(&live.token, &plus(&MATCHING, &["--sandbox"])).ok();

    // A key whose kid names no environment signs nothing the service issued: refused, even
    // with --sandbox.
    let claims: VerdictClaims =
        serde_json::from_value(check(&live.token, &plus(&MATCHING, &["--json"])).json()).unwrap();
    let stranger = P256Signer::from_secret_bytes("test-1", &[5; 32]).unwrap();
    let token = sign_token(&stranger, &claims).unwrap();
    let set = JwkSet {
        keys: vec![stranger.public_jwk()],
    };
    let own_jwks = env.write("stranger.json", &serde_json::to_string(&set).unwrap());
    let stranger_check = verify_with(&env, &own_jwks, &token, &plus(&MATCHING, &["--sandbox"]));
    stranger_check
        .code(6)
        .stderr_has("\"test-1\" belongs to no environment");
    assert_eq!(stranger_check.field("environment"), "unknown (kid test-1)");
}

/// Recipients match without regard to ASCII letter case, as the engine's recipient rules
/// (decisions.md, fourth round): a counterparty typing `vendor:ACME` for a token signed for
/// `vendor:acme` is accepted, with a note, and the claims show the recipient as signed.
/// Another recipient is still refused, and the nonce is recorded once.
#[test]
fn verify_compares_the_recipient_without_regard_to_letter_case() {
    let env = start();
    let key = env.live_standard_agent("buyer");
    let allow = env.authorize(&key, "42.50", "USD", "software");
    allow.ok();
    let allow = verdict(&allow);
    let jwks = jwks_file(&env);
    let store = env.path("nonces").display().to_string();
    let check = |recipient: &str, extra: &[&str]| {
        let transaction = [
            "--amount",
            "42.50",
            "--currency",
            "USD",
            "--recipient",
            recipient,
        ];
        verify_with(&env, &jwks, &allow.token, &plus(&transaction, extra))
    };

    let other = check("vendor:acmf", &["--replay-store", &store]);
    other
        .code(6)
        .stderr_has("recipient vendor:acmf does not match the signed recipient vendor:acme");
    let upper = check("vendor:ACME", &["--replay-store", &store]);
    upper
        .ok()
        .stdout_has("matches the transaction")
        .stderr_has("recipient vendor:ACME matches the signed vendor:acme");
    assert_eq!(upper.field("request.recipient"), "vendor:acme");
    // Accepted once: the nonce was recorded by the accepted check, not by the refused one.
    check("vendor:Acme", &["--replay-store", &store])
        .code(6)
        .stderr_has("this is a replay");
    let json = check("vendor:Acme", &["--json"]);
    json.ok();
    assert_eq!(json.json()["request"]["recipient"], "vendor:acme");

    let help = env.offline(&["verify", "--help"]);
    help.ok().stdout_has("ASCII letter case is not compared");
}
