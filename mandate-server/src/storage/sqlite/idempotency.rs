//! Idempotency records, scoped to the API key. The decision of what to do with a record is
//! `mandate_core::idempotency::next_action`; this file only reads and writes rows. Response
//! bodies are stored sealed ([`crate::storage::idempotency::Sealed`]) and come back sealed.

use mandate_core::idempotency::{StoredAttempt, StoredResponse};
use rusqlite::{Connection, OptionalExtension, params};

use crate::storage::idempotency::Sealed;

/// The record under (key hash, Idempotency-Key).
pub fn get(
    conn: &Connection,
    key_hash: &[u8],
    idem_key: &str,
) -> rusqlite::Result<Option<(StoredAttempt, Option<String>)>> {
    conn.prepare_cached(
        "SELECT request_digest, created_ms, status, body, request_id FROM idempotency
         WHERE key_hash = ?1 AND idem_key = ?2",
    )?
    .query_row(params![key_hash, idem_key], |r| {
        let digest: Vec<u8> = r.get(0)?;
        let mut request_digest = [0u8; 32];
        if digest.len() == 32 {
            request_digest.copy_from_slice(&digest);
        }
        let status: Option<i64> = r.get(2)?;
        let body: Option<Vec<u8>> = r.get(3)?;
        let response = match (status, body) {
            (Some(status), Some(body)) => Some(StoredResponse {
                status: u16::try_from(status).unwrap_or(500),
                body,
            }),
            _ => None,
        };
        Ok((
            StoredAttempt {
                request_digest,
                created_at: r.get::<_, i64>(1)? / 1000,
                response,
            },
            r.get(4)?,
        ))
    })
    .optional()
}

/// Claims the key for a request now in flight (replacing an expired record).
pub fn claim(
    tx: &Connection,
    key_hash: &[u8],
    idem_key: &str,
    digest: &[u8; 32],
    now_ms: i64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO idempotency (key_hash, idem_key, request_digest, created_ms)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![key_hash, idem_key, &digest[..], now_ms])?;
    Ok(())
}

/// Stores the response of the request that claimed the key, its body sealed
/// ([`crate::storage::idempotency::Sealed`]): the database never holds a replayable answer in plaintext.
pub fn complete(
    tx: &Connection,
    key_hash: &[u8],
    idem_key: &str,
    status: u16,
    body: &Sealed,
    request_id: &str,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE idempotency SET status = ?3, body = ?4, request_id = ?5 WHERE key_hash = ?1 AND idem_key = ?2",
    )?
    .execute(params![key_hash, idem_key, status, &body.0, request_id])?;
    Ok(())
}

/// Releases a claim whose request failed with a 5xx: a retry may run it again.
pub fn release(tx: &Connection, key_hash: &[u8], idem_key: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "DELETE FROM idempotency WHERE key_hash = ?1 AND idem_key = ?2 AND status IS NULL",
    )?
    .execute(params![key_hash, idem_key])?;
    Ok(())
}

/// At start: no request is in flight any more, so unfinished claims are released, and
/// records past the 24-hour window are dropped.
pub fn sweep(tx: &Connection, older_than_ms: i64) -> rusqlite::Result<usize> {
    let released = tx.execute("DELETE FROM idempotency WHERE status IS NULL", [])?;
    let expired = tx.execute(
        "DELETE FROM idempotency WHERE created_ms < ?1",
        [older_than_ms],
    )?;
    Ok(released + expired)
}
