//! [`PostgresStore`]: the PostgreSQL engine behind the storage boundary. It runs each use
//! case of the boundary (written once, `storage::engine`) on a connection from the pool,
//! in `BEGIN ... COMMIT` when it writes ([`PgTx`]); the blocking ones (operator commands,
//! start-up: `AdminStore`) on a thread of their own with a connection of their own, so
//! they never wait on the caller's runtime. Decisions go to the group writers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use deadpool_postgres::{Object, Pool};

use super::connect::Target;
use super::tx::PgTx;
use super::{Result, migrations};
use mandate_storage::StorageError;
use mandate_storage::deciding::{NewDecision, Recorded};
use mandate_storage::engine::{Access, Boxed, Engine};
use mandate_storage::location::PostgresUrl;

/// The PostgreSQL engine: a pool of connections to one database that any number of
/// server processes share.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    target: Target,
    /// Decisions are stored in groups (see `writer`).
    pub(super) writers: super::writer::Writers,
    /// On Citus, the connections to each organization's worker for the jobs of one
    /// organization (`near`); none when the URL's node takes every statement
    /// (`citus_direct_writes=off`).
    near: Option<super::near::Near>,
    /// The database is one node (not Citus): a transaction may span organizations, so the
    /// decision logs are served many at once ([`Engine::logs_at_once`]). Known once open.
    one_node: std::sync::atomic::AtomicBool,
}

/// What a blocking method runs on its own connection (it may borrow the caller's data:
/// the caller waits for it).
type AdminJob<'a, T> =
    Box<dyn FnOnce(Object) -> Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>> + Send + 'a>;

impl PostgresStore {
    /// Connects to the database at `url` and brings its schema up to date (with
    /// `migrate`), or checks that it is this server's (without: a schema older than this
    /// server needs is refused). A schema newer than this server knows is refused either
    /// way.
    pub async fn open(url: &PostgresUrl, migrate: bool) -> Result<Self> {
        let target = Target::parse(url)?;
        let pool = target.pool()?;
        // The writers' connections are made at their first group, after the migration.
        let writers = super::writer::Writers::start(
            &target.writers_pool()?,
            target.direct_writes.then_some(&target),
            target.writers,
            target.gather,
        );
        let near = target
            .direct_writes
            .then(|| super::near::Near::new(target.clone()));
        let store = Self {
            inner: Arc::new(Inner {
                pool,
                target,
                writers,
                near,
                one_node: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        let mut c = store.client().await?;
        // Citus is installed before Mandate's migrations, which distribute the tables.
        let citus: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
                &[],
            )
            .await
            .map_err(crate::pg_error)?
            .get(0);
        store
            .inner
            .one_node
            .store(!citus, std::sync::atomic::Ordering::Relaxed);
        if migrate {
            migrations::migrate(&mut c).await?;
            // Settings the migration gave the database (on Citus) hold for sessions opened
            // after it: this one leaves the pool.
            drop(Object::take(c));
        } else {
            let applied = migrations::applied(&c).await?;
            migrations::refuse_newer(applied)?;
            migrations::refuse_older(applied)?;
        }
        Ok(store)
    }

    /// A pool of connections to this store's database, for tests of its parts.
    #[cfg(test)]
    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// A pool for decision writers of this store's database, for tests of the writers.
    #[cfg(test)]
    pub(crate) fn writers_pool(&self) -> Result<Pool> {
        self.inner.target.writers_pool()
    }

    /// The database's URL (shown without its password).
    pub fn url(&self) -> &PostgresUrl {
        &self.inner.target.url
    }

    /// A connection from the pool.
    pub(crate) async fn client(&self) -> Result<Object> {
        self.inner.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => self.inner.target.connect_error(e),
            other => crate::pool_error(other),
        })
    }

    /// Runs `job` on a connection of its own, on a thread of its own with a runtime of its
    /// own, and waits for it: the blocking methods of [`AdminStore`](mandate_storage::AdminStore) may be called from
    /// any thread, a runtime's included, without waiting on that runtime.
    fn blocking<'a, T: Send + 'a>(&self, job: AdminJob<'a, T>) -> Result<T> {
        let target = &self.inner.target;
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name("mandate-pg-admin".into())
                .spawn_scoped(scope, move || -> Result<T> {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            StorageError::Task(format!("a runtime for the database: {e}"))
                        })?;
                    runtime.block_on(async move {
                        let pool = target.pool_of(1)?;
                        let c = pool.get().await.map_err(|e| match e {
                            deadpool_postgres::PoolError::Backend(e) => target.connect_error(e),
                            other => crate::pool_error(other),
                        })?;
                        job(c).await
                    })
                })
                .map_err(|e| StorageError::Task(format!("a thread for the database: {e}")))?;
            thread
                .join()
                .map_err(|_| StorageError::Task("the database thread panicked".into()))?
        })
    }
}

/// Boxes an admin job.
fn admin_job<'a, T, F, Fut>(f: F) -> AdminJob<'a, T>
where
    F: FnOnce(Object) -> Fut + Send + 'a,
    Fut: Future<Output = Result<T>> + Send + 'a,
{
    Box::new(move |c| Box::pin(f(c)))
}

/// Runs `job` on `c` in a transaction of the kind `access` names.
async fn run_on<A, T, F>(c: &mut Object, access: Access, args: &A, job: &F) -> Result<T>
where
    F: for<'t, 'c> Fn(&'t mut PgTx<'c>, &'t A) -> Boxed<'t, T>,
{
    if access == Access::Write {
        let tx = c.transaction().await.map_err(crate::pg_error)?;
        let out = job(&mut PgTx::of_transaction(&tx), args).await?;
        tx.commit().await.map_err(crate::pg_error)?;
        Ok(out)
    } else {
        job(&mut PgTx::of_client(c), args).await
    }
}

impl Engine for PostgresStore {
    type Tx<'c> = PgTx<'c>;

    async fn run<A, T, F>(&self, access: Access, args: A, job: F) -> Result<T>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
        F: for<'t, 'c> Fn(&'t mut PgTx<'c>, &'t A) -> Boxed<'t, T> + Send + Sync + 'static,
    {
        run_on(&mut self.client().await?, access, &args, &job).await
    }

    /// On the worker that holds `org`'s rows when this is Citus and that worker can be
    /// reached (`near`), else as [`Engine::run`].
    async fn run_at<A, T, F>(&self, org: String, access: Access, args: A, job: F) -> Result<T>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
        F: for<'t, 'c> Fn(&'t mut PgTx<'c>, &'t A) -> Boxed<'t, T> + Send + Sync + 'static,
    {
        if let Some(near) = &self.inner.near
            && let Some(mut c) = near.connection(&self.inner.pool, &org).await
        {
            return run_on(&mut c, access, &args, &job).await;
        }
        self.run(access, args, job).await
    }

    fn run_blocking<A, T, F>(&self, access: Access, args: A, job: F) -> Result<T>
    where
        A: Send + Sync,
        T: Send,
        F: for<'t, 'c> Fn(&'t mut PgTx<'c>, &'t A) -> Boxed<'t, T> + Send + Sync,
    {
        self.blocking(admin_job(move |mut c| async move {
            run_on(&mut c, access, &args, &job).await
        }))
    }

    fn latest_migration(&self) -> i64 {
        migrations::latest()
    }

    fn logs_at_once(&self) -> bool {
        self.inner
            .one_node
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// In the next group of a writer: one statement each (`record.rs`), the group
    /// committed at once (`writer.rs`).
    fn store_decision(
        &self,
        new: NewDecision,
    ) -> impl Future<Output = Result<Recorded>> + Send + '_ {
        self.inner.writers.record(new)
    }
}
