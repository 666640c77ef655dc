//! `mandate-bench`: starts `mandate-server` on a temporary database, creates agents and
//! mandates through the API, drives `POST /v1/authorizations` with a fixed request mix,
//! and reports throughput, latency percentiles, the verdict mix, the server's memory, the
//! database's growth per decision, and the ratio to a bare axum JSON echo measured by the
//! same load generator in the same run. See README.md.
//!
//! This file holds the run's sequence (setup, prime, warmup, measure, report) in order, one
//! function a step, so that one read shows what a figure measured; the options are in
//! `opts.rs`, the report's lines in `report.rs`, the parts in the other modules below.

mod cpu;
mod echo;
mod error;
mod figures;
mod http;
mod load;
mod opts;
mod pg;
mod prefill;
mod report;
mod server;
mod setup;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::Value;

use crate::error::{Context, Result};
use crate::load::{Outcome, Plan, Requests, Spread};
use crate::opts::{AgentOrder, CitusConnect, Opts, Settings, SpreadArg, settings};
use crate::report::{Percentiles, filesystem, machine, p99_by_second, percentiles, thousands};
use crate::server::Server;

/// Samples the server's resident set every 100 ms until stopped; returns the largest.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut max = 0;
            while !flag.load(Ordering::Relaxed) {
                if let Ok(m) = server::memory(pid) {
                    max = max.max(m.rss_kib);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            max
        });
        Self { stop, thread }
    }

    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    };
    runtime.ctx("load generator runtime")
}

/// One measured run's figures.
struct Measured {
    outcome: Outcome,
    cpu: cpu::Usage,
    latency: Percentiles,
    service: Option<Percentiles>,
    /// The p99 of each second of the window, µs.
    p99_by_second: Vec<u32>,
    throughput: f64,
}

fn measured(mut outcome: Outcome) -> Measured {
    let throughput = outcome.created() as f64 / outcome.window.as_secs_f64();
    // Before the samples are sorted, while they still line up with their seconds.
    let p99_by_second = p99_by_second(&outcome.latencies_us, &outcome.seconds);
    let latency = percentiles(&mut outcome.latencies_us);
    let service = (!outcome.service_us.is_empty()).then(|| percentiles(&mut outcome.service_us));
    // The raw samples are no longer needed.
    outcome.latencies_us = Vec::new();
    outcome.seconds = Vec::new();
    outcome.service_us = Vec::new();
    Measured {
        outcome,
        cpu: cpu::Usage::default(),
        latency,
        service,
        p99_by_second,
        throughput,
    }
}

fn secs(d: f64) -> Duration {
    Duration::from_secs_f64(d)
}

fn log(msg: impl AsRef<str>) {
    eprintln!("mandate-bench: {}", msg.as_ref());
}

/// What the server run measured.
struct ServerRun {
    db: String,
    servers: usize,
    /// Organizations the agents are spread over.
    orgs: usize,
    fs: String,
    setup_secs: f64,
    prefill_secs: f64,
    prime: Option<Measured>,
    main: Measured,
    idle: server::Memory,
    end: server::Memory,
    peak_sampled_kib: u64,
    size_before: u64,
    size_after: u64,
    crashed: Option<String>,
    stop_problem: Option<String>,
}

fn bench_server(
    s: &Settings,
    opts: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
) -> Result<ServerRun> {
    let sqlite = dir.join("bench.db");
    let (pg, db, fs) = database(opts, rt, dir, &sqlite)?;
    // 1. Organization, keys, agents and mandates.
    let setup = set_up(s, opts, rt, dir, &db, pg.as_ref())?;
    // 2. History.
    let mut prefill_secs = 0.0;
    if s.prefill > 0 {
        log(format!("prefilling {} decisions", thousands(s.prefill)));
        let spec = prefill::Spec {
            org_id: &setup.orgs[0].org_id,
            policy_version: &setup.orgs[0].policy_version,
            issuer: &setup.issuer,
            agents: &setup.agents,
        };
        prefill_secs = prefill::prefill(&sqlite, &spec, s.prefill)?.as_secs_f64();
    }
    let size = |pg: &Option<pg::PgDb>| match pg {
        Some(pg) => rt.block_on(pg.size()),
        None => prefill::settled_size(&sqlite),
    };
    let size_before = size(&pg)?;
    // 3. The measured run, on freshly started servers: each agent's state is rebuilt
    //    from the database on its first request, as after any restart.
    let (targets, no_migrate) = targets(opts, &db, pg.as_ref());
    let spread = spread_of(opts, rt, pg.as_ref(), &setup)?;
    let run = measure(
        s,
        opts,
        rt,
        dir,
        &targets,
        no_migrate,
        pg.as_ref(),
        &setup.agents,
        spread,
    )?;
    let size_after = size(&pg)?;
    let pg_name = pg.as_ref().map(|pg| pg.name.clone());
    let citus = match pg.as_ref().and_then(|pg| pg.citus.as_ref()) {
        Some(c) => format!(
            ", Citus: a coordinator and {} workers, the servers on {}",
            c.workers.len(),
            match opts.citus_connect {
                CitusConnect::Coordinator => "the coordinator",
                CitusConnect::Workers => "the workers",
            }
        ),
        None => String::new(),
    };
    if let Some(pg) = pg {
        rt.block_on(pg.finish())?;
    }
    Ok(ServerRun {
        db: match &pg_name {
            Some(name) => format!("{name} on the --db cluster{citus}"),
            None => db,
        },
        servers: opts.servers,
        orgs: opts.orgs,
        fs,
        setup_secs: setup.secs,
        prefill_secs,
        prime: run.prime,
        main: run.main,
        idle: run.idle,
        end: run.end,
        peak_sampled_kib: run.peak_sampled_kib,
        size_before,
        size_after,
        crashed: run.crashed,
        stop_problem: run.stop_problem,
    })
}

/// The database of the run: a fresh PostgreSQL database on `--db`'s cluster (its servers
/// given a key-encryption key of this run), or the SQLite file `sqlite` in `dir`; with
/// what `--db` the servers get, and the file system it is on.
fn database(
    opts: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    sqlite: &std::path::Path,
) -> Result<(Option<pg::PgDb>, String, String)> {
    let pg = match &opts.db {
        Some(url) => Some(rt.block_on(pg::PgDb::create(url, opts.keep))?),
        None => None,
    };
    if pg.is_some() {
        // PostgreSQL requires a key-encryption key; one made for this run.
        server::set_env(vec![(
            "MANDATE_KEY_ENCRYPTION_KEY".to_owned(),
            pg::fresh_kek()?,
        )]);
    }
    let db = match &pg {
        Some(pg) => pg.url.clone(),
        None => sqlite.to_string_lossy().into_owned(),
    };
    let fs = match &pg {
        Some(_) => "PostgreSQL".to_owned(),
        None => filesystem(dir),
    };
    if pg.is_none() && (fs == "tmpfs" || fs == "ramfs") {
        log(format!(
            "warning: {} is on {fs}: fsync costs nothing there, so durability is not measured; use --dir on a disk",
            dir.display()
        ));
    }
    Ok((pg, db, fs))
}

/// The `--db` each measured server gets, and whether they start with `--no-migrate`: the
/// run's database, or on Citus with `--citus-connect workers` the workers' in turn (a
/// worker refuses the migrations' Citus step; setup ran them on the coordinator).
fn targets(opts: &Opts, db: &str, pg: Option<&pg::PgDb>) -> (Vec<String>, bool) {
    match pg {
        Some(pg) if pg.citus.is_some() && opts.citus_connect == CitusConnect::Workers => {
            ((0..opts.servers).map(|k| pg.worker_url(k)).collect(), true)
        }
        _ => (vec![db.to_owned(); opts.servers], false),
    }
}

/// Which server each request goes to (`--spread`). By worker: each organization's agents
/// to the servers on the worker that holds it (server k is on worker k mod the workers,
/// [`targets`]), in turn when a worker has several.
fn spread_of(
    opts: &Opts,
    rt: &tokio::runtime::Runtime,
    pg: Option<&pg::PgDb>,
    setup: &SetUp,
) -> Result<Spread> {
    Ok(match opts.spread {
        SpreadArg::Agent => Spread::Agent,
        SpreadArg::Request => Spread::Request,
        SpreadArg::Worker => {
            let citus = pg.and_then(|pg| pg.citus.as_ref().map(|c| (pg, c.workers.len())));
            let (pg, workers) = match citus {
                Some((pg, n)) if n > 0 && opts.citus_connect == CitusConnect::Workers => (pg, n),
                _ => {
                    return Err(error::Error(
                        "--spread worker needs a Citus --db with workers and --citus-connect workers".into(),
                    ));
                }
            };
            if opts.servers < workers {
                return Err(error::Error(format!(
                    "--spread worker needs a server on each of the {workers} workers (--servers {workers} or more)"
                )));
            }
            let orgs: Vec<String> = setup.orgs.iter().map(|o| o.org_id.clone()).collect();
            let holding = rt.block_on(pg.workers_of(&orgs))?;
            log(format!(
                "spread by worker: organizations on each worker {:?}",
                (0..workers)
                    .map(|w| holding.iter().filter(|h| **h == w).count())
                    .collect::<Vec<_>>()
            ));
            let table: Vec<usize> = (0..setup.agents.len())
                .map(|a| {
                    let worker = holding[a % orgs.len()];
                    let on_worker: Vec<usize> = (0..opts.servers)
                        .filter(|k| k % workers == worker)
                        .collect();
                    on_worker[(a / orgs.len()) % on_worker.len()]
                })
                .collect();
            Spread::Table(table.into())
        }
    })
}

/// What the setup made.
struct SetUp {
    /// The organizations, the first named `bench` (`bench-0000`, … with `--orgs`).
    orgs: Vec<server::Onboarded>,
    agents: Vec<setup::Agent>,
    /// The server's issuer.
    issuer: String,
    /// How long creating the agents took, s.
    secs: f64,
}

/// The organizations onboarded (their keys' rates lifted), then the agents and their
/// mandates created through the API of a server started for it and stopped after, agent
/// `i` in organization `i mod --orgs`.
fn set_up(
    s: &Settings,
    opts: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    db: &str,
    pg: Option<&pg::PgDb>,
) -> Result<SetUp> {
    log(format!(
        "onboarding on {}",
        match pg {
            Some(pg) => format!("PostgreSQL database {}", pg.name),
            None => db.to_owned(),
        }
    ));
    let mut orgs = Vec::with_capacity(opts.orgs);
    for k in 0..opts.orgs {
        let name = if opts.orgs == 1 {
            "bench".to_owned()
        } else {
            format!("bench-{k:04}")
        };
        let org = server::onboard(&s.server, db, &name)?;
        server::set_rate(&s.server, db, &org.sandbox_key, 1_000_000)?;
        orgs.push(org);
    }
    let keys: Vec<String> = orgs.iter().map(|o| o.sandbox_key.clone()).collect();
    let setup_started = Instant::now();
    let srv = Server::start(&s.server, db, &[], &dir.join("setup.log"))?;
    log(format!(
        "creating {} agents and mandates in {} organizations on {}",
        s.agents,
        keys.len(),
        srv.api
    ));
    let agents = rt.block_on(async {
        for key in &keys {
            setup::enforce(srv.api, key).await?;
        }
        setup::create_agents(srv.api, &keys, s.agents, opts.setup_connections).await
    });
    let issuer = srv.issuer.clone();
    let setup_log_tail = srv.log_tail(20);
    let stopped = srv.stop();
    let agents = agents.map_err(|e| error::Error(format!("{e}\nserver log:\n{setup_log_tail}")))?;
    stopped?;
    Ok(SetUp {
        orgs,
        agents,
        issuer,
        secs: setup_started.elapsed().as_secs_f64(),
    })
}

/// What the measured run gave.
struct Run {
    prime: Option<Measured>,
    main: Measured,
    idle: server::Memory,
    end: server::Memory,
    peak_sampled_kib: u64,
    crashed: Option<String>,
    stop_problem: Option<String>,
}

/// The measured run: a server started on each of `dbs` (with `--no-migrate` if
/// `no_migrate`), the first pass (one request per agent) unless `--no-prime`, then the load
/// measured with the CPU and memory of the servers, then the servers stopped.
///
/// On plain PostgreSQL (`pg`, not Citus) the tables are analyzed after the first pass, as
/// in a database that has served a while: otherwise autovacuum analyzes the tables the
/// set-up filled at a moment of its own, inside the measured window in some runs and not
/// in others, and the longer set-up of many organizations makes that likelier.
#[allow(clippy::too_many_arguments)]
fn measure(
    s: &Settings,
    opts: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    dbs: &[String],
    no_migrate: bool,
    pg: Option<&pg::PgDb>,
    agents: &[setup::Agent],
    spread: Spread,
) -> Result<Run> {
    let extra: &[&str] = if no_migrate { &["--no-migrate"] } else { &[] };
    let mut servers = Vec::new();
    for (k, db) in dbs.iter().enumerate() {
        servers.push(Server::start(
            &s.server,
            db,
            extra,
            &dir.join(format!("serve{k}.log")),
        )?);
    }
    let addrs: Vec<_> = servers.iter().map(|srv| srv.api).collect();
    let pids: Vec<u32> = servers.iter().map(Server::pid).collect();
    let pid = pids[0];
    std::thread::sleep(Duration::from_millis(200));
    let idle = server::memory(pid).unwrap_or_default();
    // The agents in the order the loop calls them; a table of servers by agent follows.
    let order: Vec<usize> = match opts.agent_order {
        AgentOrder::Creation => (0..agents.len()).collect(),
        AgentOrder::Scattered => load::scattered(agents.len()),
    };
    let keys: Vec<String> = order.iter().map(|&k| agents[k].key.clone()).collect();
    let spread = spread.in_order(&order);
    let requests = Arc::new(Requests {
        keys,
        mix: s.mix,
        host: addrs[0].to_string(),
        path: "/v1/authorizations".into(),
    });
    let sampler = Sampler::start(pid);
    let agents_n = agents.len() as u64;
    let prime = if opts.no_prime {
        None
    } else {
        log(format!(
            "first pass: one request per agent ({} requests, each loads an agent's state)",
            thousands(agents_n)
        ));
        let plan = Plan {
            connections: s.connections,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(600),
            rate: None,
            limit: Some(agents_n),
            first_seq: 0,
        };
        Some(measured(rt.block_on(load::run_on(
            addrs.clone(),
            spread.clone(),
            requests.clone(),
            plan,
        ))))
    };
    if let Some(pg) = pg.filter(|pg| pg.citus.is_none()) {
        rt.block_on(pg.analyze())?;
    }
    let plan = s.plan(if prime.is_some() { agents_n } else { 0 });
    say_load(s);
    let usage = cpu::measure_all(pids.clone(), pg.is_some(), plan.warmup, plan.duration);
    let mut main = measured(rt.block_on(load::run_on(addrs, spread, requests, plan)));
    main.cpu = usage.join().unwrap_or_default();
    let peak_sampled_kib = sampler.finish();
    let end = server::memory(pid).unwrap_or_default();
    let (crashed, stop_problem) = stop(servers);
    Ok(Run {
        prime,
        main,
        idle,
        end,
        peak_sampled_kib,
        crashed,
        stop_problem,
    })
}

/// The load about to be measured, on stderr, with a warning when its rate puts agents
/// over the velocity limit.
fn say_load(s: &Settings) {
    if let Some(rate) = s.rate {
        let within = rate * (s.warmup + s.duration).min(60.0) / s.agents as f64;
        if within > 9.0 {
            log(format!(
                "warning: at {rate}/s each of {} agents sends about {within:.1} requests within 60 s (limit 10): expect deny_velocity",
                s.agents
            ));
        }
    }
    log(format!(
        "load: {} on {} connections, {} s warmup + {} s measured",
        match s.rate {
            Some(r) => format!("open loop at {r}/s"),
            None => "closed loop".into(),
        },
        s.connections,
        s.warmup,
        s.duration
    ));
}

/// The servers stopped: the first that had exited during the run (with its log's tail),
/// and the last that did not stop cleanly.
fn stop(mut servers: Vec<Server>) -> (Option<String>, Option<String>) {
    let crashed = servers.iter_mut().find_map(|srv| {
        srv.exited()
            .map(|status| format!("{status}\n{}", srv.log_tail(20)))
    });
    let mut stop_problem = None;
    for srv in servers {
        match srv.stop() {
            Ok(status) if status.success() => {}
            Ok(status) => stop_problem = Some(status.to_string()),
            Err(e) => stop_problem = Some(e.to_string()),
        }
    }
    (crashed, stop_problem)
}

/// The ceiling: the same load generator, closed loop, on a bare axum JSON echo.
fn bench_echo(
    s: &Settings,
    opts: &Opts,
    rt: &tokio::runtime::Runtime,
    cores: usize,
) -> Result<Measured> {
    let workers = opts.echo_threads.unwrap_or(cores);
    let server = echo::start(workers)?;
    // Requests of the same size: keys shaped like agent keys (ak_sandbox_ + 32 chars).
    let keys = (0..s.agents)
        .map(|i| format!("ak_sandbox_{i:032}"))
        .collect();
    let requests = Arc::new(Requests {
        keys,
        mix: s.mix,
        host: server.addr.to_string(),
        path: "/echo".into(),
    });
    log(format!(
        "echo ceiling: closed loop on {} connections, {} s warmup + {} s measured ({workers} server threads)",
        s.connections, s.warmup, s.duration
    ));
    let plan = Plan {
        rate: None,
        ..s.plan(0)
    };
    let usage = cpu::measure(None, plan.warmup, plan.duration);
    let outcome = rt.block_on(load::run(server.addr, requests, plan));
    server.stop();
    let mut m = measured(outcome);
    m.cpu = usage.join().unwrap_or_default();
    // The echo answers 200.
    let ok = m.outcome.statuses.get(&200).copied().unwrap_or(0);
    m.throughput = ok as f64 / m.outcome.window.as_secs_f64();
    Ok(m)
}

fn run(opts: &Opts) -> Result<bool> {
    let s = settings(opts)?;
    let (cores, model) = machine();
    let base = opts.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("mandate-bench-")
        .tempdir_in(&base)
        .ctx(format!(
            "creating a temporary directory in {}",
            base.display()
        ))?;
    let rt = runtime(opts.client_threads)?;

    let ours = if opts.echo_only {
        None
    } else {
        Some(bench_server(&s, opts, &rt, dir.path())?)
    };
    let echo = if opts.no_echo {
        None
    } else {
        Some(bench_echo(&s, opts, &rt, cores)?)
    };

    let mut out = report::Out::default();
    report::report_load(&mut out, &s, opts, cores, &model);
    let (healthy, smoke_ok) = match &ours {
        Some(r) => report::report_server(&mut out, &s, opts, r),
        None => (true, true),
    };
    if let Some(e) = &echo {
        report::report_echo(&mut out, e, ours.as_ref(), s.rate);
    }
    print!("{}", out.text);
    if opts.json {
        println!("{}", Value::Object(out.json));
    }

    if opts.keep {
        let kept = dir.keep();
        log(format!("kept {}", kept.display()));
    }
    if opts.smoke {
        println!(
            "smoke: {}",
            if smoke_ok {
                "ok"
            } else {
                "FAILED (no 201, a 5xx, an I/O error, or a crash)"
            }
        );
        return Ok(smoke_ok);
    }
    Ok(healthy)
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    let outcome = match opts.figures {
        Some(mode) => draw_figures(mode),
        None => run(&opts),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("mandate-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--figures`: the docs' figures drawn from the records, or checked, from the working
/// directory (the repository's root).
fn draw_figures(mode: crate::opts::FiguresArg) -> Result<bool> {
    let root = std::env::current_dir()?;
    match mode {
        crate::opts::FiguresArg::Write => figures::write(&root)?,
        crate::opts::FiguresArg::Check => figures::check(&root)?,
    }
    Ok(true)
}
