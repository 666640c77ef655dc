//! Who used the CPU during the measured window: the server, the load generator, and
//! everything else (a build running beside the benchmark shows up there), from
//! `/proc/stat` and `/proc/<pid>/stat`, in clock ticks of 1/100 s; the server's share by
//! thread name (`/proc/<pid>/task/*/stat`); and how much the server wrote (`/proc/<pid>/io`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc` times (`USER_HZ`, 100 on Linux).
const TICKS: f64 = 100.0;

/// Busy ticks of the whole machine, of the server, and of this process.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    at: Option<Instant>,
    machine: u64,
    server: u64,
    database: u64,
    me: u64,
    io: Io,
    /// The server's busy ticks by thread name (threads of one name summed).
    threads: BTreeMap<String, Ticks>,
}

/// The server's writes, from `/proc/<pid>/io`.
#[derive(Debug, Clone, Copy, Default)]
struct Io {
    /// Bytes passed to write system calls (`wchar`).
    wchar: u64,
    /// Bytes sent to the block layer (`write_bytes`).
    write_bytes: u64,
}

fn io(pid: u32) -> Io {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Io {
        wchar: field("wchar:"),
        write_bytes: field("write_bytes:"),
    }
}

/// Cores used on average over a window.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    /// By the server (all of its processes).
    pub server: f64,
    /// By the database's processes (PostgreSQL: every process named `postgres`); 0 for
    /// SQLite, which runs inside the server.
    pub database: f64,
    /// By this process (load generator and, in the echo run, the echo server).
    pub bench: f64,
    /// By every other process and the kernel's own work.
    pub other: f64,
    /// Bytes per second the server passed to write system calls.
    pub server_write_calls_per_s: f64,
    /// Bytes per second the server sent to the block layer.
    pub server_disk_writes_per_s: f64,
    /// The server's cores by thread name (`tokio-rt-worker`, `mandate-writer`, ...), most
    /// first: which stage a change moved. Threads that ended within the window are missed.
    pub server_threads: Vec<ThreadUse>,
}

/// User and kernel ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Ticks {
    user: u64,
    kernel: u64,
}

/// Cores used by the server's threads of one name.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadUse {
    /// The thread name (`tokio-rt-worker`, `mandate-writer`, ...).
    pub name: String,
    /// Cores, user and kernel time together.
    pub cores: f64,
    /// Of which in the kernel.
    pub kernel_cores: f64,
}

fn machine_busy() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait.
    Some(v.iter().sum::<u64>() - v.get(3).copied().unwrap_or(0) - v.get(4).copied().unwrap_or(0))
}

fn process_ticks(pid: &str) -> Option<u64> {
    stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime + stime of a `stat` line (of a process or of one of its threads).
fn stat_ticks(text: &str) -> Option<u64> {
    stat_user_kernel(text).map(|t| t.user + t.kernel)
}

/// utime and stime of a `stat` line.
fn stat_user_kernel(text: &str) -> Option<Ticks> {
    let after = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the line (utime, stime) are 11 and 12 after the command.
    Some(Ticks {
        user: fields.get(11)?.parse().ok()?,
        kernel: fields.get(12)?.parse().ok()?,
    })
}

/// The name between the parentheses of a `stat` line.
fn stat_name(text: &str) -> Option<&str> {
    Some(&text[text.find('(')? + 1..text.rfind(')')?])
}

/// Busy ticks of each of `pid`'s threads, summed by thread name.
fn thread_ticks(pid: u32) -> BTreeMap<String, Ticks> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if let (Some(name), Some(ticks)) = (stat_name(&text), stat_user_kernel(&text)) {
            let sum: &mut Ticks = by_name.entry(name.to_string()).or_default();
            sum.user += ticks.user;
            sum.kernel += ticks.kernel;
        }
    }
    by_name
}

/// Cores by thread name between two samples, most first; names absent from the first
/// sample (threads started meanwhile) count from zero.
fn thread_cores(
    a: &BTreeMap<String, Ticks>,
    b: &BTreeMap<String, Ticks>,
    cores: impl Fn(u64) -> f64,
) -> Vec<ThreadUse> {
    let mut out: Vec<ThreadUse> = b
        .iter()
        .map(|(name, t)| {
            let before = a.get(name).copied().unwrap_or_default();
            let user = t.user.saturating_sub(before.user);
            let kernel = t.kernel.saturating_sub(before.kernel);
            ThreadUse {
                name: name.clone(),
                cores: cores(user + kernel),
                kernel_cores: cores(kernel),
            }
        })
        .filter(|t| t.cores > 0.0)
        .collect();
    out.sort_by(|x, y| {
        y.cores
            .total_cmp(&x.cores)
            .then_with(|| x.name.cmp(&y.name))
    });
    out
}

/// The CPU ticks of every process named `postgres` (the database's backends and
/// helpers): the processes of a PostgreSQL on this machine.
fn database_ticks() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let pid = name.to_str()?;
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let text = std::fs::read_to_string(e.path().join("stat")).ok()?;
            (stat_name(&text)? == "postgres").then(|| stat_ticks(&text))?
        })
        .sum()
}

fn snapshot(servers: &[u32], database: bool) -> Snapshot {
    let mut threads: BTreeMap<String, Ticks> = BTreeMap::new();
    let mut io_sum = Io::default();
    for pid in servers {
        for (name, t) in thread_ticks(*pid) {
            let sum = threads.entry(name).or_default();
            sum.user += t.user;
            sum.kernel += t.kernel;
        }
        let one = io(*pid);
        io_sum.wchar += one.wchar;
        io_sum.write_bytes += one.write_bytes;
    }
    Snapshot {
        at: Some(Instant::now()),
        machine: machine_busy().unwrap_or(0),
        server: servers
            .iter()
            .filter_map(|p| process_ticks(&p.to_string()))
            .sum(),
        database: if database { database_ticks() } else { 0 },
        me: process_ticks("self").unwrap_or(0),
        io: io_sum,
        threads,
    }
}

/// Measures CPU use from `warmup` after now for `duration`, on a thread of its own.
pub fn measure(
    server: Option<u32>,
    warmup: Duration,
    duration: Duration,
) -> std::thread::JoinHandle<Usage> {
    measure_all(server.into_iter().collect(), false, warmup, duration)
}

/// [`measure`] of several server processes (their CPU summed, their threads merged by
/// name), and with `database` the database's processes on this machine apart.
pub fn measure_all(
    servers: Vec<u32>,
    database: bool,
    warmup: Duration,
    duration: Duration,
) -> std::thread::JoinHandle<Usage> {
    std::thread::spawn(move || {
        std::thread::sleep(warmup);
        let a = snapshot(&servers, database);
        std::thread::sleep(duration);
        let b = snapshot(&servers, database);
        let secs = match (a.at, b.at) {
            (Some(a), Some(b)) => (b - a).as_secs_f64().max(0.001),
            _ => 1.0,
        };
        let cores = |t: u64| t as f64 / TICKS / secs;
        let machine = b.machine.saturating_sub(a.machine);
        let server = b.server.saturating_sub(a.server);
        let db = b.database.saturating_sub(a.database);
        let me = b.me.saturating_sub(a.me);
        Usage {
            server: cores(server),
            database: cores(db),
            bench: cores(me),
            other: cores(machine.saturating_sub(server + db + me)),
            server_write_calls_per_s: b.io.wchar.saturating_sub(a.io.wchar) as f64 / secs,
            server_disk_writes_per_s: b.io.write_bytes.saturating_sub(a.io.write_bytes) as f64
                / secs,
            server_threads: thread_cores(&a.threads, &b.threads, cores),
        }
    })
}

impl Usage {
    /// CPU time per request, in µs, of the server and of the load generator, at
    /// `throughput` requests a second: what a change costs or saves, even when the
    /// machine's noise moves the throughput of identical runs more than the change does.
    pub fn per_request_us(&self, throughput: f64) -> (f64, f64) {
        let per = |cores: f64| cores * 1e6 / throughput.max(1.0);
        (per(self.server), per(self.bench))
    }

    /// The server's CPU time per request by thread name, µs, with the kernel's part in
    /// parentheses, at `throughput` requests a second: `tokio-rt-worker 30.1 (7.7), ...`.
    pub fn threads_line(&self, throughput: f64) -> String {
        let us = |cores: f64| cores * 1e6 / throughput.max(1.0);
        self.server_threads
            .iter()
            .map(|t| format!("{} {:.1} ({:.1})", t.name, us(t.cores), us(t.kernel_cores)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One line.
    pub fn line(&self) -> String {
        let database = if self.database > 0.0 {
            format!(", database {:.2}", self.database)
        } else {
            String::new()
        };
        format!(
            "server {:.2}{database}, load generator {:.2}, other processes {:.2} (cores, measured window)",
            self.server, self.bench, self.other
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_per_request_is_cores_over_throughput() {
        let usage = Usage {
            server: 1.5,
            bench: 0.2,
            ..Usage::default()
        };
        let (server, bench) = usage.per_request_us(20_000.0);
        assert!((server - 75.0).abs() < 1e-9, "{server}");
        assert!((bench - 10.0).abs() < 1e-9, "{bench}");
        // A run that answered nothing reports the whole CPU time, not a division by zero.
        let (idle, _) = usage.per_request_us(0.0);
        assert!((idle - 1_500_000.0).abs() < 1e-6, "{idle}");
    }

    #[test]
    fn a_thread_name_with_spaces_and_parentheses_is_read_whole() {
        let line = "4242 (odd (name) x) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(stat_name(line), Some("odd (name) x"));
        assert_eq!(stat_ticks(line), Some(300));
    }

    #[test]
    fn threads_are_summed_by_name_and_sorted_by_use() {
        let t = |user, kernel| Ticks { user, kernel };
        let a: BTreeMap<String, Ticks> = [
            ("tokio-rt-worker".into(), t(80, 20)),
            ("mandate-writer".into(), t(40, 10)),
        ]
        .into();
        let b: BTreeMap<String, Ticks> = [
            ("tokio-rt-worker".into(), t(120, 40)),
            ("mandate-writer".into(), t(70, 20)),
            ("presign".into(), t(20, 0)),
            ("idle".into(), t(0, 0)),
        ]
        .into();
        let cores = thread_cores(&a, &b, |t| t as f64 / 100.0);
        let names: Vec<&str> = cores.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["tokio-rt-worker", "mandate-writer", "presign"]);
        let usage = Usage {
            server_threads: cores,
            ..Usage::default()
        };
        assert_eq!(
            usage.threads_line(10_000.0),
            "tokio-rt-worker 60.0 (20.0), mandate-writer 40.0 (10.0), presign 20.0 (0.0)"
        );
    }
}
