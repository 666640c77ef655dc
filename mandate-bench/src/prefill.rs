//! `--prefill N`: synthetic decisions written straight into the SQLite file (server
//! stopped), so that runs can be made against a long history.
//!
//! Rows are spread round-robin over the agents and their mandates, evenly over the 90 days
//! before the run (ending two minutes ago, so that none counts for the velocity rule),
//! with the same mix as the load (80 % allow, 10 % review, 10 % deny_category) and every
//! column filled as the server fills it. Review decisions carry a review id but no row in
//! `reviews` (the hot path never reads them).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mandate_core::{DecisionId, Nonce};
use mandate_protocol::id::ReviewId;
use rusqlite::{Connection, params};

use crate::bail;
use crate::error::{Context, Result};
use crate::load::mix64;
use crate::setup::{Agent, REVIEW_ABOVE};

/// Who the decisions belong to.
pub struct Spec<'a> {
    /// The organization's id.
    pub org_id: &'a str,
    /// Its policy version.
    pub policy_version: &'a str,
    /// The server's issuer.
    pub issuer: &'a str,
    /// The agents (with their mandates).
    pub agents: &'a [Agent],
}

const COLUMNS: [&str; 20] = [
    "id",
    "scope",
    "mandate_id",
    "verdict",
    "policy_verdict",
    "reason",
    "mode",
    "amount",
    "currency",
    "recipient",
    "category",
    "nonce",
    "issuer",
    "iat",
    "exp",
    "created_ms",
    "supersedes",
    "review_id",
    "is_request",
    "agent_seq",
];

/// Rows per transaction.
const BATCH: u64 = 100_000;

fn id_bytes(i: u64, seed: u64, lane: u64) -> [u8; 16] {
    // mix64 is a bijection, so the first half alone makes every id distinct.
    let a = mix64(i ^ (lane << 60));
    let b = mix64(seed.wrapping_add(i).wrapping_add(lane));
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&a.to_be_bytes());
    out[8..].copy_from_slice(&b.to_be_bytes());
    out
}

/// Checks that the `decisions` table still has the columns this writes, and no other
/// column that needs a value.
fn check_schema(conn: &Connection) -> Result<()> {
    let mut stmt = conn
        .prepare("SELECT name, \"notnull\", dflt_value, pk FROM pragma_table_info('decisions')")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    let mut names = Vec::new();
    for row in rows {
        let (name, not_null, default, pk) = row?;
        if not_null && default.is_none() && pk == 0 && !COLUMNS.contains(&name.as_str()) {
            bail!("decisions.{name} is NOT NULL without a default: --prefill does not know it");
        }
        names.push(name);
    }
    for c in COLUMNS {
        if !names.iter().any(|n| n == c) {
            bail!(
                "decisions has no column {c} any more: update --prefill (mandate-bench/src/prefill.rs)"
            );
        }
    }
    Ok(())
}

/// Inserts `n` decisions; returns the time taken.
pub fn prefill(db: &Path, spec: &Spec<'_>, n: u64) -> Result<Duration> {
    if spec.agents.is_empty() {
        bail!("--prefill needs at least one agent");
    }
    let started = Instant::now();
    let mut conn = open_for_bulk(db)?;
    let now_ms = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0),
    )
    .unwrap_or(0);
    let spread = Spread {
        newest: now_ms - 120_000,
        span: 90 * 24 * 3600 * 1000,
        seed: mix64(u64::try_from(now_ms).unwrap_or(0)),
        n,
    };
    let agent_seqs = agent_seqs(&conn, spec)?;
    let scope = scope(&conn, spec)?;
    let issuer = issuer(&conn, spec)?;
    let mut done = 0u64;
    while done < n {
        let upto = (done + BATCH).min(n);
        let tx = conn.transaction()?;
        insert(&tx, spec, (scope, issuer, &agent_seqs), &spread, done..upto)?;
        tx.commit()?;
        done = upto;
        if n >= 1_000_000 && done.is_multiple_of(1_000_000) {
            eprintln!(
                "  prefill: {done} of {n} decisions ({:.0} s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
    settle(conn, db)?;
    Ok(started.elapsed())
}

/// The database opened for a bulk load into a scratch database: no journal and no fsync
/// per batch (a crash here only fails the benchmark; the file is switched back to WAL and
/// synced at the end), and a large page cache for the indexes that rows reach in random
/// order (the ids drawn here are random, unlike the server's time-ordered ones); its schema
/// checked.
fn open_for_bulk(db: &Path) -> Result<Connection> {
    let conn = Connection::open(db).ctx(format!("opening {}", db.display()))?;
    conn.execute_batch(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -2000000;",
    )?;
    check_schema(&conn)?;
    Ok(conn)
}

/// The key of the organization's sandbox in `decision_scopes` (decisions.scope).
fn scope(conn: &Connection, spec: &Spec<'_>) -> Result<i64> {
    conn.query_row(
        "SELECT key FROM decision_scopes WHERE org_id = ?1 AND env = 'sandbox'",
        params![spec.org_id],
        |r| r.get(0),
    )
    .ctx(format!("looking up the scope of {}", spec.org_id))
}

/// The key in `decision_issuers` (decisions.issuer) of the server's issuer and the
/// organization's policy version, the row made if the server has not made it yet.
fn issuer(conn: &Connection, spec: &Spec<'_>) -> Result<i64> {
    conn.execute(
        "INSERT OR IGNORE INTO decision_issuers (iss, policy_version) VALUES (?1, ?2)",
        params![spec.issuer, spec.policy_version],
    )
    .ctx("recording the decisions' issuer")?;
    conn.query_row(
        "SELECT key FROM decision_issuers WHERE iss = ?1 AND policy_version = ?2",
        params![spec.issuer, spec.policy_version],
        |r| r.get(0),
    )
    .ctx("looking up the decisions' issuer")
}

/// Each agent's integer key (decisions.agent_seq, the by-agent index's key).
fn agent_seqs(conn: &Connection, spec: &Spec<'_>) -> Result<Vec<i64>> {
    spec.agents
        .iter()
        .map(|a| {
            conn.query_row(
                "SELECT seq FROM agents WHERE org_id = ?1 AND env = 'sandbox' AND id = ?2",
                params![spec.org_id, a.id],
                |r| r.get(0),
            )
            .ctx(format!("looking up agent {}", a.id))
        })
        .collect()
}

/// How the decisions are spread: `n` of them over `span` ms ending at `newest`, drawn from
/// `seed`.
struct Spread {
    newest: i64,
    span: i64,
    seed: u64,
    n: u64,
}

/// What the decision `i` says, drawn from `h`: verdict, category, amount, reason, and the
/// review a `review` opens.
fn outcome(
    i: u64,
    h: u64,
    seed: u64,
    agent: &Agent,
) -> (
    &'static str,
    &'static str,
    String,
    Option<String>,
    Option<ReviewId>,
) {
    let cents = (h >> 20) % 100;
    match h % 10 {
        0 => {
            let amount = format!(
                "{}.{cents:02}",
                u64::from(REVIEW_ABOVE) + 1 + (h >> 8) % 800
            );
            let reason = format!(
                "amount {amount} is above review_above {REVIEW_ABOVE} and needs a human review"
            );
            let review = ReviewId::from_random(id_bytes(i, seed, 2));
            ("review", "software", amount, Some(reason), Some(review))
        }
        1 => (
            "deny_category",
            "gambling",
            format!("{}.{cents:02}", 1 + (h >> 8) % 50),
            Some(format!(
                "category gambling is not allowed by mandate {}",
                agent.mandate
            )),
            None,
        ),
        _ => (
            "allow",
            if (h >> 40) & 1 == 0 {
                "software"
            } else {
                "travel"
            },
            format!("{}.{cents:02}", 1 + (h >> 8) % u64::from(REVIEW_ABOVE - 1)),
            None,
            None,
        ),
    }
}

/// Inserts the decisions `range` (round-robin over the agents) in `tx`, in the scope and
/// the issuer and with the agents' keys of `keys`.
fn insert(
    tx: &Connection,
    spec: &Spec<'_>,
    keys: (i64, i64, &[i64]),
    spread: &Spread,
    range: std::ops::Range<u64>,
) -> Result<()> {
    let sql = format!(
        "INSERT INTO decisions ({}) VALUES ({})",
        COLUMNS.join(", "),
        (1..=COLUMNS.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut stmt = tx.prepare_cached(&sql)?;
    let (scope, issuer, agent_seqs) = keys;
    let (seed, agents) = (spread.seed, spec.agents.len() as u64);
    for i in range {
        let index = usize::try_from(i % agents).unwrap_or(0);
        let agent = &spec.agents[index];
        let h = mix64(i ^ seed);
        let created_ms = spread.newest - spread.span
            + i64::try_from(
                u128::from(i) * u128::try_from(spread.span).unwrap_or(0)
                    / u128::from(spread.n.max(1)),
            )
            .unwrap_or(0);
        let recipient = format!("vendor:v{}", (h >> 30) % 50);
        let (verdict, category, amount, reason, review) = outcome(i, h, seed, agent);
        let iat = created_ms / 1000;
        stmt.execute(params![
            DecisionId::from_random(id_bytes(i, seed, 0)).as_str(),
            scope,
            agent.mandate,
            verdict,
            verdict,
            reason,
            "enforce",
            amount,
            "USD",
            recipient,
            category,
            Nonce::from_random(id_bytes(i, seed, 1)).as_str(),
            issuer,
            iat,
            iat + 300,
            created_ms,
            Option::<String>::None,
            review.as_ref().map(ReviewId::as_str),
            1,
            agent_seqs[index],
        ])
        .ctx(format!("inserting decision {i}"))?;
    }
    Ok(())
}

/// After the bulk load: each agent's month marks filled, the file back in WAL mode,
/// checkpointed and synced.
fn settle(conn: Connection, db: &Path) -> Result<()> {
    // Where each agent's decisions of a month begin, as the server records them (its
    // migration 0004 computes them the same way).
    conn.execute_batch(
        "INSERT OR IGNORE INTO decision_months (org_id, env, agent_id, month, first_seq)
         SELECT a.org_id, a.env, a.id,
                CAST(strftime('%Y', d.created_ms / 1000, 'unixepoch') AS INTEGER) * 12
                    + CAST(strftime('%m', d.created_ms / 1000, 'unixepoch') AS INTEGER) - 1,
                MIN(d.seq)
         FROM decisions d JOIN agents a ON a.seq = d.agent_seq
         GROUP BY 1, 2, 3, 4;",
    )
    .ctx("filling decision_months")?;
    // Back to the server's journal mode; the file is then synced once.
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        bail!("could not switch the database back to WAL (journal_mode is {mode})");
    }
    conn.execute_batch("PRAGMA synchronous = FULL;")?;
    checkpoint(&conn)?;
    drop(conn);
    // The bulk load wrote the file without syncing it (journal off), and the checkpoint
    // above had no WAL frames to copy, so it synced nothing: gigabytes may still wait in the
    // page cache. Without this the kernel writes them back while the server is measured,
    // and every WAL sync waits behind them.
    std::fs::File::open(db)
        .and_then(|file| file.sync_all())
        .ctx(format!("syncing {}", db.display()))?;
    Ok(())
}

/// `PRAGMA wal_checkpoint(TRUNCATE)`: moves the WAL into the main file and empties it.
pub fn checkpoint(conn: &Connection) -> Result<()> {
    let (busy, _, _): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .ctx("wal_checkpoint")?;
    if busy != 0 {
        bail!("wal_checkpoint(TRUNCATE) was blocked (is the server still running?)");
    }
    Ok(())
}

/// Checkpoints the database (server stopped) and returns the size of its files in bytes
/// (main file plus whatever WAL is left, normally none).
pub fn settled_size(db: &Path) -> Result<u64> {
    {
        let conn = Connection::open(db).ctx(format!("opening {}", db.display()))?;
        checkpoint(&conn)?;
    }
    Ok(files_size(db))
}

/// Size of the database file and its `-wal`, as they are.
pub fn files_size(db: &Path) -> u64 {
    let mut total = 0;
    for suffix in ["", "-wal"] {
        let mut path = db.as_os_str().to_owned();
        path.push(suffix);
        total += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    }
    total
}
