//! Enforcement modes in memory, by organization and environment: a decision reads the
//! mode from here, not from the database.
//!
//! A switch made through this process (`POST /v1/enforcement`) updates the cache after its
//! commit, so the next decision here sees it. A switch made through another process on a
//! shared database is seen when a decision is stored: the store refuses a decision made
//! in a mode that is no longer the environment's, and the decision service takes the mode
//! read with the agent's fresh state into this cache ([`ModeCache::set`]) and decides
//! again.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use mandate_core::Mode;

use crate::model::Env;
use crate::storage::{StorageError, Store};

/// Enforcement modes by organization, then environment (looked up by `&str`, so that a
/// request's lookup allocates nothing).
#[derive(Default, Clone)]
pub struct ModeCache {
    inner: Arc<RwLock<HashMap<String, EnvModes>>>,
}

/// One organization's cached modes, by environment.
#[derive(Default, Clone, Copy)]
struct EnvModes {
    sandbox: Option<Mode>,
    live: Option<Mode>,
}

impl EnvModes {
    fn slot(&mut self, env: Env) -> &mut Option<Mode> {
        match env {
            Env::Sandbox => &mut self.sandbox,
            Env::Live => &mut self.live,
        }
    }
}

impl ModeCache {
    /// The cached mode.
    pub fn get(&self, org_id: &str, env: Env) -> Option<Mode> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let mut modes = *inner.get(org_id)?;
        *modes.slot(env)
    }

    /// Fills a miss with a mode read from the database; a mode set meanwhile wins.
    pub fn fill(&self, org_id: &str, env: Env, mode: Mode) -> Mode {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        *inner
            .entry(org_id.to_owned())
            .or_default()
            .slot(env)
            .get_or_insert(mode)
    }

    /// The mode in force for (`org_id`, `env`): from memory, loaded from `store` on first
    /// use. Every decision starts from this one.
    pub async fn in_force(
        &self,
        store: &dyn Store,
        org_id: &str,
        env: Env,
    ) -> Result<Mode, StorageError> {
        if let Some(mode) = self.get(org_id, env) {
            return Ok(mode);
        }
        let (mode, _) = store.mode(org_id, env).await?;
        Ok(self.fill(org_id, env, mode))
    }

    /// Records a committed switch.
    pub fn set(&self, org_id: &str, env: Env, mode: Mode) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        *inner.entry(org_id.to_owned()).or_default().slot(env) = Some(mode);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_beats_a_stale_fill() {
        let modes = ModeCache::default();
        modes.set("org_a", Env::Live, Mode::Enforce);
        assert_eq!(modes.fill("org_a", Env::Live, Mode::Observe), Mode::Enforce);
        assert_eq!(modes.fill("org_b", Env::Live, Mode::Observe), Mode::Observe);
    }

    #[test]
    fn an_organizations_environments_are_cached_apart() {
        let modes = ModeCache::default();
        assert_eq!(modes.get("org_a", Env::Live), None);
        modes.set("org_a", Env::Live, Mode::Observe);
        assert_eq!(modes.get("org_a", Env::Sandbox), None);
        assert_eq!(
            modes.fill("org_a", Env::Sandbox, Mode::Enforce),
            Mode::Enforce
        );
        modes.set("org_a", Env::Live, Mode::Enforce);
        assert_eq!(modes.get("org_a", Env::Live), Some(Mode::Enforce));
        assert_eq!(modes.get("org_a", Env::Sandbox), Some(Mode::Enforce));
        modes.set("org_a", Env::Sandbox, Mode::Observe);
        assert_eq!(modes.get("org_a", Env::Sandbox), Some(Mode::Observe));
        assert_eq!(modes.get("org_a", Env::Live), Some(Mode::Enforce));
        assert_eq!(modes.get("org_b", Env::Sandbox), None);
    }
}
