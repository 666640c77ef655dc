//! A throwaway high-availability set for tests: etcd and PostgreSQL nodes managed by
//! Patroni on loopback, each group a primary and a synchronous standby (Patroni's
//! `synchronous_mode`), as docs/high-availability.md recommends. [`PatroniSet::start`] makes
//! one group (one primary); [`PatroniSet::start_citus`] makes a Citus cluster in Patroni's
//! Citus mode, a group for the coordinator (Citus group 0) and one for each worker, where the
//! coordinator's Patroni keeps `pg_dist_node` pointing at each worker group's primary.
//! [`PatroniSet::url`] is the host list of the first group (the coordinator's) a failover
//! manager hands out, with `target_session_attrs=read-write`.
//!
//! The set runs under a guardian shell whose standard input is a pipe from the test process,
//! as the PostgreSQL cluster beside this file does: when the test process exits, however it
//! exits, the pipe closes and the guardian kills Patroni, PostgreSQL and etcd and removes the
//! directory. When this process is root everything runs as the `postgres` user.
//!
//! Patroni (`patroni`, Debian's package) and etcd (`etcd`, Debian's `etcd-server`) are found
//! on PATH. Without them [`PatroniSet::start`] says `SKIPPED: …` once and gives `None`,
//! unless `MANDATE_REQUIRE_PATRONI=1` (CI), where it panics.
//!
//! Timing: a leader key lives 10 s (`ttl`) and Patroni loops every second, so a standby is
//! promoted about 10 s after its primary's machine is lost.
//!
//! Nodes are numbered across the set (`node0`, `node1`, … two a group, in group order); a
//! node's files in the set's directory carry its number (`node{n}.yml`, `data{n}`, …).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::postgres::{as_cluster_user, find_binaries, free_port, is_root, user_ids};

/// What the guardian runs: etcd and each of the `nodes` nodes' Patroni in the background
/// (their pids in the directory), then it waits for its standard input to close and kills
/// them all.
const GUARDIAN: &str = r#"
dir=$1; etcd=$2; patroni=$3; client=$4; peer=$5; nodes=$6
"$etcd" --name e0 --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "e0=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 </dev/null &
echo $! >"$dir/etcd.pid"
n=0
while [ "$n" -lt "$nodes" ]; do
    "$patroni" "$dir/node$n.yml" >"$dir/node$n.log" 2>&1 </dev/null &
    echo $! >"$dir/patroni$n.pid"
    n=$((n + 1))
done
cat >/dev/null
n=0
while [ "$n" -lt "$nodes" ]; do
    kill -9 "$(cat "$dir/patroni$n.pid")" 2>/dev/null
    [ -f "$dir/data$n/postmaster.pid" ] && kill -9 "$(head -1 "$dir/data$n/postmaster.pid")" 2>/dev/null
    n=$((n + 1))
done
kill -9 "$(cat "$dir/etcd.pid")" 2>/dev/null
sleep 0.5
rm -rf "$dir"
"#;

/// A node of the set.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its name in Patroni (`node0`, `node1`, …).
    pub name: String,
    /// Its group: the Citus group (0 the coordinator's, 1, 2, … the workers'), or 0 in a
    /// set of one group.
    pub group: u32,
    /// Its PostgreSQL port.
    pub port: u16,
    /// Its Patroni REST API port.
    pub api_port: u16,
}

/// A running set: etcd and Patroni-managed nodes, two a group.
pub struct PatroniSet {
    dir: PathBuf,
    guardian: Child,
    /// Every node, in group order; group 0's in the order of the URL's host list.
    pub nodes: Vec<Node>,
    /// In Patroni's Citus mode: the database Citus runs in (the URL's).
    citus: bool,
}

/// What Patroni's REST API says of the set: each member's name and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// `leader`, `sync_standby`, `replica`, …
    pub role: String,
    pub state: String,
}

fn required() -> bool {
    std::env::var("MANDATE_REQUIRE_PATRONI").is_ok_and(|v| v == "1")
}

/// `program` found on PATH.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

/// The database of a set in Citus mode: Patroni creates it on every group's primary, with
/// the `citus` extension.
const CITUS_DATABASE: &str = "citus";

/// One node's Patroni configuration; with `citus`, in Patroni's Citus mode.
fn config(dir: &Path, n: usize, node: &Node, client: u16, bin: &Path, citus: bool) -> String {
    // Patroni's Citus mode: the group, and the database Patroni creates with the extension
    // (it adds `citus` to shared_preload_libraries, sets wal_level = logical and
    // max_prepared_transactions, and on the coordinator's primary registers each worker
    // group's primary in pg_dist_node and moves it there after a failover).
    let citus_section = if citus {
        format!(
            "citus:\n  group: {}\n  database: {CITUS_DATABASE}\n",
            node.group
        )
    } else {
        String::new()
    };
    format!(
        r#"scope: mandate
name: {name}
{citus_section}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd3:
  host: 127.0.0.1:{client}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      parameters:
        max_connections: 300
        max_worker_processes: 64
        # The test loses a machine's processes, never its disk: what a commit waits for
        # is the standby's confirmation, as in production, not the local flush.
        fsync: "off"
  initdb:
  - encoding: UTF8
  - locale: C
  - no-sync
  pg_hba:
  - host replication replicator 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
  - local all all trust
postgresql:
  listen: 127.0.0.1:{port}
  connect_address: 127.0.0.1:{port}
  data_dir: {dir}/data{n}
  bin_dir: {bin}
  pgpass: {dir}/pgpass{n}
  # A standby's copy starts at once, not after a spread checkpoint of the primary (minutes
  # once the citus extension was created).
  basebackup:
  - checkpoint: fast
  authentication:
    replication:
      username: replicator
      password: replicator
    superuser:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: '{dir}'
"#,
        name = node.name,
        api = node.api_port,
        port = node.port,
        dir = dir.display(),
        bin = bin.display(),
    )
}

impl PatroniSet {
    /// Starts a set of one group (a primary and a synchronous standby) and waits (up to
    /// 120 s a try) until it has a leader and a synchronous standby; `None` without Patroni
    /// or etcd (after saying so), unless required.
    pub async fn start() -> Option<PatroniSet> {
        Self::start_groups(false, 1).await
    }

    /// Starts a Citus cluster in Patroni's Citus mode: a coordinator and `workers` workers,
    /// each a group of a primary and a synchronous standby. Returns once every group has a
    /// leader and a synchronous standby and the coordinator's `pg_dist_node` names each
    /// worker group's leader; `None` as [`PatroniSet::start`].
    pub async fn start_citus(workers: u32) -> Option<PatroniSet> {
        Self::start_groups(true, 1 + workers).await
    }

    async fn start_groups(citus: bool, groups: u32) -> Option<PatroniSet> {
        // Patroni needs PostgreSQL's other programs beside initdb (pg_ctl, pg_controldata,
        // pg_basebackup): the directory initdb really is in, links followed.
        let bin = find_binaries().map(|dir| {
            std::fs::canonicalize(dir.join("initdb"))
                .ok()
                .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
                .unwrap_or(dir)
        });
        let found = (on_path("patroni"), on_path("etcd"), bin);
        let (patroni, etcd, bin) = match found {
            (Some(patroni), Some(etcd), Ok(bin)) => (patroni, etcd, bin),
            (patroni, etcd, bin) => {
                let mut missing = Vec::new();
                if patroni.is_none() {
                    missing.push("patroni".to_owned());
                }
                if etcd.is_none() {
                    missing.push("etcd".to_owned());
                }
                if let Err(why) = bin {
                    missing.push(why.0);
                }
                let why = format!(
                    "the high-availability tests: {} not found (Debian: apt-get install patroni etcd-server postgresql)",
                    missing.join(", ")
                );
                assert!(!required(), "MANDATE_REQUIRE_PATRONI=1 but {why}");
                crate::skip::say(&why);
                return None;
            }
        };
        if citus && !citus_installed(&bin) {
            let why = format!(
                "the Citus high-availability tests: the citus extension is not installed in {}",
                bin.display()
            );
            assert!(!required(), "MANDATE_REQUIRE_PATRONI=1 but {why}");
            crate::skip::say(&why);
            return None;
        }
        // Three tries, each on fresh ports and a fresh directory: a port chosen free may be
        // taken by another test's process before the set binds it.
        let mut last = String::new();
        for _ in 0..3 {
            let set = Self::spawn(&etcd, &patroni, &bin, citus, groups);
            let ready = set.ready(Duration::from_secs(120)).await;
            match ready {
                Ok(()) => return Some(set),
                Err(seen) => last = format!("{seen}\n{}", set.logs()),
            }
        }
        panic!("the Patroni set did not come up (three tries); the last:\n{last}");
    }

    /// Waits until every group has a running leader and a synchronous standby and, in Citus
    /// mode, the coordinator lists every worker group's leader as an active primary; what
    /// was last seen after `limit`.
    async fn ready(&self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let mut seen = Vec::new();
            let mut led = true;
            for group in self.groups() {
                let members = self.members_of(group).await;
                led &= members
                    .iter()
                    .any(|m| m.role == "leader" && m.state == "running")
                    && members.iter().any(|m| m.role == "sync_standby");
                seen.push(format!("group {group}: {members:?}"));
            }
            if led && self.citus {
                let registered = self.registered_workers().await;
                led &= registered.len() + 1 == self.groups().len();
                seen.push(format!("pg_dist_node: {registered:?}"));
            }
            if led {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(seen.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A set's directory, configuration and guardian, started on fresh ports.
    fn spawn(etcd: &Path, patroni: &Path, bin: &Path, citus: bool, groups: u32) -> PatroniSet {
        let root = is_root();
        let dir = tempfile::Builder::new()
            .prefix("mandate-patroni-")
            .tempdir()
            .expect("a temporary directory for Patroni")
            .keep();
        let nodes: Vec<Node> = (0..groups * 2)
            .map(|n| Node {
                name: format!("node{n}"),
                group: n / 2,
                port: free_port(),
                api_port: free_port(),
            })
            .collect();
        let (client, peer) = (free_port(), free_port());
        for (n, node) in nodes.iter().enumerate() {
            std::fs::write(
                dir.join(format!("node{n}.yml")),
                config(&dir, n, node, client, bin, citus),
            )
            .expect("Patroni's configuration written");
        }
        if root {
            let (uid, gid) = user_ids("postgres")
                .expect("PostgreSQL refuses to run as root and there is no `postgres` user");
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let _ = std::os::unix::fs::chown(entry.path(), Some(uid), Some(gid));
            }
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .expect("the Patroni directory given to the postgres user");
        }
        let guardian = {
            let mut sh = as_cluster_user(root, Path::new("sh"));
            // In the set's directory: the test's own (CI's copy under a 0700 directory of
            // root's) may be closed to the postgres user, and Patroni reads its cwd.
            sh.current_dir(&dir)
                .arg("-c")
                .arg(GUARDIAN)
                .arg("sh")
                .arg(&dir)
                .arg(etcd)
                .arg(patroni)
                .arg(client.to_string())
                .arg(peer.to_string())
                .arg(nodes.len().to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            std::os::unix::process::CommandExt::process_group(&mut sh, 0);
            sh.spawn().expect("the Patroni guardian starts")
        };
        PatroniSet {
            dir,
            guardian,
            nodes,
            citus,
        }
    }

    /// The groups of the set: `0..`, the coordinator's first in Citus mode.
    pub fn groups(&self) -> Vec<u32> {
        let mut groups: Vec<u32> = self.nodes.iter().map(|n| n.group).collect();
        groups.dedup();
        groups
    }

    /// `postgres://postgres@HOST0:PORT0,HOST1:PORT1/DB?target_session_attrs=read-write`:
    /// group 0's nodes (the coordinator's in Citus mode), database `postgres` or, in Citus
    /// mode, the one Patroni made with the extension.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.group == 0)
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let database = if self.citus {
            CITUS_DATABASE
        } else {
            "postgres"
        };
        format!(
            "postgres://postgres@{}/{database}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The members of group 0 as Patroni's REST API says them.
    pub async fn members(&self) -> Vec<Member> {
        self.members_of(0).await
    }

    /// The members of `group` as Patroni's REST API (of any of its nodes that answers)
    /// says them.
    pub async fn members_of(&self, group: u32) -> Vec<Member> {
        for node in self.nodes.iter().filter(|n| n.group == group) {
            if let Some(body) = rest_get(node.api_port, "/cluster").await {
                let parsed: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                return parsed["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| Member {
                        name: m["name"].as_str().unwrap_or_default().to_owned(),
                        role: m["role"].as_str().unwrap_or_default().to_owned(),
                        state: m["state"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect();
            }
        }
        Vec::new()
    }

    /// The node that leads group 0 now, if one does.
    pub async fn leader(&self) -> Option<usize> {
        self.leader_of(0).await
    }

    /// The node (its index in [`PatroniSet::nodes`]) that leads `group` now, if one does.
    pub async fn leader_of(&self, group: u32) -> Option<usize> {
        let members = self.members_of(group).await;
        let name = members.iter().find(|m| m.role == "leader")?.name.clone();
        self.nodes.iter().position(|n| n.name == name)
    }

    /// In Citus mode, the active primaries the coordinator lists for the workers' groups:
    /// `(group, port)`, by group; empty while the coordinator cannot be reached.
    pub async fn registered_workers(&self) -> Vec<(u32, u16)> {
        let Ok(db) = crate::postgres::connect(&self.url()).await else {
            return Vec::new();
        };
        let rows = db
            .query(
                "SELECT groupid, nodeport FROM pg_dist_node
                 WHERE groupid > 0 AND noderole = 'primary' AND isactive ORDER BY groupid",
                &[],
            )
            .await
            .unwrap_or_default();
        rows.iter()
            .map(|r| (r.get::<_, i32>(0) as u32, r.get::<_, i32>(1) as u16))
            .collect()
    }

    /// In Citus mode, the group of the worker that holds `org_id`'s shard of `table`: the
    /// Patroni group whose primary answers for that organization.
    pub async fn group_of(&self, table: &str, org_id: &str) -> u32 {
        let db = crate::postgres::connect(&self.url())
            .await
            .expect("the coordinator answers");
        let group: i32 = db
            .query_one(
                "SELECT groupid FROM pg_dist_placement
                 WHERE shardid = get_shard_id_for_distribution_column($1::TEXT::REGCLASS, $2::TEXT)",
                &[&table, &org_id],
            )
            .await
            .expect("the placement of an organization's shard")
            .get(0);
        group as u32
    }

    /// Waits until `done` holds of group 0's members; panics with the nodes' logs after
    /// `limit`.
    pub async fn wait_until(&self, limit: Duration, done: impl Fn(&[Member]) -> bool) -> Duration {
        self.wait_until_in(0, limit, done).await
    }

    /// Waits until `done` holds of `group`'s members; how long that took. Panics with the
    /// nodes' logs after `limit`.
    pub async fn wait_until_in(
        &self,
        group: u32,
        limit: Duration,
        done: impl Fn(&[Member]) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let members = self.members_of(group).await;
            if done(&members) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "the Patroni set's group {group} did not get there in {limit:?}: {members:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Loses node `n`'s machine: `kill -9` of its Patroni and of its postmaster (whose
    /// backends then end). Returns once neither is running.
    pub fn lose(&self, n: usize) {
        let pid = |file: &Path| -> Option<String> {
            Some(
                std::fs::read_to_string(file)
                    .ok()?
                    .lines()
                    .next()?
                    .trim()
                    .to_owned(),
            )
        };
        let patroni = pid(&self.dir.join(format!("patroni{n}.pid")));
        let postmaster = pid(&self.dir.join(format!("data{n}")).join("postmaster.pid"));
        for pid in [patroni, postmaster].into_iter().flatten() {
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
    }

    /// Every node's Patroni log and etcd's, for a failure's message.
    pub fn logs(&self) -> String {
        (0..self.nodes.len())
            .map(|n| format!("node{n}.log"))
            .chain(["etcd.log".to_owned()])
            .map(|file| {
                let text = std::fs::read_to_string(self.dir.join(&file)).unwrap_or_default();
                // The lines that say something: Patroni repeats its loop's lines each second.
                let said: Vec<&str> = text
                    .lines()
                    .filter(|line| {
                        !line.contains("Lock owner")
                            && !line.contains("in progress")
                            && !line.contains("waiting for leader")
                            && !line.contains("leader race")
                            && !line.contains("no action")
                    })
                    .collect();
                let head = said.iter().take(40).copied().collect::<Vec<_>>().join("\n");
                let tail: Vec<&str> = said.iter().rev().take(20).copied().collect();
                format!(
                    "--- {file}\n{head}\n...\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// GET `http://127.0.0.1:{port}{path}` over a plain TCP connection (HTTP/1.0): Patroni's
/// REST API, without an HTTP client crate in the kit.
async fn rest_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
    let mut stream = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .ok()?
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut response))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8(response).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_owned()))
}

impl Drop for PatroniSet {
    fn drop(&mut self) {
        // Closing its input makes the guardian kill the set and remove the directory.
        drop(self.guardian.stdin.take());
        let _ = self.guardian.wait();
    }
}

/// Whether PostgreSQL of `bin` has the citus extension (its control file in the share
/// directory `pg_config` names).
fn citus_installed(bin: &Path) -> bool {
    Command::new(bin.join("pg_config"))
        .arg("--sharedir")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .is_some_and(|share| {
            Path::new(share.trim())
                .join("extension/citus.control")
                .exists()
        })
}
