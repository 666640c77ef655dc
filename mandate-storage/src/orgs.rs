//! Organizations (their names) and their enforcement modes at the boundary, their
//! statements, and the use cases, written once for every engine.

use mandate_core::Mode;

use super::engine::{Access, Columns, Engine, Result, Scope, Tx, first};
use super::statements::OrgSql;
use super::{StorageError, StoreFuture};
use crate::model::Env;

/// Organizations and their enforcement modes.
pub trait OrgStore {
    /// The organization's name, given at onboarding.
    fn org_name(&self, org_id: &str) -> StoreFuture<'_, String>;

    /// The mode of an environment and since when (unix ms).
    fn mode(&self, org_id: &str, env: Env) -> StoreFuture<'_, (Mode, i64)>;

    /// Switches the mode; switching to the mode in force changes nothing, `since`
    /// included. Returns the mode in force and since when.
    fn set_mode(
        &self,
        org_id: &str,
        env: Env,
        mode: Mode,
        now_ms: i64,
    ) -> StoreFuture<'_, (Mode, i64)>;
}

/// The mode of `scope` and since when.
async fn mode<T: Tx>(tx: &mut T, s: Scope<'_>) -> Result<(Mode, i64)> {
    let read = |r: &dyn Columns| Ok((r.text(0)?, r.int(1)?));
    let rows = tx
        .query(OrgSql::Mode.into(), &[s.org.into(), s.env.into()], read)
        .await?;
    let Some((mode, since)) = first(rows) else {
        return Err(StorageError::Corrupt(format!(
            "organization {} has no {} environment",
            s.org,
            s.env.as_str()
        )));
    };
    Ok((parse_mode(&mode)?, since))
}

/// A stored mode.
pub fn parse_mode(text: &str) -> Result<Mode> {
    Mode::parse(text).ok_or_else(|| StorageError::Corrupt(format!("mode {text:?}")))
}

impl<E: Engine> OrgStore for E {
    fn org_name(&self, org_id: &str) -> StoreFuture<'_, String> {
        Box::pin(self.run(Access::Read, org_id.to_owned(), |tx, org| {
            Box::pin(async move {
                let read = |r: &dyn Columns| r.text(0);
                let rows = tx.query(OrgSql::Name.into(), &[org.into()], read).await?;
                first(rows)
                    .ok_or_else(|| StorageError::Corrupt(format!("organization {org} not found")))
            })
        }))
    }

    fn mode(&self, org_id: &str, env: Env) -> StoreFuture<'_, (Mode, i64)> {
        Box::pin(
            self.run(Access::Read, (org_id.to_owned(), env), |tx, (org, env)| {
                Box::pin(mode(tx, Scope::new(org, *env)))
            }),
        )
    }

    fn set_mode(
        &self,
        org_id: &str,
        env: Env,
        mode: Mode,
        now_ms: i64,
    ) -> StoreFuture<'_, (Mode, i64)> {
        let args = (org_id.to_owned(), env);
        Box::pin(self.run(Access::Write, args, move |tx, (org, env)| {
            Box::pin(async move {
                let s = Scope::new(org, *env);
                let params = [
                    org.into(),
                    (*env).into(),
                    mode.as_str().into(),
                    now_ms.into(),
                ];
                tx.execute(OrgSql::SetMode.into(), &params).await?;
                self::mode(tx, s).await
            })
        }))
    }
}
