//! `mandate simulate --mandate draft.json --decisions FILE`: backtest a draft mandate
//! against past decisions, offline. The replay itself is [`crate::backtest`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use mandate_core::{Amount, DecisionId, Mode, Reason, Verdict};
use serde::Serialize;

use super::mandates::read_draft;
use super::{Context, read_input};
use crate::backtest::{self, After, Backtest, Count, NO_REVIEW, Options, Row};
use crate::error::{CliError, CmdResult, Exit};
use crate::output;

/// The long help of `SimulateArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "Replay past decisions through a draft mandate, offline, and show how each \
verdict would change.\n\n\
FILE holds decision objects: NDJSON (one per line, oldest first, as `mandate export \
decisions` writes them) or the output of `mandate decisions list --all --json` (newest first, as lists give them). The \
requests are replayed in time order (iat) through the same policy engine as the server, with \
a velocity window and its spend of the day, the week and the month per agent. By default only the decisions of the \
draft's agent are replayed; --every-agent applies the draft to every agent in the file, each \
with its own history. Each decision is judged in the mode it was made in, or in --mode.\n\n\
An approval (a decision with supersedes) does not count for velocity; it is re-checked as \
the server does (revoked, expired, categories, recipients, per_day, per_week, per_month) \
and its allow counts toward the day, the week and the month. If \
under the draft the original request would not have opened a review, the approval shows as \
`(no review)`.\n\n\
Times have whole-second precision where the server counts milliseconds: a request exactly \
at the edge of the 60-second velocity window may come out differently.";

/// `mandate simulate`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate export decisions --agent agt_buyer --output decisions.ndjson
  mandate simulate --mandate tighter.json --decisions decisions.ndjson
  mandate decisions list --all --json > decisions.json     # a list dump works too
  mandate simulate --mandate tighter.json --decisions decisions.json")]
pub struct SimulateArgs {
    /// The draft mandate, JSON as for `mandates create --file`
    #[arg(long, value_name = "FILE")]
    pub mandate: PathBuf,
    /// The past decisions: NDJSON, a JSON array, or a `decisions list --all --json` dump
    /// (`-` for stdin)
    #[arg(long, value_name = "FILE")]
    pub decisions: PathBuf,
    /// Judge every decision in this mode instead of the mode it was made in
    #[arg(long, value_enum, value_name = "MODE")]
    pub mode: Option<ModeArg>,
    /// Apply the draft to every agent's decisions, not only to the draft's agent
    #[arg(long)]
    pub every_agent: bool,
    /// List every replayed decision, not only the changed ones
    #[arg(long)]
    pub show_all: bool,
}

/// `--mode` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Nothing blocks: the verdict is allow, the policy verdict is kept
    Observe,
    /// Verdicts take effect
    Enforce,
}

fn shown(verdict: Verdict, policy: Verdict) -> String {
    if verdict == policy {
        verdict.to_string()
    } else {
        format!("{verdict} (policy {policy})")
    }
}

fn after_text(row: &Row) -> String {
    match &row.after {
        After::Judged(e) => shown(e.verdict, e.policy_verdict),
        After::NoReview => NO_REVIEW.to_owned(),
    }
}

/// A verdict pair as `--json` prints it.
#[derive(Serialize)]
struct Verdicts {
    verdict: Verdict,
    policy_verdict: Verdict,
}

/// What a decision becomes, as `--json` prints it.
#[derive(Serialize)]
struct AfterJson<'a> {
    verdict: Verdict,
    policy_verdict: Verdict,
    reason: Option<&'a Reason>,
    rule: Option<&'static str>,
}

/// One replayed decision, as `--json` prints it.
#[derive(Serialize)]
struct RowJson<'a> {
    id: &'a DecisionId,
    at: String,
    agent: &'a str,
    amount: &'a Amount,
    currency: &'a str,
    recipient: &'a str,
    category: &'a str,
    approval_of: Option<&'a DecisionId>,
    mode: &'static str,
    changed: bool,
    before: Verdicts,
    /// `null` for an approval whose review the draft would not have opened.
    after: Option<AfterJson<'a>>,
}

impl<'a> RowJson<'a> {
    fn of(row: &'a Row) -> Self {
        let d = &row.before;
        Self {
            id: &d.id,
            at: mandate_protocol::timefmt::format(d.at),
            agent: d.request.agent.as_str(),
            amount: &d.request.amount,
            currency: d.request.currency.as_str(),
            recipient: d.request.recipient.as_str(),
            category: d.request.category.as_str(),
            approval_of: d.supersedes.as_ref(),
            mode: row.mode.as_str(),
            changed: row.changed(),
            before: Verdicts {
                verdict: d.verdict,
                policy_verdict: d.policy_verdict,
            },
            after: match &row.after {
                After::Judged(e) => Some(AfterJson {
                    verdict: e.verdict,
                    policy_verdict: e.policy_verdict,
                    reason: e.reason.as_ref(),
                    rule: e.reason.as_ref().map(|r| r.rule()),
                }),
                After::NoReview => None,
            },
        }
    }
}

/// A summary line, as `--json` prints it.
#[derive(Serialize)]
struct CountJson<'a> {
    verdict: &'a str,
    before: usize,
    after: usize,
    policy_before: usize,
    policy_after: usize,
}

/// The whole `--json` report.
#[derive(Serialize)]
struct Report<'a> {
    replayed: usize,
    changed: usize,
    skipped_other_agents: usize,
    decisions: Vec<RowJson<'a>>,
    summary: Vec<CountJson<'a>>,
}

/// Runs `mandate simulate`.
pub fn run(args: SimulateArgs, ctx: &Context) -> CmdResult {
    let (_, draft) = read_draft(&args.mandate)?;
    let text = read_input(&args.decisions)?;
    let decisions = backtest::read_decisions(&text)
        .map_err(|e| CliError::usage(format!("{}: {e}", args.decisions.display())))?;
    let options = Options {
        mode: args.mode.map(|m| match m {
            ModeArg::Observe => Mode::Observe,
            ModeArg::Enforce => Mode::Enforce,
        }),
        every_agent: args.every_agent,
    };
    let result = backtest::replay(&draft, &decisions, options);
    let counts = backtest::summary(&result.rows);
    let listed: Vec<&Row> = result
        .rows
        .iter()
        .filter(|r| args.show_all || r.changed())
        .collect();
    if ctx.json {
        print_json(&result, &listed, &counts)?;
        return Ok(Exit::Success);
    }
    let rows: Vec<Vec<String>> = listed.iter().map(|r| decision_row(r)).collect();
    if !rows.is_empty() || args.show_all {
        output::table(
            &[
                "DECISION", "TIME", "AGENT", "AMOUNT", "CATEGORY", "MODE", "BEFORE", "", "AFTER",
                "REASON",
            ],
            &rows,
        )?;
        output::line("")?;
    }
    print_summary(&counts)?;
    output::line("")?;
    let replayed_for = if args.every_agent {
        "every agent".to_owned()
    } else {
        draft.agent.to_string()
    };
    output::line(&last_line(&result, &replayed_for))?;
    Ok(Exit::Success)
}

/// The `--json` report: the decisions listed and the summary.
fn print_json(result: &Backtest, listed: &[&Row], counts: &[Count]) -> Result<(), CliError> {
    output::json(&Report {
        replayed: result.rows.len(),
        changed: changed(result),
        skipped_other_agents: result.skipped,
        decisions: listed.iter().map(|r| RowJson::of(r)).collect(),
        summary: counts
            .iter()
            .map(|c| CountJson {
                verdict: &c.label,
                before: c.before,
                after: c.after,
                policy_before: c.policy_before,
                policy_after: c.policy_after,
            })
            .collect(),
    })
}

/// How many decisions the draft changes.
fn changed(result: &Backtest) -> usize {
    result.rows.iter().filter(|r| r.changed()).count()
}

/// A decision's row of the table: what it was, and what the draft makes of it.
fn decision_row(row: &Row) -> Vec<String> {
    let d = &row.before;
    let after_reason = match &row.after {
        After::Judged(e) => e
            .reason
            .as_ref()
            .map_or_else(|| "-".into(), ToString::to_string),
        After::NoReview => "the draft opens no review for the original request".into(),
    };
    vec![
        match &d.supersedes {
            Some(original) => format!("{} (approves {original})", d.id),
            None => d.id.to_string(),
        },
        mandate_protocol::timefmt::format(d.at),
        d.request.agent.to_string(),
        format!("{} {}", d.request.amount, d.request.currency),
        d.request.category.to_string(),
        row.mode.as_str().to_owned(),
        shown(d.verdict, d.policy_verdict),
        if row.changed() { "→" } else { "=" }.to_owned(),
        after_text(row),
        after_reason,
    ]
}

/// The summary table: each verdict's count before and after.
fn print_summary(counts: &[Count]) -> Result<(), CliError> {
    let summary: Vec<Vec<String>> = counts
        .iter()
        .map(|c| {
            vec![
                c.label.clone(),
                c.before.to_string(),
                c.after.to_string(),
                c.policy_before.to_string(),
                c.policy_after.to_string(),
            ]
        })
        .collect();
    output::table(
        &[
            "VERDICT",
            "BEFORE",
            "AFTER",
            "POLICY BEFORE",
            "POLICY AFTER",
        ],
        &summary,
    )
}

/// The last line: how many decisions were replayed, for whom, how many changed, and how
/// many of other agents were skipped.
fn last_line(result: &Backtest, replayed_for: &str) -> String {
    let mut last = format!(
        "{} replayed against the draft for {replayed_for}, {} changed",
        output::count(result.rows.len() as u64, "decision", "decisions"),
        changed(result)
    );
    if result.skipped > 0 {
        last.push_str(&format!(
            "; {} of other agents skipped (--every-agent replays them too)",
            output::count(result.skipped as u64, "decision", "decisions")
        ));
    }
    last
}
