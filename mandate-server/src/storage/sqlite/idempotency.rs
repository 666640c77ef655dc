//! Idempotency records, scoped to the API key. The decision of what to do with a record is
//! `mandate_core::idempotency::next_action`; this file only reads and writes rows. Response
//! bodies are stored sealed ([`crate::storage::idempotency::Sealed`]) and come back sealed.

use mandate_core::idempotency::{StoredAttempt, StoredResponse};
use rusqlite::{Connection, OptionalExtension, params};

use crate::storage::idempotency::{CLAIM_MS, ClaimToken};

/// The record under (key hash, Idempotency-Key), as of `now_ms`: an unfinished claim that
/// ran out (its request never finished it) counts as absent.
pub fn get(
    conn: &Connection,
    key_hash: &[u8],
    idem_key: &str,
    now_ms: i64,
) -> rusqlite::Result<Option<(StoredAttempt, Option<String>)>> {
    let found = conn
        .prepare_cached(
            "SELECT request_digest, created_ms, status, body, request_id, claimed_until
             FROM idempotency WHERE key_hash = ?1 AND idem_key = ?2",
        )?
        .query_row(params![key_hash, idem_key], |r| {
            let until: Option<i64> = r.get(5)?;
            Ok((read(r)?, until))
        })
        .optional()?;
    Ok(found.and_then(|(record, until)| {
        let abandoned = record.0.response.is_none() && until.is_none_or(|until| until <= now_ms);
        (!abandoned).then_some(record)
    }))
}

/// A row's attempt and request id.
fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<(StoredAttempt, Option<String>)> {
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
            created_at: crate::clock::from_ms(r.get::<_, i64>(1)?),
            response,
        },
        r.get(4)?,
    ))
}

/// Claims the key for a request now in flight, with its token, for [`CLAIM_MS`]
/// (replacing an expired record or a claim that ran out).
pub fn claim(
    tx: &Connection,
    key_hash: &[u8],
    idem_key: &str,
    digest: &[u8; 32],
    claim: &ClaimToken,
    now_ms: i64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO idempotency
            (key_hash, idem_key, request_digest, created_ms, claim, claimed_until)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        key_hash,
        idem_key,
        &digest[..],
        now_ms,
        &claim[..],
        now_ms.saturating_add(CLAIM_MS)
    ])?;
    Ok(())
}

/// Whether the key's claim is still `claim` and unfinished: what the request that holds
/// it checks, in the transaction that stores its outcome.
pub fn owns(
    tx: &Connection,
    key_hash: &[u8],
    idem_key: &str,
    claim: &ClaimToken,
) -> rusqlite::Result<bool> {
    tx.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM idempotency
         WHERE key_hash = ?1 AND idem_key = ?2 AND claim = ?3 AND status IS NULL)",
    )?
    .query_row(params![key_hash, idem_key, &claim[..]], |r| r.get(0))
}

/// Stores the response of the request that claimed the key, its body sealed
/// ([`crate::storage::idempotency::Sealed`]): the database never holds a replayable answer
/// in plaintext. Only while the claim is still `claim`: a request whose claim was taken
/// over stores nothing.
pub fn complete(
    tx: &Connection,
    record: &crate::storage::idempotency::IdempotencyRecord,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE idempotency SET status = ?3, body = ?4, request_id = ?5, claimed_until = NULL
         WHERE key_hash = ?1 AND idem_key = ?2 AND claim = ?6 AND status IS NULL",
    )?
    .execute(params![
        &record.key_hash[..],
        record.idem_key,
        record.status,
        &record.body.0,
        record.request_id,
        &record.claim[..]
    ])?;
    Ok(())
}

/// Releases the claim `claim` of a request that ended without an outcome to keep (a 5xx,
/// or it was cut short): a retry may run it again. A claim taken over stays.
pub fn release(
    tx: &Connection,
    key_hash: &[u8],
    idem_key: &str,
    claim: &ClaimToken,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "DELETE FROM idempotency
         WHERE key_hash = ?1 AND idem_key = ?2 AND claim = ?3 AND status IS NULL",
    )?
    .execute(params![key_hash, idem_key, &claim[..]])?;
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
