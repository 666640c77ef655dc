//! The engine of `mandate simulate`: replay past decisions, in time order, through the
//! core's policy engine against a draft mandate, with a velocity window and a
//! month-to-date spend per agent, exactly as the server keeps them.
//!
//! Pure: the decisions come in as values, the result goes out as rows; no clock, no file.
//!
//! - Requests are replayed with `mandate_core::evaluate` and recorded with
//!   `AgentHistory::record` (every request counts for velocity; an `allow` adds to the
//!   month-to-date spend).
//! - An approval (a decision with `supersedes`) is not a request: it does not count for
//!   velocity. It is re-checked with `evaluate_approval` in the mode of the approval (in
//!   observe its verdict is `allow` whatever the re-check found), and its `allow` adds to
//!   the month-to-date spend. If, under the draft, the original request would not have opened
//!   a review, the approval would not have happened: its outcome is [`After::NoReview`].
//! - Times have whole-second precision (`iat`), where the server counts milliseconds, so a
//!   request exactly at the edge of a 60-second velocity window can come out differently.

use std::borrow::Cow;

use std::collections::HashMap;

use mandate_core::{
    AgentId, AuthorizationRequest, DecisionId, Evaluation, Mandate, MandateDraft, MandateId,
    MandateStatus, Mode, Verdict, evaluate,
};
use mandate_protocol::{policy::evaluate_approval, wire::Decision};
use serde::Deserialize;
use serde::de::IgnoredAny;
use time::OffsetDateTime;

use mandate_core::AgentHistory;

/// A past decision, as much of it as a replay needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastDecision {
    /// The decision id.
    pub id: DecisionId,
    /// When it was made (`iat`, else `created_at`).
    pub at: OffsetDateTime,
    /// The verdict that was returned.
    pub verdict: Verdict,
    /// What the engine concluded.
    pub policy_verdict: Verdict,
    /// The mode in force.
    pub mode: Mode,
    /// On an approval: the decision it resolved.
    pub supersedes: Option<DecisionId>,
    /// The request that was judged.
    pub request: AuthorizationRequest,
}

impl From<Decision<'_>> for PastDecision {
    fn from(decision: Decision) -> Self {
        Self {
            at: OffsetDateTime::from_unix_timestamp(decision.iat).unwrap_or(decision.created_at),
            id: decision.id.into_owned(),
            verdict: decision.verdict,
            policy_verdict: decision.policy_verdict,
            mode: decision.mode,
            supersedes: decision.supersedes.map(Cow::into_owned),
            request: decision.request.into_owned(),
        }
    }
}

/// A list dump: `{"data": [...]}` (`has_more` and `next_cursor` are not needed).
#[derive(Deserialize)]
struct Dump {
    data: Vec<Decision<'static>>,
}

/// Whether a document has a `data` member, read without keeping anything.
#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    data: Option<IgnoredAny>,
}

/// Reads decisions from an export (NDJSON, oldest first) or a list dump (a JSON array or
/// a `{"data": [...]}` envelope, newest first as lists are), each as the API's
/// [`Decision`], and puts them in time order. Within one second the order of the input is
/// kept (reversed for a dump).
pub fn read_decisions(text: &str) -> Result<Vec<PastDecision>, String> {
    let is_page = || {
        let mut documents = serde_json::Deserializer::from_str(text).into_iter::<Probe>();
        matches!(documents.next(), Some(Ok(Probe { data: Some(_) })))
    };
    let (mut decisions, newest_first) = if text.trim_start().starts_with('[') {
        let decisions: Vec<Decision> =
            serde_json::from_str(text).map_err(|e| format!("not an array of decisions: {e}"))?;
        (decisions, true)
    } else if is_page() {
        let dump: Dump = serde_json::from_str(text)
            .map_err(|e| format!("data must be an array of decisions: {e}"))?;
        (dump.data, true)
    } else {
        // NDJSON (or one decision): each error names its line.
        let decisions = serde_json::Deserializer::from_str(text)
            .into_iter::<Decision>()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("not a decision: {e}"))?;
        (decisions, false)
    };
    if newest_first {
        decisions.reverse();
    }
    let mut decisions: Vec<PastDecision> = decisions.into_iter().map(PastDecision::from).collect();
    decisions.sort_by_key(|d| d.at);
    Ok(decisions)
}

/// How to replay.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Judge every decision in this mode instead of the mode it was made in.
    pub mode: Option<Mode>,
    /// Apply the draft to every agent's decisions, not only to its own agent's.
    pub every_agent: bool,
}

/// What a decision becomes under the draft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// The engine's evaluation.
    Judged(Evaluation),
    /// An approval whose review the draft would not have opened.
    NoReview,
}

/// One replayed decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The past decision.
    pub before: PastDecision,
    /// The mode it was judged in.
    pub mode: Mode,
    /// What it becomes.
    pub after: After,
}

impl Row {
    /// Whether the returned or the policy verdict differs.
    pub fn changed(&self) -> bool {
        match &self.after {
            After::Judged(e) => {
                e.verdict != self.before.verdict || e.policy_verdict != self.before.policy_verdict
            }
            After::NoReview => true,
        }
    }
}

/// The result of a replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backtest {
    /// Every replayed decision, in time order.
    pub rows: Vec<Row>,
    /// Decisions of other agents, not replayed.
    pub skipped: usize,
}

/// Replays `decisions` (in time order) against `draft`.
pub fn replay(draft: &MandateDraft, decisions: &[PastDecision], options: Options) -> Backtest {
    let mut histories: HashMap<AgentId, AgentHistory> = HashMap::new();
    let mut judged: HashMap<&DecisionId, Verdict> = HashMap::new();
    let mut out = Backtest::default();
    let id = MandateId::parse("mnd_draft").ok();
    for past in decisions {
        let agent = &past.request.agent;
        if !options.every_agent && *agent != draft.agent {
            out.skipped += 1;
            continue;
        }
        let Some(id) = id.clone() else {
            continue;
        };
        let mandate = Mandate {
            id,
            terms: MandateDraft {
                agent: agent.clone(),
                ..draft.clone()
            },
            status: MandateStatus::Active,
            created_at: OffsetDateTime::UNIX_EPOCH,
        };
        let history = histories.entry(agent.clone()).or_default();
        let mode = options.mode.unwrap_or(past.mode);
        let after = match &past.supersedes {
            Some(original) => {
                let opened = judged.get(original).is_none_or(|v| *v == Verdict::Review);
                if opened {
                    let evaluation =
                        evaluate_approval(Some(&mandate), &past.request, history, mode, past.at);
                    if evaluation.verdict == Verdict::Allow {
                        mandate_protocol::history::spend_mut(history)
                            .add(past.request.amount, past.at);
                    }
                    After::Judged(evaluation)
                } else {
                    After::NoReview
                }
            }
            None => {
                let evaluation = evaluate(Some(&mandate), &past.request, history, mode, past.at);
                history.record(&evaluation, past.request.amount, past.at);
                judged.insert(&past.id, evaluation.verdict);
                After::Judged(evaluation)
            }
        };
        out.rows.push(Row {
            before: past.clone(),
            mode,
            after,
        });
    }
    out
}

/// Counts per verdict, before and after, returned and policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    /// The verdict, or `(no review)`.
    pub label: String,
    /// Returned verdicts before.
    pub before: usize,
    /// Returned verdicts after.
    pub after: usize,
    /// Policy verdicts before.
    pub policy_before: usize,
    /// Policy verdicts after.
    pub policy_after: usize,
}

/// The summary table: one line per verdict that occurs, in the engine's order.
pub fn summary(rows: &[Row]) -> Vec<Count> {
    let mut labels: Vec<&str> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
    labels.push(NO_REVIEW);
    labels
        .into_iter()
        .map(|label| {
            let is = |v: Verdict| v.as_str() == label;
            let after = |policy: bool| {
                rows.iter()
                    .filter(|r| match &r.after {
                        After::Judged(e) => is(if policy { e.policy_verdict } else { e.verdict }),
                        After::NoReview => label == NO_REVIEW,
                    })
                    .count()
            };
            Count {
                label: label.to_owned(),
                before: rows.iter().filter(|r| is(r.before.verdict)).count(),
                after: after(false),
                policy_before: rows.iter().filter(|r| is(r.before.policy_verdict)).count(),
                policy_after: after(true),
            }
        })
        .filter(|c| c.before + c.after + c.policy_before + c.policy_after > 0)
        .collect()
}

/// The label of an approval that would not have happened.
pub const NO_REVIEW: &str = "(no review)";

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use mandate_core::{Amount, AuthorizationRequest, Category, Currency, Nonce, Recipient};
    use mandate_protocol::wire::ListPage;

    fn draft(body: &str) -> MandateDraft {
        MandateDraft::from_json(&serde_json::from_str(body).unwrap()).unwrap()
    }

    const DRAFT: &str = r#"{"agent": "agt_a", "limits": {"per_transaction": 100, "per_month": 150,
        "currency": "USD"}, "categories": ["software"], "review_above": 50, "expires": "2030-01-01"}"#;

    fn decision(
        id: &str,
        iat: i64,
        verdict: &str,
        amount: &str,
        supersedes: Option<&str>,
    ) -> Decision<'static> {
        let id = DecisionId::parse(id).unwrap();
        let verdict = Verdict::parse(verdict).unwrap();
        Decision {
            acp_allowance: None,
            acp_checkout_session: None,
            ap2_mandate: None,
            ap2_transaction: None,
            created_at: OffsetDateTime::from_unix_timestamp(iat).unwrap(),
            exp: iat + 300,
            iat,
            id: Cow::Owned(id.clone()),
            iss: "https://verdicts.example".into(),
            jti: Cow::Owned(id),
            log: None,
            mandate: Some(Cow::Owned(MandateId::parse("mnd_a").unwrap())),
            mode: Mode::Enforce,
            nonce: Cow::Owned(Nonce::parse("n_a").unwrap()),
            policy_verdict: verdict,
            policy_version: "pol_2026-11-01.1".into(),
            reason: None,
            request: Cow::Owned(AuthorizationRequest {
                agent: AgentId::parse("agt_a").unwrap(),
                amount: Amount::parse(amount).unwrap(),
                currency: Currency::parse("USD").unwrap(),
                recipient: Recipient::parse("vendor:x").unwrap(),
                category: Category::parse("software").unwrap(),
            }),
            review: None,
            review_expires_at: None,
            review_reason: None,
            review_resolved_at: None,
            review_status: None,
            review_resolution: None,
            review_withdrawn: false,
            supersedes: supersedes.map(|s| Cow::Owned(DecisionId::parse(s).unwrap())),
            verdict,
            verdict_token: Some(None),
            x402_payment: None,
        }
    }

    fn line(decision: &Decision) -> String {
        serde_json::to_string(decision).unwrap()
    }

    #[test]
    fn velocity_month_to_date_and_approvals_replay_like_the_server() {
        let t = 1_800_000_000;
        let mut values = vec![
            decision("dec_1", t, "allow", "40", None),
            decision("dec_2", t, "review", "60", None),
            decision("dec_3", t + 1, "allow", "60", Some("dec_2")),
            // 40 + 60 spent: 60 more is over 150 a month.
            decision("dec_4", t + 1, "deny_limit", "60", None),
        ];
        for i in 0..7 {
            values.push(decision(&format!("dec_v{i}"), t + 2, "allow", "1", None));
        }
        // The 11th request within 60 s (the approval does not count).
        values.push(decision("dec_11", t + 3, "deny_velocity", "1", None));
        let ndjson: String = values.iter().map(|v| line(v) + "\n").collect();
        let decisions = read_decisions(&ndjson).unwrap();
        let result = replay(&draft(DRAFT), &decisions, Options::default());
        let changed: Vec<_> = result.rows.iter().filter(|r| r.changed()).collect();
        assert!(changed.is_empty(), "{changed:#?}");
        assert_eq!(result.rows.len(), 12);

        // A dump is newest first; it reads the same.
        let reversed: Vec<Decision> = values.into_iter().rev().collect();
        let page = ListPage {
            data: reversed.clone(),
            has_more: false,
            next_cursor: None,
        };
        let dump = serde_json::to_string(&page).unwrap();
        assert_eq!(read_decisions(&dump).unwrap(), decisions);
        let array = serde_json::to_string(&reversed).unwrap();
        assert_eq!(read_decisions(&array).unwrap(), decisions);

        // A draft without review: the review becomes allow and its approval never happens.
        let tighter = draft(&DRAFT.replace(r#", "review_above": 50"#, ""));
        let result = replay(&tighter, &decisions, Options::default());
        assert_eq!(
            result.rows[1].after,
            After::Judged(Evaluation {
                verdict: Verdict::Allow,
                policy_verdict: Verdict::Allow,
                reason: None
            })
        );
        assert_eq!(result.rows[2].after, After::NoReview);
        let counts = summary(&result.rows);
        let no_review = counts.iter().find(|c| c.label == NO_REVIEW).unwrap();
        assert_eq!((no_review.before, no_review.after), (0, 1));
    }

    #[test]
    fn other_agents_are_skipped_unless_asked_and_observe_keeps_the_policy_verdict() {
        let mut other = decision("dec_b", 1_800_000_000, "allow", "500", None);
        other.request.to_mut().agent = AgentId::parse("agt_b").unwrap();
        let decisions = vec![PastDecision::from(other)];
        let result = replay(&draft(DRAFT), &decisions, Options::default());
        assert_eq!((result.rows.len(), result.skipped), (0, 1));
        let observe = Options {
            mode: Some(Mode::Observe),
            every_agent: true,
        };
        let result = replay(&draft(DRAFT), &decisions, observe);
        let After::Judged(e) = &result.rows[0].after else {
            panic!("judged")
        };
        assert_eq!(
            (e.verdict, e.policy_verdict),
            (Verdict::Allow, Verdict::DenyLimit)
        );
        assert!(result.rows[0].changed());
    }

    #[test]
    fn an_approval_made_in_observe_is_an_allow_whatever_the_recheck_found() {
        let t = 1_800_000_000;
        let mut approval = decision("dec_3", t + 1, "allow", "80", Some("dec_2"));
        approval.mode = Mode::Observe;
        approval.policy_verdict = Verdict::DenyLimit;
        let values = [
            decision("dec_1", t, "allow", "40", None),
            decision("dec_2", t, "review", "80", None),
            decision("dec_1b", t, "allow", "45", None),
            approval,
        ];
        let decisions: Vec<_> = values.into_iter().map(PastDecision::from).collect();
        let result = replay(&draft(DRAFT), &decisions, Options::default());
        // 40 + 45 + 80 is over 150 a month: the re-check finds deny_limit, observe allows it.
        let After::Judged(e) = &result.rows[3].after else {
            panic!("judged")
        };
        assert_eq!(
            (e.verdict, e.policy_verdict),
            (Verdict::Allow, Verdict::DenyLimit)
        );
        assert!(!result.rows[3].changed(), "{:#?}", result.rows[3]);
    }

    #[test]
    fn a_draft_with_a_total_a_count_and_a_start_replays_them_over_months() {
        // 2027-01-15, a month later, two months later.
        let (jan, feb, mar) = (1_800_000_000, 1_802_678_400, 1_805_097_600);
        let values = [
            decision("dec_1", jan, "allow", "60", None),
            decision("dec_2", feb, "allow", "60", None),
            decision("dec_3", mar, "allow", "60", None),
            decision("dec_4", mar + 120, "allow", "1", None),
        ];
        let decisions: Vec<_> = values.into_iter().map(PastDecision::from).collect();
        let rules = |body: &str| -> Vec<(Verdict, Option<&'static str>)> {
            let result = replay(&draft(body), &decisions, Options::default());
            result
                .rows
                .iter()
                .map(|r| match &r.after {
                    After::Judged(e) => (e.verdict, e.reason.as_ref().map(|r| r.rule())),
                    After::NoReview => panic!("no review here"),
                })
                .collect()
        };
        let plain = DRAFT.replace(r#", "review_above": 50"#, "");
        let limited = |limits: &str| plain.replace(r#""per_month": 150,"#, limits);
        // 60 in January and in February: 60 more in March is over the total of 150.
        let total = limited(r#""per_month": 150, "total": 150, "count": {"total": 3},"#);
        let allow = (Verdict::Allow, None);
        let deny = |rule| (Verdict::DenyLimit, Some(rule));
        assert_eq!(rules(&total), [allow, allow, deny("limits.total"), allow]);
        // Two allows over the mandate's life, whatever the months.
        let count = limited(r#""per_month": 150, "count": {"total": 2},"#);
        assert_eq!(
            rules(&count),
            [
                allow,
                allow,
                deny("limits.count.total"),
                deny("limits.count.total")
            ]
        );
        // In force from March: January and February are deny_no_mandate.
        let started = total.replace(r#""expires""#, r#""not_before": "2027-03-01", "expires""#);
        let early = (Verdict::DenyNoMandate, Some("not_before"));
        assert_eq!(rules(&started), [early, early, allow, allow]);
    }

    #[test]
    fn bad_input_names_the_line_and_field() {
        let good = line(&decision("dec_1", 1, "allow", "1", None));
        let bad = good.replace(r#""amount":1"#, r#""amount":"1""#);
        assert_ne!(bad, good);
        let error = read_decisions(&format!("{good}\n{bad}\n")).unwrap_err();
        assert!(
            error.contains("plain decimal number") && error.contains("line 2"),
            "{error}"
        );
        let missing = good.replace(r#""iss":"https://verdicts.example","#, "");
        let error = read_decisions(&missing).unwrap_err();
        assert!(error.contains("missing field `iss`"), "{error}");
        assert!(
            read_decisions("{\"data\": 1}")
                .unwrap_err()
                .starts_with("data must be an array")
        );
        assert!(read_decisions("not json\n").is_err());
    }
}
