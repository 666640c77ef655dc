//! `mandate events list|get`: the event log, newest first, read whole whatever became of
//! its deliveries. Organization keys only.

use clap::builder::PossibleValuesParser;
use clap::{Args, Subcommand};
use mandate_core::EventId;
use mandate_protocol::{delivery::EVENT_TYPES, wire::Event, wire::EventDelivery};

use super::{Context, ListArgs, print_answer, print_list};
use crate::client::Response;
use crate::error::{CliError, CmdResult, Exit};
use crate::output::{self, Column};

/// The columns of an event list. `SUBJECT` is the object the event is about: its `id`, or
/// for a ping the webhook ([`Event::subject`]).
const COLUMNS: &[Column<Event>] = &[
    ("ID", |e| e.id.to_string()),
    ("TYPE", |e| e.event_type.clone()),
    ("SUBJECT", |e| output::opt(e.subject())),
    ("CREATED", |e| output::time(e.created_at)),
];

/// The columns of an event's deliveries.
const DELIVERY_COLUMNS: &[Column<EventDelivery>] = &[
    ("WEBHOOK", |d| d.webhook.to_string()),
    ("STATE", |d| d.state.clone()),
    ("ATTEMPTS", |d| d.attempts.to_string()),
    ("LAST STATUS", |d| output::opt(d.last_status)),
    ("LAST ERROR", |d| output::opt(d.last_error.as_deref())),
    ("LAST ATTEMPT", |d| {
        output::opt(d.last_attempt_at.map(output::time))
    }),
    ("NEXT ATTEMPT", |d| {
        output::opt(d.next_attempt_at.map(output::time))
    }),
];

/// `mandate events …`.
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// List events, newest first (`--type` to filter)
    List(ListEventsArgs),
    /// Show one event with its data and its webhook deliveries
    Get(GetArgs),
}

/// `mandate events list`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate events list --type mandate.revoked
  mandate events list --all --json > events.json")]
pub struct ListEventsArgs {
    /// Only events of this type
    #[arg(
        long = "type",
        value_name = "TYPE",
        value_parser = PossibleValuesParser::new(EVENT_TYPES),
    )]
    pub event_type: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `mandate events get ID`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The event id, evt_…
    pub id: EventId,
}

/// Runs `mandate events …`.
pub fn run(command: EventsCommand, ctx: &Context) -> CmdResult {
    let client = ctx.client()?;
    match command {
        EventsCommand::List(args) => {
            let mut filters = Vec::new();
            if let Some(event_type) = &args.event_type {
                filters.push(("type", event_type.clone()));
            }
            let page =
                client.list::<Event>("/events", &filters, &args.list.paging(), "an event")?;
            print_list(ctx, &page, COLUMNS)?;
        }
        EventsCommand::Get(args) => {
            let response = client.get(&format!("/events/{}", args.id), &[])?;
            print_event(&response, ctx.json)?;
        }
    }
    Ok(Exit::Success)
}

/// Prints an event: the server's JSON with `--json`; else its fields, a blank line and its
/// deliveries as a table (each endpoint's state, attempts, last answer and next attempt).
fn print_event(response: &Response, as_json: bool) -> Result<(), CliError> {
    let event: Event = response.read("an event")?;
    if as_json {
        return output::json(&response.body);
    }
    print_answer(response, false, &["deliveries"])?;
    output::line("")?;
    match event.deliveries.as_deref() {
        Some([]) => output::line("no webhook deliveries: no endpoint was subscribed to its type"),
        Some(deliveries) => output::list_table(DELIVERY_COLUMNS, deliveries),
        // A server from before deliveries were shown.
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn subject(data: &str) -> String {
        let text = format!(
            r#"{{"id": "evt_1", "type": "ping", "created_at": "2026-11-22T12:00:00Z", "data": {data}}}"#
        );
        let event: Event = serde_json::from_str(&text).unwrap();
        let (_, cell) = COLUMNS[2];
        cell(&event)
    }

    #[test]
    fn the_subject_is_the_object_id_or_the_webhook() {
        assert_eq!(subject(r#"{"id": "mnd_1"}"#), "mnd_1");
        assert_eq!(subject(r#"{"webhook": "whk_1"}"#), "whk_1");
        assert_eq!(subject(r#"{"id": 7, "webhook": "whk_2"}"#), "whk_2");
        assert_eq!(subject("3"), "-");
    }
}
