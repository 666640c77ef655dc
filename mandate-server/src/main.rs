//! `mandate-server`: serve the API, or run an operator command on the database.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser};
use mandate_server::clock::{Clock, SystemClock};
use mandate_server::http::limits;
use mandate_server::serve::{self, Config};
use mandate_server::signing::api_keys::{self, KeyBinder};
use mandate_server::signing::at_rest::{self, KekSources, KeyEncryption};
use mandate_server::storage::sqlite::backup::{self, BackupInfo};
use mandate_server::storage::{AdminStore, DbLocation, Store};
use mandate_server::{demo, logging, operator};

mod cli;

use cli::{Ap2IssuerAction, Cli, Command, KekArgs};

#[derive(Args, Clone)]
struct DbArg {
    /// The database: an SQLite file (created and migrated on first use), or a PostgreSQL
    /// URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=verify-full], for several
    /// server processes on one database.
    #[arg(long, env = "MANDATE_DB", default_value = "./mandate.db")]
    db: DbLocation,
    #[command(flatten)]
    kek: KekArgs,
}

impl DbArg {
    /// The SQLite file, or an error naming the command that has no PostgreSQL form.
    fn sqlite_file(&self, command: &str) -> Result<PathBuf, String> {
        self.db.sqlite_path().map(PathBuf::from).ok_or_else(|| {
            format!(
                "{command} works on an SQLite file; for PostgreSQL use its own tools (pg_dump, pg_basebackup, point-in-time recovery)"
            )
        })
    }
}

/// Prints `text` and a newline on stdout, ignoring a stdout that fails (`println!` would
/// panic).
fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// A backup's contents in one line.
fn describe(info: &BackupInfo) -> String {
    format!(
        "{} bytes, schema migration {}, {} decisions",
        info.bytes, info.migration, info.decisions
    )
}

/// What a binding pass says of the keys it left refused (edited rows, or bound under a KEK
/// not given), by fingerprint.
fn refused_note(refused: &[String]) -> String {
    if refused.is_empty() {
        String::new()
    } else {
        format!(
            "; {} API keys left refused, their binding not made for them by the key-encryption keys given (edited in the database, or bound under another key-encryption key): {}",
            refused.len(),
            refused.join(", ")
        )
    }
}

/// The key-encryption keys given by flag or variable.
fn key_encryption(db: &DbArg) -> Result<KeyEncryption, String> {
    let sources = KekSources {
        file: db.kek.key_encryption_key_file.as_deref(),
        previous_file: db.kek.previous_key_encryption_key_file.as_deref(),
        ..KekSources::default()
    };
    KeyEncryption::from_sources(&sources.with_environment()).map_err(|e| e.to_string())
}

/// The store of an operator command (the engine `--db` names, migrated) and the
/// key-encryption keys; a database that needs one is refused without it before it is
/// reached.
async fn open_with_keys(db: &DbArg) -> Result<(Arc<dyn Store>, KeyEncryption), String> {
    let keys = key_encryption(db)?;
    at_rest::check_required(&db.db.to_string(), &keys).map_err(|e| e.to_string())?;
    let (store, _) = serve::open_store(&db.db, true)
        .await
        .map_err(|e| format!("database {}: {e}", db.db))?;
    Ok((store, keys))
}

/// The store of an operator command that does not touch signing keys.
async fn open(db: &DbArg) -> Result<Arc<dyn Store>, String> {
    open_with_keys(db).await.map(|(store, _)| store)
}

async fn ap2_issuer(action: Ap2IssuerAction, now: time::OffsetDateTime) -> Result<(), String> {
    match action {
        Ap2IssuerAction::Add { db, org, key, kid } => {
            let text = std::fs::read_to_string(&key)
                .map_err(|e| format!("reading {}: {e}", key.display()))?;
            let jwk =
                operator::read_issuer_key(&text, kid.as_deref()).map_err(|e| e.to_string())?;
            let store = open(&db).await?;
            operator::add_ap2_issuer(ops(&store), &org, &jwk, now).map_err(|e| e.to_string())?;
            println!("organization {org} trusts AP2 issuer key {}", jwk.kid());
        }
        Ap2IssuerAction::List { db, org } => {
            let store = open(&db).await?;
            for issuer in
                operator::list_ap2_issuers(ops(&store), &org).map_err(|e| e.to_string())?
            {
                println!("{}  {}", issuer.kid, issuer.jwk);
            }
        }
        Ap2IssuerAction::Remove { db, org, kid } => {
            let store = open(&db).await?;
            operator::remove_ap2_issuer(ops(&store), &org, &kid).map_err(|e| e.to_string())?;
            println!("organization {org} no longer trusts AP2 issuer key {kid}");
        }
    }
    Ok(())
}

/// The store as operator commands see it.
fn ops(store: &Arc<dyn Store>) -> &dyn AdminStore {
    &**store
}

/// What stops the server: SIGTERM or SIGINT (Ctrl-C). Called before the server listens, so
/// that the handlers are in place by the time anyone can reach it: registered later (in
/// the task that waits for them), a SIGTERM sent right after the first answer could find
/// no handler yet and end the process with the default action, skipping the graceful
/// shutdown (seen once under load in `lifecycle::sigterm_stops_the_binary_cleanly`).
#[cfg(unix)]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let register = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(stream) => Some(stream),
        Err(e) => {
            logging::say(&format!("warning: cannot handle {name}: {e}"));
            None
        }
    };
    let term = register(SignalKind::terminate(), "SIGTERM");
    let int = register(SignalKind::interrupt(), "SIGINT");
    async move {
        let wait = |stream: Option<tokio::signal::unix::Signal>| async move {
            match stream {
                Some(mut stream) => {
                    stream.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! { _ = wait(term) => {}, _ = wait(int) => {} }
    }
}

/// What stops the server: Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `--console-origin` as the configuration takes it: none given is the default, `none`
/// alone is no origin at all.
fn console_origins(given: Vec<String>) -> Result<Option<Vec<String>>, String> {
    let given: Vec<String> = given
        .into_iter()
        .map(|o| o.trim().to_owned())
        .filter(|o| !o.is_empty())
        .collect();
    match given.as_slice() {
        [] => Ok(None),
        [only] if only == "none" => Ok(Some(Vec::new())),
        list if list.iter().any(|o| o == "none") => {
            Err("--console-origin none cannot be combined with an origin".into())
        }
        _ => Ok(Some(given)),
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let clock = SystemClock;
    match cli.command {
        Command::Serve {
            db,
            api_addr,
            public_addr,
            verdicts_url,
            docs_url,
            tls_cert,
            tls_key,
            demo: with_demo,
            settlement,
            max_in_flight,
            request_timeout,
            log_format: _,
            admin_addr,
            api_url,
            console_origin,
            no_migrate,
        } => {
            limits::survive_file_size_limit();
            let key_encryption = key_encryption(&db)?;
            let config = Config {
                db: db.db,
                migrate: !no_migrate,
                api_addr,
                public_addr,
                verdicts_url,
                docs_url,
                tls: tls_cert.zip(tls_key),
                limits: limits::Limits {
                    max_in_flight,
                    request_timeout: std::time::Duration::from_secs(request_timeout),
                    ..limits::Limits::default()
                },
                key_encryption,
                api_url,
                console_origins: console_origins(console_origin)?,
            };
            // Bound and the recorder installed before start, so that start-up is counted too.
            let admin = match &admin_addr {
                Some(addr) => {
                    let listener = tokio::net::TcpListener::bind(addr)
                        .await
                        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
                    Some((listener, mandate_server::telemetry::install()?))
                }
                None => None,
            };
            let stop = shutdown_signal();
            let running = serve::start_with(config.clone(), Arc::new(clock), settlement.into())
                .await
                .map_err(|e| e.to_string())?;
            let scheme = if config.tls.is_some() {
                "https"
            } else {
                "http"
            };
            print_out(&format!(
                "mandate-server listening\n  api:    {scheme}://{}\n  public: {scheme}://{}\n  issuer: {}\n  db:     {}",
                running.api_addr, running.public_addr, running.state.verdicts_url, config.db
            ));
            if let Some((listener, handle)) = admin {
                let addr = listener.local_addr().map_err(|e| e.to_string())?;
                print_out(&format!("  admin:  http://{addr}/metrics"));
                let router = mandate_server::telemetry::admin(handle);
                // The API host's protections: a head within the header timeout of accept,
                // a cap (its share of the file descriptors) shedding the longest idle.
                let admin_limits = limits::Limits {
                    max_connections: limits::ConnectionCaps::of_process(
                        config.limits.max_connections,
                    )
                    .admin,
                    ..config.limits
                };
                let connections =
                    mandate_server::http::connections::Connections::new(&admin_limits);
                let acceptor = mandate_server::http::connections::Guard::new(
                    axum_server::accept::DefaultAcceptor,
                    connections,
                );
                let listener = listener.into_std().map_err(|e| e.to_string())?;
                let mut server = axum_server::from_tcp(listener)
                    .map_err(|e| format!("admin listener: {e}"))?
                    .acceptor(acceptor)
                    .http1_only();
                limits::configure(server.http_builder(), &admin_limits);
                tokio::spawn(async move {
                    if let Err(e) = server.serve(router.into_make_service()).await {
                        tracing::error!("admin listener: {e}");
                    }
                });
            }
            if with_demo {
                demo::run(&running, &config.db).await?;
                if running.keys_unencrypted {
                    print_out(&format!(
                        "Advice: {} (not needed for a demo; see docs/operations.md).",
                        serve::unencrypted_advice()
                    ));
                }
            } else if running.keys_unencrypted {
                tracing::warn!("{}", serve::unencrypted_advice());
            }
            let handles = running.shutdown_handles();
            tokio::spawn(async move {
                stop.await;
                for handle in handles {
                    handle.graceful_shutdown(Some(std::time::Duration::from_secs(30)));
                }
                logging::say("shutting down: finishing in-flight requests");
            });
            let stopped = running.wait().await.map_err(|e| e.to_string());
            // The log gets a moment to catch up; what it could not write is said on stdout.
            logging::flush(std::time::Duration::from_secs(1));
            let lost = logging::lost_lines();
            if lost > 0 {
                print_out(&format!("log lines lost: {lost}"));
            }
            stopped
        }
        Command::Migrate { db } => {
            let store = open(&db).await?;
            let schema = store.readiness().await.map_err(|e| e.to_string())?;
            println!(
                "database {} is at schema migration {} (this server's)",
                db.db, schema.applied
            );
            Ok(())
        }
        Command::Onboard { db, org } => {
            let (store, keys) = open_with_keys(&db).await?;
            operator::prepare_signing_keys(ops(&store), &keys, clock.now())
                .map_err(|e| e.to_string())?;
            let binder = KeyBinder::new(&keys);
            let onboarded = operator::onboard(ops(&store), &binder, &org, clock.now())
                .map_err(|e| e.to_string())?;
            println!(
                "organization {org} ({}) onboarded, policy version {}",
                onboarded.org_id, onboarded.policy_version
            );
            println!("sandbox key: {}", onboarded.sandbox_key);
            println!("live key:    {}", onboarded.live_key);
            println!("These keys are shown once; only their hashes are stored.");
            Ok(())
        }
        Command::IssueKey { db, org, env } => {
            let (store, keys) = open_with_keys(&db).await?;
            let binder = KeyBinder::new(&keys);
            let (key, fp) =
                operator::issue_key(ops(&store), &binder, &org, env.into(), clock.now())
                    .map_err(|e| e.to_string())?;
            println!("{key}\nfingerprint {fp}; the key is shown once");
            Ok(())
        }
        Command::RevokeKey { db, key } => {
            let store = open(&db).await?;
            operator::revoke_key(ops(&store), &key, clock.now()).map_err(|e| e.to_string())?;
            println!("revoked");
            Ok(())
        }
        Command::SetRate {
            db,
            key,
            per_second,
        } => {
            let store = open(&db).await?;
            operator::set_rate(ops(&store), &key, per_second).map_err(|e| e.to_string())?;
            println!(
                "rate set to {per_second} {} per second",
                if per_second == 1 {
                    "request"
                } else {
                    "requests"
                }
            );
            Ok(())
        }
        Command::ListKeys { db, org } => {
            let store = open(&db).await?;
            for k in operator::list_keys(ops(&store), &org).map_err(|e| e.to_string())? {
                println!(
                    "{}  {:7}  {:5}  {:20}  {:>5}/s  {}",
                    k.fingerprint,
                    k.env.as_str(),
                    k.class.as_str(),
                    k.agent.unwrap_or_default(),
                    k.rate_per_sec,
                    if k.revoked { "revoked" } else { "active" }
                );
            }
            Ok(())
        }
        Command::Ap2Issuer { action } => ap2_issuer(action, clock.now()).await,
        Command::RotateSigningKey { db, env } => {
            let (store, keys) = open_with_keys(&db).await?;
            let kid = operator::rotate_signing_key(ops(&store), &keys, env.into(), clock.now())
                .map_err(|e| e.to_string())?;
            println!(
                "new signing key {kid}; the previous key stays published until its tokens expire"
            );
            Ok(())
        }
        Command::RotateKeyEncryptionKey { db, new_key_file } => {
            let new = at_rest::Kek::from_file(&new_key_file, "--new-key-file")
                .map_err(|e| e.to_string())?;
            let (store, keys) = open_with_keys(&db).await?;
            let rotated = at_rest::rotate(ops(&store), &keys, &new).map_err(|e| e.to_string())?;
            let rebound = api_keys::rebind(ops(&store), &keys, &new).map_err(|e| e.to_string())?;
            println!(
                "{} of {} signing keys sealed again under key-encryption key {} (the others were already); \
                 {} of {} API keys bound again under it{}; \
                 give every process the new key ({} or {}) before the old one is withdrawn",
                rotated.resealed,
                rotated.keys,
                rotated.new_id,
                rebound.bound,
                rebound.keys,
                refused_note(&rebound.refused),
                at_rest::KEK_VAR,
                at_rest::KEK_FILE_FLAG
            );
            Ok(())
        }
        Command::BindApiKeys { db } => {
            let (store, keys) = open_with_keys(&db).await?;
            let bound = api_keys::bind_unbound(ops(&store), &keys).map_err(|e| e.to_string())?;
            for line in &bound.described {
                println!("{line}");
            }
            println!(
                "{} of {} API keys bound now to key-encryption key {} (the others were already){}",
                bound.bound,
                bound.keys,
                keys.current_id()
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
                refused_note(&bound.refused)
            );
            Ok(())
        }
        Command::SealSigningKeys { db } => {
            let (store, keys) = open_with_keys(&db).await?;
            let (count, sealed) =
                at_rest::seal_plaintext(ops(&store), &keys).map_err(|e| e.to_string())?;
            println!(
                "{sealed} of {count} signing keys sealed now under key-encryption key {} (the others were already sealed)",
                keys.current_id()
                    .map(|id| id.to_string())
                    .unwrap_or_default()
            );
            Ok(())
        }
        Command::Backup { db, to } => {
            let file = db.sqlite_file("backup")?;
            let keys = key_encryption(&db)?.backup_keys();
            let info = backup::backup(&file, &to, &keys).map_err(|e| e.to_string())?;
            println!("backup written to {}: {}", to.display(), describe(&info));
            Ok(())
        }
        Command::VerifyBackup { file, kek } => {
            let keys = key_encryption(&DbArg {
                db: DbLocation::from(file.clone()),
                kek,
            })?
            .backup_keys();
            let info = backup::verify(&file, &keys).map_err(|e| e.to_string())?;
            println!("{} is a sound backup: {}", file.display(), describe(&info));
            Ok(())
        }
        Command::Restore { from, db, force } => {
            let file = db.sqlite_file("restore")?;
            let keys = key_encryption(&db)?.backup_keys();
            let info = backup::restore(&from, &file, force, &keys).map_err(|e| e.to_string())?;
            println!(
                "restored {} to {}: {}; the server migrates it when it starts",
                from.display(),
                file.display(),
                describe(&info)
            );
            Ok(())
        }
        Command::SetPolicyVersion { db, org, version } => {
            let store = open(&db).await?;
            operator::set_policy_version(ops(&store), &org, &version).map_err(|e| e.to_string())?;
            println!("policy version of {org} is now {version}");
            Ok(())
        }
    }
}

/// Threads for blocking work: SQLite reads (which share 4 reader connections, so more
/// threads would only wait on their locks) and DNS lookups of webhook deliveries. With
/// tokio's default of 512, loading many agents' states at once starts dozens of threads,
/// each with its own stack and allocator caches: more memory resident, and a slower first
/// pass.
const BLOCKING_THREADS: usize = 8;

/// jemalloc, not glibc's malloc: the hot path makes many small allocations on tokio's
/// workers and frees some of them on other threads (the writer, the sync thread), where
/// glibc's `malloc`, `free` and `malloc_consolidate` take a large share of the server's
/// CPU; with jemalloc the server is faster and its resident set smaller
/// (docs/performance.md). `unprefixed` in Cargo.toml makes SQLite's allocations use it too.
/// Its options (two arenas, freed pages returned after 1 s) are compiled in from
/// `.cargo/config.toml`; with jemalloc's defaults the resident set with 10 M decisions can
/// go over the 200 MB budget.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(main_async())
}

async fn main_async() -> ExitCode {
    let cli = Cli::parse();
    let format = match &cli.command {
        Command::Serve { log_format, .. } => (*log_format).into(),
        _ => logging::Format::Text,
    };
    logging::init(format);
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}
