//! The decision log's reads and writes for many logs at once: a round of the checkpoint
//! worker over every log with news ([`crate::log::LogStore::log_tails`],
//! [`crate::log::LogStore::append_logs`], [`crate::log::LogStore::show_checkpoints`]), each
//! step one transaction whose statements each serve all of its logs, on an engine that
//! serves them so ([`crate::engine::Engine::logs_at_once`]). What they read and write is
//! what the one-log steps of `log.rs` read and write, log by log.
//!
//! The writes hold the heads they move, taken with `SKIP LOCKED`: a log another process
//! is writing is left to it (its write is answered `false`, as a log that moved is), so
//! two processes never wait on each other's rounds, whatever order their logs come in.

use std::collections::{BTreeSet, HashMap};

use mandate_protocol::tlog::{LogHash, TileId, TreeEdge, tiles_of};

use super::StorageError;
use super::engine::{Columns, Param, Result, Tx};
use super::log_parts::{
    CheckpointShow, LogAppend, LogHead, LogTail, Quiet, Strip, TokenRead, TokensRead, as_i64,
    decision_at, edge_of, hashes_of, head_at, level0_of, partial_tiles, strips,
};
use super::statements::LogSql;
use crate::model::Env;

/// The organizations and environments of `logs`, as two lists.
fn columns<'a>(logs: impl Iterator<Item = (&'a str, Env)>) -> (Vec<String>, Vec<String>) {
    logs.map(|(org, env)| (org.to_owned(), env.as_str().to_owned()))
        .unzip()
}

/// A position (from 1) a statement answers, as an index into its `len` lists.
fn position(k: i64, len: usize) -> Result<usize> {
    usize::try_from(k)
        .ok()
        .and_then(|k| k.checked_sub(1))
        .filter(|&i| i < len)
        .ok_or_else(|| StorageError::Corrupt(format!("a log position {k} of {len}")))
}

/// Refuses a list that names a log twice: its steps would read or write it twice.
pub(crate) fn each_once<'a>(logs: impl Iterator<Item = (&'a str, Env)>) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for (org, env) in logs {
        if !seen.insert((org, env)) {
            return Err(StorageError::Backend(format!(
                "the log of {org} ({}) is named twice in one round",
                env.as_str()
            )));
        }
    }
    Ok(())
}

/// The heads of `logs` (a log without one: the default), held with `lock` (then a log
/// another transaction holds is `None`).
async fn heads<T: Tx>(
    tx: &mut T,
    orgs: &[String],
    envs: &[String],
    lock: bool,
) -> Result<Vec<Option<LogHead>>> {
    let params = [Param::Texts(orgs), Param::Texts(envs)];
    let read = |r: &dyn Columns| Ok((r.int(0)?, head_at(r, 1)?));
    let rows = tx
        .query(LogSql::HeadsOf { lock }.into(), &params, read)
        .await?;
    let mut heads = vec![None; orgs.len()];
    for (k, head) in rows {
        heads[position(k, orgs.len())?] = Some(head);
    }
    Ok(heads)
}

/// [`crate::log::LogStore::log_tails`]: the tails of `logs` (each with its `Quiet`), in
/// order, as `log.rs` reads each, in a few statements whatever their number.
pub(crate) async fn tails<T: Tx>(
    tx: &mut T,
    read: &[(String, Env, Option<Quiet>)],
    batch: i64,
) -> Result<Vec<LogTail>> {
    each_once(read.iter().map(|(o, e, _)| (o.as_str(), *e)))?;
    if read.is_empty() {
        return Ok(Vec::new());
    }
    let logs: Vec<(String, Env)> = read.iter().map(|(o, e, _)| (o.clone(), *e)).collect();
    let (orgs, envs) = columns(logs.iter().map(|(o, e)| (o.as_str(), *e)));
    let heads: Vec<LogHead> = heads(tx, &orgs, &envs, false)
        .await?
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    // Each organization's watermark, once.
    let distinct: Vec<String> = orgs
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let marks: HashMap<&str, i64> = distinct
        .iter()
        .map(String::as_str)
        .zip(tx.watermarks(&distinct).await?)
        .collect();
    let below: Vec<i64> = orgs
        .iter()
        .map(|o| {
            marks
                .get(o.as_str())
                .copied()
                .unwrap_or(0)
                .saturating_add(1)
        })
        .collect();
    let mut tails: Vec<LogTail> = heads
        .into_iter()
        .zip(read)
        .zip(&below)
        .map(|((head, (_, _, quiet)), &below)| LogTail {
            waiting: quiet.is_some_and(|q| q.waits(&head, below)),
            head,
            ..LogTail::default()
        })
        .collect();
    // The decisions of the logs that do not wait: their positions in `logs`, and the lists.
    let at: Vec<usize> = (0..logs.len()).filter(|&i| !tails[i].waiting).collect();
    if !at.is_empty() {
        let (orgs, envs) = columns(at.iter().map(|&i| (logs[i].0.as_str(), logs[i].1)));
        let above: Vec<i64> = at.iter().map(|&i| tails[i].head.scanned_seq).collect();
        let below: Vec<i64> = at.iter().map(|&i| below[i]).collect();
        let params = [
            Param::Texts(&orgs),
            Param::Texts(&envs),
            Param::Ints(&above),
            Param::Ints(&below),
            batch.into(),
        ];
        let read = |r: &dyn Columns| Ok((r.int(0)?, decision_at(r, 1)?));
        let rows = tx.query(LogSql::IdsOf.into(), &params, read).await?;
        for (k, decision) in rows {
            tails[at[position(k, at.len())?]].decisions.push(decision);
        }
    }
    // The tiles of each log with decisions: its edge's, and its partial ones.
    let mut wanted: Vec<(usize, TileId)> = Vec::new();
    for (i, tail) in tails.iter().enumerate() {
        if tail.decisions.is_empty() {
            continue;
        }
        let mut ids: BTreeSet<TileId> = tiles_of(&TreeEdge::node_ids(tail.head.size))
            .into_iter()
            .collect();
        ids.extend(partial_tiles(tail.head.size));
        wanted.extend(ids.into_iter().map(|tile| (i, tile)));
    }
    let mut read = read_tiles(tx, &logs, &wanted).await?;
    for (i, tail) in tails.iter_mut().enumerate() {
        if tail.decisions.is_empty() {
            continue;
        }
        let tiles = read.remove(&i).unwrap_or_default();
        let (org, env) = (&logs[i].0, logs[i].1);
        tail.edge = edge_of(org, env, tail.head.size, &tiles)?;
        tail.tiles = partial_tiles(tail.head.size)
            .into_iter()
            .map(|tile| (tile, tiles.get(&tile).cloned().unwrap_or_default()))
            .collect();
    }
    Ok(tails)
}

/// The hashes of each wanted tile (the log's index in `logs`, the tile), from position 0 as
/// far as it is stored, by log: level 0 from the strips, the others from `log_tiles`.
async fn read_tiles<T: Tx>(
    tx: &mut T,
    logs: &[(String, Env)],
    wanted: &[(usize, TileId)],
) -> Result<HashMap<usize, HashMap<TileId, Vec<LogHash>>>> {
    let mut out: HashMap<usize, HashMap<TileId, Vec<LogHash>>> = HashMap::new();
    let (level0, above): (Vec<_>, Vec<_>) = wanted.iter().partition(|(_, t)| t.level == 0);
    if !level0.is_empty() {
        let (orgs, envs) = columns(
            level0
                .iter()
                .map(|(i, _)| (logs[*i].0.as_str(), logs[*i].1)),
        );
        let starts = level0
            .iter()
            .map(|(_, t)| Ok(as_i64(t.index, "log tile")?.saturating_mul(256)))
            .collect::<Result<Vec<i64>>>()?;
        let params = [
            Param::Texts(&orgs),
            Param::Texts(&envs),
            Param::Ints(&starts),
        ];
        let read = |r: &dyn Columns| Ok((r.int(0)?, r.int(1)?, hashes_of(&r.bytes(2)?)?));
        let rows = tx
            .query(LogSql::StripRangesOf.into(), &params, read)
            .await?;
        let mut strips: Vec<Vec<(i64, Vec<LogHash>)>> = vec![Vec::new(); level0.len()];
        for (k, start, hashes) in rows {
            strips[position(k, level0.len())?].push((start, hashes));
        }
        for (((i, tile), start), strips) in level0.iter().zip(&starts).zip(strips) {
            out.entry(*i)
                .or_default()
                .insert(*tile, level0_of(*start, strips));
        }
    }
    if !above.is_empty() {
        let (orgs, envs) = columns(above.iter().map(|(i, _)| (logs[*i].0.as_str(), logs[*i].1)));
        let levels: Vec<i64> = above.iter().map(|(_, t)| i64::from(t.level)).collect();
        let idxs = above
            .iter()
            .map(|(_, t)| as_i64(t.index, "log tile"))
            .collect::<Result<Vec<i64>>>()?;
        let params = [
            Param::Texts(&orgs),
            Param::Texts(&envs),
            Param::Ints(&levels),
            Param::Ints(&idxs),
        ];
        let read = |r: &dyn Columns| Ok((r.int(0)?, hashes_of(&r.bytes(1)?)?));
        let rows = tx.query(LogSql::TilesOf.into(), &params, read).await?;
        let mut found: Vec<Vec<LogHash>> = vec![Vec::new(); above.len()];
        for (k, hashes) in rows {
            found[position(k, above.len())?] = hashes;
        }
        for ((i, tile), hashes) in above.iter().zip(found) {
            out.entry(*i).or_default().insert(*tile, hashes);
        }
    }
    Ok(out)
}

/// [`crate::log::LogStore::append_logs`]: each of `appends` written as `log.rs` writes
/// one, if its log is still at its `from` and no other transaction holds it; whether each
/// was. Refused whole, before anything is written, if one is not well formed.
pub(crate) async fn appends<T: Tx>(tx: &mut T, appends: &[LogAppend]) -> Result<Vec<bool>> {
    each_once(appends.iter().map(|a| (a.org.as_str(), a.env)))?;
    // Every append cut into strips first: one that is not well formed refuses them all.
    let cut = appends
        .iter()
        .map(|a| strips(&a.leaves, &a.tokens).collect::<Result<Vec<_>>>())
        .collect::<Result<Vec<_>>>()?;
    if appends.is_empty() {
        return Ok(Vec::new());
    }
    // The logs in one order in every process, so that two rounds making heads never wait
    // on each other in a circle.
    let mut order: Vec<usize> = (0..appends.len()).collect();
    order.sort_by(|&a, &b| {
        (appends[a].org.as_str(), appends[a].env.as_str())
            .cmp(&(appends[b].org.as_str(), appends[b].env.as_str()))
    });
    let fresh: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&i| appends[i].from == (0, 0))
        .collect();
    if !fresh.is_empty() {
        let (orgs, envs) = columns(
            fresh
                .iter()
                .map(|&i| (appends[i].org.as_str(), appends[i].env)),
        );
        let params = [Param::Texts(&orgs), Param::Texts(&envs)];
        tx.execute(LogSql::EnsureHeadsOf.into(), &params).await?;
    }
    let (orgs, envs) = columns(
        order
            .iter()
            .map(|&i| (appends[i].org.as_str(), appends[i].env)),
    );
    let held = heads(tx, &orgs, &envs, true).await?;
    let mut written = vec![false; appends.len()];
    for (&i, head) in order.iter().zip(&held) {
        written[i] = head
            .as_ref()
            .is_some_and(|h| (h.size, h.scanned_seq) == appends[i].from);
    }
    let written_in_order: Vec<usize> = order.into_iter().filter(|&i| written[i]).collect();
    write(tx, appends, &cut, &written_in_order).await?;
    Ok(written)
}

/// Writes `appends[i]` for each `i` of `at` (in that order), its strips `cut[i]`: the
/// strips with their entries, the tiles and the heads, a statement each for all.
async fn write<T: Tx>(
    tx: &mut T,
    appends: &[LogAppend],
    cut: &[Vec<Strip>],
    at: &[usize],
) -> Result<()> {
    let mut strip_rows = Rows::default();
    let mut tile_rows = Rows::default();
    let mut head_rows = Rows::default();
    for &i in at {
        let a = &appends[i];
        let (org, env) = (a.org.as_str(), a.env.as_str());
        for (start, first_seq, seqs, hashes, entries) in &cut[i] {
            strip_rows.push(
                org,
                env,
                [*start, *first_seq],
                None,
                [seqs, hashes, entries],
            );
        }
        for (tile, hashes) in &a.tiles {
            let bytes: Vec<u8> = hashes.iter().flat_map(|h| *h.as_bytes()).collect();
            let ints = [i64::from(tile.level), as_i64(tile.index, "log tile")?];
            tile_rows.push(org, env, ints, None, [&bytes]);
        }
        let ints = [as_i64(a.size, "log size")?, a.scanned_seq, a.signed_ms];
        let checkpoint = a.checkpoint.clone().unwrap_or_default();
        head_rows.push(org, env, ints, Some(checkpoint), []);
    }
    if !strip_rows.orgs.is_empty() {
        let r = &strip_rows;
        let params = [
            Param::Texts(&r.orgs),
            Param::Texts(&r.envs),
            Param::Ints(&r.ints[0]),
            Param::Ints(&r.ints[1]),
            Param::Blobs(&r.blobs[0]),
            Param::Blobs(&r.blobs[1]),
        ];
        tx.execute(LogSql::AppendStripsOf.into(), &params).await?;
        // The strips' tokens, with them: the log keeps its entries whatever later happens
        // to the decisions' rows.
        let params = [
            Param::Texts(&r.orgs),
            Param::Texts(&r.envs),
            Param::Ints(&r.ints[0]),
            Param::Blobs(&r.blobs[2]),
        ];
        tx.execute(LogSql::AppendEntriesOf.into(), &params).await?;
    }
    if !tile_rows.orgs.is_empty() {
        let r = &tile_rows;
        let params = [
            Param::Texts(&r.orgs),
            Param::Texts(&r.envs),
            Param::Ints(&r.ints[0]),
            Param::Ints(&r.ints[1]),
            Param::Blobs(&r.blobs[0]),
        ];
        tx.execute(LogSql::PutTilesOf.into(), &params).await?;
    }
    if !head_rows.orgs.is_empty() {
        let r = &head_rows;
        let params = [
            Param::Texts(&r.orgs),
            Param::Texts(&r.envs),
            Param::Ints(&r.ints[0]),
            Param::Ints(&r.ints[1]),
            Param::Texts(&r.texts),
            Param::Ints(&r.ints[2]),
        ];
        tx.execute(LogSql::SetHeadsOf.into(), &params).await?;
    }
    Ok(())
}

/// The rows of one statement of many logs, as lists: a column each.
#[derive(Default)]
struct Rows {
    orgs: Vec<String>,
    envs: Vec<String>,
    ints: [Vec<i64>; 3],
    texts: Vec<String>,
    blobs: [Vec<Vec<u8>>; 3],
}

impl Rows {
    fn push<const I: usize, const B: usize>(
        &mut self,
        org: &str,
        env: &str,
        ints: [i64; I],
        text: Option<String>,
        blobs: [&Vec<u8>; B],
    ) {
        self.orgs.push(org.to_owned());
        self.envs.push(env.to_owned());
        for (column, value) in self.ints.iter_mut().zip(ints) {
            column.push(value);
        }
        if let Some(text) = text {
            self.texts.push(text);
        }
        for (column, value) in self.blobs.iter_mut().zip(blobs) {
            column.push(value.clone());
        }
    }
}

/// [`crate::log::LogStore::show_checkpoints`]: each of `shows` shown as `log.rs` shows
/// one, if its log is held by no other transaction; whether each was.
pub(crate) async fn shows<T: Tx>(tx: &mut T, shows: &[CheckpointShow]) -> Result<Vec<bool>> {
    each_once(shows.iter().map(|s| (s.org.as_str(), s.env)))?;
    if shows.is_empty() {
        return Ok(Vec::new());
    }
    let mut order: Vec<usize> = (0..shows.len()).collect();
    order.sort_by(|&a, &b| {
        (shows[a].org.as_str(), shows[a].env.as_str())
            .cmp(&(shows[b].org.as_str(), shows[b].env.as_str()))
    });
    let (orgs, envs) = columns(order.iter().map(|&i| (shows[i].org.as_str(), shows[i].env)));
    let held = heads(tx, &orgs, &envs, true).await?;
    let mine: Vec<usize> = order
        .iter()
        .zip(&held)
        .filter(|(_, h)| h.is_some())
        .map(|(&i, _)| i)
        .collect();
    let mut shown = vec![false; shows.len()];
    if mine.is_empty() {
        return Ok(shown);
    }
    let (orgs, envs) = columns(mine.iter().map(|&i| (shows[i].org.as_str(), shows[i].env)));
    let sizes = mine
        .iter()
        .map(|&i| as_i64(shows[i].size, "log size"))
        .collect::<Result<Vec<i64>>>()?;
    let signed: Vec<String> = mine.iter().map(|&i| shows[i].signed.clone()).collect();
    let notes: Vec<String> = mine.iter().map(|&i| shows[i].note.clone()).collect();
    let params = [
        Param::Texts(&orgs),
        Param::Texts(&envs),
        Param::Ints(&sizes),
        Param::Texts(&signed),
        Param::Texts(&notes),
    ];
    let rows = tx
        .query(LogSql::ShowOf.into(), &params, |r| r.int(0))
        .await?;
    for k in rows {
        shown[mine[position(k, mine.len())?]] = true;
    }
    Ok(shown)
}

/// [`crate::log::LogStore::logs_tokens`]: the tokens of the decisions of each read (a log
/// and its ranges), as `log.rs` reads each log's, in one statement for all.
pub(crate) async fn tokens<T: Tx>(tx: &mut T, reads: &[TokenRead]) -> Result<Vec<TokensRead>> {
    // Each range of each read, with the read's position.
    type Range<'a> = (usize, &'a str, Env, (i64, i64, i64));
    let ranges: Vec<Range<'_>> = reads
        .iter()
        .enumerate()
        .flat_map(|(i, (org, env, ranges))| ranges.iter().map(move |r| (i, org.as_str(), *env, *r)))
        .collect();
    let mut out = vec![Vec::new(); reads.len()];
    if ranges.is_empty() {
        return Ok(out);
    }
    let (orgs, envs) = columns(ranges.iter().map(|(_, org, env, _)| (*org, *env)));
    let above: Vec<i64> = ranges.iter().map(|(_, _, _, r)| r.0).collect();
    let below: Vec<i64> = ranges.iter().map(|(_, _, _, r)| r.1).collect();
    let most: Vec<i64> = ranges.iter().map(|(_, _, _, r)| r.2).collect();
    let params = [
        Param::Texts(&orgs),
        Param::Texts(&envs),
        Param::Ints(&above),
        Param::Ints(&below),
        Param::Ints(&most),
    ];
    let read = |r: &dyn Columns| {
        let k = r.int(0)?;
        let (seq, decision) = crate::decisions::read(&After(r))?;
        Ok((k, seq, decision.token()))
    };
    for (k, seq, token) in tx.query(LogSql::TokensOf.into(), &params, read).await? {
        let (i, ..) = ranges[position(k, ranges.len())?];
        out[i].push((seq, token));
    }
    Ok(out)
}

/// A row's columns after its first.
struct After<'r>(&'r dyn Columns);

impl Columns for After<'_> {
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        self.0.opt_int(i + 1)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        self.0.opt_text(i + 1)
    }
    fn opt_bytes(&self, i: usize) -> Result<Option<Vec<u8>>> {
        self.0.opt_bytes(i + 1)
    }
    fn opt_flag(&self, i: usize) -> Result<Option<bool>> {
        self.0.opt_flag(i + 1)
    }
}
