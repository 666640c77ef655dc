//! `serve`: the server started on the options given, the admin host beside it when asked,
//! the demo session when asked, then run until SIGTERM or SIGINT stops it gracefully.

use mandate_protocol::x402::ListedAssets;
use std::sync::Arc;
use std::time::Duration;

use mandate_server::clock::SystemClock;
use mandate_server::http::connections::{Connections, Guard};
use mandate_server::http::limits::{self, Limits};
use mandate_server::serve::{self, Config, Running};
use mandate_server::workers::witness::{self, WitnessTarget};
use mandate_server::{app, demo, logging, telemetry};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use super::{key_encryption, print_out};
use crate::cli::ServeArgs;

/// Serves until stopped by a signal; the servers' own failure if they stop with one.
pub(super) async fn serve(args: ServeArgs, clock: SystemClock) -> Result<(), String> {
    limits::survive_file_size_limit();
    let (with_demo, settlement) = (args.demo, args.settlement);
    let admin_addr = args.admin_addr.clone();
    let config = config(args)?;
    // Bound and the recorder installed before start, so that start-up is counted too.
    let admin = match &admin_addr {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            Some((listener, telemetry::install()?))
        }
        None => None,
    };
    let stop = shutdown_signal();
    let running = serve::start_with(config.clone(), Arc::new(clock), settlement.into())
        .await
        .map_err(|e| e.to_string())?;
    announce(&running, &config);
    if let Some((listener, handle)) = admin {
        serve_admin(listener, handle, &config.limits)?;
    }
    if with_demo {
        demo::run(&running, &config.db).await?;
        if running.keys_unencrypted {
            print_out(&format!(
                "Advice: {} (not needed for a demo; see docs/operations.md).",
                serve::unencrypted_advice(&config.db)
            ));
        }
    } else if running.keys_unencrypted {
        tracing::warn!("{}", serve::unencrypted_advice(&config.db));
    }
    let handles = running.shutdown_handles();
    tokio::spawn(async move {
        stop.await;
        for handle in handles {
            handle.graceful_shutdown(Some(Duration::from_secs(30)));
        }
        logging::say("shutting down: finishing in-flight requests");
    });
    let stopped = running.wait().await.map_err(|e| e.to_string());
    // The log gets a moment to catch up; what it could not write is said on stdout.
    logging::flush(Duration::from_secs(1));
    let lost = logging::lost_lines();
    if lost > 0 {
        print_out(&format!("log lines lost: {lost}"));
    }
    stopped
}

/// The server's configuration from the options of `serve`.
fn config(args: ServeArgs) -> Result<Config, String> {
    let key_encryption = key_encryption(&args.db)?;
    Ok(Config {
        db: args.db.db,
        migrate: !args.no_migrate,
        api_addr: args.api_addr,
        public_addr: args.public_addr,
        verdicts_url: args.verdicts_url,
        docs_url: args.docs_url,
        tls: args.tls_cert.zip(args.tls_key),
        limits: Limits {
            max_in_flight: args.max_in_flight,
            request_timeout: Duration::from_secs(args.request_timeout),
            ..Limits::default()
        },
        key_encryption,
        api_url: args.api_url,
        console_origins: console_origins(args.console_origin)?,
        log_checkpoint_interval: Duration::from_millis(args.log_checkpoint_interval),
        log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
        log_quiet_below: args.log_quiet_below,
        public_logs: args.public_logs,
        x402_assets: x402_assets(&args.x402_asset)?,
        witnesses: witnesses(&args.witness)?,
    })
}

/// The witnesses `--witness` lists, or what is wrong with an entry.
fn witnesses(entries: &[String]) -> Result<Vec<WitnessTarget>, String> {
    let targets = entries
        .iter()
        .map(|entry| WitnessTarget::parse(entry).map_err(|why| format!("--witness {why}")))
        .collect::<Result<Vec<_>, _>>()?;
    witness::check_targets(&targets)?;
    Ok(targets)
}

/// The decimals `--x402-asset` lists, or what is wrong with an entry.
fn x402_assets(entries: &[String]) -> Result<ListedAssets, String> {
    let mut listed = ListedAssets::default();
    for entry in entries {
        listed
            .add(entry)
            .map_err(|why| format!("--x402-asset {why}"))?;
    }
    Ok(listed)
}

/// Where the server listens, what it signs as and on which database, on stdout.
fn announce(running: &Running, config: &Config) {
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    print_out(&format!(
        "mandate-server listening\n  api:    {scheme}://{}\n  public: {scheme}://{}\n  issuer: {}\n  db:     {}",
        running.api_addr, running.public_addr, running.state.verdicts_url, config.db
    ));
}

/// The admin host (`GET /metrics`) on `listener`, in a task of its own, with the API
/// host's protections: a head within the header timeout of accept, a cap (its share of
/// the file descriptors) shedding the longest idle.
fn serve_admin(
    listener: TcpListener,
    handle: PrometheusHandle,
    api_limits: &Limits,
) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    print_out(&format!("  admin:  http://{addr}/metrics"));
    let router = app::admin(handle);
    let admin_limits = Limits {
        max_connections: limits::ConnectionCaps::of_process(api_limits.max_connections).admin,
        ..*api_limits
    };
    let connections = Connections::new(&admin_limits);
    let acceptor = Guard::new(axum_server::accept::DefaultAcceptor, connections);
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
    Ok(())
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
