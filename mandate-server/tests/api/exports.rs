//! `GET /v1/exports/decisions`: complete, oldest first, parseable NDJSON in the API's shape,
//! with the list filters and the agent-key scope of `GET /v1/decisions`.

use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, Currency, DecisionId, Mode, Nonce, Recipient,
    Verdict, VerdictClaims,
};
use mandate_server::model::Env;
use mandate_server::model::decision::Decision;
use mandate_server::services::exports::PAGE;
use mandate_server::storage::StorageError;
use mandate_server::storage::deciding::AgentHint;
use mandate_server::storage::sqlite::decisions;
use serde_json::Value;

use crate::helpers::{Resp, TestApp, spawn_app};

/// A decision shaped like the server's own, numbered `n`.
fn decision(agent: &str, verdict: Verdict, n: usize, iat: i64) -> Decision {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&(n as u64).to_be_bytes());
    bytes[8] = 0xd0;
    let mut nonce = bytes;
    nonce[8] = 0x70;
    Decision {
        claims: VerdictClaims {
            bindings: mandate_core::Bindings::default(),
            iss: "http://127.0.0.1".into(),
            jti: DecisionId::from_random(bytes),
            iat,
            exp: iat + 300,
            verdict,
            policy_verdict: verdict,
            mandate: None,
            policy_version: "pol_2026-11-22.1".into(),
            nonce: Nonce::from_random(nonce),
            request: AuthorizationRequest {
                agent: AgentId::parse(agent).unwrap(),
                amount: Amount::parse(&format!("{}.{:02}", n % 100, n % 97)).unwrap(),
                currency: Currency::parse("USD").unwrap(),
                recipient: Recipient::parse("vendor:acme").unwrap(),
                category: Category::parse("software").unwrap(),
            },
        },
        reason: (verdict != Verdict::Allow).then(|| format!("bulk decision {n}")),
        mode: Mode::Enforce,
        supersedes: None,
        review: None,
        created_ms: iat * 1000,
        is_request: true,
        review_state: None,
        signature: None,
    }
}

/// Inserts `decisions` directly, for volume, into the environment of `key`.
async fn insert(app: &TestApp, key: &str, decisions: Vec<Decision>) {
    let hash = mandate_server::storage::keys::hash(key);
    if let Some(db) = &app.db.postgres {
        return insert_postgres(&db.url, hash, decisions).await;
    }
    app.running
        .as_ref()
        .unwrap()
        .db
        .as_ref()
        .expect("the SQLite engine")
        .write(move |tx| -> Result<(), StorageError> {
            let (org, env): (String, String) = tx
                .query_row(
                    "SELECT org_id, env FROM api_keys WHERE hash = ?1",
                    [&hash[..]],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .map_err(mandate_server::storage::sqlite::sqlite_error)?;
            let env = Env::parse(&env).unwrap();
            for d in &decisions {
                // A decision's agent is registered (SQLite stores its key, NOT NULL).
                tx.execute(
                    "INSERT OR IGNORE INTO agents (id, org_id, env, created_ms)
                     VALUES (?1, ?2, ?3, 0)",
                    rusqlite::params![d.claims.request.agent.as_str(), org, env.as_str()],
                )
                .map_err(mandate_server::storage::sqlite::sqlite_error)?;
                decisions::insert_with(tx, &org, env, d, AgentHint::default())
                    .map_err(mandate_server::storage::sqlite::sqlite_error)?;
            }
            Ok(())
        })
        .await
        .unwrap();
}

/// [`insert`] on PostgreSQL, through the engine's own statements, in one transaction.
async fn insert_postgres(url: &str, hash: [u8; 32], decisions: Vec<Decision>) {
    use mandate_server::storage::postgres;
    let pool = deadpool_postgres::Config {
        url: Some(url.to_owned()),
        ..Default::default()
    }
    .create_pool(
        Some(deadpool_postgres::Runtime::Tokio1),
        tokio_postgres::NoTls,
    )
    .unwrap();
    let mut client = pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    let key = tx
        .query_one(
            "SELECT org_id, env FROM api_keys WHERE hash = $1",
            &[&&hash[..]],
        )
        .await
        .unwrap();
    let (org_id, env): (String, String) = (key.get(0), key.get(1));
    let env = Env::parse(&env).unwrap();
    let mut agents = std::collections::HashMap::new();
    for d in &decisions {
        let agent = d.claims.request.agent.as_str().to_owned();
        if !agents.contains_key(&agent) {
            // An agent that is not registered (PostgreSQL's schema does not ask) gets no
            // agent's key: 0, which no agent has.
            let row = tx
                .query_opt(
                    "SELECT seq FROM agents WHERE org_id = $1 AND env = $2 AND id = $3",
                    &[&org_id.as_str(), &env.as_str(), &agent],
                )
                .await
                .unwrap();
            agents.insert(agent.clone(), row.map_or(0, |r| r.get::<_, i64>(0)));
        }
        let pg = postgres::PgTx::of_transaction(&tx);
        postgres::decisions::insert(&pg, &org_id, env, agents[&agent], d)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

/// The export's lines, each parsed.
fn lines(r: &Resp) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    assert!(r.text.is_empty() || r.text.ends_with('\n'));
    r.text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn ids(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect()
}

#[mandate_test_macros::on_each_engine]
async fn exports_every_matching_decision_oldest_first() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let buyer = app.standard_agent(&org, "buyer").await;
    app.standard_agent(&org, "other").await;
    let mut expected = Vec::new();
    for amount in ["10", "120"] {
        let r = app.authorize(&buyer, amount, "software").await;
        expected.push(r.body["id"].as_str().unwrap().to_owned());
    }
    // A few thousand more, more than three pages, inserted directly for speed.
    let count = 3 * PAGE as usize + 123;
    let start = app.clock_now().unix_timestamp();
    let bulk: Vec<Decision> = (0..count)
        .map(|n| {
            let agent = if n % 2 == 0 { "agt_buyer" } else { "agt_other" };
            let verdict = if n % 3 == 0 {
                Verdict::DenyLimit
            } else {
                Verdict::Allow
            };
            decision(agent, verdict, n, start + n as i64)
        })
        .collect();
    expected.extend(bulk.iter().map(|d| d.claims.jti.to_string()));
    let by_agent_other: Vec<String> = bulk
        .iter()
        .filter(|d| d.claims.request.agent.as_str() == "agt_other")
        .map(|d| d.claims.jti.to_string())
        .collect();
    insert(&app, &org, bulk).await;
    // Decisions of another organization and of the live environment are never exported.
    let globex = app.onboard("globex").await;
    let foreign = (0..50)
        .map(|n| decision("agt_buyer", Verdict::Allow, 100_000 + n, start))
        .collect();
    insert(&app, &globex.sandbox, foreign).await;
    let live = (0..50)
        .map(|n| decision("agt_buyer", Verdict::Allow, 200_000 + n, start))
        .collect();
    insert(&app, &app.org.live, live).await;

    let r = app.get(&org, "/v1/exports/decisions").await;
    assert_eq!(r.header("content-length"), None, "the export is streamed");
    let all = lines(&r);
    assert_eq!(all.len(), count + 2);
    assert_eq!(ids(&all), expected, "complete and oldest first");
    // Each line is the decision object of the API.
    let first = app
        .get(&org, &format!("/v1/decisions/{}", expected[0]))
        .await;
    assert_eq!(all[0], first.body);
    let bulk_line = app
        .get(&org, &format!("/v1/decisions/{}", expected[7]))
        .await;
    assert_eq!(all[7], bulk_line.body);

    // The list filters apply, alone and together.
    let other = lines(&app.get(&org, "/v1/exports/decisions?agent=agt_other").await);
    assert_eq!(ids(&other), by_agent_other);
    let denied = lines(
        &app.get(&org, "/v1/exports/decisions?verdict=deny_limit")
            .await,
    );
    assert_eq!(denied.len(), count.div_ceil(3) + 1);
    assert!(denied.iter().all(|d| d["verdict"] == "deny_limit"));
    let both = lines(
        &app.get(
            &org,
            "/v1/exports/decisions?agent=agt_other&policy_verdict=allow",
        )
        .await,
    );
    assert!(
        both.iter()
            .all(|d| d["request"]["agent"] == "agt_other" && d["policy_verdict"] == "allow")
    );
    assert_eq!(
        both.len(),
        (0..count).filter(|n| n % 2 == 1 && n % 3 != 0).count()
    );

    // An agent key exports its own decisions only; asking for another agent's is empty.
    let own = lines(&app.get(&buyer, "/v1/exports/decisions").await);
    assert_eq!(own.len(), 2 + count.div_ceil(2));
    assert!(own.iter().all(|d| d["request"]["agent"] == "agt_buyer"));
    let none = app
        .get(&buyer, "/v1/exports/decisions?agent=agt_other")
        .await;
    assert!(lines(&none).is_empty());
}

#[mandate_test_macros::on_each_engine]
async fn the_export_refuses_paging_and_bad_filters() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let paging = "the export is not paginated: it takes no limit or cursor, only the filters agent, verdict, policy_verdict and review_status, and after";
    for query in ["limit=10", "cursor=cur_x", "agent=agt_a&limit=1"] {
        let r = app
            .get(&org, &format!("/v1/exports/decisions?{query}"))
            .await;
        assert_eq!(r.assert_error(400, "invalid_request"), paging, "{query}");
    }
    let r = app.get(&org, "/v1/exports/decisions?verdict=maybe").await;
    assert!(
        r.assert_error(400, "invalid_request")
            .starts_with("verdict must be one of allow, review")
    );
    let r = app.get(&org, "/v1/exports/decisions?since=2026").await;
    assert!(
        r.assert_error(400, "invalid_request")
            .starts_with("unknown query parameter since")
    );
    // Nothing to export is an empty body, not an error.
    let empty = app.get(&org, "/v1/exports/decisions").await;
    assert!(lines(&empty).is_empty());
    // Only GET.
    app.post_empty(&org, "/v1/exports/decisions")
        .await
        .assert_error(400, "invalid_request");
}

/// `after`: the matching decisions committed after the one it names, oldest first, across
/// pages; nothing new is an empty body; the filters and the agent-key scope apply; an
/// `after` that is no readable decision is a 400 saying what to pass.
#[mandate_test_macros::on_each_engine]
async fn an_incremental_export_returns_what_was_committed_after_the_decision_it_names() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let buyer = app.standard_agent(&org, "buyer").await;
    let other = app.standard_agent(&org, "other").await;
    let mut ids_made = Vec::new();
    for (key, amount) in [(&buyer, "10"), (&other, "11"), (&buyer, "120")] {
        let r = app.authorize(key, amount, "software").await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids_made.push(r.body["id"].as_str().unwrap().to_owned());
    }
    let all = ids(&lines(&app.get(&org, "/v1/exports/decisions").await));
    assert_eq!(all, ids_made);
    let after = |id: &str| format!("/v1/exports/decisions?after={id}");
    assert_eq!(
        ids(&lines(&app.get(&org, &after(&ids_made[0])).await)),
        ids_made[1..]
    );
    // Caught up: empty, and the same `after` later returns only what came since.
    assert!(lines(&app.get(&org, &after(&ids_made[2])).await).is_empty());
    let start = app.clock_now().unix_timestamp();
    let bulk: Vec<Decision> = (0..PAGE as usize + 10)
        .map(|n| decision("agt_other", Verdict::Allow, n, start + n as i64))
        .collect();
    let bulk_ids: Vec<String> = bulk.iter().map(|d| d.claims.jti.to_string()).collect();
    insert(&app, &org, bulk).await;
    let r = app.authorize(&buyer, "12", "software").await;
    let newest = r.body["id"].as_str().unwrap().to_owned();
    let mut expected = bulk_ids.clone();
    expected.push(newest.clone());
    assert_eq!(
        ids(&lines(&app.get(&org, &after(&ids_made[2])).await)),
        expected,
        "everything since, over two pages, oldest first"
    );
    assert_eq!(
        ids(&lines(&app.get(&org, &after(&bulk_ids[4])).await)),
        expected[5..]
    );
    // With filters: the decision named need not match them.
    let buyers = lines(
        &app.get(
            &org,
            &format!(
                "/v1/exports/decisions?agent=agt_buyer&after={}",
                ids_made[1]
            ),
        )
        .await,
    );
    assert_eq!(ids(&buyers), [ids_made[2].clone(), newest.clone()]);
    // An agent key resumes after its own decisions only.
    let own = lines(&app.get(&buyer, &after(&ids_made[0])).await);
    assert_eq!(ids(&own), [ids_made[2].clone(), newest]);
    let r = app.get(&buyer, &after(&ids_made[1])).await;
    assert!(
        r.assert_error(404, "not_found")
            .starts_with("after names no decision of this environment that this key can read"),
        "{}",
        r.text
    );
    // Another environment's decision or an unknown one: 404, as reading it would answer;
    // not an id, or twice: 400.
    let live_key = app.org.live.clone();
    let r = app.get(&live_key, &after(&ids_made[0])).await;
    assert!(
        r.assert_error(404, "not_found")
            .contains("pass the id of the last decision a previous export returned")
    );
    let unknown = DecisionId::from_random([7; 16]).to_string();
    app.get(&org, &after(&unknown))
        .await
        .assert_error(404, "not_found");
    let r = app.get(&org, "/v1/exports/decisions?after=agt_buyer").await;
    assert!(
        r.assert_error(400, "invalid_request")
            .starts_with("after must be a decision id")
    );
    let twice = format!(
        "/v1/exports/decisions?after={}&after={}",
        ids_made[0], ids_made[1]
    );
    assert_eq!(
        app.get(&org, &twice)
            .await
            .assert_error(400, "invalid_request"),
        "query parameter after is given more than once"
    );
}
