//! Database files readable and writable by their owner only (mode 0600).
//!
//! Without a key-encryption key the database holds the signing keys in plaintext: a file
//! that anyone on the machine can read is a copy away from forged verdicts. So every file
//! this engine creates is created 0600: the database (SQLite creates its `-wal`, `-shm`
//! and `-journal` files with the database file's mode), a backup, and a database being
//! restored. A file that already exists keeps its mode, which the start-up warning about
//! plaintext signing keys names ([`mode`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The mode of every file this engine creates.
pub const MODE: u32 = 0o600;

fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, MODE);
    options
}

/// Creates an empty file at `path`, owner-only, unless a file is already there (which is
/// left as it is), so that SQLite opens a file with that mode instead of creating one with
/// the process's default.
pub fn create_if_missing(path: &Path) -> io::Result<()> {
    match options().create_new(true).open(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(drop),
    }
}

/// Creates (or truncates) the file at `path` for writing; owner-only when it is created.
pub fn create(path: &Path) -> io::Result<File> {
    options().create(true).truncate(true).open(path)
}

/// The permission bits of the file at `path` (`None` where there are none to read).
pub fn mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

// `#[cfg(test)]` first: the import-circle check leaves test modules out from that line on.
#[cfg(test)]
#[cfg(unix)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Db;
    use crate::backup::{backup, restore};

    fn with_suffix(path: &Path, suffix: &str) -> std::path::PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        name.into()
    }

    /// The database, its WAL and shared memory, a backup of it and a database restored from
    /// it are created 0600 whatever the process's umask lets through (0644 with the usual
    /// 022), and a file that exists keeps its mode.
    #[test]
    fn database_wal_shm_backups_and_restores_are_created_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mandate.db");
        let db = Db::open(&path).unwrap();
        for file in [
            path.clone(),
            with_suffix(&path, "-wal"),
            with_suffix(&path, "-shm"),
        ] {
            assert_eq!(mode(&file), Some(MODE), "{}", file.display());
        }
        let copy = dir.path().join("backup.db");
        backup(&path, &copy, &[]).unwrap();
        assert_eq!(mode(&copy), Some(MODE));
        drop(db);
        let restored = dir.path().join("restored.db");
        restore(&copy, &restored, false, &[]).unwrap();
        assert_eq!(mode(&restored), Some(MODE));

        let existing = dir.path().join("existing.db");
        std::fs::write(&existing, b"").unwrap();
        let before = mode(&existing);
        create_if_missing(&existing).unwrap();
        assert_eq!(mode(&existing), before);
    }
}
