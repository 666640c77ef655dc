//! Idempotency records at the boundary. What to do with a record is
//! `mandate_protocol::idempotency::next_action`; the store keeps the records.

use mandate_protocol::{
    idempotency::NextAction, idempotency::StoredAttempt, idempotency::StoredResponse,
    idempotency::next_action,
};
use time::OffsetDateTime;

use super::StoreFuture;
use super::engine::{Access, Columns, Engine, Lock, Result, Tx, first};
pub use super::records::{ClaimToken, IdempotencyRecord, Sealed};
use super::statements::IdempotencySql;
use crate::clock::{from_ms, ms};

/// How long a claim lasts, in ms: far longer than a request runs (its deadline is shorter).
/// A claim whose request never finished it (its process died) is taken over after this.
pub const CLAIM_MS: i64 = 60_000;

/// Idempotency records, scoped to the API key.
pub trait IdempotencyStore {
    /// Reads the record under (`key_hash`, `idem_key`) of the key's organization, decides with `next_action`, and
    /// claims the key for this request (with its `claim` token, for [`CLAIM_MS`]) when it is
    /// to be processed, in one transaction. An unfinished claim past its time counts as
    /// absent. Returns the action and, for a stored response, the id of the request it
    /// answered.
    #[allow(clippy::too_many_arguments)]
    fn claim_idempotency_key(
        &self,
        org_id: &str,
        key_hash: [u8; 32],
        idem_key: &str,
        digest: [u8; 32],
        claim: ClaimToken,
        now: OffsetDateTime,
    ) -> StoreFuture<'_, (NextAction, Option<String>)>;

    /// Stores `record` for the request that claimed its key, or, with `None`, releases the
    /// claim of (`key_hash`, `idem_key`) so that a retry may run the request again; either
    /// only while the claim is still `claim` (otherwise nothing changes).
    fn finish_idempotency(
        &self,
        org_id: &str,
        key_hash: [u8; 32],
        idem_key: &str,
        claim: ClaimToken,
        record: Option<IdempotencyRecord>,
    ) -> StoreFuture<'_, ()>;

    /// At start: releases every unfinished claim and drops records created before
    /// `older_than_ms`; returns how many went.
    fn sweep_idempotency(&self, older_than_ms: i64) -> StoreFuture<'_, usize>;
}

/// The key's record as stored (an unfinished claim that ran out by `now_ms` counts as
/// absent), with the id of the request it answered.
async fn stored<T: Tx>(
    tx: &mut T,
    org: &str,
    key_hash: &[u8; 32],
    idem_key: &str,
    now_ms: i64,
) -> Result<Option<(StoredAttempt, Option<String>)>> {
    let read = |r: &dyn Columns| {
        let digest = r.bytes(0)?;
        let mut request_digest = [0u8; 32];
        if digest.len() == 32 {
            request_digest.copy_from_slice(&digest);
        }
        let response = match (r.opt_int(2)?, r.opt_bytes(3)?) {
            (Some(status), Some(body)) => Some(StoredResponse {
                status: u16::try_from(status).unwrap_or(500),
                body,
            }),
            _ => None,
        };
        let attempt = StoredAttempt {
            request_digest,
            created_at: from_ms(r.int(1)?),
            response,
        };
        Ok((attempt, r.opt_text(4)?, r.opt_int(5)?))
    };
    let params = [org.into(), key_hash[..].into(), idem_key.into()];
    let lock = Lock::Wait;
    let rows = tx
        .query(IdempotencySql::Read { lock }.into(), &params, read)
        .await?;
    Ok(first(rows).and_then(|(attempt, request_id, until)| {
        // An unfinished claim whose holder did not finish it in time: its process died.
        let abandoned = attempt.response.is_none() && until.is_none_or(|until| until <= now_ms);
        (!abandoned).then_some((attempt, request_id))
    }))
}

/// A claim's organization, API key hash, Idempotency-Key, request digest and token.
type Args = (String, [u8; 32], String, [u8; 32], ClaimToken);

/// Claims a key that has a record (its row locked): decides with `next_action` and claims
/// it when the request is to be processed.
async fn claim_existing<T: Tx>(
    tx: &mut T,
    (org, key_hash, idem_key, digest, claim): &Args,
    now: OffsetDateTime,
) -> Result<(NextAction, Option<String>)> {
    let now_ms = ms(now);
    let until = now_ms.saturating_add(CLAIM_MS);
    let params = [
        org.into(),
        key_hash[..].into(),
        idem_key.into(),
        digest[..].into(),
        now_ms.into(),
        until.into(),
        claim[..].into(),
    ];
    let stored = stored(tx, org, key_hash, idem_key, now_ms).await?;
    let action = next_action(stored.as_ref().map(|s| &s.0), digest, now);
    if action == NextAction::StartProcessing {
        // Replaced, or claimed fresh if it was released since the first try.
        tx.execute(IdempotencySql::Reclaim.into(), &params).await?;
        tx.execute(IdempotencySql::ClaimFresh.into(), &params)
            .await?;
    }
    Ok((action, stored.and_then(|s| s.1)))
}

/// Whether the claim of `record` still holds its key, unfinished (its row locked).
pub(super) async fn owns<T: Tx>(tx: &mut T, record: &IdempotencyRecord) -> Result<bool> {
    let params = [
        record.org_id.as_ref().into(),
        record.key_hash[..].into(),
        record.idem_key.as_str().into(),
        record.claim[..].into(),
    ];
    let rows = tx
        .query(IdempotencySql::Owned.into(), &params, |_| Ok(()))
        .await?;
    Ok(!rows.is_empty())
}

/// Stores `record`'s response, if its claim still holds the key.
pub(super) async fn complete<T: Tx>(tx: &mut T, record: &IdempotencyRecord) -> Result<()> {
    let params = [
        record.org_id.as_ref().into(),
        record.key_hash[..].into(),
        record.idem_key.as_str().into(),
        u32::from(record.status).into(),
        record.body.0.as_slice().into(),
        record.request_id.as_str().into(),
        record.claim[..].into(),
    ];
    tx.execute(IdempotencySql::Complete.into(), &params).await?;
    Ok(())
}

/// Drops records created before `older_than_ms` and unfinished claims that ran out by
/// `now_ms`, where the engine sweeps them all at once; how many went.
pub(super) async fn sweep<T: Tx>(tx: &mut T, older_than_ms: i64, now_ms: i64) -> Result<usize> {
    let params = [older_than_ms.into(), now_ms.into()];
    let gone = tx.execute(IdempotencySql::Sweep.into(), &params).await?;
    Ok(usize::try_from(gone).unwrap_or(usize::MAX))
}

/// The organizations that have records to drop, where the engine keeps them by
/// organization (none elsewhere).
pub(super) async fn expired_orgs<T: Tx>(
    tx: &mut T,
    older_than_ms: i64,
    now_ms: i64,
) -> Result<Vec<String>> {
    let params = [older_than_ms.into(), now_ms.into()];
    tx.query(IdempotencySql::ExpiredOrgs.into(), &params, |r| r.text(0))
        .await
}

/// [`sweep`] of organization `org` alone, where the engine keeps records by organization.
pub(super) async fn sweep_org<T: Tx>(
    tx: &mut T,
    older_than_ms: i64,
    now_ms: i64,
    org: &str,
) -> Result<usize> {
    let params = [older_than_ms.into(), now_ms.into(), org.into()];
    let gone = tx.execute(IdempotencySql::SweepOrg.into(), &params).await?;
    Ok(usize::try_from(gone).unwrap_or(usize::MAX))
}

impl<E: Engine> IdempotencyStore for E {
    fn claim_idempotency_key(
        &self,
        org_id: &str,
        key_hash: [u8; 32],
        idem_key: &str,
        digest: [u8; 32],
        claim: ClaimToken,
        now: OffsetDateTime,
    ) -> StoreFuture<'_, (NextAction, Option<String>)> {
        let args: Args = (
            org_id.to_owned(),
            key_hash,
            idem_key.to_owned(),
            digest,
            claim,
        );
        Box::pin(async move {
            let now_ms = ms(now);
            // A key never used (the common case) in one statement.
            let fresh = self
                .run(
                    Access::Each,
                    args.clone(),
                    move |tx, (org, hash, key, digest, claim)| {
                        Box::pin(async move {
                            let params = [
                                org.into(),
                                hash[..].into(),
                                key.into(),
                                digest[..].into(),
                                now_ms.into(),
                                now_ms.saturating_add(CLAIM_MS).into(),
                                claim[..].into(),
                            ];
                            tx.execute(IdempotencySql::ClaimFresh.into(), &params).await
                        })
                    },
                )
                .await?;
            if fresh == 1 {
                return Ok((NextAction::StartProcessing, None));
            }
            self.run(Access::Write, args, move |tx, args| {
                Box::pin(claim_existing(tx, args, now))
            })
            .await
        })
    }

    fn finish_idempotency(
        &self,
        org_id: &str,
        key_hash: [u8; 32],
        idem_key: &str,
        claim: ClaimToken,
        record: Option<IdempotencyRecord>,
    ) -> StoreFuture<'_, ()> {
        let args = (
            org_id.to_owned(),
            key_hash,
            idem_key.to_owned(),
            claim,
            record,
        );
        Box::pin(
            self.run(Access::Each, args, |tx, (org, hash, key, claim, record)| {
                Box::pin(async move {
                    match record {
                        Some(record) => complete(tx, record).await,
                        None => {
                            let params =
                                [org.into(), hash[..].into(), key.into(), claim[..].into()];
                            tx.execute(IdempotencySql::Release.into(), &params).await?;
                            Ok(())
                        }
                    }
                })
            }),
        )
    }

    fn sweep_idempotency(&self, older_than_ms: i64) -> StoreFuture<'_, usize> {
        // Only claims that ran out: other processes may be serving with theirs.
        let window = mandate_protocol::idempotency::IDEMPOTENCY_WINDOW_SECS * 1000;
        let now_ms = older_than_ms.saturating_add(window);
        Box::pin(async move {
            let mut gone = self
                .run(Access::Each, (), move |tx, ()| {
                    Box::pin(sweep(tx, older_than_ms, now_ms))
                })
                .await?;
            let orgs = self
                .run(Access::Read, (), move |tx, ()| {
                    Box::pin(expired_orgs(tx, older_than_ms, now_ms))
                })
                .await?;
            // One transaction an organization: on Citus each is one worker's.
            for org in orgs {
                gone += self
                    .run(Access::Each, org, move |tx, org| {
                        Box::pin(sweep_org(tx, older_than_ms, now_ms, org))
                    })
                    .await?;
            }
            Ok(gone)
        })
    }
}
