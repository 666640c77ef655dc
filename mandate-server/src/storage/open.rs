//! Opening the engine that `--db` names: where the boundary chooses an engine. Apart from
//! `location.rs`, which the engines read (a PostgreSQL URL is parsed there).

use super::location::DbLocation;

/// The engine at `location`: the SQLite file (created on first use) or the PostgreSQL
/// database, its schema migrated unless `migrate` is off (then it must already be this
/// server's). The SQLite handle is returned beside it, for tests.
pub async fn open_store(
    location: &DbLocation,
    migrate: bool,
) -> Result<(std::sync::Arc<dyn super::Store>, Option<super::sqlite::Db>), super::StorageError> {
    match location {
        DbLocation::Sqlite(path) => {
            let db = super::sqlite::Db::open_with(path, migrate)?;
            Ok((
                std::sync::Arc::new(super::sqlite::SqliteStore::new(db.clone())),
                Some(db),
            ))
        }
        DbLocation::Postgres(url) => {
            let store = super::postgres::PostgresStore::open(url, migrate).await?;
            Ok((std::sync::Arc::new(store), None))
        }
    }
}
