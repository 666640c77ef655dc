//! Backups of a live database, and bringing one back.
//!
//! A backup is made with SQLite's online backup API in one step, so it is one read
//! transaction of the source: a consistent snapshot that holds every write committed
//! before it began, taken while the server keeps writing (WAL readers never block the
//! writer). The copy is switched out of WAL mode, so it is one self-contained file, and a
//! trailer is appended: its length and SHA-256, so that a truncated or damaged backup is
//! refused before anything is written. With a key-encryption key, the SHA-256 is an
//! HMAC-SHA256 under a key derived from it (`MANDATE-BACKUP-2`): a key the file does not
//! carry, so a backup edited by anyone without the KEK (a planted signing key or API key
//! hash) is refused by `verify-backup` and `restore`, and so is one whose trailer was
//! rewritten as an unkeyed one. SQLite itself ignores the trailer (the database's
//! header says how many pages it has), so the file still opens in `sqlite3` for
//! inspection.
//!
//! Restoring checks the backup, writes it beside the target and renames it into place:
//! the target is either the old file or the whole new one, never half of each.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_lc_rs::hmac;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use sha2::{Digest, Sha256};

use super::migrations;

/// The last 16 bytes of a backup made without a key-encryption key.
const MAGIC: &[u8; 16] = b"MANDATE-BACKUP-1";
/// The last 16 bytes of a backup authenticated under a key-encryption key.
const MAGIC_KEYED: &[u8; 16] = b"MANDATE-BACKUP-2";
/// A key that authenticates backups (derived from a key-encryption key).
pub type BackupKey = [u8; 32];
/// SHA-256 (or HMAC-SHA256) of the database's bytes, their length (u64, big-endian), then
/// [`MAGIC`] (or [`MAGIC_KEYED`]).
const TRAILER: usize = 32 + 8 + 16;
/// How long a backup waits for the source's locks before giving up.
const BUSY_FOR: Duration = Duration::from_secs(30);
/// Tables every Mandate database has, whatever its migration.
const TABLES: &[&str] = &[
    "schema_migrations",
    "settings",
    "orgs",
    "environments",
    "api_keys",
    "signing_keys",
    "agents",
    "mandates",
    "decisions",
    "reviews",
    "events",
    "idempotency",
];

/// Why a backup could not be made, checked or restored; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The backup file is not whole or not a backup.
    #[error("{file}: {problem}; it cannot be restored, use another backup")]
    Refused {
        /// The backup file.
        file: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// Restoring would replace a database.
    #[error(
        "{0} exists; stop the server that uses it, then pass --force to replace it (its WAL is removed too)"
    )]
    TargetExists(PathBuf),
    /// A process (a server) has the database open.
    #[error("{0} is in use (a server has it open); stop the server, then restore")]
    InUse(PathBuf),
    /// The source is not a Mandate database.
    #[error("{0} is not a Mandate database (no schema migrations); check --db")]
    NotMandate(PathBuf),
    /// A file could not be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// SQLite failed.
    #[error("{what} {}: {source}", path.display())]
    Sqlite {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: rusqlite::Error,
    },
}

/// What a verified backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    /// The database's bytes (without the trailer).
    pub bytes: u64,
    /// The highest migration it has applied.
    pub migration: i64,
    /// How many decisions it holds.
    pub decisions: i64,
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BackupError + use<> {
    let path = path.to_path_buf();
    move |source| BackupError::Io { what, path, source }
}

fn sqlite_error(
    what: &'static str,
    path: &Path,
) -> impl FnOnce(rusqlite::Error) -> BackupError + use<> {
    let path = path.to_path_buf();
    move |source| BackupError::Sqlite { what, path, source }
}

fn refused(file: &Path, problem: impl Into<String>) -> BackupError {
    BackupError::Refused {
        file: file.to_path_buf(),
        problem: problem.into(),
    }
}

/// A file beside `path`, named after it and this process.
fn beside(path: &Path, what: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{what}-{}", std::process::id()));
    path.with_file_name(name)
}

/// Syncs the directory holding `path`, so that a rename into it is durable.
fn sync_dir(path: &Path) -> Result<(), BackupError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("syncing the directory of", path))
}

/// Copies the database at `db` (a server may be using it) to `to`, with the trailer
/// (authenticated under the first of `keys`, if any); `to` appears only once complete and
/// durable. Returns what the backup holds.
pub fn backup(db: &Path, to: &Path, keys: &[BackupKey]) -> Result<BackupInfo, BackupError> {
    let source = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite_error("opening the database", db))?;
    source
        .busy_timeout(BUSY_FOR)
        .map_err(sqlite_error("opening the database", db))?;
    if migrations::applied(&source).map_err(|_| BackupError::NotMandate(db.to_path_buf()))? == 0 {
        return Err(BackupError::NotMandate(db.to_path_buf()));
    }
    let partial = beside(to, "partial");
    let made = copy_into(&source, db, &partial).and_then(|()| seal(&partial, keys.first()));
    if let Err(e) = made {
        let _ = fs::remove_file(&partial);
        return Err(e);
    }
    fs::rename(&partial, to).map_err(io_error("moving the backup into place at", to))?;
    sync_dir(to)?;
    verify(to, keys)
}

/// Copies `source` into a new database at `partial`, in one step of the backup API (one
/// read transaction of the source), and takes the copy out of WAL mode.
fn copy_into(source: &Connection, db: &Path, partial: &Path) -> Result<(), BackupError> {
    let _ = fs::remove_file(partial);
    super::owner_only::create_if_missing(partial).map_err(io_error("creating", partial))?;
    let mut target = Connection::open(partial).map_err(sqlite_error("creating", partial))?;
    {
        let backup = Backup::new(source, &mut target).map_err(sqlite_error("backing up", db))?;
        let started = Instant::now();
        loop {
            match backup.step(-1).map_err(sqlite_error("backing up", db))? {
                StepResult::Done => break,
                _ if started.elapsed() > BUSY_FOR => {
                    return Err(BackupError::Sqlite {
                        what: "backing up (the database stayed locked)",
                        path: db.to_path_buf(),
                        source: rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                            None,
                        ),
                    });
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    target
        .query_row("PRAGMA journal_mode = DELETE", [], |_| Ok(()))
        .map_err(sqlite_error("finishing", partial))?;
    target
        .close()
        .map_err(|(_, e)| sqlite_error("finishing", partial)(e))
}

/// SHA-256 of the first `len` bytes of `file`, or with `key` their HMAC-SHA256.
fn digest(
    file: &mut File,
    len: u64,
    path: &Path,
    key: Option<&BackupKey>,
) -> Result<[u8; 32], BackupError> {
    file.seek(SeekFrom::Start(0))
        .map_err(io_error("reading", path))?;
    let mut hasher = Sha256::new();
    let mut keyed = key.map(|k| hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, k)));
    let mut rest = file.take(len);
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = rest.read(&mut buffer).map_err(io_error("reading", path))?;
        if n == 0 {
            break;
        }
        match &mut keyed {
            Some(context) => context.update(&buffer[..n]),
            None => hasher.update(&buffer[..n]),
        }
    }
    let mut out = [0u8; 32];
    match keyed {
        Some(context) => out.copy_from_slice(context.sign().as_ref()),
        None => out.copy_from_slice(&hasher.finalize()),
    }
    Ok(out)
}

/// Appends the trailer to the copy at `partial` (authenticated under `key`) and syncs it.
fn seal(partial: &Path, key: Option<&BackupKey>) -> Result<(), BackupError> {
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(partial)
        .map_err(io_error("opening", partial))?;
    let len = file.metadata().map_err(io_error("reading", partial))?.len();
    let hash = digest(&mut file, len, partial, key)?;
    let mut trailer = Vec::with_capacity(TRAILER);
    trailer.extend_from_slice(&hash);
    trailer.extend_from_slice(&len.to_be_bytes());
    trailer.extend_from_slice(if key.is_some() { MAGIC_KEYED } else { MAGIC });
    file.seek(SeekFrom::End(0))
        .and_then(|_| file.write_all(&trailer))
        .and_then(|()| file.sync_all())
        .map_err(io_error("writing", partial))
}

/// Checks the trailer of the backup at `file` (with `keys`, its authentication under one
/// of them): returns the length of the database's bytes before it.
fn check_trailer(file: &Path, keys: &[BackupKey]) -> Result<u64, BackupError> {
    let mut handle = File::open(file).map_err(io_error("opening the backup", file))?;
    let total = handle
        .metadata()
        .map_err(io_error("reading the backup", file))?
        .len();
    let not_whole = "it does not end with the trailer `mandate-server backup` writes: it is truncated, or not a backup";
    if total < TRAILER as u64 {
        return Err(refused(file, not_whole));
    }
    let mut trailer = [0u8; TRAILER];
    handle
        .seek(SeekFrom::End(-(TRAILER as i64)))
        .and_then(|_| handle.read_exact(&mut trailer))
        .map_err(io_error("reading the backup", file))?;
    let keyed = &trailer[40..] == MAGIC_KEYED;
    if &trailer[40..] != MAGIC && !keyed {
        return Err(refused(file, not_whole));
    }
    if keyed && keys.is_empty() {
        return Err(refused(
            file,
            "it is authenticated under a key-encryption key and none is given: give it (MANDATE_KEY_ENCRYPTION_KEY or --key-encryption-key-file)",
        ));
    }
    if !keyed && !keys.is_empty() {
        return Err(refused(
            file,
            "it is not authenticated under a key-encryption key (made without one, or its trailer was rewritten): with a key-encryption key only backups made under it are restored",
        ));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&trailer[32..40]);
    let len = u64::from_be_bytes(len);
    if len != total - TRAILER as u64 {
        return Err(refused(
            file,
            format!(
                "its trailer says {len} bytes of database but it holds {}: it was cut or extended",
                total - TRAILER as u64
            ),
        ));
    }
    if !keyed {
        if digest(&mut handle, len, file, None)?[..] != trailer[..32] {
            return Err(refused(
                file,
                "its SHA-256 does not match the one written when it was made: it was damaged or changed since",
            ));
        }
        return Ok(len);
    }
    for key in keys {
        let tag = digest(&mut handle, len, file, Some(key))?;
        if aws_lc_rs::constant_time::verify_slices_are_equal(&tag, &trailer[..32]).is_ok() {
            return Ok(len);
        }
    }
    Err(refused(
        file,
        "its authentication code does not match under the key-encryption key given: it was changed since it was made, or made under another key-encryption key",
    ))
}

/// A `file:` URI for `path` opened immutable (nothing writes it, no WAL or lock files).
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Checks the backup at `file`: whole (trailer, length, SHA-256), a sound SQLite database
/// (`integrity_check`), of a schema this server knows, with every table. Writes nothing.
pub fn verify(file: &Path, keys: &[BackupKey]) -> Result<BackupInfo, BackupError> {
    let bytes = check_trailer(file, keys)?;
    let conn = Connection::open_with_flags(
        immutable_uri(file),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )
    .map_err(|e| refused(file, format!("SQLite cannot open it ({e})")))?;
    let problems: Vec<String> = conn
        .prepare("PRAGMA integrity_check(5)")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(|e| refused(file, format!("SQLite cannot read it ({e})")))?;
    if problems != ["ok"] {
        return Err(refused(
            file,
            format!("SQLite's integrity check fails: {}", problems.join("; ")),
        ));
    }
    let migration = migrations::applied(&conn)
        .map_err(|e| refused(file, format!("its schema cannot be read ({e})")))?;
    let latest = migrations::latest();
    if migration == 0 {
        return Err(refused(file, "it holds no Mandate schema"));
    }
    if migration > latest {
        return Err(refused(
            file,
            format!(
                "it was made by a newer server (migration {migration}; this one knows up to {latest}): restore it with that version"
            ),
        ));
    }
    for table in TABLES {
        let present: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
                [table],
                |r| r.get(0),
            )
            .map_err(|e| refused(file, format!("its schema cannot be read ({e})")))?;
        if !present {
            return Err(refused(file, format!("its table {table} is missing")));
        }
    }
    let decisions = conn
        .query_row("SELECT COUNT(*) FROM decisions", [], |r| r.get(0))
        .map_err(|e| refused(file, format!("its decisions cannot be read ({e})")))?;
    Ok(BackupInfo {
        bytes,
        migration,
        decisions,
    })
}

/// Whether another connection has the database at `db` open: an exclusive lock, which a
/// connection in exclusive locking mode takes on WAL and database file alike, is refused
/// while any other connection (a server's readers and writer) is open on it. Any other
/// failure (a file too damaged to be a database) says nothing about its users: `false`.
fn in_use(db: &Path) -> bool {
    let Ok(conn) = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) else {
        return false;
    };
    let tried = conn
        .busy_timeout(Duration::from_millis(200))
        .and_then(|()| conn.query_row("PRAGMA locking_mode = EXCLUSIVE", [], |_| Ok(())))
        .and_then(|()| conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;"));
    matches!(
        tried.as_ref().map_err(rusqlite::Error::sqlite_error_code),
        Err(Some(
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        ))
    )
}

/// Brings the backup at `from` back as the database `db`: verified first; an existing `db`
/// is replaced only with `force`, and never while a server has it open (its WAL and
/// shared-memory files are removed first, so that no frame of the old database is
/// replayed onto the new one). The server migrates it when it starts.
pub fn restore(
    from: &Path,
    db: &Path,
    force: bool,
    keys: &[BackupKey],
) -> Result<BackupInfo, BackupError> {
    let info = verify(from, keys)?;
    if db.exists() {
        if !force {
            return Err(BackupError::TargetExists(db.to_path_buf()));
        }
        if in_use(db) {
            return Err(BackupError::InUse(db.to_path_buf()));
        }
    }
    let partial = beside(db, "restoring");
    let written = (|| {
        let mut source = File::open(from).map_err(io_error("opening the backup", from))?;
        let mut target =
            super::owner_only::create(&partial).map_err(io_error("creating", &partial))?;
        let copied = io::copy(&mut (&mut source).take(info.bytes), &mut target)
            .map_err(io_error("writing", &partial))?;
        if copied != info.bytes {
            return Err(refused(from, "it shrank while being restored"));
        }
        target.sync_all().map_err(io_error("writing", &partial))
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&partial);
        return Err(e);
    }
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut side = db.as_os_str().to_owned();
        side.push(suffix);
        match fs::remove_file(&side) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                let _ = fs::remove_file(&partial);
                return Err(io_error("removing", Path::new(&side))(e));
            }
            _ => {}
        }
    }
    fs::rename(&partial, db).map_err(io_error("moving the restored database into place at", db))?;
    sync_dir(db)?;
    Ok(info)
}
