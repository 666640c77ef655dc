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
