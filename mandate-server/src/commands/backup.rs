//! `backup`, `verify-backup` and `restore`: SQLite files only (PostgreSQL has its own
//! tools).

use std::path::Path;

use mandate_server::storage::DbLocation;
use mandate_server::storage::sqlite::backup::{self, BackupInfo};

use super::key_encryption;
use crate::cli::{DbArg, KekArgs};

/// A backup's contents in one line.
fn describe(info: &BackupInfo) -> String {
    format!(
        "{} bytes, schema migration {}, {} decisions",
        info.bytes, info.migration, info.decisions
    )
}

/// `backup`: the database copied to `to` while it is served.
pub(super) fn backup(db: &DbArg, to: &Path) -> Result<(), String> {
    let file = db.sqlite_file("backup")?;
    let keys = key_encryption(db)?.backup_keys();
    let info = backup::backup(&file, to, &keys).map_err(|e| e.to_string())?;
    println!("backup written to {}: {}", to.display(), describe(&info));
    Ok(())
}

/// `verify-backup`: the backup `file` checked; nothing written.
pub(super) fn verify(file: &Path, kek: KekArgs) -> Result<(), String> {
    let keys = key_encryption(&DbArg {
        db: DbLocation::from(file.to_path_buf()),
        kek,
    })?
    .backup_keys();
    let info = backup::verify(file, &keys).map_err(|e| e.to_string())?;
    println!("{} is a sound backup: {}", file.display(), describe(&info));
    Ok(())
}

/// `restore`: the backup `from` checked and made the database (replacing one only with
/// `force`).
pub(super) fn restore(from: &Path, db: &DbArg, force: bool) -> Result<(), String> {
    let file = db.sqlite_file("restore")?;
    let keys = key_encryption(db)?.backup_keys();
    let info = backup::restore(from, &file, force, &keys).map_err(|e| e.to_string())?;
    println!(
        "restored {} to {}: {}; the server migrates it when it starts",
        from.display(),
        file.display(),
        describe(&info)
    );
    Ok(())
}
