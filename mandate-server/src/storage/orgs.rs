//! Organizations (their names) and their enforcement modes at the boundary.

use mandate_core::policy::Mode;

use super::StoreFuture;
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
