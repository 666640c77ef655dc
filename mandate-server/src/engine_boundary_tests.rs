//! The server reaches stored data only through the storage crate's traits, never through
//! an engine (SQLite or PostgreSQL), except where the engine is chosen and opened: read off
//! the server's source files. (That storage imports nothing above it, the crate boundary
//! holds: `mandate-storage` does not depend on this crate.)

use std::path::{Path, PathBuf};

/// What only the engines (and where the engine is chosen) may name: SQLite types and the
/// engine's module, the database handle and its closures; the PostgreSQL engine's module,
/// its store and its driver.
const ENGINE: &[&str] = &[
    "rusqlite",
    "sqlite::",
    "storage::Db",
    "storage::{Db",
    "Db::",
    "write_blocking",
    "postgres::",
    "PostgresStore",
    "tokio_postgres",
    "deadpool",
];

/// Whether `text` names the engine: one of [`ENGINE`], or a field `db` (`state.db`, the
/// database handle).
fn names_engine(text: &str) -> Vec<&'static str> {
    let mut found: Vec<_> = ENGINE
        .iter()
        .copied()
        .filter(|token| text.contains(token))
        .collect();
    let field = text.match_indices(".db").any(|(at, _)| {
        !text[at + 3..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    });
    if field {
        found.push(".db");
    }
    found
}

/// The server's files allowed to name the engine.
const ENGINE_ALLOWED: &[&str] = &[
    // Where the engine is chosen and opened: the binary's command line and commands (the
    // SQLite backups among them), and the server's start.
    "cli.rs",
    "commands/mod.rs",
    "commands/serve.rs",
    "commands/backup.rs",
    "serve.rs",
    // The server's name for persistence, and where `--db` opens an engine.
    "storage/mod.rs",
    "storage/open.rs",
];

/// The tokens of the PostgreSQL engine are seen as naming it (and plain words are not).
#[test]
fn the_postgres_engine_is_recognised() {
    assert!(!names_engine("usecrate::postgres::PostgresStore;").is_empty());
    assert!(!names_engine("tokio_postgres::Client").is_empty());
    assert!(names_engine("//aPostgreSQLURLgoesin--db").is_empty());
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files under `src/`, each with its path relative to `src/` and its text without
/// whitespace (so that a call split over lines, `state\n.db\n.write`, is still seen).
fn sources() -> Vec<(String, String)> {
    // The checkout being tested (at run time), not the build's.
    let package: PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let src = package.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let name = path
                .strip_prefix(&src)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&path).expect("readable source");
            (name, text.split_whitespace().collect())
        })
        .collect()
}

#[test]
fn only_the_engines_and_where_one_is_chosen_name_them() {
    let sources = sources();
    let mut offenders = Vec::new();
    for (name, text) in &sources {
        if ENGINE_ALLOWED.contains(&name.as_str()) || name == "engine_boundary_tests.rs" {
            continue;
        }
        for token in names_engine(text) {
            offenders.push(format!("{name}: {token}"));
        }
    }
    assert!(
        offenders.is_empty(),
        "go through the storage traits (state.store), not the engine: {offenders:?}"
    );
    // The list shrinks as callers move behind the boundary: an exception that no longer
    // names the engine is removed from it.
    for allowed in ENGINE_ALLOWED {
        let (_, text) = sources
            .iter()
            .find(|(name, _)| name == allowed)
            .unwrap_or_else(|| panic!("{allowed} is listed but does not exist"));
        assert!(
            !names_engine(text).is_empty(),
            "{allowed} no longer names the engine: remove it from ENGINE_ALLOWED"
        );
    }
}
