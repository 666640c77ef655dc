//! Idempotency records, scoped to the API key, shared by every process: a key claimed on
//! one process is in flight for all. A claim carries an expiry (`claimed_until`): a
//! process that dies while holding one lets go when it runs out, so a retry is not refused
//! for ever, while a starting process never releases the live claims of another.

use deadpool_postgres::GenericClient;
use mandate_core::idempotency::{NextAction, StoredAttempt, StoredResponse, next_action};

use super::Result;
use crate::clock::from_ms;
use crate::storage::idempotency::{CLAIM_MS, ClaimToken, Sealed};

const FRESH_SQL: &str =
    "INSERT INTO idempotency (key_hash, idem_key, request_digest, created_ms, claimed_until, claim)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key_hash, idem_key) DO NOTHING";

/// Claims a key never used (the common case) in one statement; `false` if a record exists.
pub async fn claim_fresh(
    c: &impl GenericClient,
    key_hash: &[u8; 32],
    idem_key: &str,
    digest: &[u8; 32],
    claim: &ClaimToken,
    now_ms: i64,
) -> Result<bool> {
    let until = now_ms.saturating_add(CLAIM_MS);
    let fresh = c.prepare_cached(FRESH_SQL).await?;
    let inserted = c
        .execute(
            &fresh,
            &[
                &&key_hash[..],
                &idem_key,
                &&digest[..],
                &now_ms,
                &until,
                &&claim[..],
            ],
        )
        .await?;
    Ok(inserted == 1)
}

/// Reads the existing record (its row locked, in the caller's transaction), decides with
/// `next_action`, and claims the key when the request is to be processed. Returns the
/// action and, for a stored response, the id of the request it answered.
pub async fn claim_existing(
    c: &impl GenericClient,
    key_hash: &[u8; 32],
    idem_key: &str,
    digest: &[u8; 32],
    claim: &ClaimToken,
    now_ms: i64,
) -> Result<(NextAction, Option<String>)> {
    let until = now_ms.saturating_add(CLAIM_MS);
    let key = &key_hash[..];
    let fresh = c.prepare_cached(FRESH_SQL).await?;
    let read = c
        .prepare_cached(
            "SELECT request_digest, created_ms, status, body, request_id, claimed_until
             FROM idempotency WHERE key_hash = $1 AND idem_key = $2 FOR UPDATE",
        )
        .await?;
    let Some(row) = c.query_opt(&read, &[&key, &idem_key]).await? else {
        // Released between the insert and the read: claim it now.
        c.execute(
            &fresh,
            &[&key, &idem_key, &&digest[..], &now_ms, &until, &&claim[..]],
        )
        .await?;
        return Ok((NextAction::StartProcessing, None));
    };
    let stored_digest: Vec<u8> = row.get(0);
    let mut request_digest = [0u8; 32];
    if stored_digest.len() == 32 {
        request_digest.copy_from_slice(&stored_digest);
    }
    let status: Option<i32> = row.get(2);
    let body: Option<Vec<u8>> = row.get(3);
    let request_id: Option<String> = row.get(4);
    let claimed_until: Option<i64> = row.get(5);
    let response = match (status, body) {
        (Some(status), Some(body)) => Some(StoredResponse {
            status: u16::try_from(status).unwrap_or(500),
            body,
        }),
        _ => None,
    };
    // An unfinished claim whose holder did not finish it in time: its process died.
    let abandoned = response.is_none() && claimed_until.is_none_or(|until| until <= now_ms);
    let stored = (!abandoned).then(|| StoredAttempt {
        request_digest,
        created_at: from_ms(row.get::<_, i64>(1)),
        response,
    });
    let action = next_action(stored.as_ref(), digest, from_ms(now_ms));
    if action == NextAction::StartProcessing {
        c.execute(
            "UPDATE idempotency SET request_digest = $3, created_ms = $4, claimed_until = $5,
                status = NULL, body = NULL, request_id = NULL, claim = $6
             WHERE key_hash = $1 AND idem_key = $2",
            &[&key, &idem_key, &&digest[..], &now_ms, &until, &&claim[..]],
        )
        .await?;
    }
    Ok((action, stored.and(request_id)))
}

/// The statement that stores the response of the request that claimed the key, if its
/// claim is still unfinished and its own: `$1` key hash, `$2` Idempotency-Key, `$3` status,
/// `$4` sealed body, `$5` request id, `$6` the claim's token.
pub(crate) const COMPLETE_SQL: &str = "UPDATE idempotency
    SET status = $3, body = $4, request_id = $5, claimed_until = NULL
    WHERE key_hash = $1 AND idem_key = $2 AND claim = $6 AND status IS NULL";

/// Stores the response of the request that claimed the key, its body sealed; nothing if
/// the claim was taken over.
pub async fn complete(
    c: &impl GenericClient,
    record: &crate::storage::idempotency::IdempotencyRecord,
) -> Result<()> {
    let stmt = c.prepare_cached(COMPLETE_SQL).await?;
    let body: &Sealed = &record.body;
    c.execute(
        &stmt,
        &[
            &&record.key_hash[..],
            &record.idem_key,
            &i32::from(record.status),
            &body.0,
            &record.request_id,
            &&record.claim[..],
        ],
    )
    .await?;
    Ok(())
}

/// Releases the claim `claim` of a request that ended without an outcome to keep (a 5xx,
/// or it was cut short): a retry may run it again. A claim taken over stays.
pub async fn release(
    c: &impl GenericClient,
    key_hash: &[u8],
    idem_key: &str,
    claim: &ClaimToken,
) -> Result<()> {
    let stmt = c
        .prepare_cached(
            "DELETE FROM idempotency
             WHERE key_hash = $1 AND idem_key = $2 AND claim = $3 AND status IS NULL",
        )
        .await?;
    c.execute(&stmt, &[&key_hash, &idem_key, &&claim[..]])
        .await?;
    Ok(())
}

/// At start: drops records past the 24-hour window and claims that ran out (their process
/// died). Claims still running belong to other live processes and stay.
pub async fn sweep(c: &impl GenericClient, older_than_ms: i64, now_ms: i64) -> Result<usize> {
    let gone = c
        .execute(
            "DELETE FROM idempotency
             WHERE created_ms < $1 OR (status IS NULL AND (claimed_until IS NULL OR claimed_until <= $2))",
            &[&older_than_ms, &now_ms],
        )
        .await?;
    Ok(usize::try_from(gone).unwrap_or(usize::MAX))
}
