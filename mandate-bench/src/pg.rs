//! A PostgreSQL database for one run: made fresh on the cluster `--db` names, its size
//! read like the SQLite file's, dropped at the end (unless `--keep`). The bench's own
//! connection is plain (it is for set-up on a cluster at hand); the servers connect with
//! the URL as given, TLS parameters and all.

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
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .ctx(format!("CREATE DATABASE {name}"))?;
        Ok(Self {
            url: with_database(admin, &name),
            name,
            admin: admin.to_owned(),
            keep,
        })
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

    /// Drops it, unless kept.
    pub async fn finish(self) -> Result<()> {
        if self.keep {
            return Ok(());
        }
        let client = connect(&self.admin).await?;
        client
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .ctx(format!("DROP DATABASE {}", self.name))?;
        Ok(())
    }
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
