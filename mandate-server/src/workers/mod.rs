//! Background work started by `serve`: webhook delivery ([`delivery`]), with the rules a
//! delivery URL must pass ([`crate::ssrf`]), time-driven state (review expiry,
//! `mandate.expiring`: [`timers`]) on the same tick, and the refresher of signing keys,
//! cached callers and this process's heartbeat ([`refresh`]), and the decision log's
//! checkpoints ([`checkpoint`]), submitted to the operator's witnesses ([`witness`]).
//!
//! Workers are handed a [`Context`]: the store, the injected clock, the signing keys and
//! the issuer, this process's news ([`News`]) and whether it sweeps ([`Sweeper`]), nothing
//! of the HTTP side.
//!
//! Background work is of two kinds. What this process stored (decisions to log, events to
//! deliver) is its news, acted on at once and one organization at a time, so it costs in
//! proportion to what was decided. What no live process has news of (another process's work
//! left when it died, retries and expiries coming due) is found by scans across every
//! organization, which one process runs, the sweeper, every [`SWEEP_EVERY`]: on Citus such a
//! scan reads every shard, so it is run once a cluster and a second, not once a process and
//! a tick.

pub mod checkpoint;
pub mod delivery;
pub mod log_verify;
pub mod refresh;
pub mod timers;
pub mod witness;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use mandate_core::Signer;
use time::OffsetDateTime;

use crate::clock::Clock;
use crate::model::Env;
use crate::model::news::News;
use crate::signing::KeyRing;
use crate::storage::Store;

/// What a worker needs: where data is stored, what time it is, and how to sign.
#[derive(Clone)]
pub struct Context {
    /// Persistence.
    pub store: Arc<dyn Store>,
    /// The injected clock: every worker's notion of now.
    pub clock: Arc<dyn Clock>,
    /// The signing keys, shared with the request path (the refresher reloads them).
    pub keys: Arc<RwLock<KeyRing>>,
    /// `iss` of every token signed (no trailing slash).
    pub issuer: String,
    /// Committed decisions' leaf hashes, left by the decision service for the decision
    /// log's worker.
    pub leaves: Arc<crate::model::leaves::Answered>,
    /// What this process stored that the workers act on at once.
    pub news: Arc<News>,
    /// Whether this process runs the scans across every organization.
    pub sweeper: Arc<Sweeper>,
}

#[cfg(test)]
impl Context {
    /// A worker's context for tests: a fresh SQLite store in `dir` with its signing keys
    /// made, the issuer `https://verdicts.test`, and a manual clock at `start`, returned
    /// beside it to be moved.
    #[allow(clippy::unwrap_used)]
    pub(crate) async fn on_sqlite_for_test(
        dir: &std::path::Path,
        start: OffsetDateTime,
    ) -> (Self, Arc<crate::clock::ManualClock>) {
        use crate::clock::{ManualClock, ms};
        use crate::signing::{self, at_rest::KeyEncryption};
        use crate::storage::location::DbLocation;
        use crate::storage::open::open_store;

        let location = DbLocation::Sqlite(dir.join("workers.sqlite"));
        let (store, _) = open_store(&location, true).await.unwrap();
        let clock = Arc::new(ManualClock::new(start));
        let none = KeyEncryption::default();
        signing::ensure_keys(&*store, &none, ms(start)).unwrap();
        let ring = signing::load(&*store, &none, ms(start)).unwrap();
        let context = Context {
            store,
            clock: clock.clone(),
            keys: Arc::new(RwLock::new(ring)),
            issuer: "https://verdicts.test".into(),
            leaves: Default::default(),
            news: Default::default(),
            sweeper: Default::default(),
        };
        (context, clock)
    }
}

/// How often the sweeper scans every organization: for due deliveries (retries, and those
/// of a process that died), expiring reviews and mandates, and logs with decisions no live
/// process logged.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Whether this process is the one that sweeps: the live process with the lowest id, as
/// its heartbeats learn (`storage::Peers`); every process until its first heartbeat.
#[derive(Debug)]
pub struct Sweeper(AtomicBool);

impl Default for Sweeper {
    fn default() -> Self {
        Self(AtomicBool::new(true))
    }
}

impl Sweeper {
    /// Whether this process sweeps.
    pub fn sweeps(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// What the last heartbeat learned.
    pub fn set(&self, sweeps: bool) {
        self.0.store(sweeps, Ordering::Relaxed);
    }
}

/// When the sweeper's next scan is due: at once the first time, then every
/// [`SWEEP_EVERY`] (real time); never while this process does not sweep.
#[derive(Debug, Default)]
pub struct SweepTimer {
    last: Option<std::time::Instant>,
}

impl SweepTimer {
    /// Whether a scan is due now for a process that sweeps (`sweeps`); if so, it counts as
    /// done from now.
    pub fn due(&mut self, sweeps: bool) -> bool {
        if !sweeps {
            return false;
        }
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < SWEEP_EVERY)
        {
            return false;
        }
        self.last = Some(now);
        true
    }
}

impl Context {
    /// Now, by the injected clock.
    pub fn now(&self) -> OffsetDateTime {
        self.clock.now()
    }

    /// The current signer of `env`, if a key of it is loaded.
    pub fn signer(&self, env: Env) -> Option<Arc<dyn Signer>> {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .signer(env)
    }
}
