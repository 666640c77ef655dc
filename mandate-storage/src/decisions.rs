//! Decisions at the boundary: the reads of the decision log, the columns every engine
//! reads a decision by and their decoding, written once.

use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, Currency, DecisionId, MandateId, Mode, Nonce,
    Recipient, Verdict, VerdictClaims,
};
use mandate_protocol::{id::ReviewId, review::ReviewStatus};

use super::deciding::resolution_column;
use super::engine::{Access, Columns, Engine, Result, Scope, Tx, first};
pub use super::records::Filters;
use super::statements::DecisionSql;
use super::{StorageError, StoreFuture};
use crate::model::Env;
use crate::model::decision::{Decision, ReviewState, TokenSignature, with_bindings_column};

/// Reads the decision log.
pub trait DecisionStore {
    /// One decision, optionally only if it belongs to agent `only`.
    fn decision(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<Decision>>;

    /// One decision with its seq, as [`DecisionStore::decision`].
    fn decision_at(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<(i64, Decision)>>;

    /// The seq (place in the log) of one decision, optionally only if it belongs to agent
    /// `only`: where an incremental export resumes.
    fn decision_seq(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<i64>>;

    /// A page of decisions, newest first, strictly before seq `before`.
    fn decisions_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &Filters,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Decision)>>;

    /// The organization's log's watermark (0 for an empty log; seqs are per organization
    /// where the engine keys its tables by organization): every decision that will ever be committed
    /// with a seq at or below it is visible now, and the watermark never goes down. Readers
    /// of the log (the list's first page, exports) read only up to it, so a decision
    /// committed later never lands behind what they have read (docs/exports.md, "A log that
    /// never skips"). Where commits are in seq order (SQLite) it is the highest seq; it may
    /// lie below decisions already visible, or above the highest (seqs of groups that
    /// stored nothing), never below a decision that is still to come.
    fn settled_decision_seq(&self, org_id: &str) -> StoreFuture<'_, i64>;

    /// Up to `limit` decisions matching `filters`, oldest first, with seq in
    /// (`after`, `upto`]: one page of an export.
    #[allow(clippy::too_many_arguments)]
    fn decisions_export_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &Filters,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Decision)>>;
}

/// The columns of a decision with `$agent` the expression of its agent's id and `$issued`
/// that of its `policy_version, iss`, then where the review it opened stands (one lookup by
/// the review's unique id, skipped when it opened none), read by [`read`]. A macro so that
/// each engine's text is a constant.
#[doc(hidden)]
#[macro_export]
macro_rules! decision_columns {
    ($agent:literal, $issued:literal, $reviews:literal) => {
        concat!(
            "seq, id, ",
            $agent,
            ", mandate_id, verdict, policy_verdict, reason, mode,
                amount, currency, recipient, category, nonce, ",
            $issued,
            ", iat, exp,
                created_ms, supersedes, review_id, is_request,
                CASE WHEN review_id IS NULL THEN NULL
                     ELSE (SELECT status FROM reviews WHERE ",
            $reviews,
            ") END,
                CASE WHEN review_id IS NULL THEN NULL
                     ELSE (SELECT expires_ms FROM reviews WHERE ",
            $reviews,
            ") END,
                CASE WHEN review_id IS NULL THEN NULL
                     ELSE (SELECT resolution FROM reviews WHERE ",
            $reviews,
            ") END,
                signing_kid, signature, bindings,
                CASE WHEN review_id IS NULL THEN NULL
                     ELSE (SELECT reason FROM reviews WHERE ",
            $reviews,
            ") END,
                CASE WHEN review_id IS NULL THEN NULL
                     ELSE (SELECT resolved_ms FROM reviews WHERE ",
            $reviews,
            ") END"
        )
    };
}

pub use decision_columns;

/// `decision_columns!` of a table that stores the agent's id as `agent_id` and is keyed
/// by organization (PostgreSQL): each review looked up in the decision's organization.
pub const COLUMNS: &str = decision_columns!(
    "agent_id",
    "policy_version, iss",
    "reviews.org_id = decisions.org_id AND reviews.id = decisions.review_id"
);

/// A stored verdict.
fn verdict_of(text: &str) -> Result<Verdict> {
    Verdict::parse(text).ok_or_else(|| StorageError::Corrupt(format!("verdict {text:?}")))
}

/// A row of [`COLUMNS`]: the decision with its seq, every column parsed into its type; a
/// value that does not parse is a corrupt row naming the column.
pub fn read(r: &dyn Columns) -> Result<(i64, Decision)> {
    let bad = |what: &str| StorageError::Corrupt(format!("decision column {what}"));
    let id = DecisionId::parse(&r.text(1)?).map_err(|_| bad("id"))?;
    let mandate = r.opt_text(3)?;
    let claims = VerdictClaims {
        bindings: mandate_core::Bindings::default(),
        iss: r.text(14)?,
        jti: id,
        iat: r.int(15)?,
        exp: r.int(16)?,
        verdict: verdict_of(&r.text(4)?)?,
        policy_verdict: verdict_of(&r.text(5)?)?,
        mandate: mandate
            .as_deref()
            .map(MandateId::parse)
            .transpose()
            .map_err(|_| bad("mandate_id"))?,
        policy_version: r.text(13)?,
        nonce: Nonce::parse(&r.text(12)?).map_err(|_| bad("nonce"))?,
        request: AuthorizationRequest {
            agent: AgentId::parse(&r.text(2)?).map_err(|_| bad("agent_id"))?,
            amount: Amount::parse(&r.text(8)?).map_err(|_| bad("amount"))?,
            currency: Currency::parse(&r.text(9)?).map_err(|_| bad("currency"))?,
            recipient: Recipient::parse(&r.text(10)?).map_err(|_| bad("recipient"))?,
            category: Category::parse(&r.text(11)?).map_err(|_| bad("category"))?,
        },
    };
    let bindings = r.opt_text(26)?;
    let claims = with_bindings_column(claims, bindings.as_deref()).map_err(|_| bad("bindings"))?;
    let decision_id = |i: usize, what: &str| -> Result<Option<DecisionId>> {
        let text = r.opt_text(i)?;
        text.as_deref()
            .map(DecisionId::parse)
            .transpose()
            .map_err(|_| bad(what))
    };
    let review = r.opt_text(19)?;
    let review_state = match (r.opt_text(21)?, r.opt_int(22)?) {
        (Some(status), Some(expires_ms)) => Some({
            let (resolution, withdrawn) = resolution_column(r.opt_text(23)?.as_deref())?;
            ReviewState {
                status: ReviewStatus::parse(&status).ok_or_else(|| bad("review status"))?,
                expires_ms,
                resolution,
                withdrawn,
                reason: r.opt_text(27)?,
                resolved_ms: r.opt_int(28)?,
            }
        }),
        _ => None,
    };
    let signature = match (r.opt_text(24)?, r.opt_bytes(25)?) {
        (Some(kid), Some(bytes)) => Some(TokenSignature {
            kid,
            bytes,
            leaf: None,
            tag: None,
        }),
        _ => None,
    };
    let decision = Decision {
        claims,
        reason: r.opt_text(6)?,
        mode: Mode::parse(&r.text(7)?).ok_or_else(|| bad("mode"))?,
        supersedes: decision_id(18, "supersedes")?,
        review: review
            .as_deref()
            .map(ReviewId::parse)
            .transpose()
            .map_err(|_| bad("review_id"))?,
        created_ms: r.int(17)?,
        is_request: r.flag(20)?,
        review_state,
        signature,
    };
    Ok((r.int(0)?, decision))
}

/// The values of [`DecisionSql::Get`] and [`DecisionSql::Seq`].
fn by_id<'a>(
    org: &'a str,
    env: Env,
    only: Option<&'a AgentId>,
    id: &'a DecisionId,
) -> [super::engine::Param<'a>; 4] {
    [
        org.into(),
        env.into(),
        id.as_str().into(),
        only.map(AgentId::as_str).into(),
    ]
}

impl<E: Engine> DecisionStore for E {
    fn decision(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<Decision>> {
        let read = self.decision_at(org_id, env, only, id);
        Box::pin(async move { Ok(read.await?.map(|(_, d)| d)) })
    }

    fn decision_at(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<(i64, Decision)>> {
        let args = (org_id.to_owned(), env, only.cloned(), id.clone());
        Box::pin(self.run(Access::Read, args, |tx, (org, env, only, id)| {
            Box::pin(async move {
                let params = by_id(org, *env, only.as_ref(), id);
                let rows = tx.query(DecisionSql::Get.into(), &params, read).await?;
                Ok(first(rows))
            })
        }))
    }

    fn decision_seq(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<i64>> {
        let args = (org_id.to_owned(), env, only.cloned(), id.clone());
        Box::pin(self.run(Access::Read, args, |tx, (org, env, only, id)| {
            Box::pin(async move {
                let params = by_id(org, *env, only.as_ref(), id);
                let rows = tx
                    .query(DecisionSql::Seq.into(), &params, |r| r.int(0))
                    .await?;
                Ok(first(rows))
            })
        }))
    }

    fn decisions_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &Filters,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Decision)>> {
        let args = (org_id.to_owned(), env, filters.clone());
        Box::pin(
            self.run(Access::Read, args, move |tx, (org, env, filters)| {
                let s = Scope::new(org, *env);
                Box::pin(tx.decisions(s, filters, i64::MIN, before, true, limit))
            }),
        )
    }

    fn settled_decision_seq(&self, org_id: &str) -> StoreFuture<'_, i64> {
        Box::pin(self.run(Access::Read, org_id.to_owned(), |tx, org| {
            Box::pin(tx.watermark(org))
        }))
    }

    fn decisions_export_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &Filters,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Decision)>> {
        let args = (org_id.to_owned(), env, filters.clone());
        Box::pin(
            self.run(Access::Read, args, move |tx, (org, env, filters)| {
                let s = Scope::new(org, *env);
                let below = upto.saturating_add(1);
                Box::pin(tx.decisions(s, filters, after, below, false, limit))
            }),
        )
    }
}
