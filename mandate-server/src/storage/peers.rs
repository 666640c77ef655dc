//! The server processes sharing one database, for rate limits that hold across them: each
//! process says it is alive every second and learns how many are.

use super::StoreFuture;
use super::engine::{Access, Engine, Tx, first};
use super::statements::ProcessSql;

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

impl<E: Engine> PeerStore for E {
    fn heartbeat(&self, id: &str) -> StoreFuture<'_, u32> {
        Box::pin(self.run(Access::Claim, id.to_owned(), |tx, id| {
            Box::pin(async move {
                let params = [id.into()];
                let rows = tx
                    .query(ProcessSql::Heartbeat.into(), &params, |r| r.int(0))
                    .await?;
                let live = first(rows).unwrap_or(1).max(1);
                Ok(u32::try_from(live).unwrap_or(u32::MAX))
            })
        }))
    }

    fn leave(&self, id: &str) -> StoreFuture<'_, ()> {
        Box::pin(self.run(Access::Claim, id.to_owned(), |tx, id| {
            Box::pin(async move {
                tx.execute(ProcessSql::Leave.into(), &[id.into()]).await?;
                Ok(())
            })
        }))
    }
}
