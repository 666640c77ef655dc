//! Idempotency keys as a pure decision: given what is stored under a key, what to do next.
//!
//! The server performs the action ([`NextAction`]); this module only decides, so the rules
//! (replay, conflict, expiry after 24 hours, in-flight requests) are tested without a
//! database.

use sha2::{Digest, Sha256};
use time::OffsetDateTime;

/// How long a stored result is replayed: 24 hours.
pub const IDEMPOTENCY_WINDOW_SECS: i64 = 24 * 60 * 60;

/// What is stored under one (API key, Idempotency-Key) pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAttempt {
    /// Digest of the request (method, path and body) that first used the key.
    pub request_digest: [u8; 32],
    /// When the key was first used, unix seconds.
    pub created_at: OffsetDateTime,
    /// The stored response, or `None` while the first request is still being processed.
    pub response: Option<StoredResponse>,
}

/// A response kept for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status code (2xx or 4xx; 5xx are never kept).
    pub status: u16,
    /// The response body, as sent.
    pub body: Vec<u8>,
}

/// What the server should do with a request that carries an Idempotency-Key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum NextAction {
    /// Nothing usable is stored: claim the key and process the request.
    StartProcessing,
    /// Return the stored response with `Idempotency-Replayed: true`.
    ReturnSavedResponse(StoredResponse),
    /// The same key was used with a different request: 409.
    ConflictDifferentRequest,
    /// The first request with this key is still being processed: 409.
    ConflictInFlight,
}

/// Digest of a request, so that a key reused with another body is detected.
pub fn request_digest(method: &str, path: &str, body: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(method.as_bytes());
    hasher.update([0]);
    hasher.update(path.as_bytes());
    hasher.update([0]);
    hasher.update(body);
    hasher.finalize().into()
}

/// Decides what to do with a request whose digest is `digest`, given what is stored.
pub fn next_action(
    stored: Option<&StoredAttempt>,
    digest: &[u8; 32],
    now: OffsetDateTime,
) -> NextAction {
    let Some(stored) = stored else {
        return NextAction::StartProcessing;
    };
    // Compared in whole seconds, as the window is counted.
    let created = stored.created_at.unix_timestamp();
    if now.unix_timestamp() >= created.saturating_add(IDEMPOTENCY_WINDOW_SECS) {
        return NextAction::StartProcessing;
    }
    if &stored.request_digest != digest {
        return NextAction::ConflictDifferentRequest;
    }
    match &stored.response {
        Some(response) => NextAction::ReturnSavedResponse(response.clone()),
        None => NextAction::ConflictInFlight,
    }
}

/// Whether a response with this status is kept for replay: 2xx and 4xx are, 5xx are not.
pub fn is_kept(status: u16) -> bool {
    (200..300).contains(&status) || (400..500).contains(&status)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(secs).unwrap()
    }

    fn attempt(body: &[u8], response: Option<u16>) -> StoredAttempt {
        StoredAttempt {
            request_digest: request_digest("POST", "/v1/agents", body),
            created_at: at(1_000),
            response: response.map(|status| StoredResponse {
                status,
                body: b"{}".to_vec(),
            }),
        }
    }

    #[test]
    fn decides_each_case() {
        let digest = request_digest("POST", "/v1/agents", b"a");
        assert_eq!(
            next_action(None, &digest, at(1_000)),
            NextAction::StartProcessing
        );
        assert!(matches!(
            next_action(Some(&attempt(b"a", Some(201))), &digest, at(1_001)),
            NextAction::ReturnSavedResponse(StoredResponse { status: 201, .. })
        ));
        assert_eq!(
            next_action(Some(&attempt(b"b", Some(201))), &digest, at(1_001)),
            NextAction::ConflictDifferentRequest
        );
        assert_eq!(
            next_action(Some(&attempt(b"a", None)), &digest, at(1_001)),
            NextAction::ConflictInFlight
        );
        // The window is 24 hours: at its end the key is fresh again.
        let end = 1_000 + IDEMPOTENCY_WINDOW_SECS;
        assert!(matches!(
            next_action(Some(&attempt(b"a", Some(400))), &digest, at(end - 1)),
            NextAction::ReturnSavedResponse(_)
        ));
        assert_eq!(
            next_action(Some(&attempt(b"b", Some(400))), &digest, at(end)),
            NextAction::StartProcessing
        );
    }

    #[test]
    fn keeps_2xx_and_4xx_only() {
        assert!(is_kept(201) && is_kept(400) && is_kept(409));
        assert!(!is_kept(500) && !is_kept(503) && !is_kept(302));
    }

    #[test]
    fn digest_covers_path_and_body() {
        assert_ne!(
            request_digest("POST", "/a", b"x"),
            request_digest("POST", "/b", b"x")
        );
        assert_ne!(
            request_digest("POST", "/a", b"x"),
            request_digest("POST", "/a", b"y")
        );
        assert_ne!(
            request_digest("POST", "/ax", b""),
            request_digest("POST", "/a", b"x")
        );
    }
}
