//! Organizations, their environments and enforcement modes.

use deadpool_postgres::GenericClient;
use mandate_core::policy::Mode;

use super::Result;
use crate::model::Env;
use crate::storage::StorageError;

/// Creates an organization with both environments: live starts in observe, sandbox in
/// enforce.
pub async fn create(
    c: &impl GenericClient,
    id: &str,
    name: &str,
    policy_version: &str,
    now_ms: i64,
) -> Result<()> {
    c.execute(
        "INSERT INTO orgs (id, name, policy_version, created_ms) VALUES ($1, $2, $3, $4)",
        &[&id, &name, &policy_version, &now_ms],
    )
    .await?;
    for (env, mode) in [(Env::Sandbox, Mode::Enforce), (Env::Live, Mode::Observe)] {
        c.execute(
            "INSERT INTO environments (org_id, env, mode, since_ms) VALUES ($1, $2, $3, $4)",
            &[&id, &env.as_str(), &mode.as_str(), &now_ms],
        )
        .await?;
    }
    Ok(())
}

/// The id of the organization named `name`.
pub async fn id_by_name(c: &impl GenericClient, name: &str) -> Result<Option<String>> {
    Ok(c.query_opt("SELECT id FROM orgs WHERE name = $1", &[&name])
        .await?
        .map(|r| r.get(0)))
}

/// How many organizations use a policy version of this date (to number the next).
pub async fn count_policy_versions_on(c: &impl GenericClient, prefix: &str) -> Result<i64> {
    Ok(c.query_one(
        "SELECT COUNT(*) FROM orgs WHERE starts_with(policy_version, $1)",
        &[&prefix],
    )
    .await?
    .get(0))
}

/// Sets an organization's policy version (operator command).
pub async fn set_policy_version(c: &impl GenericClient, org_id: &str, version: &str) -> Result<()> {
    c.execute(
        "UPDATE orgs SET policy_version = $2 WHERE id = $1",
        &[&org_id, &version],
    )
    .await?;
    Ok(())
}

/// The organization's name.
pub async fn name(c: &impl GenericClient, org_id: &str) -> Result<String> {
    let row = c
        .query_opt("SELECT name FROM orgs WHERE id = $1", &[&org_id])
        .await?;
    row.map(|r| r.get(0))
        .ok_or_else(|| StorageError::Corrupt(format!("organization {org_id} not found")))
}

fn mode_from(text: &str) -> Result<Mode> {
    Mode::parse(text).ok_or_else(|| StorageError::Corrupt(format!("mode {text:?}")))
}

/// The mode of an environment and since when (unix ms).
pub async fn mode(c: &impl GenericClient, org_id: &str, env: Env) -> Result<(Mode, i64)> {
    let stmt = c
        .prepare_cached("SELECT mode, since_ms FROM environments WHERE org_id = $1 AND env = $2")
        .await?;
    let row = c
        .query_opt(&stmt, &[&org_id, &env.as_str()])
        .await?
        .ok_or_else(|| {
            StorageError::Corrupt(format!(
                "organization {org_id} has no {} environment",
                env.as_str()
            ))
        })?;
    Ok((mode_from(row.get(0))?, row.get(1)))
}

/// Switches the mode; switching to the mode in force changes nothing, `since` included.
pub async fn set_mode(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    mode: Mode,
    now_ms: i64,
) -> Result<(Mode, i64)> {
    let stmt = c
        .prepare_cached(
            "UPDATE environments SET mode = $3, since_ms = $4
             WHERE org_id = $1 AND env = $2 AND mode <> $3",
        )
        .await?;
    c.execute(&stmt, &[&org_id, &env.as_str(), &mode.as_str(), &now_ms])
        .await?;
    self::mode(c, org_id, env).await
}

/// Reads a stored mode (other modules' rows).
pub(crate) fn parse_mode(text: &str) -> Result<Mode> {
    mode_from(text)
}
