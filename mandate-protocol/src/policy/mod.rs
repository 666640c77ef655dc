//! The policy engine: one pure function from a mandate, a request, the agent's history,
//! the enforcement mode and `now` to an [`Evaluation`].
//!
//! The rules run in a fixed order and the first that holds is the verdict:
//! `deny_no_mandate`, `deny_revoked`, `deny_expired`, `deny_replay` (a single-use
//! credential presented again, see [`evaluate_presenting`]), `deny_velocity`, `deny_category`,
//! `deny_recipient`, `deny_limit` (currency, minimum per transaction, per transaction, per day, per week, per
//! month, total, then the count limits per day, week, month and in total), `review`,
//! `allow`. A mandate before its `not_before` date is not in force: `deny_no_mandate`. Every denial
//! carries a [`Reason`] naming the numbers involved: kept as data, so that deciding costs
//! no formatting, and written out as text (its `Display`) when the decision is answered. In observe mode nothing blocks: the
//! returned verdict is `allow` and `policy_verdict` keeps what enforcement would have said.
//!
//! The parts: `verdict.rs` (the verdicts and modes), `request.rs` (the request, parsed at
//! the edge), `reason.rs` (the reasons and their messages), `rules.rs` (the rules, one step
//! each, in that order); this file evaluates with them.

mod reason;
mod request;
mod rules;
mod verdict;

pub use reason::{CountWindow, Reason, SpendWindow};
pub use request::{AuthorizationBody, AuthorizationRequest, RequestBodyError, SingleUse};
pub use verdict::{Mode, Verdict};

use time::OffsetDateTime;

use crate::amount::Amount;
use crate::history::AgentHistory;
use crate::mandate::Mandate;
use rules::judge;

/// What the engine concluded, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// The verdict returned and signed: in observe mode always `allow`.
    pub verdict: Verdict,
    /// What the rules say, whatever the mode.
    pub policy_verdict: Verdict,
    /// Why, with the numbers involved; `None` for a plain `allow`.
    pub reason: Option<Reason>,
}

impl Evaluation {
    /// What the rules said, under `mode`: in observe mode nothing blocks, so the verdict
    /// returned is `allow` whatever the rules said.
    fn under(mode: Mode, policy_verdict: Verdict, reason: Option<Reason>) -> Self {
        let verdict = match mode {
            Mode::Enforce => policy_verdict,
            Mode::Observe => Verdict::Allow,
        };
        Self {
            verdict,
            policy_verdict,
            reason,
        }
    }

    /// Whether a review should be opened: only when `review` is the returned verdict.
    pub(crate) fn opens_review(&self) -> bool {
        self.verdict == Verdict::Review
    }
}

/// Defined here rather than in `history` so that the history, plain data, does not depend
/// on the engine that reads it.
impl AgentHistory {
    /// Records a request that reached the engine. Every request counts for velocity,
    /// whatever its verdict; an `allow` verdict (the effective one, what was returned and
    /// signed) adds its amount to the day's, the week's and the month's spend.
    pub fn record(&mut self, evaluation: &Evaluation, amount: Amount, now: OffsetDateTime) {
        self.velocity.record(now);
        if evaluation.verdict == Verdict::Allow {
            self.spend.add(amount, now);
        }
    }
}

/// Evaluates a request. `mandate` is the agent's current mandate (the newest one, whatever
/// its status), `history` the agent's past as of just before this request.
///
/// The caller records the request afterwards with
/// [`AgentHistory::record`](crate::history::AgentHistory::record).
pub fn evaluate(
    mandate: Option<&Mandate>,
    request: &AuthorizationRequest,
    history: &AgentHistory,
    mode: Mode,
    now: OffsetDateTime,
) -> Evaluation {
    evaluate_presenting(mandate, request, history, None, mode, now)
}

impl Evaluation {
    /// Whether this decision accepts (and so uses up) the single-use credential presented
    /// with its request: its verdict is `allow` or `review` and the credential was not
    /// accepted before. The owner stores the use with the decision, in one transaction.
    pub(crate) fn accepts(&self, presented: Option<&SingleUse>) -> bool {
        presented.is_some_and(|c| !c.already_accepted)
            && matches!(self.verdict, Verdict::Allow | Verdict::Review)
    }
}

/// Evaluates a request that may carry a single-use credential: as [`evaluate`], with
/// `deny_replay` (after `deny_expired`, before `deny_velocity`) when the credential was
/// already accepted.
pub fn evaluate_presenting(
    mandate: Option<&Mandate>,
    request: &AuthorizationRequest,
    history: &AgentHistory,
    presented: Option<&SingleUse>,
    mode: Mode,
    now: OffsetDateTime,
) -> Evaluation {
    let (policy_verdict, reason) = judge(mandate, request, history, presented, now);
    Evaluation::under(mode, policy_verdict, reason)
}

/// Re-checks an approved review against the mandate as it is now: revoked, expired, a
/// category or recipient it no longer allows, or over `per_day`, `per_week` or `per_month`
/// gives that denial instead of `allow`; the review threshold and the velocity rule are
/// not applied again.
///
/// `mode` is the one in force at approval. Reviews open only in `enforce`, but the
/// environment may have switched to `observe` since: then nothing blocks, as for any
/// decision in observe, so `verdict` is `allow` and `policy_verdict` (with its reason)
/// is what the re-check found. The caller counts an `allow` verdict's amount in the
/// month-to-date spend, like an observe-mode allow of a request.
pub fn evaluate_approval(
    mandate: Option<&Mandate>,
    request: &AuthorizationRequest,
    history: &AgentHistory,
    mode: Mode,
    now: OffsetDateTime,
) -> Evaluation {
    let mut relaxed = mandate.cloned();
    if let Some(m) = relaxed.as_mut() {
        m.terms.review_above = None;
    }
    // Velocity is not re-applied: judge against a history with an empty window.
    let history = AgentHistory {
        velocity: Default::default(),
        spend: history.spend,
    };
    // The credential, if any, was accepted by the review this approval resolves.
    let (policy_verdict, reason) = judge(relaxed.as_ref(), request, &history, None, now);
    Evaluation::under(mode, policy_verdict, reason)
}

// What Mandate's server and CLI compute with this module's types beyond their methods
// an embedder sees through mandate-core.

/// Whether a decision accepts (and so uses up) the single-use credential presented
/// with its request: its verdict is `allow` or `review` and the credential was not
/// accepted before. The owner stores the use with the decision, in one transaction.
pub fn accepts(evaluation: &Evaluation, presented: Option<&SingleUse>) -> bool {
    evaluation.accepts(presented)
}

/// Whether a review should be opened: only when `review` is the returned verdict.
pub fn opens_review(evaluation: &Evaluation) -> bool {
    evaluation.opens_review()
}
