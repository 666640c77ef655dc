//! AP2 across processes (issue #36): an imported open mandate's budget and its closed
//! mandates' single use hold exactly when the agent's closed mandates are presented at
//! once to two `serve` processes on one PostgreSQL database (the replicas overspending a
//! cap that issue #36 cites); and the budget is one running total across imports made on
//! both processes while payments run (#67), on PostgreSQL and on Citus.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::ap2_tokens::Ap2Keys;
use crate::deploy::{Backend, Deployment, Http, Resp};
use crate::{deployment, on_each_backend};

on_each_backend!(an_open_mandate_s_budget_is_one_total_across_imports_on_two_processes);

/// Ten closed mandates of `minor` cents each under an open mandate with a budget of 150
/// USD (200 a payment), each presented twice at once, once to each process: the allows
/// total at most 150 (exactly `allows` of them), each closed mandate is accepted at most
/// once and its other presentation is `deny_replay`, and both processes list the same
/// allows.
#[tokio::test]
async fn closed_mandates_hold_the_budget_and_are_used_once_across_processes() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let keys = Ap2Keys::new(11);
    let key_file = deployment.dir.path().join("issuer.jwk");
    std::fs::write(&key_file, keys.issuer_jwk()).unwrap();
    deployment.operator(&[
        "ap2-issuer",
        "add",
        "--org",
        "acme",
        "--key",
        key_file.to_str().unwrap(),
    ]);
    let procs = deployment.serve_n(2);
    let http = Http::default();
    let now = unix_now();

    for (name, minor, allows) in [("big", 16_000, 0_usize), ("small", 4_000, 3)] {
        let open = keys.open(
            json!([
                {"type": "payment.amount_range", "currency": "USD", "max": 20_000},
                {"type": "payment.budget", "currency": "USD", "max": 150},
            ]),
            now - 60,
            now + 86_400,
        );
        let agent_key = http.agent(&procs[0].api, &org.sandbox, name).await;
        let imported = http
            .post(
                &procs[1].api,
                &org.sandbox,
                "/v1/mandates",
                &json!({"agent": format!("agt_{name}"), "categories": ["shopping"],
                        "ap2": {"open_mandate": open}})
                .to_string(),
            )
            .await;
        assert_eq!(imported.status, 201, "{}", imported.text);
        let digest = imported.body["source"]["digest"]
            .as_str()
            .unwrap()
            .to_owned();
        let amount = format!("{}.{:02}", minor / 100, minor % 100);

        let sends = (0..10).flat_map(|i| (0..2).map(move |copy| (i, copy)));
        let answers = join_all(sends.map(|(i, copy)| {
            let tx = format!("{name}-tx-{i}");
            let closed = keys.closed(&open, &tx, minor, "USD", "shop", now);
            let body = format!(
                r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:shop",
                    "category": "shopping", "ap2": {{"closed_mandate": "{closed}"}}}}"#
            );
            let (http, base, key) = (
                http.clone(),
                procs[(i + copy) % 2].api.clone(),
                agent_key.clone(),
            );
            async move {
                (
                    tx,
                    http.post(&base, &key, "/v1/authorizations", &body).await,
                )
            }
        }))
        .await;

        let mut by_tx = BTreeMap::<String, Vec<String>>::new();
        let mut total_minor = 0_i64;
        for (tx, r) in &answers {
            assert_eq!(r.status, 201, "{}", r.text);
            let verdict = r.body["verdict"].as_str().unwrap().to_owned();
            if verdict == "allow" {
                total_minor += minor;
                let token = r.body["verdict_token"].as_str().unwrap();
                let claims: Value = serde_json::from_slice(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(token.split('.').nth(1).unwrap())
                        .unwrap(),
                )
                .unwrap();
                assert_eq!(claims["ap2_mandate"], digest.as_str(), "{claims}");
                assert_eq!(claims["ap2_transaction"], tx.as_str(), "{claims}");
            }
            by_tx.entry(tx.clone()).or_default().push(verdict);
        }
        assert!(total_minor <= 15_000, "{name}: {total_minor} cents allowed");
        let allowed: Vec<&String> = by_tx
            .iter()
            .filter(|(_, v)| v.iter().any(|v| v == "allow"))
            .map(|(tx, _)| tx)
            .collect();
        assert_eq!(allowed.len(), allows, "{name}: {by_tx:?}");
        for (tx, verdicts) in &by_tx {
            let accepted = verdicts.iter().filter(|v| *v == "allow").count();
            assert!(
                accepted <= 1,
                "{tx} accepted {accepted} times: {verdicts:?}"
            );
            if accepted == 1 {
                assert!(
                    verdicts.iter().any(|v| v == "deny_replay"),
                    "{tx}: {verdicts:?}"
                );
            } else {
                assert!(
                    !verdicts.iter().any(|v| v == "deny_replay"),
                    "{tx}: replay of a consent never accepted: {verdicts:?}"
                );
            }
        }
        for proc in &procs {
            let listed = http
                .walk(
                    &proc.api,
                    &org.sandbox,
                    &format!("/v1/decisions?agent=agt_{name}&verdict=allow"),
                )
                .await;
            assert_eq!(listed.len(), allows, "{name} on {}", proc.api);
        }
    }
}

/// Now, unix seconds.
fn unix_now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// Trusts `keys`' issuer for organization `acme`.
fn trust(deployment: &Deployment, keys: &Ap2Keys) {
    let key_file = deployment.dir.path().join("issuer.jwk");
    std::fs::write(&key_file, keys.issuer_jwk()).unwrap();
    deployment.operator(&[
        "ap2-issuer",
        "add",
        "--org",
        "acme",
        "--key",
        key_file.to_str().unwrap(),
    ]);
}

/// A payment of 40 USD to `shop`, judged against the imported terms.
async fn pay(http: &Http, base: &str, key: &str) -> Resp {
    let body =
        r#"{"amount": 40, "currency": "USD", "recipient": "vendor:shop", "category": "shopping"}"#;
    http.post(base, key, "/v1/authorizations", body).await
}

/// An open mandate with a budget of 150 USD (payments of 40) imported for agent `a`; then,
/// at once, imported for `b` on one process and for `c` on the other while `a` pays eight
/// times and `b` and `c` four times each, on both; then imported for `d`, who pays until
/// refused. However the imports and payments interleave, exactly one mandate carries the
/// open mandate after each round, the allows of all four agents add up to three payments
/// of 40 (120), and both processes list those three.
async fn an_open_mandate_s_budget_is_one_total_across_imports_on_two_processes(backend: Backend) {
    let deployment = deployment!(backend);
    let org = deployment.onboard("acme");
    let keys = Ap2Keys::new(67);
    trust(&deployment, &keys);
    let procs = deployment.serve_n(2);
    let http = Http::default();
    let now = unix_now();
    let mut agent_keys = Vec::new();
    for name in ["a", "b", "c", "d"] {
        agent_keys.push(http.agent(&procs[0].api, &org.sandbox, name).await);
    }
    let open = keys.open(
        json!([
            {"type": "payment.amount_range", "currency": "USD", "max": 20_000},
            {"type": "payment.budget", "currency": "USD", "max": 150},
            {"type": "payment.allowed_payees", "allowed": [{"id": "shop", "name": "Shop"}]},
        ]),
        now - 60,
        now + 86_400,
    );
    let import = |base: String, agent: &'static str| {
        let (http, org_key, open) = (http.clone(), org.sandbox.clone(), open.clone());
        async move {
            let body = json!({"agent": format!("agt_{agent}"), "categories": ["shopping"],
                              "ap2": {"open_mandate": open}});
            http.post(&base, &org_key, "/v1/mandates", &body.to_string())
                .await
        }
    };
    let first = import(procs[0].api.clone(), "a").await;
    assert_eq!(first.status, 201, "{}", first.text);

    let payers = [(0, 8), (1, 4), (2, 4)];
    let payments = join_all(payers.iter().flat_map(|&(agent, n)| {
        let (http, procs, keys) = (&http, &procs, &agent_keys);
        (0..n).map(move |i| pay(http, &procs[(agent + i) % 2].api, &keys[agent]))
    }));
    let (payments, b, c) = tokio::join!(
        payments,
        import(procs[0].api.clone(), "b"),
        import(procs[1].api.clone(), "c"),
    );
    assert_eq!((b.status, c.status), (201, 201), "{} / {}", b.text, c.text);
    let mut allowed = 0;
    for r in &payments {
        assert_eq!(r.status, 201, "{}", r.text);
        let verdict = r.body["verdict"].as_str().unwrap();
        assert!(
            ["allow", "deny_limit", "deny_no_mandate"].contains(&verdict),
            "{}",
            r.text
        );
        allowed += usize::from(verdict == "allow");
    }
    // One of b and c carries it: the one imported second, which superseded the other.
    for proc in &procs {
        let active = http
            .walk(&proc.api, &org.sandbox, "/v1/mandates?status=active")
            .await;
        assert_eq!(active.len(), 1, "{active:?}");
    }

    let last = import(procs[1].api.clone(), "d").await;
    assert_eq!(last.status, 201, "{}", last.text);
    assert_eq!(
        last.body["source"]["spent_before"]["count"], allowed,
        "{}",
        last.text
    );
    for i in 0.. {
        let r = pay(&http, &procs[i % 2].api, &agent_keys[3]).await;
        assert_eq!(r.status, 201, "{}", r.text);
        match r.body["verdict"].as_str().unwrap() {
            "allow" => allowed += 1,
            "deny_limit" => break,
            other => panic!("{other}: {}", r.text),
        }
    }
    assert_eq!(allowed, 3, "allows of 40 under a budget of 150");
    for proc in &procs {
        let listed = http
            .walk(&proc.api, &org.sandbox, "/v1/decisions?verdict=allow")
            .await;
        assert_eq!(listed.len(), 3, "on {}", proc.api);
    }
}
