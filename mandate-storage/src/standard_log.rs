//! The decision log's SQL that every engine speaks alike (`?1` for `$1`), beside
//! `standard.rs`: its tree, its heads and its keys. The list read ([`LogSql::StripsOf`]) is
//! each engine's own.

use super::statements::{Lock, LogSql, Sql, built, one};

/// The SQL of a statement of the log, `None` for one each engine writes its own way.
pub fn log(s: LogSql, locked: fn(Lock) -> &'static str) -> Option<Sql> {
    Some(match s {
        LogSql::WithNews => one("SELECT e.org_id, e.env FROM environments e
             LEFT JOIN log_heads h ON h.org_id = e.org_id AND h.env = e.env
             WHERE (h.shown_size IS NOT NULL AND h.shown_size < h.size)
                OR ((h.signed_ms IS NULL OR h.signed_ms < ?2)
                    AND EXISTS (SELECT 1 FROM decisions d
                                WHERE d.org_id = e.org_id AND d.env = e.env
                                  AND d.seq > COALESCE(h.scanned_seq, 0)))
             LIMIT ?1"),
        LogSql::EnsureHead => one(
            "INSERT INTO log_heads (org_id, env, size, scanned_seq, shown_size)
             VALUES (?1, ?2, 0, 0, 0) ON CONFLICT DO NOTHING",
        ),
        LogSql::Head { lock } => built(format!(
            "SELECT size, scanned_seq, checkpoint, shown_size, signed_ms FROM log_heads
             WHERE org_id = ?1 AND env = ?2{}",
            locked(lock)
        )),
        LogSql::Shown => {
            one("SELECT shown_size, shown_checkpoint FROM log_heads WHERE org_id = ?1 AND env = ?2")
        }
        LogSql::SetHead => one(
            "UPDATE log_heads SET size = ?3, scanned_seq = ?4, checkpoint = ?5, signed_ms = ?6
             WHERE org_id = ?1 AND env = ?2",
        ),
        LogSql::Show => one(
            "UPDATE log_heads SET shown_size = ?3, shown_checkpoint = ?5, checkpoint = ?5
             WHERE org_id = ?1 AND env = ?2 AND size = ?3 AND checkpoint = ?4
               AND shown_size < ?3",
        ),
        LogSql::AppendStrip => one(
            "INSERT INTO log_strips (org_id, env, start, first_seq, seqs, hashes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        ),
        LogSql::StripRange => one("SELECT start, hashes FROM log_strips
             WHERE org_id = ?1 AND env = ?2 AND start >= ?3 AND start < ?4
             ORDER BY start"),
        LogSql::AppendEntries => {
            one("INSERT INTO log_entries (org_id, env, start, entries) VALUES (?1, ?2, ?3, ?4)")
        }
        LogSql::EntryRange => one("SELECT start, entries FROM log_entries
             WHERE org_id = ?1 AND env = ?2 AND start >= ?3 AND start < ?4
             ORDER BY start"),
        LogSql::StripsOf | LogSql::Ids => return None,
        // Many logs at once: only an engine that serves them so says them
        // (`Engine::logs_at_once`).
        LogSql::HeadsOf { .. }
        | LogSql::EnsureHeadsOf
        | LogSql::IdsOf
        | LogSql::TokensOf
        | LogSql::StripRangesOf
        | LogSql::TilesOf
        | LogSql::AppendStripsOf
        | LogSql::AppendEntriesOf
        | LogSql::PutTilesOf
        | LogSql::SetHeadsOf
        | LogSql::ShowOf => return None,
        LogSql::Tile => one("SELECT hashes FROM log_tiles
             WHERE org_id = ?1 AND env = ?2 AND level = ?3 AND idx = ?4"),
        LogSql::PutTile => one(
            "INSERT INTO log_tiles (org_id, env, level, idx, hashes) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (org_id, env, level, idx) DO UPDATE SET hashes = excluded.hashes",
        ),
        LogSql::KeysPublished => one("SELECT kid, env, secret, retired_ms FROM log_keys
             WHERE retired_ms IS NULL OR retired_ms > ?1 ORDER BY env, n"),
        LogSql::KeyHasCurrent => {
            one("SELECT EXISTS (SELECT 1 FROM log_keys WHERE env = ?1 AND retired_ms IS NULL)")
        }
        LogSql::KeyLockCurrent => built(format!(
            "SELECT kid FROM log_keys WHERE env = ?1 AND retired_ms IS NULL{}",
            locked(Lock::Wait)
        )),
        LogSql::KeyNextNumber => one("SELECT COALESCE(MAX(n), 0) + 1 FROM log_keys WHERE env = ?1"),
        LogSql::KeySetSecret => {
            one("UPDATE log_keys SET secret = ?3 WHERE kid = ?1 AND secret = ?2")
        }
        LogSql::KeyRetire => {
            one("UPDATE log_keys SET retired_ms = ?2 WHERE env = ?1 AND retired_ms IS NULL")
        }
        // The first key's kid is the same for every process starting at once: one inserts.
        LogSql::KeyInsert { first: true } => {
            one("INSERT INTO log_keys (env, kid, n, secret, created_ms)
             SELECT ?1, ?2, ?3, ?4, ?5
             WHERE NOT EXISTS (SELECT 1 FROM log_keys WHERE env = ?1)
             ON CONFLICT DO NOTHING")
        }
        LogSql::KeyInsert { first: false } => one(
            "INSERT INTO log_keys (env, kid, n, secret, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        ),
    })
}
