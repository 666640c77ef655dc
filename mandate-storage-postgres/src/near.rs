//! Connections to the worker that holds an organization's rows, for the jobs that touch
//! only that organization's ([`Engine::run_at`](mandate_storage::engine::Engine::run_at):
//! the decision log's reads and appends). On Citus a statement the node it reaches does
//! not hold is sent on to the worker that does, written out as text with each argument a
//! literal, and a log's append carries up to 256 verdict tokens a strip; run on the
//! organization's worker, its statements stay on that node. Where an organization is, is
//! learned as the decision writers learn it ([`Placement`], kept for
//! [`PLACEMENT_TTL`](super::direct::PLACEMENT_TTL)); a worker that cannot be reached, or a
//! plain PostgreSQL database, leaves the job on the URL's node.

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::{Object, Pool};

use super::connect::Target;
use super::direct::Direct;
use super::writer::Placement;

/// The connections to each worker a job was sent to, opened at its first job.
pub(crate) struct Near {
    target: Target,
    placement: tokio::sync::OnceCell<Placement>,
    workers: tokio::sync::Mutex<HashMap<i64, Direct>>,
}

/// Connections a worker: the log's jobs run one at a time a process, and a second lets a
/// reader through while one is held.
const CONNECTIONS: usize = 2;

impl Near {
    /// For the database of `target`.
    pub(crate) fn new(target: Target) -> Self {
        Self {
            target,
            placement: tokio::sync::OnceCell::new(),
            workers: tokio::sync::Mutex::default(),
        }
    }

    /// A connection to the worker that holds `org`'s rows, or `None` where there is none
    /// to prefer (plain PostgreSQL) or it cannot be had now: the caller then uses `main`,
    /// the URL's node.
    pub(crate) async fn connection(&self, main: &Pool, org: &str) -> Option<Object> {
        let node = {
            let c = main.get().await.ok()?;
            let placement = self
                .placement
                .get_or_try_init(|| Placement::of(&c))
                .await
                .ok()?;
            if matches!(placement, Placement::One) {
                return None;
            }
            placement.nodes(&c, &[Arc::from(org)]).await.first()?.node
        };
        // An organization whose worker is not known has a node below 0.
        if node < 0 {
            return None;
        }
        let mut workers = self.workers.lock().await;
        let direct =
            match workers.entry(node) {
                std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
                std::collections::hash_map::Entry::Vacant(new) => new.insert(
                    Direct::with_connections(self.target.clone(), node, CONNECTIONS)?,
                ),
            };
        direct.connection(main).await
    }
}
