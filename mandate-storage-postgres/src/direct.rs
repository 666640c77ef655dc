//! A Citus writer lane's own connection to the worker it writes to (`citus_direct_writes`,
//! on by default): each group is sent straight to the worker that holds its organizations,
//! so that no other node takes the call, writes its arrays out as text and hands it on
//! (docs/scale.md). The worker's address is `pg_dist_node`'s for the lane's node group,
//! read through the URL's node and again every [`PLACEMENT_TTL`], so that a
//! worker promoted by a failover is found. When the worker cannot be reached from this
//! process, or its address cannot be read, the group goes through the URL's node as it
//! would without this, and the lane tries its worker again after the same while.

use std::time::{Duration, Instant};

use deadpool_postgres::{Object, Pool};

use super::connect::Target;

/// How long a writer trusts what it learned of the worker that holds an organization, and
/// of a worker's address (Citus): a moved organization's groups are sent to its new worker
/// after at most this long (until then they still succeed, as transactions on two
/// workers), and a promoted worker is written to directly after at most this long.
pub(crate) const PLACEMENT_TTL: Duration = Duration::from_secs(10);

/// The primary node of node group `$1`.
const NODE: &str = "SELECT nodename, nodeport FROM pg_dist_node
    WHERE groupid = $1 AND noderole = 'primary' AND isactive";

/// A lane's connection to its worker: the URL's target, the lane's node group, the pool to
/// its primary (when it was found and reached) and when its address was last read.
pub(crate) struct Direct {
    target: Target,
    node: i32,
    connections: usize,
    pool: Option<(Pool, String, u16)>,
    learned: Option<Instant>,
}

impl Direct {
    /// The connection of the lane of node group `node`, for the database of `target`.
    pub(crate) fn new(target: Target, node: i64) -> Option<Self> {
        Self::with_connections(target, node, 1)
    }

    /// Connections (at most `connections` at once) to the worker of node group `node`,
    /// for the database of `target`.
    pub(crate) fn with_connections(target: Target, node: i64, connections: usize) -> Option<Self> {
        Some(Self {
            target,
            node: i32::try_from(node).ok()?,
            connections,
            pool: None,
            learned: None,
        })
    }

    /// A connection to the lane's worker, or `None` when it cannot be had now: the caller
    /// then uses `main`, the URL's node. Reads the worker's address through `main` when it
    /// was not read, or was read [`PLACEMENT_TTL`] ago.
    pub(crate) async fn connection(&mut self, main: &Pool) -> Option<Object> {
        if self.learned.is_none_or(|at| at.elapsed() >= PLACEMENT_TTL) {
            self.learned = Some(Instant::now());
            self.learn(main).await;
        }
        let (pool, host, port) = self.pool.as_ref()?;
        match pool.get().await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(
                    "this process reaches the worker of node group {} ({host}:{port}) \
                     through {} for now: {}",
                    self.node,
                    self.target.url,
                    self.target.url.scrub(&e.to_string())
                );
                self.pool = None;
                None
            }
        }
    }

    /// Reads the primary of the lane's node group and, when it is not the one the pool
    /// reaches, makes a pool for it (its connections opened at its first use).
    async fn learn(&mut self, main: &Pool) {
        let Ok(c) = main.get().await else {
            return;
        };
        let row = match c.query_opt(NODE, &[&self.node]).await {
            Ok(Some(row)) => row,
            Ok(None) => {
                self.pool = None;
                return;
            }
            Err(e) => {
                tracing::warn!("reading the worker of node group {}: {e}", self.node);
                return;
            }
        };
        let (host, port): (String, i32) = (row.get(0), row.get(1));
        let Ok(port) = u16::try_from(port) else {
            return;
        };
        if self
            .pool
            .as_ref()
            .is_some_and(|(_, h, p)| *h == host && *p == port)
        {
            return;
        }
        // One group at a time a lane: one connection.
        match self
            .target
            .at(&host, port)
            .and_then(|t| t.pool_of(self.connections))
        {
            Ok(pool) => self.pool = Some((pool, host, port)),
            Err(e) => {
                tracing::warn!("the worker of node group {}: {e}", self.node);
                self.pool = None;
            }
        }
    }
}
