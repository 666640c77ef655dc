//! `serve --demo`: onboard a demo organization, register an agent with a mandate in its
//! sandbox (through the real API, in process), and print a copy-paste session that shows
//! an `allow`, a `review` and a `deny_*` within a minute.

use axum::body::{Body, to_bytes};
use axum::http::{Request, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::app;
use crate::clock::random16;
use crate::operator;
use crate::serve::Running;

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

/// Sets up the demo organization and prints the session.
pub async fn run(running: &Running) -> Result<(), String> {
    let suffix: String = mandate_core::id::base32(&random16()[..4]);
    let org = format!("demo-{suffix}");
    let onboarded = operator::onboard(&*running.state.store, &org, running.state.now())
        .map_err(|e| e.to_string())?;
    let agent = call(
        running,
        &onboarded.sandbox_key,
        "/v1/agents",
        json!({"name": "shopper"}),
    )
    .await?;
    let agent_key = agent["agent_key"].as_str().unwrap_or_default().to_owned();
    let expires =
        mandate_core::mandate::format_date((running.state.now() + time::Duration::days(90)).date());
    let mandate = serde_json::from_str::<Value>(&format!(
        r#"{{"agent": "agt_shopper", "principal": "role:finance",
            "limits": {{"per_transaction": 500, "per_month": 2000, "currency": "USD"}},
            "categories": ["software", "travel"], "review_above": 200, "expires": "{expires}"}}"#
    ))
    .map_err(|e| e.to_string())?;
    call(running, &onboarded.sandbox_key, "/v1/mandates", mandate).await?;
    let api = format!("http://{}", running.api_addr);
    let public = format!("http://{}", running.public_addr);
    println!(
        r#"
Demo organization {org} is ready (sandbox, enforce mode).
  organization key (sandbox): {org_key}
  agent key (agt_shopper):    {agent_key}
  mandate: up to 500 USD a transaction, 2000 a month, software and travel, review above 200
  review console: {public}/console/ (sign in with the organization key)

Try it:

export ORG={org_key}
export AGENT={agent_key}

# allow: 49.99 of software
curl -s {api}/v1/authorizations -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' \
  -d '{{"amount": 49.99, "currency": "USD", "recipient": "vendor:acme", "category": "software"}}'

# review: 350 is above review_above (approve it with POST /v1/reviews/<rev_id>/approve)
curl -s {api}/v1/authorizations -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' \
  -d '{{"amount": 350, "currency": "USD", "recipient": "vendor:airline", "category": "travel"}}'

# deny_category: food is not in the mandate
curl -s {api}/v1/authorizations -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' \
  -d '{{"amount": 12, "currency": "USD", "recipient": "vendor:deli", "category": "food"}}'

# every decision, newest first
curl -s {api}/v1/decisions -H "Authorization: Bearer $ORG"

# the public keys that verify every verdict_token
curl -s {public}/.well-known/jwks.json
"#,
        org_key = onboarded.sandbox_key,
    );
    Ok(())
}
