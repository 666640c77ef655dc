//! The witness's state file: for each log (by origin), the size and root of the last
//! checkpoint it cosigned, and that checkpoint with its cosignature (what monitors read).
//!
//! It is what keeps the witness from cosigning a rollback or a fork after a restart, so it
//! is written durably before an answer leaves: to a temporary file beside it, synced, then
//! renamed over the old one, and the directory synced, so that a crash leaves either the
//! old state or the new one, never a mix.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use mandate_protocol::tlog::LogHash;
use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The last checkpoint cosigned of one log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cosigned {
    /// Its tree size.
    pub size: u64,
    /// Its root.
    pub root: LogHash,
    /// The checkpoint's note: the log's signatures and the witness's cosignature.
    pub checkpoint: String,
}

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Content {
    version: u32,
    logs: BTreeMap<String, Cosigned>,
}

/// The state file, as read at start and as last written.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    logs: BTreeMap<String, Cosigned>,
}

impl StateFile {
    /// Reads `path`, or starts empty when it does not exist.
    pub fn open(path: PathBuf) -> Result<Self, CliError> {
        let logs = match std::fs::read(&path) {
            Ok(bytes) => {
                let content: Content = serde_json::from_slice(&bytes).map_err(|e| {
                    CliError::usage(format!(
                        "{} is not a witness state file (or was altered): {e}",
                        path.display()
                    ))
                })?;
                if content.version != 1 {
                    return Err(CliError::usage(format!(
                        "{} is of version {}, this mandate knows 1",
                        path.display(),
                        content.version
                    )));
                }
                content.logs
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                return Err(CliError::usage(format!(
                    "cannot read {}: {e}",
                    path.display()
                )));
            }
        };
        Ok(Self { path, logs })
    }

    /// The last checkpoint cosigned of `origin`.
    pub fn get(&self, origin: &str) -> Option<&Cosigned> {
        self.logs.get(origin)
    }

    /// Records `cosigned` as the last checkpoint of `origin`, durably; on an error nothing
    /// changes, in the file or here.
    pub fn record(&mut self, origin: &str, cosigned: Cosigned) -> std::io::Result<()> {
        let mut logs = self.logs.clone();
        logs.insert(origin.to_owned(), cosigned);
        let content = Content { version: 1, logs };
        let bytes = serde_json::to_vec_pretty(&content).map_err(std::io::Error::other)?;
        write_atomically(&self.path, &bytes)?;
        self.logs = content.logs;
        Ok(())
    }
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the new one: a
/// temporary file in the same directory, synced, renamed over `path`, the directory synced.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    // The rename is durable once the directory is; on systems where a directory cannot be
    // opened (Windows), the rename is as durable as the file system makes it.
    if let Ok(dir) = std::fs::File::open(&dir) {
        dir.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_log_reads_back_and_no_temporary_file_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut state = StateFile::open(path.clone()).unwrap();
        assert!(state.get("o").is_none());
        let cosigned = Cosigned {
            size: 3,
            root: LogHash::from_bytes([1; 32]),
            checkpoint: "o\n3\n...\n".into(),
        };
        state.record("o", cosigned.clone()).unwrap();
        let read = StateFile::open(path.clone()).unwrap();
        assert_eq!(read.get("o"), Some(&cosigned));
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_failed_write_changes_nothing_and_an_altered_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // The state's directory is gone: the write fails, the state in memory stays.
        let path = dir.path().join("gone").join("state.json");
        let mut state = StateFile::open(path).unwrap();
        let cosigned = Cosigned {
            size: 1,
            root: LogHash::from_bytes([2; 32]),
            checkpoint: String::new(),
        };
        assert!(state.record("o", cosigned).is_err());
        assert!(state.get("o").is_none());

        let altered = dir.path().join("altered.json");
        std::fs::write(
            &altered,
            "{\"version\":1,\"logs\":{\"o\":{\"size\":\"x\"}}}",
        )
        .unwrap();
        let error = StateFile::open(altered).unwrap_err().to_string();
        assert!(error.contains("is not a witness state file"), "{error}");
    }
}
