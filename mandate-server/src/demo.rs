//! `serve --demo`: onboard a demo organization, register an agent with a mandate in its
//! sandbox (through the real API, in process), and print a copy-paste session that shows
//! an `allow`, a `review` and a `deny_*` within a minute.
//!
//! The session's settings (API URL, the organization key the `mandate` CLI reads as
//! `MANDATE_API_KEY`, the agent key, the public URL) are also written to
//! `mandate-demo.env` beside the database, for a second terminal (`. ./mandate-demo.env`)
//! and for the next run: keys are stored only as hashes, so a run on the same database
//! reuses the demo organization and can show its keys again only from that file.

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

async fn call(running: &Running, key: &str, path: &str, body: Value) -> Result<Value, String> {
    let request = Request::post(path)
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .map_err(|e| e.to_string())?;
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

/// A mandate for `agt_shopper` expiring 90 days from now (a run on an older database
/// writes a fresh one, which supersedes the previous).
async fn write_mandate(running: &Running, org_key: &str) -> Result<(), String> {
    let expires =
        mandate_core::mandate::format_date((running.state.now() + time::Duration::days(90)).date());
    let mandate = json!({
        "agent": "agt_shopper", "principal": "role:finance",
        "limits": {"per_transaction": 500, "per_month": 2000, "currency": "USD"},
        "categories": ["software", "travel"], "review_above": 200, "expires": expires,
    });
    call(running, org_key, "/v1/mandates", mandate).await?;
    Ok(())
}

/// Sets up (or finds again) the demo organization and prints the session; `db` is the
/// database the server serves, beside which the session's settings are written.
pub async fn run(running: &Running, db: &DbLocation) -> Result<(), String> {
    let store: &dyn AdminStore = &*running.state.store;
    let path = env_file(db);
    let existing = store.org_id_by_name(DEMO_ORG).map_err(|e| e.to_string())?;
    let (keys, reused) = match existing {
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
                json!({"name": "shopper"}),
            )
            .await?;
            let keys = DemoKeys {
                org: onboarded.sandbox_key,
                agent: agent["agent_key"].as_str().unwrap_or_default().to_owned(),
            };
            write_mandate(running, &keys.org).await?;
            (keys, false)
        }
        Some(org_id) => match keys_from_file(store, &path) {
            Some(keys) => {
                write_mandate(running, &keys.org).await?;
                (keys, true)
            }
            None => {
                println!("{}", lost_keys(&org_id, db, &path));
                return Ok(());
            }
        },
    };
    write_env_file(&path, running, &keys)?;
    println!("{}", session(running, &keys, reused, &path));
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

/// The session: the keys, then commands to paste (curl, then the CLI).
fn session(running: &Running, keys: &DemoKeys, reused: bool, path: &Path) -> String {
    let api = format!("http://{}", running.api_addr);
    let public = format!("http://{}", running.public_addr);
    let headline = if reused {
        format!("Demo organization {DEMO_ORG} from an earlier run in this database, reused")
    } else {
        format!("Demo organization {DEMO_ORG} is ready")
    };
    format!(
        r#"
{headline} (sandbox, enforce mode).
  organization key (sandbox): {org_key}
  agent key (agt_shopper):    {agent_key}
  mandate: up to 500 USD a transaction, 2000 a month, software and travel, review above 200
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
