//! Creating the agents and their mandates through the API.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bail;
use crate::error::{Context, Error, Result};
use crate::http::{Conn, write_post};

/// An agent the load is spread over.
#[derive(Debug, Clone)]
pub struct Agent {
    /// `agt_<name>`.
    pub id: String,
    /// Its key.
    pub key: String,
    /// Its mandate's id.
    pub mandate: String,
}

/// The mandate every agent gets. `per_month` is generous so that allow stays allow for
/// the whole run; amounts above `review_above` (and within `per_transaction`) are reviews.
pub const PER_TRANSACTION: u32 = 1000;
/// See [`PER_TRANSACTION`].
pub const REVIEW_ABOVE: u32 = 100;
/// See [`PER_TRANSACTION`].
pub const PER_MONTH: u64 = 1_000_000_000;

/// The name of agent `i`.
pub fn agent_name(i: usize) -> String {
    format!("bench-{i:07}")
}

/// POSTs `body` with `key`, retrying 429s, and returns the JSON of a 2xx.
pub async fn post_json(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    path: &str,
    key: &str,
    body: &Value,
) -> Result<Value> {
    let host = addr.to_string();
    let mut request = Vec::new();
    write_post(
        &mut request,
        &host,
        path,
        Some(key),
        body.to_string().as_bytes(),
    );
    for attempt in 0..50 {
        let c = match conn {
            Some(c) => c,
            None => conn.insert(Conn::connect(addr).await.ctx("connecting")?),
        };
        let response = match c.request(&request).await {
            Ok(r) => r,
            Err(_) if attempt < 3 => {
                // A keep-alive connection the server closed between requests: reconnect.
                *conn = None;
                continue;
            }
            Err(e) => bail!("POST {path}: {e}"),
        };
        let (status, close) = (response.status, response.close);
        let text = String::from_utf8_lossy(response.body).into_owned();
        if close {
            *conn = None;
        }
        if status == 429 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if !(200..300).contains(&status) {
            bail!("POST {path} answered {status}: {text}");
        }
        return serde_json::from_str(&text).ctx(format!("POST {path}: body {text:?}"));
    }
    bail!("POST {path}: still rate limited after 50 tries")
}

/// Sets the sandbox to enforce (it is by default; say so explicitly).
pub async fn enforce(addr: SocketAddr, org_key: &str) -> Result<()> {
    let mut conn = None;
    post_json(
        &mut conn,
        addr,
        "/v1/enforcement",
        org_key,
        &json!({"mode": "enforce"}),
    )
    .await?;
    Ok(())
}

async fn create_one(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    org_key: &str,
    i: usize,
) -> Result<Agent> {
    let name = agent_name(i);
    let agent = post_json(conn, addr, "/v1/agents", org_key, &json!({ "name": name })).await?;
    let id = agent["id"].as_str().ctx("agent without id")?.to_owned();
    let key = agent["agent_key"]
        .as_str()
        .ctx("agent without agent_key")?
        .to_owned();
    let mandate = json!({
        "agent": id,
        "principal": "role:cfo",
        "limits": {"per_transaction": PER_TRANSACTION, "per_month": PER_MONTH, "currency": "USD"},
        "categories": ["software", "travel"],
        "review_above": REVIEW_ABOVE,
        "expires": "2099-12-31",
    });
    let mandate = post_json(conn, addr, "/v1/mandates", org_key, &mandate).await?;
    let mandate = mandate["id"].as_str().ctx("mandate without id")?.to_owned();
    Ok(Agent { id, key, mandate })
}

/// Creates `n` agents, each with a mandate, over `connections` connections: agent `i` in
/// the organization of `org_keys[i % org_keys.len()]`.
pub async fn create_agents(
    addr: SocketAddr,
    org_keys: &[String],
    n: usize,
    connections: usize,
) -> Result<Vec<Agent>> {
    if org_keys.is_empty() {
        bail!("no organization to create agents in");
    }
    let next = Arc::new(AtomicUsize::new(0));
    let org_keys: Arc<[String]> = org_keys.into();
    let mut tasks = Vec::new();
    for _ in 0..connections.max(1) {
        let (next, keys) = (next.clone(), org_keys.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = None;
            let mut made = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, Error>(made);
                }
                let key = &keys[i % keys.len()];
                made.push((i, create_one(&mut conn, addr, key, i).await?));
            }
        }));
    }
    let mut all = Vec::with_capacity(n);
    for task in tasks {
        all.extend(task.await.ctx("setup task")??);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, a)| a).collect())
}
