//! The engine of `mandate simulate`: replay past decisions, in time order, through the
//! core's policy engine against a draft mandate, with a velocity window and a
//! month-to-date spend per agent, exactly as the server keeps them.
//!
//! Pure: the decisions come in as values, the result goes out as rows; no clock, no file.
//!
//! - Requests are replayed with `mandate_core::policy::evaluate` and recorded with
//!   `AgentHistory::record` (every request counts for velocity; an `allow` adds to the
//!   month-to-date spend).
//! - An approval (a decision with `supersedes`) is not a request: it does not count for
//!   velocity. It is re-checked with `evaluate_approval` in the mode of the approval (in
//!   observe its verdict is `allow` whatever the re-check found), and its `allow` adds to
//!   the month-to-date spend. If, under the draft, the original request would not have opened
//!   a review, the approval would not have happened: its outcome is [`After::NoReview`].
//! - Times have whole-second precision (`iat`), where the server counts milliseconds, so a
//!   request exactly at the edge of a 60-second velocity window can come out differently.

use std::collections::HashMap;

use mandate_core::amount::amount_from_json;
use mandate_core::id::{AgentId, MandateId};
use mandate_core::mandate::{Mandate, MandateDraft, MandateStatus};
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::{
    AuthorizationRequest, Evaluation, Mode, Verdict, evaluate, evaluate_approval,
};
use serde_json::Value;
use time::OffsetDateTime;

use mandate_core::history::AgentHistory;

/// A past decision, as much of it as a replay needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastDecision {
    /// The decision id.
    pub id: String,
    /// When it was made (`iat`, else `created_at`).
    pub at: OffsetDateTime,
    /// The verdict that was returned.
    pub verdict: Verdict,
    /// What the engine concluded (equals `verdict` when absent).
    pub policy_verdict: Verdict,
    /// The mode in force, when recorded.
    pub mode: Option<Mode>,
    /// On an approval: the decision it resolved.
    pub supersedes: Option<String>,
    /// The request that was judged.
    pub request: AuthorizationRequest,
}

fn field<'a>(value: &'a Value, path: &str) -> Result<&'a Value, String> {
    let found = path.split('.').try_fold(value, |v, key| v.get(key));
    found
        .filter(|v| !v.is_null())
        .ok_or_else(|| format!("{path} is missing"))
}

fn text<'a>(value: &'a Value, path: &str) -> Result<&'a str, String> {
    field(value, path)?
        .as_str()
        .ok_or_else(|| format!("{path} must be a string"))
}

fn verdict(value: &Value, path: &str) -> Result<Verdict, String> {
    let t = text(value, path)?;
    Verdict::parse(t).ok_or_else(|| format!("{path} {t:?} is not a verdict"))
}

/// Reads one decision object (the API's shape, or an export line).
pub fn parse_decision(value: &Value) -> Result<PastDecision, String> {
    let id = text(value, "id")
        .or_else(|_| text(value, "jti"))
        .map_err(|_| "id is missing".to_owned())?
        .to_owned();
    let within = |e: String| format!("decision {id}: {e}");
    let at = match value.get("iat").and_then(Value::as_i64) {
        Some(iat) => OffsetDateTime::from_unix_timestamp(iat)
            .map_err(|_| within(format!("iat {iat} is out of range")))?,
        None => {
            let created = text(value, "created_at").map_err(|_| within("iat is missing".into()))?;
            mandate_core::timefmt::parse(created)
                .ok_or_else(|| within(format!("created_at {created:?} is not a timestamp")))?
        }
    };
    let returned = verdict(value, "verdict").map_err(within)?;
    let policy_verdict = match value.get("policy_verdict") {
        None | Some(Value::Null) => returned,
        Some(_) => verdict(value, "policy_verdict").map_err(within)?,
    };
    let mode = match value.get("mode").and_then(Value::as_str) {
        None => None,
        Some(m) => Some(Mode::parse(m).ok_or_else(|| within(format!("mode {m:?} is unknown")))?),
    };
    let supersedes = value
        .get("supersedes")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let agent = AgentId::parse(text(value, "request.agent").map_err(within)?)
        .map_err(|e| within(format!("request.agent: {e}")))?;
    let amount = amount_from_json(field(value, "request.amount").map_err(within)?)
        .map_err(|e| within(format!("request.amount {e}")))?;
    let currency = Currency::parse(text(value, "request.currency").map_err(within)?)
        .map_err(|e| within(format!("request.currency {e}")))?;
    let recipient = Recipient::parse(text(value, "request.recipient").map_err(within)?)
        .map_err(|e| within(format!("request.recipient {e}")))?;
    let category = Category::parse(text(value, "request.category").map_err(within)?)
        .map_err(|e| within(format!("request.category {e}")))?;
    Ok(PastDecision {
        id,
        at,
        verdict: returned,
        policy_verdict,
        mode,
        supersedes,
        request: AuthorizationRequest {
            agent,
            amount,
            currency,
            recipient,
            category,
        },
    })
}

/// Reads decisions from an export (NDJSON, oldest first) or a list dump (a JSON array or
/// a `{"data": [...]}` envelope, newest first as lists are), and puts them in time order.
/// Within one second the order of the input is kept (reversed for a dump).
pub fn read_decisions(text: &str) -> Result<Vec<PastDecision>, String> {
    let values: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items.into_iter().rev().collect(),
        Ok(Value::Object(mut map)) if map.contains_key("data") => match map.remove("data") {
            Some(Value::Array(items)) => items.into_iter().rev().collect(),
            _ => return Err("data must be an array of decisions".into()),
        },
        Ok(single @ Value::Object(_)) => vec![single],
        Ok(_) => {
            return Err("expected decisions as NDJSON, a JSON array or {\"data\": [...]}".into());
        }
        Err(_) => text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(n, line)| {
                serde_json::from_str(line).map_err(|e| format!("line {}: not JSON: {e}", n + 1))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut decisions = values
        .iter()
        .map(parse_decision)
        .collect::<Result<Vec<_>, _>>()?;
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
    let mut judged: HashMap<&str, Verdict> = HashMap::new();
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
        let mode = options.mode.or(past.mode).unwrap_or(Mode::Enforce);
        let after = match &past.supersedes {
            Some(original) => {
                let opened = judged
                    .get(original.as_str())
                    .is_none_or(|v| *v == Verdict::Review);
                if opened {
                    let evaluation =
                        evaluate_approval(Some(&mandate), &past.request, history, mode, past.at);
                    if evaluation.verdict == Verdict::Allow {
                        history.spend.add(past.request.amount, past.at);
                    }
                    After::Judged(evaluation)
                } else {
                    After::NoReview
                }
            }
            None => {
                let evaluation = evaluate(Some(&mandate), &past.request, history, mode, past.at);
                history.record(&evaluation, past.request.amount, past.at);
                judged.insert(past.id.as_str(), evaluation.verdict);
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
    ) -> Value {
        serde_json::from_str(&format!(
            r#"{{"id": "{id}", "iat": {iat}, "verdict": "{verdict}", "policy_verdict": "{verdict}",
                "mode": "enforce", "supersedes": {},
                "request": {{"agent": "agt_a", "amount": {amount}, "currency": "USD",
                             "recipient": "vendor:x", "category": "software"}}}}"#,
            supersedes.map_or("null".to_owned(), |s| format!("\"{s}\""))
        ))
        .unwrap()
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
        let ndjson: String = values.iter().map(|v| format!("{v}\n")).collect();
        let decisions = read_decisions(&ndjson).unwrap();
        let result = replay(&draft(DRAFT), &decisions, Options::default());
        let changed: Vec<_> = result.rows.iter().filter(|r| r.changed()).collect();
        assert!(changed.is_empty(), "{changed:#?}");
        assert_eq!(result.rows.len(), 12);

        // A dump is newest first; it reads the same.
        let reversed: Vec<Value> = values.into_iter().rev().collect();
        let dump = serde_json::json!({ "data": reversed, "has_more": false }).to_string();
        assert_eq!(read_decisions(&dump).unwrap(), decisions);

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
        other["request"]["agent"] = "agt_b".into();
        let decisions = vec![parse_decision(&other).unwrap()];
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
        approval["mode"] = "observe".into();
        approval["policy_verdict"] = "deny_limit".into();
        let values = [
            decision("dec_1", t, "allow", "40", None),
            decision("dec_2", t, "review", "80", None),
            decision("dec_1b", t, "allow", "45", None),
            approval,
        ];
        let decisions: Vec<_> = values.iter().map(|v| parse_decision(v).unwrap()).collect();
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
        let decisions: Vec<_> = values.iter().map(|v| parse_decision(v).unwrap()).collect();
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
    fn bad_input_names_the_decision_and_field() {
        let mut bad = decision("dec_x", 1, "allow", "1", None);
        bad["request"]["amount"] = "1".into();
        assert_eq!(
            parse_decision(&bad).unwrap_err(),
            "decision dec_x: request.amount must be a plain decimal number such as 12.50"
        );
        assert!(read_decisions("{\"data\": 1}").is_err());
        assert!(
            read_decisions("not json\n")
                .unwrap_err()
                .starts_with("line 1")
        );
    }
}
