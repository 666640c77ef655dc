//! `mandate webhooks create|list|get|delete|ping`: the endpoints events are POSTed to.
//! Organization keys only.

use clap::builder::PossibleValuesParser;
use clap::{Args, Subcommand};
use mandate_protocol::{
    delivery::EVENT_TYPES, id::WebhookId, wire::CreateWebhook, wire::PingAnswer, wire::Webhook,
};

use super::{Context, ListArgs, PostArgs, print_answer, print_list, print_object};
use crate::error::{CmdResult, Exit};
use crate::output::{self, Column};

/// The columns of a webhook list (a webhook's id is its `webhook` field).
const COLUMNS: &[Column<Webhook>] = &[
    ("ID", |w| w.webhook.to_string()),
    ("URL", |w| w.url.clone()),
    ("EVENTS", |w| output::joined(&w.events)),
    ("STATUS", |w| w.status.clone()),
    ("CREATED", |w| output::time(w.created_at)),
];

/// `mandate webhooks …`.
#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Register an endpoint for some event types
    #[command(long_about = CREATE_LONG_ABOUT)]
    Create(CreateArgs),
    /// List the active endpoints, newest first
    List(ListArgs),
    /// Show one endpoint
    Get(IdArgs),
    /// Delete an endpoint: it reads as 404 afterwards and its pending deliveries stop
    Delete(IdArgs),
    /// Send a `ping` event to one endpoint (delivered within seconds)
    Ping(PingArgs),
}

/// The long help of `CreateArgs`, set on its subcommand.
pub const CREATE_LONG_ABOUT: &str = "Register an endpoint: each event of the chosen types is \
POSTed to it as a signed JWT (Content-Type application/jwt), retried with backoff for 24 \
hours until it answers 2xx.\n\n\
The URL must be https. In the sandbox, http to a loopback host (localhost, 127.0.0.1, \
[::1]) is accepted too, for `mandate listen`. Private, link-local and metadata addresses, \
and names that resolve to them, are refused (exit 1, invalid_request).";

/// `mandate webhooks create --url URL --event TYPE…`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate webhooks create --url https://hooks.example.com/mandate \\
      --event decision.review_pending --event mandate.revoked
  mandate listen --port 9000 --jwks-url https://verdicts.example.com &
  mandate webhooks create --url http://127.0.0.1:9000/ --event ping   # sandbox key")]
pub struct CreateArgs {
    /// Where to POST the events
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// An event type to receive; repeat for several
    #[arg(
        long = "event",
        value_name = "TYPE",
        required = true,
        value_parser = PossibleValuesParser::new(EVENT_TYPES),
    )]
    pub events: Vec<String>,
    #[command(flatten)]
    pub post: PostArgs,
}

/// `mandate webhooks get|delete ID`.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// The webhook id, whk_…
    pub id: WebhookId,
}

/// `mandate webhooks ping ID`.
#[derive(Debug, Args)]
pub struct PingArgs {
    /// The webhook id, whk_…
    pub id: WebhookId,
    #[command(flatten)]
    pub post: PostArgs,
}

/// Runs `mandate webhooks …`.
pub fn run(command: WebhooksCommand, ctx: &Context) -> CmdResult {
    let client = ctx.client()?;
    match command {
        WebhooksCommand::Create(args) => {
            let body = CreateWebhook {
                events: args.events,
                url: args.url,
            };
            let response = client.post("/webhooks", &body, &args.post.key()?)?;
            print_object::<Webhook>(ctx, &response, "a webhook")?;
        }
        WebhooksCommand::List(args) => {
            let page = client.list::<Webhook>("/webhooks", &[], &args.paging(), "a webhook")?;
            print_list(ctx, &page, COLUMNS)?;
        }
        WebhooksCommand::Get(args) => {
            let response = client.get(&format!("/webhooks/{}", args.id), &[])?;
            print_object::<Webhook>(ctx, &response, "a webhook")?;
        }
        WebhooksCommand::Delete(args) => {
            let response = client.delete(&format!("/webhooks/{}", args.id))?;
            print_object::<Webhook>(ctx, &response, "a webhook")?;
        }
        WebhooksCommand::Ping(args) => {
            let path = format!("/webhooks/{}/ping", args.id);
            let response = client.post_empty(&path, &args.post.key()?)?;
            let ping: PingAnswer = response.read("a ping answer")?;
            print_answer(&response, ctx.json, &[])?;
            if !ctx.json {
                output::note(&format!(
                    "the ping is delivered to {} within seconds; read it with `mandate events get {}`",
                    args.id, ping.event
                ));
            }
        }
    }
    Ok(Exit::Success)
}
