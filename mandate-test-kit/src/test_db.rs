//! A fresh PostgreSQL database per test, on the cluster `MANDATE_TEST_POSTGRES_URL` names
//! (a user that may `CREATE DATABASE`), dropped when the test ends. Without the variable the
//! tests that need it say they were skipped and how to run them, and pass.
//!
//! Used by the PostgreSQL engine's unit tests (mandate-storage-postgres/src) and by
//! mandate-server/tests/pg_store.rs.

/// The variable naming the cluster.
pub const VAR: &str = "MANDATE_TEST_POSTGRES_URL";

/// A database made for one test.
pub struct TestDb {
    /// Its URL.
    pub url: String,
    admin: String,
    name: String,
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    // postgres://user@host:port/db: the database is after the first '/' past "//".
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

/// Runs `f` on a connection to `url`, on a thread and runtime of its own (callable from any
/// test, async or not).
fn on_connection<T: Send + 'static>(
    url: String,
    f: impl FnOnce(
        tokio_postgres::Client,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>
    + Send
    + 'static,
) -> T {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("connecting to {VAR}: {e}"));
            tokio::spawn(async move {
                let _ = connection.await;
            });
            f(client).await
        })
    })
    .join()
    .expect("the database thread")
}

impl TestDb {
    /// A fresh, empty database, or `None` (with a note on stderr) when no cluster is named.
    pub fn create(test: &str) -> Option<TestDb> {
        let Ok(admin) = std::env::var(VAR) else {
            crate::skip::say(&format!(
                "the PostgreSQL engine's tests ({test} and the others): no PostgreSQL. Set {VAR}=postgres://USER@HOST:PORT/postgres (a user that may CREATE DATABASE) to run them; see docs/operations.md"
            ));
            return None;
        };
        static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("mandate_test_{}_{nanos}_{n}", std::process::id());
        let create = format!("CREATE DATABASE {name}");
        on_connection(admin.clone(), move |client| {
            Box::pin(async move {
                client
                    .batch_execute(&create)
                    .await
                    .unwrap_or_else(|e| panic!("CREATE DATABASE on {VAR}: {e}"));
            })
        });
        Some(TestDb {
            url: with_database(&admin, &name),
            admin,
            name,
        })
    }

    /// The database's URL with `extra` appended to its query (`sslmode=…`, ...).
    pub fn url_with(&self, extra: &str) -> String {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{separator}{extra}", self.url)
    }

    /// Runs SQL on the database directly (as an operator or a hand edit would).
    pub fn execute(&self, sql: &str) {
        let (url, sql) = (self.url.clone(), sql.to_owned());
        on_connection(url, move |client| {
            Box::pin(async move {
                client
                    .batch_execute(&sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            })
        });
    }

    /// One number a query returns (a count, a version).
    pub fn number(&self, sql: &str) -> i64 {
        self.one(sql)
    }

    /// The one value a query returns (a number, a setting, a name).
    pub fn one<T>(&self, sql: &str) -> T
    where
        T: for<'a> tokio_postgres::types::FromSql<'a> + Send + 'static,
    {
        let (url, sql) = (self.url.clone(), sql.to_owned());
        on_connection(url, move |client| {
            Box::pin(async move {
                let row = client
                    .query_one(&sql, &[])
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                row.get::<_, T>(0)
            })
        })
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        on_connection(self.admin.clone(), move |client| {
            Box::pin(async move {
                let _ = client.batch_execute(&drop).await;
            })
        });
    }
}

#[cfg(test)]
mod url_tests {
    use super::with_database;

    #[test]
    fn the_database_of_a_url_is_replaced() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres", "t1"),
            "postgres://u@h:5/t1"
        );
        assert_eq!(
            with_database("postgres://u:p@h/postgres?sslmode=disable", "t2"),
            "postgres://u:p@h/t2?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "t3"), "postgres://h/t3");
    }
}
