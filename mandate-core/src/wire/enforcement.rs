//! The kill switch: `GET /v1/enforcement`, `POST /v1/enforcement`.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::policy::Mode;

/// The enforcement mode of an environment and since when it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// `observe` or `enforce`.
    pub mode: Mode,
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
