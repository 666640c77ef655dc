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
        let url = url::Url::parse(&self.text).ok()?;
        let decoded = |text: &str| {
            percent_decode(text)
                .filter(|p| !p.is_empty())
                .or_else(|| (!text.is_empty()).then(|| text.to_owned()))
        };
        if let Some(password) = url.password().and_then(decoded) {
            return Some(password);
        }
        url.query_pairs()
            .find(|(name, _)| name == "password")
            .map(|(_, value)| value.into_owned())
            .filter(|p| !p.is_empty())
    }

    /// The URL with its password replaced by `***`.
    pub fn redacted(&self) -> String {
        let Ok(mut url) = url::Url::parse(&self.text) else {
            return "postgres://***".to_owned();
        };
        if url.password().is_some() {
            let _ = url.set_password(Some("***"));
        }
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = if name == "password" {
                    "***".to_owned()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        if !pairs.is_empty() {
            url.query_pairs_mut().clear().extend_pairs(pairs);
        }
        url.to_string()
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
            let url = url::Url::parse(trimmed).map_err(|e| LocationError::BadUrl(e.to_string()))?;
            if !url.has_host() && !url.query_pairs().any(|(name, _)| name == "host") {
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
