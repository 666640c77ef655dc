//! Reviews: `POST /v1/reviews/{id}/approve` (answers a [`super::Decision`] with its token) and
//! `POST /v1/reviews/{id}/deny` (answers the [`Review`]).

use serde::{Deserialize, Serialize};

/// A review, as the core keeps it and the API returns it.
pub use crate::review::Review;

/// The body of `POST /v1/reviews/{id}/deny`; it may also be sent empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenyReview {
    /// Why, at most 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
