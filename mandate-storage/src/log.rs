//! The decision log at the boundary (docs/audit.md): each organization and environment's
//! Merkle tree (RFC 6962) of verdict tokens in seq order, kept as C2SP tiles, its
//! checkpoints and the log keys that sign them. Written once for every engine.
//!
//! Level 0 of the tree is `log_strips`: rows of up to 256 consecutive leaf hashes with
//! their decisions' seqs, written once by the round that logged them and never across a
//! multiple of 256, so a level-0 tile is the strips from its first index and a decision's
//! leaf is found by its seq in one indexed read; levels 8, 16, ... are tiles of up to 256
//! hashes in `log_tiles`. A proof or a tree's edge reads the few tiles that hold its nodes
//! (`mandate_protocol::tlog::tiles_of`). What to append and what to sign is decided above the
//! store, by the checkpoint worker (`workers/checkpoint.rs`): the store reads what the
//! worker extends ([`LogStore::log_tail`]) and writes what it decided
//! ([`LogStore::append_log`]) only if the log is still where it was read.

use std::collections::HashMap;

use mandate_core::LogEntry;
use mandate_protocol::tlog::{LogHash, log_entry};
use mandate_protocol::tlog::{
    ProofError, ProofPlan, TILE_WIDTH, TileId, TreeEdge, hashes_from_tiles, tiles_of,
};

use super::StorageError;
use super::StoreFuture;
use super::decisions::Filters;
use super::engine::{Access, Columns, Engine, Param, Result, Scope, Tx, env_of, first};
use super::keys::StoredKey;
use super::log_entries::{self, TileRead};
pub use super::log_parts::{
    CheckpointShow, LogAppend, LogHead, LogTail, Quiet, ShownCheckpoint, TokenRead, TokensRead,
};
use super::log_parts::{
    as_i64, as_u64, decision_at, edge_of, hashes_of, head_at, level0_of, partial_tiles, strip_seqs,
    strips,
};
use super::log_rounds;
use super::statements::{Lock, LogSql};
use crate::model::Env;

/// The log's reads and writes.
pub trait LogStore {
    /// Up to `limit` logs with decisions not yet logged whose checkpoint was signed before
    /// `idle_since_ms` (unix ms) or never (no process is extending them), or with a
    /// checkpoint not yet shown.
    fn logs_with_news(&self, limit: i64, idle_since_ms: i64)
    -> StoreFuture<'_, Vec<(String, Env)>>;

    /// What the worker extends a log from, with at most `batch` decisions; only its head
    /// (`waiting`) if it waits by `quiet`.
    fn log_tail(
        &self,
        org: &str,
        env: Env,
        batch: i64,
        quiet: Option<Quiet>,
    ) -> StoreFuture<'_, LogTail>;

    /// The tokens of the decisions of a log in each of `ranges` (seqs above the first and
    /// below the second, at most the third of them), as rebuilt from their rows: seq and
    /// token (`None`: stored before tokens were kept).
    fn log_tokens(
        &self,
        org: &str,
        env: Env,
        ranges: Vec<(i64, i64, i64)>,
    ) -> StoreFuture<'_, Vec<(i64, Option<String>)>>;

    /// Writes `append` in one transaction if the log is still at `append.from` and no
    /// other process holds it; whether it was written.
    fn append_log(&self, append: LogAppend) -> StoreFuture<'_, bool>;

    /// Shows readers the checkpoint of `size` if `signed` is still the log's newest and
    /// bigger than the one shown (called once its commit is durable), as `note`: `signed`
    /// itself, or `signed` with witnesses' cosignatures added, which then also becomes the
    /// log's newest checkpoint.
    fn show_checkpoint(
        &self,
        org: &str,
        env: Env,
        size: u64,
        signed: &str,
        note: &str,
    ) -> StoreFuture<'_, bool>;

    /// Whether the steps of a round over many logs below ([`LogStore::log_tails`] and the
    /// rest) each serve all of them in one transaction, a statement for all
    /// ([`Engine::logs_at_once`]); otherwise they serve them one by one, as the steps
    /// above do, each log in a transaction of its own.
    fn logs_at_once(&self) -> bool;

    /// [`LogStore::log_tail`] of each of `logs` (a log and its `quiet`), in order.
    fn log_tails(
        &self,
        logs: Vec<(String, Env, Option<Quiet>)>,
        batch: i64,
    ) -> StoreFuture<'_, Vec<LogTail>>;

    /// [`LogStore::log_tokens`] of each of `reads` (a log and its ranges), in order.
    fn logs_tokens(&self, reads: Vec<TokenRead>) -> StoreFuture<'_, Vec<TokensRead>>;

    /// [`LogStore::append_log`] of each of `appends` (each log once), in order: whether
    /// each was written. A log another process is writing is not (it will have moved).
    fn append_logs(&self, appends: Vec<LogAppend>) -> StoreFuture<'_, Vec<bool>>;

    /// [`LogStore::show_checkpoint`] of each of `shows` (each log once), in order: whether
    /// each was shown. A log another process is writing is not (the next round shows it).
    fn show_checkpoints(&self, shows: Vec<CheckpointShow>) -> StoreFuture<'_, Vec<bool>>;

    /// The consistency proof (RFC 9162 §2.1.4) from the log's tree of `old` leaves to its
    /// tree of `new` leaves, from the stored tiles (`new` at most the log's size).
    fn log_consistency(
        &self,
        org: &str,
        env: Env,
        old: u64,
        new: u64,
    ) -> StoreFuture<'_, Vec<LogHash>>;

    /// The checkpoint readers are shown, if any.
    fn shown_checkpoint(&self, org: &str, env: Env) -> StoreFuture<'_, Option<ShownCheckpoint>>;

    /// A C2SP tile or entry bundle of a log, its first `width` hashes or entries as served
    /// (`None`: the log does not hold that many).
    fn log_tile(
        &self,
        org: &str,
        env: Env,
        tile: TileRead,
        width: usize,
    ) -> StoreFuture<'_, Option<Vec<u8>>>;

    /// The log entries (index, checkpoint, inclusion proof) of the decisions of `seqs`
    /// against `at` (the shown checkpoint when `None`), for those it covers.
    fn log_entries(
        &self,
        org: &str,
        env: Env,
        seqs: Vec<i64>,
        at: Option<ShownCheckpoint>,
    ) -> StoreFuture<'_, HashMap<i64, LogEntry>>;

    /// Every log key current or retired after `published_after_ms`.
    fn log_keys(&self, published_after_ms: i64) -> StoreFuture<'_, Vec<StoredKey>>;

    /// The number the next log key of `env` takes.
    fn next_log_key_number(&self, env: Env) -> StoreFuture<'_, i64>;

    /// Stores the log key `kid` (number `n`, secret as sealed) as the current one of `env`:
    /// with `first`, only if `env` has no log key (false: it had one); otherwise retiring
    /// the current one at `now_ms`.
    fn add_log_key(&self, key: NewLogKey) -> StoreFuture<'_, bool>;

    /// Replaces the stored secret of log key `kid` if it still is `from`; whether it was.
    fn replace_log_key_secret(&self, kid: &str, from: &[u8], to: &[u8]) -> StoreFuture<'_, bool>;
}

/// A log key to store ([`LogStore::add_log_key`]).
#[derive(Clone)]
pub struct NewLogKey {
    /// Its environment.
    pub env: Env,
    /// `log-<env>-<n>`.
    pub kid: String,
    /// Its number.
    pub n: i64,
    /// The secret as stored (sealed).
    pub secret: Vec<u8>,
    /// Now, unix ms.
    pub now_ms: i64,
    /// Only as the environment's first key.
    pub first: bool,
}

async fn head<T: Tx>(tx: &mut T, org: &str, env: Env, lock: Lock) -> Result<Option<LogHead>> {
    let read = |r: &dyn Columns| head_at(r, 0);
    let rows = tx
        .query(
            LogSql::Head { lock }.into(),
            &[org.into(), env.into()],
            read,
        )
        .await?;
    Ok(first(rows))
}

/// [`LogStore::log_tile`]'s reads: a hash tile's first `width` hashes, or an entry
/// bundle's first `width` entries ([`log_entries::read_bundle`]); `None` when the log holds
/// fewer.
async fn read_tile<T: Tx>(
    tx: &mut T,
    org: &str,
    env: Env,
    tile: TileRead,
    width: usize,
) -> Result<Option<Vec<u8>>> {
    match tile {
        TileRead::Hashes(_) if width == 0 || width > TILE_WIDTH => Ok(None),
        TileRead::Hashes(id) => {
            let tiles = read_tiles(tx, org, env, &[id]).await?;
            let hashes = tiles.get(&id).map(Vec::as_slice).unwrap_or_default();
            Ok(hashes
                .get(..width)
                .map(|hashes| hashes.iter().flat_map(|h| *h.as_bytes()).collect()))
        }
        TileRead::Entries(index) => log_entries::read_bundle(tx, org, env, index, width).await,
    }
}

/// The hashes of `tiles`, each from position 0 as far as it is stored: level 0 from the
/// leaves (up to the first missing index), the others from `log_tiles`.
async fn read_tiles<T: Tx>(
    tx: &mut T,
    org: &str,
    env: Env,
    tiles: &[TileId],
) -> Result<HashMap<TileId, Vec<LogHash>>> {
    let mut out = HashMap::with_capacity(tiles.len());
    for tile in tiles {
        let hashes = if tile.level == 0 {
            let start = as_i64(tile.index, "log tile")?.saturating_mul(TILE_WIDTH as i64);
            let params = [org.into(), env.into(), start.into(), (start + 256).into()];
            let read = |r: &dyn Columns| Ok((r.int(0)?, hashes_of(&r.bytes(1)?)?));
            let strips = tx.query(LogSql::StripRange.into(), &params, read).await?;
            level0_of(start, strips)
        } else {
            let params = [
                org.into(),
                env.into(),
                i64::from(tile.level).into(),
                as_i64(tile.index, "log tile")?.into(),
            ];
            let rows = tx
                .query(LogSql::Tile.into(), &params, |r| r.bytes(0))
                .await?;
            match first(rows) {
                Some(bytes) => hashes_of(&bytes)?,
                None => Vec::new(),
            }
        };
        out.insert(*tile, hashes);
    }
    Ok(out)
}

/// The edge of the stored tree of `size` leaves.
async fn read_edge<T: Tx>(tx: &mut T, org: &str, env: Env, size: u64) -> Result<TreeEdge> {
    let tiles = read_tiles(tx, org, env, &tiles_of(&TreeEdge::node_ids(size))).await?;
    edge_of(org, env, size, &tiles)
}

/// [`LogStore::log_tail`]'s reads.
async fn tail<T: Tx>(
    tx: &mut T,
    org: &str,
    env: Env,
    batch: i64,
    quiet: Option<Quiet>,
) -> Result<LogTail> {
    let head = head(tx, org, env, Lock::No).await?.unwrap_or_default();
    let upto = tx.watermark(org).await?;
    if quiet.is_some_and(|q| q.waits(&head, upto.saturating_add(1))) {
        return Ok(LogTail {
            head,
            waiting: true,
            ..LogTail::default()
        });
    }
    let params = [
        org.into(),
        env.into(),
        head.scanned_seq.into(),
        upto.saturating_add(1).into(),
        batch.into(),
    ];
    let read = |r: &dyn Columns| decision_at(r, 0);
    let rows = tx.query(LogSql::Ids.into(), &params, read).await?;
    if rows.is_empty() {
        return Ok(LogTail {
            head,
            ..LogTail::default()
        });
    }
    let edge = read_edge(tx, org, env, head.size).await?;
    let tiles = read_tiles(tx, org, env, &partial_tiles(head.size)).await?;
    Ok(LogTail {
        head,
        edge,
        tiles,
        decisions: rows,
        waiting: false,
    })
}

/// [`LogStore::log_tokens`]'s reads.
pub(crate) async fn tokens<T: Tx>(
    tx: &mut T,
    org: &str,
    env: Env,
    ranges: &[(i64, i64, i64)],
) -> Result<Vec<(i64, Option<String>)>> {
    let scope = Scope::new(org, env);
    let filters = Filters::default();
    let mut out = Vec::new();
    for &(above, below, limit) in ranges {
        let rows = tx
            .decisions(scope, &filters, above, below, false, limit)
            .await?;
        out.extend(rows.into_iter().map(|(seq, d)| (seq, d.token())));
    }
    Ok(out)
}

/// [`LogStore::append_log`]'s writes.
async fn append<T: Tx>(tx: &mut T, a: &LogAppend) -> Result<bool> {
    let scope = [a.org.as_str().into(), a.env.into()];
    tx.execute(LogSql::EnsureHead.into(), &scope).await?;
    let Some(now) = head(tx, &a.org, a.env, Lock::Skip).await? else {
        return Ok(false);
    };
    if (now.size, now.scanned_seq) != a.from {
        return Ok(false);
    }
    for strip in strips(&a.leaves, &a.tokens) {
        let (start, first_seq, seqs, hashes, entries) = strip?;
        let params = [
            a.org.as_str().into(),
            a.env.into(),
            start.into(),
            first_seq.into(),
            Param::Bytes(&seqs),
            Param::Bytes(&hashes),
        ];
        tx.execute(LogSql::AppendStrip.into(), &params).await?;
        // The strip's tokens, with it: the log keeps its entries whatever later happens
        // to the decisions' rows.
        let params = [
            a.org.as_str().into(),
            a.env.into(),
            start.into(),
            Param::Bytes(&entries),
        ];
        tx.execute(LogSql::AppendEntries.into(), &params).await?;
    }
    for (tile, hashes) in &a.tiles {
        let bytes: Vec<u8> = hashes.iter().flat_map(|h| *h.as_bytes()).collect();
        let params = [
            a.org.as_str().into(),
            a.env.into(),
            i64::from(tile.level).into(),
            as_i64(tile.index, "log tile")?.into(),
            Param::Bytes(&bytes),
        ];
        tx.execute(LogSql::PutTile.into(), &params).await?;
    }
    let params = [
        a.org.as_str().into(),
        a.env.into(),
        as_i64(a.size, "log size")?.into(),
        a.scanned_seq.into(),
        a.checkpoint.as_deref().into(),
        a.signed_ms.into(),
    ];
    tx.execute(LogSql::SetHead.into(), &params).await?;
    Ok(true)
}

/// The shown checkpoint.
async fn shown<T: Tx>(tx: &mut T, org: &str, env: Env) -> Result<Option<ShownCheckpoint>> {
    let read = |r: &dyn Columns| Ok((r.int(0)?, r.opt_text(1)?));
    let rows = tx
        .query(LogSql::Shown.into(), &[org.into(), env.into()], read)
        .await?;
    match first(rows) {
        Some((size, Some(note))) => Ok(Some(ShownCheckpoint {
            size: as_u64(size, "log shown size")?,
            note,
        })),
        _ => Ok(None),
    }
}

/// The leaf index of each of `seqs` that is logged, from the strips that hold them.
async fn leaf_indexes<T: Tx>(
    tx: &mut T,
    org: &str,
    env: Env,
    seqs: &[i64],
) -> Result<Vec<(i64, u64)>> {
    let params = [org.into(), env.into(), Param::Ints(seqs)];
    let read = |r: &dyn Columns| Ok((r.int(0)?, r.int(1)?, r.bytes(2)?));
    let strips = tx.query(LogSql::StripsOf.into(), &params, read).await?;
    let mut at = HashMap::new();
    for (start, first_seq, deltas) in strips {
        let start = as_u64(start, "leaf index")?;
        for (i, seq) in strip_seqs(first_seq, &deltas)?.into_iter().enumerate() {
            at.insert(seq, start + i as u64);
        }
    }
    Ok(seqs
        .iter()
        .filter_map(|seq| at.get(seq).map(|index| (*seq, *index)))
        .collect())
}

/// [`LogStore::log_entries`]'s reads: the leaves' indexes, then every tile their proofs
/// need, each once.
async fn entries<T: Tx>(
    tx: &mut T,
    org: &str,
    env: Env,
    seqs: &[i64],
    at: Option<ShownCheckpoint>,
) -> Result<HashMap<i64, LogEntry>> {
    let at = match at {
        Some(at) => at,
        None => match shown(tx, org, env).await? {
            Some(at) => at,
            None => return Ok(HashMap::new()),
        },
    };
    let leaves = leaf_indexes(tx, org, env, seqs).await?;
    let mut plans = Vec::new();
    for (seq, index) in leaves.into_iter().filter(|(_, i)| *i < at.size) {
        let plan = ProofPlan::inclusion(index, at.size)
            .map_err(|e| StorageError::Corrupt(format!("log leaf {index}: {e}")))?;
        plans.push((seq, index, plan));
    }
    let nodes: Vec<_> = plans
        .iter()
        .flat_map(|(_, _, p)| p.nodes().to_vec())
        .collect();
    let tiles = read_tiles(tx, org, env, &tiles_of(&nodes)).await?;
    let mut out = HashMap::with_capacity(plans.len());
    for (seq, index, plan) in plans {
        let broken = |e: ProofError| {
            StorageError::Corrupt(format!(
                "the log of {org} ({}) cannot prove leaf {index} of {}: {e}",
                env.as_str(),
                at.size
            ))
        };
        let hashes = hashes_from_tiles(plan.nodes(), &tiles).map_err(broken)?;
        let proof = plan.assemble(&hashes).map_err(broken)?;
        out.insert(seq, log_entry(index, at.note.clone(), proof));
    }
    Ok(out)
}

/// [`LogStore::log_consistency`]'s reads: the tiles that hold the proof's nodes, each once.
async fn consistency<T: Tx>(
    tx: &mut T,
    org: &str,
    env: Env,
    old: u64,
    new: u64,
) -> Result<Vec<LogHash>> {
    let broken = |e: ProofError| {
        StorageError::Corrupt(format!(
            "the log of {org} ({}) cannot prove its tree of {old} leaves in its tree of {new}: {e}",
            env.as_str()
        ))
    };
    let plan = ProofPlan::consistency(old, new).map_err(broken)?;
    let tiles = read_tiles(tx, org, env, &tiles_of(plan.nodes())).await?;
    let hashes = hashes_from_tiles(plan.nodes(), &tiles).map_err(broken)?;
    plan.assemble(&hashes).map_err(broken)
}

async fn keys<T: Tx>(tx: &mut T, published_after_ms: i64) -> Result<Vec<StoredKey>> {
    let read = |r: &dyn Columns| {
        Ok(StoredKey {
            kid: r.text(0)?,
            env: env_of(&r.text(1)?)?,
            secret: r.bytes(2)?,
            retired_ms: r.opt_int(3)?,
        })
    };
    tx.query(
        LogSql::KeysPublished.into(),
        &[published_after_ms.into()],
        read,
    )
    .await
}

async fn add_key<T: Tx>(tx: &mut T, key: &NewLogKey) -> Result<bool> {
    if !key.first {
        tx.query(LogSql::KeyLockCurrent.into(), &[key.env.into()], |r| {
            r.text(0)
        })
        .await?;
        tx.execute(
            LogSql::KeyRetire.into(),
            &[key.env.into(), key.now_ms.into()],
        )
        .await?;
    }
    let params = [
        key.env.into(),
        key.kid.as_str().into(),
        key.n.into(),
        key.secret.as_slice().into(),
        key.now_ms.into(),
    ];
    let stmt = LogSql::KeyInsert { first: key.first };
    Ok(tx.execute(stmt.into(), &params).await? > 0)
}

impl<E: Engine> LogStore for E {
    fn logs_with_news(
        &self,
        limit: i64,
        idle_since_ms: i64,
    ) -> StoreFuture<'_, Vec<(String, Env)>> {
        Box::pin(
            self.run(Access::Read, (limit, idle_since_ms), |tx, (limit, idle)| {
                Box::pin(async move {
                    let read = |r: &dyn Columns| Ok((r.text(0)?, env_of(&r.text(1)?)?));
                    let params = [(*limit).into(), (*idle).into()];
                    tx.query(LogSql::WithNews.into(), &params, read).await
                })
            }),
        )
    }

    fn log_tail(
        &self,
        org: &str,
        env: Env,
        batch: i64,
        quiet: Option<Quiet>,
    ) -> StoreFuture<'_, LogTail> {
        let args = (org.to_owned(), env, batch, quiet);
        Box::pin(self.run_at(
            org.to_owned(),
            Access::Read,
            args,
            |tx, (org, env, batch, quiet)| Box::pin(tail(tx, org, *env, *batch, *quiet)),
        ))
    }

    fn log_tokens(
        &self,
        org: &str,
        env: Env,
        ranges: Vec<(i64, i64, i64)>,
    ) -> StoreFuture<'_, Vec<(i64, Option<String>)>> {
        let args = (org.to_owned(), env, ranges);
        Box::pin(self.run_at(
            org.to_owned(),
            Access::Read,
            args,
            |tx, (org, env, ranges)| Box::pin(tokens(tx, org, *env, ranges)),
        ))
    }

    fn append_log(&self, append: LogAppend) -> StoreFuture<'_, bool> {
        let org = append.org.to_string();
        Box::pin(self.run_at(org, Access::Write, append, |tx, a| {
            Box::pin(self::append(tx, a))
        }))
    }

    fn show_checkpoint(
        &self,
        org: &str,
        env: Env,
        size: u64,
        signed: &str,
        note: &str,
    ) -> StoreFuture<'_, bool> {
        let args = (
            org.to_owned(),
            env,
            size,
            signed.to_owned(),
            note.to_owned(),
        );
        Box::pin(self.run_at(
            org.to_owned(),
            Access::Write,
            args,
            |tx, (org, env, size, signed, note)| {
                Box::pin(async move {
                    let params = [
                        org.as_str().into(),
                        (*env).into(),
                        as_i64(*size, "log size")?.into(),
                        signed.as_str().into(),
                        note.as_str().into(),
                    ];
                    Ok(tx.execute(LogSql::Show.into(), &params).await? > 0)
                })
            },
        ))
    }

    fn logs_at_once(&self) -> bool {
        Engine::logs_at_once(self)
    }

    fn log_tails(
        &self,
        logs: Vec<(String, Env, Option<Quiet>)>,
        batch: i64,
    ) -> StoreFuture<'_, Vec<LogTail>> {
        if let Err(e) = log_rounds::each_once(logs.iter().map(|(o, e, _)| (o.as_str(), *e))) {
            return Box::pin(async move { Err(e) });
        }
        if Engine::logs_at_once(self) {
            return Box::pin(self.run(Access::Read, (logs, batch), |tx, (logs, batch)| {
                Box::pin(log_rounds::tails(tx, logs, *batch))
            }));
        }
        Box::pin(async move {
            let mut out = Vec::with_capacity(logs.len());
            for (org, env, quiet) in logs {
                out.push(self.log_tail(&org, env, batch, quiet).await?);
            }
            Ok(out)
        })
    }

    fn logs_tokens(&self, reads: Vec<TokenRead>) -> StoreFuture<'_, Vec<TokensRead>> {
        if Engine::logs_at_once(self) {
            return Box::pin(self.run(Access::Read, reads, |tx, reads| {
                Box::pin(log_rounds::tokens(tx, reads))
            }));
        }
        Box::pin(async move {
            let mut out = Vec::with_capacity(reads.len());
            for (org, env, ranges) in reads {
                out.push(self.log_tokens(&org, env, ranges).await?);
            }
            Ok(out)
        })
    }

    fn append_logs(&self, appends: Vec<LogAppend>) -> StoreFuture<'_, Vec<bool>> {
        if let Err(e) = log_rounds::each_once(appends.iter().map(|a| (a.org.as_str(), a.env))) {
            return Box::pin(async move { Err(e) });
        }
        if Engine::logs_at_once(self) {
            return Box::pin(self.run(Access::Write, appends, |tx, appends| {
                Box::pin(log_rounds::appends(tx, appends))
            }));
        }
        Box::pin(async move {
            let mut out = Vec::with_capacity(appends.len());
            for append in appends {
                out.push(self.append_log(append).await?);
            }
            Ok(out)
        })
    }

    fn show_checkpoints(&self, shows: Vec<CheckpointShow>) -> StoreFuture<'_, Vec<bool>> {
        if let Err(e) = log_rounds::each_once(shows.iter().map(|s| (s.org.as_str(), s.env))) {
            return Box::pin(async move { Err(e) });
        }
        if Engine::logs_at_once(self) {
            return Box::pin(self.run(Access::Write, shows, |tx, shows| {
                Box::pin(log_rounds::shows(tx, shows))
            }));
        }
        Box::pin(async move {
            let mut out = Vec::with_capacity(shows.len());
            for s in shows {
                let shown = self
                    .show_checkpoint(&s.org, s.env, s.size, &s.signed, &s.note)
                    .await?;
                out.push(shown);
            }
            Ok(out)
        })
    }

    fn log_consistency(
        &self,
        org: &str,
        env: Env,
        old: u64,
        new: u64,
    ) -> StoreFuture<'_, Vec<LogHash>> {
        let args = (org.to_owned(), env, old, new);
        Box::pin(self.run(Access::Read, args, |tx, (org, env, old, new)| {
            Box::pin(consistency(tx, org, *env, *old, *new))
        }))
    }

    fn shown_checkpoint(&self, org: &str, env: Env) -> StoreFuture<'_, Option<ShownCheckpoint>> {
        let args = (org.to_owned(), env);
        Box::pin(self.run(Access::Read, args, |tx, (org, env)| {
            Box::pin(shown(tx, org, *env))
        }))
    }

    fn log_tile(
        &self,
        org: &str,
        env: Env,
        tile: TileRead,
        width: usize,
    ) -> StoreFuture<'_, Option<Vec<u8>>> {
        let args = (org.to_owned(), env, tile, width);
        Box::pin(self.run(Access::Read, args, |tx, (org, env, tile, width)| {
            Box::pin(read_tile(tx, org, *env, *tile, *width))
        }))
    }

    fn log_entries(
        &self,
        org: &str,
        env: Env,
        seqs: Vec<i64>,
        at: Option<ShownCheckpoint>,
    ) -> StoreFuture<'_, HashMap<i64, LogEntry>> {
        let args = (org.to_owned(), env, seqs, at);
        Box::pin(self.run(Access::Read, args, |tx, (org, env, seqs, at)| {
            Box::pin(entries(tx, org, *env, seqs, at.clone()))
        }))
    }

    fn log_keys(&self, published_after_ms: i64) -> StoreFuture<'_, Vec<StoredKey>> {
        Box::pin(self.run(Access::Read, published_after_ms, |tx, after| {
            Box::pin(keys(tx, *after))
        }))
    }

    fn next_log_key_number(&self, env: Env) -> StoreFuture<'_, i64> {
        Box::pin(self.run(Access::Read, env, |tx, env| {
            Box::pin(async move {
                let rows = tx
                    .query(LogSql::KeyNextNumber.into(), &[(*env).into()], |r| r.int(0))
                    .await?;
                Ok(first(rows).unwrap_or(1))
            })
        }))
    }

    fn add_log_key(&self, key: NewLogKey) -> StoreFuture<'_, bool> {
        Box::pin(self.run(Access::Write, key, |tx, key| Box::pin(add_key(tx, key))))
    }

    fn replace_log_key_secret(&self, kid: &str, from: &[u8], to: &[u8]) -> StoreFuture<'_, bool> {
        let args = (kid.to_owned(), from.to_vec(), to.to_vec());
        Box::pin(self.run(Access::Write, args, |tx, (kid, from, to)| {
            Box::pin(async move {
                let params = [
                    kid.as_str().into(),
                    from.as_slice().into(),
                    to.as_slice().into(),
                ];
                Ok(tx.execute(LogSql::KeySetSecret.into(), &params).await? > 0)
            })
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::log_parts::push_leb128;

    #[test]
    fn the_partial_tiles_are_those_the_next_nodes_go_to() {
        assert_eq!(partial_tiles(0), vec![]);
        assert_eq!(partial_tiles(255), vec![]);
        assert_eq!(partial_tiles(256), vec![TileId::new(1, 0)]);
        assert_eq!(partial_tiles(256 * 256), vec![TileId::new(2, 0)]);
        assert_eq!(
            partial_tiles(256 * 256 + 3 * 256),
            vec![TileId::new(1, 1), TileId::new(2, 0)]
        );
    }

    fn leaf(i: u64) -> LogHash {
        LogHash::from_bytes([u8::try_from(i % 251).unwrap_or(0); 32])
    }

    #[test]
    fn strips_never_cross_a_multiple_of_256_and_keep_every_seq() {
        // 600 leaves from index 200, seqs with gaps of 1 to 300 (one delta over 127 takes
        // two LEB128 bytes).
        let mut seq = 1_000;
        let leaves: Vec<(u64, i64, LogHash)> = (200..800)
            .map(|i| {
                seq += 1 + i64::try_from(i % 300).unwrap_or(0);
                (i, seq, leaf(i))
            })
            .collect();
        let tokens: Vec<String> = leaves.iter().map(|(i, _, _)| format!("t{i}")).collect();
        let leaves: Vec<(u64, i64, LogHash)> = leaves
            .into_iter()
            .zip(&tokens)
            .map(|((i, seq, _), t)| (i, seq, mandate_protocol::tlog::leaf_hash(t.as_bytes())))
            .collect();
        let strips: Vec<_> = strips(&leaves, &tokens).collect::<Result<_>>().unwrap();
        let starts: Vec<i64> = strips.iter().map(|s| s.0).collect();
        assert_eq!(starts, vec![200, 256, 512, 768]);
        let mut back = Vec::new();
        let mut bundles = Vec::new();
        for (start, first_seq, deltas, hashes, entries) in &strips {
            bundles.extend_from_slice(entries);
            let seqs = strip_seqs(*first_seq, deltas).unwrap();
            let hashes = hashes_of(hashes).unwrap();
            assert_eq!(seqs.len(), hashes.len());
            assert!((start % 256) as usize + seqs.len() <= 256);
            for (i, (seq, hash)) in seqs.into_iter().zip(hashes).enumerate() {
                back.push((*start as u64 + i as u64, seq, hash));
            }
        }
        assert_eq!(back, leaves);
        let data = log_entries::split_entries(&bundles, usize::MAX).unwrap();
        assert_eq!(data.len(), tokens.len());
        assert!(data.iter().zip(&tokens).all(|(d, t)| *d == t.as_bytes()));
    }

    #[test]
    fn leaves_out_of_order_are_refused_before_anything_is_written() {
        let tokens = ["a".to_owned(), "b".to_owned()];
        let data = |t: &str| mandate_protocol::tlog::leaf_hash(t.as_bytes());
        let gap = [(0, 5, data("a")), (2, 6, data("b"))];
        assert!(strips(&gap, &tokens).any(|s| s.is_err()));
        let backwards = [(0, 5, data("a")), (1, 5, data("b"))];
        assert!(strips(&backwards, &tokens).any(|s| s.is_err()));
        // A token that is not its leaf's data, or a token missing.
        let swapped = [(0, 5, data("b")), (1, 6, data("a"))];
        assert!(strips(&swapped, &tokens).any(|s| s.is_err()));
        let good = [(0, 5, data("a")), (1, 6, data("b"))];
        assert!(strips(&good, &tokens).all(|s| s.is_ok()));
        assert!(strips(&good, &tokens[..1]).any(|s| s.is_err()));
    }

    #[test]
    fn a_strip_whose_seqs_are_cut_or_do_not_grow_is_corrupt() {
        let mut deltas = Vec::new();
        push_leb128(&mut deltas, 300);
        assert_eq!(strip_seqs(7, &deltas).unwrap(), vec![7, 307]);
        assert!(strip_seqs(7, &deltas[..1]).is_err());
        assert!(strip_seqs(7, &[0]).is_err());
        assert!(strip_seqs(7, &[0xff; 11]).is_err());
    }
}
