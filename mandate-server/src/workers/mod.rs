//! Background work started by `serve`: webhook delivery ([`delivery`]), with the rules a
//! delivery URL must pass ([`crate::ssrf`]), time-driven state (review expiry,
//! `mandate.expiring`: [`timers`]) on the same tick, and the refresher of signing keys,
//! cached callers and this process's heartbeat ([`refresh`]), and the decision log's
//! checkpoints ([`checkpoint`]).
//!
//! Workers are handed a [`Context`]: the store, the injected clock, the signing keys and
//! the issuer, nothing of the HTTP side.

pub mod checkpoint;
pub mod delivery;
pub mod refresh;
pub mod timers;

use std::sync::{Arc, RwLock};

use mandate_core::Signer;
use time::OffsetDateTime;

use crate::clock::Clock;
use crate::model::Env;
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
    pub leaves: Arc<crate::model::leaves::LeafHashes>,
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
