//! `mandate mandates create|list|get|revoke`.
//!
//! A mandate is written from flags or from a JSON draft (`--file`). Either way the body is
//! checked with the core's `MandateDraft::from_json` before it is sent, so a bad draft is a
//! usage error naming the field, and the draft is sent with its numbers exactly as written.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use mandate_core::{
    AgentId, Amount, Category, Currency, EscrowTerms, MandateDraft, MandateId, Principal,
};
use mandate_protocol::{mandate::format_date, wire::CreateMandate, wire::Mandate};
use serde::Serialize;
use serde_json::Value;

use super::{
    Context, ListArgs, PostArgs, parse_category, parse_currency, parse_principal, print_list,
    print_object, read_input,
};
use crate::error::{CliError, CmdResult, Exit};
use crate::output::{self, Column};

/// The columns of a mandate list.
const COLUMNS: &[Column<Mandate>] = &[
    ("ID", |m| m.id.to_string()),
    ("AGENT", |m| m.agent.to_string()),
    ("STATUS", |m| m.status.as_str().to_owned()),
    ("PER TX", |m| m.limits.per_transaction.to_string()),
    ("PER DAY", |m| output::opt(m.limits.per_day)),
    ("PER WEEK", |m| output::opt(m.limits.per_week)),
    ("PER MONTH", |m| output::opt(m.limits.per_month)),
    ("CUR", |m| m.limits.currency.to_string()),
    ("REVIEW ABOVE", |m| output::opt(m.review_above)),
    ("CATEGORIES", |m| output::joined(&m.categories)),
    ("EXPIRES", |m| format_date(m.expires)),
];

/// `mandate mandates …`.
#[derive(Debug, Subcommand)]
pub enum MandatesCommand {
    /// Write a mandate from flags or a JSON draft; it supersedes the agent's current one
    Create(Box<CreateArgs>),
    /// List mandates, newest first
    List(ListMandatesArgs),
    /// Show one mandate
    Get(IdArgs),
    /// Revoke a mandate: the agent's next request is denied with deny_revoked
    Revoke(RevokeArgs),
}

/// `mandate mandates create`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate mandates create --agent agt_buyer --per-transaction 100 --per-month 1000 \\
      --currency USD --category software --category travel --review-above 50 \\
      --expires 2099-12-31 --principal role:cfo
  mandate mandates create --agent agt_buyer --per-transaction 100 --per-day 200 \
      --per-week 500 --currency USD --category software --expires 2099-12-31 \
      --allow-recipient 'vendor:aws*' --deny-recipient 'vendor:aws-gov*' \
      --escrow-required-above 1000
  mandate mandates create --file draft.json")]
pub struct CreateArgs {
    /// A JSON mandate draft (`-` for stdin), sent as written; excludes the other flags
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "agent", "per_transaction", "per_day", "per_week", "per_month", "currency", "category",
        "review_above", "expires", "principal", "allow_recipient", "deny_recipient",
        "escrow_required_above",
    ])]
    pub file: Option<PathBuf>,
    /// The agent id, agt_<name>
    #[arg(long, value_name = "ID", required_unless_present = "file")]
    pub agent: Option<AgentId>,
    /// Hard cap on one transaction (exact decimal)
    #[arg(long, value_name = "AMOUNT", required_unless_present = "file")]
    pub per_transaction: Option<Amount>,
    /// Cap on the allowed spend of a calendar day, UTC
    #[arg(long, value_name = "AMOUNT")]
    pub per_day: Option<Amount>,
    /// Cap on the allowed spend of an ISO week, from Monday 00:00 UTC
    #[arg(long, value_name = "AMOUNT")]
    pub per_week: Option<Amount>,
    /// Cap on the allowed spend of a calendar month, UTC
    #[arg(long, value_name = "AMOUNT")]
    pub per_month: Option<Amount>,
    /// Currency of every amount, e.g. USD
    #[arg(long, value_name = "CODE", value_parser = parse_currency, required_unless_present = "file")]
    pub currency: Option<Currency>,
    /// An allowed category; repeat for several
    #[arg(long, value_name = "CATEGORY", value_parser = parse_category, required_unless_present = "file")]
    pub category: Vec<Category>,
    /// Amounts above this (and within the per-transaction cap) get a human review
    #[arg(long, value_name = "AMOUNT")]
    pub review_above: Option<Amount>,
    /// Last valid day, YYYY-MM-DD (valid through its end, UTC)
    #[arg(long, value_name = "DATE", required_unless_present = "file")]
    pub expires: Option<String>,
    /// The accountable party, role:<name>
    #[arg(long, value_name = "ROLE", value_parser = parse_principal)]
    pub principal: Option<Principal>,
    /// A recipient that may be paid, vendor:<name> or a prefix ending in * (vendor:aws*);
    /// repeat for several (at most 100). Without any, every recipient not denied may be paid
    #[arg(long, value_name = "RECIPIENT")]
    pub allow_recipient: Vec<String>,
    /// A recipient that may never be paid, in the same form; wins over --allow-recipient
    #[arg(long, value_name = "RECIPIENT")]
    pub deny_recipient: Vec<String>,
    /// Amounts above this would call for an escrow (stored and shown, not read by the rules)
    #[arg(long, value_name = "AMOUNT")]
    pub escrow_required_above: Option<Amount>,
    #[command(flatten)]
    pub post: PostArgs,
}

/// Mandate status filter values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StatusFilter {
    /// In force.
    Active,
    /// Revoked by the organization.
    Revoked,
    /// Replaced by a newer mandate.
    Superseded,
    /// Past its expiry date.
    Expired,
}

impl StatusFilter {
    fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Revoked => "revoked",
            Self::Superseded => "superseded",
            Self::Expired => "expired",
        }
    }
}

/// `mandate mandates list`.
#[derive(Debug, Args)]
pub struct ListMandatesArgs {
    /// Only this agent's mandates
    #[arg(long, value_name = "ID")]
    pub agent: Option<AgentId>,
    /// Only mandates with this status
    #[arg(long, value_enum)]
    pub status: Option<StatusFilter>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `mandate mandates get ID`.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// The mandate id, mnd_…
    pub id: MandateId,
}

/// `mandate mandates revoke ID`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The mandate id, mnd_…
    pub id: MandateId,
    #[command(flatten)]
    pub post: PostArgs,
}

/// A mandate body written from the flags: what the core's draft parser reads, so that a
/// flag's error names the field as a file's would. The flags clap requires without
/// `--file` are written `null` when missing; the others are left out.
#[derive(Serialize)]
struct FlagsBody<'a> {
    agent: Option<&'a AgentId>,
    limits: FlagsLimits<'a>,
    categories: &'a [Category],
    expires: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    review_above: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    principal: Option<&'a Principal>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recipients: Option<FlagsRecipients<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    escrow: Option<EscrowTerms>,
}

/// `limits` of [`FlagsBody`].
#[derive(Serialize)]
struct FlagsLimits<'a> {
    per_transaction: Option<Amount>,
    currency: Option<&'a Currency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_day: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_week: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_month: Option<Amount>,
}

/// `recipients` of [`FlagsBody`], written when either list is given.
#[derive(Serialize)]
struct FlagsRecipients<'a> {
    allow: &'a [String],
    deny: &'a [String],
}

/// The draft the flags write, checked by the core as a file's is.
fn draft_from_flags(args: &CreateArgs) -> Result<MandateDraft, CliError> {
    let lists_given = !args.allow_recipient.is_empty() || !args.deny_recipient.is_empty();
    let body = FlagsBody {
        agent: args.agent.as_ref(),
        limits: FlagsLimits {
            per_transaction: args.per_transaction,
            currency: args.currency.as_ref(),
            per_day: args.per_day,
            per_week: args.per_week,
            per_month: args.per_month,
        },
        categories: &args.category,
        expires: args.expires.as_deref(),
        review_above: args.review_above,
        principal: args.principal.as_ref(),
        recipients: lists_given.then_some(FlagsRecipients {
            allow: &args.allow_recipient,
            deny: &args.deny_recipient,
        }),
        escrow: args
            .escrow_required_above
            .map(|required_above| EscrowTerms { required_above }),
    };
    let json = serde_json::to_value(&body)
        .map_err(|e| CliError::usage(format!("cannot encode JSON: {e}")))?;
    MandateDraft::from_json(&json).map_err(|e| CliError::usage(format!("invalid mandate: {e}")))
}

/// Reads and checks a draft file: JSON whose numbers keep their text, valid per the core;
/// the file's JSON is what is sent (its members and numbers as written, not the draft the
/// core made of them: duplicates it drops, `3.0` it reads as 3).
pub fn read_draft(path: &std::path::Path) -> Result<(Value, MandateDraft), CliError> {
    let text = read_input(path)?;
    let body: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("{} is not JSON: {e}", path.display())))?;
    let draft = MandateDraft::from_json(&body)
        .map_err(|e| CliError::usage(format!("invalid mandate draft {}: {e}", path.display())))?;
    Ok((body, draft))
}

/// Runs `mandate mandates …`.
pub fn run(command: MandatesCommand, ctx: &Context) -> CmdResult {
    match command {
        MandatesCommand::Create(args) => {
            // A file is sent as written; from the flags, what goes out is the request type
            // built from the draft the core accepted.
            let response = match &args.file {
                Some(path) => {
                    let body = read_draft(path)?.0;
                    ctx.client()?.post("/mandates", &body, &args.post.key()?)?
                }
                None => {
                    let body = CreateMandate::from(draft_from_flags(&args)?);
                    ctx.client()?.post("/mandates", &body, &args.post.key()?)?
                }
            };
            print_object::<Mandate>(ctx, &response, "a mandate")?;
        }
        MandatesCommand::List(args) => {
            let mut filters = Vec::new();
            if let Some(agent) = &args.agent {
                filters.push(("agent", agent.to_string()));
            }
            if let Some(status) = args.status {
                filters.push(("status", status.as_str().to_owned()));
            }
            let paging = args.list.paging();
            let page =
                ctx.client()?
                    .list::<Mandate>("/mandates", &filters, &paging, "a mandate")?;
            print_list(ctx, &page, COLUMNS)?;
        }
        MandatesCommand::Get(args) => {
            let response = ctx.client()?.get(&format!("/mandates/{}", args.id), &[])?;
            print_object::<Mandate>(ctx, &response, "a mandate")?;
        }
        MandatesCommand::Revoke(args) => {
            let path = format!("/mandates/{}/revoke", args.id);
            let response = ctx.client()?.post_empty(&path, &args.post.key()?)?;
            print_object::<Mandate>(ctx, &response, "a mandate")?;
        }
    }
    Ok(Exit::Success)
}
