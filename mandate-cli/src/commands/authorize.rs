//! `mandate authorize`: ask for an authorization with an agent key, and exit with what the
//! verdict says (0 allow, 4 a denial, 5 review).

use clap::Args;
use mandate_core::amount::Amount;
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::Verdict;
use serde_json::{Value, json};

use super::{Context, PostArgs, parse_category, parse_currency, parse_recipient};
use crate::error::{CliError, CmdResult, Exit};
use crate::output;

/// The long help of `AuthorizeArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "Ask for an authorization to spend, with an agent key (ak_…).\n\n\
Prints the verdict, the decision and the signed verdict token, which a counterparty checks \
with `mandate verify`. A denial is not an error for the API (it is recorded and signed), \
but the exit code says what happened: 0 allow, 4 a denial (deny_*), 5 review (the review \
id is printed; an organization resolves it with `mandate reviews approve|deny`). In observe \
mode the verdict is always allow and policy_verdict shows what enforcement would have said.";

/// `mandate authorize --amount A --currency C --recipient vendor:X --category C`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  MANDATE_API_KEY=ak_sandbox_… mandate authorize --amount 42.50 --currency USD \\\n      --recipient vendor:acme --category software"
)]
pub struct AuthorizeArgs {
    /// The amount, an exact decimal such as 42.50
    #[arg(long, value_name = "AMOUNT")]
    pub amount: Amount,
    /// The currency, e.g. USD
    #[arg(long, value_name = "CODE", value_parser = parse_currency)]
    pub currency: Currency,
    /// Who is to be paid, vendor:<name>
    #[arg(long, value_name = "RECIPIENT", value_parser = parse_recipient)]
    pub recipient: Recipient,
    /// The spending category
    #[arg(long, value_name = "CATEGORY", value_parser = parse_category)]
    pub category: Category,
    #[command(flatten)]
    pub post: PostArgs,
}

/// Reads the `verdict` of a decision or authorization response.
pub fn verdict_of(body: &Value, status: u16) -> Result<Verdict, CliError> {
    body.get("verdict")
        .and_then(Value::as_str)
        .and_then(Verdict::parse)
        .ok_or_else(|| CliError::UnexpectedResponse {
            status,
            detail: "the answer carries no known verdict".into(),
            request_id: None,
        })
}

/// Prints an authorization response (also the fresh decision of an approved review).
pub fn print_verdict(body: &Value, as_json: bool) -> Result<(), CliError> {
    if as_json {
        return output::json(body);
    }
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, path: &str| {
        if output::at(body, path).is_some_and(|v| !v.is_null()) {
            pairs.push((name.to_owned(), output::cell(body, path)));
        }
    };
    push("verdict", "verdict");
    if body.get("policy_verdict") != body.get("verdict") {
        push("policy_verdict", "policy_verdict");
    }
    push("reason", "reason");
    push("decision", "id");
    push("supersedes", "supersedes");
    push("mandate", "mandate");
    push("mode", "mode");
    push("amount", "request.amount");
    push("currency", "request.currency");
    push("recipient", "request.recipient");
    push("category", "request.category");
    push("review", "review.id");
    push("review_expires_at", "review.expires_at");
    push("nonce", "nonce");
    push("exp", "exp");
    push("verdict_token", "verdict_token");
    for (name, value) in pairs.iter_mut() {
        if name == "exp"
            && let Ok(at) = value.parse::<i64>()
        {
            *value = format!("{value} ({})", super::jwks::unix_to_text(at));
        }
    }
    output::fields(&pairs)
}

/// The exit code of a verdict.
pub fn exit_for(verdict: Verdict) -> Exit {
    match verdict {
        Verdict::Allow => Exit::Success,
        Verdict::Review => Exit::Review,
        _ => Exit::Denied,
    }
}

/// Runs `mandate authorize`.
pub fn run(args: AuthorizeArgs, ctx: &Context) -> CmdResult {
    let body = json!({
        "amount": args.amount,
        "currency": args.currency.as_str(),
        "recipient": args.recipient.as_str(),
        "category": args.category.as_str(),
    });
    let client = ctx.client()?;
    let response = client.post("/authorizations", Some(&body), &args.post.key()?)?;
    let verdict = verdict_of(&response.body, response.status)?;
    print_verdict(&response.body, ctx.json)?;
    Ok(exit_for(verdict))
}
