//! Whether the store can serve, for the readiness check: reachable, writable, and its
//! schema the one this server knows.

use super::StoreFuture;

/// The schema versions a readiness probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    /// The highest migration the database has applied.
    pub applied: i64,
    /// The highest migration this server knows.
    pub latest: i64,
}

/// The readiness probe of the store.
pub trait HealthStore {
    /// Writes through the path every change takes (a write that leaves nothing changed,
    /// committed and made durable like any other) and reads the schema version. An error
    /// means the store cannot be reached or written.
    fn readiness(&self) -> StoreFuture<'_, Schema>;
}
