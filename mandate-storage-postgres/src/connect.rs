//! From a `postgres://` URL to connections: the URL's parameters read as libpq reads them
//! (those tokio-postgres does not know are taken out first), the TLS it asks for, and the
//! pool.
//!
//! Parameters of our own, taken out of the URL before the driver sees it:
//! - `sslmode`: `disable` (the default), `prefer`, `require`, `verify-ca`, `verify-full`
//!   (see [`super::tls`] for what each checks);
//! - `sslrootcert`: a PEM file of the roots to trust, or `system` (the Mozilla roots);
//! - `pool_max_size`: connections per server process (default [`DEFAULT_POOL`]);
//! - `decision_writers`: decision writers per server process, each committing one group of
//!   decisions at a time (default [`DEFAULT_WRITERS`]; docs/scale.md says how many);
//! - `decision_gather_us`: how long a writer that finds a small group while decisions are
//!   arriving waits for more, in microseconds, 0 (never) to 100000; unset, 2 ms on Citus
//!   and never on plain PostgreSQL ([`super::gather::wait`]);
//! - `citus_direct_writes`: on Citus, whether the decision writers send each group straight
//!   to the worker that holds its organizations (`on`, the default) or through the node of
//!   the URL, which hands the call on (`off`: for processes that may reach only that node).
//!
//! Every other parameter goes to tokio-postgres as it is (`connect_timeout`,
//! `application_name`, `target_session_attrs`, ...). No message of this module holds the
//! URL's password.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::SslMode;

use super::tls::{RustlsConnect, Verify};
use mandate_storage::StorageError;
use mandate_storage::location::{PostgresUrl, UrlParts};

/// Connections a server process keeps to the database unless `pool_max_size` says.
pub const DEFAULT_POOL: usize = 16;

/// Decision writers a server process runs unless `decision_writers` says: one, so that a
/// process keeps one group in flight a node and each group holds every organization's
/// decisions that arrived meanwhile, however many organizations there are (with more, the
/// organizations are shared out among them and each group holds fewer decisions). More
/// keep more groups in flight, for a database with cores to spare (docs/scale.md,
/// "Writers").
pub const DEFAULT_WRITERS: usize = 1;

/// How long a connection attempt may take unless `connect_timeout` says.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller waits for a free connection before the store answers unavailable.
const WAIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A database to connect to: the driver's configuration, the TLS connector, the pool size.
#[derive(Clone)]
pub struct Target {
    /// The driver's configuration (it holds the password: never printed).
    pub config: tokio_postgres::Config,
    /// TLS as the URL asks.
    pub tls: RustlsConnect,
    /// Connections per process.
    pub pool_size: usize,
    /// Decision writers per process.
    pub writers: usize,
    /// How long a writer waits for a fuller group, when the URL sets it
    /// ([`super::gather::wait`]).
    pub gather: Option<Duration>,
    /// On Citus, whether the writers connect to each worker themselves.
    pub direct_writes: bool,
    /// The URL, for messages (shown redacted) and scrubbing.
    pub url: PostgresUrl,
}

/// The URL parameter `name`'s `value`: a whole number from 1 to `max`.
fn count(url: &PostgresUrl, name: &str, value: &str, max: usize) -> Result<usize, StorageError> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| bad(url, format!("{name} must be 1 to {max}")))
}

/// The URL parameter `name`'s `value`: whole microseconds from 0 to `max`.
fn micros(url: &PostgresUrl, name: &str, value: &str, max: u64) -> Result<Duration, StorageError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| *n <= max)
        .map(Duration::from_micros)
        .ok_or_else(|| bad(url, format!("{name} must be 0 to {max} (microseconds)")))
}

/// The URL parameter `name`'s `value`: `on` or `off`.
fn on_off(url: &PostgresUrl, name: &str, value: &str) -> Result<bool, StorageError> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(bad(url, format!("{name} must be on or off"))),
    }
}

fn bad(url: &PostgresUrl, reason: impl std::fmt::Display) -> StorageError {
    StorageError::Backend(format!(
        "{}: {}",
        url.redacted(),
        url.scrub(&reason.to_string())
    ))
}

impl Target {
    /// Reads `url`.
    pub fn parse(url: &PostgresUrl) -> Result<Self, StorageError> {
        let parts = UrlParts::of(url.expose()).map_err(|e| bad(url, e))?;
        let mut sslmode = None;
        let mut root_cert = None;
        let mut pool_size = DEFAULT_POOL;
        let mut writers = DEFAULT_WRITERS;
        let mut gather = None;
        let mut direct_writes = true;
        let mut kept = Vec::new();
        for (name, value) in parts.query_pairs() {
            match &*name {
                "sslmode" => sslmode = Some(value),
                "sslrootcert" => root_cert = Some(value),
                "pool_max_size" => pool_size = count(url, &name, &value, 1000)?,
                "decision_writers" => writers = count(url, &name, &value, 64)?,
                "decision_gather_us" => gather = Some(micros(url, &name, &value, 100_000)?),
                "citus_direct_writes" => direct_writes = on_off(url, &name, &value)?,
                _ => kept.push((name, value)),
            }
        }
        // The rest of the URL as written (a host list included), our parameters taken out.
        let driver_url = parts.with(parts.password, kept);
        let (mode, verify) = match sslmode.as_deref() {
            None | Some("disable") => (SslMode::Disable, Verify::Nothing),
            Some("allow" | "prefer") => (SslMode::Prefer, Verify::Nothing),
            Some("require") if root_cert.is_some() => (SslMode::Require, Verify::Chain),
            Some("require") => (SslMode::Require, Verify::Nothing),
            Some("verify-ca") => (SslMode::Require, Verify::Chain),
            Some("verify-full") => (SslMode::Require, Verify::Full),
            Some(other) => {
                return Err(bad(
                    url,
                    format!(
                        "sslmode {other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                    ),
                ));
            }
        };
        // The driver reads the rest of the URL (its own parameters included).
        let mut config = tokio_postgres::Config::from_str(&driver_url).map_err(|e| bad(url, e))?;
        config.ssl_mode(mode);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("mandate-server");
        }
        let tls = RustlsConnect::new(verify, root_cert.as_deref()).map_err(|e| bad(url, e))?;
        Ok(Self {
            config,
            tls,
            pool_size,
            writers,
            gather,
            direct_writes,
            url: url.clone(),
        })
    }

    /// This target with its host (or host list) and port replaced by `host` and `port`,
    /// everything else kept: the user, password, database, TLS, timeouts and our own
    /// parameters, for a connection to another node of the same cluster (a Citus worker,
    /// as `pg_dist_node` names it). A `host`, `hostaddr`, `port` or `target_session_attrs`
    /// parameter of the URL is dropped: they name the URL's own nodes.
    pub(crate) fn at(&self, host: &str, port: u16) -> Result<Self, StorageError> {
        let parts = UrlParts::of(self.url.expose()).map_err(|e| bad(&self.url, e))?;
        let hosts = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let pairs = parts
            .query_pairs()
            .into_iter()
            .filter(|(name, _)| {
                !matches!(
                    name.as_str(),
                    "host" | "hostaddr" | "port" | "target_session_attrs"
                )
            })
            .collect();
        let text = UrlParts {
            hosts: &hosts,
            ..parts
        }
        .with(parts.password, pairs);
        match text.parse::<mandate_storage::location::DbLocation>() {
            Ok(mandate_storage::location::DbLocation::Postgres(url)) => Self::parse(&url),
            _ => Err(bad(
                &self.url,
                format!("the node {host}:{port} makes no valid URL"),
            )),
        }
    }

    /// The pool of connections (made as they are needed), at most `pool_size`.
    pub fn pool(&self) -> Result<Pool, StorageError> {
        self.pool_of(self.pool_size)
    }

    /// A pool of at most `size` connections.
    pub fn pool_of(&self, size: usize) -> Result<Pool, StorageError> {
        self.builder(size).build().map_err(|e| bad(&self.url, e))
    }

    /// The decision writers' pool: as [`Self::pool`], apart, so that a group never waits
    /// for a connection behind the reads of requests.
    pub(crate) fn writers_pool(&self) -> Result<Pool, StorageError> {
        self.pool()
    }

    fn builder(&self, size: usize) -> deadpool_postgres::PoolBuilder {
        let manager = Manager::from_config(
            self.config.clone(),
            self.tls.clone(),
            ManagerConfig {
                // A connection whose socket closed is replaced; anything else is reused
                // as it is (a transaction dropped midway is rolled back by its drop).
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(WAIT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT + Duration::from_secs(1)))
    }

    /// A connection failure, named without the password.
    pub fn connect_error(&self, e: tokio_postgres::Error) -> StorageError {
        let scrubbed = self.url.scrub(&e.to_string());
        match crate::pg_error(e) {
            StorageError::Backend(_) => {
                StorageError::Backend(format!("connecting to {}: {scrubbed}", self.url))
            }
            _ => StorageError::Unavailable(format!("connecting to {}: {scrubbed}", self.url)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use mandate_storage::location::DbLocation;

    fn target(text: &str) -> Result<Target, StorageError> {
        match text.parse::<DbLocation>() {
            Ok(DbLocation::Postgres(url)) => Target::parse(&url),
            other => panic!("{text} is not a PostgreSQL URL: {other:?}"),
        }
    }

    /// A worker's target keeps everything of the URL but its nodes: the user, password,
    /// database, TLS and our parameters; a host list, `host`/`port` parameters and
    /// `target_session_attrs` give way to the worker's host and port (an IPv6 address in
    /// brackets). `citus_direct_writes` is on unless the URL says off, and nothing else.
    #[test]
    fn a_workers_target_is_the_urls_at_the_workers_address() {
        let url = "postgres://mandate:s3cr%40t@db1:5432,db2:5433/mandate\
                   ?target_session_attrs=read-write&sslmode=require&connect_timeout=3\
                   &decision_writers=2&application_name=writer&port=5432";
        let main = target(url).unwrap();
        assert!(main.direct_writes);
        let worker = main.at("10.0.0.7", 6432).unwrap();
        let hosts: Vec<String> = worker
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(h) => h.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(hosts, ["10.0.0.7"]);
        assert_eq!(worker.config.get_ports(), [6432]);
        assert_eq!(worker.config.get_user(), Some("mandate"));
        assert_eq!(worker.config.get_password(), Some(&b"s3cr@t"[..]));
        assert_eq!(worker.config.get_dbname(), Some("mandate"));
        assert_eq!(worker.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(
            worker.config.get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
        assert_eq!(worker.config.get_application_name(), Some("writer"));
        assert_eq!(
            worker.config.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::Any
        );
        assert_eq!(worker.writers, 2);
        assert!(!worker.url.to_string().contains("s3cr"));
        let v6 = main.at("fd00::7", 5432).unwrap();
        assert!(matches!(
            &v6.config.get_hosts()[0],
            tokio_postgres::config::Host::Tcp(h) if h == "fd00::7"
        ));
        let off = target("postgres://m@db1/mandate?citus_direct_writes=off").unwrap();
        assert!(!off.direct_writes);
        let wrong = target("postgres://m@db1/mandate?citus_direct_writes=yes");
        assert!(
            matches!(&wrong, Err(e) if e.to_string().contains("citus_direct_writes must be on or off")),
            "{:?}",
            wrong.err()
        );
    }

    /// `decision_writers` sets the writers a process runs and `decision_gather_us` their wait
    /// for a fuller group, each within its bounds; the driver sees neither; without them a
    /// process runs the defaults.
    #[test]
    fn decision_writers_is_read_from_the_url_and_checked() {
        let plain = target("postgres://m@127.0.0.1:5432/mandate").unwrap();
        assert_eq!(plain.writers, DEFAULT_WRITERS);
        assert_eq!(plain.gather, None);
        let one = target(
            "postgres://m@127.0.0.1:5432/mandate?decision_writers=1&pool_max_size=8&decision_gather_us=200",
        )
        .unwrap();
        assert_eq!(
            (one.writers, one.pool_size, one.gather),
            (1, 8, Some(Duration::from_micros(200)))
        );
        let long = target("postgres://m@127.0.0.1:5432/mandate?decision_gather_us=1500").unwrap();
        assert_eq!(long.gather, Some(Duration::from_micros(1500)));
        let never = target("postgres://m@127.0.0.1:5432/mandate?decision_gather_us=0").unwrap();
        assert_eq!(never.gather, Some(Duration::ZERO));
        let refuses = |param: &str, wrongs: &[&str], says: &str| {
            for wrong in wrongs {
                let url = format!("postgres://m@127.0.0.1:5432/mandate?{param}={wrong}");
                let refused = target(&url).err().expect("refused");
                assert!(refused.to_string().contains(says), "{refused}");
            }
        };
        refuses(
            "decision_gather_us",
            &["-1", "100001", "1ms", ""],
            "decision_gather_us must be 0 to 100000 (microseconds)",
        );
        refuses(
            "decision_writers",
            &["0", "65", "two", ""],
            "decision_writers must be 1 to 64",
        );
    }

    /// A host list (a primary and its standbys, as Patroni hands them out) goes to the
    /// driver whole, with `target_session_attrs`, the password and our own parameters
    /// taken out; the redacted URL keeps the hosts and hides the password.
    #[test]
    fn a_host_list_reaches_the_driver_whole() {
        let url = "postgres://mandate:s3cret@10.0.0.1:5432,10.0.0.2:5433,[::1]:5434/mandate\
                   ?target_session_attrs=read-write&decision_writers=3&connect_timeout=2";
        let target = target(url).unwrap();
        assert_eq!(target.writers, 3);
        let hosts: Vec<String> = target
            .config
            .get_hosts()
            .iter()
            .map(|host| format!("{host:?}"))
            .collect();
        assert_eq!(hosts.len(), 3, "{hosts:?}");
        assert_eq!(target.config.get_ports(), [5432, 5433, 5434]);
        assert_eq!(
            target.config.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
        assert_eq!(target.config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(target.config.get_dbname(), Some("mandate"));
        let shown = target.url.redacted();
        assert_eq!(
            shown,
            "postgres://mandate:***@10.0.0.1:5432,10.0.0.2:5433,[::1]:5434/mandate\
             ?target_session_attrs=read-write&decision_writers=3&connect_timeout=2"
        );
    }

    /// A host list entry with a port that is no port is refused, naming the entry.
    #[test]
    fn a_host_lists_bad_port_is_refused_naming_the_entry() {
        for (url, says) in [
            (
                "postgres://m:pw@h1:5432,h2:54x2/db",
                "host 2 of its host list",
            ),
            ("postgres://m:pw@h1:0/db", "host 1 of its host list"),
            ("postgres://m:pw@[::1:5432/db", "not closed by ]"),
        ] {
            let refused = url.parse::<DbLocation>().unwrap_err().to_string();
            assert!(refused.contains(says), "{url}: {refused}");
            assert!(!refused.contains("pw"), "{refused}");
        }
    }
}
