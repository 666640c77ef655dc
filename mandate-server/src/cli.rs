//! The command line of `mandate-server`: `serve` and the operator commands, with their
//! options; `commands/` runs them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mandate_server::http::limits;
use mandate_server::model::Env;
use mandate_server::storage::DbLocation;
use mandate_server::{logging, settlement};

#[derive(Args, Clone)]
pub(crate) struct DbArg {
    /// The database: an SQLite file (created and migrated on first use), or a PostgreSQL
    /// URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=verify-full], for several
    /// server processes on one database.
    #[arg(long, env = "MANDATE_DB", default_value = "./mandate.db")]
    pub(crate) db: DbLocation,
    #[command(flatten)]
    pub(crate) kek: KekArgs,
}

impl DbArg {
    /// The SQLite file, or an error naming the command that has no PostgreSQL form.
    pub(crate) fn sqlite_file(&self, command: &str) -> Result<PathBuf, String> {
        self.db.sqlite_path().map(PathBuf::from).ok_or_else(|| {
            format!(
                "{command} works on an SQLite file; for PostgreSQL use its own tools (pg_dump, pg_basebackup, point-in-time recovery)"
            )
        })
    }
}

/// The Mandate service and its operator commands.
#[derive(Parser)]
#[command(name = "mandate-server", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The key-encryption keys that seal signing keys at rest (docs/operations.md).
#[derive(Args, Clone)]
pub(crate) struct KekArgs {
    /// A file holding the key-encryption key that seals signing keys at rest: the standard
    /// base64 of 32 random bytes (`openssl rand -base64 32`). Or the key itself in
    /// MANDATE_KEY_ENCRYPTION_KEY. Required with PostgreSQL; without it, SQLite stores
    /// signing keys unencrypted.
    #[arg(long, env = "MANDATE_KEY_ENCRYPTION_KEY_FILE", value_name = "PATH")]
    pub(crate) key_encryption_key_file: Option<PathBuf>,
    /// During a key-encryption key rotation: a file holding the previous key, which still
    /// opens signing keys sealed under it. Or the key itself in
    /// MANDATE_PREVIOUS_KEY_ENCRYPTION_KEY.
    #[arg(
        long,
        env = "MANDATE_PREVIOUS_KEY_ENCRYPTION_KEY_FILE",
        value_name = "PATH"
    )]
    pub(crate) previous_key_encryption_key_file: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum EnvArg {
    Sandbox,
    Live,
}

impl From<EnvArg> for Env {
    fn from(e: EnvArg) -> Self {
        match e {
            EnvArg::Sandbox => Env::Sandbox,
            EnvArg::Live => Env::Live,
        }
    }
}

/// The settlement adapters an operator can make live: exactly one is.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum SettlementArg {
    /// Records every movement in the service's own database.
    Ledger,
}

impl From<SettlementArg> for settlement::Adapter {
    fn from(a: SettlementArg) -> Self {
        match a {
            SettlementArg::Ledger => settlement::Adapter::Ledger,
        }
    }
}

/// The formats of the log.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LogFormatArg {
    /// Plain text lines.
    Text,
    /// One JSON object a line.
    Json,
}

impl From<LogFormatArg> for logging::Format {
    fn from(f: LogFormatArg) -> Self {
        match f {
            LogFormatArg::Text => logging::Format::Text,
            LogFormatArg::Json => logging::Format::Json,
        }
    }
}

// The options of `serve` (no doc comment: the variant's is the command's help).
#[derive(Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) db: DbArg,
    /// Address of the API host.
    #[arg(long, env = "MANDATE_API_ADDR", default_value = "127.0.0.1:8080")]
    pub(crate) api_addr: String,
    /// Address of the public host (JWK Set, OpenAPI document).
    #[arg(long, env = "MANDATE_PUBLIC_ADDR", default_value = "127.0.0.1:8081")]
    pub(crate) public_addr: String,
    /// Issuer of every token and home of the JWK Set [default: the public host's URL].
    #[arg(long, env = "MANDATE_VERDICTS_URL")]
    pub(crate) verdicts_url: Option<String>,
    /// Home of the OpenAPI document, named by every 401 [default: the public host's URL].
    #[arg(long, env = "MANDATE_DOCS_URL")]
    pub(crate) docs_url: Option<String>,
    /// TLS certificate chain (PEM) for both listeners.
    #[arg(long, requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for both listeners.
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Onboard a demo organization and print a copy-paste session.
    #[arg(long)]
    pub(crate) demo: bool,
    /// The live settlement adapter, through which escrow money moves (never shown to
    /// API clients).
    #[arg(long, env = "MANDATE_SETTLEMENT", value_enum, default_value = "ledger")]
    pub(crate) settlement: SettlementArg,
    /// Requests handled at once on the API host; beyond it, 503 with Retry-After: 1.
    #[arg(long, env = "MANDATE_MAX_IN_FLIGHT", default_value_t = limits::DEFAULT_MAX_IN_FLIGHT)]
    pub(crate) max_in_flight: usize,
    /// Seconds a request to the API host may take before it is answered `503` (the
    /// database did not answer in time); the caller retries with its Idempotency-Key.
    /// At most 50 (an Idempotency-Key's claim lasts 60 s).
    #[arg(long, env = "MANDATE_REQUEST_TIMEOUT", default_value_t = limits::DEFAULT_REQUEST_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=50))]
    pub(crate) request_timeout: u64,
    /// How log lines (stderr) are written: `text` for people, `json` for machines.
    #[arg(long, env = "MANDATE_LOG_FORMAT", value_enum, default_value = "text")]
    pub(crate) log_format: LogFormatArg,
    /// Address of the admin host (`GET /metrics`, Prometheus text format, plain HTTP);
    /// off unless set. Bind it to loopback or a private network: it is not for callers.
    #[arg(long, env = "MANDATE_ADMIN_ADDR")]
    pub(crate) admin_addr: Option<String>,
    /// The API host's URL as browsers reach it; the review console (`/console/` on the
    /// public host) calls it [default: the API host's URL].
    #[arg(long, env = "MANDATE_API_URL")]
    pub(crate) api_url: Option<String>,
    /// An origin (`scheme://host[:port]`) allowed to call the API host from a browser;
    /// repeatable, comma-separated in the variable; `none` allows none [default: the
    /// origin of the docs URL, where the review console is served].
    #[arg(long, env = "MANDATE_CONSOLE_ORIGIN", value_delimiter = ',')]
    pub(crate) console_origin: Vec<String>,
    /// Do not apply schema migrations at start: refuse to start unless the database is
    /// already at this server's schema (run `mandate-server migrate` first).
    #[arg(long)]
    pub(crate) no_migrate: bool,
    /// Milliseconds between two rounds of the checkpoint worker, which logs new decisions
    /// and signs a checkpoint of each organization's log that grew: how far at most a
    /// checkpoint is behind the newest decision, plus the round's own time (about three
    /// times this for a quiet log: `--log-quiet-below`).
    #[arg(long, env = "MANDATE_LOG_CHECKPOINT_INTERVAL", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub(crate) log_checkpoint_interval: u64,
    /// A log with fewer decisions than this waiting, whose checkpoint was signed within
    /// the last two intervals, waits for a later round: an organization deciding a few a
    /// second has its log extended every few seconds with all of them, instead of every
    /// round with each round's few (which costs the database as much a round as a busy
    /// log's). Its checkpoint is then up to about three intervals behind. 0: every log
    /// with new decisions is extended every round.
    #[arg(long, env = "MANDATE_LOG_QUIET_BELOW", default_value_t = mandate_server::workers::checkpoint::QUIET_BELOW, value_parser = clap::value_parser!(i64).range(0..=1_000_000))]
    pub(crate) log_quiet_below: i64,
    /// Serve every organization's decision log (C2SP tlog-tiles under
    /// `{verdicts_url}/log/<org>/<env>/`) to anyone; without it, reading an organization's
    /// log needs one of its secret keys of that environment.
    #[arg(long, env = "MANDATE_PUBLIC_LOGS")]
    pub(crate) public_logs: bool,
    /// An x402 asset's decimals, `ASSET=DECIMALS` (`0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913=6`)
    /// or on one network `NETWORK/ASSET=DECIMALS` (`eip155:8453/0x8335…=6`); repeatable,
    /// comma-separated in the variable. A payment in a listed asset (or in an ISO 4217
    /// currency, whose decimals are its minor units) must have the request's amount in
    /// atomic units, or it is refused.
    #[arg(
        long,
        env = "MANDATE_X402_ASSETS",
        value_delimiter = ',',
        value_name = "[NETWORK/]ASSET=DECIMALS"
    )]
    pub(crate) x402_asset: Vec<String>,
    /// A witness to submit each new checkpoint of the decision logs to (c2sp.org/tlog-witness),
    /// `URL=VERIFIER_KEY`: where it serves `/add-checkpoint` and its verifier key
    /// (`name+keyid+key`, as `mandate witness init` prints it); repeatable, comma-separated
    /// in the variable. Its cosignature, checked with the key, is added to the checkpoint
    /// readers are shown; a witness that refuses the log's checkpoint is logged at error
    /// level.
    #[arg(
        long,
        env = "MANDATE_WITNESSES",
        value_delimiter = ',',
        value_name = "URL=VERIFIER_KEY"
    )]
    pub(crate) witness: Vec<String>,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve the API host and the public host.
    Serve(Box<ServeArgs>),
    /// Bring the database's schema up to this server's (SQLite file or PostgreSQL URL);
    /// `serve` does it at start unless given --no-migrate.
    Migrate {
        #[command(flatten)]
        db: DbArg,
    },
    /// Create an organization and print its sandbox and live keys (once).
    Onboard {
        #[command(flatten)]
        db: DbArg,
        /// The organization's name.
        #[arg(long)]
        org: String,
    },
    /// Issue another organization key.
    IssueKey {
        #[command(flatten)]
        db: DbArg,
        /// The organization's name.
        #[arg(long)]
        org: String,
        /// The environment the key acts on.
        #[arg(long, value_enum)]
        env: EnvArg,
    },
    /// Revoke a key, given the key itself or its fingerprint (key_…).
    RevokeKey {
        #[command(flatten)]
        db: DbArg,
        /// The key or its fingerprint.
        key: String,
    },
    /// Set a key's request rate.
    SetRate {
        #[command(flatten)]
        db: DbArg,
        /// The key or its fingerprint.
        key: String,
        /// Requests per second.
        #[arg(long)]
        per_second: u32,
    },
    /// List an organization's keys (fingerprints, never the keys).
    ListKeys {
        #[command(flatten)]
        db: DbArg,
        /// The organization's name.
        #[arg(long)]
        org: String,
    },
    /// The AP2 issuer keys an organization trusts to sign the open payment mandates it
    /// imports (POST /v1/mandates with `ap2`): add, list, remove.
    Ap2Issuer {
        #[command(subcommand)]
        action: Ap2IssuerAction,
    },
    /// Rotate an environment's log key, which signs the decision log's checkpoints; the
    /// old key signs beside the new one until it leaves the JWK Set (ten minutes).
    RotateLogKey {
        #[command(flatten)]
        db: DbArg,
        /// The environment.
        #[arg(long, value_enum)]
        env: EnvArg,
    },
    /// Rotate an environment's signing key; the old key stays published until its tokens expire.
    RotateSigningKey {
        #[command(flatten)]
        db: DbArg,
        /// The environment.
        #[arg(long, value_enum)]
        env: EnvArg,
    },
    /// Seal every signing key again under a new key-encryption key, in one transaction
    /// (the current key from --key-encryption-key-file or MANDATE_KEY_ENCRYPTION_KEY).
    RotateKeyEncryptionKey {
        #[command(flatten)]
        db: DbArg,
        /// A file holding the new key-encryption key (standard base64 of 32 random bytes).
        #[arg(long, value_name = "PATH")]
        new_key_file: PathBuf,
    },
    /// Seal every signing key stored in plaintext under the key-encryption key (from
    /// --key-encryption-key-file or MANDATE_KEY_ENCRYPTION_KEY), in one transaction: how a
    /// database made without one is encrypted. A server given a key-encryption key uses
    /// only sealed signing keys, and refuses to start while one is in plaintext.
    SealSigningKeys {
        #[command(flatten)]
        db: DbArg,
    },
    /// Bind every unrevoked API key that has no binding to the key-encryption key (from
    /// --key-encryption-key-file or MANDATE_KEY_ENCRYPTION_KEY), in one transaction: how
    /// the keys of a database made before binding, or without a key-encryption key, are
    /// accepted by a server given one (it refuses unbound keys as unknown). Each key bound
    /// is printed with its organization, environment, class and agent: check them.
    BindApiKeys {
        #[command(flatten)]
        db: DbArg,
    },
    /// Copy the database to FILE while the server keeps serving: a consistent snapshot,
    /// checked once written.
    Backup {
        #[command(flatten)]
        db: DbArg,
        /// The backup file to write (replaced if it exists, once the new one is complete).
        #[arg(long)]
        to: PathBuf,
    },
    /// Check a backup: whole, sound, of a schema this server knows. Writes nothing.
    VerifyBackup {
        /// The backup file.
        file: PathBuf,
        #[command(flatten)]
        kek: KekArgs,
    },
    /// Bring a backup back as the database, after checking it (never while a server has it
    /// open).
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        #[command(flatten)]
        db: DbArg,
        /// Replace the database if it exists (with its WAL).
        #[arg(long)]
        force: bool,
    },
    /// Set an organization's policy version (pol_YYYY-MM-DD.N).
    SetPolicyVersion {
        #[command(flatten)]
        db: DbArg,
        /// The organization's name.
        #[arg(long)]
        org: String,
        /// The new policy version.
        #[arg(long)]
        version: String,
    },
}

/// The `ap2-issuer` subcommands.
#[derive(Subcommand)]
pub(crate) enum Ap2IssuerAction {
    /// Trust a key: a file holding its public JWK (EC P-256; its kid names it) or a PEM
    /// PUBLIC KEY of P-256 (with --kid).
    Add {
        #[command(flatten)]
        db: DbArg,
        /// The organization's name.
        #[arg(long)]
        org: String,
        /// The key file (JWK JSON or PEM).
        #[arg(long, value_name = "PATH")]
        key: PathBuf,
        /// The key's id (the `kid` its SD-JWTs name); required for a PEM.
        #[arg(long)]
        kid: Option<String>,
    },
    /// List the keys an organization trusts.
    List {
        #[command(flatten)]
        db: DbArg,
        /// The organization's name.
        #[arg(long)]
        org: String,
    },
    /// Stop trusting a key (mandates imported under it stay as they are).
    Remove {
        #[command(flatten)]
        db: DbArg,
        /// The organization's name.
        #[arg(long)]
        org: String,
        /// The key's id.
        #[arg(long)]
        kid: String,
    },
}
