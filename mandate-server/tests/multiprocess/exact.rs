//! Exactness across processes: concurrent requests for one agent, one Idempotency-Key, one
//! review or one decision, split over three `serve` processes on one database, have the
//! outcome one process would give. Each test's agents are in two organizations; the
//! limits and the Idempotency-Key are tested on PostgreSQL and on Citus (`NAME::postgres`,
//! `NAME::citus`), where the two organizations land on the two workers.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::future::join_all;
use reqwest::Method;
use serde_json::Value;

use crate::deploy::{Backend, Deployment, Http, Org, Proc, Resp, mandate, request};
use crate::{deployment, on_each_backend};

on_each_backend!(
    per_month_is_exact_across_processes,
    velocity_is_exact_across_processes,
    an_idempotency_key_raced_and_replayed_on_three_processes_gives_one_outcome,
);
// On Citus a review raced and resolved once is the history checker's (tests/history).
on_each_backend!(
    postgres_only: a_review_resolved_on_several_processes_at_once_resolves_once,
    a_decision_funds_one_escrow_whichever_process_is_asked,
);

/// The verdicts of `answers`, counted.
fn tally(answers: &[&Resp]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in answers {
        assert_eq!(r.status, 201, "{}", r.text);
        *counts
            .entry(r.body["verdict"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    counts
}

/// Registers agent `name` with `mandate_body` through `proc`; returns its key.
async fn agent_with(
    http: &Http,
    proc: &Proc,
    org_key: &str,
    name: &str,
    mandate_body: &str,
) -> String {
    let key = http.agent(&proc.api, org_key, name).await;
    http.mandate(&proc.api, org_key, mandate_body).await;
    key
}

/// The answer to an authorization sent with `idempotency_key`, sent again with the same key
/// (bounded) as a client is told to: after a 503 (the other processes kept changing the
/// agent past the decision's retry budget, which a loaded machine, or Citus's extra hop to
/// a worker, reaches in a burst: nothing was stored for it), a 409 (the key's earlier
/// attempt still in flight) or a connection closed under it (an idle one the server
/// closed while the client waited to retry).
async fn answered(http: &Http, base: &str, key: &str, body: &str, idempotency_key: &str) -> Resp {
    let mut last = String::new();
    for _ in 0..30 {
        let sent = http
            .try_send(
                Method::POST,
                base,
                key,
                "/v1/authorizations",
                Some(body),
                Some(idempotency_key),
            )
            .await;
        match sent {
            Ok(r) if r.status == 503 || r.status == 409 => {
                match r.status {
                    503 => r.assert_error(503, "server_error"),
                    _ => r.assert_error(409, "idempotency_conflict"),
                };
                let wait = r.retry_after.as_deref().and_then(|s| s.parse().ok());
                tokio::time::sleep(std::time::Duration::from_secs(wait.unwrap_or(1))).await;
                last = r.text;
            }
            Ok(r) => return r,
            Err(e) => last = e.to_string(),
        }
    }
    panic!("{idempotency_key}: no answer but a 503, a 409 or a cut connection in 30 tries: {last}")
}

/// The organization of agent (or round) `n`: they take turns.
fn org_of(orgs: &[Org], n: usize) -> &Org {
    &orgs[n % orgs.len()]
}

/// `agents` agents named `{prefix}{n}`, of the organizations in turn ([`org_of`]), each
/// registered through a process in turn with a mandate of 100 a transaction and
/// `per_month`, send `each` requests of `amount` at once, consecutive ones to different
/// processes, each with an Idempotency-Key and sent again while it is answered 503 (as
/// [`answered`]); each agent's answers, in agent order. On Citus, deciding them makes no
/// two-phase commit: each decision is routed to its organization's worker alone.
#[allow(clippy::too_many_arguments)]
async fn burst(
    deployment: &Deployment,
    http: &Http,
    procs: &[Proc],
    orgs: &[Org],
    prefix: &str,
    per_month: &str,
    agents: usize,
    each: usize,
    amount: &str,
) -> Vec<Vec<Resp>> {
    let mut keys = Vec::new();
    for a in 0..agents {
        let name = format!("{prefix}{a}");
        let body = mandate(&name, "100", per_month, None);
        let proc = &procs[a % procs.len()];
        keys.push(agent_with(http, proc, &org_of(orgs, a).sandbox, &name, &body).await);
    }
    let commits = deployment.two_phase_commits().await;
    let sends = (0..agents).flat_map(|a| (0..each).map(move |n| (a, n)));
    let answers = join_all(sends.map(|(a, n)| {
        let (http, base, key) = (
            http.clone(),
            procs[(a + n) % procs.len()].api.clone(),
            keys[a].clone(),
        );
        let idempotency_key = format!("{prefix}{a}-{n}");
        async move {
            let body = request(amount, "software");
            (
                a,
                answered(&http, &base, &key, &body, &idempotency_key).await,
            )
        }
    }))
    .await;
    assert_eq!(
        deployment.two_phase_commits().await,
        commits,
        "two-phase commits while deciding"
    );
    let mut by_agent = vec![Vec::new(); agents];
    for (a, r) in answers {
        by_agent[a].push(r);
    }
    by_agent
}

/// Twelve agents each send ten requests of 50 at once, spread over three processes, under a
/// per_month of 230: for every agent exactly four are allowed (200; a fifth would make 250)
/// and six denied for the month, and every process lists exactly those four. Ten requests
/// an agent: the velocity rule allows ten a minute, so only the monthly limit decides.
async fn per_month_is_exact_across_processes(backend: Backend) {
    let deployment = deployment!(backend);
    let orgs = deployment.orgs("acme", 2).await;
    let procs = deployment.serve_n(3);
    let http = Http::default();
    const AGENTS: usize = 12;
    const EACH: usize = 10;
    let answers = burst(
        &deployment,
        &http,
        &procs,
        &orgs,
        "month",
        "230",
        AGENTS,
        EACH,
        "50",
    )
    .await;
    for (a, answers) in answers.iter().enumerate() {
        let mine: Vec<&Resp> = answers.iter().collect();
        let counts = tally(&mine);
        assert_eq!(counts.get("allow"), Some(&4), "agent {a}: {counts:?}");
        assert_eq!(counts.get("deny_limit"), Some(&6), "agent {a}: {counts:?}");
        assert_eq!(counts.len(), 2, "agent {a}: {counts:?}");
        for r in mine.iter().filter(|r| r.body["verdict"] == "deny_limit") {
            let reason = r.body["reason"].as_str().unwrap();
            assert!(
                reason.contains("exceeds per_month limit 230"),
                "agent {a}: {reason}"
            );
        }
        let org = org_of(&orgs, a);
        for proc in &procs {
            let allowed = http
                .walk(
                    &proc.api,
                    &org.sandbox,
                    &format!("/v1/decisions?agent=agt_month{a}&verdict=allow"),
                )
                .await;
            assert_eq!(allowed.len(), 4, "agent {a} on {}", proc.api);
            let all = http
                .walk(
                    &proc.api,
                    &org.sandbox,
                    &format!("/v1/decisions?agent=agt_month{a}"),
                )
                .await;
            assert_eq!(all.len(), EACH, "agent {a} on {}", proc.api);
        }
    }
}

/// Six agents each send 25 requests at once over three processes: exactly ten of each
/// agent's are judged on their merits (allowed), the other 15 are deny_velocity, and all
/// 25 are stored.
async fn velocity_is_exact_across_processes(backend: Backend) {
    let deployment = deployment!(backend);
    let orgs = deployment.orgs("acme", 2).await;
    let procs = deployment.serve_n(3);
    let http = Http::default();
    const AGENTS: usize = 6;
    const EACH: usize = 25;
    let answers = burst(
        &deployment,
        &http,
        &procs,
        &orgs,
        "fast",
        "1000000",
        AGENTS,
        EACH,
        "1",
    )
    .await;
    for (a, answers) in answers.iter().enumerate() {
        let mine: Vec<&Resp> = answers.iter().collect();
        let counts = tally(&mine);
        assert_eq!(counts.get("allow"), Some(&10), "agent {a}: {counts:?}");
        assert_eq!(
            counts.get("deny_velocity"),
            Some(&15),
            "agent {a}: {counts:?}"
        );
        assert_eq!(counts.len(), 2, "agent {a}: {counts:?}");
        let stored = http
            .walk(
                &procs[(a + 1) % 3].api,
                &org_of(&orgs, a).sandbox,
                &format!("/v1/decisions?agent=agt_fast{a}"),
            )
            .await;
        assert_eq!(stored.len(), EACH, "agent {a}");
    }
}

/// One Idempotency-Key sent six times at once over three processes, then replayed on each:
/// one decision is made and stored; every 201 is the same answer (a replay says so); a
/// request that arrives while the first is in flight gets 409 idempotency_conflict; the
/// same key with another body is 409 on every process.
async fn an_idempotency_key_raced_and_replayed_on_three_processes_gives_one_outcome(
    backend: Backend,
) {
    let deployment = deployment!(backend);
    let orgs = deployment.orgs("acme", 2).await;
    let procs = deployment.serve_n(3);
    let http = Http::default();
    for round in 0..8 {
        let org = org_of(&orgs, round);
        let name = format!("idem{round}");
        let key = agent_with(
            &http,
            &procs[round % 3],
            &org.sandbox,
            &name,
            &mandate(&name, "100", "1000", None),
        )
        .await;
        let idem = format!("order-{round}");
        let body = request("12.34", "software");
        let raced = join_all((0..6).map(|n| {
            http.try_send(
                Method::POST,
                &procs[(round + n) % 3].api,
                &key,
                "/v1/authorizations",
                Some(&body),
                Some(&idem),
            )
        }))
        .await;
        let raced: Vec<Resp> = raced.into_iter().map(Result::unwrap).collect();
        let created: Vec<&Resp> = raced.iter().filter(|r| r.status == 201).collect();
        assert!(!created.is_empty(), "round {round}: {raced:?}");
        for r in raced.iter().filter(|r| r.status != 201) {
            r.assert_error(409, "idempotency_conflict");
        }
        let first = created[0].text.clone();
        let originals = created.iter().filter(|r| !r.replayed).count();
        assert_eq!(
            originals, 1,
            "round {round}: one original answer, the rest replays"
        );
        for r in &created {
            assert_eq!(r.text, first, "round {round}: every 201 is the same answer");
        }
        for proc in &procs {
            let replay = http
                .try_send(
                    Method::POST,
                    &proc.api,
                    &key,
                    "/v1/authorizations",
                    Some(&body),
                    Some(&idem),
                )
                .await
                .unwrap();
            assert_eq!(replay.status, 201, "{}", replay.text);
            assert!(replay.replayed, "round {round} on {}", proc.api);
            assert_eq!(replay.text, first);
            let other = http
                .try_send(
                    Method::POST,
                    &proc.api,
                    &key,
                    "/v1/authorizations",
                    Some(&request("99", "software")),
                    Some(&idem),
                )
                .await
                .unwrap();
            other.assert_error(409, "idempotency_conflict");
        }
        let stored = http
            .walk(
                &procs[0].api,
                &org.sandbox,
                &format!("/v1/decisions?agent=agt_{name}"),
            )
            .await;
        assert_eq!(stored.len(), 1, "round {round}: {stored:?}");
        let answered: Value = serde_json::from_str(&first).unwrap();
        assert_eq!(stored[0]["id"], answered["id"]);
    }
}

/// Eight reviews, each approved on three processes at once: one approval succeeds (the
/// fresh decision), the others are 400 (the review is no longer pending); four more, each
/// approved on one process and denied on another at once: exactly one of the two wins.
/// Each review has one resolution and one decision.resolved event.
async fn a_review_resolved_on_several_processes_at_once_resolves_once(backend: Backend) {
    let deployment = deployment!(backend);
    let orgs = deployment.orgs("acme", 2).await;
    let procs = deployment.serve_n(3);
    let http = Http::default();
    // Twelve reviews over two agents, one an organization (the velocity rule allows ten a
    // minute each).
    let mut reviews = Vec::new();
    for (a, agent) in ["reviewed", "checked"].into_iter().enumerate() {
        let org = org_of(&orgs, a);
        let key = agent_with(
            &http,
            &procs[0],
            &org.sandbox,
            agent,
            &mandate(agent, "100", "100000", Some("10")),
        )
        .await;
        for n in 0..6 {
            let r = http
                .authorize(&procs[n % 3].api, &key, "50", "software")
                .await;
            assert_eq!(r.body["verdict"], "review", "{}", r.text);
            reviews.push((
                r.body["review"]["id"].as_str().unwrap().to_owned(),
                org.sandbox.clone(),
            ));
        }
    }
    let mut approved = BTreeSet::new();
    for (n, (review, org_key)) in reviews.iter().enumerate() {
        let path = format!("/v1/reviews/{review}/approve");
        let deny = format!("/v1/reviews/{review}/deny");
        let answers = if n < 8 {
            join_all(
                procs
                    .iter()
                    .map(|p| http.post_empty(&p.api, org_key, &path)),
            )
            .await
        } else {
            let (a, b) = tokio::join!(
                http.post_empty(&procs[n % 3].api, org_key, &path),
                http.post_empty(&procs[(n + 1) % 3].api, org_key, &deny),
            );
            vec![a, b]
        };
        let won: Vec<&Resp> = answers
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .collect();
        assert_eq!(won.len(), 1, "review {review}: {answers:?}");
        for r in answers.iter().filter(|r| r.status >= 300) {
            r.assert_error(400, "invalid_request");
        }
        if won[0].status == 201 {
            assert_eq!(won[0].body["verdict"], "allow", "{}", won[0].text);
            approved.insert(won[0].body["supersedes"].as_str().unwrap().to_owned());
        }
    }
    // Every approval made one fresh decision, superseding its own original.
    let mut decisions = Vec::new();
    let mut events = Vec::new();
    for org in &orgs {
        decisions.extend(
            http.walk(&procs[2].api, &org.sandbox, "/v1/decisions")
                .await,
        );
        events.extend(http.walk(&procs[1].api, &org.sandbox, "/v1/events").await);
    }
    let fresh: Vec<&Value> = decisions
        .iter()
        .filter(|d| !d["supersedes"].is_null())
        .collect();
    assert_eq!(fresh.len(), approved.len(), "{fresh:?}");
    let superseded: BTreeSet<String> = fresh
        .iter()
        .map(|d| d["supersedes"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(superseded, approved);
    assert!(approved.len() >= 8, "{approved:?}");
    let mut resolved = BTreeMap::<String, usize>::new();
    for e in events.iter().filter(|e| e["type"] == "decision.resolved") {
        *resolved
            .entry(e["data"]["id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(resolved.len(), reviews.len(), "{resolved:?}");
    assert!(resolved.values().all(|&n| n == 1), "{resolved:?}");
}

/// Six allow decisions of two buyers (one an organization), each offered to fund an escrow
/// six times at once over three processes: each funds exactly one escrow, the others are
/// told its nonce is spent, and one escrow.funded event is written per decision.
async fn a_decision_funds_one_escrow_whichever_process_is_asked(backend: Backend) {
    let deployment = deployment!(backend);
    let orgs = deployment.orgs("acme", 2).await;
    let procs = deployment.serve_n(3);
    let http = Http::default();
    let mut buyers = Vec::new();
    for (b, org) in orgs.iter().enumerate() {
        let name = format!("buyer{b}");
        let body = mandate(&name, "100", "100000", None);
        buyers.push(agent_with(&http, &procs[1], &org.sandbox, &name, &body).await);
    }
    let mut escrows = BTreeSet::new();
    for n in 0..6 {
        let (b, org) = (n % orgs.len(), org_of(&orgs, n));
        let allowed = http
            .authorize(&procs[n % 3].api, &buyers[b], "42.50", "software")
            .await;
        assert_eq!(allowed.body["verdict"], "allow", "{}", allowed.text);
        let decision = allowed.body["id"].as_str().unwrap().to_owned();
        let body = format!(
            r#"{{"amount": 42.50, "currency": "USD", "buyer": "agt_buyer{b}", "seller": "vendor:acme", "decision": "{decision}"}}"#
        );
        let answers = join_all(
            (0..6).map(|i| http.post(&procs[(n + i) % 3].api, &org.sandbox, "/v1/escrows", &body)),
        )
        .await;
        let created: Vec<&Resp> = answers.iter().filter(|r| r.status == 201).collect();
        assert_eq!(created.len(), 1, "decision {decision}: {answers:?}");
        let spent = format!(
            "decision {decision} has already funded an escrow (its nonce is spent); each decision funds at most one escrow"
        );
        for r in answers.iter().filter(|r| r.status != 201) {
            assert_eq!(r.assert_error(400, "invalid_request"), spent);
        }
        escrows.insert(created[0].body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(escrows.len(), 6);
    let mut events = Vec::new();
    for org in &orgs {
        events.extend(http.walk(&procs[0].api, &org.sandbox, "/v1/events").await);
    }
    let funded: BTreeSet<String> = events
        .iter()
        .filter(|e| e["type"] == "escrow.funded")
        .map(|e| e["data"]["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(funded, escrows);
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "escrow.funded")
            .count(),
        6
    );
}
