//! `mandate decisions list|get`: the log of every verdict, newest first.

use clap::{Args, Subcommand};
use mandate_core::{AgentId, DecisionId, Verdict};
use mandate_protocol::wire::Decision;

use super::{Context, ListArgs, parse_verdict, print_list, print_object};
use crate::error::{CmdResult, Exit};
use crate::output::{self, Column};

/// The columns of a decision list.
const COLUMNS: &[Column<Decision>] = &[
    ("ID", |d| d.id.to_string()),
    ("CREATED", |d| output::time(d.created_at)),
    ("AGENT", |d| d.request.agent.to_string()),
    ("AMOUNT", |d| d.request.amount.to_string()),
    ("CUR", |d| d.request.currency.to_string()),
    ("RECIPIENT", |d| d.request.recipient.to_string()),
    ("CATEGORY", |d| d.request.category.to_string()),
    ("VERDICT", |d| d.verdict.as_str().to_owned()),
    ("POLICY", |d| d.policy_verdict.as_str().to_owned()),
    ("MODE", |d| d.mode.as_str().to_owned()),
    // Where the review it opened stands: a denied or expired review must not read as
    // pending. `-` when it opened none.
    ("REVIEW", |d| match (&d.review, d.review_status) {
        (None, _) => "-".to_owned(),
        (Some(_), Some(status)) => status.as_str().to_owned(),
        (Some(_), None) => "opened".to_owned(),
    }),
];

/// `mandate decisions …`.
#[derive(Debug, Subcommand)]
pub enum DecisionsCommand {
    /// List decisions, newest first; `--all --json` makes the dump `simulate` reads
    List(ListDecisionsArgs),
    /// Show one decision
    Get(GetArgs),
}

/// `mandate decisions list`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate decisions list --verdict review
  mandate decisions list --review-status pending
  mandate decisions list --all --json > decisions.json")]
pub struct ListDecisionsArgs {
    /// Only decisions whose returned verdict is this (allow, review, deny_*)
    #[arg(long, value_name = "VERDICT", value_parser = parse_verdict)]
    pub verdict: Option<Verdict>,
    /// Only decisions whose policy verdict is this (differs from verdict in observe mode)
    #[arg(long, value_name = "VERDICT", value_parser = parse_verdict)]
    pub policy_verdict: Option<Verdict>,
    /// Only this agent's decisions
    #[arg(long, value_name = "ID")]
    pub agent: Option<AgentId>,
    /// Only decisions whose review stands so
    #[arg(long, value_name = "STATUS", value_parser = ["pending", "approved", "denied", "expired"])]
    pub review_status: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `mandate decisions get ID`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The decision id, dec_…
    pub id: DecisionId,
}

/// Runs `mandate decisions …`.
pub fn run(command: DecisionsCommand, ctx: &Context) -> CmdResult {
    let client = ctx.client()?;
    match command {
        DecisionsCommand::List(args) => {
            let mut filters = Vec::new();
            if let Some(verdict) = args.verdict {
                filters.push(("verdict", verdict.as_str().to_owned()));
            }
            if let Some(verdict) = args.policy_verdict {
                filters.push(("policy_verdict", verdict.as_str().to_owned()));
            }
            if let Some(agent) = &args.agent {
                filters.push(("agent", agent.to_string()));
            }
            if let Some(status) = &args.review_status {
                filters.push(("review_status", status.clone()));
            }
            let paging = args.list.paging();
            let page = client.list::<Decision>("/decisions", &filters, &paging, "a decision")?;
            print_list(ctx, &page, COLUMNS)?;
        }
        DecisionsCommand::Get(args) => {
            let response = client.get(&format!("/decisions/{}", args.id), &[])?;
            print_object::<Decision>(ctx, &response, "a decision")?;
        }
    }
    Ok(Exit::Success)
}
