//! The tasks a client cancelled, kept where every `mandate mcp` of this user finds them.
//!
//! A task's state is read from its decision each time (`tasks.rs`), so nothing about it
//! lives in a process. Cancelling is the one thing a decision cannot say: the review stays
//! with the person who holds it (an agent key cannot withdraw it), yet MCP 2025-11-25 says a
//! cancelled task stays `cancelled` even if the work completes. So a cancellation is a small
//! file, `<cache>/mcp-tasks/cancelled/<decision id>` (the CLI's cache directory:
//! `$XDG_CACHE_HOME/mandate/` or `~/.cache/mandate/`), holding the time it was cancelled:
//! another `mandate mcp` of the same user, or a restarted one, reads the task as cancelled
//! too. Removing the file (or the cache) un-cancels the task; it never makes anything
//! payable that was not, since the task then reads as its decision says.
//!
//! Only decisions this agent could read are recorded (the caller reads the task first), and
//! a file name is a decision id, which holds only `[a-z0-9_-]` after `dec_`.

use std::path::PathBuf;

use mandate_core::DecisionId;
use time::OffsetDateTime;

/// Where the cancellations live.
#[derive(Debug, Clone)]
pub struct Cancellations {
    /// `None` when no cache directory can be found: cancelling then fails, saying why.
    dir: Result<PathBuf, String>,
}

impl Cancellations {
    /// The cancellations under the CLI's cache directory.
    pub fn in_cache() -> Self {
        Self {
            dir: crate::config::cache_dir()
                .map(|dir| dir.join("mcp-tasks").join("cancelled"))
                .map_err(|e| e.to_string()),
        }
    }

    /// The cancellations kept in `dir`.
    #[cfg(test)]
    pub fn in_dir(dir: PathBuf) -> Self {
        Self { dir: Ok(dir) }
    }

    /// When the task of decision `id` was cancelled, if it was.
    pub fn cancelled_at(&self, id: &DecisionId) -> Option<OffsetDateTime> {
        let path = self.dir.as_ref().ok()?.join(id.as_str());
        let text = std::fs::read_to_string(path).ok()?;
        // A file being written (or damaged) still says the task was cancelled.
        Some(
            mandate_core::unstable::timefmt::parse(text.trim())
                .unwrap_or(OffsetDateTime::UNIX_EPOCH),
        )
    }

    /// Records that the task of decision `id` was cancelled at `now`; the time it was
    /// cancelled first if it already was.
    pub fn record(&self, id: &DecisionId, now: OffsetDateTime) -> Result<OffsetDateTime, String> {
        if let Some(at) = self.cancelled_at(id) {
            return Ok(at);
        }
        let dir = self.dir.as_ref().map_err(Clone::clone)?;
        let fail = |e: std::io::Error| {
            format!(
                "cannot record the cancellation of task {id} in {}: {e}",
                dir.display()
            )
        };
        std::fs::create_dir_all(dir).map_err(fail)?;
        // Written aside, then renamed: a reader never sees half a file.
        let partial = dir.join(format!(".{id}.{}", std::process::id()));
        std::fs::write(&partial, mandate_core::unstable::timefmt::format(now)).map_err(fail)?;
        std::fs::rename(&partial, dir.join(id.as_str())).map_err(fail)?;
        Ok(now)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_cancellation_is_found_by_another_reader_and_keeps_its_first_time() {
        let dir = tempfile::tempdir().unwrap();
        let id = DecisionId::parse("dec_abc").unwrap();
        let first = Cancellations::in_dir(dir.path().join("c"));
        assert_eq!(first.cancelled_at(&id), None);
        let at = time::macros::datetime!(2026-11-25 12:00:00 UTC);
        assert_eq!(first.record(&id, at).unwrap(), at);
        // Another process reading the same directory.
        let other = Cancellations::in_dir(dir.path().join("c"));
        assert_eq!(other.cancelled_at(&id), Some(at));
        let later = at + time::Duration::minutes(5);
        assert_eq!(other.record(&id, later).unwrap(), at);
        let unrelated = DecisionId::parse("dec_other").unwrap();
        assert_eq!(other.cancelled_at(&unrelated), None);
    }
}
