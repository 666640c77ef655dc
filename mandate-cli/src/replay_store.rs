//! The replay store of `verify --replay-store FILE`: an append-only file of the nonces
//! (or, for events, the event ids) already accepted, one per line with the time it was
//! accepted. The file is locked while it is read and appended to, so two verifiers
//! sharing it cannot both accept one token.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::path::Path;

use mandate_core::{ReplayGuard, ReplayGuardError};
use time::OffsetDateTime;

use crate::error::CliError;

/// Whether an id was new (and is now recorded) or seen before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Seen {
    /// First time: recorded now.
    New,
    /// Already in the store: a replay.
    Before,
}

fn open(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    options.open(path)
}

/// Records `id` in the store at `path` unless it is there already.
pub fn check_and_record(path: &Path, id: &str, now: i64) -> Result<Seen, CliError> {
    let fail = |e: std::io::Error| CliError::usage(format!("replay store {}: {e}", path.display()));
    let mut file = open(path).map_err(fail)?;
    file.lock().map_err(fail)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(fail)?;
    if text
        .lines()
        .any(|line| line.split_whitespace().next() == Some(id))
    {
        return Ok(Seen::Before);
    }
    let mut entry = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        entry.push('\n');
    }
    entry.push_str(&format!("{id} {now}\n"));
    file.write_all(entry.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    Ok(Seen::New)
}

/// The file store as the core's replay guard, for `Counterparty::check`. Entries are
/// kept for ever (the file is the operator's record of what was settled).
#[derive(Debug, Clone, Copy)]
pub struct FileReplayStore<'a> {
    path: &'a Path,
}

impl<'a> FileReplayStore<'a> {
    /// The store at `path`.
    pub fn new(path: &'a Path) -> Self {
        Self { path }
    }
}

impl ReplayGuard for FileReplayStore<'_> {
    fn check_and_record(
        &mut self,
        nonce: &str,
        _keep_until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Result<mandate_core::Seen, ReplayGuardError> {
        match check_and_record(self.path, nonce, now.unix_timestamp()) {
            Ok(Seen::New) => Ok(mandate_core::Seen::New),
            Ok(Seen::Before) => Ok(mandate_core::Seen::Before),
            Err(e) => Err(ReplayGuardError(e.to_string())),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_second_sighting_is_a_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nonces");
        assert_eq!(check_and_record(&path, "n_a", 1).unwrap(), Seen::New);
        assert_eq!(check_and_record(&path, "n_b", 2).unwrap(), Seen::New);
        assert_eq!(check_and_record(&path, "n_a", 3).unwrap(), Seen::Before);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "n_a 1\nn_b 2\n");
    }
}
