//! Figures: percentiles, the machine, and the text and JSON report, written part by part
//! (the load, the server run, the echo ceiling) from what `main.rs` measured. One file a
//! little over 600 lines: every line of the report, in the order it is printed, with the
//! helpers that format them.

use std::path::Path;

use serde_json::{Value, json};

use crate::load::Outcome;
use crate::opts::{Opts, Settings, SpreadArg};
use crate::{Measured, ServerRun};

/// Latency percentiles in µs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Percentiles {
    /// Median.
    pub p50: u32,
    /// 90th.
    pub p90: u32,
    /// 99th.
    pub p99: u32,
    /// 99.9th.
    pub p999: u32,
    /// Largest.
    pub max: u32,
}

/// Percentiles of `values` (sorted in place); all zero when empty.
pub fn percentiles(values: &mut [u32]) -> Percentiles {
    values.sort_unstable();
    let at = |q: f64| -> u32 {
        if values.is_empty() {
            return 0;
        }
        let rank = (q * values.len() as f64).ceil() as usize;
        values[rank.clamp(1, values.len()) - 1]
    };
    Percentiles {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        p999: at(0.999),
        max: values.last().copied().unwrap_or(0),
    }
}

/// Fewest answers in a second for its p99 to be reported (the p99 of 100 is their largest
/// but one).
pub const MIN_PER_SECOND: usize = 100;

/// The p99 of each second of the window, µs, from each answer's latency and the second it
/// completed in (`seconds[i]` for `latencies[i]`), oldest second first. Seconds with fewer
/// than [`MIN_PER_SECOND`] answers (a run's ragged end) are left out. One p99 over a run
/// cannot tell a tail spread over every second from a stall in one of them; this can.
pub fn p99_by_second(latencies: &[u32], seconds: &[u16]) -> Vec<u32> {
    let buckets = seconds.iter().max().map_or(0, |&s| usize::from(s) + 1);
    let mut by_second: Vec<Vec<u32>> = vec![Vec::new(); buckets];
    for (&latency, &second) in latencies.iter().zip(seconds) {
        by_second[usize::from(second)].push(latency);
    }
    by_second
        .iter_mut()
        .filter(|values| values.len() >= MIN_PER_SECOND)
        .map(|values| percentiles(values).p99)
        .collect()
}

/// Smallest, median and largest of `values` (µs), as one line in ms.
pub fn spread_line(values: &[u32]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    match (sorted.first(), sorted.last()) {
        (Some(min), Some(max)) => format!(
            "min {}  median {}  max {}  (ms, {} seconds)",
            ms(*min),
            ms(sorted[(sorted.len() - 1) / 2]),
            ms(*max),
            sorted.len()
        ),
        _ => "none (no second had enough answers)".into(),
    }
}

impl Percentiles {
    /// As JSON, µs.
    pub fn json(&self) -> Value {
        json!({"p50": self.p50, "p90": self.p90, "p99": self.p99, "p99_9": self.p999, "max": self.max})
    }

    /// One line, in ms.
    pub fn line(&self) -> String {
        format!(
            "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (ms)",
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.p999),
            ms(self.max)
        )
    }
}

fn ms(us: u32) -> String {
    format!("{:.3}", f64::from(us) / 1000.0)
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The machine: core count and CPU model.
pub fn machine() -> (usize, String) {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    (cores, model)
}

/// The type of the filesystem holding `path` (longest matching mount point in
/// `/proc/mounts`); a tmpfs would make fsync free and the figures meaningless.
pub fn filesystem(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".into();
    };
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_dev), Some(point), Some(kind)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if path.starts_with(point) && best.as_ref().is_none_or(|(len, _)| point.len() > *len) {
            best = Some((point.len(), kind.to_owned()));
        }
    }
    best.map(|(_, k)| k).unwrap_or_else(|| "unknown".into())
}

/// The verdict mix of an outcome: overall shares, and per request kind.
pub fn verdict_mix(outcome: &Outcome) -> (Vec<(String, u64)>, Value) {
    let mut overall: Vec<(String, u64)> = Vec::new();
    let mut by_kind = serde_json::Map::new();
    for ((kind, verdict), n) in &outcome.verdicts {
        match overall.iter_mut().find(|(v, _)| v == verdict) {
            Some(e) => e.1 += n,
            None => overall.push((verdict.clone(), *n)),
        }
        let entry = by_kind
            .entry(kind.name())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(m) = entry {
            m.insert(verdict.clone(), json!(n));
        }
    }
    overall.sort_by_key(|b| std::cmp::Reverse(b.1));
    (overall, Value::Object(by_kind))
}

/// `allow 80.1 %  review 9.9 %  ...`.
pub fn shares(counts: &[(String, u64)]) -> String {
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    counts
        .iter()
        .map(|(v, n)| format!("{v} {:.1} %", 100.0 * *n as f64 / total.max(1) as f64))
        .collect::<Vec<_>>()
        .join("  ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_rank() {
        let mut v: Vec<u32> = (1..=1000).rev().collect();
        let p = percentiles(&mut v);
        assert_eq!(
            (p.p50, p.p90, p.p99, p.p999, p.max),
            (500, 900, 990, 999, 1000)
        );
        assert_eq!(percentiles(&mut []).max, 0);
    }

    #[test]
    fn p99_is_taken_second_by_second() {
        // Second 0: 200 answers of 1..=200 µs; second 1: 150 of 1,000 µs and a stall of
        // two at 9,000 µs; second 2: a ragged end of 10 answers, left out.
        let mut latencies: Vec<u32> = (1..=200).collect();
        let mut seconds = vec![0u16; 200];
        latencies.extend(std::iter::repeat_n(1_000, 150));
        latencies.extend([9_000, 9_000]);
        seconds.extend(std::iter::repeat_n(1u16, 152));
        latencies.extend(std::iter::repeat_n(50_000, 10));
        seconds.extend(std::iter::repeat_n(2u16, 10));
        // Interleave, as answers from many connections arrive.
        let mut pairs: Vec<(u32, u16)> = latencies.into_iter().zip(seconds).collect();
        pairs.sort_by_key(|&(l, s)| (l % 7, s));
        let (latencies, seconds): (Vec<u32>, Vec<u16>) = pairs.into_iter().unzip();
        assert_eq!(p99_by_second(&latencies, &seconds), vec![198, 9_000]);
        assert_eq!(p99_by_second(&[], &[]), Vec::<u32>::new());
        assert_eq!(
            spread_line(&[9_000, 198, 4_000]),
            "min 0.198  median 4.000  max 9.000  (ms, 3 seconds)"
        );
    }

    #[test]
    fn formats() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(thousands(123_456), "123,456");
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

/// The report as it is written: its text, a line at a time, and its JSON (`--json`).
#[derive(Default)]
pub(crate) struct Out {
    pub(crate) text: String,
    pub(crate) json: serde_json::Map<String, Value>,
}

impl Out {
    fn line(&mut self, l: String) {
        self.text.push_str(&l);
        self.text.push('\n');
    }

    fn insert(&mut self, key: &str, value: Value) {
        self.json.insert(key.into(), value);
    }
}

/// The report's head: the machine and the load.
pub(crate) fn report_load(out: &mut Out, s: &Settings, opts: &Opts, cores: usize, model: &str) {
    out.line("mandate-bench: POST /v1/authorizations".into());
    out.line(format!("machine       {cores} cores (nproc), {model}"));
    out.line(format!(
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
    out.insert("machine", json!({"cores": cores, "cpu": model}));
    out.insert(
        "load",
        json!({"mode": if s.rate.is_some() { "open" } else { "closed" }, "rate": s.rate,
            "connections": s.connections, "warmup_s": s.warmup, "duration_s": s.duration,
            "mix": {"allow": s.mix.allow, "review": s.mix.review, "deny": s.mix.deny},
            "client_threads": opts.client_threads, "agents": s.agents}),
    );
}

/// What the report derives from a server run.
struct Figures {
    /// The run's length, warmup included, s.
    run_secs: f64,
    /// Decisions made (first pass and measured run).
    decisions: u64,
    /// Database bytes per decision.
    per_decision: f64,
    mix_overall: Vec<(String, u64)>,
    mix_by_kind: Value,
    per_agent_rate: f64,
    /// Requests per agent within 60 s (the velocity rule's window).
    per_agent_minute: f64,
    /// 5xx answers, first pass included.
    server_errors: u64,
}

impl Figures {
    fn of(s: &Settings, r: &ServerRun) -> Self {
        let o = &r.main.outcome;
        let run_secs = s.warmup + s.duration;
        let decisions = o.total_201 + r.prime.as_ref().map_or(0, |p| p.outcome.total_201);
        let growth = r.size_after.saturating_sub(r.size_before);
        let (mix_overall, mix_by_kind) = verdict_mix(o);
        let per_agent_rate = r.main.throughput / s.agents as f64;
        Self {
            run_secs,
            decisions,
            per_decision: growth as f64 / decisions.max(1) as f64,
            mix_overall,
            mix_by_kind,
            per_agent_rate,
            per_agent_minute: per_agent_rate * run_secs.min(60.0)
                + if r.prime.is_some() { 1.0 } else { 0.0 },
            server_errors: o
                .statuses
                .iter()
                .chain(r.prime.iter().flat_map(|p| p.outcome.statuses.iter()))
                .filter(|(s, _)| **s >= 500)
                .map(|(_, n)| n)
                .sum(),
        }
    }
}

/// The server run's part of the report; whether the server stayed healthy, and whether
/// the smoke run passed.
pub(crate) fn report_server(
    out: &mut Out,
    s: &Settings,
    opts: &Opts,
    r: &ServerRun,
) -> (bool, bool) {
    let f = Figures::of(s, r);
    let o = &r.main.outcome;
    report_setup(out, s, opts, r);
    report_measured(out, s, r, &f);
    report_cpu(out, r);
    report_outcome(out, s, r, &f);
    let healthy = r.crashed.is_none() && r.stop_problem.is_none();
    let smoke_ok = healthy && o.created() > 0 && f.server_errors == 0 && o.io_errors == 0;
    server_json(out, s, r, f);
    (healthy, smoke_ok)
}

/// The server, its database and the setup.
fn report_setup(out: &mut Out, s: &Settings, opts: &Opts, r: &ServerRun) {
    out.line(format!(
        "server        {}{}",
        s.server.display(),
        if r.servers > 1 {
            format!(
                " × {} processes on one database, requests spread by {}",
                r.servers,
                match opts.spread {
                    SpreadArg::Agent => "agent",
                    SpreadArg::Request => "request",
                    SpreadArg::Worker => "organization, to the server on its worker",
                }
            )
        } else {
            String::new()
        }
    ));
    out.line(format!("database      {} ({})", r.db, r.fs));
    out.line(format!(
        "setup         {} agents with mandates{} in {:.1} s; prefill {} decisions{}",
        thousands(s.agents as u64),
        if r.orgs > 1 {
            format!(" in {} organizations", r.orgs)
        } else {
            String::new()
        },
        r.setup_secs,
        thousands(s.prefill),
        if s.prefill > 0 {
            format!(" in {:.1} s", r.prefill_secs)
        } else {
            String::new()
        }
    ));
    out.line(String::new());
}

/// The first pass and the measured run: throughput, latency, verdicts.
fn report_measured(out: &mut Out, s: &Settings, r: &ServerRun, f: &Figures) {
    let o = &r.main.outcome;
    if let Some(p) = &r.prime {
        out.line(format!(
            "first pass    {} 201/s: one request per agent, each loading its state from the database ({} in {:.1} s), latency {}",
            thousands(p.throughput.round() as u64),
            thousands(p.outcome.created()),
            p.outcome.window.as_secs_f64(),
            p.latency.line()
        ));
    }
    out.line(format!(
        "throughput    {} 201/s  ({} in {} s)",
        thousands(r.main.throughput.round() as u64),
        thousands(o.created()),
        s.duration
    ));
    out.line(format!("latency       {}", r.main.latency.line()));
    if let Some(service) = &r.main.service {
        out.line(format!("  from send   {}", service.line()));
    }
    out.line(format!(
        "  p99/second  {}",
        spread_line(&r.main.p99_by_second)
    ));
    out.line(format!("verdicts      {}", shares(&f.mix_overall)));
    for kind in ["allow", "review", "deny"] {
        if let Some(Value::Object(m)) = f.mix_by_kind.get(kind) {
            let mut counts: Vec<(String, u64)> = m
                .iter()
                .map(|(v, n)| (v.clone(), n.as_u64().unwrap_or(0)))
                .collect();
            counts.sort_by_key(|b| std::cmp::Reverse(b.1));
            out.line(format!("  {kind:<11} {}", shares(&counts)));
        }
    }
}

/// CPU time, by process and by thread, and what the server wrote.
fn report_cpu(out: &mut Out, r: &ServerRun) {
    out.line(format!("cpu           {}", r.main.cpu.line()));
    let (server_us, bench_us) = r.main.cpu.per_request_us(r.main.throughput);
    let database_us = r.main.cpu.database * 1e6 / r.main.throughput.max(1.0);
    out.line(format!(
        "cpu/request   server {server_us:.1} µs{}, load generator {bench_us:.1} µs (CPU time per 201; steadier between runs than throughput)",
        if r.main.cpu.database > 0.0 {
            format!(", database {database_us:.1} µs")
        } else {
            String::new()
        }
    ));
    out.line(format!(
        "  by thread   {} (µs per 201, kernel's part in parentheses; presign runs only in idle time)",
        r.main.cpu.threads_line(r.main.throughput)
    ));
    if r.main.cpu.other > 0.2 {
        out.line(format!(
            "  warning     other processes used {:.2} cores while measuring: the machine was not quiet",
            r.main.cpu.other
        ));
    }
    let per = |bytes_per_s: f64| bytes_per_s / r.main.throughput.max(1.0);
    out.line(format!(
        "server writes {} /s in write calls ({:.0} bytes per decision), {} /s to disk ({:.0} bytes per decision)",
        mib(r.main.cpu.server_write_calls_per_s as u64),
        per(r.main.cpu.server_write_calls_per_s),
        mib(r.main.cpu.server_disk_writes_per_s as u64),
        per(r.main.cpu.server_disk_writes_per_s)
    ));
}

/// Errors, the rate per agent (and what it means for the velocity rule), memory, the
/// database's growth, and how the server ended.
fn report_outcome(out: &mut Out, s: &Settings, r: &ServerRun, f: &Figures) {
    let o = &r.main.outcome;
    out.line(format!("non-201       {}", non_201(o)));
    out.line(format!(
        "errors        {}{}",
        thousands(o.io_errors),
        o.first_error
            .as_ref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    ));
    out.line(format!(
        "per agent     {:.2} requests/s; {:.1} within 60 s (velocity limit 10)",
        f.per_agent_rate, f.per_agent_minute
    ));
    if f.per_agent_minute > 9.0 {
        out.line(format!(
            "  warning     close to or above 10 requests per agent within 60 s: deny_velocity is expected; about {} agents would avoid it at this rate and run length",
            thousands((r.main.throughput * f.run_secs.min(60.0) / 9.0).ceil() as u64)
        ));
    }
    if r.prime.is_none() {
        let first_pass = s.agents as f64 / r.main.throughput.max(1.0);
        if first_pass > s.warmup {
            out.line(format!(
                "  note        without the first pass, loading each agent's state (~{first_pass:.1} s at this rate) ran past the {} s warmup",
                s.warmup
            ));
        }
    }
    out.line(format!(
        "server memory RSS {} idle before load, {} at end, {} peak sampled, VmHWM {}",
        mib(r.idle.rss_kib * 1024),
        mib(r.end.rss_kib * 1024),
        mib(r.peak_sampled_kib * 1024),
        mib(r.end.hwm_kib * 1024)
    ));
    out.line(format!(
        "database      {} before, {} after (SQLite checkpointed; PostgreSQL pg_database_size); {:.0} bytes per decision over {} decisions",
        mib(r.size_before),
        mib(r.size_after),
        f.per_decision,
        thousands(f.decisions)
    ));
    if let Some(crash) = &r.crashed {
        out.line(format!("SERVER EXITED DURING THE RUN: {crash}"));
    } else if let Some(problem) = &r.stop_problem {
        out.line(format!("server stop   not clean: {problem}"));
    }
}

/// The server run's figures in the JSON report.
fn server_json(out: &mut Out, s: &Settings, r: &ServerRun, f: Figures) {
    out.insert("server", json!(s.server.display().to_string()));
    out.insert(
        "database",
        json!({"path": r.db, "filesystem": r.fs, "servers": r.servers,
            "bytes_before": r.size_before, "bytes_after": r.size_after,
            "bytes_per_decision": f.per_decision, "decisions": f.decisions}),
    );
    out.insert(
        "setup",
        json!({"agents": s.agents, "orgs": r.orgs, "seconds": r.setup_secs, "prefill": s.prefill,
            "prefill_seconds": r.prefill_secs}),
    );
    out.insert("first_pass", json!(r.prime.as_ref().map(measured_json)));
    let mut main = measured_json(&r.main);
    if let Value::Object(m) = &mut main {
        m.insert(
            "verdicts".into(),
            Value::Object(
                f.mix_overall
                    .iter()
                    .map(|(v, n)| (v.clone(), json!(n)))
                    .collect(),
            ),
        );
        m.insert("verdicts_by_request_kind".into(), f.mix_by_kind);
    }
    out.insert("authorizations", main);
    out.insert(
        "per_agent",
        json!({"rate_per_s": f.per_agent_rate, "within_60_s": f.per_agent_minute}),
    );
    out.insert(
        "server_memory_kib",
        json!({"idle": r.idle.rss_kib, "end": r.end.rss_kib,
            "peak_sampled": r.peak_sampled_kib, "vm_hwm": r.end.hwm_kib}),
    );
    out.insert("server_crashed", json!(r.crashed.is_some()));
    out.insert("server_clean_exit", json!(r.stop_problem.is_none()));
}

/// The echo ceiling's part of the report, and our ratio to it (closed loop only: in open
/// loop our throughput is the chosen rate).
pub(crate) fn report_echo(
    out: &mut Out,
    e: &Measured,
    ours: Option<&ServerRun>,
    rate: Option<f64>,
) {
    out.line(format!(
        "echo ceiling  {} 200/s, latency {}",
        thousands(e.throughput.round() as u64),
        e.latency.line()
    ));
    out.line(format!(
        "  echo cpu    echo server and load generator {:.2}, other processes {:.2} (cores)",
        e.cpu.bench, e.cpu.other
    ));
    out.insert("echo", measured_json(e));
    if let (Some(r), None) = (ours, rate) {
        let ratio = r.main.throughput / e.throughput.max(1.0);
        out.line(format!("ratio         {ratio:.3} of the echo ceiling"));
        out.insert("echo_ratio", json!(ratio));
    }
    if e.outcome.io_errors > 0 {
        out.line(format!(
            "echo errors   {} (first: {})",
            e.outcome.io_errors,
            e.outcome.first_error.as_deref().unwrap_or("")
        ));
    }
}
