//! Keys and state go on (the README's check 4): the release's signing keys still sign, its
//! API keys authenticate as what they were bound to, new decisions follow the old ones in
//! every export, an AP2 credential accepted before stays used, the pending review is still
//! approvable within its 24 hours, and an Idempotency-Key replays within its 24 hours.
//!
//! The requests are the fixture's (`make.py`): which agent has which mandate.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::P256Signer;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::ap2_tokens::closed_by;
use crate::exports::{current_kid, export_lines, id_of, review_expiry, verify_new};
use crate::fixture::{Export, Fixture};
use crate::server::Server;

/// The JWK Set the new server publishes holds the release's keys, the same coordinates
/// under the same kid (it may have stopped publishing a retired one), and each
/// environment's current signing key; beside them only the decision log's keys.
pub async fn assert_jwks(server: &Server, fixture: &Fixture) {
    let published = server.jwks().await;
    let released = fixture.jwks["keys"].as_array().unwrap();
    let keys = published["keys"].as_array().expect("a JWK Set");
    // The decision log's checkpoint keys (`use: tlog-checkpoint`) are new in this build:
    // the server makes one for each environment at its first start.
    for key in keys.iter().filter(|k| k["use"] != "tlog-checkpoint") {
        let same = released.iter().find(|k| k["kid"] == key["kid"]);
        assert_eq!(
            same,
            Some(key),
            "the server publishes a key the release did not: {key}"
        );
    }
    for export in &fixture.exports {
        let kid = current_kid(export);
        assert!(
            keys.iter().any(|k| k["kid"] == kid.as_str()),
            "{}'s signing key {kid} is no longer published",
            export.name
        );
    }
}

/// The decision ids of export lines (or of listed decisions).
fn ids<'a>(values: impl IntoIterator<Item = &'a Value>) -> BTreeSet<String> {
    values
        .into_iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every organization key of the fixture lists its environment's decisions, and every
/// agent key its agent's own: the keys authenticate, bound to the organization,
/// environment, class and agent they were issued for.
pub async fn assert_keys(server: &Server, fixture: &Fixture) {
    for export in &fixture.exports {
        let lines: Vec<Value> = export
            .lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let (org_name, _) = export.name.split_once('/').unwrap();
        for (env, key) in &fixture.org(org_name).all_keys {
            if *env == export.env {
                let listed = server.walk(key, "/v1/decisions").await;
                assert_eq!(ids(&listed), ids(&lines), "{}'s key {key}", export.name);
            }
        }
        let prefix = format!("{}/", export.name);
        for (name, key) in &fixture.agent_keys {
            let Some(agent) = name.strip_prefix(&prefix) else {
                continue;
            };
            let own = lines.iter().filter(|l| l["request"]["agent"] == agent);
            let listed = server.walk(key, "/v1/decisions").await;
            assert_eq!(ids(&listed), ids(own), "agent {name}'s key");
        }
    }
}

/// An authorization that each environment's mandate allows (`make.py`), by agent.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "Acme Corp/sandbox",
        "agt_buyer",
        r#"{"amount": 5, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#,
    ),
    (
        "Acme Corp/live",
        "agt_live-bot",
        r#"{"amount": 20, "currency": "EUR", "recipient": "vendor:rail", "category": "travel"}"#,
    ),
    (
        "Globex/sandbox",
        "agt_fleet",
        r#"{"amount": 4, "currency": "GBP", "recipient": "vendor:pump", "category": "fuel"}"#,
    ),
    (
        "Globex/live",
        "agt_fleet",
        r#"{"amount": 4, "currency": "GBP", "recipient": "vendor:pump", "category": "fuel"}"#,
    ),
];

/// Makes decisions on the converted database; returns the ids made, by export, in order.
pub async fn make_decisions(server: &Server, fixture: &Fixture) -> BTreeMap<String, Vec<String>> {
    let mut made: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, agent, body) in ALLOWED {
        let r = server
            .post(fixture.agent_key(name, agent), "/v1/authorizations", body)
            .await;
        assert_eq!(r.status, 201, "{name} {agent}: {}", r.text);
        assert_eq!(r.body["verdict"], "allow", "{name} {agent}: {}", r.text);
        made.entry((*name).to_owned())
            .or_default()
            .push(r.body["id"].as_str().unwrap().to_owned());
    }
    let sandbox = made.get_mut("Acme Corp/sandbox").unwrap();
    sandbox.extend(ap2(server, fixture).await);
    sandbox.extend(pending_review(server, fixture.export("Acme Corp/sandbox")).await);
    sandbox.extend(idempotent_request(server, fixture).await);
    made
}

/// `shopper`'s closed mandate for transaction `tx-1`, signed again by the agent's key, is a
/// replay (the credential accepted by the release stays used); one for a new transaction is
/// allowed while the imported open mandate has not expired. Returns the decisions made.
async fn ap2(server: &Server, fixture: &Fixture) -> Vec<String> {
    let org_key = &fixture.org("Acme Corp").keys["sandbox"];
    let mandates = server.walk(org_key, "/v1/mandates?agent=agt_shopper").await;
    let open = mandates
        .iter()
        .find_map(|m| m["source"]["open_mandate"].as_str())
        .expect("shopper's mandate imported from an AP2 open mandate");
    // make.py's agent key: the P-256 scalar 0x2222.
    let mut scalar = [0u8; 32];
    scalar[30..].copy_from_slice(&[0x22, 0x22]);
    let holder = P256Signer::from_secret_bytes("agent-1", &scalar).unwrap();
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let shopper = fixture.agent_key("Acme Corp/sandbox", "agt_shopper");
    let ask = |tx: &str| {
        let closed = closed_by(&holder, open, tx, 1234, "USD", "s-1", now);
        json!({"amount": 12.34, "currency": "USD", "recipient": "vendor:s-1",
               "category": "shopping", "ap2": {"closed_mandate": closed}})
        .to_string()
    };
    let mut made = Vec::new();
    let replay = server
        .post(shopper, "/v1/authorizations", &ask("tx-1"))
        .await;
    assert_eq!(replay.status, 201, "{}", replay.text);
    assert_eq!(replay.body["verdict"], "deny_replay", "{}", replay.text);
    made.push(replay.body["id"].as_str().unwrap().to_owned());
    if open_mandate_expiry(open) > now + 60 {
        let fresh = server
            .post(shopper, "/v1/authorizations", &ask("tx-2"))
            .await;
        assert_eq!(fresh.status, 201, "{}", fresh.text);
        assert_eq!(fresh.body["verdict"], "allow", "{}", fresh.text);
        made.push(fresh.body["id"].as_str().unwrap().to_owned());
    }
    made
}

/// The `exp` of an AP2 open mandate (its one disclosure, `[salt, mandate]`).
fn open_mandate_expiry(open: &str) -> i64 {
    let disclosure = open.split('~').nth(1).expect("an SD-JWT with a disclosure");
    let item: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(disclosure).unwrap()).unwrap();
    item[1]["exp"].as_i64().expect("the open mandate's exp")
}

/// The review the release left pending: approved with a fresh decision that supersedes
/// its decision while its 24 hours run, refused as expired after. Returns the decision
/// made, if one was.
async fn pending_review(server: &Server, export: &Export) -> Option<String> {
    let decision: Value = export
        .lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|d| d["review_status"] == "pending")
        .expect("a review left pending by the release");
    let expires = review_expiry(&decision).unwrap();
    let path = format!(
        "/v1/reviews/{}/approve",
        decision["review"].as_str().unwrap()
    );
    let now = OffsetDateTime::now_utc();
    let r = server
        .call(reqwest::Method::POST, &export.key, &path, None, None)
        .await;
    if r.status == 201 {
        assert!(
            now < expires,
            "approved after its expiry {expires}: {}",
            r.text
        );
        assert_eq!(r.body["supersedes"], decision["id"], "{}", r.text);
        assert_eq!(r.body["verdict"], "allow", "{}", r.text);
        return Some(r.body["id"].as_str().unwrap().to_owned());
    }
    assert!(
        now > expires - Duration::from_secs(60),
        "the pending review, {expires} still ahead, could not be approved: {}",
        r.text
    );
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    None
}

/// `make.py`'s first request, sent twice under Idempotency-Key `pay-1`, exactly as it sent
/// it (Python's `json.dumps`).
const PAY_1: &str =
    r#"{"amount": 10, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#;

/// The release's first decision, made under Idempotency-Key `pay-1`: the same request
/// with the same key replays it within 24 hours (the record kept by the conversion, now
/// keyed by organization too), and is a new request after (the server's start sweeps
/// older records). Returns the decision made, if one was.
async fn idempotent_request(server: &Server, fixture: &Fixture) -> Option<String> {
    let first: Value = serde_json::from_str(&fixture.export("Acme Corp/sandbox").lines[0]).unwrap();
    assert_eq!(
        first["request"]["amount"], 10,
        "make.py's pay-1 first: {first}"
    );
    let made = OffsetDateTime::parse(first["created_at"].as_str().unwrap(), &Rfc3339).unwrap();
    let day = Duration::from_secs(24 * 3600);
    let margin = Duration::from_secs(300);
    let now = OffsetDateTime::now_utc();
    let buyer = fixture.agent_key("Acme Corp/sandbox", "agt_buyer");
    let r = server
        .call(
            reqwest::Method::POST,
            buyer,
            "/v1/authorizations",
            Some(PAY_1),
            Some("pay-1"),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_owned();
    if now < made + day - margin {
        assert!(
            r.replayed,
            "pay-1 within its 24 hours was not replayed: {}",
            r.text
        );
    }
    if now > made + day + margin {
        assert!(!r.replayed, "pay-1 replayed after its 24 hours: {}", r.text);
    }
    if r.replayed {
        assert_eq!(id, first["id"].as_str().unwrap(), "{}", r.text);
        None
    } else {
        Some(id)
    }
}

/// The export continues where it was: `after=` the release's last exported decision
/// answers exactly the decisions `made` on the new build, in order, each signed by the
/// environment's key of the release, and `after=` the mark answers what followed it then
/// these.
pub async fn assert_continued(
    server: &Server,
    fixture: &Fixture,
    made: &BTreeMap<String, Vec<String>>,
) {
    let published = server.jwks().await;
    for export in &fixture.exports {
        let new = &made[&export.name];
        let last = export
            .then
            .last()
            .or(export.after.as_ref())
            .map(String::as_str);
        let lines = settled(server, export, last, new.len()).await;
        let found: Vec<String> = lines.iter().map(|l| id_of(l)).collect();
        assert_eq!(&found, new, "{}: after={last:?}", export.name);
        for line in &lines {
            let token = crate::exports::token_of(line);
            assert_eq!(
                verify_new(&token, &published, &current_kid(export)),
                id_of(line)
            );
        }
        let from_mark: Vec<String> = export_lines(server, export, export.after.as_deref())
            .await
            .iter()
            .map(|l| id_of(l))
            .collect();
        let expected: Vec<String> = export.then.iter().chain(new).cloned().collect();
        assert_eq!(from_mark, expected, "{}: after= the mark", export.name);
    }
}

/// The export after `after`, once it holds `n` decisions (a decision is exported once
/// every earlier one of its organization has committed): up to 10 s.
async fn settled(server: &Server, export: &Export, after: Option<&str>, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines = export_lines(server, export, after).await;
        if lines.len() >= n || std::time::Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
