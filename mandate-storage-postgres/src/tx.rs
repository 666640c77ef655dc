//! [`PgTx`]: the PostgreSQL engine's transaction, a pooled connection (in `BEGIN ...
//! COMMIT` when the use case writes) and its prepared statements, with the values of the
//! boundary bound as their parameters' types want and its rows read as its columns'
//! (`Columns`). Its steps (`engine::Tx`) are in `steps.rs`.

use deadpool_postgres::{ClientWrapper, StatementCache, Transaction};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};

use mandate_storage::StorageError;
use mandate_storage::engine::{Columns, Param, Result};

/// A transaction of the PostgreSQL engine: a connection and its prepared statements.
pub struct PgTx<'c> {
    client: &'c Client,
    cache: &'c StatementCache,
}

impl<'c> PgTx<'c> {
    /// Statements on a pooled connection, each on its own.
    pub fn of_client(client: &'c ClientWrapper) -> Self {
        Self {
            client,
            cache: &client.statement_cache,
        }
    }

    /// Statements in an open transaction.
    pub fn of_transaction(tx: &'c Transaction<'_>) -> Self {
        Self {
            client: tx.client(),
            cache: &tx.statement_cache,
        }
    }

    /// The connection.
    pub(super) fn client(&self) -> &'c Client {
        self.client
    }

    /// `text`, prepared once per connection.
    pub(super) async fn prepare(&self, text: &str) -> Result<Statement> {
        self.cache
            .prepare(self.client, text)
            .await
            .map_err(crate::pg_error)
    }
}

/// A value bound as the type the statement's parameter has.
enum Bound<'a> {
    I16(i16),
    I32(i32),
    I64(i64),
    Text(&'a str),
    Bytes(&'a [u8]),
    Flag(bool),
    Texts(&'a [String]),
    Ints(&'a [i64]),
    Blobs(&'a [Vec<u8>]),
    Null(&'static (dyn ToSql + Sync)),
}

const NULL_I16: Option<i16> = None;
const NULL_I32: Option<i32> = None;
const NULL_I64: Option<i64> = None;
const NULL_BOOL: Option<bool> = None;
const NULL_BYTES: Option<&[u8]> = None;
const NULL_TEXTS: Option<&[String]> = None;
const NULL_INTS: Option<&[i64]> = None;
const NULL_TEXT: Option<&str> = None;

impl Bound<'_> {
    fn value(&self) -> &(dyn ToSql + Sync) {
        match self {
            Bound::I16(v) => v,
            Bound::I32(v) => v,
            Bound::I64(v) => v,
            Bound::Text(v) => v,
            Bound::Bytes(v) => v,
            Bound::Flag(v) => v,
            Bound::Texts(v) => v,
            Bound::Ints(v) => v,
            Bound::Blobs(v) => v,
            Bound::Null(v) => *v,
        }
    }
}

/// `param` as the type `ty` of its parameter: an integer at its column's width, a `NULL`
/// of that type.
fn bind<'a>(param: &'a Param<'a>, ty: &Type) -> Result<Bound<'a>> {
    let narrow = |v: i64| StorageError::Backend(format!("{v} does not fit a {ty} parameter"));
    Ok(match param {
        Param::Int(v) => match *ty {
            Type::INT2 => Bound::I16(i16::try_from(*v).map_err(|_| narrow(*v))?),
            Type::INT4 => Bound::I32(i32::try_from(*v).map_err(|_| narrow(*v))?),
            _ => Bound::I64(*v),
        },
        Param::Text(text) => Bound::Text(text),
        Param::Bytes(bytes) => Bound::Bytes(bytes),
        Param::Flag(flag) => Bound::Flag(*flag),
        Param::Texts(list) => Bound::Texts(list),
        Param::Ints(list) => Bound::Ints(list),
        Param::Blobs(list) => Bound::Blobs(list),
        Param::Null => Bound::Null(match *ty {
            Type::INT2 => &NULL_I16,
            Type::INT4 => &NULL_I32,
            Type::INT8 => &NULL_I64,
            Type::BOOL => &NULL_BOOL,
            Type::BYTEA => &NULL_BYTES,
            Type::TEXT_ARRAY => &NULL_TEXTS,
            Type::INT8_ARRAY => &NULL_INTS,
            _ => &NULL_TEXT,
        }),
    })
}

/// The first of `params` bound to `stmt`, as many as it takes.
fn bound<'a>(stmt: &Statement, params: &'a [Param<'a>]) -> Result<Vec<Bound<'a>>> {
    let types = stmt.params();
    if params.len() < types.len() {
        return Err(StorageError::Backend(format!(
            "a statement takes {} values and was given {}",
            types.len(),
            params.len()
        )));
    }
    params
        .iter()
        .zip(types)
        .map(|(p, ty)| bind(p, ty))
        .collect()
}

/// A row as the boundary reads it.
pub struct PgRow<'r>(pub &'r Row);

impl Columns for PgRow<'_> {
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        let row = self.0;
        let ty = row.columns().get(i).map(|c| c.type_().clone());
        Ok(match ty {
            Some(Type::INT2) => row
                .try_get::<_, Option<i16>>(i)
                .map_err(crate::pg_error)?
                .map(i64::from),
            Some(Type::INT4) => row
                .try_get::<_, Option<i32>>(i)
                .map_err(crate::pg_error)?
                .map(i64::from),
            _ => row.try_get(i).map_err(crate::pg_error)?,
        })
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        self.0.try_get(i).map_err(crate::pg_error)
    }

    fn opt_bytes(&self, i: usize) -> Result<Option<Vec<u8>>> {
        self.0.try_get(i).map_err(crate::pg_error)
    }

    fn opt_flag(&self, i: usize) -> Result<Option<bool>> {
        self.0.try_get(i).map_err(crate::pg_error)
    }
}

impl PgTx<'_> {
    /// The rows `text` returns.
    pub(super) async fn rows(&self, text: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        let stmt = self.prepare(text).await?;
        let bound = bound(&stmt, params)?;
        let values: Vec<_> = bound.iter().map(Bound::value).collect();
        self.client
            .query(&stmt, &values)
            .await
            .map_err(crate::pg_error)
    }

    /// Runs `text`; how many rows it changed.
    pub(super) async fn run(&self, text: &str, params: &[Param<'_>]) -> Result<u64> {
        let stmt = self.prepare(text).await?;
        let bound = bound(&stmt, params)?;
        let values: Vec<_> = bound.iter().map(Bound::value).collect();
        self.client
            .execute(&stmt, &values)
            .await
            .map_err(crate::pg_error)
    }
}
