//! Where a review stands, read from the decision that opened it with the agent's key, and
//! the reads shared by everyone who waits on it.
//!
//! A review is waited on by `wait_for_review` (every half second) and by task polls
//! (`tasks/get`, `tasks/result`). Reads of one decision are single-flight and shared for
//! [`FRESH`]: however many waits run on one decision in this process, the API sees at most
//! one `GET /v1/decisions/{id}` per interval, so waiting never spends the agent's rate.
//! Nothing here is the task's state: an entry is a recent answer of the API, dropped once
//! stale, and any process reads the same decision to the same outcome.

use std::borrow::Cow;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mandate_protocol::{review::ReviewStatus, wire::Decision};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::OnceCell;

use super::api::{Api, Failure};

/// How long one read of a decision answers every wait on it.
pub const FRESH: Duration = Duration::from_millis(500);

/// What the agent is told when a person denied without a reason.
pub const DENIED: &str = "a person denied the payment: do not pay";
/// What the agent is told when it withdrew the review itself (its task was cancelled).
pub const WITHDRAWN: &str = "this agent withdrew the review (its task was cancelled): do not pay; ask again if still needed";
/// What the agent is told when nobody resolved the review in time.
pub const EXPIRED: &str =
    "nobody resolved the review in time: do not pay; ask again if still needed";

/// Where a review stands.
#[derive(Debug, Clone)]
pub enum ReviewState {
    /// The decision opened no review (its verdict is not `review`).
    None,
    /// Waiting for a person.
    Pending,
    /// Approved: the fresh decision the approval made, its token included.
    Approved(Box<Decision<'static>>),
    /// Denied by a person.
    Denied(Denial),
    /// Withdrawn by this agent (a task cancelled, by any `mandate mcp` of it): the API
    /// reads it `denied`, with `review_withdrawn`.
    Withdrawn(Denial),
    /// Nobody resolved it in time.
    Expired,
}

impl ReviewState {
    /// The review's status in the API's words (`None` without a review).
    pub fn status(&self) -> Option<&'static str> {
        match self {
            Self::None => None,
            Self::Pending => Some("pending"),
            Self::Approved(_) => Some("approved"),
            Self::Denied(_) | Self::Withdrawn(_) => Some("denied"),
            Self::Expired => Some("expired"),
        }
    }
}

/// A person's denial, as the decision that opened the review reads it.
#[derive(Debug, Clone, Default)]
pub struct Denial {
    /// The reviewer's reason, if they gave one.
    pub reason: Option<String>,
    /// When they denied it.
    pub at: Option<OffsetDateTime>,
}

impl Denial {
    /// What the agent is told: the reviewer's reason, or that a person denied it.
    pub fn reason(&self) -> String {
        self.reason.clone().unwrap_or_else(|| DENIED.into())
    }
}

/// A read of one decision, shared while fresh.
struct SharedRead {
    started: Instant,
    answer: Arc<OnceCell<Result<Value, Failure>>>,
}

/// The decisions' reads shared by the waits of this process.
pub struct Reviews {
    api: Arc<Api>,
    reads: Mutex<HashMap<String, SharedRead>>,
}

impl Reviews {
    /// Reads through `api`.
    pub fn new(api: Arc<Api>) -> Self {
        Self {
            api,
            reads: Mutex::new(HashMap::new()),
        }
    }

    /// `GET /v1/decisions/{id}`: a read started less than [`FRESH`] ago (finished or in
    /// flight) answers this call too.
    pub async fn decision_json(&self, id: &str) -> Result<Value, Failure> {
        let answer = {
            let mut reads = self
                .reads
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            // Stale reads are dropped as new ones are made: the map holds only the
            // decisions waited on in the last interval.
            reads.retain(|_, read| now.duration_since(read.started) < FRESH);
            reads
                .entry(id.to_owned())
                .or_insert_with(|| SharedRead {
                    started: now,
                    answer: Arc::new(OnceCell::new()),
                })
                .answer
                .clone()
        };
        let path = format!("/decisions/{}", urlencode(id));
        answer
            .get_or_init(|| async { self.api.get(&path, &[]).await })
            .await
            .clone()
    }

    /// Drops the shared read of decision `id`: the next read asks the API (after this
    /// process changed what it says, as a cancellation does).
    pub fn forget(&self, id: &str) {
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    /// The decision `id`, read as its wire type.
    pub async fn decision(&self, id: &str) -> Result<Decision<'static>, String> {
        let answer = self.decision_json(id).await.map_err(|e| e.0)?;
        read(answer, "decision")
    }

    /// The decision `id` and where the review it opened stands (with the approval's
    /// fresh decision read too, for its token).
    pub async fn state(&self, id: &str) -> Result<(Decision<'static>, ReviewState), String> {
        let answer = self.decision_json(id).await.map_err(|e| e.0)?;
        let decision: Decision<'static> = read(answer, "decision")?;
        let state = match (decision.review.as_ref(), decision.review_status) {
            (None, _) => ReviewState::None,
            (Some(_), Some(ReviewStatus::Approved)) => {
                let fresh = decision
                    .review_resolution
                    .as_ref()
                    .ok_or("the review was approved but names no decision")?;
                ReviewState::Approved(Box::new(self.decision(fresh.as_str()).await?))
            }
            (Some(_), Some(ReviewStatus::Denied)) => {
                let denial = Denial {
                    reason: decision.review_reason.clone().map(Cow::into_owned),
                    at: decision.review_resolved_at,
                };
                if decision.review_withdrawn {
                    ReviewState::Withdrawn(denial)
                } else {
                    ReviewState::Denied(denial)
                }
            }
            (Some(_), Some(ReviewStatus::Expired)) => ReviewState::Expired,
            (Some(_), _) => ReviewState::Pending,
        };
        Ok((decision, state))
    }
}

/// An answer of the API read as its wire type (`what` names it for the error).
pub fn read<T: serde::de::DeserializeOwned>(answer: Value, what: &str) -> Result<T, String> {
    serde_json::from_value(answer).map_err(|e| format!("the server's {what} did not read: {e}"))
}

/// A path segment with everything but the id alphabet percent-encoded.
pub fn urlencode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_encoded_as_one_path_segment() {
        assert_eq!(urlencode("dec_abc-1"), "dec_abc-1");
        assert_eq!(urlencode("../x?y"), "%2E%2E%2Fx%3Fy");
    }
}
