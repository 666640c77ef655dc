//! The HTTP layers and extractors every route shares: authentication and the caches it
//! reads, request ids, rate limits, what a client may make the server hold (limits), body
//! reading, idempotency, list paging, CORS for the review console, and the error envelope.
//!
//! Nothing here decides a verdict or knows a resource: routes call these, never the
//! other way round.

pub mod auth;
pub mod body;
pub mod cache;
pub mod connections;
pub mod cors;
pub mod error;
pub mod extract;
pub mod idempotency;
pub mod limits;
pub mod list;
pub mod rate_limit;
pub mod request_id;
pub mod request_log;
pub mod seal;

/// The layers know no decision service: what they keep for it (an agent key's slot) they
/// hold as a type parameter. Read off the source files.
#[cfg(test)]
mod layering {
    #[test]
    fn http_imports_nothing_from_the_decision_service() {
        let dir = std::path::Path::new(
            &std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("src/http");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            checked += 1;
            // Split so that this file does not name what it looks for.
            let needle = ["crate::", "decision"].concat();
            assert!(
                !text.contains(&needle),
                "{} imports the decision service",
                path.display()
            );
        }
        assert!(checked > 10, "read {checked} files of {}", dir.display());
    }
}
