//! `mandate escrows create|get|deliver|release|refund|dispute`: escrows funded from an
//! `allow` decision, and their lifecycle. Moving one needs an organization key of the
//! environment that funded it; any valid key that holds the id reads it (a public
//! contract). There is no list of escrows: keep the id `create` prints.

use clap::{Args, Subcommand};
use mandate_core::{AgentId, Amount, Currency, DecisionId, Recipient};
use mandate_protocol::{escrow::HistoryEntry, id::EscrowId, wire::CreateEscrow, wire::Escrow};

use super::{Context, PostArgs, parse_currency, parse_recipient};
use crate::client::Response;
use crate::error::{CliError, CmdResult, Exit};
use crate::output::{self, Column};

/// The members of an escrow the wire type knows: any other member a newer server adds is
/// printed after them. `escrow` (a repeat of `id`) and `history` (its own table) are not
/// printed as `name  value` lines.
const KNOWN: &[&str] = &[
    "id",
    "environment",
    "state",
    "disputed",
    "amount",
    "currency",
    "buyer",
    "seller",
    "decision",
    "arbiter",
    "created_at",
    "escrow",
    "history",
];

/// The columns of the history table.
const HISTORY_COLUMNS: &[Column<HistoryEntry>] = &[
    ("STATE", |h| h.state.to_string()),
    ("DISPUTED", |h| h.disputed.to_string()),
    ("AT", |h| output::time(h.at)),
    ("ACTOR", |h| h.actor.clone()),
];

/// `mandate escrows …`.
#[derive(Debug, Subcommand)]
pub enum EscrowsCommand {
    /// Fund an escrow from an allow decision of the buyer, within its five minutes
    #[command(long_about = CREATE_LONG_ABOUT)]
    Create(CreateArgs),
    /// Show an escrow and its history (any key that holds the id: a public contract)
    Get(IdArgs),
    /// Mark the seller's work delivered: funded -> delivered
    Deliver(ActionArgs),
    /// Pay the locked funds to the seller: delivered (or disputed) -> released, final
    Release(ActionArgs),
    /// Return the locked funds to the buyer: funded or delivered -> refunded, final
    Refund(ActionArgs),
    /// Raise a dispute, once: the state stays, only release or refund can end it
    Dispute(ActionArgs),
}

/// The long help of `CreateArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const CREATE_LONG_ABOUT: &str = "Fund an escrow, with an organization key: the buyer's \
money is locked for the seller until the escrow is released (to the seller) or refunded \
(to the buyer).\n\n\
The escrow is backed by --decision, an allow decision of the buyer (`mandate authorize`) \
for exactly this amount, currency and recipient (--seller), made in the key's environment \
less than 300 seconds ago. The amount is compared as an exact decimal (42.5 matches \
42.50) and sent with its digits as written. Each decision funds at most one escrow: a \
second one is refused (exit 1).\n\n\
Then `escrows deliver ID` marks the seller's work delivered, `escrows release ID` pays the \
seller and `escrows refund ID` returns the money to the buyer (both final); after \
`escrows dispute ID` only release or refund can end it. Each step is appended to the \
history and fires an escrow.* event. Printed: the escrow's fields, then its history as a \
table, oldest step first (--json: the server's object).";

/// `mandate escrows create`.
#[derive(Debug, Args)]
#[command(after_help = "\
Example:
  DEC=$(MANDATE_API_KEY=$AGENT_KEY mandate authorize --amount 42.50 --currency USD \\
      --recipient vendor:acme --category software --json | jq -r .id)
  mandate escrows create --amount 42.50 --currency USD --buyer agt_buyer \\
      --seller vendor:acme --decision \"$DEC\" --arbiter role:legal")]
pub struct CreateArgs {
    /// The amount to lock, the decision's: an exact decimal such as 42.50
    #[arg(long, value_name = "AMOUNT")]
    pub amount: Amount,
    /// The currency, the decision's, e.g. USD
    #[arg(long, value_name = "CODE", value_parser = parse_currency)]
    pub currency: Currency,
    /// The agent whose funds are locked, agt_<name>: the decision's agent
    #[arg(long, value_name = "ID")]
    pub buyer: AgentId,
    /// Who is paid on release, vendor:<name>: the decision's recipient
    #[arg(long, value_name = "RECIPIENT", value_parser = parse_recipient)]
    pub seller: Recipient,
    /// The allow decision that backs the escrow, dec_…
    #[arg(long, value_name = "ID")]
    pub decision: DecisionId,
    /// A party named to settle disputes (1 to 128 characters); stored and returned only
    #[arg(long, value_name = "TEXT")]
    pub arbiter: Option<String>,
    #[command(flatten)]
    pub post: PostArgs,
}

/// `mandate escrows get ID`.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// The escrow id, esc_…
    pub id: EscrowId,
}

/// `mandate escrows deliver|release|refund|dispute ID`.
#[derive(Debug, Args)]
pub struct ActionArgs {
    /// The escrow id, esc_…
    pub id: EscrowId,
    #[command(flatten)]
    pub post: PostArgs,
}

/// The body of `POST /v1/escrows`. The amount goes out as a JSON number with exactly the
/// digits given, never through a float.
fn create_body(args: &CreateArgs) -> CreateEscrow {
    CreateEscrow {
        amount: args.amount,
        arbiter: args.arbiter.clone(),
        buyer: args.buyer.clone(),
        currency: args.currency.clone(),
        decision: args.decision.clone(),
        seller: args.seller.clone(),
    }
}

/// The `name  value` lines of an escrow (`response` is the answer as sent, for the members
/// the type does not know, which follow, flattened).
fn escrow_fields(escrow: &Escrow, response: &Response) -> Vec<(String, String)> {
    let e = escrow;
    let mut pairs: Vec<(String, String)> = [
        ("id", e.id.to_string()),
        ("environment", e.environment.clone()),
        ("state", e.state.to_string()),
        ("disputed", e.disputed.to_string()),
        ("amount", e.amount.to_string()),
        ("currency", e.currency.to_string()),
        ("buyer", e.buyer.to_string()),
        ("seller", e.seller.to_string()),
        ("decision", e.decision.to_string()),
        ("arbiter", output::opt(e.arbiter.as_ref())),
        ("created_at", output::time(e.created_at)),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect();
    if response.body.is_object() {
        pairs.extend(output::flatten(&response.body, KNOWN));
    }
    pairs
}

/// Prints an escrow: the server's JSON with `--json`; else its fields, a blank line and
/// its history as a table, oldest step first.
pub fn print_escrow(response: &Response, as_json: bool) -> Result<(), CliError> {
    let escrow: Escrow = response.read("an escrow")?;
    if as_json {
        return output::json(&response.body);
    }
    output::fields(&escrow_fields(&escrow, response))?;
    output::line("")?;
    output::list_table(HISTORY_COLUMNS, &escrow.history)
}

/// Runs `mandate escrows …`.
pub fn run(command: EscrowsCommand, ctx: &Context) -> CmdResult {
    let client = ctx.client()?;
    let (path, key) = match command {
        EscrowsCommand::Create(args) => {
            let body = create_body(&args);
            let response = client.post("/escrows", &body, &args.post.key()?)?;
            print_escrow(&response, ctx.json)?;
            return Ok(Exit::Success);
        }
        EscrowsCommand::Get(args) => {
            let response = client.get(&format!("/escrows/{}", args.id), &[])?;
            print_escrow(&response, ctx.json)?;
            return Ok(Exit::Success);
        }
        EscrowsCommand::Deliver(args) => (format!("/escrows/{}/deliver", args.id), args.post),
        EscrowsCommand::Release(args) => (format!("/escrows/{}/release", args.id), args.post),
        EscrowsCommand::Refund(args) => (format!("/escrows/{}/refund", args.id), args.post),
        EscrowsCommand::Dispute(args) => (format!("/escrows/{}/dispute", args.id), args.post),
    };
    let response = client.post_empty(&path, &key.key()?)?;
    print_escrow(&response, ctx.json)?;
    Ok(Exit::Success)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn the_amount_keeps_its_digits_and_the_arbiter_is_optional() {
        let args = CreateArgs {
            amount: Amount::parse("42.50").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            buyer: AgentId::parse("agt_buyer").unwrap(),
            seller: Recipient::parse("vendor:acme").unwrap(),
            decision: DecisionId::parse("dec_abc").unwrap(),
            arbiter: None,
            post: PostArgs {
                idempotency_key: None,
            },
        };
        let body = mandate_protocol::wire::to_value(&create_body(&args)).unwrap();
        assert_eq!(body["amount"].to_string(), "42.50");
        assert!(body.get("arbiter").is_none());
        assert_eq!(
            body.to_string(),
            r#"{"amount":42.50,"buyer":"agt_buyer","currency":"USD","decision":"dec_abc","seller":"vendor:acme"}"#
        );
    }

    #[test]
    fn fields_come_in_order_without_the_repeated_id_or_the_history() {
        let body: Value = serde_json::from_str(
            r#"{"id": "esc_1", "escrow": "esc_1", "environment": "sandbox", "amount": 42.50,
                "currency": "USD", "buyer": "agt_buyer", "seller": "vendor:acme",
                "decision": "dec_1", "state": "funded", "disputed": false, "arbiter": null,
                "created_at": "2026-11-22T12:00:00Z",
                "history": [{"state": "funded", "disputed": false,
                             "at": "2026-11-22T12:00:00Z", "actor": "funder"}],
                "extra": {"a": 1}}"#,
        )
        .unwrap();
        let escrow: Escrow = serde_json::from_value(body.clone()).unwrap();
        let response = Response {
            status: 200,
            body,
            cache_control: None,
        };
        let names: Vec<String> = escrow_fields(&escrow, &response)
            .into_iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        assert_eq!(
            names,
            [
                "id=esc_1",
                "environment=sandbox",
                "state=funded",
                "disputed=false",
                "amount=42.50",
                "currency=USD",
                "buyer=agt_buyer",
                "seller=vendor:acme",
                "decision=dec_1",
                "arbiter=-",
                "created_at=2026-11-22T12:00:00Z",
                "extra.a=1"
            ]
        );
    }
}
