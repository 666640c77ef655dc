//! The server processes sharing one database, for rate limits that hold across them: each
//! process says it is alive every second and learns how many are.

use super::StoreFuture;

/// How long a process counts as alive after its last heartbeat, in ms.
pub const PEER_LEASE_MS: i64 = 3_000;

/// The live server processes of one database.
pub trait PeerStore {
    /// Records that process `id` is alive (for [`PEER_LEASE_MS`] from now, by the
    /// database's clock) and returns how many processes are alive, itself included: at
    /// least 1. An engine that only one process can open answers 1.
    fn heartbeat(&self, id: &str) -> StoreFuture<'_, u32>;

    /// Process `id` stops: it no longer counts.
    fn leave(&self, id: &str) -> StoreFuture<'_, ()>;
}
