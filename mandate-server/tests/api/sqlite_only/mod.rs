//! Tests of the SQLite engine itself: the bytes of its files, its file-size limit, its crash
//! recovery (`PRAGMA integrity_check`), the history of its migrations and its writer. They
//! run on SQLite only (plain `#[tokio::test]`s): the rest of the suite runs on both engines
//! (`#[on_each_engine]`), and tests/multiprocess covers PostgreSQL's crash safety. backup.rs,
//! crash.rs and disk.rs, SQLite's through and through, are SQLite's only too.

mod durability;
mod escrows;
mod health;
mod idempotency;
mod shutdown;
