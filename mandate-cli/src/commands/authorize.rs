//! `mandate authorize`: ask for an authorization with an agent key, and exit with what the
//! verdict says (0 allow, 4 a denial, 5 review).

use clap::Args;
use mandate_core::{Amount, Category, Currency, Recipient, Verdict};
use mandate_protocol::{
    wire::AcpAllowance, wire::AcpPresentation, wire::Ap2Presentation, wire::Authorize,
    wire::Decision,
};
use serde::Deserialize;

use super::{Context, PostArgs, parse_category, parse_currency, parse_recipient};
use crate::client::Response;
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
    /// The x402 payment this is for: a JSON file holding its v2 PaymentRequirements (the
    /// element of `accepts` about to be paid) or the PaymentPayload; the verdict then
    /// carries x402_payment (docs/protocols.md)
    #[arg(long, value_name = "FILE")]
    pub x402: Option<std::path::PathBuf>,
    /// The AP2 closed payment mandate for exactly this payment: a file holding the
    /// presentation as AP2's SDK makes it (<open-sd-jwt>~~<closed>); the verdict then
    /// carries ap2_mandate and ap2_transaction
    #[arg(long = "ap2-closed-mandate", value_name = "FILE")]
    pub ap2_closed_mandate: Option<std::path::PathBuf>,
    /// The ACP delegated payment allowance this is made under: a JSON file holding the
    /// allowance (or the delegate_payment request that carries it, as `mandate verify --acp`
    /// reads it); the amount must be its max_amount, the recipient vendor:<merchant_id>, and
    /// the verdict then carries acp_allowance and acp_checkout_session
    #[arg(long, value_name = "FILE")]
    pub acp: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub post: PostArgs,
}

/// Reads the answer to an authorization (or an approval) as its wire type.
pub fn read_answer(response: &Response) -> Result<Decision<'static>, CliError> {
    response.read("a decision with its verdict token")
}

/// Prints an authorization response (also the fresh decision of an approved review): the
/// server's JSON with `--json`, else the fields that are set.
pub fn print_verdict(response: &Response, as_json: bool) -> Result<Verdict, CliError> {
    let answer = read_answer(response)?;
    if as_json {
        output::json(&response.body)?;
        return Ok(answer.verdict);
    }
    let a = &answer;
    let request = &a.request;
    let opened = a.review.as_ref().and_then(|r| r.review());
    let verdict_of = |v: Verdict| Some(v.as_str().to_owned());
    let fields: [(&str, Option<String>); 16] = [
        ("verdict", verdict_of(a.verdict)),
        (
            "policy_verdict",
            verdict_of(a.policy_verdict).filter(|_| a.policy_verdict != a.verdict),
        ),
        ("reason", a.reason.as_deref().map(str::to_owned)),
        ("decision", Some(a.id.to_string())),
        ("supersedes", a.supersedes.as_ref().map(ToString::to_string)),
        ("mandate", a.mandate.as_ref().map(ToString::to_string)),
        ("mode", Some(a.mode.as_str().to_owned())),
        ("amount", Some(request.amount.to_string())),
        ("currency", Some(request.currency.to_string())),
        ("recipient", Some(request.recipient.to_string())),
        ("category", Some(request.category.to_string())),
        ("review", opened.map(|r| r.id.to_string())),
        (
            "review_expires_at",
            opened.map(|r| output::time(r.expires_at)),
        ),
        ("nonce", Some(a.nonce.to_string())),
        (
            "exp",
            Some(format!("{} ({})", a.exp, super::jwks::unix_to_text(a.exp))),
        ),
        ("verdict_token", a.token().map(str::to_owned)),
    ];
    let pairs: Vec<(String, String)> = fields
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), value?)))
        .collect();
    output::fields(&pairs)?;
    Ok(answer.verdict)
}

/// The text of the file an option names.
fn read_file(path: &std::path::Path, option: &str) -> Result<String, CliError> {
    std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("{option} {}: {e}", path.display())))
}

/// The exit code of a verdict.
pub fn exit_for(verdict: Verdict) -> Exit {
    match verdict {
        Verdict::Allow => Exit::Success,
        Verdict::Review => Exit::Review,
        _ => Exit::Denied,
    }
}

/// ACP's delegate_payment request, read only for the allowance it carries.
#[derive(Deserialize)]
struct DelegatePayment {
    allowance: Option<AcpAllowance>,
}

/// The allowance of an `--acp` file: the allowance itself, or the delegate_payment request
/// that carries it under `allowance`. Read as ACP writes it (its six members, no other);
/// the API judges the values and names what is wrong.
fn acp_allowance(path: &std::path::Path) -> Result<AcpAllowance, CliError> {
    let text = read_file(path, "--acp")?;
    let not_read = |e: serde_json::Error| {
        let what = match e.is_data() {
            true => "not an ACP allowance (or a delegate_payment request carrying one)",
            false => "not JSON",
        };
        CliError::usage(format!("--acp {}: {what}: {e}", path.display()))
    };
    match serde_json::from_str::<DelegatePayment>(&text).map_err(not_read)? {
        DelegatePayment {
            allowance: Some(allowance),
        } => Ok(allowance),
        DelegatePayment { allowance: None } => serde_json::from_str(&text).map_err(not_read),
    }
}

/// Runs `mandate authorize`.
pub fn run(args: AuthorizeArgs, ctx: &Context) -> CmdResult {
    let x402 = match &args.x402 {
        Some(path) => Some(
            serde_json::from_str(&read_file(path, "--x402")?).map_err(|e| {
                CliError::usage(format!("--x402 {}: not JSON: {e}", path.display()))
            })?,
        ),
        None => None,
    };
    let ap2 = match &args.ap2_closed_mandate {
        Some(path) => Some(Ap2Presentation {
            closed_mandate: read_file(path, "--ap2-closed-mandate")?.trim().to_owned(),
        }),
        None => None,
    };
    let acp = match &args.acp {
        Some(path) => Some(AcpPresentation {
            allowance: acp_allowance(path)?,
        }),
        None => None,
    };
    let body = Authorize {
        acp,
        amount: args.amount,
        ap2,
        category: args.category,
        currency: args.currency,
        recipient: args.recipient,
        x402,
    };
    let client = ctx.client()?;
    let response = client.post("/authorizations", &body, &args.post.key()?)?;
    let verdict = print_verdict(&response, ctx.json)?;
    Ok(exit_for(verdict))
}
