//! `mandate-bench`: starts `mandate-server` on a temporary database, creates agents and
//! mandates through the API, drives `POST /v1/authorizations` with a fixed request mix,
//! and reports throughput, latency percentiles, the verdict mix, the server's memory, the
//! database's growth per decision, and the ratio to a bare axum JSON echo measured by the
//! same load generator in the same run. See README.md.
//!
//! This file holds the run's sequence (setup, prime, warmup, measure, report) in order, so
//! that one read shows what a figure measured; the options are in `opts.rs`, the parts in
//! the other modules below.

mod cpu;
mod echo;
mod error;
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
use serde_json::{Value, json};

use crate::error::{Context, Result};
use crate::load::{Outcome, Plan, Requests, Spread};
use crate::opts::{Opts, Settings, settings};
use crate::report::{
    Percentiles, filesystem, machine, mib, p99_by_second, percentiles, shares, spread_line,
    thousands, verdict_mix,
};
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

fn non_201(outcome: &Outcome) -> String {
    let parts: Vec<String> = outcome
        .statuses
        .iter()
        .filter(|(s, _)| **s != 201)
        .map(|(s, n)| format!("{s} × {}", thousands(*n)))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn status_json(outcome: &Outcome) -> Value {
    Value::Object(
        outcome
            .statuses
            .iter()
            .map(|(s, n)| (s.to_string(), json!(n)))
            .collect(),
    )
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

    // 1. Organization, keys, agents and mandates.
    log(format!(
        "onboarding on {}",
        match &pg {
            Some(pg) => format!("PostgreSQL database {}", pg.name),
            None => db.clone(),
        }
    ));
    let org = server::onboard(&s.server, &db, "bench")?;
    server::set_rate(&s.server, &db, &org.sandbox_key, 1_000_000)?;
    let setup_started = Instant::now();
    let srv = Server::start(&s.server, &db, &dir.join("setup.log"))?;
    log(format!(
        "creating {} agents and mandates on {}",
        s.agents, srv.api
    ));
    let agents = rt.block_on(async {
        setup::enforce(srv.api, &org.sandbox_key).await?;
        setup::create_agents(srv.api, &org.sandbox_key, s.agents, opts.setup_connections).await
    });
    let issuer = srv.issuer.clone();
    let setup_log_tail = srv.log_tail(20);
    let stopped = srv.stop();
    let agents = agents.map_err(|e| error::Error(format!("{e}\nserver log:\n{setup_log_tail}")))?;
    stopped?;
    let setup_secs = setup_started.elapsed().as_secs_f64();

    // 2. History.
    let mut prefill_secs = 0.0;
    if s.prefill > 0 {
        log(format!("prefilling {} decisions", thousands(s.prefill)));
        let spec = prefill::Spec {
            org_id: &org.org_id,
            policy_version: &org.policy_version,
            issuer: &issuer,
            agents: &agents,
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
    let mut servers = Vec::new();
    for k in 0..opts.servers {
        servers.push(Server::start(
            &s.server,
            &db,
            &dir.join(format!("serve{k}.log")),
        )?);
    }
    let addrs: Vec<_> = servers.iter().map(|srv| srv.api).collect();
    let pids: Vec<u32> = servers.iter().map(Server::pid).collect();
    let spread = Spread::from(opts.spread);
    let pid = pids[0];
    std::thread::sleep(Duration::from_millis(200));
    let idle = server::memory(pid).unwrap_or_default();
    let requests = Arc::new(Requests {
        keys: agents.iter().map(|a| a.key.clone()).collect(),
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
            spread,
            requests.clone(),
            plan,
        ))))
    };
    let plan = s.plan(if prime.is_some() { agents_n } else { 0 });
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
    let usage = cpu::measure_all(pids.clone(), pg.is_some(), plan.warmup, plan.duration);
    let mut main = measured(rt.block_on(load::run_on(addrs, spread, requests, plan)));
    main.cpu = usage.join().unwrap_or_default();
    let peak_sampled_kib = sampler.finish();
    let end = server::memory(pid).unwrap_or_default();
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
    let size_after = size(&pg)?;
    let pg_name = pg.as_ref().map(|pg| pg.name.clone());
    if let Some(pg) = pg {
        rt.block_on(pg.finish())?;
    }
    Ok(ServerRun {
        db: match &pg_name {
            Some(name) => format!("{name} on the --db cluster"),
            None => db,
        },
        servers: opts.servers,
        fs,
        setup_secs,
        prefill_secs,
        prime,
        main,
        idle,
        end,
        peak_sampled_kib,
        size_before,
        size_after,
        crashed,
        stop_problem,
    })
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

fn measured_json(m: &Measured) -> Value {
    let (server_us, bench_us) = m.cpu.per_request_us(m.throughput);
    json!({
        "throughput_per_s": m.throughput,
        "seconds": m.outcome.window.as_secs_f64(),
        "latency_us": m.latency.json(),
        "latency_from_send_us": m.service.map(|p| p.json()),
        "p99_by_second_us": m.p99_by_second,
        "statuses": status_json(&m.outcome),
        "io_errors": m.outcome.io_errors,
        "first_error": m.outcome.first_error,
        "requests_sent": m.outcome.total_sent,
        "cpu_cores": {"server": m.cpu.server, "database": m.cpu.database, "bench": m.cpu.bench, "other": m.cpu.other},
        "cpu_us_per_request": {"server": server_us, "bench": bench_us},
        "server_threads_us_per_request": Value::Object(m.cpu.server_threads.iter()
            .map(|t| (t.name.clone(), json!({
                "total": t.cores * 1e6 / m.throughput.max(1.0),
                "kernel": t.kernel_cores * 1e6 / m.throughput.max(1.0),
            })))
            .collect()),
        "server_write_bytes_per_s": {"write_calls": m.cpu.server_write_calls_per_s,
            "to_disk": m.cpu.server_disk_writes_per_s},
    })
}

#[allow(clippy::too_many_lines)]
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

    let mut text = String::new();
    let mut line = |l: String| {
        text.push_str(&l);
        text.push('\n');
    };
    let mut result = serde_json::Map::new();
    line("mandate-bench: POST /v1/authorizations".into());
    line(format!("machine       {cores} cores (nproc), {model}"));
    line(format!(
        "load          {}, {} connections, {} s warmup + {} s measured, mix allow/review/deny {}/{}/{}, client threads {}",
        match s.rate {
            Some(r) => format!("open loop at {r}/s (latency from scheduled time)"),
            None => "closed loop".into(),
        },
        s.connections,
        s.warmup,
        s.duration,
        s.mix.allow,
        s.mix.review,
        s.mix.deny,
        opts.client_threads
    ));
    result.insert("machine".into(), json!({"cores": cores, "cpu": model}));
    result.insert(
        "load".into(),
        json!({"mode": if s.rate.is_some() { "open" } else { "closed" }, "rate": s.rate,
            "connections": s.connections, "warmup_s": s.warmup, "duration_s": s.duration,
            "mix": {"allow": s.mix.allow, "review": s.mix.review, "deny": s.mix.deny},
            "client_threads": opts.client_threads, "agents": s.agents}),
    );

    let mut healthy = true;
    let mut smoke_ok = true;
    if let Some(r) = &ours {
        let o = &r.main.outcome;
        let run_secs = s.warmup + s.duration;
        let decisions = o.total_201 + r.prime.as_ref().map_or(0, |p| p.outcome.total_201);
        let growth = r.size_after.saturating_sub(r.size_before);
        let per_decision = growth as f64 / decisions.max(1) as f64;
        let (mix_overall, mix_by_kind) = verdict_mix(o);
        let per_agent_rate = r.main.throughput / s.agents as f64;
        let per_agent_minute =
            per_agent_rate * run_secs.min(60.0) + if r.prime.is_some() { 1.0 } else { 0.0 };
        let server_errors: u64 = o
            .statuses
            .iter()
            .chain(r.prime.iter().flat_map(|p| p.outcome.statuses.iter()))
            .filter(|(s, _)| **s >= 500)
            .map(|(_, n)| n)
            .sum();

        line(format!(
            "server        {}{}",
            s.server.display(),
            if r.servers > 1 {
                format!(
                    " × {} processes on one database, requests spread by {}",
                    r.servers,
                    match Spread::from(opts.spread) {
                        Spread::Agent => "agent",
                        Spread::Request => "request",
                    }
                )
            } else {
                String::new()
            }
        ));
        line(format!("database      {} ({})", r.db, r.fs));
        line(format!(
            "setup         {} agents with mandates in {:.1} s; prefill {} decisions{}",
            thousands(s.agents as u64),
            r.setup_secs,
            thousands(s.prefill),
            if s.prefill > 0 {
                format!(" in {:.1} s", r.prefill_secs)
            } else {
                String::new()
            }
        ));
        line(String::new());
        if let Some(p) = &r.prime {
            line(format!(
                "first pass    {} 201/s: one request per agent, each loading its state from the database ({} in {:.1} s), latency {}",
                thousands(p.throughput.round() as u64),
                thousands(p.outcome.created()),
                p.outcome.window.as_secs_f64(),
                p.latency.line()
            ));
        }
        line(format!(
            "throughput    {} 201/s  ({} in {} s)",
            thousands(r.main.throughput.round() as u64),
            thousands(o.created()),
            s.duration
        ));
        line(format!("latency       {}", r.main.latency.line()));
        if let Some(service) = &r.main.service {
            line(format!("  from send   {}", service.line()));
        }
        line(format!(
            "  p99/second  {}",
            spread_line(&r.main.p99_by_second)
        ));
        line(format!("verdicts      {}", shares(&mix_overall)));
        for kind in ["allow", "review", "deny"] {
            if let Some(Value::Object(m)) = mix_by_kind.get(kind) {
                let mut counts: Vec<(String, u64)> = m
                    .iter()
                    .map(|(v, n)| (v.clone(), n.as_u64().unwrap_or(0)))
                    .collect();
                counts.sort_by_key(|b| std::cmp::Reverse(b.1));
                line(format!("  {kind:<11} {}", shares(&counts)));
            }
        }
        line(format!("cpu           {}", r.main.cpu.line()));
        let (server_us, bench_us) = r.main.cpu.per_request_us(r.main.throughput);
        let database_us = r.main.cpu.database * 1e6 / r.main.throughput.max(1.0);
        line(format!(
            "cpu/request   server {server_us:.1} µs{}, load generator {bench_us:.1} µs (CPU time per 201; steadier between runs than throughput)",
            if r.main.cpu.database > 0.0 {
                format!(", database {database_us:.1} µs")
            } else {
                String::new()
            }
        ));
        line(format!(
            "  by thread   {} (µs per 201, kernel's part in parentheses; presign runs only in idle time)",
            r.main.cpu.threads_line(r.main.throughput)
        ));
        if r.main.cpu.other > 0.2 {
            line(format!(
                "  warning     other processes used {:.2} cores while measuring: the machine was not quiet",
                r.main.cpu.other
            ));
        }
        let per = |bytes_per_s: f64| bytes_per_s / r.main.throughput.max(1.0);
        line(format!(
            "server writes {} /s in write calls ({:.0} bytes per decision), {} /s to disk ({:.0} bytes per decision)",
            mib(r.main.cpu.server_write_calls_per_s as u64),
            per(r.main.cpu.server_write_calls_per_s),
            mib(r.main.cpu.server_disk_writes_per_s as u64),
            per(r.main.cpu.server_disk_writes_per_s)
        ));
        line(format!("non-201       {}", non_201(o)));
        line(format!(
            "errors        {}{}",
            thousands(o.io_errors),
            o.first_error
                .as_ref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        ));
        line(format!(
            "per agent     {per_agent_rate:.2} requests/s; {per_agent_minute:.1} within 60 s (velocity limit 10)"
        ));
        if per_agent_minute > 9.0 {
            line(format!(
                "  warning     close to or above 10 requests per agent within 60 s: deny_velocity is expected; about {} agents would avoid it at this rate and run length",
                thousands((r.main.throughput * run_secs.min(60.0) / 9.0).ceil() as u64)
            ));
        }
        if r.prime.is_none() {
            let first_pass = s.agents as f64 / r.main.throughput.max(1.0);
            if first_pass > s.warmup {
                line(format!(
                    "  note        without the first pass, loading each agent's state (~{first_pass:.1} s at this rate) ran past the {} s warmup",
                    s.warmup
                ));
            }
        }
        line(format!(
            "server memory RSS {} idle before load, {} at end, {} peak sampled, VmHWM {}",
            mib(r.idle.rss_kib * 1024),
            mib(r.end.rss_kib * 1024),
            mib(r.peak_sampled_kib * 1024),
            mib(r.end.hwm_kib * 1024)
        ));
        line(format!(
            "database      {} before, {} after (SQLite checkpointed; PostgreSQL pg_database_size); {:.0} bytes per decision over {} decisions",
            mib(r.size_before),
            mib(r.size_after),
            per_decision,
            thousands(decisions)
        ));
        if let Some(crash) = &r.crashed {
            line(format!("SERVER EXITED DURING THE RUN: {crash}"));
        } else if let Some(problem) = &r.stop_problem {
            line(format!("server stop   not clean: {problem}"));
        }
        healthy = r.crashed.is_none() && r.stop_problem.is_none();
        smoke_ok = healthy && o.created() > 0 && server_errors == 0 && o.io_errors == 0;

        result.insert("server".into(), json!(s.server.display().to_string()));
        result.insert(
            "database".into(),
            json!({"path": r.db, "filesystem": r.fs, "servers": r.servers,
                "bytes_before": r.size_before, "bytes_after": r.size_after,
                "bytes_per_decision": per_decision, "decisions": decisions}),
        );
        result.insert(
            "setup".into(),
            json!({"agents": s.agents, "seconds": r.setup_secs, "prefill": s.prefill,
                "prefill_seconds": r.prefill_secs}),
        );
        result.insert(
            "first_pass".into(),
            json!(r.prime.as_ref().map(measured_json)),
        );
        let mut main = measured_json(&r.main);
        if let Value::Object(m) = &mut main {
            m.insert(
                "verdicts".into(),
                Value::Object(
                    mix_overall
                        .iter()
                        .map(|(v, n)| (v.clone(), json!(n)))
                        .collect(),
                ),
            );
            m.insert("verdicts_by_request_kind".into(), mix_by_kind);
        }
        result.insert("authorizations".into(), main);
        result.insert(
            "per_agent".into(),
            json!({"rate_per_s": per_agent_rate, "within_60_s": per_agent_minute}),
        );
        result.insert(
            "server_memory_kib".into(),
            json!({"idle": r.idle.rss_kib, "end": r.end.rss_kib,
                "peak_sampled": r.peak_sampled_kib, "vm_hwm": r.end.hwm_kib}),
        );
        result.insert("server_crashed".into(), json!(r.crashed.is_some()));
        result.insert("server_clean_exit".into(), json!(r.stop_problem.is_none()));
    }
    if let Some(e) = &echo {
        line(format!(
            "echo ceiling  {} 200/s, latency {}",
            thousands(e.throughput.round() as u64),
            e.latency.line()
        ));
        line(format!(
            "  echo cpu    echo server and load generator {:.2}, other processes {:.2} (cores)",
            e.cpu.bench, e.cpu.other
        ));
        result.insert("echo".into(), measured_json(e));
        // In open loop our throughput is the chosen rate: no ratio.
        if let (Some(r), None) = (&ours, s.rate) {
            let ratio = r.main.throughput / e.throughput.max(1.0);
            line(format!("ratio         {ratio:.3} of the echo ceiling"));
            result.insert("echo_ratio".into(), json!(ratio));
        }
        if e.outcome.io_errors > 0 {
            line(format!(
                "echo errors   {} (first: {})",
                e.outcome.io_errors,
                e.outcome.first_error.as_deref().unwrap_or("")
            ));
        }
    }
    print!("{text}");
    if opts.json {
        println!("{}", Value::Object(result));
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
    match run(&opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("mandate-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
