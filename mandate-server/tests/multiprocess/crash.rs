//! `kill -9` of one process under load: every decision a client was answered 201 for, by
//! either process, is stored and reads back identical from the process that survived, and
//! the survivor goes on deciding for the same agents at once. And of a process holding an
//! Idempotency-Key: the key is executed once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

use crate::deploy::{Deployment, Http, Proc, Resp, mandate, request};
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
            // Each process admits its share of the key's rate: over it, wait a little.
            Ok(resp) if resp.status == 429 => {
                tokio::time::sleep(Duration::from_millis(50)).await;
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
    // The organization's key reads back thousands of decisions: not what the rate is for.
    deployment.operator(&["set-rate", &org.sandbox, "--per-second", "100000"]);
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

/// Starts a `serve` process, sends it `body` under Idempotency-Key `idem` while the agent's
/// row is locked here (as a long transaction would hold it), waits until the process has
/// claimed the key and waits on the row, and kills it with SIGKILL. With `abort`, the
/// statement it left waiting is ended too (as when the database notices the dead client
/// first); without, it runs on once the row is free. Returns when the row is free.
async fn kill_while_holding(
    deployment: &Deployment,
    http: &Http,
    key: &str,
    body: &str,
    idem: &str,
    abort: bool,
) {
    let mut victim = deployment.serve();
    let mut admin = deployment.db.connect().await;
    let lock = admin.transaction().await.unwrap();
    lock.execute(
        "SELECT version FROM agents WHERE id = 'agt_held' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let in_flight = tokio::spawn({
        let (http, api, key, body, idem) = (
            http.clone(),
            victim.api.clone(),
            key.to_owned(),
            body.to_owned(),
            idem.to_owned(),
        );
        async move {
            http.try_send(
                Method::POST,
                &api,
                &key,
                "/v1/authorizations",
                Some(&body),
                Some(&idem),
            )
            .await
        }
    });
    let observer = deployment.db.connect().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Claimed, and its statement waiting on the row lock.
        let claimed: i64 = observer
            .query_one(
                "SELECT COUNT(*) FROM idempotency WHERE idem_key = $1 AND status IS NULL",
                &[&idem],
            )
            .await
            .unwrap()
            .get(0);
        let waiting: i64 = observer
            .query_one(
                "SELECT COUNT(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if claimed == 1 && waiting == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the process never claimed {idem} and waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    victim.kill9();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the killed process answered"
    );
    if abort {
        observer
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap();
    }
    lock.rollback().await.unwrap();
}

/// A process is killed while it holds an Idempotency-Key, its decision waiting on the
/// agent's row. If the database then finishes the transaction the dead process left (it
/// commits the decision and the key's answer together), a retry on another process replays
/// that answer; if it does not (the process died before sending all of it, or the database
/// ends it, as here the second time), the retry is refused with 409 while the dead
/// process's claim lasts (nothing is done twice), then executed once the claim has run out.
/// Either way each key has one decision.
#[tokio::test]
async fn an_idempotency_key_held_by_a_killed_process_is_executed_once() {
    let deployment = deployment!();
    let org = deployment.onboard("acme");
    let survivor = deployment.serve();
    let http = Http::default();
    let key = http.agent(&survivor.api, &org.sandbox, "held").await;
    http.mandate(
        &survivor.api,
        &org.sandbox,
        &mandate("held", "100", "1000", None),
    )
    .await;
    let send = |body: String, idem: &'static str| {
        let (http, api, key) = (http.clone(), survivor.api.clone(), key.clone());
        async move {
            http.try_send(
                Method::POST,
                &api,
                &key,
                "/v1/authorizations",
                Some(&body),
                Some(idem),
            )
            .await
            .unwrap()
        }
    };
    // Retries (one a second) until the key is answered 201: 409 meanwhile.
    let settle = |body: String, idem: &'static str| async move {
        let since = Instant::now();
        loop {
            let r = send(body.clone(), idem).await;
            if r.status == 201 {
                return (r, since.elapsed());
            }
            let message = r.assert_error(409, "idempotency_conflict");
            assert!(
                message.contains("still being processed"),
                "{idem}: {message}"
            );
            assert!(
                since.elapsed() < Duration::from_secs(80),
                "{idem}: the dead process's claim still holds after 80 s"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };

    let (left, ended) = (request("12", "software"), request("13", "software"));
    // The transaction left behind may run to its end once the row is free...
    kill_while_holding(&deployment, &http, &key, &left, "pay-1", false).await;
    // ...this one is ended.
    kill_while_holding(&deployment, &http, &key, &ended, "pay-2", true).await;
    let ((first, first_after), (second, second_after)) = tokio::join!(
        settle(left.clone(), "pay-1"),
        settle(ended.clone(), "pay-2")
    );
    eprintln!(
        "pay-1 answered after {first_after:?} (replayed: {}), pay-2 after {second_after:?}",
        first.replayed
    );
    assert!(!second.replayed, "{}", second.text);
    assert!(
        second_after >= Duration::from_secs(50),
        "pay-2 was executed while the dead process's claim still held: {second_after:?}"
    );
    if !first.replayed {
        assert!(first_after >= Duration::from_secs(50), "{first_after:?}");
    }
    for (answer, body, idem) in [(&first, &left, "pay-1"), (&second, &ended, "pay-2")] {
        assert_eq!(answer.body["verdict"], "allow", "{}", answer.text);
        let again = send(body.clone(), idem).await;
        assert!(again.replayed, "{idem}");
        assert_eq!(again.text, answer.text, "{idem}");
    }
    let stored = http
        .walk(&survivor.api, &org.sandbox, "/v1/decisions?agent=agt_held")
        .await;
    let mut ids: Vec<&Value> = stored.iter().map(|d| &d["id"]).collect();
    ids.sort_by_key(|v| v.as_str().unwrap().to_owned());
    let mut expected = vec![&first.body["id"], &second.body["id"]];
    expected.sort_by_key(|v| v.as_str().unwrap().to_owned());
    assert_eq!(ids, expected, "{stored:?}");
}
