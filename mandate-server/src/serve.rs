//! Starting the service: open and migrate the database (the engine is chosen here, by
//! `--db`: an SQLite file or a PostgreSQL URL), load keys, bind both listeners (plain or
//! TLS), print the bound addresses, run until shut down gracefully.
//!
//! Both listeners speak HTTP/1.1 only: no h2c, and TLS offers only `http/1.1` by ALPN.
//! The limits of `crate::limits` and `crate::connections` are written for HTTP/1; HTTP/2
//! would need its own (streams, pings, idle time) and brings no client of ours anything.

use mandate_protocol::x402::ListedAssets;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use axum_server::Handle;
use axum_server::accept::DefaultAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use hyper::body::Incoming;
use mandate_core::CursorKey;
use tokio::task::JoinHandle;
use tower::ServiceExt;
use tower::make::Shared as SharedMakeService;

use crate::app;
use crate::clock::{Clock, fill_random, ms};
use crate::decision::agents::AgentStates;
use crate::http::connections::{Connections, Guard};
use crate::http::cors::{Cors, parse_origin};
use crate::http::limits::{self, Limits};
use crate::settlement;
use crate::signing;
use crate::signing::KeyRing;
use crate::signing::api_keys::{self, KeyBinder};
use crate::signing::at_rest::{self, AtRestError, KeyEncryption};
use crate::state::{AppState, Shared};
use crate::storage::sqlite::Db;
use crate::storage::{DbLocation, StorageError, Store};
use crate::workers::Context;
use crate::workers::checkpoint::Checkpointer;
use crate::workers::delivery::Worker;
use crate::workers::refresh::{Listeners, Refresher};
use crate::workers::witness::Witnesses;

/// How the server is started.
#[derive(Debug, Clone)]
pub struct Config {
    /// The database: an SQLite file or a PostgreSQL URL.
    pub db: DbLocation,
    /// Apply the schema's migrations at start (`serve --no-migrate` turns it off: the
    /// schema must then already be this server's).
    pub migrate: bool,
    /// Where the API host listens.
    pub api_addr: String,
    /// Where the public host (JWK Set, contract) listens.
    pub public_addr: String,
    /// `iss` of every token; defaults to the public listener's URL.
    pub verdicts_url: Option<String>,
    /// Where the contract is published; defaults to the public listener's URL.
    pub docs_url: Option<String>,
    /// TLS certificate chain and private key (PEM), for both listeners.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Requests in flight, open connections, header and body timeouts
    /// (`Limits::default()` unless the operator says otherwise).
    pub limits: Limits,
    /// The key-encryption keys that seal signing keys at rest (none: stored in plaintext,
    /// SQLite only, with a warning).
    pub key_encryption: KeyEncryption,
    /// The API host's URL as browsers reach it, handed to the review console; defaults
    /// to the API listener's URL.
    pub api_url: Option<String>,
    /// The origins allowed to call the API host from a browser (CORS): `None` for the
    /// console's own, the origin of `docs_url` (the public host, which serves it);
    /// `Some(vec![])` for none. Each must be an origin alone (`scheme://host[:port]`).
    pub console_origins: Option<Vec<String>>,
    /// How often the checkpoint worker logs new decisions and signs checkpoints
    /// (`--log-checkpoint-interval`): at most about this far behind the newest decision.
    pub log_checkpoint_interval: std::time::Duration,
    /// Decisions the checkpoint worker appends to one log a round, at most
    /// ([`crate::workers::checkpoint::BATCH`]); a full batch starts the next round at once.
    pub log_checkpoint_batch: i64,
    /// Fewer decisions waiting than this, a log whose checkpoint was signed within the
    /// last two intervals waits for a later round (`--log-quiet-below`,
    /// [`crate::workers::checkpoint::QUIET_BELOW`]); 0: every log with news is extended
    /// every round.
    pub log_quiet_below: i64,
    /// Whether anyone may read every organization's decision log on the public host
    /// (`--public-logs`); otherwise reading an organization's log needs one of its keys.
    pub public_logs: bool,
    /// The x402 assets whose decimals the operator lists (`--x402-asset`), besides the
    /// ISO 4217 currencies: an x402 payment in one is compared with its request's amount.
    pub x402_assets: ListedAssets,
    /// The witnesses each new checkpoint of every log is submitted to (`--witness`), whose
    /// cosignatures readers are shown with it; none: checkpoints are shown as signed.
    pub witnesses: Vec<crate::workers::witness::WitnessTarget>,
}

/// Starting failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The database could not be opened or migrated.
    #[error("database {path}: {source}")]
    Db {
        /// The file, or the URL without its password.
        path: String,
        /// Why.
        source: StorageError,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS certificate or key could not be loaded.
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    /// The server stopped with an I/O error.
    #[error("server: {0}")]
    Io(std::io::Error),
    /// The signing keys could not be opened or sealed with the key-encryption keys given,
    /// or none is given where one is required.
    #[error(transparent)]
    Keys(#[from] AtRestError),
    /// The signing backend could not draw random numbers (no signature could be made).
    #[error("signing: {0}")]
    Signing(mandate_core::SignError),
    /// `--verdicts-url`, `--docs-url` or `--api-url` is not an absolute http(s) URL.
    #[error("--{flag} {value:?}: {reason}")]
    Url {
        /// The flag, without dashes.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `--console-origin` is not an origin.
    #[error(transparent)]
    Origin(#[from] crate::http::cors::OriginError),
}

/// `text` as a base URL: an absolute `http(s)://` URL without query or fragment, with its
/// trailing slashes removed, so that `iss` is written one way and `{url}/.well-known/…`
/// never has a double slash.
pub fn normalize_base_url(flag: &'static str, text: &str) -> Result<String, ServeError> {
    let error = |reason| ServeError::Url {
        flag,
        value: text.to_owned(),
        reason,
    };
    let trimmed = text.trim_end_matches('/');
    let url = url::Url::parse(trimmed).map_err(|_| error("must be an absolute URL"))?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(error("must be an http:// or https:// URL with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(error("must have no query or fragment"));
    }
    Ok(trimmed.to_owned())
}

/// The origin (`scheme://host[:port]`) of a URL already normalized by
/// [`normalize_base_url`].
fn origin_of(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| url.to_owned())
}

/// How long a stopped server waits for its SQLite file to close (every handle dropped,
/// the writer's last jobs committed) before it returns anyway, with a warning.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// A running server.
pub struct Running {
    /// The API host's bound address.
    pub api_addr: SocketAddr,
    /// The public host's bound address.
    pub public_addr: SocketAddr,
    /// The state, for tests and operators in the same process.
    pub state: AppState,
    /// The SQLite engine's database handle, for tests that write rows directly (`None` on
    /// PostgreSQL).
    pub db: Option<Db>,
    /// The signing keys are stored unencrypted (SQLite without a key-encryption key):
    /// the caller says so, with [`unencrypted_advice`].
    pub keys_unencrypted: bool,
    /// This process's id among the processes sharing the database (its heartbeat row).
    process_id: String,
    handles: Vec<Handle<SocketAddr>>,
    servers: Vec<Server>,
    refresher: JoinHandle<()>,
    checkpointer: JoinHandle<()>,
    worker: Worker,
}

/// What to do about signing keys stored unencrypted in the SQLite file `db`: who can read
/// them there (the file's mode), and the key-encryption key that seals them.
pub fn unencrypted_advice(db: &DbLocation) -> String {
    use crate::storage::sqlite::owner_only;
    let path = db.sqlite_path().unwrap_or(std::path::Path::new(""));
    let file = path.display();
    let readers = match owner_only::mode(path) {
        Some(mode) if mode & 0o077 == 0 => {
            format!("{file}, mode {mode:04o}: readable by its owner only, keep it so")
        }
        Some(mode) => format!(
            "{file}, mode {mode:04o}: other users of this machine can read them; `chmod 600 {file} {file}-wal {file}-shm`"
        ),
        None => file.to_string(),
    };
    format!(
        "signing keys are stored unencrypted in {readers}; to encrypt them at rest, set {} or {} and run `mandate-server seal-signing-keys` once",
        at_rest::KEK_VAR,
        at_rest::KEK_FILE_FLAG
    )
}

fn bind(addr: &str) -> Result<TcpListener, ServeError> {
    let listener = TcpListener::bind(addr).map_err(|source| ServeError::Bind {
        addr: addr.to_owned(),
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| ServeError::Bind {
            addr: addr.to_owned(),
            source,
        })?;
    Ok(listener)
}

/// The listeners' TLS: the certificate chain and key from PEM files, on the process's
/// provider (aws-lc-rs), offering only HTTP/1.1 by ALPN (a client that offers only `h2` is
/// refused in the handshake).
async fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<RustlsConfig, ServeError> {
    let config = RustlsConfig::from_pem_file(cert, key)
        .await
        .map_err(ServeError::Tls)?;
    let mut server = (*config.get_inner()).clone();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.reload_from_config(Arc::new(server));
    Ok(config)
}

pub use crate::storage::open::open_store;

/// Starts both listeners, the background refresher and the delivery worker, with the
/// default settlement adapter.
pub async fn start(config: Config, clock: Arc<dyn Clock>) -> Result<Running, ServeError> {
    start_with(config, clock, settlement::Adapter::default()).await
}

/// [`start`], with the settlement adapter the operator chose (`serve --settlement`): the
/// database opened, the signing keys ready, both listeners bound, then the state, the
/// delivery worker, the two hosts and the refresher started, in that order.
pub async fn start_with(
    config: Config,
    clock: Arc<dyn Clock>,
    adapter: settlement::Adapter,
) -> Result<Running, ServeError> {
    // Before the database is reached: an engine that needs a key-encryption key gets one.
    at_rest::check_required(&config.db.to_string(), &config.key_encryption)?;
    let urls = Urls::given(&config)?;
    let db_error = |source| ServeError::Db {
        path: config.db.to_string(),
        source,
    };
    let (store, db) = open_store(&config.db, config.migrate)
        .await
        .map_err(db_error)?;
    let now = clock.now();
    let keys = Arc::new(config.key_encryption.clone());
    let keys_unencrypted = keys.current_id().is_none();
    let mut ring = signing_keys(&*store, &keys, now, db_error)?;
    signing::log_keys::ensure(&*store, &keys, ms(now)).await?;
    ring.log = signing::log_keys::load(&*store, &keys, ms(now)).await?;
    let mut fresh = [0u8; 32];
    fill_random(&mut fresh);
    let cursor_secret = store
        .prepare_start(ms(now) - 24 * 3600 * 1000, &fresh)
        .map_err(db_error)?;
    let api_listener = bind(&config.api_addr)?;
    let public_listener = bind(&config.public_addr)?;
    let api_addr = api_listener.local_addr().map_err(ServeError::Io)?;
    let public_addr = public_listener.local_addr().map_err(ServeError::Io)?;
    let urls = urls.resolved(config.tls.is_some(), api_addr, public_addr);
    let state = AppState::new(Shared {
        store: store.clone(),
        clock: clock.clone(),
        keys: Arc::new(RwLock::new(ring)),
        cursors: Arc::new(CursorKey::new(&cursor_secret)),
        verdicts_url: urls.verdicts,
        docs_url: urls.docs,
        api_url: urls.api,
        cors: Cors::new(&urls.console_origins),
        agents: AgentStates::default(),
        callers: Default::default(),
        api_keys: KeyBinder::new(&keys),
        modes: Default::default(),
        leaves: Default::default(),
        news: Default::default(),
        readiness: Default::default(),
        settlement: adapter.provider(),
        x402_assets: config.x402_assets.clone(),
        public_logs: config.public_logs,
    });
    // One crypto provider, aws-lc-rs: the default of the webhook client (reqwest has none
    // of its own) and of the listeners' TLS. Already installed in a second server of the
    // same process.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // Dropping the worker (an error below) stops it.
    let context = Context {
        store: store.clone(),
        clock: clock.clone(),
        keys: state.keys.clone(),
        issuer: state.verdicts_url.clone(),
        leaves: state.leaves.clone(),
        news: state.news.clone(),
        sweeper: Default::default(),
    };
    let worker = Worker::start(context.clone())
        .map_err(|e| ServeError::Io(std::io::Error::other(format!("delivery worker: {e}"))))?;
    crate::workers::witness::check_targets(&config.witnesses)
        .map_err(|e| ServeError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    let witnesses = Witnesses::new(config.witnesses.clone())
        .map_err(|e| ServeError::Io(std::io::Error::other(format!("witness client: {e}"))))?;
    let checkpointer = Checkpointer::new(
        context.clone(),
        config.log_checkpoint_interval,
        config.log_checkpoint_batch,
    )
    .with_witnesses(Arc::new(witnesses))
    .with_quiet_below(config.log_quiet_below)
    .start();
    let (handles, servers) = spawn_hosts(&config, &state, api_listener, public_listener).await?;
    let process_id = mandate_protocol::id::base32(&crate::clock::random16());
    let refresher = join_processes(&state, context, &keys, &process_id).await;
    Ok(Running {
        api_addr,
        public_addr,
        keys_unencrypted,
        state,
        db,
        handles,
        servers,
        refresher,
        checkpointer,
        worker,
        process_id,
    })
}

/// The URLs and origins given to `serve`, checked and normalized; those not given are
/// the listeners' own, known once they are bound ([`Urls::resolved`]).
struct Urls<U, O> {
    verdicts: U,
    docs: U,
    api: U,
    console_origins: O,
}

impl Urls<Option<String>, Option<Vec<String>>> {
    /// The URLs and origins of `config`, each checked, in the order of the flags.
    fn given(config: &Config) -> Result<Self, ServeError> {
        let url = |flag, given: &Option<String>| {
            given
                .as_deref()
                .map(|u| normalize_base_url(flag, u))
                .transpose()
        };
        let (verdicts, docs, api) = (
            url("verdicts-url", &config.verdicts_url)?,
            url("docs-url", &config.docs_url)?,
            url("api-url", &config.api_url)?,
        );
        let console_origins = config
            .console_origins
            .as_ref()
            .map(|origins| {
                origins
                    .iter()
                    .map(|o| parse_origin(o))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Self {
            verdicts,
            docs,
            api,
            console_origins,
        })
    }

    /// Every URL and origin, those not given made from the listeners bound at `api_addr`
    /// and `public_addr` (`tls`: whether they speak https): the issuer and the docs at the
    /// public host, the console's origin the docs'.
    fn resolved(
        self,
        tls: bool,
        api_addr: SocketAddr,
        public_addr: SocketAddr,
    ) -> Urls<String, Vec<String>> {
        let scheme = if tls { "https" } else { "http" };
        let public_url = format!("{scheme}://{public_addr}");
        let docs = self.docs.unwrap_or_else(|| public_url.clone());
        let console_origins = self
            .console_origins
            .unwrap_or_else(|| vec![origin_of(&docs)]);
        Urls {
            verdicts: self.verdicts.unwrap_or_else(|| public_url.clone()),
            docs,
            api: self.api.unwrap_or_else(|| format!("{scheme}://{api_addr}")),
            console_origins,
        }
    }
}

/// The signing keys ready in `store` at `now` and loaded: sealed as the key-encryption
/// keys `keys` say (what they are sealed under logged), API key rows the KEK refuses
/// counted in a warning, a key made for an environment that has none.
fn signing_keys(
    store: &dyn Store,
    keys: &KeyEncryption,
    now: time::OffsetDateTime,
    db_error: impl Fn(StorageError) -> ServeError,
) -> Result<KeyRing, ServeError> {
    let prepared = at_rest::prepare(store, keys)?;
    match keys.current_id() {
        // Said by the caller once it has started (`serve` logs it; `serve --demo` gives it
        // as advice after the session): see `Running::keys_unencrypted`.
        None => {}
        // The KEKs the keys are actually sealed under, not merely the one given as
        // current (during a rotation they may still be under the previous one).
        Some(id) if prepared.sealed_under.iter().all(|under| *under == id) => {
            tracing::info!("signing keys are sealed under key-encryption key {id}")
        }
        Some(id) => {
            let under: Vec<String> = prepared
                .sealed_under
                .iter()
                .map(ToString::to_string)
                .collect();
            tracing::info!(
                "signing keys are sealed under key-encryption key {}; new keys are sealed under {id}: run `mandate-server rotate-key-encryption-key` to seal them all under it",
                under.join(", ")
            )
        }
    }
    // Rows a KEK refuses are said, never bound here: binding is the operator's command.
    let refused = api_keys::refused_rows(store, keys)?;
    if refused > 0 {
        tracing::warn!(
            "{refused} API keys are not bound to the key-encryption key and are refused: if an operator stored them without it (or before binding existed), bind them with `mandate-server bind-api-keys --db …` (with the key-encryption key); otherwise someone with write access to the database put them there"
        );
    }
    signing::ensure_keys(store, keys, ms(now)).map_err(db_error)?;
    let ring = signing::load(store, keys, ms(now))?;
    // Seeded here, before listening, so that the first authorization does not wait for it.
    crate::signing::fast::seed_random().map_err(ServeError::Signing)?;
    // Presignatures start filling now, in idle time (signing/presign.rs).
    crate::signing::presign::Pool::global();
    Ok(ring)
}

/// The two hosts served on their listeners, each in a task of its own (with TLS when
/// `config` has it): their shutdown handles and their tasks.
async fn spawn_hosts(
    config: &Config,
    state: &AppState,
    api_listener: TcpListener,
    public_listener: TcpListener,
) -> Result<(Vec<Handle<SocketAddr>>, Vec<Server>), ServeError> {
    let tls = match &config.tls {
        Some((cert, key)) => Some(tls_config(cert, key).await?),
        None => None,
    };
    let mut handles = Vec::new();
    let mut servers = Vec::new();
    // One server a host; the two hosts' services are of different types.
    // Each listener's cap within the process's file descriptors (the admin host's share
    // kept too), so that one flooded listener cannot starve another.
    let caps = limits::ConnectionCaps::of_process(config.limits.max_connections);
    macro_rules! spawn_host {
        ($listener:expr, $make_service:expr, $cap:expr) => {{
            let (listener, service) = ($listener, $make_service);
            let handle = Handle::new();
            handles.push(handle.clone());
            let connections = Connections::new(&limits::Limits {
                max_connections: $cap,
                ..config.limits
            });
            let server = axum_server::from_tcp(listener).map_err(ServeError::Io)?;
            servers.push(match &tls {
                Some(tls) => {
                    let acceptor = Guard::new(RustlsAcceptor::new(tls.clone()), connections);
                    let mut server = server.acceptor(acceptor).handle(handle).http1_only();
                    limits::configure(server.http_builder(), &config.limits);
                    tokio::spawn(async move { server.serve(service).await })
                }
                None => {
                    let acceptor = Guard::new(DefaultAcceptor, connections);
                    let mut server = server.acceptor(acceptor).handle(handle).http1_only();
                    limits::configure(server.http_builder(), &config.limits);
                    tokio::spawn(async move { server.serve(service).await })
                }
            });
        }};
    }
    // hyper hands over its own body type; the layers take axum's.
    let api = app::api_with_limits(state.clone(), &config.limits)
        .map_request(|request: Request<Incoming>| request.map(Body::new));
    spawn_host!(api_listener, SharedMakeService::new(api), caps.api);
    spawn_host!(
        public_listener,
        app::public(state.clone()).into_make_service(),
        caps.public
    );
    Ok((handles, servers))
}

/// This process counted among those sharing the database (its heartbeat as `process_id`,
/// before the first request: each admits its share of a key's rate, see `http::cache`),
/// and the refresher started that keeps it counted and reloads keys.
async fn join_processes(
    state: &AppState,
    context: Context,
    keys: &KeyEncryption,
    process_id: &str,
) -> JoinHandle<()> {
    let initial_generation = state.store.key_generation_now().ok();
    match state.store.heartbeat(process_id).await {
        Ok(peers) => {
            state.callers.set_peers(peers.live);
            context.sweeper.set(peers.sweeps);
        }
        Err(e) => tracing::error!("heartbeat: {e}"),
    }
    Refresher::new(
        context,
        keys.clone(),
        process_id.to_owned(),
        Listeners {
            peers: Box::new({
                let callers = state.callers.clone();
                move |peers| callers.set_peers(peers)
            }),
            keys_changed: Box::new({
                let callers = state.callers.clone();
                move || callers.clear()
            }),
        },
        initial_generation,
    )
    .start()
}

/// A host's task: it ends when its server stops.
type Server = JoinHandle<Result<(), std::io::Error>>;

impl Running {
    /// Stops accepting connections, lets in-flight requests finish (up to 30 s), and waits.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        for handle in &self.handles {
            handle.graceful_shutdown(Some(Duration::from_secs(30)));
        }
        self.wait().await
    }

    /// Waits until the servers stop.
    pub async fn wait(self) -> Result<(), ServeError> {
        let mut result = Ok(());
        for server in self.servers {
            match server.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(ServeError::Io(e)),
                Err(e) => result = Err(ServeError::Io(std::io::Error::other(e.to_string()))),
            }
        }
        // Aborted and awaited: a task that is only aborted still holds the store until the
        // runtime next polls it.
        self.refresher.abort();
        self.checkpointer.abort();
        let _ = self.refresher.await;
        let _ = self.checkpointer.await;
        self.worker.stop().await;
        // No longer counted: the others take this one's share of each key's rate.
        if let Err(e) = self.state.store.leave(&self.process_id).await {
            tracing::error!("leaving the processes of the database: {e}");
        }
        drop(self.state);
        // The SQLite file is closed before this returns: the writer commits the jobs sent
        // before (a log round's, say) and its threads end, so that a caller that copies,
        // restores or reopens the file next finds nothing of this server still writing.
        if let Some(db) = self.db {
            let closed = tokio::task::spawn_blocking(move || db.close(CLOSE_WITHIN))
                .await
                .unwrap_or(false);
            if !closed {
                tracing::warn!(
                    "the database was still open {} s after the server stopped",
                    CLOSE_WITHIN.as_secs()
                );
            }
        }
        result
    }

    /// Handles that stop the servers gracefully, for a signal handler.
    pub fn shutdown_handles(&self) -> Vec<Handle<SocketAddr>> {
        self.handles.clone()
    }
}
