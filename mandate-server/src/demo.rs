//! `serve --demo`: onboard a demo organization, register an agent with a mandate in its
//! sandbox (through the real API, in process), and print a copy-paste session that shows
//! an `allow`, a `review` and a `deny_*` within a minute.
//!
//! The session's settings (API URL, the organization key the `mandate` CLI reads as
//! `MANDATE_API_KEY`, the agent key, the public URL) are also written to
//! `mandate-demo.env` beside the database, for a second terminal (`. ./mandate-demo.env`)
//! and for the next run: keys are stored only as hashes, so a run on the same database
//! reuses the demo organization and can show its keys again only from that file.
//!
//! A run on the same database keeps the demo's state: the organization, its agent and
//! the agent's mandate (so the month's spend and the enforcement mode stay as they were),
//! and says what it reused. Only a mandate that is gone, no longer active or changed from
//! the demo's terms is written again, and the session says why.

use std::path::{Path, PathBuf};

use axum::body::{Body, to_bytes};
use axum::http::{Request, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::app;
use crate::model::Env;
use crate::operator;
use crate::serve::Running;
use crate::storage::{AdminStore, DbLocation, keys};

/// The demo organization's name: one per database, reused by every `serve --demo` on it.
pub const DEMO_ORG: &str = "demo";

/// The file the session's settings are written to, beside the database.
pub const ENV_FILE: &str = "mandate-demo.env";

/// One request to the API host, in process, with `key`: a POST with `body`, else a GET.
async fn call(
    running: &Running,
    key: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let request = match body {
        Some(body) => Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string())),
        None => Request::get(path).body(Body::empty()),
    };
    let mut request = request.map_err(|e| e.to_string())?;
    let bearer = format!("Bearer {key}")
        .parse()
        .map_err(|_| "a key that is not a header")?;
    request.headers_mut().insert(header::AUTHORIZATION, bearer);
    let response = app::api(running.state.clone())
        .oneshot(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{path}: {status} {value}"));
    }
    Ok(value)
}

/// `mandate-demo.env` in the SQLite file's directory, or in the current one (PostgreSQL).
pub fn env_file(db: &DbLocation) -> PathBuf {
    let dir = db
        .sqlite_path()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    dir.join(ENV_FILE)
}

/// The demo's two keys.
struct DemoKeys {
    org: String,
    agent: String,
}

/// The keys written by an earlier run, if the file holds both and both are still active
/// keys of the demo organization.
fn keys_from_file(store: &dyn AdminStore, path: &Path) -> Option<DemoKeys> {
    let text = std::fs::read_to_string(path).ok()?;
    let value = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.trim().strip_prefix("export ")?;
            let (key, value) = rest.split_once('=')?;
            (key == name).then(|| value.split_whitespace().next().unwrap_or("").to_owned())
        })
    };
    let found = DemoKeys {
        org: value("MANDATE_API_KEY")?,
        agent: value("AGENT_KEY")?,
    };
    let active = operator::list_keys(store, DEMO_ORG).ok()?;
    let usable = |key: &str| {
        let fingerprint = keys::fingerprint(&keys::hash(key));
        active
            .iter()
            .any(|k| k.fingerprint == fingerprint && !k.revoked && k.env == Env::Sandbox)
    };
    (usable(&found.org) && usable(&found.agent)).then_some(found)
}

/// Writes the session's settings, readable by the owner only: it holds two keys.
fn write_env_file(path: &Path, running: &Running, keys: &DemoKeys) -> Result<(), String> {
    let text = format!(
        "# Written by `mandate-server serve --demo`: the demo's sandbox session. Load it with\n\
         # `. ./{ENV_FILE}`; the mandate CLI reads MANDATE_BASE_URL and MANDATE_API_KEY.\n\
         export MANDATE_BASE_URL=http://{api}/v1\n\
         export MANDATE_API_KEY={org}\n\
         export AGENT_KEY={agent}\n\
         export MANDATE_PUBLIC_URL=http://{public}\n",
        api = running.api_addr,
        public = running.public_addr,
        org = keys.org,
        agent = keys.agent,
    );
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    std::io::Write::write_all(&mut file, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The demo's mandate for `agt_shopper`, but its expiry (90 days from when it is made).
fn demo_terms() -> Value {
    json!({
        "agent": "agt_shopper", "principal": "role:finance",
        "limits": {"per_transaction": 500, "per_month": 2000, "currency": "USD"},
        "categories": ["software", "travel"], "review_above": 200,
    })
}

/// Writes the demo's mandate for `agt_shopper`, expiring 90 days from now; its id.
async fn write_mandate(running: &Running, org_key: &str) -> Result<String, String> {
    let expires = mandate_protocol::mandate::format_date(
        (running.state.now() + time::Duration::days(90)).date(),
    );
    let mut mandate = demo_terms();
    mandate["expires"] = json!(expires);
    let made = call(running, org_key, "/v1/mandates", Some(mandate)).await?;
    Ok(made["id"].as_str().unwrap_or_default().to_owned())
}

/// Why an earlier run's current mandate of `agt_shopper` cannot serve the session, if it
/// cannot: it is no longer active, or its terms are not the demo's.
fn not_reusable(mandate: &Value) -> Option<String> {
    let id = mandate["id"].as_str().unwrap_or("?");
    let status = mandate["status"].as_str().unwrap_or("?");
    if status != "active" {
        return Some(format!("its mandate {id} is {status}"));
    }
    let mut terms = mandate.clone();
    if let Some(fields) = terms.as_object_mut() {
        for read_only in ["id", "status", "created_at", "expires"] {
            fields.remove(read_only);
        }
    }
    (terms != demo_terms()).then(|| format!("its mandate {id} was changed from the demo's terms"))
}

/// What a run did about the demo's mandate.
enum DemoMandate {
    /// Made by this run; `replaced` says why an earlier one was not reused.
    Made {
        id: String,
        replaced: Option<String>,
    },
    /// An earlier run's, reused, with what it has spent this month.
    Reused { id: String, spent_month: String },
}

/// Reuses `agt_shopper`'s current mandate when it is the demo's, still active; otherwise
/// (none, revoked, expired or changed) writes the demo's again.
async fn reuse_or_write_mandate(running: &Running, org_key: &str) -> Result<DemoMandate, String> {
    let page = call(
        running,
        org_key,
        "/v1/mandates?agent=agt_shopper&limit=1",
        None,
    )
    .await?;
    let replaced = match page["data"].get(0) {
        None => Some("agt_shopper has no mandate".to_owned()),
        Some(current) => match not_reusable(current) {
            Some(why) => Some(why),
            None => {
                let id = current["id"].as_str().unwrap_or_default().to_owned();
                let read = call(running, org_key, &format!("/v1/mandates/{id}"), None).await?;
                let spent_month = read["spent"]["month"].to_string();
                return Ok(DemoMandate::Reused { id, spent_month });
            }
        },
    };
    let id = write_mandate(running, org_key).await?;
    Ok(DemoMandate::Made { id, replaced })
}

/// Sets up (or finds again) the demo organization and prints the session; `db` is the
/// database the server serves, beside which the session's settings are written.
pub async fn run(running: &Running, db: &DbLocation) -> Result<(), String> {
    let store: &dyn AdminStore = &*running.state.store;
    let path = env_file(db);
    let existing = store.org_id_by_name(DEMO_ORG).map_err(|e| e.to_string())?;
    let (keys, mandate) = match existing {
        None => {
            let onboarded = operator::onboard(
                store,
                &running.state.api_keys,
                DEMO_ORG,
                running.state.now(),
            )
            .map_err(|e| e.to_string())?;
            let agent = call(
                running,
                &onboarded.sandbox_key,
                "/v1/agents",
                Some(json!({"name": "shopper"})),
            )
            .await?;
            let keys = DemoKeys {
                org: onboarded.sandbox_key,
                agent: agent["agent_key"].as_str().unwrap_or_default().to_owned(),
            };
            let id = write_mandate(running, &keys.org).await?;
            (keys, DemoMandate::Made { id, replaced: None })
        }
        Some(ref org_id) => match keys_from_file(store, &path) {
            Some(keys) => {
                let mandate = reuse_or_write_mandate(running, &keys.org).await?;
                (keys, mandate)
            }
            None => {
                println!("{}", lost_keys(org_id, db, &path));
                return Ok(());
            }
        },
    };
    let mode = call(running, &keys.org, "/v1/enforcement", None).await?["mode"]
        .as_str()
        .unwrap_or("enforce")
        .to_owned();
    write_env_file(&path, running, &keys)?;
    println!(
        "{}",
        session(running, &keys, existing.is_some(), &mandate, &mode, &path)
    );
    Ok(())
}

/// What a run says when the demo organization exists but its keys cannot be shown.
fn lost_keys(org_id: &str, db: &DbLocation, path: &Path) -> String {
    format!(
        r#"
Demo organization {DEMO_ORG} ({org_id}) exists in this database from an earlier run; it is
reused, not made again. Its keys are stored only as SHA-256 hashes, so they cannot be shown
again, and {file} (where that run wrote them) is missing or holds keys no longer valid.
  a new organization key: mandate-server issue-key --org {DEMO_ORG} --env sandbox --db {db}
  then a new agent with it: mandate agents create NAME (its key is printed once)
  or start a fresh demo on another database: mandate-server serve --demo --db ./other-demo.sqlite
"#,
        file = path.display(),
    )
}

/// What the session says of the mandate: its id, and whether this run made it (and why
/// again) or reused it.
fn mandate_line(mandate: &DemoMandate) -> String {
    let terms = "up to 500 USD a transaction, 2000 a month, software and travel, review above 200";
    match mandate {
        DemoMandate::Made { id, replaced: None } => format!("mandate {id}: {terms}"),
        DemoMandate::Made {
            id,
            replaced: Some(why),
        } => format!("mandate {id}, made again because {why}: {terms}"),
        DemoMandate::Reused { id, spent_month } => {
            format!("mandate {id}, reused ({spent_month} USD spent this month): {terms}")
        }
    }
}

/// The session: what was made or reused, the keys, then commands to paste (curl, then the
/// CLI).
fn session(
    running: &Running,
    keys: &DemoKeys,
    reused: bool,
    mandate: &DemoMandate,
    mode: &str,
    path: &Path,
) -> String {
    let api = format!("http://{}", running.api_addr);
    let public = format!("http://{}", running.public_addr);
    let mut headline = if reused {
        format!(
            "Demo organization {DEMO_ORG} from an earlier run in this database, reused with its agent agt_shopper (sandbox, {mode} mode)."
        )
    } else {
        format!("Demo organization {DEMO_ORG} is ready (sandbox, {mode} mode).")
    };
    if mode == "observe" {
        headline.push_str(
            "\n  observe mode (switched in an earlier run): nothing is blocked, so the review and the denial below come back allow; `mandate enforcement set enforce` blocks again",
        );
    }
    let mandate = mandate_line(mandate);
    format!(
        r#"
{headline}
  organization key (sandbox): {org_key}
  agent key (agt_shopper):    {agent_key}
  {mandate}
  review console: {public}/console/ (sign in with the organization key)
  these settings are also in {file} (owner-only): `. {file}` in another terminal

Try it:

export MANDATE_BASE_URL={api}/v1
export MANDATE_API_KEY={org_key}
export AGENT_KEY={agent_key}

# allow: 49.99 of software
curl -s $MANDATE_BASE_URL/authorizations -H "Authorization: Bearer $AGENT_KEY" -H 'Content-Type: application/json' \
  -d '{{"amount": 49.99, "currency": "USD", "recipient": "vendor:acme", "category": "software"}}'

# review: 350 is above review_above (approve it with POST /v1/reviews/<rev_id>/approve)
curl -s $MANDATE_BASE_URL/authorizations -H "Authorization: Bearer $AGENT_KEY" -H 'Content-Type: application/json' \
  -d '{{"amount": 350, "currency": "USD", "recipient": "vendor:airline", "category": "travel"}}'

# deny_category: food is not in the mandate
curl -s $MANDATE_BASE_URL/authorizations -H "Authorization: Bearer $AGENT_KEY" -H 'Content-Type: application/json' \
  -d '{{"amount": 12, "currency": "USD", "recipient": "vendor:deli", "category": "food"}}'

# every decision, newest first
curl -s $MANDATE_BASE_URL/decisions -H "Authorization: Bearer $MANDATE_API_KEY"

# the public keys that verify every verdict_token
curl -s {public}/.well-known/jwks.json

# the same with the mandate CLI (cargo build --release -p mandate-cli), which reads
# MANDATE_BASE_URL and MANDATE_API_KEY
mandate decisions list
MANDATE_API_KEY=$AGENT_KEY mandate authorize --amount 49.99 --currency USD --recipient vendor:acme --category software
"#,
        org_key = keys.org,
        agent_key = keys.agent,
        file = path.display(),
    )
}
