//! The server under test as a child process: the operator commands, `serve`, its memory,
//! and a graceful stop.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::bail;
use crate::error::{Context, Result};

/// What `onboard` printed.
#[derive(Debug, Clone)]
pub struct Onboarded {
    /// The organization's id.
    pub org_id: String,
    /// Its policy version.
    pub policy_version: String,
    /// The sandbox organization key.
    pub sandbox_key: String,
}

/// Variables every server command of the run gets (a PostgreSQL run's key-encryption key).
static ENV: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Sets the variables every server command of the run gets (once, before the first).
pub fn set_env(vars: Vec<(String, String)>) {
    let _ = ENV.set(vars);
}

fn env() -> &'static [(String, String)] {
    ENV.get().map_or(&[], Vec::as_slice)
}

fn run(bin: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(bin)
        .args(args)
        .envs(env().iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .ctx(format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{} {} failed ({}): {}",
            bin.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `mandate-server onboard --org ORG --db DB` (DB: a file path or a PostgreSQL URL).
pub fn onboard(bin: &Path, db: &str, org: &str) -> Result<Onboarded> {
    let out = run(bin, &["onboard", "--org", org, "--db", db])?;
    let mut onboarded = Onboarded {
        org_id: String::new(),
        policy_version: String::new(),
        sandbox_key: String::new(),
    };
    for line in out.lines() {
        if let Some(key) = line.trim().strip_prefix("sandbox key:") {
            onboarded.sandbox_key = key.trim().to_owned();
        }
        if let Some(rest) = line.strip_prefix(&format!("organization {org} (")) {
            if let Some((id, _)) = rest.split_once(')') {
                onboarded.org_id = id.to_owned();
            }
            if let Some((_, version)) = rest.split_once("policy version ") {
                onboarded.policy_version = version.trim().to_owned();
            }
        }
    }
    if onboarded.sandbox_key.is_empty() {
        bail!("onboard printed no `sandbox key:` line:\n{out}");
    }
    Ok(onboarded)
}

/// `mandate-server set-rate KEY --per-second N --db DB`.
pub fn set_rate(bin: &Path, db: &str, key: &str, per_second: u32) -> Result<()> {
    let rate = per_second.to_string();
    run(bin, &["set-rate", key, "--per-second", &rate, "--db", db])?;
    Ok(())
}

/// A running `mandate-server serve`.
pub struct Server {
    child: Child,
    /// The API host's address.
    pub api: SocketAddr,
    /// The issuer the server signs as.
    pub issuer: String,
    log: PathBuf,
}

/// Memory of a process, from `/proc/<pid>/status`, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// Resident set now (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set (`VmHWM`).
    pub hwm_kib: u64,
}

/// Reads a process's memory figures.
pub fn memory(pid: u32) -> Result<Memory> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ctx(format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
    })
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Server {
    /// Starts `serve` on `db` with both hosts on ephemeral ports, and `extra` arguments
    /// (`--no-migrate`); its stderr goes to `log`.
    pub fn start(bin: &Path, db: &str, extra: &[&str], log: &Path) -> Result<Self> {
        let log_file = File::create(log).ctx(format!("creating {}", log.display()))?;
        let mut child = Command::new(bin)
            .envs(env().iter().map(|(k, v)| (k, v)))
            .args(["serve", "--db"])
            .arg(db)
            .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .ctx(format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().ctx("no stdout pipe")?;
        let (tx, rx) = mpsc::channel::<String>();
        // Keep draining stdout for the server's whole life, so it never blocks on a pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(300);
        let (mut api, mut issuer) = (None, None);
        while api.is_none() || issuer.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    let line = line.trim();
                    if let Some(url) = line.strip_prefix("api:") {
                        let addr = url.trim().trim_start_matches("http://");
                        api = Some(
                            addr.parse::<SocketAddr>()
                                .ctx(format!("api address in {line:?}"))?,
                        );
                    } else if let Some(url) = line.strip_prefix("issuer:") {
                        issuer = Some(url.trim().to_owned());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        bail!(
                            "the server exited ({status}) before listening:\n{}",
                            tail(log, 20)
                        );
                    }
                    if left.is_zero() {
                        let _ = child.kill();
                        bail!("the server printed no `api:` line within 300 s");
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait().ok();
                    bail!(
                        "the server closed its stdout ({status:?}) before listening:\n{}",
                        tail(log, 20)
                    );
                }
            }
        }
        Ok(Self {
            child,
            api: api.ctx("no api address")?,
            issuer: issuer.ctx("no issuer")?,
            log: log.to_path_buf(),
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `None` while running, or how it ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// Sends SIGTERM (graceful shutdown) and waits up to 40 s, then kills.
    pub fn stop(mut self) -> Result<ExitStatus> {
        if let Some(status) = self.exited() {
            return Ok(status);
        }
        // The workspace forbids `unsafe`, so no libc::kill: use kill(1).
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        let deadline = Instant::now() + Duration::from_secs(40);
        while sent && Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill().ctx("killing the server")?;
        let status = self.child.wait().ctx("waiting for the server")?;
        bail!("the server did not stop within 40 s of SIGTERM; killed ({status})")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
