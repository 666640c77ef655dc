//! `POST /v1/agents`, `GET /v1/agents`, `GET /v1/agents/{id}`.

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::routing::{get, post};
use mandate_core::{AgentId, AgentName};
use mandate_protocol::{
    field::check_fields, field::invalid, field::object, field::required, field::string, wire,
};

use super::{created, ok, unreadable, wire_json};
use crate::clock::{from_ms, ms};
use crate::http::body::JsonBody;
use crate::http::error::ApiError;
use crate::http::extract::Path;
use crate::http::list;
use crate::model::{Caller, KeyClass};
use crate::operator::new_key;
use crate::signing::api_keys::KeyAuthority;
use crate::state::AppState;
use crate::storage::agents::AgentRow;
use crate::storage::keys;

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/agents", post(create).get(index))
        .route("/v1/agents/{id}", get(show))
}

/// An agent in its API shape.
fn agent_wire(row: &AgentRow) -> Result<wire::Agent, ApiError> {
    let id = AgentId::parse(&row.id).map_err(unreadable("agent id"))?;
    let name = AgentName::parse(id.name()).map_err(unreadable("agent name"))?;
    Ok(wire::Agent {
        created_at: from_ms(row.created_ms),
        id,
        name,
    })
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, ApiError> {
    // The key class is checked before the body: a wrong key gets 403 whatever it sent.
    caller.require_org()?;
    let JsonBody(body) = body?;
    let fields = object(&body)?;
    check_fields(fields, "", &["name"], &["id", "agent_key", "created_at"])?;
    let name = AgentName::parse(string(required(fields, "name", "name")?, "name")?)
        .map_err(|e| invalid("name", e))?;
    let id = mandate_protocol::id::agent_id_for(&name);
    let key = new_key(KeyClass::Agent, caller.env);
    let now = ms(state.now());
    let key_hash = keys::hash(&key);
    let binding = state.api_keys.bind(&KeyAuthority {
        hash: &key_hash,
        org_id: &caller.org_id,
        env: caller.env,
        class: KeyClass::Agent,
        agent: Some(id.as_str()),
    });
    let row = state
        .store
        .create_agent(&caller.org_id, caller.env, &id, key_hash, binding, now)
        .await?
        .ok_or_else(|| {
            ApiError::NameTaken(format!(
                "an agent named {} already exists in this organization; choose another name",
                id.name()
            ))
        })?;
    let answer = wire::CreatedAgent::new(agent_wire(&row)?, key);
    Ok(created(wire_json(&answer)?))
}

async fn index(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = list::parse(query.as_deref(), &[])?;
    let context = list::context("agents", &caller, &params);
    let before = list::start(state.paging(), &params, &context)?;
    let rows = state
        .store
        .agents_page(
            &caller.org_id,
            caller.env,
            caller.agent.as_ref(),
            before,
            params.limit + 1,
        )
        .await?;
    let rows = rows
        .iter()
        .map(|r| Ok((r.seq, wire_json(&agent_wire(r)?)?)))
        .collect::<Result<_, ApiError>>()?;
    Ok(ok(list::envelope(
        state.paging(),
        &context,
        params.limit,
        rows,
    )))
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if caller.agent.as_ref().is_some_and(|own| own.as_str() != id) {
        return Err(ApiError::not_found("agent", &id));
    }
    let row = match AgentId::parse(&id) {
        Ok(wanted) => {
            state
                .store
                .agent(&caller.org_id, caller.env, &wanted)
                .await?
        }
        Err(_) => None,
    };
    let row = row.ok_or_else(|| ApiError::not_found("agent", &id))?;
    Ok(ok(wire_json(&agent_wire(&row)?)?))
}
