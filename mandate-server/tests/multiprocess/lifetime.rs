//! The lifetime limits of the third round across processes: `limits.total` and the count
//! limits decided by three `serve` processes on one database hold exactly, as one process
//! holds them.

use std::collections::BTreeMap;

use futures_util::future::join_all;

use crate::deploy::{Http, Resp};
use crate::deployment;

/// Twelve agents, four with `total` 150, four with a count limit of 3 a day, four with a
/// lifetime count of 2, each send ten requests of 40 at once, consecutive ones to
/// different processes: exactly 3, 3 and 2 of each agent's are allowed, the rest
/// `deny_limit` naming the limit, and every process lists exactly those allows.
#[tokio::test]
async fn total_and_counts_are_exact_across_processes() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let procs = deployment.serve_n(3);
    let http = Http::default();
    const EACH: usize = 10;
    // (name, limits, allows expected, the limit the denials name)
    let kinds = [
        ("total", r#""total": 150"#, 3, "over the total limit 150"),
        (
            "day",
            r#""count": {"per_day": 3}"#,
            3,
            "count.per_day limit 3",
        ),
        ("life", r#""count": {"total": 2}"#, 2, "count.total limit 2"),
    ];
    let mut agents = Vec::new();
    for round in 0..4 {
        for (kind, limits, allows, named) in kinds {
            let name = format!("{kind}{round}");
            let proc = &procs[agents.len() % procs.len()];
            let key = http.agent(&proc.api, &org.sandbox, &name).await;
            let body = format!(
                r#"{{"agent": "agt_{name}", "limits": {{"per_transaction": 100, "currency": "USD", {limits}}},
                    "categories": ["software"], "expires": "2099-12-31"}}"#
            );
            http.mandate(&proc.api, &org.sandbox, &body).await;
            agents.push((name, key, allows, named));
        }
    }
    let sends = (0..agents.len()).flat_map(|a| (0..EACH).map(move |n| (a, n)));
    let answers = join_all(sends.map(|(a, n)| {
        let (http, base, key) = (
            http.clone(),
            procs[(a + n) % procs.len()].api.clone(),
            agents[a].1.clone(),
        );
        async move { (a, http.authorize(&base, &key, "40", "software").await) }
    }))
    .await;
    let mut by_agent: Vec<Vec<Resp>> = vec![Vec::new(); agents.len()];
    for (a, r) in answers {
        by_agent[a].push(r);
    }
    for ((name, _, allows, named), answers) in agents.iter().zip(&by_agent) {
        let mut counts = BTreeMap::<String, usize>::new();
        for r in answers {
            assert_eq!(r.status, 201, "{}", r.text);
            let verdict = r.body["verdict"].as_str().unwrap().to_owned();
            if verdict == "deny_limit" {
                let reason = r.body["reason"].as_str().unwrap();
                assert!(reason.contains(named), "{name}: {reason}");
            }
            *counts.entry(verdict).or_default() += 1;
        }
        assert_eq!(counts.get("allow"), Some(allows), "{name}: {counts:?}");
        assert_eq!(
            counts.get("deny_limit"),
            Some(&(EACH - allows)),
            "{name}: {counts:?}"
        );
        for proc in &procs {
            let allowed = http
                .walk(
                    &proc.api,
                    &org.sandbox,
                    &format!("/v1/decisions?agent=agt_{name}&verdict=allow"),
                )
                .await;
            assert_eq!(allowed.len(), *allows, "{name} on {}", proc.api);
        }
    }
}
