//! Changes made through one process, or by an operator command, reach the others: a revoke
//! or a new mandate holds for the agent's next request anywhere, the enforcement switch for
//! the next decision anywhere, operator key changes everywhere within a second, and every
//! process publishes the same signing keys.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use mandate_core::JwkSet;
use serde_json::Value;

use crate::deploy::{Http, ISSUER, Proc, mandate};
use crate::deployment;

/// Registers agent `name` with `mandate_body` through `proc`; returns its key and mandate id.
async fn agent_with(
    http: &Http,
    proc: &Proc,
    org_key: &str,
    name: &str,
    mandate_body: &str,
) -> (String, String) {
    let key = http.agent(&proc.api, org_key, name).await;
    let m = http.mandate(&proc.api, org_key, mandate_body).await;
    (key, m["id"].as_str().unwrap().to_owned())
}

/// For six agents: a decision on process B (B has read the mandate), the mandate revoked
/// through A, and at once the next request on B and on C is deny_revoked. A new mandate
/// written through C is what B judges the next request by.
#[tokio::test]
async fn a_revoke_through_one_process_denies_the_next_request_on_another() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let procs = deployment.serve_n(3);
    let http = Http::default();
    for n in 0..6 {
        let (a, b, c) = (&procs[n % 3], &procs[(n + 1) % 3], &procs[(n + 2) % 3]);
        let name = format!("revoked{n}");
        let (key, id) = agent_with(
            &http,
            a,
            &org.sandbox,
            &name,
            &mandate(&name, "100", "1000", None),
        )
        .await;
        let before = http.authorize(&b.api, &key, "30", "software").await;
        assert_eq!(before.body["verdict"], "allow", "{}", before.text);
        let revoked = http
            .post_empty(&a.api, &org.sandbox, &format!("/v1/mandates/{id}/revoke"))
            .await;
        assert_eq!(revoked.status, 200, "{}", revoked.text);
        for p in [b, c] {
            let after = http.authorize(&p.api, &key, "30", "software").await;
            assert_eq!(
                after.body["verdict"], "deny_revoked",
                "on {}: {}",
                p.api, after.text
            );
        }
        // A new mandate (per_transaction 20) through C: B judges by it at once.
        http.mandate(&c.api, &org.sandbox, &mandate(&name, "20", "1000", None))
            .await;
        let over = http.authorize(&b.api, &key, "30", "software").await;
        assert_eq!(over.body["verdict"], "deny_limit", "{}", over.text);
        assert_eq!(
            over.body["reason"],
            "amount 30 exceeds per_transaction limit 20"
        );
        let within = http.authorize(&b.api, &key, "15", "software").await;
        assert_eq!(within.body["verdict"], "allow", "{}", within.text);
    }
}

/// The sandbox switched to observe through one process: the next decision on another is
/// made in observe (allowed, with what enforce would have said); switched back through a
/// third, the next decision on the first is enforced again.
#[tokio::test]
async fn an_enforcement_switch_through_one_process_holds_for_the_next_decision_on_another() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let procs = deployment.serve_n(3);
    let http = Http::default();
    let (key, _) = agent_with(
        &http,
        &procs[0],
        &org.sandbox,
        "switched",
        &mandate("switched", "100", "1000", None),
    )
    .await;
    for n in 0..3 {
        let (a, b, c) = (&procs[n % 3], &procs[(n + 1) % 3], &procs[(n + 2) % 3]);
        let enforced = http.authorize(&b.api, &key, "1", "food").await;
        assert_eq!(
            enforced.body["verdict"], "deny_category",
            "{}",
            enforced.text
        );
        assert_eq!(enforced.body["mode"], "enforce");
        let switched = http
            .post(
                &a.api,
                &org.sandbox,
                "/v1/enforcement",
                r#"{"mode": "observe"}"#,
            )
            .await;
        assert_eq!(switched.body["mode"], "observe", "{}", switched.text);
        let observed = http.authorize(&b.api, &key, "1", "food").await;
        assert_eq!(observed.body["verdict"], "allow", "{}", observed.text);
        assert_eq!(observed.body["policy_verdict"], "deny_category");
        assert_eq!(observed.body["mode"], "observe");
        for p in &procs {
            let mode = http.get(&p.api, &org.sandbox, "/v1/enforcement").await;
            assert_eq!(mode.body, switched.body, "on {}", p.api);
        }
        let back = http
            .post(
                &c.api,
                &org.sandbox,
                "/v1/enforcement",
                r#"{"mode": "enforce"}"#,
            )
            .await;
        assert_eq!(back.body["mode"], "enforce", "{}", back.text);
        let again = http.authorize(&a.api, &key, "1", "food").await;
        assert_eq!(again.body["verdict"], "deny_category", "{}", again.text);
        assert_eq!(again.body["mode"], "enforce");
    }
}

/// Polls `key` on `proc` (GET /v1/enforcement, every 20 ms) until the answer's status is
/// `status`; returns how long after `since` the request that first saw it was sent.
async fn first_seen(http: &Http, proc: &Proc, key: &str, status: u16, since: Instant) -> Duration {
    loop {
        let sent = since.elapsed();
        let r = http.get(&proc.api, key, "/v1/enforcement").await;
        if r.status == status {
            return sent;
        }
        assert!(
            sent < Duration::from_secs(10),
            "{} still answers {} after 10 s: {}",
            proc.api,
            r.status,
            r.text
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A key issued by the operator works on every process, and once revoked is refused by
/// every process within a second of the command; a lowered rate holds on every process
/// within a second too.
#[tokio::test]
async fn operator_key_changes_reach_every_process_within_a_second() {
    let deployment = deployment!();
    deployment.onboard("acme");
    let procs = deployment.serve_n(3);
    let http = Http::default();
    let issued = deployment.operator(&["issue-key", "--org", "acme", "--env", "sandbox"]);
    let key = issued.lines().next().unwrap().trim().to_owned();
    assert!(key.starts_with("sk_sandbox_"), "{issued}");
    // Every process knows it within a second (none may have cached it as unknown for longer).
    let since = Instant::now();
    let seen = join_all(procs.iter().map(|p| first_seen(&http, p, &key, 200, since))).await;
    for (p, after) in procs.iter().zip(&seen) {
        assert!(*after <= Duration::from_secs(1), "{} took {after:?}", p.api);
    }

    deployment.operator(&["revoke-key", &key]);
    let since = Instant::now();
    let refused = join_all(procs.iter().map(|p| first_seen(&http, p, &key, 401, since))).await;
    for (p, after) in procs.iter().zip(&refused) {
        assert!(
            *after <= Duration::from_secs(1),
            "{} still accepted a revoked key {after:?} after the command",
            p.api
        );
    }

    // A second key, polled 20 times a second on each process (well under the default rate),
    // until it is refused with 429 after its rate is set to 2 a second.
    let issued = deployment.operator(&["issue-key", "--org", "acme", "--env", "sandbox"]);
    let slow = issued.lines().next().unwrap().trim().to_owned();
    for p in &procs {
        assert_eq!(http.get(&p.api, &slow, "/v1/enforcement").await.status, 200);
    }
    deployment.operator(&["set-rate", &slow, "--per-second", "2"]);
    let since = Instant::now();
    let limited = join_all(
        procs
            .iter()
            .map(|p| first_seen(&http, p, &slow, 429, since)),
    )
    .await;
    for (p, after) in procs.iter().zip(&limited) {
        assert!(
            *after <= Duration::from_secs(1),
            "{} applied the new rate only {after:?} after the command",
            p.api
        );
    }
}

/// Every process publishes the same JWK Set, and a verdict signed by one verifies against
/// another's; after `rotate-signing-key`, within a second every process publishes the new
/// key beside the old one and signs with it.
#[tokio::test]
async fn every_process_publishes_the_same_signing_keys_and_follows_a_rotation() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let procs = deployment.serve_n(3);
    let http = Http::default();
    let (key, _) = agent_with(
        &http,
        &procs[0],
        &org.sandbox,
        "signed",
        &mandate("signed", "100", "100000", None),
    )
    .await;
    let jwks = |p: &Proc| {
        let url = format!("{}/.well-known/jwks.json", p.public);
        let client = http.client.clone();
        async move {
            let text = client.get(url).send().await.unwrap().text().await.unwrap();
            let value: Value = serde_json::from_str(&text).unwrap();
            value
        }
    };
    let kids = |set: &Value| -> BTreeSet<String> {
        set["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect()
    };
    let sets = join_all(procs.iter().map(jwks)).await;
    assert!(sets.iter().all(|s| *s == sets[0]), "{sets:?}");
    let before = kids(&sets[0]);
    let kid_of = |token: &str| -> String {
        let header = token.split('.').next().unwrap();
        let header: Value = serde_json::from_slice(
            &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, header)
                .unwrap(),
        )
        .unwrap();
        header["kid"].as_str().unwrap().to_owned()
    };
    // A verdict of each process verifies against the JWK Set of the next.
    for (n, p) in procs.iter().enumerate() {
        let r = http.authorize(&p.api, &key, "10", "software").await;
        let token = r.body["verdict_token"].as_str().unwrap();
        let set = JwkSet::from_json(sets[(n + 1) % 3].to_string().as_bytes()).unwrap();
        let options = mandate_core::VerifyOptions {
            issuer: ISSUER.to_owned(),
            now: time::OffsetDateTime::now_utc(),
            leeway_secs: 60,
        };
        mandate_core::verify_verdict(token, &set, &options).unwrap_or_else(|e| {
            panic!("a verdict of {} against the keys of another: {e:?}", p.api)
        });
        assert!(before.contains(&kid_of(token)));
    }

    deployment.operator(&["rotate-signing-key", "--env", "sandbox"]);
    let since = Instant::now();
    let rotated = loop {
        let sets = join_all(procs.iter().map(jwks)).await;
        let all_new = sets
            .iter()
            .all(|s| kids(s).len() > before.len() && kids(s).is_superset(&before));
        if all_new && sets.iter().all(|s| *s == sets[0]) {
            break sets[0].clone();
        }
        assert!(
            since.elapsed() <= Duration::from_secs(1),
            "after a second the processes publish {sets:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let new: Vec<String> = kids(&rotated).difference(&before).cloned().collect();
    assert_eq!(new.len(), 1, "{rotated}");
    for p in &procs {
        let r = http.authorize(&p.api, &key, "10", "software").await;
        let token = r.body["verdict_token"].as_str().unwrap();
        assert_eq!(kid_of(token), new[0], "{} signs with the new key", p.api);
    }
}

/// Requests of `key` sent to `proc` by `loops` senders, as fast as answered, for `span`:
/// how many were admitted (200) and refused (429, each with a Retry-After).
async fn hammer(
    http: &Http,
    proc: &Proc,
    key: &str,
    loops: usize,
    span: Duration,
) -> (usize, usize) {
    let stop = Instant::now() + span;
    let counts = join_all((0..loops).map(|_| async {
        let (mut admitted, mut refused) = (0, 0);
        while Instant::now() < stop {
            let r = http.get(&proc.api, key, "/v1/enforcement").await;
            match r.status {
                200 => admitted += 1,
                429 => {
                    r.assert_error(429, "rate_limited");
                    assert!(r.retry_after.is_some(), "{}", r.text);
                    refused += 1;
                }
                other => panic!("{other}: {}", r.text),
            }
        }
        (admitted, refused)
    }))
    .await;
    counts
        .into_iter()
        .fold((0, 0), |(a, r), (x, y)| (a + x, r + y))
}

/// A key's rate holds across processes (docs/scale.md: each process admits its share of
/// it, the rate divided by the processes alive): three processes hammered at once admit
/// together what one would, give or take a second's worth at the edges of the window; once
/// one is killed, the two left take its share after its heartbeat lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keys_rate_holds_across_processes_and_a_dead_ones_share_is_taken_over() {
    const RATE: usize = 30;
    let deployment = deployment!();
    deployment.onboard("acme");
    let issued = deployment.operator(&["issue-key", "--org", "acme", "--env", "sandbox"]);
    let key = issued.lines().next().unwrap().trim().to_owned();
    deployment.operator(&["set-rate", &key, "--per-second", &RATE.to_string()]);
    let mut procs = deployment.serve_n(3);
    let http = Http::default();
    // Every process has counted the three (heartbeats every second).
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let span = Duration::from_secs(3);
    let each = join_all(procs.iter().map(|p| hammer(&http, p, &key, 2, span))).await;
    let admitted: usize = each.iter().map(|(a, _)| a).sum();
    let refused: usize = each.iter().map(|(_, r)| r).sum();
    eprintln!("three processes, {RATE}/s, 3 s: admitted {admitted} ({each:?}), refused {refused}");
    assert!(refused > 0, "nothing was refused: {each:?}");
    assert!(
        admitted <= RATE * 4,
        "{admitted} admitted in 3 s at {RATE}/s over three processes: {each:?}"
    );
    assert!(
        admitted >= RATE * 2,
        "only {admitted} admitted in 3 s: {each:?}"
    );
    for (a, _) in &each {
        assert!(
            *a <= RATE.div_ceil(3) * 4,
            "one process admitted {a} in 3 s, more than its share: {each:?}"
        );
    }

    // One dies without leaving: its share returns to the others once its lease runs out.
    procs.remove(0).kill9();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let span = Duration::from_secs(4);
    let each = join_all(procs.iter().map(|p| hammer(&http, p, &key, 2, span))).await;
    let admitted: usize = each.iter().map(|(a, _)| a).sum();
    eprintln!("two processes after a kill, 4 s: admitted {admitted} ({each:?})");
    assert!(
        admitted <= RATE * 5,
        "{admitted} admitted in 4 s at {RATE}/s over two processes: {each:?}"
    );
    assert!(
        admitted > RATE * 10 / 3,
        "{admitted} admitted in 4 s: the killed process's share was not taken over: {each:?}"
    );
}
