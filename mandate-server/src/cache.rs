//! In-memory caches on the hot path: callers by key hash, and enforcement modes.
//!
//! An authorization should read nothing from the database. The caller behind a key is
//! cached until an operator command changes keys (it bumps `keys_generation` in the
//! settings table; the server polls it every 250 ms and empties the cache). Modes change
//! only through this server's `POST /v1/enforcement`, which updates the cache after its
//! commit, so the next decision sees the new mode.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use mandate_core::policy::Mode;

use crate::model::{Caller, Env};

/// The most callers kept; past it the cache starts over.
const MAX_CALLERS: usize = 1_000_000;

#[derive(Default)]
struct Callers {
    /// Bumped at every clear: a load that began before a clear must not fill the cache.
    epoch: u64,
    map: HashMap<[u8; 32], Caller>,
    /// One copy of each organization id and policy version that cached callers share:
    /// with 100,000 agent keys of one organization, two strings instead of 200,000.
    shared: HashSet<Arc<str>>,
}

impl Callers {
    /// The shared copy of `text`.
    fn share(&mut self, text: &Arc<str>) -> Arc<str> {
        if let Some(known) = self.shared.get(text) {
            return Arc::clone(known);
        }
        self.shared.insert(Arc::clone(text));
        Arc::clone(text)
    }
}

/// Callers by key hash. Unknown keys are never cached.
#[derive(Default, Clone)]
pub struct KeyCache {
    inner: Arc<RwLock<Callers>>,
}

impl KeyCache {
    /// The cached caller and the cache's epoch (to pass to [`KeyCache::insert`] after a load).
    pub fn get(&self, hash: &[u8; 32]) -> (Option<Caller>, u64) {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        (inner.map.get(hash).cloned(), inner.epoch)
    }

    /// Caches a caller loaded while the cache was at `epoch`, unless it was cleared since.
    pub fn insert(&self, epoch: u64, mut caller: Caller) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if inner.epoch != epoch {
            return;
        }
        if inner.map.len() >= MAX_CALLERS {
            inner.map.clear();
            inner.shared.clear();
        }
        caller.org_id = inner.share(&caller.org_id);
        caller.policy_version = inner.share(&caller.policy_version);
        inner.map.insert(caller.key_hash, caller);
    }

    /// Forgets every caller (keys were revoked or changed).
    pub fn clear(&self) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.epoch += 1;
        inner.map.clear();
        inner.shared.clear();
    }
}

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

    fn caller(byte: u8) -> Caller {
        Caller {
            key_hash: [byte; 32],
            org_id: "org_a".into(),
            env: Env::Sandbox,
            agent: None,
            rate_per_sec: 100,
            policy_version: "pol_2026-11-22.1".into(),
        }
    }

    #[test]
    fn a_load_that_straddles_a_clear_is_not_cached() {
        let cache = KeyCache::default();
        let (_, epoch) = cache.get(&[1; 32]);
        cache.clear();
        cache.insert(epoch, caller(1));
        assert!(cache.get(&[1; 32]).0.is_none());
        let (_, epoch) = cache.get(&[1; 32]);
        cache.insert(epoch, caller(1));
        assert!(cache.get(&[1; 32]).0.is_some());
    }

    /// Callers of one organization, loaded separately (each with its own strings), share
    /// one copy of the organization id and policy version once cached; a different
    /// organization keeps its own, and a clear lets go of them.
    #[test]
    fn cached_callers_share_their_organizations_strings() {
        let cache = KeyCache::default();
        let mut other = caller(3);
        other.org_id = "org_b".into();
        for c in [caller(1), caller(2), other] {
            let (_, epoch) = cache.get(&c.key_hash);
            cache.insert(epoch, c);
        }
        let get = |byte: u8| cache.get(&[byte; 32]).0.unwrap();
        let (one, two, three) = (get(1), get(2), get(3));
        assert!(Arc::ptr_eq(&one.org_id, &two.org_id));
        assert!(Arc::ptr_eq(&one.policy_version, &two.policy_version));
        assert!(Arc::ptr_eq(&one.policy_version, &three.policy_version));
        assert_eq!(&*three.org_id, "org_b");
        assert!(!Arc::ptr_eq(&one.org_id, &three.org_id));
        cache.clear();
        assert_eq!(
            Arc::strong_count(&one.org_id),
            2,
            "ours and two's, not the cache's"
        );
    }

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
