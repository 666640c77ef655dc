//! `kill -9` of one process under load: every decision a client was answered 201 for, by
//! either process, is stored and reads back identical from the process that survived, and
//! the survivor goes on deciding for the same agents at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;

use crate::deploy::{Http, Proc, Resp, mandate, request};
use crate::deployment;

/// Agents sending at once, each alternating between the two processes.
const AGENTS: usize = 16;

/// An answered authorization.
struct Answered {
    agent: usize,
    resp: Resp,
}

/// Sends requests for agent `a`, alternately to `bases`, until `stop`; keeps each 201.
async fn load(
    http: Http,
    bases: Vec<String>,
    key: String,
    a: usize,
    stop: Instant,
    answered: Arc<Mutex<Vec<Answered>>>,
) -> usize {
    let mut failed = 0;
    let mut n = 0usize;
    while Instant::now() < stop {
        let base = &bases[n % bases.len()];
        n += 1;
        let amount = format!("{}.{:02}", 1 + n % 40, (a * 7 + n) % 100);
        match http
            .try_send(
                Method::POST,
                base,
                &key,
                "/v1/authorizations",
                Some(&request(&amount, "software")),
                None,
            )
            .await
        {
            Ok(resp) if resp.status == 201 => {
                answered.lock().unwrap().push(Answered { agent: a, resp })
            }
            Ok(resp) => panic!("agent {a}: {} {}", resp.status, resp.text),
            // The killed process: connection refused or cut.
            Err(_) => failed += 1,
        }
    }
    failed
}

/// Checks that every answered decision reads back from `survivor` as it was answered.
async fn all_stored(http: &Http, survivor: &Proc, org_key: &str, answered: &[Answered]) {
    for chunk in answered.chunks(32) {
        let reads = futures_util::future::join_all(chunk.iter().map(|a| {
            let id = a.resp.body["id"].as_str().unwrap().to_owned();
            async move {
                (
                    a,
                    http.get(&survivor.api, org_key, &format!("/v1/decisions/{id}"))
                        .await,
                )
            }
        }))
        .await;
        for (a, stored) in reads {
            assert_eq!(
                stored.status, 200,
                "agent {}: answered {} but {}",
                a.agent, a.resp.text, stored.text
            );
            for field in [
                "id",
                "verdict",
                "policy_verdict",
                "mandate",
                "nonce",
                "iat",
                "exp",
                "request",
            ] {
                assert_eq!(
                    stored.body[field], a.resp.body[field],
                    "{field} of {}: answered {} stored {}",
                    a.resp.body["id"], a.resp.text, stored.text
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_one_process_under_load_loses_no_answered_decision() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let mut procs: Vec<Proc> = deployment.serve_n(2);
    let http = Http::default();
    let mut keys = Vec::new();
    for a in 0..AGENTS {
        let name = format!("busy{a}");
        let key = http.agent(&procs[a % 2].api, &org.sandbox, &name).await;
        http.mandate(
            &procs[a % 2].api,
            &org.sandbox,
            &mandate(&name, "100", "1000000", None),
        )
        .await;
        keys.push(key);
    }
    // Two rounds: the first process is killed under load, a new one started; then the
    // second original is killed.
    for round in 0..2 {
        let answered = Arc::new(Mutex::new(Vec::new()));
        let bases: Vec<String> = procs.iter().map(|p| p.api.clone()).collect();
        let stop = Instant::now() + Duration::from_millis(3000);
        let loads: Vec<_> = (0..AGENTS)
            .map(|a| {
                tokio::spawn(load(
                    http.clone(),
                    bases.clone(),
                    keys[a].clone(),
                    a,
                    stop,
                    answered.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let mut victim = procs.remove(0);
        let before_kill = answered.lock().unwrap().len();
        victim.kill9();
        let mut failed = 0;
        for l in loads {
            failed += l.await.unwrap();
        }
        let answered = std::mem::take(&mut *answered.lock().unwrap());
        assert!(before_kill > 0, "round {round}: no load before the kill");
        assert!(failed > 0, "round {round}: the kill cut nothing");
        eprintln!(
            "round {round}: {} decisions answered ({before_kill} before the kill), {failed} requests cut",
            answered.len()
        );
        let survivor = &procs[0];
        all_stored(&http, survivor, &org.sandbox, &answered).await;
        // Nothing the killed process held stands in the way: every agent is decided at once.
        let one = request("1", "software");
        let next = futures_util::future::join_all(keys.iter().map(|k| {
            http.try_send(
                Method::POST,
                &survivor.api,
                k,
                "/v1/authorizations",
                Some(&one),
                None,
            )
        }))
        .await;
        for (a, r) in next.into_iter().enumerate() {
            let r = r.unwrap();
            assert_eq!(r.status, 201, "agent {a} after the kill: {}", r.text);
        }
        procs.push(deployment.serve());
    }
}
