//! The command line of `mandate-bench` (`Opts`) and the settings it gives once the
//! defaults (or the smoke values) are filled in and checked.

use std::path::PathBuf;

use clap::Parser;

use crate::error::{Context, Result};
use crate::load::{Mix, Plan};
use crate::secs;

/// Benchmark of mandate-server's authorization path, side by side with a bare axum echo.
#[derive(Parser, Debug)]
#[command(name = "mandate-bench", version, about)]
pub(crate) struct Opts {
    /// The server binary [default: mandate-server next to this executable].
    #[arg(long)]
    pub(crate) server: Option<PathBuf>,
    /// Agents (each with a mandate) the load is spread over, round robin [default: 100000,
    /// enough that the velocity rule (10 a minute) stays out of the mix at the rates one
    /// machine reaches (mandate-bench/README.md); smoke: 200].
    #[arg(long)]
    pub(crate) agents: Option<usize>,
    /// Concurrent keep-alive connections [default: 64; smoke: 8].
    #[arg(long)]
    pub(crate) connections: Option<usize>,
    /// Seconds measured [default: 20; smoke: 2].
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Seconds of load before measuring [default: 3; smoke: 1].
    #[arg(long)]
    pub(crate) warmup: Option<f64>,
    /// Open loop: send this many requests per second, latency from each scheduled time.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Request mix weights allow,review,deny.
    #[arg(long, default_value = "80,10,10")]
    pub(crate) mix: String,
    /// Synthetic decisions written into the database before the run [default: 0; smoke:
    /// 1000].
    #[arg(long)]
    pub(crate) prefill: Option<u64>,
    /// A short run with small numbers for CI: exits 0 if the server answered 201s, no 5xx,
    /// and nothing crashed.
    #[arg(long)]
    pub(crate) smoke: bool,
    /// Also print the results as one JSON object (the last line of stdout).
    #[arg(long)]
    pub(crate) json: bool,
    /// Skip the echo ceiling.
    #[arg(long)]
    pub(crate) no_echo: bool,
    /// Threads of the load generator's runtime (1: a current-thread runtime).
    #[arg(long, default_value_t = 1)]
    pub(crate) client_threads: usize,
    /// Worker threads of the echo server's runtime [default: the number of cores, like
    /// the server's].
    #[arg(long)]
    pub(crate) echo_threads: Option<usize>,
    /// Connections used to create agents and mandates.
    #[arg(long, default_value_t = 32)]
    pub(crate) setup_connections: usize,
    /// Directory for the temporary database [default: the system's temporary directory].
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// Keep the temporary directory (database and server logs) and print where it is.
    #[arg(long)]
    pub(crate) keep: bool,
    /// Skip the first pass (one request per agent, before the warmup) that loads every
    /// agent's state into the server, so that the measured run is the steady state.
    #[arg(long)]
    pub(crate) no_prime: bool,
    /// Only measure the echo ceiling (no server): for tuning the load generator.
    #[arg(long)]
    pub(crate) echo_only: bool,
    /// Run the servers on PostgreSQL: a postgres:// URL of a cluster whose user may
    /// CREATE DATABASE (the bench makes a fresh database there for the run and drops it
    /// after, unless --keep) [default: a fresh SQLite file in --dir].
    #[arg(long)]
    pub(crate) db: Option<String>,
    /// Server processes on the one database (more than 1 needs --db).
    #[arg(long, default_value_t = 1)]
    pub(crate) servers: usize,
    /// With several servers, which one a request goes to: `agent` (each agent's requests
    /// to one server, as a load balancer routing by API key), `request` (each agent's
    /// consecutive requests to different servers: every decision finds its agent changed
    /// by another process and is made again on fresh state) or `worker` (on Citus with
    /// `--citus-connect workers`, each organization's requests to the server on the worker
    /// that holds it, as a load balancer routing by organization: docs/scale.md).
    #[arg(long, value_enum, default_value = "agent")]
    pub(crate) spread: SpreadArg,
    /// The order the closed loop calls the agents in, round after round: `creation` (the
    /// order they were made: consecutive requests come from agents made one after the
    /// other, whose rows and index entries sit side by side) or `scattered` (a fixed
    /// permutation of it: consecutive requests from agents made far apart, as agents that
    /// do not call in the order they were made).
    #[arg(long, value_enum, default_value = "creation")]
    pub(crate) agent_order: AgentOrder,
    /// Organizations the agents are spread over (agent i in organization i mod N), each
    /// onboarded with its own key: on Citus, where each organization is on one worker,
    /// enough of them for the load to reach every worker.
    #[arg(long, default_value_t = 1)]
    pub(crate) orgs: usize,
    /// On a Citus cluster (`--db` names a coordinator's database with `citus` and its
    /// workers added): which node the measured servers connect to, `coordinator`, or
    /// `workers` (server k to worker k mod the workers, with `serve --no-migrate`: Citus
    /// routes from any node, docs/scale.md). Setup always runs on the coordinator.
    #[arg(long, value_enum, default_value = "coordinator")]
    pub(crate) citus_connect: CitusConnect,
    /// Instead of a run: draw docs/scale.md's tables, docs/figures/deployments.svg and
    /// docs/performance.md's table from the records in mandate-bench/results (`write`), or
    /// check that they are (`check`), from the repository's root.
    #[arg(long, value_enum)]
    pub(crate) figures: Option<FiguresArg>,
}

/// `--figures`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FiguresArg {
    Write,
    Check,
}

/// `--citus-connect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CitusConnect {
    Coordinator,
    Workers,
}

/// `--agent-order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AgentOrder {
    Creation,
    Scattered,
}

/// `--spread`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum SpreadArg {
    Agent,
    Request,
    Worker,
}

/// The options with the defaults (or smoke values) filled in.
pub(crate) struct Settings {
    pub(crate) server: PathBuf,
    pub(crate) agents: usize,
    pub(crate) connections: usize,
    pub(crate) duration: f64,
    pub(crate) warmup: f64,
    pub(crate) rate: Option<f64>,
    pub(crate) mix: Mix,
    pub(crate) prefill: u64,
}

pub(crate) fn settings(opts: &Opts) -> Result<Settings> {
    let smoke = opts.smoke;
    let server = match &opts.server {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .ctx("locating this executable")?
            .parent()
            .ctx("this executable has no directory")?
            .join("mandate-server"),
    };
    if !server.is_file() && !opts.echo_only {
        crate::bail!(
            "no server binary at {}: build it (cargo build --release -p mandate-server) or pass --server PATH",
            server.display()
        );
    }
    let s = Settings {
        server,
        agents: opts.agents.unwrap_or(if smoke { 200 } else { 100_000 }),
        connections: opts.connections.unwrap_or(if smoke { 8 } else { 64 }),
        duration: opts.duration.unwrap_or(if smoke { 2.0 } else { 20.0 }),
        warmup: opts.warmup.unwrap_or(if smoke { 1.0 } else { 3.0 }),
        rate: opts.rate,
        mix: Mix::parse(&opts.mix)?,
        prefill: opts
            .prefill
            .unwrap_or(if smoke && opts.db.is_none() { 1000 } else { 0 }),
    };
    if s.agents == 0 || s.connections == 0 {
        crate::bail!("--agents and --connections must be at least 1");
    }
    if opts.servers == 0 || (opts.servers > 1 && opts.db.is_none()) {
        crate::bail!(
            "--servers must be at least 1, and more than 1 only with --db postgres://… (an SQLite file has one server)"
        );
    }
    if opts.orgs == 0 || opts.orgs > s.agents {
        crate::bail!("--orgs must be at least 1 and at most --agents (each needs an agent)");
    }
    if opts.orgs > 1 && s.prefill > 0 {
        crate::bail!("--prefill writes one organization's history: run --orgs N without it");
    }
    if opts.db.is_some() && opts.prefill.is_some_and(|n| n > 0) {
        crate::bail!("--prefill writes into an SQLite file: run PostgreSQL without it");
    }
    if !(s.duration > 0.0 && s.warmup >= 0.0) || s.rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        crate::bail!("--duration must be > 0, --warmup >= 0, --rate > 0");
    }
    Ok(s)
}

impl Settings {
    pub(crate) fn plan(&self, first_seq: u64) -> Plan {
        Plan {
            connections: self.connections,
            warmup: secs(self.warmup),
            duration: secs(self.duration),
            rate: self.rate,
            limit: None,
            first_seq,
        }
    }
}
