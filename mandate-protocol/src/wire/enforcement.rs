//! The kill switch: `GET /v1/enforcement`, `POST /v1/enforcement`.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::policy::Mode;

/// The enforcement mode of an environment and since when it holds, with the
/// organization and environment it is of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// `sandbox` or `live`: the environment of the key that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// `observe` or `enforce`.
    pub mode: Mode,
    /// The organization's name, given at onboarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    /// When it was last set.
    #[serde(with = "crate::timefmt")]
    pub since: OffsetDateTime,
}

/// The body of `POST /v1/enforcement`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetEnforcement {
    /// The mode to switch to.
    pub mode: Mode,
}
