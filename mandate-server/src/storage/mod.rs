//! Persistence behind one boundary. The rest of the server reaches stored data through
//! this module; each engine is a module of its own under it: [`sqlite`], the embedded
//! default (one file, group commit).
//!
//! Storage imports nothing above it: not the routes, not the decision service, not the
//! HTTP layers.

pub mod admin;
pub mod agents;
pub mod deciding;
pub mod decisions;
pub mod deliveries;
pub mod escrows;
pub mod events;
pub mod health;
pub mod idempotency;
pub mod keys;
pub mod mandates;
pub mod orgs;
pub mod sqlite;
pub mod timers;
pub mod webhooks;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod boundary_tests;

pub use admin::AdminStore;
pub use agents::AgentStore;
pub use deciding::DecidingStore;
pub use decisions::DecisionStore;
pub use deliveries::DeliveryStore;
pub use escrows::EscrowStore;
pub use events::EventStore;
pub use health::HealthStore;
pub use idempotency::IdempotencyStore;
pub use keys::KeyStore;
pub use mandates::MandateStore;
pub use orgs::OrgStore;
pub use timers::TimerStore;
pub use webhooks::WebhookStore;

// The SQLite engine's handle and modules the decision path still uses, until it goes
// through the boundary (`decisions`, `events`, `keys` and `mandates` re-export their
// engine functions for it too).

/// The whole persistence surface: what the server needs of an engine. An engine is a
/// module under `storage` that implements each resource's trait; the server holds it as
/// `Arc<dyn Store>`.
pub trait Store:
    AdminStore
    + AgentStore
    + DecidingStore
    + DecisionStore
    + DeliveryStore
    + EscrowStore
    + EventStore
    + HealthStore
    + IdempotencyStore
    + KeyStore
    + MandateStore
    + OrgStore
    + TimerStore
    + WebhookStore
    + Send
    + Sync
{
}

impl<T> Store for T where
    T: AdminStore
        + AgentStore
        + DecidingStore
        + DecisionStore
        + DeliveryStore
        + EscrowStore
        + EventStore
        + HealthStore
        + IdempotencyStore
        + KeyStore
        + MandateStore
        + OrgStore
        + TimerStore
        + WebhookStore
        + Send
        + Sync
{
}

/// A storage failure: the database could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An error from SQLite.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The blocking task running the query was lost (panic or shutdown).
    #[error("database task failed: {0}")]
    Task(String),
    /// Stored data that cannot be read back (a bug or a hand-edited database).
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

/// What an operation of the storage boundary returns: a future the handlers can await on
/// any runtime thread, boxed so that the boundary's traits can be used as `dyn` objects.
pub type StoreFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StorageError>> + Send + 'a>>;
