//! Tests of the SQLite engine itself: the bytes of its files, its file-size limit, its crash
//! recovery (`PRAGMA integrity_check`), the history of its migrations and its writer. They
//! are compiled into this target only: tests/api_postgres runs the rest of the suite on
//! PostgreSQL, and tests/multiprocess covers PostgreSQL's crash safety. backup.rs, crash.rs
//! and disk.rs, SQLite's through and through, stay beside the others, in this target only too.

mod durability;
mod escrows;
mod health;
mod idempotency;
