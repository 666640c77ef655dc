//! Persistence, as the server's modules name it: the `mandate-storage` crate (the store's
//! traits and use cases, written once), its two engines (`mandate-storage-sqlite` as
//! [`sqlite`], `mandate-storage-postgres` as [`postgres`]), and [`open`], where `--db`
//! chooses one. Outside this module and the commands that open a database, the server
//! names no engine (`engine_boundary_tests.rs`).

pub use mandate_storage::*;
pub use mandate_storage_postgres as postgres;
pub use mandate_storage_sqlite as sqlite;

pub mod open;

/// Log directives that hold whatever the operator's filter says (the PostgreSQL driver's
/// own), named here so that the logging setup names no engine.
pub use mandate_storage_postgres::DRIVER_LOG_CAPS;
