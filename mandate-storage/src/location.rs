//! Where the data lives (`--db`, `MANDATE_DB`): a file path (SQLite) or a `postgres://` /
//! `postgresql://` URL (PostgreSQL). One parsed type for `serve`, `migrate` and every
//! operator command. A URL's password is never shown: [`DbLocation`]'s `Display` and
//! `Debug` print `***` in its place, and so does every message that names the location.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The database of a server: an SQLite file or a PostgreSQL URL.
#[derive(Clone, PartialEq, Eq)]
pub enum DbLocation {
    /// An SQLite database file (created and migrated on first use).
    Sqlite(PathBuf),
    /// A PostgreSQL database.
    Postgres(PostgresUrl),
}

/// A `postgres://` URL as given, kept whole for the engine and shown without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    text: String,
}

/// `--db` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// Empty.
    #[error("--db is empty: give a file path (SQLite) or a postgres:// URL")]
    Empty,
    /// A `postgres://` URL that does not parse (the URL is not repeated: it may hold a
    /// password).
    #[error(
        "--db is not a valid postgres:// URL ({0}); the form is postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=verify-full"
    )]
    BadUrl(String),
}

impl PostgresUrl {
    /// The URL exactly as given, password included: for the engine's connection only.
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// The password in the URL (its user-info part or a `password=` parameter), decoded,
    /// if any: messages are scrubbed of it.
    pub fn password(&self) -> Option<String> {
        let parts = UrlParts::of(&self.text).ok()?;
        if let Some(password) = parts.password.filter(|p| !p.is_empty()) {
            return Some(percent_decode(password).unwrap_or_else(|| password.to_owned()));
        }
        parts
            .query_pairs()
            .into_iter()
            .find(|(name, _)| name == "password")
            .map(|(_, value)| value)
            .filter(|p| !p.is_empty())
    }

    /// The URL with its password replaced by `***`.
    pub fn redacted(&self) -> String {
        let Ok(parts) = UrlParts::of(&self.text) else {
            return "postgres://***".to_owned();
        };
        let pairs = parts
            .query_pairs()
            .into_iter()
            .map(|(name, value)| {
                let value = if name == "password" {
                    "***".to_owned()
                } else {
                    value
                };
                (name, value)
            })
            .collect();
        parts.with(parts.password.map(|_| "***"), pairs)
    }

    /// `text` with every occurrence of the URL's password replaced by `***` (for messages
    /// that come from the database driver).
    pub fn scrub(&self, text: &str) -> String {
        match self.password() {
            Some(password) if text.contains(&password) => text.replace(&password, "***"),
            _ => text.to_owned(),
        }
    }
}

/// Percent-decodes `text` as UTF-8; `None` if it does not decode.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A `postgres://` URL cut into its parts, its host list kept as written: libpq's form
/// `HOST1:PORT1,HOST2:PORT2` (a primary and its standbys, as a failover manager hands
/// them out), which a generic URL parser refuses for its port.
pub struct UrlParts<'a> {
    /// `postgres` or `postgresql`, as written.
    pub scheme: &'a str,
    /// The user, as written (percent-encoded).
    pub user: Option<&'a str>,
    /// The password, as written (percent-encoded).
    pub password: Option<&'a str>,
    /// The host list, as written (empty when the `host` parameter names them).
    pub hosts: &'a str,
    /// `/DATABASE`, or empty.
    pub path: &'a str,
    /// What follows `?`, or empty.
    pub query: &'a str,
}

impl<'a> UrlParts<'a> {
    /// Cuts `text`; refuses a host list entry whose port is not a number from 1 to 65535,
    /// or whose IPv6 address is not closed by `]`, saying which entry (never the password).
    pub fn of(text: &'a str) -> Result<Self, LocationError> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| LocationError::BadUrl("it has no scheme".into()))?;
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(info) => match info.split_once(':') {
                Some((user, password)) => (Some(user), Some(password)),
                None => (Some(info), None),
            },
            None => (None, None),
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, query),
            None => (tail, ""),
        };
        if !hosts.is_empty() {
            for (n, entry) in hosts.split(',').enumerate() {
                check_host(entry).map_err(|why| {
                    LocationError::BadUrl(format!("host {} of its host list: {why}", n + 1))
                })?;
            }
        }
        Ok(Self {
            scheme,
            user,
            password,
            hosts,
            path,
            query,
        })
    }

    /// The query's parameters, decoded.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(self.query.as_bytes())
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect()
    }

    /// The URL again, with `password` (as written) and the parameters `pairs` in place of
    /// its own.
    pub fn with(&self, password: Option<&str>, pairs: Vec<(String, String)>) -> String {
        let mut out = format!("{}://", self.scheme);
        if let Some(user) = self.user {
            out.push_str(user);
            if let Some(password) = password {
                out.push(':');
                out.push_str(password);
            }
            out.push('@');
        }
        out.push_str(self.hosts);
        out.push_str(self.path);
        if !pairs.is_empty() {
            out.push('?');
            out.push_str(
                &url::form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(pairs)
                    .finish(),
            );
        }
        out
    }
}

/// One entry of a host list: `HOST`, `HOST:PORT`, `[IPV6]` or `[IPV6]:PORT`.
fn check_host(entry: &str) -> Result<(), String> {
    let port = if let Some(inner) = entry.strip_prefix('[') {
        let (_, after) = inner
            .split_once(']')
            .ok_or("an IPv6 address is not closed by ]")?;
        match after {
            "" => None,
            after => Some(
                after
                    .strip_prefix(':')
                    .ok_or("a port follows ] after a colon")?,
            ),
        }
    } else {
        entry.rsplit_once(':').map(|(_, port)| port)
    };
    match port {
        Some(port) if !port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Err("the port is not a number from 1 to 65535".into())
        }
        _ => Ok(()),
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgresUrl({})", self.redacted())
    }
}

impl DbLocation {
    /// The SQLite file, if this is one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Self::Sqlite(path) => Some(path),
            Self::Postgres(_) => None,
        }
    }
}

impl FromStr for DbLocation {
    type Err = LocationError;

    fn from_str(text: &str) -> Result<Self, LocationError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(LocationError::Empty);
        }
        let lower = trimmed.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            let parts = UrlParts::of(trimmed)?;
            let named_by_parameter = parts.query_pairs().iter().any(|(name, _)| name == "host");
            if parts.hosts.is_empty() && !named_by_parameter {
                return Err(LocationError::BadUrl("it names no host".into()));
            }
            return Ok(Self::Postgres(PostgresUrl {
                text: trimmed.to_owned(),
            }));
        }
        Ok(Self::Sqlite(PathBuf::from(text)))
    }
}

impl From<PathBuf> for DbLocation {
    fn from(path: PathBuf) -> Self {
        Self::Sqlite(path)
    }
}

impl From<&Path> for DbLocation {
    fn from(path: &Path) -> Self {
        Self::Sqlite(path.to_path_buf())
    }
}

impl fmt::Display for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => write!(f, "{url}"),
        }
    }
}

impl fmt::Debug for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "Sqlite({})", path.display()),
            Self::Postgres(url) => write!(f, "Postgres({url})"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_sqlite_and_a_postgres_url_is_postgres() {
        assert_eq!(
            "./mandate.db".parse::<DbLocation>().unwrap(),
            DbLocation::Sqlite(PathBuf::from("./mandate.db"))
        );
        for url in [
            "postgres://u:p@localhost:5432/mandate",
            "postgresql://u@db.internal/mandate?sslmode=verify-full",
            "POSTGRES://h/db",
        ] {
            assert!(
                matches!(url.parse::<DbLocation>(), Ok(DbLocation::Postgres(_))),
                "{url}"
            );
        }
        assert_eq!("".parse::<DbLocation>(), Err(LocationError::Empty));
        let bad = "postgres://u:secret@[::1/db"
            .parse::<DbLocation>()
            .unwrap_err();
        assert!(!bad.to_string().contains("secret"), "{bad}");
    }

    /// The password of a URL never shows: not in Display, Debug, or the location's
    /// messages, whether it is in the user-info part, percent-encoded, or a parameter.
    #[test]
    fn a_urls_password_is_never_shown() {
        for (url, password) in [
            ("postgres://mandate:s3cr3t-pw@db:5432/m", "s3cr3t-pw"),
            ("postgres://mandate:p%40ss%2Fw0rd@db/m", "p@ss/w0rd"),
            (
                "postgresql://mandate@db/m?password=hunter22&sslmode=require",
                "hunter22",
            ),
        ] {
            let location: DbLocation = url.parse().unwrap();
            let DbLocation::Postgres(pg) = &location else {
                panic!("{url} is not postgres");
            };
            assert_eq!(pg.password().as_deref(), Some(password), "{url}");
            for shown in [
                location.to_string(),
                format!("{location:?}"),
                pg.to_string(),
                format!("{pg:?}"),
                pg.scrub(&format!("could not connect as mandate with {password}")),
            ] {
                assert!(!shown.contains(password), "{shown}");
                assert!(
                    !shown.contains("s3cr3t") && !shown.contains("p%40ss"),
                    "{shown}"
                );
            }
            assert!(location.to_string().contains("***"), "{location}");
            assert!(location.to_string().contains("db"), "{location}");
        }
    }
}
