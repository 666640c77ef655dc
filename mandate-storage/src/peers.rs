//! The server processes sharing one database, for rate limits that hold across them: each
//! process says it is alive every second and learns how many are, and whether it is the one
//! that sweeps (runs the background scans across every organization: `workers::Sweeper`).

use super::StoreFuture;
use super::engine::{Access, Engine, Tx, first};
use super::statements::ProcessSql;

/// How long a process counts as alive after its last heartbeat, in ms.
pub const PEER_LEASE_MS: i64 = 3_000;

/// What a heartbeat learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peers {
    /// How many processes are alive, the one beating included: at least 1.
    pub live: u32,
    /// Whether the one beating has the lowest id of the live processes: the one that
    /// sweeps. Every process learns the same, so one sweeps, but for the moments after a
    /// process joins or its lease runs out, when two may (a sweep is idempotent).
    pub sweeps: bool,
}

/// The live server processes of one database.
pub trait PeerStore {
    /// Records that process `id` is alive (for [`PEER_LEASE_MS`] from now, by the
    /// database's clock) and returns how many processes are alive, itself included, and
    /// whether it sweeps ([`Peers`]). An engine that only one process can open answers one
    /// process, which sweeps.
    fn heartbeat(&self, id: &str) -> StoreFuture<'_, Peers>;

    /// Process `id` stops: it no longer counts.
    fn leave(&self, id: &str) -> StoreFuture<'_, ()>;
}

impl<E: Engine> PeerStore for E {
    fn heartbeat(&self, id: &str) -> StoreFuture<'_, Peers> {
        Box::pin(self.run(Access::Claim, id.to_owned(), |tx, id| {
            Box::pin(async move {
                let params = [id.into()];
                let rows = tx
                    .query(ProcessSql::Heartbeat.into(), &params, |r| {
                        Ok((r.int(0)?, r.flag(1)?))
                    })
                    .await?;
                let (live, sweeps) = first(rows).unwrap_or((1, true));
                Ok(Peers {
                    live: u32::try_from(live.max(1)).unwrap_or(u32::MAX),
                    sweeps,
                })
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
