//! A PostgreSQL database for one run: made fresh on the cluster `--db` names, its size
//! read like the SQLite file's, dropped at the end (unless `--keep`). The bench's own
//! connection is plain (it is for set-up on a cluster at hand); the servers connect with
//! the URL as given, TLS parameters and all.
//!
//! When `--db`'s database has the `citus` extension with workers added, the cluster is a
//! Citus coordinator: the run's database is then made on the coordinator and on every
//! worker its `pg_dist_node` names (same name, same user), `citus` created in each and the
//! workers added, as docs/scale.md sets a cluster up; Mandate's migrations distribute the
//! tables themselves. It is dropped on every node.

use crate::bail;
use crate::error::{Context, Result};

/// A database made for this run.
pub struct PgDb {
    /// Its URL, as the servers get it.
    pub url: String,
    /// Its name.
    pub name: String,
    admin: String,
    keep: bool,
    /// The Citus cluster it is distributed over, if `--db` named a coordinator.
    pub citus: Option<Citus>,
}

/// A node of a Citus cluster: host and port, as `pg_dist_node` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its host.
    pub host: String,
    /// Its port.
    pub port: u16,
}

/// The nodes of the Citus cluster of `--db`.
#[derive(Debug, Clone)]
pub struct Citus {
    /// The coordinator (as `citus_set_coordinator_host` named it, else `--db`'s host).
    pub coordinator: Node,
    /// The workers, in `pg_dist_node`'s order.
    pub workers: Vec<Node>,
}

/// `url` with its host and port replaced by `node`'s (its user, database and query kept).
pub fn with_node(url: &str, node: &Node) -> String {
    let after_scheme = url.find("//").map_or(0, |i| i + 2);
    let rest = &url[after_scheme..];
    let authority_end = rest.find(['/', '?']).map_or(rest.len(), |i| i);
    let authority = &rest[..authority_end];
    let user = authority.rfind('@').map_or("", |i| &authority[..=i]);
    let host = if node.host.contains(':') {
        format!("[{}]", node.host)
    } else {
        node.host.clone()
    };
    format!(
        "{}{user}{host}:{}{}",
        &url[..after_scheme],
        node.port,
        &rest[authority_end..]
    )
}

/// `url` with its database replaced by `name` (and its query kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let after_scheme = base.find("//").map_or(0, |i| i + 2);
    let host_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |i| after_scheme + i);
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// The URL without its query (the bench's own connection takes no TLS parameters).
fn plain(url: &str) -> &str {
    url.split_once('?').map_or(url, |(base, _)| base)
}

async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(plain(url), tokio_postgres::NoTls)
        .await
        .map_err(|e| crate::error::Error(format!("connecting to the --db cluster: {e}")))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

impl PgDb {
    /// Makes a fresh database on the cluster of `admin` (a URL whose user may
    /// `CREATE DATABASE`).
    pub async fn create(admin: &str, keep: bool) -> Result<Self> {
        if !(admin.starts_with("postgres://") || admin.starts_with("postgresql://")) {
            bail!("--db must be a postgres:// URL (without it the bench makes an SQLite file)");
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let name = format!("mandate_bench_{}_{nanos}", std::process::id());
        let client = connect(admin).await?;
        let citus = citus_of(&client, admin).await?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .ctx(format!("CREATE DATABASE {name}"))?;
        let db = Self {
            url: with_database(admin, &name),
            name,
            admin: admin.to_owned(),
            keep,
            citus,
        };
        if let Some(citus) = &db.citus {
            db.distribute(citus).await?;
        }
        Ok(db)
    }

    /// On a Citus cluster: the database made on every worker too (unless Citus made it
    /// there already: `citus.enable_create_database_propagation`), `citus` created on every
    /// node, the coordinator named and the workers added.
    async fn distribute(&self, citus: &Citus) -> Result<()> {
        let name = &self.name;
        for worker in &citus.workers {
            let admin = connect(&with_node(&self.admin, worker)).await?;
            let there = admin
                .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[name])
                .await
                .ctx(format!(
                    "pg_database on worker {}:{}",
                    worker.host, worker.port
                ))?;
            if there.is_none() {
                admin
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .await
                    .ctx(format!(
                        "CREATE DATABASE {name} on worker {}:{}",
                        worker.host, worker.port
                    ))?;
            }
            connect(&with_node(&self.url, worker))
                .await?
                .batch_execute("CREATE EXTENSION IF NOT EXISTS citus")
                .await
                .ctx(format!(
                    "CREATE EXTENSION citus on worker {}:{}",
                    worker.host, worker.port
                ))?;
        }
        let db = connect(&self.url).await?;
        db.batch_execute("CREATE EXTENSION IF NOT EXISTS citus")
            .await
            .ctx("CREATE EXTENSION citus on the coordinator")?;
        let port = i32::from(citus.coordinator.port);
        db.execute(
            "SELECT citus_set_coordinator_host($1, $2)",
            &[&citus.coordinator.host, &port],
        )
        .await
        .ctx("citus_set_coordinator_host")?;
        for worker in &citus.workers {
            db.execute(
                "SELECT citus_add_node($1, $2)",
                &[&worker.host, &i32::from(worker.port)],
            )
            .await
            .ctx(format!(
                "citus_add_node('{}', {})",
                worker.host, worker.port
            ))?;
        }
        Ok(())
    }

    /// The URL of this database on Citus worker `k` (mod the workers), or on the
    /// coordinator when the cluster is not Citus.
    pub fn worker_url(&self, k: usize) -> String {
        match &self.citus {
            Some(citus) if !citus.workers.is_empty() => {
                with_node(&self.url, &citus.workers[k % citus.workers.len()])
            }
            _ => self.url.clone(),
        }
    }

    /// The worker (its index in `citus.workers`) that holds each of `orgs`: where its
    /// `environments` shard's placement is.
    pub async fn workers_of(&self, orgs: &[String]) -> Result<Vec<usize>> {
        let Some(citus) = &self.citus else {
            return Err(crate::error::Error(
                "the --db cluster is not Citus: its organizations are on no worker".into(),
            ));
        };
        let client = connect(&self.url).await?;
        let mut out = Vec::with_capacity(orgs.len());
        for org in orgs {
            let row = client
                .query_one(
                    "SELECT n.nodename, n.nodeport FROM pg_dist_placement p
                     JOIN pg_dist_node n ON n.groupid = p.groupid
                     WHERE p.shardid = get_shard_id_for_distribution_column('environments', $1::TEXT)
                     ORDER BY n.nodeport LIMIT 1",
                    &[org],
                )
                .await
                .ctx(format!("the worker of organization {org}"))?;
            let node = Node {
                host: row.get(0),
                port: u16::try_from(row.get::<_, i32>(1)).ctx("a node's port")?,
            };
            let k = citus
                .workers
                .iter()
                .position(|w| *w == node)
                .ok_or_else(|| {
                    crate::error::Error(format!(
                        "organization {org} is on {}:{}, not one of the workers",
                        node.host, node.port
                    ))
                })?;
            out.push(k);
        }
        Ok(out)
    }

    /// `ANALYZE` of every table of the database (of the node the URL names).
    pub async fn analyze(&self) -> Result<()> {
        connect(&self.url)
            .await?
            .batch_execute("ANALYZE")
            .await
            .map_err(|e| crate::error::Error(format!("ANALYZE: {}", db_error(&e))))
    }

    /// Its size on disk, bytes (`pg_database_size`).
    pub async fn size(&self) -> Result<u64> {
        let client = connect(&self.url).await?;
        let size: i64 = client
            .query_one("SELECT pg_database_size(current_database())", &[])
            .await
            .ctx("pg_database_size")?
            .get(0);
        Ok(u64::try_from(size).unwrap_or(0))
    }

    /// Drops it (on every node of a Citus cluster, the coordinator first, so that its
    /// connections to the workers go with it), unless kept.
    pub async fn finish(self) -> Result<()> {
        if self.keep {
            return Ok(());
        }
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        connect(&self.admin)
            .await?
            .batch_execute(&drop)
            .await
            .map_err(|e| {
                crate::error::Error(format!("DROP DATABASE {}: {}", self.name, db_error(&e)))
            })?;
        // A worker's copy is left behind with a warning rather than failing the run whose
        // figures are taken.
        for worker in self.citus.iter().flat_map(|c| c.workers.iter()) {
            let dropped = match connect(&with_node(&self.admin, worker)).await {
                Ok(client) => client.batch_execute(&drop).await.map_err(|e| db_error(&e)),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = dropped {
                crate::log(format!(
                    "warning: DROP DATABASE {} on worker {}:{}: {e}",
                    self.name, worker.host, worker.port
                ));
            }
        }
        Ok(())
    }
}

/// A driver error with the server's message, when the server sent one (the driver's own
/// text is only "db error").
fn db_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// The Citus cluster `admin`'s database belongs to: `Some` when it has the `citus`
/// extension and at least one active primary worker in `pg_dist_node`.
async fn citus_of(client: &tokio_postgres::Client, admin: &str) -> Result<Option<Citus>> {
    let has_citus = client
        .query_opt("SELECT 1 FROM pg_extension WHERE extname = 'citus'", &[])
        .await
        .ctx("pg_extension")?
        .is_some();
    if !has_citus {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT nodename, nodeport, groupid FROM pg_dist_node
             WHERE noderole = 'primary' AND isactive ORDER BY groupid, nodeport",
            &[],
        )
        .await
        .ctx("pg_dist_node")?;
    let mut coordinator = None;
    let mut workers = Vec::new();
    for row in rows {
        let node = Node {
            host: row.get(0),
            port: u16::try_from(row.get::<_, i32>(1)).ctx("a node's port")?,
        };
        if row.get::<_, i32>(2) == 0 {
            coordinator = Some(node);
        } else {
            workers.push(node);
        }
    }
    if workers.is_empty() {
        return Ok(None);
    }
    let coordinator = match coordinator {
        Some(node) => node,
        None => node_of(admin)?,
    };
    Ok(Some(Citus {
        coordinator,
        workers,
    }))
}

/// The host and port a URL names (5432 when it names none).
fn node_of(url: &str) -> Result<Node> {
    let after_scheme = url.find("//").map_or(0, |i| i + 2);
    let rest = &url[after_scheme..];
    let authority = &rest[..rest.find(['/', '?']).map_or(rest.len(), |i| i)];
    let hostport = authority
        .rfind('@')
        .map_or(authority, |i| &authority[i + 1..]);
    let (host, port) = match hostport.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().ctx("the --db port")?),
        _ => (hostport, 5432),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        bail!(
            "--db names no host: name the coordinator's (citus_set_coordinator_host was not called)"
        );
    }
    Ok(Node {
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_database_of_a_url_is_replaced_and_its_query_kept() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres?sslmode=require", "b1"),
            "postgres://u:p@h:5432/b1?sslmode=require"
        );
        assert_eq!(with_database("postgresql://h", "b2"), "postgresql://h/b2");
        assert_eq!(plain("postgres://h/b?sslmode=require"), "postgres://h/b");
    }

    #[test]
    fn a_node_replaces_the_host_and_port_and_keeps_the_rest() {
        let w = Node {
            host: "127.0.0.1".into(),
            port: 6001,
        };
        assert_eq!(
            with_node("postgres://u:p@h:5432/b1?sslmode=require", &w),
            "postgres://u:p@127.0.0.1:6001/b1?sslmode=require"
        );
        assert_eq!(
            with_node("postgresql://h", &w),
            "postgresql://127.0.0.1:6001"
        );
        assert_eq!(
            node_of("postgres://u@[::1]:6000/db").unwrap(),
            Node {
                host: "::1".into(),
                port: 6000
            }
        );
        assert_eq!(node_of("postgres://h/db").unwrap().port, 5432);
    }
}

/// A fresh key-encryption key for the run's servers (PostgreSQL requires one): the
/// standard base64 of 32 bytes from the OS.
pub fn fresh_kek() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .ctx("reading /dev/urandom")?;
    Ok(base64(&bytes))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod base64_tests {
    #[test]
    fn encodes_as_the_standard_alphabet_with_padding() {
        assert_eq!(super::base64(b"Man"), "TWFu");
        assert_eq!(super::base64(b"Ma"), "TWE=");
        assert_eq!(super::base64(b"M"), "TQ==");
        assert_eq!(super::base64(&[0xfb, 0xff]), "+/8=");
    }
}
