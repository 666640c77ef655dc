//! # mandate-storage
//!
//! Mandate's persistence behind one boundary. The server (`mandate-server`) reaches stored
//! data through this crate's traits, summed up by [`Store`]. Each use case is written
//! once, beside its trait, over an engine's transaction ([`engine::Tx`]); each engine is a
//! crate of its own that implements [`engine::Engine`]: `mandate-storage-sqlite`, the
//! embedded default (one file, group commit), and `mandate-storage-postgres`, for many
//! server processes on one database (or a Citus cluster). [`DbLocation`] (`--db`) says
//! which.
//!
//! Storage imports nothing above it (not the routes, the decision service or the HTTP
//! layers) and names no database driver: neither is among its dependencies, so the
//! compiler holds both. It shares with the server only the vocabulary of [`model`] and the
//! helpers of [`clock`].
//!
//! What every engine promises is this crate's conformance suite (`tests/conformance/`),
//! run on SQLite, PostgreSQL and Citus: the engines are its dev-dependencies, for that
//! test alone, and it names nothing above the boundary.

pub mod admin;
pub mod agents;
pub mod ap2;
pub mod clock;
pub mod deciding;
pub mod decisions;
pub mod deliveries;
pub mod engine;
pub mod escrows;
pub mod events;
#[doc(hidden)]
pub mod every;
pub mod health;
pub mod idempotency;
pub mod keys;
pub mod location;
pub mod log;
pub mod log_entries;
mod log_parts;
mod log_rounds;
pub mod mandates;
pub mod model;
pub mod orgs;
pub mod peers;
pub mod records;
pub mod standard;
pub mod standard_log;
pub mod statements;
pub mod timers;
pub mod webhooks;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod boundary_tests;

pub use admin::AdminStore;
pub use agents::AgentStore;
pub use ap2::Ap2Store;
pub use deciding::DecidingStore;
pub use decisions::DecisionStore;
pub use deliveries::DeliveryStore;
pub use escrows::EscrowStore;
pub use events::EventStore;
pub use health::HealthStore;
pub use idempotency::IdempotencyStore;
pub use keys::KeyStore;
pub use location::DbLocation;
pub use log::LogStore;
pub use mandates::MandateStore;
pub use orgs::OrgStore;
pub use peers::{PeerStore, Peers};
pub use timers::TimerStore;
pub use webhooks::WebhookStore;

/// Jobs per commit of a storage writer, the histogram the engines' writers record
/// (`mandate_writer_group_size`; the server's telemetry describes it).
pub const WRITER_GROUP: &str = "mandate_writer_group_size";

/// The whole persistence surface: what the server needs of an engine. An engine is a crate
/// (`mandate-storage-sqlite`, `mandate-storage-postgres`) whose store implements each
/// resource's trait; the server holds it as `Arc<dyn Store>`.
pub trait Store:
    AdminStore
    + AgentStore
    + Ap2Store
    + DecidingStore
    + DecisionStore
    + DeliveryStore
    + EscrowStore
    + EventStore
    + HealthStore
    + IdempotencyStore
    + KeyStore
    + LogStore
    + MandateStore
    + OrgStore
    + PeerStore
    + TimerStore
    + WebhookStore
    + Send
    + Sync
{
}

impl<T> Store for T where
    T: AdminStore
        + AgentStore
        + Ap2Store
        + DecidingStore
        + DecisionStore
        + DeliveryStore
        + EscrowStore
        + EventStore
        + HealthStore
        + IdempotencyStore
        + KeyStore
        + LogStore
        + MandateStore
        + OrgStore
        + PeerStore
        + TimerStore
        + WebhookStore
        + Send
        + Sync
{
}

/// A storage failure: the database could not be opened, read or written, or a change was
/// refused because what it was decided on changed meanwhile. Messages never hold a
/// database password.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An error the database engine reported (PostgreSQL: with its SQLSTATE; SQLite: with
    /// its result code). Each engine maps its driver's errors into these variants in its
    /// own module.
    #[error("database: {0}")]
    Backend(String),
    /// The database cannot be reached (refused, closed, timed out, no connection free,
    /// busy past its timeout).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The agent (or its environment's enforcement mode) changed after its state was read:
    /// another server process stored a decision or a mandate change first. Nothing was
    /// written; the decision is to be made again on fresh state.
    #[error("the agent changed meanwhile (another server process decided first)")]
    Conflict,
    /// The database's schema is not the one this server runs on.
    #[error("{0}")]
    Schema(String),
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
