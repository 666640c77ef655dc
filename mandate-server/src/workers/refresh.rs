//! The refresher: what a running server re-reads of the database on its own.
//!
//! - Keys changed by operator commands: the keys generation is read every [`TICK`] (real
//!   time: another process or an operator command moves it); when it moves, the cached
//!   callers are forgotten and the signing keys reloaded, so every process publishes and
//!   signs with a rotated key within a second.
//! - Signing keys otherwise: reloaded when the injected clock has moved [`RELOAD_EVERY`]
//!   since the last load, because a retired key leaves the JWK Set as time passes; a
//!   test moves its clock instead of waiting.
//! - This process's heartbeat, how many processes share the database and whether this one
//!   sweeps ([`super::Sweeper`]): every fourth tick, in real time, because the lease it
//!   renews is judged by the database's clock ([`crate::storage::peers::PEER_LEASE_MS`]),
//!   not by this process's.

use std::time::Duration;

use tokio::task::JoinHandle;

use super::Context;
use crate::clock::ms;
use crate::signing;
use crate::signing::at_rest::KeyEncryption;

/// How often the refresher wakes (real time).
pub const TICK: Duration = Duration::from_millis(250);

/// Signing keys are reloaded when the injected clock has moved this far since the last load.
pub const RELOAD_EVERY: time::Duration = time::Duration::seconds(2);

/// The heartbeat is renewed every this many ticks (a second).
const HEARTBEAT_EVERY: u64 = 4;

/// Who is told what the refresher learns: the HTTP side's caches, kept out of the workers.
pub struct Listeners {
    /// How many processes share the database, after each heartbeat.
    pub peers: Box<dyn Fn(u32) + Send + Sync>,
    /// Keys were changed by an operator command: forget cached callers.
    pub keys_changed: Box<dyn Fn() + Send + Sync>,
}

/// The refresher's state between ticks.
pub struct Refresher {
    context: Context,
    key_encryption: KeyEncryption,
    process_id: String,
    listeners: Listeners,
    seen_generation: Option<i64>,
    loaded_at: time::OffsetDateTime,
    ticks: u64,
}

impl Refresher {
    /// A refresher for keys loaded at the context's now, with the keys generation
    /// `generation` as read then (`None`: unknown, read on the first tick).
    pub fn new(
        context: Context,
        key_encryption: KeyEncryption,
        process_id: String,
        listeners: Listeners,
        generation: Option<i64>,
    ) -> Self {
        let loaded_at = context.now();
        Self {
            context,
            key_encryption,
            process_id,
            listeners,
            seen_generation: generation,
            loaded_at,
            ticks: 0,
        }
    }

    /// One tick: the heartbeat when due, the keys generation, and the signing keys when
    /// the generation moved or the injected clock moved [`RELOAD_EVERY`]. Errors are
    /// logged; the next tick tries again.
    pub async fn tick(&mut self) {
        self.ticks += 1;
        let store = self.context.store.as_ref();
        if self.ticks.is_multiple_of(HEARTBEAT_EVERY) {
            match store.heartbeat(&self.process_id).await {
                Ok(peers) => {
                    (self.listeners.peers)(peers.live);
                    self.context.sweeper.set(peers.sweeps);
                }
                Err(e) => tracing::error!("heartbeat: {e}"),
            }
        }
        let mut moved = false;
        match store.key_generation().await {
            Ok(g) if self.seen_generation != Some(g) => {
                (self.listeners.keys_changed)();
                moved = self.seen_generation.is_some();
                self.seen_generation = Some(g);
            }
            Ok(_) => {}
            Err(e) => tracing::error!("reading the keys generation: {e}"),
        }
        let now = self.context.now();
        if moved || now - self.loaded_at >= RELOAD_EVERY {
            // A failed reload is tried again after as long as a successful one.
            self.loaded_at = now;
            if let Err(e) =
                signing::reload(store, &self.key_encryption, ms(now), &self.context.keys).await
            {
                tracing::error!("reloading signing keys: {e}");
            }
        }
    }

    /// Ticks every [`TICK`] until the task is aborted.
    pub fn start(mut self) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(TICK).await;
                self.tick().await;
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use time::macros::datetime;

    use super::{Listeners, Refresher};
    use crate::clock::ms;
    use crate::model::Env;
    use crate::signing::at_rest::KeyEncryption;
    use crate::signing::{self, RETIRED_KEY_PUBLISHED_MS};
    use crate::workers::Context;

    fn kids(context: &Context) -> Vec<String> {
        let ring = context.keys.read().unwrap();
        let mut kids: Vec<String> = ring.jwks.keys.iter().map(|k| k.kid().to_owned()).collect();
        kids.sort();
        kids
    }

    /// Keys rotated by an operator are picked up on the next tick (the generation moved);
    /// a retired key leaves the set when the injected clock passes its publication, with
    /// no real time waited; the heartbeat reports the processes every fourth tick.
    #[tokio::test]
    async fn the_refresher_follows_the_generation_and_the_injected_clock() {
        let dir = tempfile::tempdir().unwrap();
        let start = datetime!(2026-11-22 12:00 UTC);
        let (context, clock) = Context::on_sqlite_for_test(dir.path(), start).await;
        let store = context.store.clone();
        let none = KeyEncryption::default();
        let (changes, peers) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let listeners = Listeners {
            peers: Box::new({
                let peers = peers.clone();
                move |n| peers.store(n, Ordering::SeqCst)
            }),
            keys_changed: Box::new({
                let changes = changes.clone();
                move || {
                    changes.fetch_add(1, Ordering::SeqCst);
                }
            }),
        };
        let generation = store.key_generation_now().unwrap();
        let mut refresher = Refresher::new(
            context.clone(),
            none.clone(),
            "proc".into(),
            listeners,
            Some(generation),
        );
        let before = kids(&context);
        assert_eq!(before, ["live-1", "sandbox-1"]);
        refresher.tick().await;
        assert_eq!(changes.load(Ordering::SeqCst), 0, "nothing changed");
        // An operator rotates the sandbox key: seen on the next tick, both published.
        signing::rotate(&*store, &none, Env::Sandbox, ms(start)).unwrap();
        refresher.tick().await;
        assert_eq!(changes.load(Ordering::SeqCst), 1);
        assert_eq!(kids(&context), ["live-1", "sandbox-1", "sandbox-2"]);
        // The retired key stays published until the injected clock passes its window.
        clock.advance(time::Duration::milliseconds(
            RETIRED_KEY_PUBLISHED_MS - 5_000,
        ));
        refresher.tick().await;
        assert_eq!(kids(&context), ["live-1", "sandbox-1", "sandbox-2"]);
        clock.advance(time::Duration::seconds(10));
        refresher.tick().await;
        assert_eq!(kids(&context), ["live-1", "sandbox-2"]);
        assert_eq!(
            changes.load(Ordering::SeqCst),
            1,
            "the clock is no key change"
        );
        assert_eq!(
            peers.load(Ordering::SeqCst),
            1,
            "the fourth tick's heartbeat"
        );
    }
}
